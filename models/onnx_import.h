// ONNX import: an .onnx file (as torch.onnx.export writes it, opsets 11-18, weights inline or in
// external data files) becomes a model package in memory with an "ops" graph.
//
//   hg::models::ModelPackage p = hg::models::import_onnx("bert.onnx");
//   p.spec.inputs[0].shape;                       // {-1, -1}: dynamic batch and sequence -> -1
//   auto net = hg::models::build_module(p);       // an OpGraphModule, like any package's module
//   hg::models::save_package("out/bert/1", *net, p.spec);   // what hgraph-convert does
//
// Import folds what does not depend on the inputs at all (constants and what only they feed).
// The shape arithmetic torch emits (Shape, Gather, Unsqueeze, Concat, Range, Equal, Where,
// Expand, ConstantOfShape, ...) stays in the graph: OpGraphModule evaluates it on the host for
// the concrete input shapes of each call, so any dimension may be dynamic and a value computed
// from a shape may be used as data (a class token expanded to the batch). Nothing is run at
// import but constant folding. Errors (hg::Error) name the file, and for graph problems the
// node, its op type and the opset: an unsupported op, a truncated or corrupt file, a missing
// external data file, a fixed batch dimension, a value a shape needs that depends on the data.
//
// With a disk graph cache configured (HG_GRAPH_CACHE, graphs/disk_cache.h) the imported package
// is stored there too, keyed by the ONNX file's content (hg::hash64 of its bytes and its size),
// and later imports of the same bytes read it instead of importing again (validated like every
// cache entry; an invalid one is removed and the file imported). Models with external data
// files are imported every time.
#pragma once
#include <filesystem>
#include <memory>

#include "models/package.h"

namespace hg::models {

// module (optional): receives the package's built module on `device`, as load_package's does.
ModelPackage import_onnx(const std::filesystem::path& file, std::unique_ptr<Module>* module = nullptr, Device device = {});

}  // namespace hg::models
