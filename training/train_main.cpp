// hgraph-train: trains a model (a zoo classifier, or the byte-level GPT) on a data set (the
// digits, Fashion-MNIST or any IDX directory, a CSV / NumPy table, a text corpus) from a JSON
// config, tests it and exports it as a model package hgraph-serve serves.
//
//   hgraph-train --config training/configs/digits_mlp.json --set trainer.max_epochs=5
//                --set export.dir=/tmp/repo
//   hgraph-train --config training/configs/digits_mlp.json --lr-find   # the lr table and a suggestion
#include <boost/program_options.hpp>
#include <iostream>

#include "engine/error.h"
#include "engine/version.h"
#include "graphs/graph_dump.h"
#include "training/train_config.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  po::options_description desc(
      "Usage: hgraph-train --config FILE [--set key.path=value ...]\n\n"
      "Trains a model on a data set as the config says (Lightning's Trainer): a zoo classifier on the\n"
      "digits, Fashion-MNIST / IDX images or a table, or the byte-level gpt on text. Tests it on the\n"
      "test split and, with export.dir, writes it as a model package for hgraph-serve.\n\n"
      "Options");
  desc.add_options()("help,h", "show this help, with every config key and its default")
      ("version", "print the version")
      ("config", po::value<std::string>(), "the JSON config file (required; see below)")
      ("set", po::value<std::vector<std::string>>()->composing(),
       "override a config value: key.path=value, e.g. trainer.max_epochs=5 or optimizer.name=adamw; "
       "the value is JSON when it parses as JSON, else a string (repeatable, applied in order)")
      ("dump-graph", po::value<std::string>(), "write every compiled graph to FILE (-: stderr)")
      ("lr-find", "run the learning-rate finder (the \"tuner\" section's settings) on the training split, "
                  "print each step's lr and smoothed loss and the suggested lr, and exit without training");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n" << hg::training::train_config_help();
      return 0;
    }
    if (vm.count("version")) {
      std::cout << "hgraph-train " << hg::version() << "\n";
      return 0;
    }
    if (!vm.count("config")) throw po::error("--config FILE is required");
    if (vm.count("dump-graph")) hg::graphs::set_graph_dump(vm["dump-graph"].as<std::string>());
    const std::string file = vm["config"].as<std::string>();
    hg::training::TrainConfig c;
    try {  // every config error is a usage error (status 2)
      nlohmann::json config = hg::training::read_config_file(file);
      if (vm.count("set"))
        for (const auto& s : vm["set"].as<std::vector<std::string>>()) hg::training::apply_override(config, s);
      c = hg::training::parse_train_config(config);
    } catch (const hg::Error& e) {
      const std::string what = e.what();
      std::cerr << "hgraph-train: " << (what.rfind(file, 0) == 0 ? "" : file + ": ") << what << "\n";
      return 2;
    }
    if (vm.count("lr-find"))
      hg::training::run_lr_find(c, std::cout);
    else
      hg::training::run_training(c, std::cout);
  } catch (const po::error& e) {
    std::cerr << "hgraph-train: " << e.what() << "\n(hgraph-train --help lists every option)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hgraph-train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
