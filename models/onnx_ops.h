// ONNX op semantics on engine ops: runs one OpNode (models/op_graph.h). Used by the importer
// to fold constants on the cpu, and by OpGraphModule at run time: shape arithmetic on the host
// for the concrete input shapes, everything else with engine ops that trace into HPU graphs
// like any module's.
//
//   std::vector<hg::Tensor> out = hg::models::run_onnx_node(node, {x, w, b}, /*batch=*/8);
//   for (const HostInput& h : host_inputs("Reshape")) ...   // slot 1 -> attr "shape"
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "models/op_graph.h"

namespace hg::models {

// An input slot whose value the importer reads on the host and stores in attrs[attr] (a flat
// list), attrs[attr + "_shape"] and attrs[attr + "_dtype"]. required: the value must be known at
// import (not computed from the graph inputs' data).
struct HostInput {
  int slot;
  const char* attr;
  bool required;
};
const std::vector<HostInput>& host_inputs(const std::string& op);
// Moves `value` (a host tensor: a constant, or shape arithmetic evaluated for concrete input
// shapes) into n.attrs[h.attr] (+ "_shape", "_dtype") and clears the input slot.
void fold_host_value(OpNode& n, const HostInput& h, const Tensor& value);

// The largest tensor (in elements) a shape read from a file may ask for: sizes from ONNX files
// and model.json are checked against it before anything is allocated.
inline constexpr int64_t kMaxOnnxElements = int64_t{1} << 31;
// The element count of `shape`, or std::nullopt when a dimension is negative or the count
// (overflow-checked) exceeds kMaxOnnxElements.
std::optional<int64_t> capped_numel(const Shape& shape);

bool is_supported_onnx_op(const std::string& op);
// The importer's op registry as a markdown table (op, what is supported, inputs that must be
// known at import), sorted by op: `hgraph-convert --list-ops` prints it and docs/models.md
// holds it, checked equal by a test.
std::string supported_onnx_ops_markdown();
// ONNX TensorProto element type -> DType; throws hg::DTypeError for types the engine lacks.
DType dtype_from_onnx(int64_t onnx_type);
// The reverse (export): DType -> TensorProto element type; throws hg::DTypeError for I16/I8.
int64_t onnx_from_dtype(DType t);

// in[i]: the tensor of input slot i (undefined when absent or folded into attrs). `batch`
// resolves the {"batch": a, "plus": c} attr entries of packages imported before shapes were
// evaluated per concrete signature. Throws hg::Error naming the node on unsupported attributes.
std::vector<Tensor> run_onnx_node(const OpNode& node, const std::vector<Tensor>& in, int64_t batch);

}  // namespace hg::models
