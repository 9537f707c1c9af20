// Recorded engine ops as ONNX nodes (models/trace_emit.h): one emitter per engine op that a
// module's forward may call in eval mode.
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "engine/error.h"
#include "engine/kernels.h"
#include "engine/kernels_shape.h"
#include "engine/op_attrs.h"
#include "models/onnx_ops.h"
#include "models/trace_emit.h"

namespace hg::models::trace_detail {

// ---- the emitter's helpers ----

void Emitter::fail(const std::string& why) const {
  throw InvalidArgument("export: op '" + node().op->name + "' (node " + std::to_string(cur) + "): " + why);
}

std::string Emitter::fresh(const std::string& what) {
  return "/" + node().op->name + "_" + std::to_string(cur) + "/" + what + "_" + std::to_string(made++);
}

std::string Emitter::add(const std::string& op, std::vector<std::string> inputs, Json attrs, std::string out_name) {
  OpNode n;
  n.op = op;
  n.name = fresh(op);
  n.inputs = std::move(inputs);
  n.outputs = {out_name.empty() ? fresh(op + "_out") : std::move(out_name)};
  n.attrs = std::move(attrs);
  g.nodes.push_back(std::move(n));
  return g.nodes.back().outputs[0];
}

void Emitter::alias() {
  if (output_nodes.count(cur)) add("Identity", {in(0)}, Json::object(), out());
  else names[static_cast<size_t>(cur)] = in(0);
}

std::string Emitter::constant(const Tensor& t, const std::string& what) {
  const std::string name = fresh(what);
  constants.emplace_back(name, t.to(Device::cpu()).contiguous().clone());
  return name;
}

std::string Emitter::scalar(double v, DType t, const std::string& what) {
  if (t == DType::I64) return constant(Tensor::from_indices({static_cast<int64_t>(v)}, {}), what);
  return constant(Tensor::full({}, static_cast<float>(v)).to(t), what);
}

std::string Emitter::dim_of(int n, int64_t axis) {
  auto it = shapes.find(n);
  if (it == shapes.end()) it = shapes.emplace(n, add("Shape", {names[static_cast<size_t>(n)]})).first;
  Json at = Json::object();
  fold_ints(at, "indices", {axis});
  return add("Gather", {it->second, ""}, at);
}

std::string Emitter::dynamic_dim(int64_t va, int64_t vb, const std::vector<int>& sources, const std::string& what) {
  std::vector<int> cands = sources;
  cands.insert(cands.end(), graph_inputs.begin(), graph_inputs.end());
  for (int n : cands)
    for (size_t j = 0; j < shape_a(n).size(); ++j)
      if (shape_a(n)[j] == va && shape_b(n)[j] == vb) return dim_of(n, static_cast<int64_t>(j));
  auto i64 = [this](int64_t v) { return constant(Tensor::from_indices({v}, {1}), "dim_factor"); };
  for (int n : cands)
    for (size_t j = 0; j < shape_a(n).size(); ++j) {
      const int64_t da = shape_a(n)[j], db = shape_b(n)[j];
      if (da == db || da <= 0 || db <= 0) continue;
      if (va % da == 0 && vb % db == 0 && va / da == vb / db)
        return add("Mul", {dim_of(n, static_cast<int64_t>(j)), i64(va / da)});
      if (va > 0 && vb > 0 && da % va == 0 && db % vb == 0 && da / va == db / vb)
        return add("Div", {dim_of(n, static_cast<int64_t>(j)), i64(da / va)});
    }
  // a product of two of the inputs' dynamic dimensions (batch * sequence)
  for (int n : graph_inputs)
    for (size_t j = 0; j < shape_a(n).size(); ++j)
      for (int m : graph_inputs)
        for (size_t k = 0; k < shape_a(m).size(); ++k)
          if ((n != m || j != k) && shape_a(n)[j] * shape_a(m)[k] == va && shape_b(n)[j] * shape_b(m)[k] == vb &&
              shape_a(n)[j] != shape_b(n)[j] && shape_a(m)[k] != shape_b(m)[k])
            return add("Mul", {dim_of(n, static_cast<int64_t>(j)), dim_of(m, static_cast<int64_t>(k))});
  fail(what + " is " + std::to_string(va) + " at the example's sizes and " + std::to_string(vb) +
       " at other sizes, and is no dimension of its input or of the model's inputs (nor a multiple, fraction or "
       "product of them); declare the axis it follows static, or compute it with ops on the inputs");
}

void Emitter::set_shape_input(OpNode& n, size_t slot, const char* attr, const std::vector<int64_t>& va,
                              const std::vector<int64_t>& vb, const std::vector<bool>& dynamic,
                              const std::vector<int>& sources) {
  if (n.inputs.size() <= slot) n.inputs.resize(slot + 1);
  bool any = false;
  for (bool d : dynamic) any |= d;
  if (!any) {
    fold_ints(n.attrs, attr, va);
    return;
  }
  std::vector<std::string> pieces;
  std::vector<int64_t> run;
  auto flush = [&] {
    if (!run.empty()) pieces.push_back(constant(Tensor::from_indices(run, {static_cast<int64_t>(run.size())}), attr));
    run.clear();
  };
  for (size_t i = 0; i < va.size(); ++i) {
    if (!dynamic[i]) {
      run.push_back(va[i]);
      continue;
    }
    flush();
    pieces.push_back(dynamic_dim(va[i], vb[i], sources, std::string(attr) + "[" + std::to_string(i) + "]"));
  }
  flush();
  n.inputs[slot] = pieces.size() == 1 ? pieces[0] : add("Concat", pieces, {{"axis", 0}});
}

void fold_ints(Json& attrs, const char* attr, const std::vector<int64_t>& v, bool scalar) {
  attrs[attr] = v;
  attrs[std::string(attr) + "_shape"] = scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())};
  attrs[std::string(attr) + "_dtype"] = "I64";
}

