#include "models/onnx_import.h"

#include <onnx/onnx_pb.h>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "engine/hash.h"
#include "engine/json_reader.h"
#include "graphs/disk_cache.h"
#include "graphs/graph_dump.h"
#include "models/module.h"
#include "models/onnx_ops.h"
#include "models/state_dict.h"

namespace hg::models {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
// Const: known at import (initializers, Constant nodes and what only they feed: folded now).
// Shape: computed from the inputs' shapes alone (Shape and the arithmetic on it): kept as graph
// nodes that OpGraphModule evaluates on the host for each concrete signature. Runtime: depends
// on the inputs' data.
enum class Kind { Const, Shape, Runtime };

struct Val {
  Kind kind;
  Tensor value;      // Const only (on the cpu)
  std::string name;  // graph value or constant name
};

std::vector<double> host_doubles(const Tensor& t) {
  const Tensor d = t.to(DType::F64).contiguous();
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

struct Importer {
  fs::path file;
  int64_t opset = 0;
  std::map<std::string, Val> vals;
  std::map<fs::path, std::vector<uint8_t>> external;  // external data files read so far
  OpGraph graph;
  std::vector<std::pair<std::string, Tensor>> constants;
  std::set<std::string> constant_names;

  [[noreturn]] void fail(const std::string& why) const { throw FormatError(file.string() + ": " + why); }
  std::string node_ctx(const OpNode& n) const {
    return "node '" + n.name + "' (op " + n.op + ", opset " + std::to_string(opset) + ")";
  }

  const std::vector<uint8_t>& external_file(const std::string& location, const std::string& tensor) {
    const fs::path rel(location);
    const bool up = std::any_of(rel.begin(), rel.end(), [](const fs::path& part) { return part == ".."; });
    if (location.empty() || rel.is_absolute() || rel.has_root_name() || up)
      fail("tensor '" + tensor + "': external data location '" + location + "' must be a relative path below the model");
    const fs::path path = file.parent_path() / rel;
    auto it = external.find(path);
    if (it != external.end()) return it->second;
    try {
      return external[path] = read_file(path);
    } catch (const Error& e) {
      fail("tensor '" + tensor + "': external data: " + e.what());
    }
  }

  // where: what holds the tensor ("node 'x' (op ...): attribute 'value': "), empty for initializers.
  Tensor tensor_from_proto(const onnx::TensorProto& t, const std::string& where = "") {
    const std::string what = where + "tensor '" + t.name() + "'";
    DType dt;
    try {
      dt = dtype_from_onnx(t.data_type());
    } catch (const Error& e) {
      fail(what + ": " + e.what());
    }
    const Shape shape(t.dims().begin(), t.dims().end());
    const auto count_or_none = capped_numel(shape);
    if (!count_or_none)
      fail(what + ": shape " + shape_str(shape) + " has a negative dimension or more than " +
           std::to_string(kMaxOnnxElements) + " elements");
    const int64_t n = *count_or_none;
    const size_t bytes = static_cast<size_t>(n) * dtype_size(dt);
    auto count = [&](int64_t have, const char* field) {
      if (have != n) fail(what + ": " + field + " holds " + std::to_string(have) + " values, the shape " + shape_str(shape) +
                          " needs " + std::to_string(n));
    };
    // Sizes are checked before the tensor is allocated: a corrupt header cannot ask for terabytes.
    const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
    if (!external && t.has_raw_data() && t.raw_data().size() != bytes)
      fail(what + ": raw_data has " + std::to_string(t.raw_data().size()) + " bytes, the shape " + shape_str(shape) +
           " needs " + std::to_string(bytes));
    if (!external && !t.has_raw_data()) {
      if (dt == DType::F32) count(t.float_data_size(), "float_data");
      else if (dt == DType::F64) count(t.double_data_size(), "double_data");
      else if (dt == DType::I64) count(t.int64_data_size(), "int64_data");
      else count(t.int32_data_size(), "int32_data");
    }
    const std::vector<uint8_t>* ext = nullptr;
    int64_t offset = 0;
    if (external) {
      std::string location;
      int64_t length = -1;
      bool has_length = false;
      for (const auto& kv : t.external_data()) {
        if (kv.key() == "location") {
          location = kv.value();
        } else if (kv.key() == "offset" || kv.key() == "length") {
          const std::string& v = kv.value();
          int64_t x = -1;
          const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
          if (v.empty() || ec != std::errc() || end != v.data() + v.size() || x < 0)
            fail(what + ": external data field '" + kv.key() + "' is not a non-negative integer: '" + v + "'");
          (kv.key() == "offset" ? offset : length) = x;
          has_length |= kv.key() == "length";
        }
      }
      ext = &external_file(location, t.name());
      const uint64_t size = ext->size();
      if (!has_length) length = static_cast<uint64_t>(offset) <= size ? static_cast<int64_t>(size - offset) : 0;
      if (static_cast<uint64_t>(length) != bytes || static_cast<uint64_t>(offset) > size || bytes > size - offset)
        fail(what + ": external data at offset " + std::to_string(offset) + ", length " + std::to_string(length) + " in '" +
             location + "' (" + std::to_string(ext->size()) + " bytes) does not hold the " + std::to_string(bytes) +
             " bytes of " + shape_str(shape));
    }
    Tensor r = Tensor::empty(shape, dt, Device::cpu());
    auto* out = static_cast<uint8_t*>(r.raw_data());
    if (!bytes) return r;
    if (external) {
      std::memcpy(out, ext->data() + offset, bytes);
    } else if (t.has_raw_data()) {
      std::memcpy(out, t.raw_data().data(), bytes);
    } else if (dt == DType::F32) {
      std::memcpy(out, t.float_data().data(), bytes);
    } else if (dt == DType::F64) {
      std::memcpy(out, t.double_data().data(), bytes);
    } else if (dt == DType::I64) {
      std::memcpy(out, t.int64_data().data(), bytes);
    } else {  // I32, U8, BOOL, F16, BF16: int32_data holds one value (or 16-bit pattern) each
      const size_t es = dtype_size(dt);
      for (int64_t k = 0; k < n; ++k) {
        const int32_t v = t.int32_data(static_cast<int>(k));
        std::memcpy(out + k * es, &v, es);  // little-endian: the low bytes
      }
    }
    return r;
  }

  Json attr_json(const onnx::AttributeProto& a, const OpNode& n) {
    using A = onnx::AttributeProto;
    switch (a.type()) {
      case A::FLOAT: return a.f();
      case A::INT: return a.i();
      case A::STRING: return a.s();
      case A::FLOATS: return std::vector<double>(a.floats().begin(), a.floats().end());
      case A::INTS: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
      case A::STRINGS: return std::vector<std::string>(a.strings().begin(), a.strings().end());
      case A::TENSOR: {  // data: int64 values for integer dtypes (exact), doubles otherwise
        const Tensor t = tensor_from_proto(a.t(), node_ctx(n) + ": attribute '" + a.name() + "': ");
        const Json data = is_floating(t.dtype()) ? Json(host_doubles(t)) : Json(t.to(DType::I64).to_indices());
        return {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"data", data}};
      }
      default: fail(node_ctx(n) + ": attribute '" + a.name() + "' has an unsupported type");
    }
  }

  void add_const(const std::string& name, const Tensor& t) { vals[name] = Val{Kind::Const, t, name}; }

  void constant_node(const onnx::NodeProto& np, const OpNode& n) {
    if (np.attribute_size() != 1 || np.output_size() != 1) fail(node_ctx(n) + ": needs one attribute and one output");
    const auto& a = np.attribute(0);
    Tensor t;
    if (a.name() == "value") t = tensor_from_proto(a.t(), node_ctx(n) + ": ");
    else if (a.name() == "value_float") t = Tensor::from_vector({a.f()}, {});
    else if (a.name() == "value_floats") t = Tensor::from_vector({a.floats().begin(), a.floats().end()}, {a.floats_size()});
    else if (a.name() == "value_int") t = Tensor::from_indices({a.i()}, {});
    else if (a.name() == "value_ints") t = Tensor::from_indices({a.ints().begin(), a.ints().end()}, {a.ints_size()});
    else fail(node_ctx(n) + ": attribute '" + a.name() + "' is not supported");
    add_const(np.output(0), t);
  }

  // A constant the kept graph reads becomes one of the package's weights.
  void keep_constant(const Val& v) {
    if (constant_names.insert(v.name).second) constants.emplace_back(v.name, v.value.contiguous());
  }

  void import_node(const onnx::NodeProto& np) {
    OpNode n;
    n.op = np.op_type();
    n.name = !np.name().empty() ? np.name() : np.output_size() ? np.output(0) : n.op;
    if ((!np.domain().empty() && np.domain() != "ai.onnx") || (n.op != "Constant" && !is_supported_onnx_op(n.op)))
      throw InvalidArgument(file.string() + ": unsupported ONNX op '" + (np.domain().empty() ? "" : np.domain() + ".") +
                            n.op + "' (node '" + n.name + "', opset " + std::to_string(opset) + ")");
    if (n.op == "Constant") return constant_node(np, n);
    for (const auto& a : np.attribute()) n.attrs[a.name()] = attr_json(a, n);
    legacy_semantics(n);
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& i : n.inputs)
      if (!i.empty() && !vals.count(i)) fail(node_ctx(n) + ": input '" + i + "' is defined by no initializer, input or earlier node");
    Kind kind = Kind::Const;
    for (const auto& i : n.inputs)
      if (!i.empty()) kind = std::max(kind, vals.at(i).kind);
    if (n.op == "Shape" && kind == Kind::Runtime) kind = Kind::Shape;
    if ((n.op == "Identity" || n.op == "Dropout") && n.outputs.size() == 1 && kind != Kind::Const) {
      vals[n.outputs[0]] = vals.at(n.inputs[0]);  // an alias, no node
      return;
    }
    if (kind == Kind::Const) {  // folded now, on the cpu
      for (const HostInput& h : host_inputs(n.op))
        if (h.slot < static_cast<int>(n.inputs.size()) && !n.inputs[h.slot].empty())
          fold_host_value(n, h, vals.at(n.inputs[h.slot]).value);
      std::vector<Tensor> in;
      for (const auto& i : n.inputs) in.push_back(i.empty() ? Tensor() : vals.at(i).value);
      std::vector<Tensor> out;
      try {
        out = run_onnx_node(n, in, 1);
      } catch (const std::exception& e) {  // hg::Error, or bad_alloc for absurd shapes
        fail(node_ctx(n) + ": " + e.what());
      }
      for (size_t o = 0; o < n.outputs.size(); ++o) add_const(n.outputs[o], out[o]);
      return;
    }
    for (const HostInput& h : host_inputs(n.op)) {
      if (h.slot >= static_cast<int>(n.inputs.size()) || n.inputs[h.slot].empty()) continue;
      const Val& v = vals.at(n.inputs[h.slot]);
      if (v.kind == Kind::Const) fold_host_value(n, h, v.value);
      else if (v.kind == Kind::Runtime && h.required)
        fail(node_ctx(n) + ": input '" + n.inputs[h.slot] + "' (" + h.attr + ") depends on the input data; not supported");
    }
    for (auto& i : n.inputs) {
      if (i.empty()) continue;
      const Val& v = vals.at(i);
      if (v.kind == Kind::Const) keep_constant(v);
      i = v.name;
    }
    for (const auto& o : n.outputs) vals[o] = Val{kind, Tensor(), o};
    graph.nodes.push_back(std::move(n));
  }

