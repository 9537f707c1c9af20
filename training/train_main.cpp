// hgraph-train: trains the digits MLP and exports it as a model package.
//
//   hgraph-train --data models/data/digits.safetensors --epochs 40 --export /tmp/repo/digits_mlp/1
#include <boost/program_options.hpp>
#include <iostream>

#include "engine/error.h"
#include "graphs/graph_dump.h"
#include "models/zoo.h"
#include "training/trainer.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  po::options_description desc("hgraph-train options");
  desc.add_options()("help,h", "show this help")
      ("data", po::value<std::string>()->default_value(HG_DEFAULT_DIGITS), "digits safetensors file")
      ("accelerator", po::value<std::string>()->default_value("hpu"), "hpu or cpu")
      ("devices", po::value<int>()->default_value(1), "number of devices (1)")
      ("epochs", po::value<int>()->default_value(40), "max epochs")
      ("batch-size", po::value<int64_t>()->default_value(32), "batch size")
      ("hidden", po::value<int64_t>()->default_value(64), "hidden width")
      ("lr", po::value<double>()->default_value(0.05), "learning rate")
      ("momentum", po::value<double>()->default_value(0.9), "SGD momentum")
      ("seed", po::value<uint64_t>()->default_value(0), "seed for init, split and shuffling")
      ("checkpoint", po::value<std::string>(), "write a checkpoint here at the end")
      ("resume", po::value<std::string>(), "resume from this checkpoint")
      ("export", po::value<std::string>(), "write the model package to this directory")
      ("no-progress", "no progress bar")
      ("dump-graph", po::value<std::string>(), "write every compiled graph (nodes, memory plan, passes) to FILE (- : stderr)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    if (vm.count("dump-graph")) hg::graphs::set_graph_dump(vm["dump-graph"].as<std::string>());
    namespace tr = hg::training;
    const uint64_t seed = vm["seed"].as<uint64_t>();
    auto [train, test] = tr::split(tr::load_digits(vm["data"].as<std::string>()), 0.2, seed);
    tr::DataLoader train_loader(train, vm["batch-size"].as<int64_t>(), true, seed);
    tr::DataLoader test_loader(test, 256, false, seed);
    auto net = hg::models::zoo::mlp({train.width, vm["hidden"].as<int64_t>(), train.num_classes}, seed);
    tr::SGD opt(net->named_parameters(), {.lr = vm["lr"].as<double>(), .momentum = vm["momentum"].as<double>()});
    tr::Trainer trainer({.accelerator = vm["accelerator"].as<std::string>(),
                         .devices = vm["devices"].as<int>(),
                         .max_epochs = vm["epochs"].as<int>(),
                         .enable_progress_bar = !vm.count("no-progress")});
    if (vm.count("resume")) trainer.load_checkpoint(vm["resume"].as<std::string>(), *net, opt);
    std::cout << "training on " << trainer.device().str() << ": " << train.size() << " train / " << test.size()
              << " held-out samples\n";
    tr::FitResult fit = trainer.fit(*net, opt, train_loader, &test_loader);
    const tr::EvalResult e = trainer.validate(*net, test_loader);
    std::cout << "held-out accuracy " << e.accuracy << " (" << test.size() << " samples)\n";
    if (vm.count("checkpoint")) trainer.save_checkpoint(vm["checkpoint"].as<std::string>(), *net, opt);
    if (vm.count("export")) {
      nlohmann::json meta = fit.metadata();
      meta["val_accuracy"] = e.accuracy;
      meta["dataset"] = "scikit-learn digits (8x8), 20% held out, seed " + std::to_string(seed);
      tr::export_classifier(*net, vm["export"].as<std::string>(), "digits_mlp", train.width, train.num_classes, meta);
      std::cout << "exported to " << vm["export"].as<std::string>() << "\n";
    }
  } catch (const po::error& e) {
    std::cerr << "hgraph-train: " << e.what() << "\n" << desc << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hgraph-train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