void fold_real(Json& attrs, const char* attr, double v, DType t) {
  attrs[attr] = Json::array({v});
  attrs[std::string(attr) + "_shape"] = Json::array();
  attrs[std::string(attr) + "_dtype"] = dtype_name(t);
}

// ---- the ops ----

namespace {

using Fn = std::function<void(Emitter&)>;

DType dtype_of(const Emitter& e, size_t k) { return e.a.nodes[static_cast<size_t>(e.in_node(k))].meta.dtype; }
int64_t rank_of(const Emitter& e, size_t k) { return static_cast<int64_t>(e.shape_a(e.in_node(k)).size()); }

// An op of one input and no attributes under its ONNX name.
Fn same(const char* onnx) {
  return [onnx](Emitter& e) { e.add(onnx, {e.in(0)}, Json::object(), e.out()); };
}

// The last two dimensions of input k swapped (bmm's trans_a / trans_b).
std::string transposed(Emitter& e, size_t k) {
  const int64_t r = rank_of(e, k);
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < r; ++d) perm.push_back(d);
  std::swap(perm[static_cast<size_t>(r - 1)], perm[static_cast<size_t>(r - 2)]);
  return e.add("Transpose", {e.in(k)}, {{"perm", perm}});
}

// Linear on rank 2 (what the engine's linear takes): Gemm with W transposed.
void linear(Emitter& e) {
  if (attrs::Linear::of(e.node().attrs).act != FusedAct::None) e.fail("a fused activation is not exported");
  if (rank_of(e, 0) == 2) {
    e.add("Gemm", {e.in(0), e.in(1), e.in(2)}, {{"transB", 1}}, e.out());
    return;
  }
  const std::string wt = e.add("Transpose", {e.in(1)}, {{"perm", {1, 0}}});
  e.add("Add", {e.add("MatMul", {e.in(0), wt}), e.in(2)}, Json::object(), e.out());
}

void matmul(Emitter& e) {
  const auto m = attrs::Matmul::of(e.node().attrs);
  if (m.act != FusedAct::None) e.fail("a fused activation is not exported");
  std::vector<std::string> in{e.in(0), e.in(1)};
  if (e.node().inputs.size() > 2) in.push_back(e.in(2));
  if (rank_of(e, 0) == 2 && rank_of(e, 1) == 2) {
    e.add("Gemm", in, {{"transA", m.trans_a ? 1 : 0}, {"transB", m.trans_b ? 1 : 0}}, e.out());
    return;
  }
  if (in.size() > 2) e.fail("a bias on a matmul of rank > 2 is not exported");
  e.add("MatMul", {m.trans_a ? transposed(e, 0) : in[0], m.trans_b ? transposed(e, 1) : in[1]}, Json::object(), e.out());
}

void bmm(Emitter& e) {
  const auto m = attrs::Bmm::of(e.node().attrs);
  e.add("MatMul", {m.trans_a ? transposed(e, 0) : e.in(0), m.trans_b ? transposed(e, 1) : e.in(1)}, Json::object(), e.out());
}

