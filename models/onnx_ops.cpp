#include "models/onnx_ops.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>

#include "engine/error.h"
#include "engine/ops.h"
#include "models/onnx_ctx.h"

namespace hg::models {

namespace {

using namespace onnx_detail;

Shape resolve_reshape(const Ctx& c, const Tensor& x, std::vector<int64_t> shape) {
  const bool allowzero = c.i("allowzero", 0) != 0;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] == 0 && !allowzero) {
      if (static_cast<int64_t>(d) >= x.ndim()) c.fail("shape entry 0 at " + std::to_string(d) + " beyond the input's rank");
      shape[d] = x.shape()[d];
    }
  return shape;
}

Tensor reshape_to(const Tensor& x, const Shape& s) { return ops::reshape(ops::contiguous(x), s); }

Ts unsqueeze(const Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> axes = c.ints("axes");
  const int64_t rank = x.ndim() + static_cast<int64_t>(axes.size());
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    const int64_t d = c.axis(a, rank);
    if (inserted[d]) c.fail("axis " + std::to_string(a) + " is repeated in axes");
    inserted[d] = true;
  }
  Shape s;
  for (int64_t d = 0, k = 0; d < rank; ++d) s.push_back(inserted[d] ? 1 : x.shape()[k++]);
  return {reshape_to(x, s)};
}

Ts squeeze(const Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> axes = c.ints("axes");
  std::vector<bool> drop(x.ndim(), axes.empty());
  for (int64_t a : axes) {
    const int64_t d = c.axis(a, x.ndim());
    if (x.shape()[d] != 1) c.fail("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(x.shape()[d]));
    drop[d] = true;
  }
  Shape s;
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (!(drop[d] && x.shape()[d] == 1)) s.push_back(x.shape()[d]);
  return {reshape_to(x, s)};
}

Ts slice(const Ctx& c) {
  Tensor x = c.x(0);
  const auto starts = c.ints("starts"), ends = c.ints("ends");
  auto axes = c.ints("axes"), steps = c.ints("steps");
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.fail("starts, ends, axes and steps differ in length");
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t ax = c.axis(axes[k], x.ndim());
    if (steps[k] == 0) c.fail("a slice step is 0");
    if (steps[k] > 0) {
      x = ops::slice(x, ax, starts[k], ends[k], steps[k]);
      continue;
    }
    // A negative step (exporters reverse pad lists with it): start clamped to [0, n-1], end to
    // [-1, n-1], the rows taken one by one.
    const int64_t n = x.shape()[ax];
    auto norm = [n](int64_t v) { return v < 0 ? (v < -n ? -1 : v + n) : v; };
    const int64_t from = std::clamp<int64_t>(norm(starts[k]), 0, n - 1), to = std::clamp<int64_t>(norm(ends[k]), -1, n - 1);
    Ts rows;
    for (int64_t i = from; n > 0 && i > to; i += steps[k]) rows.push_back(ops::slice(x, ax, i, i + 1));
    x = rows.empty() ? ops::slice(x, ax, 0, 0) : rows.size() == 1 ? rows[0] : ops::concat(rows, ax);
  }
  return {x};
}

// Gather with indices known at import: slices joined; with data-dependent indices: embedding.
Ts gather(const Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t axis = c.axis(c.i("axis", 0), x.ndim());
  if (c.has(1)) {
    if (axis != 0 || x.ndim() != 2) c.fail("data-dependent indices are supported for axis 0 of a 2-D table only");
    return {ops::embedding(c.x(1), x)};
  }
  const auto idx = c.ints("indices");
  Ts parts;
  const int64_t size = x.shape()[axis];
  for (int64_t i : idx) {
    if (i < -size || i >= size) c.fail("index " + std::to_string(i) + " is out of range for size " + std::to_string(size));
    const int64_t k = i < 0 ? i + size : i;
    parts.push_back(ops::slice(x, axis, k, k + 1));
  }
  Tensor joined = parts.empty() ? ops::slice(x, axis, 0, 0) : parts.size() == 1 ? parts[0] : ops::concat(parts, axis);
  Shape s(x.shape().begin(), x.shape().begin() + axis);
  for (int64_t d : c.ints("indices_shape")) s.push_back(d);
  s.insert(s.end(), x.shape().begin() + axis + 1, x.shape().end());
  return {reshape_to(joined, s)};
}

