#include "models/onnx_export.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <set>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "engine/version.h"
#include "models/onnx_ops.h"
#include "models/op_graph.h"

namespace hg::models {

namespace {

using Json = nlohmann::json;

[[noreturn]] void node_fail(const OpNode& n, const std::string& why) {
  throw InvalidArgument("ONNX export: node '" + n.name + "' (op " + n.op + "): " + why);
}

void set_tensor(onnx::TensorProto& p, const std::string& name, const Tensor& value) {
  const Tensor t = value.to(Device::cpu()).contiguous();
  p.set_name(name);
  p.set_data_type(static_cast<int32_t>(onnx_from_dtype(t.dtype())));
  for (int64_t d : t.shape()) p.add_dims(d);
  p.set_raw_data(std::string(static_cast<const char*>(t.raw_data()), t.meta().bytes()));
}

// A folded host input (attrs[attr], attr_shape, attr_dtype) as a tensor.
Tensor folded_tensor(const OpNode& n, const std::string& attr) {
  const Json& v = n.attrs.at(attr);
  if (!v.is_array()) node_fail(n, "attribute '" + attr + "' is not a list");
  const Json shape = n.attrs.value(attr + "_shape", Json::array({static_cast<int64_t>(v.size())}));
  const DType t = dtype_from_name(n.attrs.value(attr + "_dtype", std::string("I64")));
  std::vector<double> reals;
  std::vector<int64_t> ints;
  for (const Json& e : v) {
    if (!e.is_number()) node_fail(n, "attribute '" + attr + "' holds " + e.dump() + " (an old package's batch-relative "
                                  "entry has no ONNX form; re-export the model)");
    reals.push_back(e.get<double>());
    ints.push_back(e.is_number_integer() ? e.get<int64_t>() : static_cast<int64_t>(e.get<double>()));
  }
  const Shape s = shape.get<Shape>();
  if (is_floating(t)) {
    Tensor r = Tensor::empty(s, DType::F64, Device::cpu());
    if (r.numel() != static_cast<int64_t>(reals.size())) node_fail(n, "attribute '" + attr + "' does not fill its shape");
    std::memcpy(r.raw_data(), reals.data(), reals.size() * sizeof(double));
    return r.to(t);
  }
  return Tensor::from_indices(ints, s).to(t);
}

bool axes_is_attribute(const std::string& op) { return op == "ReduceMean" || op == "ReduceMax"; }  // before opset 18

void set_attribute(onnx::AttributeProto& a, const OpNode& n, const std::string& key, const Json& v) {
  a.set_name(key);
  if (v.is_number_integer() || v.is_boolean()) {
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(v.is_boolean() ? v.get<bool>() : v.get<int64_t>());
  } else if (v.is_number()) {
    a.set_type(onnx::AttributeProto::FLOAT);
    a.set_f(v.get<float>());
  } else if (v.is_string()) {
    a.set_type(onnx::AttributeProto::STRING);
    a.set_s(v.get<std::string>());
  } else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& e) { return e.is_number_integer(); })) {
    a.set_type(onnx::AttributeProto::INTS);
    for (const Json& e : v) a.add_ints(e.get<int64_t>());
  } else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& e) { return e.is_number(); })) {
    a.set_type(onnx::AttributeProto::FLOATS);
    for (const Json& e : v) a.add_floats(e.get<float>());
  } else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& e) { return e.is_string(); })) {
    a.set_type(onnx::AttributeProto::STRINGS);
    for (const Json& e : v) a.add_strings(e.get<std::string>());
  } else if (v.is_object() && v.contains("dtype") && v.contains("data")) {  // ConstantOfShape's value
    OpNode one = n;
    one.attrs = {{"v", v["data"]}, {"v_shape", {v["data"].size()}}, {"v_dtype", v["dtype"]}};
    a.set_type(onnx::AttributeProto::TENSOR);
    set_tensor(*a.mutable_t(), "", folded_tensor(one, "v"));
  } else {
    node_fail(n, "attribute '" + key + "' = " + v.dump() + " has no ONNX form");
  }
}

void add_node(onnx::GraphProto& g, OpNode n);

// Gelu is an op from opset 20: written as the decomposition exporters emit before it (the erf
// form is what the importer fuses back into one Gelu). The constants are FP32.
void lower_gelu(onnx::GraphProto& g, const OpNode& n) {
  const std::string approximate = n.attrs.value("approximate", std::string("none"));
  if (approximate != "none" && approximate != "tanh") node_fail(n, "approximate '" + approximate + "' is not none or tanh");
  if (n.inputs.size() != 1 || n.outputs.size() != 1) node_fail(n, "needs one input and one output");
  int k = 0;
  auto c = [&](double v) {
    const std::string name = n.name + "/c" + std::to_string(k++);
    set_tensor(*g.add_initializer(), name, Tensor::full({}, static_cast<float>(v)));
    return name;
  };
  auto node = [&](const char* op, std::vector<std::string> in, std::string out = "") {
    if (out.empty()) out = n.name + "/" + op + "_" + std::to_string(k++);
    add_node(g, OpNode{op, n.name + "/" + op + "_" + std::to_string(k++), std::move(in), {out}});
    return out;
  };
  const std::string& x = n.inputs[0];
  std::string inner;
  if (approximate == "none") {  // 0.5 x (1 + erf(x / sqrt 2))
    inner = node("Erf", {node("Div", {x, c(std::sqrt(2.0))})});
  } else {  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    const std::string cube = node("Pow", {x, c(3.0)});
    inner = node("Tanh", {node("Mul", {node("Add", {x, node("Mul", {cube, c(0.044715)})}), c(std::sqrt(2.0 / M_PI))})});
  }
  node("Mul", {node("Mul", {x, node("Add", {inner, c(1.0)})}), c(0.5)}, n.outputs[0]);
}

