// hgraph-convert: an ONNX model to a model package (model.json + weights.safetensors).
//
//   hgraph-convert resnet18.onnx repo/resnet18/1 [--name resnet18] [--dump-graph graph.txt]
//
// Imports the file (models/onnx_import.h), builds the module once to validate it and writes the
// package atomically. --dump-graph FILE (- : stderr) also captures the package at batch 1 and
// writes the compiled graph (nodes, memory plan, passes) to FILE. Exit status 1 with the error
// on stderr when the import fails. `hgraph-convert --list-ops` prints the supported ONNX ops as a
// markdown table (the one in docs/models.md).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "engine/version.h"
#include "graphs/graph_dump.h"
#include "models/module.h"
#include "models/onnx_import.h"
#include "models/onnx_ops.h"
#include "models/predictor.h"

namespace {

constexpr char kUsage[] =
    "usage: hgraph-convert MODEL.onnx OUT_DIR [--name NAME] [--dump-graph FILE]\n"
    "       hgraph-convert --list-ops | --help | --version\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--list-ops") {
    std::fputs(hg::models::supported_onnx_ops_markdown().c_str(), stdout);
    return 0;
  }
  std::vector<std::string> args;
  std::string name, dump_graph;
  bool bad_option = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s\nImports an ONNX file and writes it as a model package (model.json + weights.safetensors)\n"
                  "in OUT_DIR, e.g. repo/resnet18/1.\n"
                  "  --name NAME        the model's name in model.json (default: the file name without .onnx)\n"
                  "  --dump-graph FILE  also capture the package at batch 1 and write its compiled graph to FILE\n"
                  "                     (- : stderr)\n"
                  "  --list-ops         print the supported ONNX ops as a markdown table and exit\n", kUsage);
      return 0;
    }
    if (a == "--version") {
      std::printf("hgraph-convert %s\n", hg::version());
      return 0;
    }
    if ((a == "--name" || a == "--dump-graph") && i + 1 < argc) (a == "--name" ? name : dump_graph) = argv[++i];
    else if (a.starts_with("--")) bad_option = true;
    else args.push_back(a);
  }
  if (bad_option || args.size() != 2) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  try {
    if (!dump_graph.empty()) hg::graphs::set_graph_dump(dump_graph);  // an unwritable FILE fails first
    hg::models::ModelPackage p = hg::models::import_onnx(args[0]);
    if (!name.empty()) p.spec.name = name;
    auto module = hg::models::build_module(p);
    hg::models::save_package(args[1], *module, p.spec);
    std::printf("hgraph-convert: %s -> %s: %zu nodes, %zu weight tensors\n", args[0].c_str(), args[1].c_str(),
                p.spec.graph["nodes"].size(), p.weights.entries.size());
    for (const auto& io : p.spec.inputs) std::printf("  input  %s %s%s\n", io.name.c_str(), io.datatype.c_str(), hg::shape_str(io.shape).c_str());
    for (const auto& io : p.spec.outputs) std::printf("  output %s %s%s\n", io.name.c_str(), io.datatype.c_str(), hg::shape_str(io.shape).c_str());
    if (!dump_graph.empty()) {
      const auto info = hg::models::Predictor::load(args[1], {.batch_buckets = {1}})->capture_all();
      std::printf("  graph at batch 1 dumped to %s (arena %zu B, sum of buffers %zu B)\n", dump_graph.c_str(),
                  info.at(0).arena_bytes, info.at(0).buffer_bytes);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hgraph-convert: %s\n", e.what());
    return 1;
  }
  return 0;
}
