// The recurrent op (engine/ops_recurrent.h): per step, the recurrent GEMM h R^T (oneDNN's
// sgemm) added to the step's precomputed input projection, then the gates with the SIMD
// sigmoid/tanh of the activation kernels, the state kept in a per-thread scratch.
#include <algorithm>
#include <cstring>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include "engine/act_math.h"
#include "engine/op.h"
#include "engine/op_families.h"
#include "engine/ops_recurrent.h"
#include "engine/schema_util.h"

namespace hg {
namespace {

using namespace schema;
using ops::RecurrentCell;

int64_t gate_count(int64_t cell) { return cell == 0 ? 4 : cell == 1 ? 3 : 1; }

// ints {cell, reverse, relu, linear_before_reset}
TensorMeta infer_recurrent(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int64_t cell = a.i(0);
  if (cell < 0 || cell > 2) fail(op, in, "bad cell kind " + std::to_string(cell));
  const size_t want = cell == 0 ? 4 : 3;
  if (in.size() != want && !(cell == 1 && in.size() == 4))
    fail(op, in, "expects " + std::to_string(want) + " inputs" + (cell == 1 ? " (or 4 with Rb)" : ""));
  for (size_t i = 0; i < in.size(); ++i) expect_dtype(op, in, i, DType::F32);
  expect_rank(op, in, 0, 3);
  expect_rank(op, in, 1, 2);
  expect_rank(op, in, 2, 2);
  const int64_t t = in[0].shape[0], b = in[0].shape[1], h = in[1].shape[1], gh = gate_count(cell) * h;
  if (in[0].shape[2] != gh || in[1].shape[0] != gh) fail(op, in, "xw's last dim and r's rows must be gates x hidden");
  if (in[2].shape != Shape{b, h}) fail(op, in, "h0 must be [batch, hidden]");
  if (cell == 0 && in[3].shape != Shape{b, h}) fail(op, in, "c0 must be [batch, hidden]");
  if (cell == 1 && in.size() == 4 && in[3].shape != Shape{gh}) fail(op, in, "Rb must be [gates x hidden]");
  if (t < 1) fail(op, in, "the sequence is empty");
  return {{t + (cell == 0 ? 2 : 1), b, h}, DType::F32};
}

void sigmoid_n(float* x, int64_t n) { act::map4(x, x, n, [](act::f32x4 v) { return act::sigmoid4(v); }); }
void tanh_n(float* x, int64_t n) { act::map4(x, x, n, [](act::f32x4 v) { return act::tanh4(v); }); }

// c = a b^T (+ c when accumulate): a [m, k] (row stride lda), b [n, k] (row stride k).
void gemm_nt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, bool accumulate, float* c,
             int64_t ldc) {
  dnnl_sgemm('N', 'T', m, n, k, 1.0f, a, lda, b, k, accumulate ? 1.0f : 0.0f, c, ldc);
}

Kernel prepare_recurrent(const Metas& in, const TensorMeta&, const Attrs& a) {
  const int64_t cell = a.i(0), steps = in[0].shape[0], batch = in[0].shape[1], hidden = in[1].shape[1];
  const bool reverse = a.i(1) != 0, relu = a.i(2) != 0, lbr = a.i(3) != 0, has_rb = cell == 1 && in.size() == 4;
  const int64_t gh = gate_count(cell) * hidden, bh = batch * hidden;
  return [=](const void* const* x, void* y) {
    const auto* xw = static_cast<const float*>(x[0]);
    const auto* r = static_cast<const float*>(x[1]);
    const auto* rb = has_rb ? static_cast<const float*>(x[3]) : nullptr;
    auto* out = static_cast<float*>(y);
    // gates [B, G*H], the GRU's h R^T [B, G*H], h [B, H], c [B, H], the GRU's r * h [B, H]
    thread_local std::vector<float> scratch;
    const size_t need = static_cast<size_t>(2 * batch * gh + 3 * bh);
    if (scratch.size() < need) scratch.resize(need);
    float* g = scratch.data();
    float* hr = g + batch * gh;
    float* h = hr + batch * gh;
    float* c = h + bh;
    float* rh = c + bh;
    std::memcpy(h, x[2], static_cast<size_t>(bh) * sizeof(float));
    if (cell == 0) std::memcpy(c, x[3], static_cast<size_t>(bh) * sizeof(float));
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = reverse ? steps - 1 - s : s;
      const float* xt = xw + t * batch * gh;
      if (cell != 1) {  // gates = x W^T + biases + h R^T
        std::memcpy(g, xt, static_cast<size_t>(batch * gh) * sizeof(float));
        gemm_nt(batch, gh, hidden, h, hidden, r, true, g, gh);
      }
      for (int64_t b = 0; b < batch; ++b) {
        float* hb = h + b * hidden;
        if (cell == 0) {  // i, o, f: sigmoid; c: tanh
          float* gb = g + b * gh;
          float* cb = c + b * hidden;
          sigmoid_n(gb, 3 * hidden);
          tanh_n(gb + 3 * hidden, hidden);
          for (int64_t j = 0; j < hidden; ++j) cb[j] = gb[2 * hidden + j] * cb[j] + gb[j] * gb[3 * hidden + j];
          std::memcpy(hb, cb, static_cast<size_t>(hidden) * sizeof(float));
          tanh_n(hb, hidden);
          for (int64_t j = 0; j < hidden; ++j) hb[j] *= gb[hidden + j];
        } else if (cell == 2) {
          float* gb = g + b * gh;
          if (relu) for (int64_t j = 0; j < hidden; ++j) gb[j] = std::max(gb[j], 0.0f);
          else tanh_n(gb, hidden);
          std::memcpy(hb, gb, static_cast<size_t>(hidden) * sizeof(float));
        }
      }
      if (cell == 1) {  // z, r, h: hr = h R^T + Rb
        gemm_nt(batch, gh, hidden, h, hidden, r, false, hr, gh);
        for (int64_t b = 0; b < batch; ++b) {
          float* hrb = hr + b * gh;
          float* gb = g + b * gh;
          const float* xb = xt + b * gh;
          if (rb)
            for (int64_t j = 0; j < gh; ++j) hrb[j] += rb[j];
          for (int64_t j = 0; j < 2 * hidden; ++j) gb[j] = xb[j] + hrb[j];
          sigmoid_n(gb, 2 * hidden);  // z, r
        }
        if (!lbr) {  // (r * h) R_h^T + Rb_h replaces hr's h part
          for (int64_t b = 0; b < batch; ++b)
            for (int64_t j = 0; j < hidden; ++j) rh[b * hidden + j] = g[b * gh + hidden + j] * h[b * hidden + j];
          gemm_nt(batch, hidden, hidden, rh, hidden, r + 2 * hidden * hidden, false, hr + 2 * hidden, gh);
          if (rb)
            for (int64_t b = 0; b < batch; ++b)
              for (int64_t j = 0; j < hidden; ++j) hr[b * gh + 2 * hidden + j] += rb[2 * hidden + j];
        }
        for (int64_t b = 0; b < batch; ++b) {
          float* gb = g + b * gh;
          const float* hrb = hr + b * gh;
          const float* xb = xt + b * gh;
          float* n = gb + 2 * hidden;
          for (int64_t j = 0; j < hidden; ++j) n[j] = xb[2 * hidden + j] + (lbr ? gb[hidden + j] * hrb[2 * hidden + j] : hrb[2 * hidden + j]);
          tanh_n(n, hidden);
          float* hb = h + b * hidden;
          for (int64_t j = 0; j < hidden; ++j) hb[j] = n[j] + gb[j] * (hb[j] - n[j]);  // (1 - z) n + z h
        }
      }
      std::memcpy(out + t * bh, h, static_cast<size_t>(bh) * sizeof(float));
    }
    std::memcpy(out + steps * bh, h, static_cast<size_t>(bh) * sizeof(float));
    if (cell == 0) std::memcpy(out + (steps + 1) * bh, c, static_cast<size_t>(bh) * sizeof(float));
  };
}

}  // namespace

void register_recurrent_ops() {
  OpSchema s{"recurrent", -1, infer_recurrent, prepare_recurrent};
  register_op(s);
}

namespace ops {
Tensor recurrent(RecurrentCell cell, const Tensor& xw, const Tensor& r, const Tensor& h0, const Tensor& extra,
                 const RecurrentOptions& opt) {
  std::vector<Tensor> in{xw.contiguous(), r.contiguous(), h0.contiguous()};
  if (extra.defined()) in.push_back(extra.contiguous());
  return dispatch("recurrent", std::move(in),
                  Attrs{{static_cast<int64_t>(cell), opt.reverse, opt.relu, opt.linear_before_reset}, {}});
}
}  // namespace ops

}  // namespace hg