  // Opsets before 13: Softmax and LogSoftmax work on the input flattened to 2-D at `axis`
  // (default 1); the op table reads "coerce_2d".
  void legacy_semantics(OpNode& n) const {
    if (opset < 13 && (n.op == "Softmax" || n.op == "LogSoftmax")) {
      if (!n.attrs.contains("axis")) n.attrs["axis"] = 1;
      n.attrs["coerce_2d"] = 1;
    }
  }

  // The element type and shape a graph input or output declares; -1 for a dynamic dimension
  // (a dim_param, or no value).
  IOSpec declared(const onnx::ValueInfoProto& vi, const char* what) {
    const auto& tt = vi.type().tensor_type();
    IOSpec s{vi.name(), "", {}};
    try {
      s.datatype = kserve_datatype(dtype_from_onnx(tt.elem_type()));
    } catch (const Error& e) {
      fail(std::string(what) + " '" + vi.name() + "': " + e.what());
    }
    if (!tt.has_shape())
      fail(std::string(what) + " '" + vi.name() + "' declares no shape (export with torch.onnx.export, which writes them)");
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto& dim = tt.shape().dim(d);
      s.shape.push_back(dim.has_dim_value() && dim.dim_value() > 0 ? dim.dim_value() : -1);
    }
    return s;
  }

  // Whether input `vi` can be batched along dimension 0: it is dynamic, not named as a sequence
  // or time axis, and no other dimension is named as the batch (sequence-first layouts, RNN
  // initial states [layers, batch, hidden], static exports are not).
  static bool batch_first(const onnx::ValueInfoProto& vi) {
    const auto& dims = vi.type().tensor_type().shape();
    if (!vi.type().tensor_type().has_shape() || dims.dim_size() == 0 || dims.dim(0).has_dim_value()) return false;
    auto named = [&](int d, std::initializer_list<const char*> words) {
      std::string name = dims.dim(d).dim_param();
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
      for (const char* w : words)
        if (name.find(w) != std::string::npos) return true;
      return false;
    };
    if (named(0, {"seq", "time", "step", "len", "token"})) return false;
    for (int d = 1; d < dims.dim_size(); ++d)
      if (named(d, {"batch"})) return false;
    return true;
  }

  // Batched: dimension 0 is the batch; every other dimension may be dynamic. Unbatched: the
  // shape is whole, any dimension may be dynamic.
  IOSpec input_spec(const onnx::ValueInfoProto& vi, bool batched) {
    IOSpec s = declared(vi, "input");
    if (batched) s.shape[0] = -1;
    Shape fixed = s.shape;
    for (int64_t& d : fixed) d = std::max<int64_t>(d, 1);
    if (!capped_numel(fixed))
      fail("input '" + vi.name() + "': shape " + shape_str(s.shape) + " has more than " + std::to_string(kMaxOnnxElements) +
           " elements for one request");
    vals[vi.name()] = Val{Kind::Runtime, Tensor(), vi.name()};
    return s;
  }

  // Batched: the batch is dimension 0 whatever the file says (exporters write the traced batch
  // size when only the inputs were marked dynamic); the Predictor checks the rest against what runs.
  IOSpec output_spec(const onnx::ValueInfoProto& vi, bool batched) {
    auto it = vals.find(vi.name());
    if (it == vals.end()) fail("output '" + vi.name() + "' is produced by no node");
    const Val& v = it->second;
    if (v.kind != Kind::Runtime) fail("output '" + vi.name() + "' does not depend on the inputs' data");
    IOSpec s = declared(vi, "output");
    if (batched && s.shape.empty()) fail("output '" + vi.name() + "' has no batch dimension (a scalar)");
    if (batched) s.shape[0] = -1;
    graph.outputs.push_back(v.name);
    return s;
  }

  // The scalar value of constant `name`, if it is one.
  std::optional<double> scalar_constant(const std::string& name) const {
    auto it = vals.find(name);
    if (it == vals.end() || it->second.kind != Kind::Const || it->second.value.numel() != 1) return std::nullopt;
    const Tensor& t = it->second.value;
    if (t.dtype() != DType::F32 && t.dtype() != DType::F64) return std::nullopt;
    return host_doubles(t)[0];
  }

  // GELU as exporters before opset 20 write it, y = x * 0.5 * (1 + erf(x / sqrt(2))):
  // Div(x, sqrt 2) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5), in either operand order,
  // each intermediate read only by the next node, becomes one Gelu node (ONNX Runtime's
  // optimizer does the same). Our gelu then runs as one vectorised pass or a matmul post-op
  // instead of five passes with a scalar erf.
  void fuse_erf_gelu() {
    std::map<std::string, int> readers;
    for (const auto& n : graph.nodes)
      for (const auto& i : n.inputs) readers[i]++;
    for (const auto& o : graph.outputs) readers[o]++;
    std::map<std::string, size_t> producer;
    for (size_t k = 0; k < graph.nodes.size(); ++k)
      for (const auto& o : graph.nodes[k].outputs) producer[o] = k;
    auto near = [](std::optional<double> v, double want) { return v && std::fabs(*v - want) <= 1e-6 * want; };
    // The node reading `value` if it is `op` and the only reader; the operand beside `value` in `other`.
    auto only_reader = [&](const std::string& value, const char* op, std::string* other) -> OpNode* {
      if (readers[value] != 1) return nullptr;
      for (auto& n : graph.nodes) {
        if (n.op != op || n.inputs.size() != 2 || n.outputs.size() != 1) continue;
        if (n.inputs[0] == value) *other = n.inputs[1];
        else if (n.inputs[1] == value && n.op != "Div") *other = n.inputs[0];
        else continue;
        return &n;
      }
      return nullptr;
    };
    for (auto& div : graph.nodes) {
      if (div.op != "Div" || div.inputs.size() != 2 || div.outputs.size() != 1) continue;
      if (!near(scalar_constant(div.inputs[1]), std::sqrt(2.0))) continue;
      const std::string x = div.inputs[0];
      std::string c1, c2, c3;
      OpNode* erf = nullptr;
      if (readers[div.outputs[0]] == 1)
        for (auto& n : graph.nodes)
          if (n.op == "Erf" && n.inputs.size() == 1 && n.inputs[0] == div.outputs[0]) erf = &n;
      if (!erf) continue;
      OpNode* add = only_reader(erf->outputs[0], "Add", &c1);
      if (!add || !near(scalar_constant(c1), 1.0)) continue;
      OpNode* mul = only_reader(add->outputs[0], "Mul", &c2);
      if (!mul || c2 != x) continue;
      OpNode* half = only_reader(mul->outputs[0], "Mul", &c3);
      if (!half || !near(scalar_constant(c3), 0.5)) continue;
      // `half` becomes the Gelu; the four before it are dropped.
      half->op = "Gelu";
      half->inputs = {x};
      half->attrs = {{"approximate", "none"}};
      for (OpNode* d : {&div, erf, add, mul}) d->op.clear();  // dropped below
    }
    std::erase_if(graph.nodes, [](const OpNode& n) { return n.op.empty(); });
  }

  // Mul and Div by a rank-0 constant (attention's q / sqrt(d), GELU's * 0.5) keep the scalar as
  // attribute "scalar" and run as one scale op, which the attention pass folds into the sdpa's
  // scale (ONNX Runtime's optimizer folds such scalars too).
  void fold_scalar_operands() {
    for (auto& n : graph.nodes) {
      if ((n.op != "Mul" && n.op != "Div") || n.inputs.size() != 2 || n.outputs.size() != 1) continue;
      for (size_t side : {size_t{1}, size_t{0}}) {
        if (side == 0 && n.op == "Div") continue;  // c / x is not a scaling
        auto it = vals.find(n.inputs[side]);
        if (it == vals.end() || it->second.kind != Kind::Const || it->second.value.ndim() != 0) continue;
        const auto c = scalar_constant(n.inputs[side]);
        if (!c || !std::isfinite(*c) || (n.op == "Div" && *c == 0)) continue;
        n.attrs["scalar"] = *c;
        n.inputs = {n.inputs[1 - side]};
        break;
      }
    }
  }

  // Drops nodes and constants no output needs.
  void prune() {
    std::set<std::string> needed(graph.outputs.begin(), graph.outputs.end());
    std::vector<OpNode> kept;
    for (auto it = graph.nodes.rbegin(); it != graph.nodes.rend(); ++it) {
      bool used = false;
      for (const auto& o : it->outputs) used |= needed.count(o) != 0;
      if (!used) continue;
      needed.insert(it->inputs.begin(), it->inputs.end());
      kept.push_back(std::move(*it));
    }
    graph.nodes.assign(std::make_move_iterator(kept.rbegin()), std::make_move_iterator(kept.rend()));
    std::erase_if(constants, [&](const auto& c) { return !needed.count(c.first); });
  }
};

