// ONNX import: an .onnx file (as torch.onnx.export writes it, opsets 13-18, weights inline or in
// external data files) becomes a model package in memory with an "ops" graph.
//
//   hg::models::ModelPackage p = hg::models::import_onnx("resnet18.onnx");
//   p.spec.inputs[0].shape;                       // {-1, 3, 224, 224}: dynamic batch -> -1
//   auto net = hg::models::build_module(p);       // an OpGraphModule, like any package's module
//   hg::models::save_package("out/resnet18/1", *net, p.spec);   // what hgraph-convert does
//
// Import folds everything that does not depend on the inputs' data at import time: constants,
// and the shape arithmetic torch emits (Shape, Gather, Unsqueeze, Concat, Range, Equal, Where,
// Expand, ...). To tell batch-dependent shape values from constant ones it runs the graph on
// the cpu at two probe batch sizes; values that differ become {"batch": a, "plus": c} entries
// of the node attributes (e.g. Reshape's target shape), so the imported graph is static apart
// from the batch. Errors (hg::Error) name the file, and for graph problems the node, its op
// type and the opset: an unsupported op, a truncated or corrupt file, a missing external
// data file, an input whose non-batch dimension is dynamic.
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