Ts shape_of(const Ctx& c) {
  const Shape& s = c.x(0).shape();
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t start = c.i("start", 0), end = c.i("end", r);
  start = std::clamp(start < 0 ? start + r : start, int64_t{0}, r);
  end = std::clamp(end < 0 ? end + r : end, int64_t{0}, r);
  const std::vector<int64_t> v(s.begin() + start, s.begin() + std::max(start, end));
  return {Tensor::from_indices(v, {static_cast<int64_t>(v.size())})};
}

// The fill value is built in its own dtype: int64 values stay exact, F64 is not rounded to float.
Ts constant_of_shape(const Ctx& c) {
  const Shape s = c.ints("shape");
  const int64_t n = c.numel_capped(s);
  DType t = DType::F32;
  Json v = 0;
  if (c.has_attr("value")) {
    const Json& val = c.n.attrs["value"];
    const Json dtype = val.is_object() ? val.value("dtype", Json("F32")) : Json();
    const Json data = val.is_object() ? val.value("data", Json::array()) : Json();
    if (!dtype.is_string() || !data.is_array() || data.size() > 1 || (data.size() == 1 && !data[0].is_number()))
      c.fail("attribute 'value' must be {\"dtype\": name, \"data\": [one number]}, not " + val.dump());
    try {
      t = dtype_from_name(dtype.get<std::string>());
    } catch (const Error& e) {
      c.fail(std::string("attribute 'value': ") + e.what());
    }
    if (data.size() == 1) v = data[0];
    if (!is_floating(t) && !v.is_number_integer()) c.fail("attribute 'value' holds " + v.dump() + " for an integer dtype");
  }
  if (!is_floating(t)) return {Tensor::from_indices(std::vector<int64_t>(n, v.get<int64_t>()), s).to(t)};
  if (t != DType::F64) return {Tensor::full(s, v.get<float>()).to(t)};
  Tensor r = Tensor::empty(s, DType::F64, Device::cpu());
  std::fill_n(r.data<double>(), n, v.get<double>());
  return {r};
}

Ts range(const Ctx& c) {
  const auto a = c.reals("start"), b = c.reals("limit"), d = c.reals("delta");
  if (a.size() != 1 || b.size() != 1 || d.size() != 1 || d[0] == 0) c.fail("start, limit and delta must be scalars, delta != 0");
  const double steps = std::ceil((b[0] - a[0]) / d[0]);
  if (!std::isfinite(steps) || steps > static_cast<double>(kMaxOnnxElements))
    c.fail("start " + std::to_string(a[0]) + ", limit " + std::to_string(b[0]) + ", delta " + std::to_string(d[0]) +
           " do not give a finite length of at most " + std::to_string(kMaxOnnxElements) + " elements");
  const int64_t n = steps > 0 ? static_cast<int64_t>(steps) : 0;
  const DType t = dtype_from_name(c.s("start_dtype", "I64"));
  if (t == DType::I64 || t == DType::I32) {
    std::vector<int64_t> v(n);
    for (int64_t k = 0; k < n; ++k) v[k] = static_cast<int64_t>(a[0] + k * d[0]);
    return {Tensor::from_indices(v, {n}).to(t)};
  }
  std::vector<float> v(n);
  for (int64_t k = 0; k < n; ++k) v[k] = static_cast<float>(a[0] + k * d[0]);
  return {Tensor::from_vector(v, {n}).to(t)};
}