void binary(Emitter& e) {
  static const char* names[] = {"Add", "Sub", "Mul", "Div"};
  const auto op = static_cast<int64_t>(attrs::Binary::of(e.node().attrs).op);
  if (op < 0 || op > 3) e.fail("unknown binary op " + std::to_string(op));
  e.add(names[op], {e.in(0), e.in(1)}, Json::object(), e.out());
}

void scale(Emitter& e) {
  e.add("Mul", {e.in(0), e.scalar(attrs::Scale::of(e.node().attrs).factor, dtype_of(e, 0), "factor")}, Json::object(),
        e.out());
}

void unary_math(Emitter& e) {
  const auto u = attrs::UnaryMath::of(e.node().attrs);
  switch (u.fn) {
    case attrs::MathFn::Sqrt: e.add("Sqrt", {e.in(0)}, Json::object(), e.out()); return;
    case attrs::MathFn::Erf: e.add("Erf", {e.in(0)}, Json::object(), e.out()); return;
    case attrs::MathFn::Exp: e.add("Exp", {e.in(0)}, Json::object(), e.out()); return;
    case attrs::MathFn::Pow: {
      Json p = Json::object();
      fold_real(p, "exponent", u.exponent, dtype_of(e, 0));
      e.add("Pow", {e.in(0), ""}, p, e.out());
      return;
    }
  }
  e.fail("unknown math function");
}

void clamp(Emitter& e) {
  const double lo = e.node().attrs.f(0), hi = e.node().attrs.f(1);
  Json at = Json::object();
  std::vector<std::string> in{e.in(0), "", ""};
  if (std::isfinite(lo)) fold_real(at, "min", lo, dtype_of(e, 0));
  if (std::isfinite(hi)) fold_real(at, "max", hi, dtype_of(e, 0));
  e.add("Clip", in, at, e.out());
}

void softmax(Emitter& e) {
  const auto s = attrs::Softmax::of(e.node().attrs);
  e.add(s.log ? "LogSoftmax" : "Softmax", {e.in(0)}, {{"axis", s.dim}}, e.out());
}

void reduce(Emitter& e) {
  const auto& ints = e.node().attrs.ints;
  static const char* names[] = {"ReduceSum", "ReduceMean", "ReduceMax"};
  const int64_t kind = ints.at(0);
  if (kind < 0 || kind > 2) e.fail("unknown reduction " + std::to_string(kind));
  Json at = {{"keepdims", ints.at(1) != 0 ? 1 : 0}};
  const std::vector<int64_t> axes(ints.begin() + 2, ints.end());
  if (!axes.empty()) fold_ints(at, "axes", axes);
  e.add(names[kind], {e.in(0), ""}, at, e.out());
}

void reshape(Emitter& e) {
  const std::vector<int64_t>& ta = e.node().attrs.ints;
  const std::vector<int64_t>& tb = e.attrs_b().ints;
  const Shape &xa = e.shape_a(e.in_node(0)), &xb = e.shape_b(e.in_node(0));
  if (ta == xa && tb == xb) return e.alias();  // to its own shape (how inputs enter the trace)
  std::vector<int64_t> target = ta;
  std::vector<bool> dynamic(ta.size(), false);
  std::vector<size_t> open;
  for (size_t i = 0; i < ta.size(); ++i) {
    if (ta[i] == 0) e.fail("a reshape to an empty dimension is not exported");
    if (ta[i] == tb[i]) continue;
    if (i < xa.size() && xa[i] == ta[i] && xb[i] == tb[i]) target[i] = 0;  // ONNX: copies the input's dimension
    else open.push_back(i);
  }
  if (open.size() == 1) target[open[0]] = -1;  // the one dimension Reshape infers
  else
    for (size_t i : open) dynamic[i] = true;
  OpNode n{"Reshape", e.fresh("Reshape"), {e.in(0), ""}, {e.out()}};
  e.set_shape_input(n, 1, "shape", target, tb, dynamic, {e.in_node(0)});
  e.g.nodes.push_back(std::move(n));
}

void expand(Emitter& e) {
  const std::vector<int64_t>& ta = e.node().attrs.ints;
  const std::vector<int64_t>& tb = e.attrs_b().ints;
  const Shape &xa = e.shape_a(e.in_node(0)), &xb = e.shape_b(e.in_node(0));
  const auto lead = static_cast<int64_t>(ta.size()) - static_cast<int64_t>(xa.size());
  std::vector<int64_t> target = ta;
  std::vector<bool> dynamic(ta.size(), false);
  for (size_t i = 0; i < ta.size(); ++i) {
    if (ta[i] == tb[i]) continue;
    const int64_t j = static_cast<int64_t>(i) - lead;
    if (j >= 0 && xa[static_cast<size_t>(j)] == ta[i] && xb[static_cast<size_t>(j)] == tb[i]) target[i] = 1;  // broadcast keeps it
    else dynamic[i] = true;
  }
  OpNode n{"Expand", e.fresh("Expand"), {e.in(0), ""}, {e.out()}};
  e.set_shape_input(n, 1, "shape", target, tb, dynamic, {e.in_node(0)});
  e.g.nodes.push_back(std::move(n));
}