// Imports the model in `bytes` (read from `file`); *external: whether it read external data files.
ModelPackage import_model(const fs::path& file, const std::vector<uint8_t>& bytes, bool* external) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT32_MAX) || !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw FormatError(file.string() + ": not a valid ONNX model (the protobuf message does not parse; truncated or corrupt, " +
                      std::to_string(bytes.size()) + " bytes)");
  Importer im;
  im.file = file;
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") im.opset = o.version();
  if (!model.has_graph()) im.fail("the model has no graph");
  if (im.opset < 11 || im.opset > 18) im.fail("opset " + std::to_string(im.opset) + " is not supported (11 to 18 are)");
  const auto& g = model.graph();
  ModelPackage p;
  p.dir = file.parent_path();
  p.spec.name = file.stem().string();
  for (const auto& init : g.initializer()) im.add_const(init.name(), im.tensor_from_proto(init));
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& vi : g.input())
    if (!im.vals.count(vi.name())) inputs.push_back(&vi);  // not an initializer listed as an input (older exporters)
  if (inputs.empty()) im.fail("the graph has no inputs");
  // Batched when every input's dimension 0 is a batch; otherwise every tensor is whole and each
  // run is one request (Triton's max_batch_size 0).
  p.spec.batched = std::all_of(inputs.begin(), inputs.end(), [](auto* vi) { return Importer::batch_first(*vi); });
  for (const auto* vi : inputs) {
    p.spec.inputs.push_back(im.input_spec(*vi, p.spec.batched));
    im.graph.inputs.push_back(vi->name());
  }
  for (const auto& np : g.node()) im.import_node(np);
  for (const auto& vi : g.output()) p.spec.outputs.push_back(im.output_spec(vi, p.spec.batched));
  if (p.spec.outputs.empty()) im.fail("the graph has no outputs");
  im.fuse_erf_gelu();
  im.fold_scalar_operands();
  im.prune();
  p.spec.graph = op_graph_to_json(im.graph);
  p.spec.metadata = {{"source", "onnx"},
                     {"onnx_file", file.filename().string()},
                     {"opset", im.opset},
                     {"producer", model.producer_name() + " " + model.producer_version()}};
  p.weights = to_safetensors(im.constants);
  *external = !im.external.empty();
  return p;
}