Shape broadcast(const Ctx& c, const Shape& a, const Shape& b) {
  std::optional<Shape> r = broadcast_shapes(a, b);
  if (!r) c.fail("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
  return *r;
}

// Elementwise ops on the host, for shape arithmetic (Equal, Greater, Mod, ...: what exporters
// compute masks and window sizes with): the inputs broadcast and read as doubles, the result
// in `out` (the first input's dtype when null). Their inputs must be known on the host.
using HostFn = double (*)(const std::vector<double>& args);

// Input k of a host-only op: known on the host (a constant, or computed from shapes), not data
// computed from the model's inputs on the device.
void require_host(const Ctx& c, size_t k) {
  if (c.x(k).device() != Device::cpu())
    c.fail("input " + std::to_string(k) + " is computed from the model's inputs; " + c.n.op +
           " runs on the host, for constants and values computed from shapes only");
}

Tensor host_elementwise(const Ctx& c, HostFn f, std::optional<DType> out) {
  for (size_t k = 0; k < c.in.size(); ++k) require_host(c, k);
  Shape s;
  for (size_t k = 0; k < c.in.size(); ++k) s = k == 0 ? c.x(0).shape() : broadcast(c, s, c.x(k).shape());
  c.numel_capped(s);
  std::vector<std::vector<double>> vals;
  for (size_t k = 0; k < c.in.size(); ++k) {
    const Tensor e = ops::expand(c.x(k).to(DType::F64), s).contiguous();
    vals.emplace_back(e.data<double>(), e.data<double>() + e.numel());
  }
  Tensor r = Tensor::empty(s, DType::F64, Device::cpu());
  std::vector<double> args(vals.size());
  for (int64_t i = 0; i < r.numel(); ++i) {
    for (size_t k = 0; k < vals.size(); ++k) args[k] = vals[k][static_cast<size_t>(i)];
    r.data<double>()[i] = f(args);
  }
  return r.to(out.value_or(c.x(0).dtype()));
}

// ScatterND on the host (what exporters build masks with: Swin's shifted-window mask is zeros
// written slice by slice): data with updates written (or combined, `reduction`) at the index
// tuples in the last dimension of `indices`. Its inputs must be known on the host.
Ts scatter_nd(const Ctx& c) {
  for (size_t k = 0; k < 3; ++k) require_host(c, k);
  const Shape& ds = c.x(0).shape();
  const Shape& is = c.x(1).shape();
  const std::string how = c.s("reduction", "none");
  if (how != "none" && how != "add" && how != "mul" && how != "max" && how != "min")
    c.fail("reduction '" + how + "' is not one of none, add, mul, max, min");
  if (is.empty() || is.back() < 1 || is.back() > static_cast<int64_t>(ds.size()))
    c.fail("indices of shape " + shape_str(is) + " do not index data of shape " + shape_str(ds));
  const auto k = static_cast<size_t>(is.back());
  Shape us(is.begin(), is.end() - 1);
  us.insert(us.end(), ds.begin() + static_cast<int64_t>(k), ds.end());
  if (c.x(2).shape() != us) c.fail("updates have shape " + shape_str(c.x(2).shape()) + ", expected " + shape_str(us));
  c.numel_capped(ds);
  c.numel_capped(us);
  Tensor out = c.x(0).to(DType::F64).contiguous().clone();
  const Tensor idx = c.x(1).to(DType::I64).contiguous(), upd = c.x(2).to(DType::F64).contiguous();
  int64_t slice = 1;
  for (size_t d = k; d < ds.size(); ++d) slice *= ds[d];
  double* o = out.data<double>();
  const int64_t* ix = idx.data<int64_t>();
  const double* u = upd.data<double>();
  const int64_t tuples = idx.numel() / static_cast<int64_t>(k);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t at = 0;
    for (size_t d = 0; d < k; ++d) {
      int64_t i = ix[t * static_cast<int64_t>(k) + static_cast<int64_t>(d)];
      if (i < -ds[d] || i >= ds[d])
        c.fail("index tuple " + std::to_string(t) + ": index " + std::to_string(i) + " is outside dimension " +
               std::to_string(d) + " of size " + std::to_string(ds[d]));
      at = at * ds[d] + (i < 0 ? i + ds[d] : i);
    }
    double* dst = o + at * slice;
    const double* src = u + t * slice;
    for (int64_t e = 0; e < slice; ++e)
      dst[e] = how == "none" ? src[e] : how == "add" ? dst[e] + src[e] : how == "mul" ? dst[e] * src[e]
               : how == "max" ? std::max(dst[e], src[e]) : std::min(dst[e], src[e]);
  }
  return {out.to(c.x(0).dtype())};
}

using V = std::vector<double>;
OpFn host_op(HostFn f, std::optional<DType> out = std::nullopt) {
  return [f, out](const Ctx& c) { return Ts{host_elementwise(c, f, out)}; };
}

// Mod: fmod 0 is Python's (the sign of the divisor, integers), fmod 1 C's.
Ts mod(const Ctx& c) {
  if (c.i("fmod", 0)) return host_op([](const V& v) { return std::fmod(v[0], v[1]); })(c);
  return host_op([](const V& v) {
    const double r = std::fmod(v[0], v[1]);
    return r != 0 && (r < 0) != (v[1] < 0) ? r + v[1] : r;
  })(c);
}

