// hgraph-convert: an ONNX model to a model package (model.json + weights.safetensors).
//
//   hgraph-convert resnet18.onnx repo/resnet18/1 [--name resnet18]
//
// Imports the file (models/onnx_import.h), builds the module once to validate it and writes the
// package atomically. Exit status 1 with the error on stderr when the import fails.
#include <cstdio>
#include <exception>
#include <string>

#include "models/module.h"
#include "models/onnx_import.h"

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--name")) {
    std::fprintf(stderr, "usage: hgraph-convert MODEL.onnx OUT_DIR [--name NAME]\n");
    return 2;
  }
  try {
    hg::models::ModelPackage p = hg::models::import_onnx(argv[1]);
    if (argc == 5) p.spec.name = argv[4];
    auto module = hg::models::build_module(p);
    hg::models::save_package(argv[2], *module, p.spec);
    std::printf("hgraph-convert: %s -> %s: %zu nodes, %zu weight tensors\n", argv[1], argv[2],
                p.spec.graph["nodes"].size(), p.weights.entries.size());
    for (const auto& io : p.spec.inputs) std::printf("  input  %s %s%s\n", io.name.c_str(), io.datatype.c_str(), hg::shape_str(io.shape).c_str());
    for (const auto& io : p.spec.outputs) std::printf("  output %s %s%s\n", io.name.c_str(), io.datatype.c_str(), hg::shape_str(io.shape).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hgraph-convert: %s\n", e.what());
    return 1;
  }
  return 0;
}