// The disk cache's entry for an imported model: u64 length of model.json's text, the text, the
// weights' safetensors image. Keyed by the ONNX file's content, so a start with a warm cache
// skips the import.
std::string import_key(uint64_t digest, uint64_t size) {
  return "onnx-import|" + graphs::hex64(digest) + "|" + std::to_string(size) + " bytes";
}

// The content digest of `file`, remembered in the cache under the file's identity (absolute
// path, device, inode, size, modification and change times in ns), so a warm start neither
// reads nor hashes a large model. Replacing the file (rename) or writing it changes the
// identity. *bytes receives the content when it had to be read.
uint64_t content_digest(graphs::DiskCache& disk, const fs::path& file, std::vector<uint8_t>* bytes) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) throw IoError("cannot stat " + file.string() + ": " + std::strerror(errno));
  const std::string id = "file-digest|" + fs::absolute(file).lexically_normal().string() + "|" + std::to_string(st.st_dev) +
                         ":" + std::to_string(st.st_ino) + "|" + std::to_string(st.st_size) + "|" +
                         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "|" +
                         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
  if (auto blob = disk.load_blob(id); blob && blob->payload().size() == 8) {
    uint64_t d;
    std::memcpy(&d, blob->payload().data(), 8);
    return d;
  }
  *bytes = read_file(file);
  const uint64_t d = hash64(*bytes);
  disk.store_blob(id, {{reinterpret_cast<const uint8_t*>(&d), 8}});
  return d;
}

