// Attention: the causal mask fill and scaled_dot_product_attention, composed from bmm,
// scale, the mask (causal_fill; `where` of the act family for a boolean mask), softmax and
// bmm, so it runs eagerly, lazily and under autograd like any other op chain. BF16 q, k, v
// (or autocast's BF16 bmm) get their scores masked and softmaxed in F32.
//
//   causal_fill: x [..., L, S] -> x; floats {value}: fills [i, j] for j > i
#include <cmath>

#include "engine/error.h"
#include "engine/kernels_shape.h"
#include "engine/op_attrs.h"
#include "engine/ops.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using Metas = std::vector<TensorMeta>;
using Ts = std::vector<Tensor>;
using namespace schema;

void expect_f32_or_f64(const OpSchema& op, const Metas& in, size_t i) {
  if (in[i].dtype != DType::F32 && in[i].dtype != DType::F64)
    throw DTypeError(op_context(op, in) + ": input " + std::to_string(i) + " must be F32 or F64");
}

TensorMeta infer_causal_fill(const OpSchema& op, const Metas& in, const Attrs&) {
  expect_f32_or_f64(op, in, 0);
  if (in[0].shape.size() < 2) fail(op, in, "needs rank >= 2 ([..., L, S])");
  return in[0];
}

Ts bw_causal_fill(const Ts&, const Tensor& g, const Attrs&) {
  return {dispatch("causal_fill", {g}, Attrs{{}, {0.0}})};
}

[[noreturn]] void sdpa_fail(const Ts& t, const std::string& why, bool dtype = false) {
  std::string s = "op 'scaled_dot_product_attention': inputs ";
  for (size_t i = 0; i < t.size(); ++i) s += (i ? ", " : "") + meta_str(t[i].meta());
  s += ": " + why;
  if (dtype) throw DTypeError(s);
  throw ShapeError(s);
}

bool broadcasts_to(const Shape& m, const Shape& s) {
  if (m.size() > s.size()) return false;
  for (size_t i = 0; i < m.size(); ++i) {
    const int64_t a = m[m.size() - 1 - i], b = s[s.size() - 1 - i];
    if (a != b && a != 1) return false;
  }
  return true;
}

}  // namespace

void register_attention_ops() {
  namespace k = kernels;
  register_op({"causal_fill", 1, infer_causal_fill, k::prepare_causal_fill, bw_causal_fill});
}

namespace ops {

Tensor causal_fill(const Tensor& x, double value) { return dispatch("causal_fill", {x}, attrs::CausalFill{value}.pack()); }

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    bool causal, double scale) {
  Ts all{q, k, v};
  if (attn_mask.defined()) all.push_back(attn_mask);
  for (const auto& t : all)
    if (!t.defined()) throw InvalidArgument("op 'scaled_dot_product_attention': q, k and v must be defined");
  for (size_t i = 0; i < 3; ++i)
    if ((all[i].dtype() != DType::F32 && all[i].dtype() != DType::BF16) || all[i].dtype() != q.dtype())
      sdpa_fail(all, "q, k and v must be all F32 or all BF16", true);
  if (attn_mask.defined() && attn_mask.dtype() != DType::BOOL && attn_mask.dtype() != DType::F32)
    sdpa_fail(all, "attn_mask must be BOOL or F32", true);
  if (q.ndim() < 2 || k.ndim() < 2 || v.ndim() < 2) sdpa_fail(all, "q, k and v need rank >= 2 ([..., L, D])");
  if (q.shape().back() != k.shape().back()) sdpa_fail(all, "q and k differ in the head dim");
  if (k.shape()[k.ndim() - 2] != v.shape()[v.ndim() - 2]) sdpa_fail(all, "k and v differ in the sequence length");
  const double s = std::isnan(scale) ? 1.0 / std::sqrt(static_cast<double>(q.shape().back())) : scale;
  // The mask and softmax in F32 also when q and k are BF16 or autocast lowers the bmm.
  Tensor scores = ops::scale(bmm(q, k, false, true), s).to(DType::F32);  // [..., L, S]
  if (attn_mask.defined()) {
    if (!broadcasts_to(attn_mask.shape(), scores.shape()))
      sdpa_fail(all, "attn_mask does not broadcast to the scores " + shape_str(scores.shape()));
    scores = attn_mask.dtype() == DType::BOOL  // true = may attend: -inf where the mask is false
                 ? where(attn_mask, scores, Tensor::full({}, -INFINITY, scores.device()))
                 : add(scores, attn_mask);
  }
  if (causal) scores = causal_fill(scores, -INFINITY);
  return bmm(softmax(scores, -1).to(v.dtype()), v);
}

}  // namespace ops
}  // namespace hg