Ts pow_op(const Ctx& c) {
  const auto e = c.reals("exponent");
  if (c.has(1) || e.size() != 1) c.fail("only a constant scalar exponent is supported");
  if (e[0] == 2.0) return {ops::mul(c.x(0), c.x(0))};
  if (e[0] == 1.0) return {c.x(0)};
  return {ops::pow(c.x(0), e[0])};
}

Ts gemm(const Ctx& c) {
  const double alpha = c.f("alpha", 1.0), beta = c.f("beta", 1.0);
  const bool ta = c.i("transA", 0) != 0, tb = c.i("transB", 0) != 0;
  const Tensor &a = c.x(0), &b = c.x(1);
  if (alpha == 1.0 && !ta && tb && c.has(2) && c.x(2).ndim() == 1 && (beta == 1.0))
    return {ops::linear(a, b, c.x(2))};
  Tensor y = ops::matmul(a, b, ta, tb);
  if (alpha != 1.0) y = ops::scale(y, alpha);
  if (c.has(2)) y = ops::add(y, beta == 1.0 ? c.x(2) : ops::scale(c.x(2), beta));
  return {y};
}

ops::Size2 pair(const Ctx& c, const char* k, int64_t dflt) {
  auto v = c.ints(k);
  if (v.empty()) return {dflt, dflt};
  if (v.size() != 2) c.fail(std::string("attribute '") + k + "' must have 2 entries (2-D only)");
  return {v[0], v[1]};
}

ops::Size2 pads(const Ctx& c) {
  if (c.s("auto_pad", "NOTSET") != "NOTSET") c.fail("auto_pad is not supported (export with explicit pads)");
  auto p = c.ints("pads");
  if (p.empty()) return {0, 0};
  if (p.size() != 4 || p[0] != p[2] || p[1] != p[3]) c.fail("only symmetric 2-D pads are supported");
  return {p[0], p[1]};
}

ops::Size2 kernel(const Ctx& c) {
  const auto k = c.ints("kernel_shape");
  if (k.size() != 2) c.fail("kernel_shape must have 2 entries (2-D pooling only)");
  return {k[0], k[1]};
}

void check_pool(const Ctx& c, bool ceil_allowed) {
  if (c.i("ceil_mode", 0) != 0 && !ceil_allowed) c.fail("ceil_mode=1 is not supported");
  const auto d = c.ints("dilations");
  if (std::any_of(d.begin(), d.end(), [](int64_t v) { return v != 1; })) c.fail("dilated pooling is not supported");
  if (c.n.outputs.size() > 1) c.fail("the Indices output is not supported");
}

// coerce_2d (opsets before 13, set by the importer): over the input flattened to 2-D at `axis`.
Ts softmax_like(const Ctx& c, Tensor (*fn)(const Tensor&, int64_t)) {
  const Tensor& x = c.x(0);
  if (!c.i("coerce_2d", 0)) return {fn(x, c.i("axis", -1))};
  const int64_t a = c.axis(c.i("axis", 1), x.ndim());
  if (a == x.ndim() - 1) return {fn(x, a)};  // the flattened tail is the last axis itself
  const Shape& s = x.shape();
  const Tensor flat = reshape_to(x, {numel(Shape(s.begin(), s.begin() + a)), numel(Shape(s.begin() + a, s.end()))});
  return {ops::reshape(fn(flat, 1), s)};
}

Ts reduce(const Ctx& c, Tensor (*fn)(const Tensor&, const std::vector<int64_t>&, bool)) {
  const auto axes = c.ints("axes");
  if (axes.empty() && c.i("noop_with_empty_axes", 0)) return {c.x(0)};
  return {fn(c.x(0), axes, c.i("keepdims", 1) != 0)};
}

Tensor mean_axes(const Tensor& x, const std::vector<int64_t>& a, bool k) { return ops::mean(x, a, k); }
Tensor sum_axes(const Tensor& x, const std::vector<int64_t>& a, bool k) { return ops::sum(x, a, k); }
Tensor max_axes(const Tensor& x, const std::vector<int64_t>& a, bool k) { return ops::max(x, a, k); }

