// Internal to module_trace.cpp and trace_ops.cpp: turning one recorded engine op into ONNX
// nodes of an ops graph, with the shapes two recordings (at two sets of dynamic sizes) agree on.
#pragma once
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graphs/ir.h"
#include "models/op_graph.h"

namespace hg::models::trace_detail {

using Json = nlohmann::json;

struct Emitter {
  Emitter(const graphs::Graph& at_example, const graphs::Graph& resized) : a(at_example), b(resized) {}
  const graphs::Graph& a;  // recorded at the example's sizes
  const graphs::Graph& b;  // the same ops at the resized dynamic axes
  std::vector<int> graph_inputs;  // IR nodes of the model's inputs (dimension sources)
  OpGraph g;
  std::vector<std::pair<std::string, Tensor>> constants;  // made while emitting
  std::vector<std::string> names;                          // per IR node: its value in g
  std::map<int, std::string> shapes;                       // IR node -> its Shape node's output
  int cur = -1;                                            // the IR node being emitted
  int made = 0;                                            // for fresh names
  std::set<int> output_nodes;                              // IR nodes the model returns

  const graphs::Node& node() const { return a.nodes[static_cast<size_t>(cur)]; }
  const Attrs& attrs_b() const { return b.nodes[static_cast<size_t>(cur)].attrs; }
  int in_node(size_t k) const { return node().inputs.at(k); }
  const std::string& in(size_t k) const { return names[static_cast<size_t>(in_node(k))]; }
  const Shape& shape_a(int n) const { return a.nodes[static_cast<size_t>(n)].meta.shape; }
  const Shape& shape_b(int n) const { return b.nodes[static_cast<size_t>(n)].meta.shape; }
  const std::string& out() const { return names[static_cast<size_t>(cur)]; }

  [[noreturn]] void fail(const std::string& why) const;
  std::string fresh(const std::string& what);
  // Appends a node; `out_name` empty: a fresh name. Returns its (first) output.
  std::string add(const std::string& op, std::vector<std::string> inputs, Json attrs = Json::object(),
                  std::string out_name = "");
  // e.cur's value is its input 0's (no node), or an Identity when the model returns it.
  void alias();
  std::string constant(const Tensor& t, const std::string& what);
  std::string scalar(double v, DType t, const std::string& what);  // a 0-d constant
  // A 1-D I64 value of one element: dimension `axis` of IR node n, at run time.
  std::string dim_of(int n, int64_t axis);
  // A dimension that is `va` in recording a and `vb` in b, as a 1-D I64 value of one element
  // computed from the shapes of `sources` (then the model's inputs): fails naming `what`.
  std::string dynamic_dim(int64_t va, int64_t vb, const std::vector<int>& sources, const std::string& what);
  // Sets host input `attr` of node n: the static list `va` (folded into attrs, as the importer
  // does) when `dynamic` is all false, else a Concat of constants and dynamic_dim values.
  void set_shape_input(OpNode& n, size_t slot, const char* attr, const std::vector<int64_t>& va,
                       const std::vector<int64_t>& vb, const std::vector<bool>& dynamic, const std::vector<int>& sources);
};

// Static host-input attrs as the importer folds them: attr, attr_shape, attr_dtype.
void fold_ints(Json& attrs, const char* attr, const std::vector<int64_t>& v, bool scalar = false);
void fold_real(Json& attrs, const char* attr, double v, DType t);

// Emits node e.cur (its engine op) as ONNX nodes whose last output is e.out().
void emit_op(Emitter& e);
// The attributes of e.cur's op that may differ between the two recordings (shape-like ones the
// emitter expresses from shapes): true when op `name` handles it.
bool shape_attrs_expressed(const std::string& op);

// trace_check.cpp: `graph` (the traced ops graph over `constants`) against the module on each
// set of inputs (on the module's device); throws InvalidArgument naming the output and element.
void check_traced(Module& m, const OpGraph& graph, const std::vector<std::pair<std::string, Tensor>>& constants,
                  const std::vector<std::vector<Tensor>>& input_sets);
// x repeated along `axis` and cut to `size` there.
Tensor resize_along(const Tensor& x, int64_t axis, int64_t size);

}  // namespace hg::models::trace_detail
