// sdpa (engine/fused_ops.h): scaled dot-product attention in one kernel. The batch (all dims
// before the last two) and the query rows are cut into units of at most kScoreFloats scores:
// whole (batch, head) slices grouped together when they are small (GPT decode: one row each),
// blocks of query rows when one slice is large. Per unit, in a per-thread scratch: oneDNN matmul
// q kᵀ scaled, the mask and causal fill row by row, oneDNN softmax in place, then oneDNN matmul
// with v straight into the output. Units run on OpenMP threads when the problem is large enough.
// BF16 q, k, v (graphs that run in reduced precision): BF16 matmuls with FP32 scores, the mask
// and softmax in FP32, the probabilities rounded to BF16 for the product with v; a BF16 output.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "engine/dnnl_context.h"
#include "engine/fused_ops.h"
#include "engine/kernels.h"
#include "engine/schema_util.h"
#include "engine/sdpa_backward.h"

namespace hg {

namespace {

using Metas = std::vector<TensorMeta>;
using namespace schema;

// Scores per unit: 256 KB of floats, L2-resident (four of BERT's 128 x 128 slices). Fewer,
// larger units save the ~2 us each oneDNN call costs.
constexpr int64_t kScoreFloats = int64_t{1} << 16;
// Multiply-adds from which units are shared among OpenMP threads.
constexpr int64_t kParallelMacs = int64_t{1} << 20;

size_t expected_inputs(int64_t kind) { return kind == sdpa::kNoMask ? 3 : kind == sdpa::kWhere ? 5 : 4; }

TensorMeta infer_sdpa(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int64_t kind = a.i(0), causal = a.i(1);
  if (kind < sdpa::kNoMask || kind > sdpa::kAdd) fail(op, in, "bad mask kind " + std::to_string(kind));
  if (causal < sdpa::kNotCausal || causal > sdpa::kCausalAfterMask) fail(op, in, "bad causal mode " + std::to_string(causal));
  if (in.size() != expected_inputs(kind))
    fail(op, in, "mask kind " + std::to_string(kind) + " takes " + std::to_string(expected_inputs(kind)) + " inputs");
  if (in[0].dtype != DType::F32 && in[0].dtype != DType::BF16) fail(op, in, "q must be F32 or BF16");
  for (size_t i = 1; i < 3; ++i) expect_dtype(op, in, i, in[0].dtype);
  const size_t r = in[0].shape.size();
  if (r < 2 || in[1].shape.size() != r || in[2].shape.size() != r) fail(op, in, "q, k and v need the same rank, at least 2");
  for (size_t d = 0; d + 2 < r; ++d)
    if (in[1].shape[d] != in[0].shape[d] || in[2].shape[d] != in[0].shape[d]) fail(op, in, "q, k and v differ in a batch dim");
  const bool kt = a.i(2);
  const int64_t l = in[0].shape[r - 2], d = in[0].shape[r - 1];
  const int64_t s = in[1].shape[r - (kt ? 1 : 2)], dk = in[1].shape[r - (kt ? 2 : 1)];
  if (dk != d) fail(op, in, "q and k differ in the head dim");
  if (in[2].shape[r - 2] != s) fail(op, in, "k and v differ in the sequence length");
  Shape scores(in[0].shape.begin(), in[0].shape.end() - 2);
  scores.push_back(l), scores.push_back(s);
  if (kind != sdpa::kNoMask) {
    expect_dtype(op, in, 3, kind == sdpa::kAdd ? DType::F32 : DType::BOOL);
    if (broadcast_shapes(in[3].shape, scores) != scores) fail(op, in, "the mask does not broadcast to the scores " + shape_str(scores));
  }
  if (kind == sdpa::kWhere) {
    expect_dtype(op, in, 4, DType::F32);
    if (in[4].numel() != 1) fail(op, in, "the fill value must be one element");
  }
  Shape out = std::move(scores);
  out.back() = in[2].shape[r - 1];
  return {out, in[0].dtype};
}

// The primitives of one unit shape (g slices of t query rows): q kᵀ with the scale as output
// scale, softmax over the rows of the scores in place, scores @ v. Units run concurrently on
// OpenMP threads, so each call takes its scratchpad from the running thread
// (scratchpad_mode::user): a primitive's own scratchpad is shared by every thread executing it.
struct UnitCalls {
  kernels::DnnlCall qk, softmax, pv;
  size_t scratchpad;  // bytes, the largest of the three
};

struct Plan {
  int64_t batch, l, s, d, dv, g, t;  // g slices per unit, t rows per unit
  dnnl::memory::data_type dt;        // of q, k, v, the output and the probabilities (f32 or bf16)
  size_t elem;                       // its bytes
  int64_t kind, causal;
  float scale, causal_value, fill_value;
  Shape batch_shape, mask_strides;  // mask strides over [batch..., L, S] (0 along broadcast dims)
  std::map<std::pair<int64_t, int64_t>, UnitCalls> calls;
};

dnnl::memory::desc md3(int64_t a, int64_t b, int64_t c, int64_t sa, int64_t sb, int64_t sc,
                       dnnl::memory::data_type t = dnnl::memory::data_type::f32) {
  return dnnl::memory::desc({a, b, c}, t, dnnl::memory::dims{sa, sb, sc});
}

// A primitive made from `make(attr)`; its args then DNNL_ARG_SCRATCHPAD, whose size goes to `pad`.
template <class PD, class Prim, class Make>
kernels::DnnlCall call_with_scratchpad(Make make, const dnnl::primitive_attr& attr, kernels::DnnlCall::Args args,
                                       size_t& pad) {
  PD pd;
  try {
    pd = make(attr);
  } catch (const dnnl::error& e) {
    throw InternalError(std::string("sdpa: oneDNN rejected a primitive: ") + e.what());
  }
  pad = std::max(pad, pd.scratchpad_desc().get_size());
  args.emplace_back(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc());
  return kernels::DnnlCall(Prim(pd), std::move(args), true);
}

UnitCalls make_calls(const Plan& p, int64_t g, int64_t t, bool kt) {
  using MM = dnnl::matmul::primitive_desc;
  using SM = dnnl::softmax_v2_forward::primitive_desc;
  const dnnl::engine& e = kernels::dnnl_engine();
  const auto q = md3(g, t, p.d, p.l * p.d, p.d, 1, p.dt);
  const auto k = kt ? md3(g, p.d, p.s, p.d * p.s, p.s, 1, p.dt) : md3(g, p.d, p.s, p.s * p.d, 1, p.d, p.dt);
  const auto sc = md3(g, t, p.s, t * p.s, p.s, 1);
  const auto probs = md3(g, t, p.s, t * p.s, p.s, 1, p.dt);
  const auto v = md3(g, p.s, p.dv, p.s * p.dv, p.dv, 1, p.dt);
  const auto o = md3(g, t, p.dv, p.l * p.dv, p.dv, 1, p.dt);
  const dnnl::memory::desc rows({g * t, p.s}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc prob_rows({g * t, p.s}, p.dt, dnnl::memory::format_tag::ab);
  size_t pad = 0;
  dnnl::primitive_attr scaled = kernels::user_scratchpad();
  scaled.set_output_scales(0, {p.scale});
  auto qk = call_with_scratchpad<MM, dnnl::matmul>(
      [&](const dnnl::primitive_attr& a) { return MM(dnnl::matmul::desc(q, k, sc), a, e); }, scaled,
      {{DNNL_ARG_SRC, q}, {DNNL_ARG_WEIGHTS, k}, {DNNL_ARG_DST, sc}}, pad);
  auto softmax = call_with_scratchpad<SM, dnnl::softmax_v2_forward>(
      [&](const dnnl::primitive_attr& a) {
        return SM(dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::softmax_accurate,
                                                 rows, prob_rows, 1),
                  a, e);
      },
      kernels::user_scratchpad(), {{DNNL_ARG_SRC, rows}, {DNNL_ARG_DST, prob_rows}}, pad);
  auto pv = call_with_scratchpad<MM, dnnl::matmul>(
      [&](const dnnl::primitive_attr& a) { return MM(dnnl::matmul::desc(probs, v, o), a, e); },
      kernels::user_scratchpad(), {{DNNL_ARG_SRC, probs}, {DNNL_ARG_WEIGHTS, v}, {DNNL_ARG_DST, o}}, pad);
  return {std::move(qk), std::move(softmax), std::move(pv), pad};
}

// Per-thread buffers, grown once and then reused: the unit's scores, its BF16 probabilities
// and the primitives' scratchpad (64-byte aligned).
struct Scratch {
  std::vector<float> scores;
  std::vector<bf16> probs;
  std::vector<std::byte> pad;
  float* scores_for(size_t n) {
    if (scores.size() < n) scores.resize(n);
    return scores.data();
  }
  bf16* probs_for(size_t n) {
    if (probs.size() < n) probs.resize(n);
    return probs.data();
  }
  void* pad_for(size_t bytes) {
    if (pad.size() < bytes + 64) pad.resize(bytes + 64);
    void* ptr = pad.data();
    size_t space = pad.size();
    return std::align(64, bytes, ptr, space);
  }
};

// The mask and the causal fill on one row of (scaled) scores of slice `b`, query row `i`.
void mask_row(const Plan& p, const void* const* in, int64_t b, int64_t i, float* row) {
  const int64_t s = p.s;
  auto causal = [&] {
    if (i + 1 < s) std::fill(row + i + 1, row + s, p.causal_value);
  };
  if (p.causal == sdpa::kCausalBeforeMask) causal();
  if (p.kind != sdpa::kNoMask) {
    const size_t nb = p.batch_shape.size();
    int64_t off = i * p.mask_strides[nb];
    for (size_t d = nb, rest = static_cast<size_t>(b); d-- > 0;) {
      off += static_cast<int64_t>(rest % p.batch_shape[d]) * p.mask_strides[d];
      rest /= p.batch_shape[d];
    }
    const int64_t step = p.mask_strides[nb + 1];
    const uint8_t* bm = static_cast<const uint8_t*>(in[3]) + off;
    const float* fm = static_cast<const float*>(in[3]) + off;
    switch (p.kind) {
      case sdpa::kWhere: {  // true = may attend
        const float fill = *static_cast<const float*>(in[4]);
        for (int64_t j = 0; j < s; ++j) row[j] = bm[j * step] ? row[j] : fill;
        break;
      }
      case sdpa::kMaskedFill:  // true = masked
        for (int64_t j = 0; j < s; ++j) row[j] = bm[j * step] ? p.fill_value : row[j];
        break;
      default:
        for (int64_t j = 0; j < s; ++j) row[j] += fm[j * step];
        break;
    }
  }
  if (p.causal == sdpa::kCausalAfterMask) causal();
}

void run_unit(const Plan& p, const UnitCalls& c, const void* const* in, void* out, int64_t b0, int64_t r0, int64_t g,
              int64_t t, Scratch& buf) {
  float* scores = buf.scores_for(static_cast<size_t>(g * t * p.s));
  void* probs = p.elem == sizeof(float) ? static_cast<void*>(scores) : buf.probs_for(static_cast<size_t>(g * t * p.s));
  void* pad = buf.pad_for(c.scratchpad);
  auto at = [&](const void* base, int64_t i) { return static_cast<const std::byte*>(base) + i * static_cast<int64_t>(p.elem); };
  const void* q = at(in[0], (b0 * p.l + r0) * p.d);
  const void* k = at(in[1], b0 * p.s * p.d);
  const void* v = at(in[2], b0 * p.s * p.dv);
  void* o = const_cast<std::byte*>(at(out, (b0 * p.l + r0) * p.dv));
  if (p.d > 0) {
    const void* qk[] = {q, k, scores, pad};
    c.qk.run(qk);
  } else {
    std::fill(scores, scores + g * t * p.s, 0.0f);
  }
  if (p.kind != sdpa::kNoMask || p.causal != sdpa::kNotCausal)
    for (int64_t gi = 0; gi < g; ++gi)
      for (int64_t ti = 0; ti < t; ++ti) mask_row(p, in, b0 + gi, r0 + ti, scores + (gi * t + ti) * p.s);
  const void* sm[] = {scores, probs, pad};
  c.softmax.run(sm);
  const void* pv[] = {probs, v, o, pad};
  c.pv.run(pv);
}

Kernel prepare_sdpa(const Metas& in, const TensorMeta& out, const Attrs& a) {
  const size_t r = out.shape.size();
  auto p = std::make_shared<Plan>();
  p->batch_shape = Shape(out.shape.begin(), out.shape.end() - 2);
  p->batch = numel(p->batch_shape);
  p->l = out.shape[r - 2], p->dv = out.shape[r - 1], p->d = in[0].shape[r - 1];
  p->s = in[2].shape[r - 2];
  p->dt = kernels::dnnl_dtype(out.dtype);
  p->elem = dtype_size(out.dtype);
  p->kind = a.i(0), p->causal = a.i(1);
  p->scale = static_cast<float>(a.f(0, 1.0)), p->causal_value = static_cast<float>(a.f(1)),
  p->fill_value = static_cast<float>(a.f(2));
  if (out.numel() == 0) return [](const void* const*, void*) {};
  if (p->s == 0) return [bytes = out.bytes()](const void* const*, void* o) { std::memset(o, 0, bytes); };
  if (p->kind != sdpa::kNoMask) {
    Shape scores = p->batch_shape;
    scores.push_back(p->l), scores.push_back(p->s);
    p->mask_strides = kernels::broadcast_strides(in[3].shape, scores);
  }
  // Work worth sharing is cut into at least one unit per thread.
  const bool big = p->batch * p->l * p->s * (p->d + p->dv) >= kParallelMacs;
  const int64_t threads = big ? std::max(1, omp_get_max_threads()) : 1;
  p->t = std::min(p->l, std::max<int64_t>(1, kScoreFloats / p->s));
  if (p->t == p->l)
    p->g = std::clamp<int64_t>(kScoreFloats / (p->l * p->s), 1, std::max<int64_t>(1, p->batch / threads));
  else
    p->g = 1;
  const bool kt = a.i(2);
  for (int64_t g : {p->g, p->batch % p->g})
    for (int64_t t : {p->t, p->l % p->t})
      if (g > 0 && t > 0 && !p->calls.count({g, t})) p->calls.emplace(std::pair{g, t}, make_calls(*p, g, t, kt));
  const int64_t groups = (p->batch + p->g - 1) / p->g, blocks = (p->l + p->t - 1) / p->t;
  const bool parallel = big && groups * blocks > 1;
  return [p, groups, blocks, parallel](const void* const* in, void* out) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t u = 0; u < groups * blocks; ++u) {
      const int64_t b0 = (u / blocks) * p->g, r0 = (u % blocks) * p->t;
      const int64_t g = std::min(p->g, p->batch - b0), t = std::min(p->t, p->l - r0);
      thread_local Scratch scratch;
      run_unit(*p, p->calls.at({g, t}), in, out, b0, r0, g, t, scratch);
    }
  };
}

}  // namespace

void register_sdpa_op() { register_op({"sdpa", -1, infer_sdpa, prepare_sdpa, sdpa_backward}); }

}  // namespace hg