const std::map<std::string, OpFn>& op_table() {
  static const std::map<std::string, OpFn> table = {
      {"Identity", [](const Ctx& c) { return Ts{c.x(0)}; }},
      {"Dropout", [](const Ctx& c) {
         if (c.n.outputs.size() < 2) return Ts{c.x(0)};
         return Ts{c.x(0), ops::expand(constant_like(c.x(0), 1.0).to(DType::BOOL), c.x(0).shape())};  // nothing dropped
       }},
      {"Add", [](const Ctx& c) { return Ts{ops::add(c.x(0), c.x(1))}; }},
      {"Sub", [](const Ctx& c) { return Ts{ops::sub(c.x(0), c.x(1))}; }},
      {"Mul", [](const Ctx& c) {
         return Ts{c.has_attr("scalar") ? ops::scale(c.x(0), c.f("scalar", 1.0)) : ops::mul(c.x(0), c.x(1))};
       }},
      {"Div", [](const Ctx& c) {
         return Ts{c.has_attr("scalar") ? ops::scale(c.x(0), 1.0 / c.f("scalar", 1.0)) : ops::div(c.x(0), c.x(1))};
       }},
      {"Pow", pow_op},
      {"Neg", [](const Ctx& c) { return Ts{ops::scale(c.x(0), -1.0)}; }},
      {"Sqrt", [](const Ctx& c) { return Ts{ops::sqrt(c.x(0))}; }},
      {"Erf", [](const Ctx& c) { return Ts{ops::erf(c.x(0))}; }},
      {"Exp", [](const Ctx& c) { return Ts{ops::exp(c.x(0))}; }},
      {"Relu", [](const Ctx& c) { return Ts{ops::relu(c.x(0))}; }},
      {"Gelu", [](const Ctx& c) {  // opset 20's op; the importer also makes it from the erf form
         const std::string a = c.s("approximate", "none");
         if (a != "none" && a != "tanh") c.fail("approximate must be 'none' or 'tanh', got '" + a + "'");
         return Ts{ops::gelu(c.x(0), a)};
       }},
      {"Sigmoid", [](const Ctx& c) { return Ts{ops::sigmoid(c.x(0))}; }},
      {"Clip", clip},
      {"HardSigmoid", [](const Ctx& c) { return Ts{hard_sigmoid(c.x(0), c.f("alpha", 0.2), c.f("beta", 0.5))}; }},
      {"HardSwish", [](const Ctx& c) { return Ts{ops::mul(c.x(0), hard_sigmoid(c.x(0), 1.0 / 6.0, 0.5))}; }},
      {"Pad", pad},
      {"Resize", resize},
      {"LSTM", lstm},
      {"GRU", gru},
      {"RNN", rnn},
      {"Tile", [](const Ctx& c) {
         Tensor x = c.x(0);
         const auto r = c.ints("repeats");
         if (static_cast<int64_t>(r.size()) != x.ndim()) c.fail("repeats must have one entry per dimension");
         for (size_t d = 0; d < r.size(); ++d) {
           if (r[d] < 0) c.fail("a repeat is negative");
           Shape s = x.shape();
           s[d] *= r[d];
           c.numel_capped(s);
           x = r[d] == 1 ? x : ops::concat(Ts(static_cast<size_t>(r[d]), x), static_cast<int64_t>(d));
         }
         return Ts{x};
       }},
      {"Tanh", [](const Ctx& c) { return Ts{ops::tanh(c.x(0))}; }},
      {"Softmax", [](const Ctx& c) { return softmax_like(c, ops::softmax); }},
      {"LogSoftmax", [](const Ctx& c) { return softmax_like(c, ops::log_softmax); }},
      {"Cast", [](const Ctx& c) { return Ts{c.x(0).to(dtype_from_onnx(c.i("to", 1)))}; }},
      {"Equal", host_op([](const V& v) -> double { return v[0] == v[1]; }, DType::BOOL)},
      {"Greater", host_op([](const V& v) -> double { return v[0] > v[1]; }, DType::BOOL)},
      {"Less", host_op([](const V& v) -> double { return v[0] < v[1]; }, DType::BOOL)},
      {"GreaterOrEqual", host_op([](const V& v) -> double { return v[0] >= v[1]; }, DType::BOOL)},
      {"LessOrEqual", host_op([](const V& v) -> double { return v[0] <= v[1]; }, DType::BOOL)},
      {"And", host_op([](const V& v) -> double { return v[0] != 0 && v[1] != 0; }, DType::BOOL)},
      {"Or", host_op([](const V& v) -> double { return v[0] != 0 || v[1] != 0; }, DType::BOOL)},
      {"Not", host_op([](const V& v) -> double { return v[0] == 0; }, DType::BOOL)},
      {"Mod", mod},
      {"Floor", host_op([](const V& v) { return std::floor(v[0]); })},
      {"Ceil", host_op([](const V& v) { return std::ceil(v[0]); })},
      {"Abs", host_op([](const V& v) { return std::fabs(v[0]); })},
      {"Min", host_op([](const V& v) { return *std::min_element(v.begin(), v.end()); })},
      {"Max", host_op([](const V& v) { return *std::max_element(v.begin(), v.end()); })},
      {"Where", [](const Ctx& c) { return Ts{ops::where(c.x(0), c.x(1), c.x(2))}; }},
      {"ScatterND", scatter_nd},
      {"Einsum", einsum},
      {"Shape", shape_of},
      {"ConstantOfShape", constant_of_shape},
      {"Range", range},
      {"Reshape", [](const Ctx& c) { return Ts{reshape_to(c.x(0), resolve_reshape(c, c.x(0), c.ints("shape")))}; }},
      {"Flatten", [](const Ctx& c) {
         const Tensor& x = c.x(0);
         const int64_t a = c.i("axis", 1), ax = a < 0 ? a + x.ndim() : a;
         if (ax < 0 || ax > x.ndim()) c.fail("axis out of range");
         const Shape& s = x.shape();
         return Ts{reshape_to(x, {numel(Shape(s.begin(), s.begin() + ax)), numel(Shape(s.begin() + ax, s.end()))})};
       }},
      {"Transpose", [](const Ctx& c) {
         auto perm = c.ints("perm");
         if (perm.empty())
           for (int64_t d = c.x(0).ndim(); d-- > 0;) perm.push_back(d);
         return Ts{ops::permute(c.x(0), perm)};
       }},
      {"Unsqueeze", unsqueeze},
      {"Squeeze", squeeze},
      {"Concat", [](const Ctx& c) {
         Ts xs;
         for (size_t k = 0; k < c.in.size(); ++k) xs.push_back(c.x(k));
         return Ts{ops::concat(xs, c.i("axis", 0))};
       }},
      {"Slice", slice},
      {"Gather", gather},
      {"Expand", [](const Ctx& c) {
         const Shape s = broadcast(c, c.x(0).shape(), c.ints("shape"));
         c.numel_capped(s);
         return Ts{ops::expand(c.x(0), s)};
       }},
      {"MatMul", [](const Ctx& c) { return Ts{ops::matmul(c.x(0), c.x(1))}; }},
      {"Gemm", gemm},
      {"Conv", [](const Ctx& c) {
         if (c.x(1).ndim() != 4) c.fail("only 2-D convolutions are supported");
         const Tensor bias = c.has(2) ? c.x(2) : Tensor();
         return Ts{ops::conv2d(c.x(0), c.x(1), bias, pair(c, "strides", 1), pads(c), pair(c, "dilations", 1),
                               c.i("group", 1))};
       }},
      {"MaxPool", [](const Ctx& c) {
         check_pool(c, true);
         if (c.i("storage_order", 0) != 0) c.fail("storage_order=1 is not supported");
         const ops::Size2 k = kernel(c), st = pair(c, "strides", 1), p = pads(c);
         const Tensor x = c.i("ceil_mode", 0) ? ceil_pad(c, c.x(0), k, st, p) : c.x(0);
         return Ts{ops::max_pool2d(x, k, st, p)};
       }},
      {"AveragePool", [](const Ctx& c) {
         check_pool(c, false);
         return Ts{ops::avg_pool2d(c.x(0), kernel(c), pair(c, "strides", 1), pads(c), c.i("count_include_pad", 0) != 0)};
       }},
      {"GlobalAveragePool", [](const Ctx& c) { return Ts{ops::adaptive_avg_pool2d(c.x(0), {1, 1})}; }},
      {"BatchNormalization", [](const Ctx& c) {
         if (c.i("training_mode", 0) != 0 || c.n.outputs.size() > 1) c.fail("training mode is not supported");
         return Ts{ops::batch_norm(c.x(0), c.x(1), c.x(2), c.x(3), c.x(4), false, 0.1, c.f("epsilon", 1e-5))};
       }},
      {"LayerNormalization", [](const Ctx& c) {
         const Tensor& x = c.x(0);
         if (c.n.outputs.size() > 1) c.fail("the Mean and InvStdDev outputs are not supported");
         const int64_t a = c.axis(c.i("axis", -1), x.ndim());
         const Shape ns(x.shape().begin() + a, x.shape().end());
         return Ts{ops::layer_norm(x, ns, c.x(1), c.has(2) ? c.x(2) : Tensor(), c.f("epsilon", 1e-5))};
       }},
      {"ReduceMean", [](const Ctx& c) { return reduce(c, mean_axes); }},
      {"ReduceSum", [](const Ctx& c) { return reduce(c, sum_axes); }},
      {"ReduceMax", [](const Ctx& c) { return reduce(c, max_axes); }},
  };
  return table;
}

