// The recurrent op (engine/ops_recurrent.h): per step, the recurrent GEMM h R^T (a oneDNN matmul
// with pre-packed weights when R is frozen, else oneDNN's sgemm) added to the step's precomputed input projection, then the gates with the SIMD
// sigmoid/tanh of the activation kernels, the state kept in a per-thread scratch.
#include <algorithm>
#include <cstring>
#include <vector>

#include <memory>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/act_math.h"
#include "engine/dnnl_context.h"
#include "engine/error.h"
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

// Below this many multiply-adds a step's GEMM runs on one thread (as the matmul op's).
constexpr int64_t kSingleThreadWork = int64_t{1} << 18;

// The recurrent GEMM of every step: c = a b^T (+ c when accumulate), a [m, k] (rows contiguous),
// b [n, k] (row stride k), c with row stride ldc. m is the batch: 1 to a few rows. With b's data
// known when the kernel is prepared (weights frozen in a captured graph) it is one oneDNN matmul,
// created once, whose weights were reordered once into the layout it prefers (the small-batch
// path: LSTM 2x256 over 64 steps, batch 1 / 8, one thread: 1.64 / 7.18 ms with sgemm, which
// re-reads b in its plain layout at every step); otherwise oneDNN's sgemm.
class StepGemm {
 public:
  StepGemm(int64_t m, int64_t n, int64_t k, int64_t ldc, bool accumulate, const float* constant_b)
      : m_(m), n_(n), k_(k), ldc_(ldc), accumulate_(accumulate) {
    if (!constant_b || m * n * k == 0) return;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a_md({m, k}, dt::f32, dnnl::memory::dims{k, 1});
    const dnnl::memory::desc b_md({k, n}, dt::f32, dnnl::memory::dims{1, k});  // b^T: (p, j) at j * k + p
    const dnnl::memory::desc c_md({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
    dnnl::primitive_attr attr = kernels::user_scratchpad();
    kernels::append_post_ops(attr, FusedAct::None, accumulate);
    try {
      dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(a_md, dnnl::memory::desc({k, n}, dt::f32, dnnl::memory::format_tag::any), c_md), attr,
          kernels::dnnl_engine());
      packed_ = kernels::reorder_once(b_md, constant_b, pd.weights_desc());
      call_ = std::make_shared<kernels::DnnlCall>(
          dnnl::matmul(pd), kernels::DnnlCall::Args{{DNNL_ARG_SRC, a_md}, {DNNL_ARG_WEIGHTS, pd.weights_desc()}, {DNNL_ARG_DST, c_md}},
          m * n * k < kSingleThreadWork);
    } catch (const dnnl::error& e) {
      throw InternalError(std::string("op 'recurrent': oneDNN could not create the step matmul: ") + e.what());
    }
  }
  void run(const float* a, const float* b, float* c) const {
    if (call_) {
      const void* ptrs[] = {a, packed_.get(), c};
      call_->run(ptrs);
      return;
    }
    dnnl_sgemm('N', 'T', m_, n_, k_, 1.0f, a, k_, b, k_, accumulate_ ? 1.0f : 0.0f, c, ldc_);
  }

 private:
  int64_t m_, n_, k_, ldc_;
  bool accumulate_;
  std::shared_ptr<kernels::DnnlCall> call_;
  std::shared_ptr<void> packed_;
};

// `constant_r`: the recurrent weights' data when they are frozen, else null.
Kernel recurrent_kernel(const Metas& in, const Attrs& a, const float* constant_r) {
  const int64_t cell = a.i(0), steps = in[0].shape[0], batch = in[0].shape[1], hidden = in[1].shape[1];
  const bool reverse = a.i(1) != 0, relu = a.i(2) != 0, lbr = a.i(3) != 0, has_rb = cell == 1 && in.size() == 4;
  const int64_t gh = gate_count(cell) * hidden, bh = batch * hidden;
  // LSTM, RNN: gates += h R^T; GRU: hr = h R^T, then (without linear_before_reset) the h part again
  // from r * h and R's last hidden rows.
  const StepGemm step_gemm(batch, gh, hidden, gh, cell != 1, constant_r);
  // Only a GRU has R's last hidden rows (3 hidden rows; an RNN's R has 1): no other cell reads them.
  const StepGemm h_part(batch, hidden, hidden, gh, false,
                        constant_r && cell == 1 ? constant_r + 2 * hidden * hidden : nullptr);
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
        step_gemm.run(h, r, g);
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
        step_gemm.run(h, r, hr);
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
          h_part.run(rh, r + 2 * hidden * hidden, hr + 2 * hidden);
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

Kernel prepare_recurrent(const Metas& in, const TensorMeta&, const Attrs& a) { return recurrent_kernel(in, a, nullptr); }

Kernel prepack_recurrent(const Metas& in, const TensorMeta&, const Attrs& a, const std::vector<const void*>& constant) {
  return recurrent_kernel(in, a, constant.size() > 1 ? static_cast<const float*>(constant[1]) : nullptr);
}

}  // namespace

void register_recurrent_ops() {
  register_op({"recurrent", -1, infer_recurrent, prepare_recurrent, nullptr, false, prepack_recurrent});
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
