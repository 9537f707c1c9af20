// The shape family: permute, contiguous, slice, concat (variadic) and batched matmul —
// schemas, backward formulas and the public wrappers of engine/ops_shape.h.
#include <algorithm>
#include <numeric>

#include "engine/error.h"
#include "engine/kernels.h"
#include "engine/kernels_shape.h"
#include "engine/op_attrs.h"
#include "engine/op_families.h"
#include "engine/ops.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using Metas = std::vector<TensorMeta>;
using Ts = std::vector<Tensor>;
using namespace schema;

int64_t rank_of(const TensorMeta& m) { return static_cast<int64_t>(m.shape.size()); }

// ---- permute / contiguous ----

TensorMeta infer_permute(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int64_t n = rank_of(in[0]);
  if (static_cast<int64_t>(a.ints.size()) != n)
    fail(op, in, "dims " + shape_str(a.ints) + " must list each of the " + std::to_string(n) + " dims once");
  std::vector<bool> seen(n, false);
  Shape out(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = norm_dim(op, in, a.ints[i]);
    if (seen[d]) fail(op, in, "dims " + shape_str(a.ints) + " repeat dim " + std::to_string(d));
    seen[d] = true;
    out[i] = in[0].shape[d];
  }
  return {out, in[0].dtype};
}

Ts bw_permute(const Ts& in, const Tensor& g, const Attrs& a) {
  const int64_t n = in[0].ndim();
  Shape inv(n);
  for (int64_t i = 0; i < n; ++i) inv[a.ints[i] < 0 ? a.ints[i] + n : a.ints[i]] = i;
  return {dispatch("permute", {g}, Attrs{inv, {}})};
}

TensorMeta infer_identity(const OpSchema&, const Metas& in, const Attrs&) { return in[0]; }
Ts bw_identity(const Ts&, const Tensor& g, const Attrs&) { return {g}; }

// ---- slice ----
// attrs {dim, start, end, step}: the wrapper has already applied Python's index rules, so
// 0 <= start <= end <= size here.

int64_t slice_len(int64_t start, int64_t end, int64_t step) { return end > start ? (end - start + step - 1) / step : 0; }

TensorMeta infer_slice(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int64_t d = norm_dim(op, in, a.i(0)), start = a.i(1), end = a.i(2), step = a.i(3);
  const int64_t size = in[0].shape[d];
  if (step <= 0) fail(op, in, "slice step must be positive, got " + std::to_string(step));
  if (start < 0 || end < start || end > size)
    fail(op, in, "slice [" + std::to_string(start) + ":" + std::to_string(end) + "] out of range for dim " +
                     std::to_string(d) + " of size " + std::to_string(size));
  Shape s = in[0].shape;
  s[d] = slice_len(start, end, step);
  return {s, in[0].dtype};
}

Ts bw_slice(const Ts& in, const Tensor& g, const Attrs& a) {
  const int64_t d = a.i(0) < 0 ? a.i(0) + in[0].ndim() : a.i(0);
  return {dispatch("slice_backward", {g}, Attrs{{d, a.i(1), a.i(3), in[0].shape()[d]}, {}})};
}

// attrs {dim, start, step, size}: scatters a slice's gradient into zeros of the full size.
TensorMeta infer_slice_backward(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int64_t d = norm_dim(op, in, a.i(0)), start = a.i(1), step = a.i(2), size = a.i(3);
  const int64_t len = in[0].shape[d];
  if (step <= 0 || start < 0 || (len > 0 && start + (len - 1) * step >= size) || start > size)
    fail(op, in, "slice of " + std::to_string(len) + " from " + std::to_string(start) + " by " + std::to_string(step) +
                     " does not fit a dim of size " + std::to_string(size));
  Shape s = in[0].shape;
  s[d] = size;
  return {s, in[0].dtype};
}

Ts bw_slice_backward(const Ts& in, const Tensor& g, const Attrs& a) {
  const int64_t len = in[0].shape()[a.i(0)];
  return {dispatch("slice", {g}, Attrs{{a.i(0), a.i(1), a.i(1) + (len ? (len - 1) * a.i(2) + 1 : 0), a.i(2)}, {}})};
}

// ---- concat (variadic) ----

TensorMeta infer_concat(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int64_t d = norm_dim(op, in, a.i(0));
  Shape s = in[0].shape;
  s[d] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    expect_same_dtype(op, in, 0, i);
    if (in[i].shape.size() != in[0].shape.size()) fail(op, in, "input " + std::to_string(i) + " has a different rank");
    for (size_t k = 0; k < s.size(); ++k)
      if (static_cast<int64_t>(k) != d && in[i].shape[k] != in[0].shape[k])
        fail(op, in, "input " + std::to_string(i) + " differs in dim " + std::to_string(k) + " (concatenating along " +
                         std::to_string(d) + ")");
    s[d] += in[i].shape[d];
  }
  return {s, in[0].dtype};
}

