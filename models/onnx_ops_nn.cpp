// The ONNX ops of onnx_ctx.h's first group: Clip, HardSigmoid, HardSwish and the clamps they are
// built from, Pad, MaxPool's ceil mode, Resize.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "models/onnx_ctx.h"

namespace hg::models::onnx_detail {

// A tensor of x's rank with every dimension 1, holding v: made by graph ops from x (x^0 * v of
// one element), so a captured graph computes it instead of reading a buffer made on the host.
Tensor constant_like(const Tensor& x, double v) {
  Tensor one = x;
  // From the last dim to the first: a compiled graph keeping x channels-last reorders only the
  // [N, C, 1, 1] corner, not the whole map, before the slice along the channels.
  for (int64_t d = x.ndim(); d-- > 0;) one = ops::slice(one, d, 0, 1);
  if (!is_floating(x.dtype())) return Tensor::full(one.shape(), static_cast<float>(v)).to(x.dtype()).to(x.device());
  return ops::scale(ops::pow(one, 0.0), v);
}

// min(max(x, lo), hi) from relu: lo + relu(x - lo), then hi - relu(hi - y) (exact to an ulp
// of the bounds; an absent bound is skipped). HardSigmoid and HardSwish are built on it: as
// relu, add and sub it fuses with their scale and product into one element-wise program.
static Tensor clamp(Tensor x, std::optional<double> lo, std::optional<double> hi) {
  if (lo && *lo == 0) x = ops::relu(x);
  else if (lo) x = ops::add(ops::relu(ops::add(x, constant_like(x, -*lo))), constant_like(x, *lo));
  if (hi) x = ops::sub(constant_like(x, *hi), ops::relu(ops::sub(constant_like(x, *hi), x)));
  return x;
}

Ts clip(const Ctx& c) {
  // opset 11+: min and max are inputs (folded into attrs "min"/"max" as host inputs); before:
  // attributes of the same names.
  auto bound = [&](const char* k) -> std::optional<double> {
    const auto v = c.reals(k);
    if (v.size() > 1) c.fail(std::string(k) + " must be a scalar");
    return v.empty() ? std::nullopt : std::optional<double>(v[0]);
  };
  const auto lo = bound("min"), hi = bound("max");
  // A float Clip is one clamp op (ReLU6 becomes its convolution's post-op); min > max (every
  // element becomes max, as numpy's clip) and integer tensors take the relu form.
  if (is_floating(c.x(0).dtype()) && (!lo || !hi || *lo <= *hi))
    return {ops::clamp(c.x(0), lo.value_or(-INFINITY), hi.value_or(INFINITY))};
  return {clamp(c.x(0), lo, hi)};
}

Tensor hard_sigmoid(const Tensor& x, double alpha, double beta) {
  return clamp(ops::add(ops::scale(x, alpha), constant_like(x, beta)), 0.0, 1.0);
}

// Constant `dims` edges of value v around axis `axis` of x: [before | x | after] (negative: crop).
static Tensor pad_axis(const Ctx& c, Tensor x, int64_t axis, int64_t before, int64_t after, const std::string& mode, double v) {
  const int64_t n = x.shape()[axis];
  if (before < 0 || after < 0) {
    if (-std::min<int64_t>(before, 0) - std::min<int64_t>(after, 0) > n) c.fail("pads crop more than the input holds");
    x = ops::slice(x, axis, std::max<int64_t>(-before, 0), n + std::min<int64_t>(after, 0));
    before = std::max<int64_t>(before, 0), after = std::max<int64_t>(after, 0);
  }
  if (before == 0 && after == 0) return x;
  const int64_t m = x.shape()[axis];
  auto block = [&](int64_t count, bool front) {
    if (mode == "constant") {
      Shape s = x.shape();
      s[axis] = count;
      return ops::expand(constant_like(ops::slice(x, axis, 0, 1), v), s);
    }
    Ts rows;  // edge: the border row repeated; reflect: the rows next to it, mirrored
    for (int64_t k = 0; k < count; ++k) {
      int64_t r = mode == "edge" ? (front ? 0 : m - 1) : front ? count - k : m - 2 - k;
      if (mode == "reflect" && (r < 0 || r >= m)) c.fail("reflect pads of " + std::to_string(count) + " need more than " +
                                                         std::to_string(m) + " elements");
      rows.push_back(ops::slice(x, axis, r, r + 1));
    }
    return rows.size() == 1 ? rows[0] : ops::concat(rows, axis);
  };
  Ts parts;
  if (before) parts.push_back(block(before, true));
  parts.push_back(x);
  if (after) parts.push_back(block(after, false));
  return ops::concat(parts, axis);
}

Ts pad(const Ctx& c) {
  Tensor x = c.x(0);
  const std::string mode = c.s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") c.fail("mode '" + mode + "' is not supported");
  const auto p = c.ints("pads");
  auto axes = c.ints("axes");
  if (axes.empty())
    for (int64_t d = 0; d < x.ndim(); ++d) axes.push_back(d);
  if (p.size() != 2 * axes.size()) c.fail("pads has " + std::to_string(p.size()) + " entries for " + std::to_string(axes.size()) + " axes");
  const auto value = c.reals("constant_value");
  for (size_t k = 0; k < axes.size(); ++k)
    x = pad_axis(c, x, c.axis(axes[k], x.ndim()), p[k], p[k + axes.size()], mode, value.empty() ? 0.0 : value[0]);
  return {x};
}

// ceil_mode=1: the extra output row/column of each spatial axis comes from padding the bottom/
// right with -inf by what floor mode lacks (a window must start inside the input or the left
// padding, as ONNX and PyTorch define it).
Tensor ceil_pad(const Ctx& c, Tensor x, ops::Size2 k, ops::Size2 s, ops::Size2 p) {
  for (size_t d = 0; d < 2; ++d) {
    const int64_t n = x.shape()[2 + d], span = n + 2 * p[d] - k[d];
    if (span < 0) continue;
    int64_t out = (span + s[d] - 1) / s[d] + 1;
    if ((out - 1) * s[d] >= n + p[d]) --out;
    const int64_t extra = (out - 1) * s[d] + k[d] - (n + 2 * p[d]);
    if (extra > 0)
      x = pad_axis(c, x, static_cast<int64_t>(2 + d), 0, extra, "constant", -std::numeric_limits<double>::infinity());
  }
  return x;
}

// Resize of the two spatial axes of NCHW, nearest or linear, as Y = Mh · X · Mwᵀ with the
// interpolation matrices built on the host for these sizes (two matmuls; each row of M holds
// the one or two weights of its output position).
static Tensor resize_matrix(const Ctx& c, int64_t in, int64_t out, double scale, bool linear) {
  const std::string ct = c.s("coordinate_transformation_mode", "half_pixel");
  const std::string nm = c.s("nearest_mode", "round_prefer_floor");
  std::vector<float> m(static_cast<size_t>(in * out), 0.0f);
  for (int64_t o = 0; o < out; ++o) {
    double x;
    if (ct == "half_pixel") x = (o + 0.5) / scale - 0.5;
    else if (ct == "pytorch_half_pixel") x = out > 1 ? (o + 0.5) / scale - 0.5 : 0.0;
    else if (ct == "align_corners") x = out > 1 ? static_cast<double>(o) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
    else if (ct == "asymmetric") x = o / scale;
    else c.fail("coordinate_transformation_mode '" + ct + "' is not supported");
    float* row = &m[static_cast<size_t>(o * in)];
    if (linear) {
      x = std::clamp(x, 0.0, static_cast<double>(in - 1));
      const auto x0 = static_cast<int64_t>(std::floor(x)), x1 = std::min(x0 + 1, in - 1);
      const double w = x - static_cast<double>(x0);
      row[x0] += static_cast<float>(1.0 - w);
      row[x1] += static_cast<float>(w);
      continue;
    }
    double r;
    if (nm == "floor") r = std::floor(x);
    else if (nm == "ceil") r = std::ceil(x);
    else if (nm == "round_prefer_floor") r = x == std::floor(x) + 0.5 ? std::floor(x) : std::round(x);
    else if (nm == "round_prefer_ceil") r = x == std::floor(x) + 0.5 ? std::ceil(x) : std::round(x);
    else c.fail("nearest_mode '" + nm + "' is not supported");
    row[static_cast<size_t>(std::clamp<int64_t>(static_cast<int64_t>(r), 0, in - 1))] = 1.0f;
  }
  return Tensor::from_vector(m, {out, in});
}

Ts resize(const Ctx& c) {
  const Tensor& x = c.x(0);
  const std::string mode = c.s("mode", "nearest");
  if (mode != "nearest" && mode != "linear") c.fail("mode '" + mode + "' is not supported (nearest, linear)");
  if (x.ndim() != 4 || !is_floating(x.dtype())) c.fail("only 4-D floating inputs (NCHW) are supported");
  if (c.i("antialias", 0)) c.fail("antialias is not supported");
  const auto scales = c.reals("scales");
  const auto sizes = c.ints("sizes");
  const Shape& s = x.shape();
  int64_t out[2];
  double scale[2];
  for (int d = 0; d < 2; ++d) {
    const size_t k = static_cast<size_t>(2 + d);
    if (sizes.size() == 4) {
      if (sizes[0] != s[0] || sizes[1] != s[1]) c.fail("only the two spatial axes may be resized");
      out[d] = sizes[k], scale[d] = static_cast<double>(out[d]) / static_cast<double>(s[k]);
    } else if (scales.size() == 4) {
      if (scales[0] != 1 || scales[1] != 1) c.fail("only the two spatial axes may be resized");
      scale[d] = scales[k], out[d] = static_cast<int64_t>(std::floor(static_cast<double>(s[k]) * scale[d]));
    } else {
      c.fail("needs 4 scales or 4 sizes");
    }
    if (out[d] < 1 || scale[d] <= 0 || out[d] > (int64_t{1} << 20)) c.fail("output size " + std::to_string(out[d]) + " is out of range");
  }
  c.numel_capped({s[0], s[1], out[0], out[1]});
  const bool linear = mode == "linear";
  const Tensor mh = resize_matrix(c, s[2], out[0], scale[0], linear).to(x.dtype()).to(x.device());
  const Tensor mw = resize_matrix(c, s[3], out[1], scale[1], linear).to(x.dtype()).to(x.device());
  return {ops::matmul(mh, ops::matmul(x, mw, false, true))};
}

}  // namespace hg::models::onnx_detail