// What the op table's entries leave out, as users read it; ops not listed are supported as the
// ONNX spec defines them (opsets 11-18).
const std::map<std::string, const char*>& op_limits() {
  static const std::map<std::string, const char*> notes = {
      {"AveragePool", "2-D, floor mode, no dilation, explicit symmetric pads"},
      {"BatchNormalization", "inference (`training_mode` 0, one output)"},
      {"Conv", "2-D, explicit symmetric pads (no `auto_pad`)"},
      {"Dropout", "inference: an alias of its input; the mask output all true"},
      {"Equal", "on the host (shape arithmetic)"},
      {"Greater", "on the host (shape arithmetic)"},
      {"Less", "on the host (shape arithmetic)"},
      {"GreaterOrEqual", "on the host (shape arithmetic)"},
      {"LessOrEqual", "on the host (shape arithmetic)"},
      {"And", "on the host (shape arithmetic)"},
      {"Or", "on the host (shape arithmetic)"},
      {"Not", "on the host (shape arithmetic)"},
      {"Mod", "on the host (shape arithmetic)"},
      {"Floor", "on the host (shape arithmetic)"},
      {"Ceil", "on the host (shape arithmetic)"},
      {"Abs", "on the host (shape arithmetic)"},
      {"Min", "on the host (shape arithmetic)"},
      {"Max", "on the host (shape arithmetic)"},
      {"Gather", "constant indices, or data-dependent indices into axis 0 of a 2-D table (embedding)"},
      {"Gelu", "`approximate` none or tanh; older opsets' Div-Erf-Add-Mul-Mul chain is fused into it"},
      {"LayerNormalization", "one output (no Mean/InvStdDev)"},
      {"MaxPool", "2-D, no dilation, explicit symmetric pads, no Indices output"},
      {"Clip", "a constant or shape-derived `min`/`max` (inputs, or attributes before opset 11)"},
      {"LSTM", "one fused kernel per direction (the sequence loop inside); default activations, no clip, peepholes, "
               "input_forget or sequence_lens"},
      {"GRU", "one fused kernel per direction (the sequence loop inside); default activations, no clip or sequence_lens"},
      {"RNN", "one fused kernel per direction (the sequence loop inside); tanh or relu, no clip or sequence_lens"},
      {"Resize", "the two spatial axes of NCHW, `nearest` (every `nearest_mode`) or `linear`; `half_pixel`, "
                 "`pytorch_half_pixel`, `align_corners`, `asymmetric`; no antialias"},
      {"Pad", "`constant`, `reflect` and `edge` modes, negative pads crop; `pads`/`axes` known at import"},
      {"Pow", "a constant scalar exponent"},
      {"ScatterND", "on the host (constants and values computed from shapes: masks); every `reduction`"},
      {"Einsum", "one or two operands, `...` broadcasting; no repeated label within an operand (diagonals)"},
      {"Softmax", "opsets before 13: over the input flattened to 2-D at `axis`, as specified then"},
      {"LogSoftmax", "opsets before 13: over the input flattened to 2-D at `axis`, as specified then"},
  };
  return notes;
}

}  // namespace