void slice(Emitter& e) {
  const auto &a = e.node().attrs.ints, &b = e.attrs_b().ints;
  const int64_t d = a.at(0);
  const int64_t size_a = e.shape_a(e.in_node(0))[static_cast<size_t>(d)];
  const int64_t size_b = e.shape_b(e.in_node(0))[static_cast<size_t>(d)];
  int64_t end = a.at(2);
  if (a[2] == size_a && b[2] == size_b) end = std::numeric_limits<int64_t>::max();  // to the end, at any size
  OpNode n{"Slice", e.fresh("Slice"), {e.in(0), "", "", "", ""}, {e.out()}};
  e.set_shape_input(n, 1, "starts", {a[1]}, {b[1]}, {a[1] != b[1]}, {e.in_node(0)});
  e.set_shape_input(n, 2, "ends", {end}, {b[2]}, {end != std::numeric_limits<int64_t>::max() && a[2] != b[2]}, {e.in_node(0)});
  fold_ints(n.attrs, "axes", {d});
  fold_ints(n.attrs, "steps", {a.at(3)});
  e.g.nodes.push_back(std::move(n));
}

void concat(Emitter& e) {
  std::vector<std::string> in;
  for (size_t k = 0; k < e.node().inputs.size(); ++k) in.push_back(e.in(k));
  e.add("Concat", in, {{"axis", e.node().attrs.i(0)}}, e.out());
}

void conv(Emitter& e) {
  const auto& ints = e.node().attrs.ints;
  if (ints.size() > 7) e.fail("a fused, blocked or INT8 convolution is not exported (export before compiling)");
  const auto c = attrs::Conv::of(e.node().attrs);
  const Shape& w = e.shape_a(e.in_node(1));
  std::vector<std::string> in{e.in(0), e.in(1)};
  if (e.node().op->name == "conv2d") in.push_back(e.in(2));
  e.add("Conv", in,
        {{"kernel_shape", {w[2], w[3]}},
         {"strides", {c.stride_h, c.stride_w}},
         {"pads", {c.pad_h, c.pad_w, c.pad_h, c.pad_w}},
         {"dilations", {c.dilation_h, c.dilation_w}},
         {"group", c.groups}},
        e.out());
}

void pool(Emitter& e, const char* onnx) {
  const auto& p = e.node().attrs.ints;
  Json at = {{"kernel_shape", {p.at(0), p.at(1)}}, {"strides", {p.at(2), p.at(3)}}, {"pads", {p.at(4), p.at(5), p.at(4), p.at(5)}}};
  if (std::string(onnx) == "AveragePool") at["count_include_pad"] = p.size() > 6 && p[6] ? 1 : 0;
  e.add(onnx, {e.in(0)}, at, e.out());
}

void adaptive_avg_pool(Emitter& e) {
  const int64_t oh = e.node().attrs.i(0), ow = e.node().attrs.i(1);
  if (oh == 1 && ow == 1) {
    e.add("GlobalAveragePool", {e.in(0)}, Json::object(), e.out());
    return;
  }
  const Shape &xa = e.shape_a(e.in_node(0)), &xb = e.shape_b(e.in_node(0));
  if (xa[2] != xb[2] || xa[3] != xb[3] || xa[2] % oh || xa[3] % ow)
    e.fail("an adaptive pool to " + std::to_string(oh) + "x" + std::to_string(ow) +
           " is exported only from a fixed input size that it divides (or to 1x1)");
  const int64_t kh = xa[2] / oh, kw = xa[3] / ow;
  e.add("AveragePool", {e.in(0)}, {{"kernel_shape", {kh, kw}}, {"strides", {kh, kw}}}, e.out());
}

void layer_norm(Emitter& e) {
  const auto& ns = e.node().attrs.ints;
  e.add("LayerNormalization", {e.in(0), e.in(1), e.in(2)},
        {{"axis", -static_cast<int64_t>(ns.size())}, {"epsilon", e.node().attrs.f(0, 1e-5)}}, e.out());
}