void store_import(graphs::DiskCache& disk, const std::string& key, const ModelPackage& p) {
  const std::string json = package_json(p.spec).dump();
  const std::vector<uint8_t> weights = safetensors::serialize(p.weights);
  const uint64_t n = json.size();
  disk.store_blob(key, {{reinterpret_cast<const uint8_t*>(&n), 8}, as_bytes(json), weights});
}

ModelPackage package_from_entry(std::span<const uint8_t> e, const fs::path& file, const std::string& entry,
                                std::unique_ptr<Module>* module, Device device) {
  uint64_t n = 0;
  if (e.size() < 8 || (std::memcpy(&n, e.data(), 8), n > e.size() - 8))
    throw FormatError(entry + ": the imported model's JSON length is out of range");
  const std::string_view text(reinterpret_cast<const char*>(e.data() + 8), n);
  return package_from(read_json(text, kModelJsonLimits, entry), safetensors::parse(e.subspan(8 + n), entry),
                      file.parent_path(), module, device);
}

ModelPackage import_or_reuse(const fs::path& file, std::unique_ptr<Module>* module, Device device) {
  std::vector<uint8_t> bytes;
  const std::shared_ptr<graphs::DiskCache> disk = graphs::disk_cache();
  std::string key;
  if (disk) {
    const uint64_t digest = content_digest(*disk, file, &bytes);
    key = import_key(digest, bytes.empty() ? fs::file_size(file) : bytes.size());
    if (auto blob = disk->load_blob(key)) {
      const std::string entry = disk->path_for(key).string();
      try {
        return package_from_entry(blob->payload(), file, entry, module, device);
      } catch (const Error& e) {
        disk->discard(key, e.what());
      }
    }
  }
  if (bytes.empty()) bytes = read_file(file);
  bool external = false;
  ModelPackage p = import_model(file, bytes, &external);
  if (disk && !external) store_import(*disk, key, p);  // external data files: imported every time
  if (module) *module = build_module(p, device);
  return p;
}

}  // namespace

ModelPackage import_onnx(const fs::path& file, std::unique_ptr<Module>* module, Device device) {
  try {
    return import_or_reuse(file, module, device);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // bad_alloc, length_error, protobuf's or json's: still an hg::Error
    throw FormatError(file.string() + ": import failed: " + e.what());
  }
}

}  // namespace hg::models
