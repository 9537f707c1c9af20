// The "ops" graph of a model package: a dataflow graph of ONNX-semantics nodes run with engine
// ops, made by the ONNX importer (models/onnx_import.h) and rebuilt from model.json.
//
//   hg::models::OpGraph g = hg::models::op_graph_from_json(spec.graph, "pkg/model.json", constant_names);
//   hg::models::OpGraphModule m(g, constants);          // constants become the module's buffers
//   m.to(hg::Device::hpu(0));
//   std::vector<hg::Tensor> out = m.forward_all({ids});  // one tensor per graph output
//
// model.json's graph: {"type": "ops", "inputs": [value names], "outputs": [value names],
//   "nodes": [{"op": "Gemm", "name": "/fc/Gemm", "inputs": ["x", "fc.weight", "fc.bias"],
//              "outputs": ["y"], "attrs": {"transB": 1}}, ...]}
// Node inputs are graph inputs, earlier nodes' outputs or constants (weights.safetensors
// entries, any dtype); "" marks an absent optional input. Shape nodes and the nodes that read
// only shapes and constants are shape arithmetic: they run on the host for the concrete input
// shapes of each call, and their values reach the other nodes as attributes (the host inputs of
// models/onnx_ops.h: Reshape's shape, Slice's starts, ...) or as data. Shape-like inputs known
// at import were folded into attrs; packages imported by earlier versions hold entries
// {"batch": a, "plus": c} there, meaning a * batch + c at run time.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/module.h"
#include "models/package.h"

namespace hg::models {

struct OpNode {
  std::string op, name;
  std::vector<std::string> inputs, outputs;
  nlohmann::json attrs = nlohmann::json::object();
};

struct OpGraph {
  std::vector<std::string> inputs, outputs;
  std::vector<OpNode> nodes;
};

nlohmann::json op_graph_to_json(const OpGraph& g);
// Validates the structure (fields, supported ops, every input defined before its use by a graph
// input, a constant or an earlier node, outputs produced); errors name `file` and the field.
OpGraph op_graph_from_json(const nlohmann::json& j, const std::string& file, const std::set<std::string>& constants);

class OpGraphModule : public Module {
 public:
  OpGraphModule(OpGraph graph, const std::vector<std::pair<std::string, Tensor>>& constants);
  Tensor forward(const Tensor& x) override;  // one input, one output
  // inputs in graph-input order (their dim 0 is the batch); any other dimension may vary
  // between calls as far as the graph allows.
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;
  nlohmann::json spec() const override { return op_graph_to_json(graph_); }
  const OpGraph& graph() const { return graph_; }

 private:
  OpGraph graph_;
  std::vector<char> on_host_;                  // per node: shape arithmetic, run on the host
  std::map<std::string, Tensor> host_consts_;  // cpu copies of the constants those nodes read
};

// The module of a package whose graph type is "ops": its weights are the graph's constants.
std::unique_ptr<OpGraphModule> build_op_graph_module(const ModelPackage& p, Device device = {});

}  // namespace hg::models