Ts bw_concat(const Ts& in, const Tensor& g, const Attrs& a) {
  const int64_t d = a.i(0) < 0 ? a.i(0) + g.ndim() : a.i(0);
  Ts out;
  int64_t off = 0;
  for (const Tensor& t : in) {
    const int64_t len = t.shape()[d];
    out.push_back(t.requires_grad() ? ops::slice(g, d, off, off + len) : Tensor());
    off += len;
  }
  return out;
}

// ---- bmm ----

TensorMeta infer_bmm(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_same_dtype(op, in, 0, 1);
  if (in[0].dtype != DType::F32 && in[0].dtype != DType::BF16)
    throw DTypeError(op_context(op, in) + ": supports F32 and BF16");
  const size_t ra = in[0].shape.size(), rb = in[1].shape.size();
  if (ra < 2 || rb < 2) fail(op, in, "operands need rank >= 2");
  if (std::max(ra, rb) > 12) fail(op, in, "at most 10 batch dims");
  const bool ta = a.i(0), tb = a.i(1);
  const Shape &sa = in[0].shape, &sb = in[1].shape;
  const int64_t m = sa[ra - 2 + ta], k = sa[ra - 1 - ta], k2 = sb[rb - 2 + tb], n = sb[rb - 1 - tb];
  if (k != k2) fail(op, in, "inner dimensions differ (" + std::to_string(k) + " vs " + std::to_string(k2) + ")");
  Shape out = broadcast_shape(op, in, Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2));
  out.push_back(m);
  out.push_back(n);
  return {out, in[0].dtype};
}

// Sums a batched gradient [batch..., r, c] down to an operand's shape (its batch dims may be
// fewer or broadcast).
Tensor reduce_to(const Tensor& t, const Shape& shape) {
  const int64_t lead = t.ndim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < t.ndim() - 2; ++d)
    if (d < lead || (shape[d - lead] == 1 && t.shape()[d] != 1)) dims.push_back(d);
  if (dims.empty()) return t.reshape(shape);  // (no dims would mean every dim to sum)
  return ops::sum(t, dims, true).reshape(shape);
}

Tensor rows(const Tensor& t) { return t.reshape({-1, t.shape().back()}); }  // [..., c] -> [n, c]

Ts bw_bmm(const Ts& in, const Tensor& g, const Attrs& a) {
  const Tensor &A = in[0], &B = in[1];
  const bool ta = a.i(0), tb = a.i(1);
  Tensor ga, gb;
  if (A.requires_grad()) {
    ga = !ta ? ops::bmm(g, B, false, !tb) : tb ? ops::bmm(B, g, true, true) : ops::bmm(B, g, false, true);
    ga = reduce_to(ga, A.shape());
  }
  if (B.requires_grad()) {
    if (B.ndim() == 2 && A.ndim() > 2 && !ta) {  // [..., M, K] @ [K, N]: one matmul over all rows
      gb = tb ? ops::bmm(rows(g), rows(A), true, false) : ops::bmm(rows(A), rows(g), true, false);
    } else {
      gb = !tb ? ops::bmm(A, g, !ta, false) : ta ? ops::bmm(g, A, true, true) : ops::bmm(g, A, true, false);
      gb = reduce_to(gb, B.shape());
    }
  }
  return {ga, gb};
}

}  // namespace

void register_shape_ops() {
  namespace k = kernels;
  register_op({"permute", 1, infer_permute, k::prepare_permute, bw_permute});
  register_op({"contiguous", 1, infer_identity, k::prepare_copy, bw_identity, true});
  register_op({"slice", 1, infer_slice, k::prepare_slice, bw_slice});
  register_op({"slice_backward", 1, infer_slice_backward, k::prepare_slice_backward, bw_slice_backward});
  register_op({"concat", -1, infer_concat, k::prepare_concat, bw_concat});
  register_op({"bmm", 2, infer_bmm, k::prepare_bmm, bw_bmm});
  register_reduce_ops();
  register_attention_ops();
}

