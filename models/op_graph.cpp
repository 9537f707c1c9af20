#include "models/op_graph.h"

#include <map>

#include "engine/error.h"
#include "models/config_fields.h"
#include "models/onnx_ops.h"
#include "models/state_dict.h"

namespace hg::models {

namespace {

using Json = nlohmann::json;

std::vector<std::string> names(const Json& j, const char* key, const std::string& file, const std::string& where,
                               bool allow_empty) {
  const std::string field = where + "." + key;
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) bad_field(file, field, "is missing or not a list");
  std::vector<std::string> r;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& e = (*it)[i];
    if (!e.is_string() || (!allow_empty && e.get<std::string>().empty()))
      bad_field(file, field + "[" + std::to_string(i) + "]", "is not a value name");
    r.push_back(e.get<std::string>());
  }
  return r;
}

}  // namespace

Json op_graph_to_json(const OpGraph& g) {
  Json nodes = Json::array();
  for (const auto& n : g.nodes)
    nodes.push_back({{"op", n.op}, {"name", n.name}, {"inputs", n.inputs}, {"outputs", n.outputs}, {"attrs", n.attrs}});
  return {{"type", "ops"}, {"inputs", g.inputs}, {"outputs", g.outputs}, {"nodes", nodes}};
}

OpGraph op_graph_from_json(const Json& j, const std::string& file, const std::set<std::string>& constants) {
  OpGraph g;
  g.inputs = names(j, "inputs", file, "graph", false);
  g.outputs = names(j, "outputs", file, "graph", false);
  std::set<std::string> defined(constants);
  for (const auto& i : g.inputs)
    if (!defined.insert(i).second) bad_field(file, "graph.inputs", "repeats or shadows a constant: '" + i + "'");
  auto nodes = j.find("nodes");
  if (nodes == j.end() || !nodes->is_array()) bad_field(file, "graph.nodes", "is missing or not a list");
  for (size_t k = 0; k < nodes->size(); ++k) {
    const std::string where = "graph.nodes[" + std::to_string(k) + "]";
    const Json& nj = (*nodes)[k];
    if (!nj.is_object()) bad_field(file, where, "is not an object");
    OpNode n;
    if (!nj.value("op", Json()).is_string()) bad_field(file, where + ".op", "is missing or not a string");
    if (!nj.value("name", Json()).is_string()) bad_field(file, where + ".name", "is missing or not a string");
    n.op = nj["op"].get<std::string>();
    n.name = nj["name"].get<std::string>();
    if (!is_supported_onnx_op(n.op)) bad_field(file, where + ".op", "names an unsupported op '" + n.op + "'");
    n.inputs = names(nj, "inputs", file, where, true);
    n.outputs = names(nj, "outputs", file, where, false);
    if (nj.contains("attrs")) {
      if (!nj["attrs"].is_object()) bad_field(file, where + ".attrs", "is not an object");
      n.attrs = nj["attrs"];
    }
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty() && !defined.count(n.inputs[i]))
        bad_field(file, where + ".inputs[" + std::to_string(i) + "]", "names '" + n.inputs[i] + "', defined by no earlier node");
    for (const auto& o : n.outputs)
      if (!defined.insert(o).second) bad_field(file, where + ".outputs", "redefines '" + o + "'");
    g.nodes.push_back(std::move(n));
  }
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (!defined.count(g.outputs[i]))
      bad_field(file, "graph.outputs[" + std::to_string(i) + "]", "names '" + g.outputs[i] + "', produced by no node");
  return g;
}