std::string supported_onnx_ops_markdown() {
  for (const auto& [op, note] : op_limits())
    if (!op_table().count(op)) throw std::logic_error("op_limits names '" + op + "', which the op table lacks");
  std::string md = "| Op | Supported | Known at import |\n|---|---|---|\n";
  for (const auto& [op, fn] : op_table()) {
    auto it = op_limits().find(op);
    std::string host;
    for (const HostInput& h : host_inputs(op))
      if (h.required) host += (host.empty() ? "`" : ", `") + std::string(h.attr) + "`";
    md += "| " + op + " | " + (it == op_limits().end() ? "as specified" : it->second) + " | " + host + " |\n";
  }
  return md;
}

DType dtype_from_onnx(int64_t t) {
  switch (t) {
    case 1: return DType::F32;
    case 2: return DType::U8;
    case 6: return DType::I32;
    case 7: return DType::I64;
    case 9: return DType::BOOL;
    case 10: return DType::F16;
    case 11: return DType::F64;
    case 16: return DType::BF16;
  }
  throw DTypeError("ONNX element type " + std::to_string(t) + " is not supported");
}

int64_t onnx_from_dtype(DType t) {
  for (int64_t onnx : {1, 2, 6, 7, 9, 10, 11, 16})
    if (dtype_from_onnx(onnx) == t) return onnx;
  throw DTypeError(std::string("dtype ") + dtype_name(t) + " has no ONNX element type hgraph writes");
}

