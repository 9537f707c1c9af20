#include "engine/sdpa_backward.h"

#include "engine/autocast.h"
#include "engine/fused_ops.h"
#include "engine/ops.h"

namespace hg {

namespace {

// The scores the forward kernel softmaxes: scale q kᵀ, then the mask and the causal fill in
// the order the attributes give.
Tensor masked_scores(const std::vector<Tensor>& in, const Attrs& a) {
  const int64_t kind = a.i(0), causal = a.i(1);
  Tensor s = ops::scale(ops::bmm(in[0], in[1], false, a.i(2) == 0), a.f(0, 1.0));
  if (causal == sdpa::kCausalBeforeMask) s = ops::causal_fill(s, a.f(1));
  switch (kind) {
    case sdpa::kWhere: s = ops::where(in[3], s, in[4].reshape({})); break;
    case sdpa::kMaskedFill: s = ops::masked_fill(s, in[3], a.f(2)); break;
    case sdpa::kAdd: s = ops::add(s, in[3]); break;
    default: break;
  }
  if (causal == sdpa::kCausalAfterMask) s = ops::causal_fill(s, a.f(1));
  return s;
}

// Zeroes the gradient where the forward wrote a constant instead of a score.
Tensor unmask(Tensor ds, const std::vector<Tensor>& in, const Attrs& a) {
  if (a.i(1) != sdpa::kNotCausal) ds = ops::causal_fill(ds, 0.0);
  if (a.i(0) == sdpa::kWhere) ds = ops::where(in[3], ds, Tensor::full({}, 0.0f, ds.device()));
  if (a.i(0) == sdpa::kMaskedFill) ds = ops::masked_fill(ds, in[3], 0.0);
  return ds;
}

}  // namespace

std::vector<Tensor> sdpa_backward(const std::vector<Tensor>& in, const Tensor& grad, const Attrs& a) {
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  const bool kt = a.i(2) != 0;
  AutocastGuard f32(false);  // F32 throughout, like the forward kernel
  const Tensor g = grad.to(DType::F32);
  const Tensor s = masked_scores(in, a);
  std::vector<Tensor> out(in.size());
  if (v.requires_grad()) out[2] = ops::bmm(ops::softmax(s, -1), g, true, false);  // [..., S, Dv]
  // An additive mask is a term of the scores: its gradient is the scores' (summed over the
  // dims it was broadcast along), zero where the causal fill replaced the score.
  const bool mask_grad = a.i(0) == sdpa::kAdd && in[3].requires_grad();
  if (!q.requires_grad() && !k.requires_grad() && !mask_grad) return out;
  const Tensor dp = ops::bmm(g, v, false, true);  // [..., L, S]
  Tensor ds = unmask(dispatch("softmax_backward", {dp, s}, Attrs{{s.ndim() - 1, 0}, {}}), in, a);
  if (mask_grad) out[3] = ops::sum_to(ds, in[3].shape()).to(in[3].dtype());
  ds = ops::scale(ds, a.f(0, 1.0));
  if (q.requires_grad()) out[0] = ops::bmm(ds, k, false, kt);  // [..., L, D]
  if (k.requires_grad()) out[1] = kt ? ops::bmm(q, ds, true, false) : ops::bmm(ds, q, true, false);  // k's layout
  return out;
}

}  // namespace hg