// A node is shape arithmetic when it is Shape or reads only constants and shape arithmetic.
OpGraphModule::OpGraphModule(OpGraph graph, const std::vector<std::pair<std::string, Tensor>>& constants)
    : graph_(std::move(graph)) {
  std::map<std::string, const Tensor*> consts;
  for (const auto& [name, t] : constants) {
    register_buffer(name, t);
    consts[name] = &t;
  }
  std::set<std::string> data(graph_.inputs.begin(), graph_.inputs.end());
  for (const OpNode& n : graph_.nodes) {
    bool reads_data = false;
    for (const auto& i : n.inputs) reads_data |= data.count(i) != 0;
    const bool host = n.op == "Shape" || !reads_data;
    on_host_.push_back(host);
    for (const auto& o : n.outputs)
      if (!host) data.insert(o);
    if (!host || n.op == "Shape") continue;
    for (const auto& i : n.inputs)
      if (auto c = consts.find(i); c != consts.end() && !host_consts_.count(i)) host_consts_[i] = c->second->to(Device::cpu());
  }
}

Tensor OpGraphModule::forward(const Tensor& x) {
  if (graph_.outputs.size() != 1) throw InvalidArgument("OpGraphModule::forward: the graph has several outputs");
  return forward_all({x})[0];
}

std::vector<Tensor> OpGraphModule::forward_all(const std::vector<Tensor>& inputs) {
  if (inputs.size() != graph_.inputs.size())
    throw InvalidArgument("OpGraphModule: the graph takes " + std::to_string(graph_.inputs.size()) + " inputs, got " +
                          std::to_string(inputs.size()));
  if (inputs.empty() || inputs[0].ndim() == 0) throw InvalidArgument("OpGraphModule: the inputs need a batch dimension");
  const int64_t batch = inputs[0].shape()[0];
  const Device device = inputs[0].device();
  std::map<std::string, Tensor> env, host = host_consts_;  // device values; host values (cpu)
  for (auto& [name, t] : named_buffers()) env[name] = *t;
  for (size_t i = 0; i < inputs.size(); ++i) env[graph_.inputs[i]] = inputs[i];
  for (size_t k = 0; k < graph_.nodes.size(); ++k) {
    const OpNode* n = &graph_.nodes[k];
    OpNode folded;  // with the host values its attributes need (Reshape's shape, ...)
    for (const HostInput& h : host_inputs(n->op)) {
      if (h.slot >= static_cast<int>(n->inputs.size())) continue;
      auto v = host.find(n->inputs[h.slot]);
      if (v == host.end()) continue;
      if (n != &folded) folded = *n, n = &folded;
      fold_host_value(folded, h, v->second);
    }
    std::vector<Tensor> in;
    for (const auto& name : n->inputs) {
      if (name.empty()) {
        in.emplace_back();
      } else if (auto v = host.find(name); v != host.end()) {
        in.push_back(on_host_[k] ? v->second : v->second.to(device));  // a shape-made value used as data
      } else {
        in.push_back(env.at(name));  // on the host only as Shape's input: its shape is read
      }
    }
    std::vector<Tensor> out = run_onnx_node(*n, in, batch);
    for (size_t o = 0; o < out.size(); ++o) (on_host_[k] ? host : env)[n->outputs[o]] = std::move(out[o]);
  }
  std::vector<Tensor> r;
  for (const auto& o : graph_.outputs) r.push_back(env.count(o) ? env.at(o) : host.at(o).to(device));
  return r;
}

std::unique_ptr<OpGraphModule> build_op_graph_module(const ModelPackage& p, Device device) {
  const std::string file = (p.dir / "model.json").string();
  const auto tensors = tensors_from(p.weights, (p.dir / "weights.safetensors").string(), device);
  std::set<std::string> names;
  std::vector<std::pair<std::string, Tensor>> constants;
  for (const auto& [name, t] : tensors) {
    names.insert(name);
    constants.emplace_back(name, t);
  }
  OpGraph g = op_graph_from_json(p.spec.graph, file, names);
  if (g.inputs.size() != p.spec.inputs.size() || g.outputs.size() != p.spec.outputs.size())
    bad_field(file, "graph", "has " + std::to_string(g.inputs.size()) + " inputs and " + std::to_string(g.outputs.size()) +
                           " outputs; the package declares " + std::to_string(p.spec.inputs.size()) + " and " +
                           std::to_string(p.spec.outputs.size()));
  return std::make_unique<OpGraphModule>(std::move(g), constants);
}

}  // namespace hg::models