const std::vector<HostInput>& host_inputs(const std::string& op) {
  static const std::map<std::string, std::vector<HostInput>> table = {
      {"Reshape", {{1, "shape", true}}},
      {"Expand", {{1, "shape", true}}},
      {"ConstantOfShape", {{0, "shape", true}}},
      {"Unsqueeze", {{1, "axes", true}}},
      {"Squeeze", {{1, "axes", true}}},
      {"ReduceSum", {{1, "axes", true}}},
      {"ReduceMean", {{1, "axes", true}}},
      {"ReduceMax", {{1, "axes", true}}},
      {"Slice", {{1, "starts", true}, {2, "ends", true}, {3, "axes", true}, {4, "steps", true}}},
      {"Range", {{0, "start", true}, {1, "limit", true}, {2, "delta", true}}},
      {"Gather", {{1, "indices", false}}},
      {"Pow", {{1, "exponent", false}}},
      {"Clip", {{1, "min", true}, {2, "max", true}}},
      {"Pad", {{1, "pads", true}, {2, "constant_value", true}, {3, "axes", true}}},
      {"Resize", {{1, "roi", true}, {2, "scales", true}, {3, "sizes", true}}},
      {"Tile", {{1, "repeats", true}}},
  };
  static const std::vector<HostInput> none;
  auto it = table.find(op);
  return it == table.end() ? none : it->second;
}

void fold_host_value(OpNode& n, const HostInput& h, const Tensor& value) {
  const Tensor v = value.contiguous();
  Json list = Json::array();
  if (is_floating(v.dtype())) {
    const Tensor d = v.to(DType::F64);
    for (int64_t k = 0; k < d.numel(); ++k) list.push_back(d.data<double>()[k]);
  } else {
    for (int64_t x : v.to(DType::I64).to_indices()) list.push_back(x);
  }
  n.attrs[h.attr] = std::move(list);
  n.attrs[std::string(h.attr) + "_shape"] = v.shape();
  n.attrs[std::string(h.attr) + "_dtype"] = dtype_name(v.dtype());
  n.inputs[h.slot].clear();
}

std::optional<int64_t> capped_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > kMaxOnnxElements) return std::nullopt;
  return n;
}

bool is_supported_onnx_op(const std::string& op) { return op_table().count(op) != 0; }

std::vector<Tensor> run_onnx_node(const OpNode& node, const std::vector<Tensor>& in, int64_t batch) {
  auto it = op_table().find(node.op);
  if (it == op_table().end()) throw InvalidArgument("ONNX node '" + node.name + "': unsupported op '" + node.op + "'");
  Ctx c{node, in, batch};
  Ts out = it->second(c);
  if (out.size() != node.outputs.size()) c.fail("produces " + std::to_string(out.size()) + " outputs, the node names " +
                                                std::to_string(node.outputs.size()));
  return out;
}

}  // namespace hg::models