void add_node(onnx::GraphProto& g, OpNode n) {
  if (n.op == "Gelu") return lower_gelu(g, n);
  if (n.attrs.contains("coerce_2d")) node_fail(n, "uses opset < 13 Softmax semantics, which opset 17 cannot express");
  if (n.attrs.contains("scalar")) {  // the importer's Mul/Div by a constant scalar
    if (n.inputs.size() < 2) n.inputs.resize(2);
    n.attrs["b"] = Json::array({n.attrs["scalar"]});
    n.attrs["b_shape"] = Json::array();
    n.attrs["b_dtype"] = "F32";
    n.attrs.erase("scalar");
    const Tensor b = folded_tensor(n, "b");
    n.inputs[1] = n.name + "/scalar";
    set_tensor(*g.add_initializer(), n.inputs[1], b);
    for (const char* k : {"b", "b_shape", "b_dtype"}) n.attrs.erase(k);
  }
  for (const HostInput& h : host_inputs(n.op)) {
    const std::string attr = h.attr;
    if (!n.attrs.contains(attr)) continue;
    if (axes_is_attribute(n.op) && attr == "axes") {
      n.attrs.erase(attr + "_shape"), n.attrs.erase(attr + "_dtype");
      continue;
    }
    const std::string name = n.name + "/" + attr;
    set_tensor(*g.add_initializer(), name, folded_tensor(n, attr));
    if (n.inputs.size() <= static_cast<size_t>(h.slot)) n.inputs.resize(static_cast<size_t>(h.slot) + 1);
    n.inputs[static_cast<size_t>(h.slot)] = name;
    for (const std::string& k : {attr, attr + "_shape", attr + "_dtype"}) n.attrs.erase(k);
  }
  while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
  onnx::NodeProto& p = *g.add_node();
  p.set_op_type(n.op);
  p.set_name(n.name);
  for (const auto& i : n.inputs) p.add_input(i);
  for (const auto& o : n.outputs) p.add_output(o);
  for (const auto& [k, v] : n.attrs.items()) set_attribute(*p.add_attribute(), n, k, v);
}

void add_value_info(onnx::ValueInfoProto& vi, const IOSpec& io, const PackageSpec& spec, const OnnxExportOptions& opt) {
  vi.set_name(io.name);
  auto& tt = *vi.mutable_type()->mutable_tensor_type();
  tt.set_elem_type(static_cast<int32_t>(onnx_from_dtype(dtype_from_kserve(io.datatype))));
  auto names = opt.dim_names.find(io.name);
  for (size_t d = 0; d < io.shape.size(); ++d) {
    auto& dim = *tt.mutable_shape()->add_dim();
    if (io.shape[d] >= 0) {
      dim.set_dim_value(io.shape[d]);
      continue;
    }
    std::string param = d == 0 && spec.batched ? "batch" : io.name + "_dim" + std::to_string(d);
    if (names != opt.dim_names.end() && d < names->second.size() && !names->second[d].empty()) param = names->second[d];
    dim.set_dim_param(param);
  }
}

}  // namespace

std::string onnx_model_bytes(const PackageSpec& spec, const StateDict& constants, const OnnxExportOptions& opt) {
  if (!spec.graph.is_object() || spec.graph.value("type", "") != "ops")
    throw InvalidArgument("ONNX export: the package's graph is not of type \"ops\" (trace the module first: "
                          "models/module_trace.h)");
  std::set<std::string> names;
  for (const auto& [name, t] : constants) names.insert(name);
  const OpGraph g = op_graph_from_json(spec.graph, "the exported graph", names);
  onnx::ModelProto model;
  model.set_ir_version(kOnnxExportIrVersion);
  model.set_producer_name("hgraph");
  model.set_producer_version(version());
  auto& os = *model.add_opset_import();
  os.set_domain("");
  os.set_version(kOnnxExportOpset);
  for (const auto& [k, v] : spec.metadata.items()) {
    auto& m = *model.add_metadata_props();
    m.set_key(k);
    m.set_value(v.is_string() ? v.get<std::string>() : v.dump());
  }
  onnx::GraphProto& gp = *model.mutable_graph();
  gp.set_name(spec.name.empty() ? "hgraph_export" : spec.name);
  for (const auto& [name, t] : constants) set_tensor(*gp.add_initializer(), name, t);
  if (spec.inputs.size() != g.inputs.size() || spec.outputs.size() != g.outputs.size())
    throw InvalidArgument("ONNX export: the graph has " + std::to_string(g.inputs.size()) + " inputs and " +
                          std::to_string(g.outputs.size()) + " outputs, the spec declares " +
                          std::to_string(spec.inputs.size()) + " and " + std::to_string(spec.outputs.size()));
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    IOSpec io = spec.inputs[k];
    io.name = g.inputs[k];
    add_value_info(*gp.add_input(), io, spec, opt);
  }
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    IOSpec io = spec.outputs[k];
    io.name = g.outputs[k];
    add_value_info(*gp.add_output(), io, spec, opt);
  }
  for (const OpNode& n : g.nodes) add_node(gp, n);
  std::string bytes;
  if (model.ByteSizeLong() >= (size_t{1} << 31) || !model.SerializeToString(&bytes))
    throw InvalidArgument("ONNX export: the model is " + std::to_string(model.ByteSizeLong()) +
                          " bytes; protobuf writes at most 2 GiB (external data is not written)");
  return bytes;
}

void write_onnx(const std::filesystem::path& file, const PackageSpec& spec, const StateDict& constants,
                const OnnxExportOptions& opt) {
  const std::string bytes = onnx_model_bytes(spec, constants, opt);
  write_file_atomic(file, {as_bytes(bytes)});
}

}  // namespace hg::models