// ---- public wrappers ----
namespace ops {

namespace {
// Wraps a negative dim when it is in range; leaves it for infer to reject otherwise.
int64_t wrap(int64_t d, int64_t n) { return d < 0 && d >= -n ? d + n : d; }

[[noreturn]] void wrapper_fail(const char* op, const Tensor& x, const std::string& why) {
  throw ShapeError(std::string("op '") + op + "': input " + meta_str(x.meta()) + ": " + why);
}
}  // namespace

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  Shape d = dims;
  for (auto& v : d) v = wrap(v, x.ndim());
  return dispatch("permute", {x}, Attrs{d, {}});
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  const int64_t n = x.ndim();
  d0 = wrap(d0, n), d1 = wrap(d1, n);
  if (d0 < 0 || d1 < 0 || d0 >= n || d1 >= n)
    wrapper_fail("transpose", x, "dims " + std::to_string(d0) + ", " + std::to_string(d1) + " out of range");
  Shape perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return dispatch("permute", {x}, Attrs{perm, {}});
}

Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : dispatch("contiguous", {x}); }
Tensor reshape(const Tensor& x, const Shape& shape) { return x.reshape(shape); }
Tensor view(const Tensor& x, const Shape& shape) { return x.reshape(shape); }

Tensor flatten(const Tensor& x, int64_t start, int64_t end) {
  const int64_t n = x.ndim();
  if (n == 0) return x.reshape({1});
  start = wrap(start, n), end = wrap(end, n);
  if (start < 0 || end >= n || start > end)
    wrapper_fail("flatten", x, "dims " + std::to_string(start) + ".." + std::to_string(end) + " out of range");
  Shape s(x.shape().begin(), x.shape().begin() + start);
  int64_t m = 1;
  for (int64_t d = start; d <= end; ++d) m *= x.shape()[d];
  s.push_back(m);
  s.insert(s.end(), x.shape().begin() + end + 1, x.shape().end());
  return x.reshape(s);
}

Tensor squeeze(const Tensor& x) {
  Shape s;
  for (int64_t v : x.shape())
    if (v != 1) s.push_back(v);
  return s == x.shape() ? x : x.reshape(s);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  const int64_t n = x.ndim(), d = wrap(dim, n);
  if (d < 0 || d >= n) wrapper_fail("squeeze", x, "dim " + std::to_string(dim) + " out of range");
  if (x.shape()[d] != 1) return x;
  Shape s = x.shape();
  s.erase(s.begin() + d);
  return x.reshape(s);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  const int64_t n = x.ndim() + 1, d = wrap(dim, n);
  if (d < 0 || d >= n) wrapper_fail("unsqueeze", x, "dim " + std::to_string(dim) + " out of range");
  Shape s = x.shape();
  s.insert(s.begin() + d, 1);
  return x.reshape(s);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  const int64_t n = x.ndim(), d = wrap(dim, n);
  if (d >= 0 && d < n) {  // Python's rules: wrap negatives once, then clamp to [0, size]
    const int64_t size = x.shape()[d];
    auto clamp = [size](int64_t i) { return std::clamp(i < 0 ? i + size : i, int64_t{0}, size); };
    start = clamp(start), end = std::max(clamp(end), start);
  }
  return dispatch("slice", {x}, Attrs{{d, start, end, step}, {}});
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  // Compiled graphs bind at most 16 inputs per op (graphs::Executable), so larger lists are
  // joined in groups of 16 first.
  constexpr size_t kGroup = 16;
  if (xs.empty()) throw InvalidArgument("op 'concat': no inputs");
  if (xs.size() <= kGroup) return dispatch("concat", xs, Attrs{{xs[0].defined() ? wrap(dim, xs[0].ndim()) : dim}, {}});
  std::vector<Tensor> groups;
  for (size_t i = 0; i < xs.size(); i += kGroup)
    groups.push_back(concat(std::vector<Tensor>(xs.begin() + i, xs.begin() + std::min(xs.size(), i + kGroup)), dim));
  return concat(groups, dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t n = x.ndim(), d = wrap(dim, n);
  if (d < 0 || d >= n) wrapper_fail("split", x, "dim " + std::to_string(dim) + " out of range");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) wrapper_fail("split", x, "negative size in " + shape_str(sizes));
    total += s;
  }
  if (total != x.shape()[d])
    wrapper_fail("split", x, "sizes " + shape_str(sizes) + " add up to " + std::to_string(total) + ", not to dim " +
                                 std::to_string(d) + "'s size " + std::to_string(x.shape()[d]));
  std::vector<Tensor> out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    out.push_back(slice(x, d, off, off + s));
    off += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  const int64_t n = x.ndim(), d = wrap(dim, n);
  if (d < 0 || d >= n) wrapper_fail("split", x, "dim " + std::to_string(dim) + " out of range");
  if (size <= 0) wrapper_fail("split", x, "split size must be positive, got " + std::to_string(size));
  std::vector<int64_t> sizes;
  for (int64_t left = x.shape()[d]; left > 0; left -= size) sizes.push_back(std::min(size, left));
  if (sizes.empty()) sizes.push_back(0);  // torch.split of an empty dim gives one empty piece
  return split(x, sizes, d);
}

Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  return dispatch("bmm", {a, b}, attrs::Bmm{trans_a, trans_b}.pack());
}

}  // namespace ops
}  // namespace hg