void batch_norm(Emitter& e) {
  e.add("BatchNormalization", {e.in(0), e.in(1), e.in(2), e.in(3), e.in(4)},
        {{"epsilon", attrs::BatchNorm::of(e.node().attrs).eps}}, e.out());
}

void masked_fill(Emitter& e) {
  const double v = attrs::MaskedFill::of(e.node().attrs).value;
  e.add("Where", {e.in(1), e.scalar(v, dtype_of(e, 0), "fill"), e.in(0)}, Json::object(), e.out());
}

// x [..., L, S] with j > i filled: Where(Range(S) > Range(L)ᵀ, value, x), L and S read from
// x's shape at run time.
void causal_fill(Emitter& e) {
  const int64_t r = rank_of(e, 0);
  const std::string sh = e.add("Shape", {e.in(0)});
  auto dim = [&](int64_t d) {
    Json at = Json::object();
    fold_ints(at, "indices", {d}, true);
    return e.add("Gather", {sh, ""}, at);
  };
  const std::string zero = e.scalar(0, DType::I64, "zero"), one = e.scalar(1, DType::I64, "one");
  const std::string rows = e.add("Range", {zero, dim(r - 2), one}), cols = e.add("Range", {zero, dim(r - 1), one});
  Json un = Json::object();
  fold_ints(un, "axes", {1});
  const std::string mask = e.add("Greater", {cols, e.add("Unsqueeze", {rows, ""}, un)});
  const double v = attrs::CausalFill::of(e.node().attrs).value;
  e.add("Where", {mask, e.scalar(v, dtype_of(e, 0), "fill"), e.in(0)}, Json::object(), e.out());
}

const std::map<std::string, Fn>& emitters() {
  static const std::map<std::string, Fn> table = {
      {"linear", linear},
      {"matmul", matmul},
      {"bmm", bmm},
      {"binary", binary},
      {"scale", scale},
      {"relu", same("Relu")},
      {"tanh", same("Tanh")},
      {"sigmoid", same("Sigmoid")},
      {"silu", [](Emitter& e) { e.add("Mul", {e.in(0), e.add("Sigmoid", {e.in(0)})}, Json::object(), e.out()); }},
      {"gelu", [](Emitter& e) {  // one fused op in the package; write_onnx lowers it for opset 17
         e.add("Gelu", {e.in(0)}, {{"approximate", attrs::Gelu::of(e.node().attrs).tanh ? "tanh" : "none"}}, e.out());
       }},
      {"clamp", clamp},
      {"unary_math", unary_math},
      {"softmax", softmax},
      {"reduce", reduce},
      {"reshape", reshape},
      {"expand", expand},
      {"slice", slice},
      {"concat", concat},
      {"permute", [](Emitter& e) { e.add("Transpose", {e.in(0)}, {{"perm", e.node().attrs.ints}}, e.out()); }},
      {"contiguous", [](Emitter& e) { e.alias(); }},
      {"cast", [](Emitter& e) {
         e.add("Cast", {e.in(0)}, {{"to", onnx_from_dtype(static_cast<DType>(e.node().attrs.i(0)))}}, e.out());
       }},
      {"conv2d", conv},
      {"conv2d_nobias", conv},
      {"max_pool2d", [](Emitter& e) { pool(e, "MaxPool"); }},
      {"avg_pool2d", [](Emitter& e) { pool(e, "AveragePool"); }},
      {"adaptive_avg_pool2d", adaptive_avg_pool},
      {"layer_norm", layer_norm},
      {"batch_norm_eval", batch_norm},
      {"embedding", [](Emitter& e) { e.add("Gather", {e.in(1), e.in(0)}, {{"axis", 0}}, e.out()); }},
      {"where", [](Emitter& e) { e.add("Where", {e.in(0), e.in(1), e.in(2)}, Json::object(), e.out()); }},
      {"masked_fill", masked_fill},
      {"causal_fill", causal_fill},
  };
  return table;
}

}  // namespace

void emit_op(Emitter& e) {
  auto it = emitters().find(e.node().op->name);
  if (it == emitters().end()) {
    std::string known;
    for (const auto& [name, fn] : emitters()) known += (known.empty() ? "" : ", ") + name;
    e.fail("has no ONNX form the exporter knows (exported engine ops: " + known + ")");
  }
  it->second(e);
}

bool shape_attrs_expressed(const std::string& op) { return op == "reshape" || op == "expand" || op == "slice"; }

}  // namespace hg::models::trace_detail
