// trace_module (models/module_trace.h): two recordings of forward, compared, then emitted as
// ONNX nodes by trace_ops.cpp.
#include "models/module_trace.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/op.h"
#include "graphs/op_recorder.h"
#include "models/op_graph.h"
#include "models/trace_emit.h"

namespace hg::models {

namespace {

using trace_detail::Emitter;
using Json = nlohmann::json;

std::vector<std::string> default_names(const std::vector<std::string>& given, size_t n, const std::string& stem,
                                       const char* what) {
  if (!given.empty() && given.size() != n)
    throw InvalidArgument(std::string("export: ") + what + " names " + std::to_string(given.size()) + " values, the module has " +
                          std::to_string(n));
  if (!given.empty()) return given;
  if (n == 1) return {stem};
  std::vector<std::string> r;
  for (size_t i = 0; i < n; ++i) r.push_back(stem + "_" + std::to_string(i));
  return r;
}

// What an Input node of a recording is: a model input, a state_dict entry, or a tensor made in forward.
struct Role {
  enum Kind { ModelInput, State, Made } kind;
  size_t index = 0;  // model input index
  std::string name;  // state_dict name
};

bool same_view(const Tensor& x, const Tensor& y) {
  return x.impl() == y.impl() || (x.impl()->storage && x.impl()->storage == y.impl()->storage &&
                                  x.impl()->offset == y.impl()->offset && x.meta() == y.meta() && x.strides() == y.strides());
}

Role role_of(const Tensor& t, const std::vector<Tensor>& inputs, const StateDict& state) {
  for (size_t k = 0; k < inputs.size(); ++k)
    if (t.impl() == inputs[k].impl()) return {Role::ModelInput, k, ""};
  for (const auto& [name, s] : state)
    if (same_view(t, s)) return {Role::State, 0, name};
  return {Role::Made, 0, ""};
}

bool same_bytes(const Tensor& x, const Tensor& y) {
  if (x.meta() != y.meta()) return false;
  const Tensor a = x.to(Device::cpu()).contiguous(), b = y.to(Device::cpu()).contiguous();
  return std::memcmp(a.raw_data(), b.raw_data(), a.meta().bytes()) == 0;
}

// Restores the module's training flag however tracing ends.
struct EvalScope {
  Module& m;
  bool was;
  explicit EvalScope(Module& mod) : m(mod), was(mod.training()) { m.eval(); }
  ~EvalScope() { m.train(was); }
};

graphs::RecordedOps record(Module& m, Device d, const std::vector<Tensor>& inputs) {
  try {
    return graphs::record_ops(d, [&] {
      // Each input enters as a recorded value (a reshape to its own shape, emitted as nothing),
      // so forward's views of it (flatten, reshape) are recorded ops too, not host views.
      std::vector<Tensor> traced;
      for (const Tensor& x : inputs) traced.push_back(dispatch("reshape", {x}, Attrs{x.shape(), {}}));
      return m.forward_all(traced);
    });
  } catch (const Error& e) {
    throw InvalidArgument(std::string("export: tracing the module's forward: ") + e.what());
  }
}

// The two recordings must be the same ops on the same values; only the shape-like attributes the
// emitter expresses from shapes may differ.
void check_same_ops(const graphs::RecordedOps& a, const graphs::RecordedOps& b, const std::vector<Role>& roles,
                    const std::vector<Tensor>& in_b, const StateDict& state) {
  auto differ = [](size_t k, const std::string& what) {
    throw InvalidArgument("export: forward records different ops when the dynamic axes change size (node " +
                          std::to_string(k) + ": " + what +
                          "): it depends on the input's shape in a way a graph cannot express; declare those axes "
                          "static or remove the shape-dependent branch");
  };
  if (a.graph.nodes.size() != b.graph.nodes.size())
    differ(std::min(a.graph.nodes.size(), b.graph.nodes.size()),
           std::to_string(a.graph.nodes.size()) + " vs " + std::to_string(b.graph.nodes.size()) + " nodes");
  for (size_t k = 0; k < a.graph.nodes.size(); ++k) {
    const graphs::Node &x = a.graph.nodes[k], &y = b.graph.nodes[k];
    if (x.kind != y.kind) differ(k, "an input in one recording, an op in the other");
    if (x.kind == graphs::Node::Kind::Input) {
      const Role& r = roles[static_cast<size_t>(x.input_index)];
      const Tensor& tb = b.inputs[static_cast<size_t>(y.input_index)];
      const Role rb = role_of(tb, in_b, state);
      if (rb.kind != r.kind || rb.index != r.index || rb.name != r.name) differ(k, "different tensors are read");
      if (r.kind == Role::Made && !same_bytes(a.inputs[static_cast<size_t>(x.input_index)], tb))
        throw InvalidArgument("export: a tensor made inside forward (node " + std::to_string(k) + ", " +
                              meta_str(x.meta) + " vs " + meta_str(y.meta) +
                              ") changes with the dynamic axes' sizes; make it with ops on the inputs instead");
      continue;
    }
    if (x.op != y.op) differ(k, "op '" + x.op->name + "' vs '" + y.op->name + "'");
    if (x.inputs != y.inputs) differ(k, "op '" + x.op->name + "' reads different values");
    const bool shaped = trace_detail::shape_attrs_expressed(x.op->name);
    if (shaped ? x.attrs.ints.size() != y.attrs.ints.size() || x.attrs.floats != y.attrs.floats : !(x.attrs == y.attrs))
      throw InvalidArgument("export: op '" + x.op->name + "' (node " + std::to_string(k) +
                            ") has attributes that change with the dynamic axes' sizes; the exporter expresses that "
                            "only for reshape, expand and slice. Declare those axes static");
  }
  if (a.graph.outputs != b.graph.outputs) differ(a.graph.nodes.size(), "different outputs");
}

}  // namespace

TracedModel trace_module(Module& m, const std::vector<Tensor>& examples, const TraceOptions& opt) {
  if (examples.empty()) throw InvalidArgument("export: no example inputs");
  const StateDict state = m.state_dict();
  for (const auto& [name, t] : state)
    if (t.is_lazy()) materialize(t);  // pending lazy steps (an optimizer's last update) run first
  Device dev = Device::cpu();
  if (!state.empty()) dev = state.front().second.device();
  const auto in_names = default_names(opt.input_names, examples.size(), "input", "input_names");
  for (const auto& [name, axes] : opt.dynamic_axes)
    if (std::find(in_names.begin(), in_names.end(), name) == in_names.end())
      throw InvalidArgument("export: dynamic_axes names '" + name + "', which is not an input");

  // the symbols, their example sizes and order
  std::vector<std::map<int64_t, std::string>> axes(examples.size());
  std::map<std::string, std::pair<int64_t, int64_t>> sizes;  // symbol -> (example, resized)
  std::map<std::string, int64_t> order;                      // symbol -> 1, 2, ...
  std::vector<Tensor> in_a;
  for (size_t k = 0; k < examples.size(); ++k) {
    const Tensor& x = examples[k];
    if (!x.defined()) throw InvalidArgument("export: example input " + std::to_string(k) + " is undefined");
    auto it = opt.dynamic_axes.find(in_names[k]);
    axes[k] = it != opt.dynamic_axes.end() ? it->second : std::map<int64_t, std::string>{{0, "batch"}};
    for (const auto& [axis, sym] : axes[k]) {
      if (axis < 0 || axis >= x.ndim())
        throw InvalidArgument("export: dynamic axis " + std::to_string(axis) + " of input '" + in_names[k] + "' (" +
                              shape_str(x.shape()) + ") is out of range");
      const int64_t s = x.shape()[static_cast<size_t>(axis)];
      auto [e, fresh] = sizes.try_emplace(sym, s, 0);
      if (fresh) order[sym] = static_cast<int64_t>(order.size()) + 1;
      else if (e->second.first != s)
        throw InvalidArgument("export: dynamic axis '" + sym + "' is " + std::to_string(e->second.first) + " in one input and " +
                              std::to_string(s) + " in input '" + in_names[k] + "'");
    }
    in_a.push_back(x.to(dev).contiguous());
  }
  // The second recording's inputs: every dynamic axis grown (or, when forward refuses that - a
  // sequence at its maximum length - shrunk) by a different amount per symbol. All move the same
  // way, so a product of dynamic sizes (batch * seq) never keeps its value by accident.
  auto resized = [&](bool grow) {
    std::vector<Tensor> r;
    for (auto& [sym, s] : sizes) s.second = grow ? s.first + order[sym] : s.first - order[sym];
    for (size_t k = 0; k < examples.size(); ++k) {
      Shape sb = examples[k].shape();
      for (const auto& [axis, sym] : axes[k]) sb[static_cast<size_t>(axis)] = sizes[sym].second;
      for (int64_t d : sb)
        if (d < 1) return std::vector<Tensor>{};
      r.push_back(Tensor::zeros(sb, examples[k].dtype(), dev));
    }
    return r;
  };

  graphs::RecordedOps ra, rb;
  std::vector<Tensor> in_b;
  {
    EvalScope eval(m);
    NoGradGuard no_grad;
    ra = record(m, dev, in_a);
    in_b = resized(true);
    try {
      rb = record(m, dev, in_b);
    } catch (const InvalidArgument&) {
      in_b = resized(false);
      if (in_b.empty()) throw;
      rb = record(m, dev, in_b);
    }
  }
  const auto out_names = default_names(opt.output_names, ra.graph.outputs.size(), "output", "output_names");
  std::vector<Role> roles;
  for (const Tensor& t : ra.inputs) roles.push_back(role_of(t, in_a, state));
  check_same_ops(ra, rb, roles, in_b, state);

  TracedModel r;
  Emitter e(ra.graph, rb.graph);
  e.names.resize(ra.graph.nodes.size());
  std::set<std::string> used_state;
  for (size_t k = 0; k < ra.graph.nodes.size(); ++k) {
    const graphs::Node& n = ra.graph.nodes[k];
    if (n.kind != graphs::Node::Kind::Input) continue;
    const Role& role = roles[static_cast<size_t>(n.input_index)];
    if (role.kind == Role::ModelInput) {
      e.names[k] = in_names[role.index];
      e.graph_inputs.push_back(static_cast<int>(k));
    } else if (role.kind == Role::State) {
      e.names[k] = role.name;
      used_state.insert(role.name);
    } else {
      e.names[k] = "/constant_" + std::to_string(k);
      e.constants.emplace_back(e.names[k], ra.inputs[static_cast<size_t>(n.input_index)].to(Device::cpu()).contiguous().clone());
    }
  }
  for (const auto& name : in_names)
    if (std::any_of(state.begin(), state.end(), [&](const auto& s) { return s.first == name; }))
      throw InvalidArgument("export: input name '" + name + "' is also a parameter's name");
  std::map<int, std::string> primary;  // op node -> the output it is emitted as
  for (size_t k = 0; k < out_names.size(); ++k) {
    const int n = ra.graph.outputs[k];
    if (ra.graph.nodes[static_cast<size_t>(n)].kind == graphs::Node::Kind::Op) primary.try_emplace(n, out_names[k]);
    e.output_nodes.insert(n);
  }
  for (size_t k = 0; k < ra.graph.nodes.size(); ++k) {
    const graphs::Node& n = ra.graph.nodes[k];
    if (n.kind != graphs::Node::Kind::Op) continue;
    e.cur = static_cast<int>(k);
    auto p = primary.find(e.cur);
    e.names[k] = p != primary.end() ? p->second : "/" + n.op->name + "_" + std::to_string(k);
    trace_detail::emit_op(e);
  }
  for (size_t k = 0; k < out_names.size(); ++k) {  // outputs that are inputs, constants or repeats
    const int n = ra.graph.outputs[k];
    if (e.names[static_cast<size_t>(n)] == out_names[k]) continue;
    e.cur = n;
    e.add("Identity", {e.names[static_cast<size_t>(n)]}, Json::object(), out_names[k]);
  }
  e.g.inputs = in_names;
  e.g.outputs = out_names;

  // inputs and outputs: dynamic dimensions -1, named by their symbol
  bool batched = true;
  for (size_t k = 0; k < examples.size(); ++k) {
    IOSpec io{in_names[k], kserve_datatype(examples[k].dtype()), examples[k].shape()};
    std::vector<std::string> dims(io.shape.size());
    for (const auto& [axis, sym] : axes[k]) io.shape[static_cast<size_t>(axis)] = -1, dims[static_cast<size_t>(axis)] = sym;
    batched &= !dims.empty() && dims[0] == "batch";
    r.dim_names[io.name] = dims;
    r.spec.inputs.push_back(std::move(io));
  }
  for (size_t k = 0; k < out_names.size(); ++k) {
    const int n = ra.graph.outputs[k];
    const TensorMeta& meta = ra.graph.nodes[static_cast<size_t>(n)].meta;
    const Shape& sb = rb.graph.nodes[static_cast<size_t>(n)].meta.shape;
    IOSpec io{out_names[k], kserve_datatype(meta.dtype), meta.shape};
    std::vector<std::string> dims(io.shape.size());
    for (size_t d = 0; d < io.shape.size(); ++d) {
      if (io.shape[d] == sb[d]) continue;
      dims[d] = out_names[k] + "_dim" + std::to_string(d);
      for (const auto& [sym, s] : sizes)
        if (s.first == io.shape[d] && s.second == sb[d]) dims[d] = sym;
      io.shape[d] = -1;
    }
    if (batched && (dims.empty() || dims[0] != "batch"))
      throw InvalidArgument("export: output '" + out_names[k] + "' " + shape_str(meta.shape) +
                            " does not have the batch as its dimension 0 (every input has); its rows must follow the "
                            "input's rows for the server to batch requests");
    r.dim_names[io.name] = dims;
    r.spec.outputs.push_back(std::move(io));
  }
  r.spec.batched = batched;
  r.spec.graph = op_graph_to_json(e.g);
  for (const auto& [name, t] : state)
    if (used_state.count(name)) r.constants.emplace_back(name, t.to(Device::cpu()));
  for (auto& c : e.constants) r.constants.push_back(std::move(c));
  std::set<std::string> names;
  for (const auto& [name, t] : r.constants) names.insert(name);
  op_graph_from_json(r.spec.graph, "the traced graph", names);  // the structure is valid
  if (opt.check) {
    std::vector<Tensor> other;  // the example's values at the second recording's sizes
    for (size_t k = 0; k < examples.size(); ++k) {
      Tensor x = in_a[k];
      for (const auto& [axis, sym] : axes[k]) x = trace_detail::resize_along(x, axis, sizes[sym].second);
      other.push_back(x);
    }
    trace_detail::check_traced(m, e.g, r.constants, {in_a, other});
  }
  return r;
}

}  // namespace hg::models
