// ONNX export: an "ops" graph (models/op_graph.h; what models/module_trace.h traces, or what
// the importer made) and its constants written as an ONNX model: opset 17, IR version 8, the
// weights as initializers, dynamic dimensions as named dim_params.
//
//   hg::models::TracedModel t = hg::models::trace_module(net, {x});
//   hg::models::write_onnx("out/model.onnx", t.spec, t.constants, {.dim_names = t.dim_names});
//   // python3 -c "import onnx; onnx.checker.check_model(onnx.load('out/model.onnx'), full_check=True)"
//   hg::models::import_onnx("out/model.onnx");   // reads it back
//
// The shape-like inputs an ops graph folds into attributes (Reshape's shape, Slice's starts, ...)
// become initializers again (ReduceMean/ReduceMax's axes stay attributes, as opset 17 has them);
// Mul/Div by an importer's folded scalar become a scalar initializer; Gelu (an opset 20 op) is
// written as Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5) (or the tanh form), with FP32
// constants, the chain the importer fuses back into one Gelu. The file is written
// atomically (engine/atomic_file.h). Errors (hg::InvalidArgument) name the node and what has no
// opset 17 form: an op before opset 13's Softmax semantics ("coerce_2d"), a {"batch": a, "plus": c}
// entry of an old package, a graph that is not of type "ops".
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "models/module.h"
#include "models/package.h"

namespace hg::models {

inline constexpr int64_t kOnnxExportOpset = 17;
inline constexpr int64_t kOnnxExportIrVersion = 8;

struct OnnxExportOptions {
  // Per input/output name: per axis the dim_param of a dynamic (-1) dimension. Absent: "batch"
  // for dimension 0 of a batched spec, else "<name>_dim<axis>".
  std::map<std::string, std::vector<std::string>> dim_names = {};
};

// The serialized ModelProto.
std::string onnx_model_bytes(const PackageSpec& spec, const StateDict& constants, const OnnxExportOptions& opt = {});
void write_onnx(const std::filesystem::path& file, const PackageSpec& spec, const StateDict& constants,
                const OnnxExportOptions& opt = {});

}  // namespace hg::models
