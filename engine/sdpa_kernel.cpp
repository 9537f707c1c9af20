// sdpa (engine/fused_ops.h): scaled dot-product attention in one kernel. The batch (all dims
// before the last two) and the query rows are cut into units of at most kScoreFloats scores:
// whole (batch, head) slices grouped together when they are small (GPT decode: one row each),
// blocks of query rows when one slice is large. Per unit: oneDNN matmul q kᵀ into a per-thread
// scratch, then scale, mask and softmax row by row, then oneDNN matmul with v straight into the
// output. Units run on OpenMP threads when the problem is large enough.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/act_math.h"
#include "engine/dnnl_context.h"
#include "engine/fused_ops.h"
#include "engine/kernels.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using Metas = std::vector<TensorMeta>;
using namespace schema;

// Scores per unit: 64 KB of floats, about an L2-resident tile (BERT's 128 x 128 slice).
constexpr int64_t kScoreFloats = int64_t{1} << 14;
// Multiply-adds from which units are shared among OpenMP threads.
constexpr int64_t kParallelMacs = int64_t{1} << 20;

size_t expected_inputs(int64_t kind) { return kind == sdpa::kNoMask ? 3 : kind == sdpa::kWhere ? 5 : 4; }

TensorMeta infer_sdpa(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int64_t kind = a.i(0), causal = a.i(1);
  if (kind < sdpa::kNoMask || kind > sdpa::kAdd) fail(op, in, "bad mask kind " + std::to_string(kind));
  if (causal < sdpa::kNotCausal || causal > sdpa::kCausalAfterMask) fail(op, in, "bad causal mode " + std::to_string(causal));
  if (in.size() != expected_inputs(kind))
    fail(op, in, "mask kind " + std::to_string(kind) + " takes " + std::to_string(expected_inputs(kind)) + " inputs");
  for (size_t i = 0; i < 3; ++i) expect_dtype(op, in, i, DType::F32);
  const size_t r = in[0].shape.size();
  if (r < 2 || in[1].shape.size() != r || in[2].shape.size() != r) fail(op, in, "q, k and v need one rank >= 2");
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
  return {out, DType::F32};
}

// The matmuls of one unit shape: g slices of t query rows. Units run concurrently on OpenMP
// threads, so each call takes its scratchpad from the running thread (scratchpad_mode::user):
// a primitive's own scratchpad is shared by every thread that executes it.
struct UnitCalls {
  kernels::DnnlCall qk, pv;
  size_t qk_scratch, pv_scratch;  // bytes
};

struct Plan {
  int64_t batch, l, s, d, dv, g, t;  // g slices per unit, t rows per unit
  int64_t kind, causal;
  float scale, causal_value, fill_value;
  Shape batch_shape, mask_strides;  // mask strides over [batch..., L, S] (0 along broadcast dims)
  std::map<std::pair<int64_t, int64_t>, UnitCalls> calls;
};

dnnl::memory::desc md3(int64_t a, int64_t b, int64_t c, int64_t sa, int64_t sb, int64_t sc) {
  return dnnl::memory::desc({a, b, c}, dnnl::memory::data_type::f32, dnnl::memory::dims{sa, sb, sc});
}

// src @ weights -> dst with a user scratchpad (its size in bytes goes to `scratch`).
kernels::DnnlCall matmul_call(const dnnl::memory::desc& a, const dnnl::memory::desc& b, const dnnl::memory::desc& c,
                              size_t& scratch) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, kernels::dnnl_engine());
  } catch (const dnnl::error& e) {
    throw InternalError(std::string("sdpa: oneDNN has no matmul for these operands: ") + e.what());
  }
  const dnnl::memory::desc pad = pd.scratchpad_desc();
  scratch = pad.get_size();
  return kernels::DnnlCall(dnnl::matmul(pd),
                           {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, pad}}, true);
}

UnitCalls make_calls(const Plan& p, int64_t g, int64_t t, bool kt) {
  const auto q = md3(g, t, p.d, p.l * p.d, p.d, 1);
  const auto k = kt ? md3(g, p.d, p.s, p.d * p.s, p.s, 1) : md3(g, p.d, p.s, p.s * p.d, 1, p.d);
  const auto sc = md3(g, t, p.s, t * p.s, p.s, 1);
  const auto v = md3(g, p.s, p.dv, p.s * p.dv, p.dv, 1);
  const auto o = md3(g, t, p.dv, p.l * p.dv, p.dv, 1);
  size_t qk_bytes = 0, pv_bytes = 0;
  kernels::DnnlCall qk = matmul_call(q, k, sc, qk_bytes), pv = matmul_call(sc, v, o, pv_bytes);
  return {std::move(qk), std::move(pv), qk_bytes, pv_bytes};
}

// Per-thread buffers, grown once and then reused: the unit's scores, then the matmuls' scratchpad
// (64-byte aligned).
struct Scratch {
  std::vector<float> scores;
  std::vector<std::byte> pad;
  float* scores_for(size_t n) {
    if (scores.size() < n) scores.resize(n);
    return scores.data();
  }
  void* pad_for(size_t bytes) {
    if (pad.size() < bytes + 64) pad.resize(bytes + 64);
    void* ptr = pad.data();
    size_t space = pad.size();
    return std::align(64, bytes, ptr, space);
  }
};

// Scale, mask and softmax one row of scores of slice `b`, query row `i`, in place.
void softmax_row(const Plan& p, const void* const* in, int64_t b, int64_t i, float* row) {
  const int64_t s = p.s;
  const float fill = p.kind == sdpa::kWhere ? *static_cast<const float*>(in[4]) : p.fill_value;
  int64_t mask_off = 0, mask_step = 0;
  if (p.kind != sdpa::kNoMask) {
    const size_t nb = p.batch_shape.size();
    for (size_t d = nb, rest = static_cast<size_t>(b); d-- > 0;) {
      mask_off += static_cast<int64_t>(rest % p.batch_shape[d]) * p.mask_strides[d];
      rest /= p.batch_shape[d];
    }
    mask_off += i * p.mask_strides[nb];
    mask_step = p.mask_strides[nb + 1];
  }
  const bool causal_before = p.causal == sdpa::kCausalBeforeMask, causal_after = p.causal == sdpa::kCausalAfterMask;
  const void* mask = p.kind == sdpa::kNoMask ? nullptr : in[3];
  const uint8_t* bmask = static_cast<const uint8_t*>(mask);
  const float* fmask = static_cast<const float*>(mask);
  for (int64_t j = 0; j < s; ++j) {
    float x = row[j] * p.scale;
    if (causal_before && j > i) x = p.causal_value;
    switch (p.kind) {
      case sdpa::kWhere:
        if (!bmask[mask_off + j * mask_step]) x = fill;
        break;
      case sdpa::kMaskedFill:
        if (bmask[mask_off + j * mask_step]) x = fill;
        break;
      case sdpa::kAdd: x += fmask[mask_off + j * mask_step]; break;
      default: break;
    }
    if (causal_after && j > i) x = p.causal_value;
    row[j] = x;
  }
  float mx = -INFINITY;
  bool nan = false;
  for (int64_t j = 0; j < s; ++j) {
    mx = std::max(mx, row[j]);
    nan |= row[j] != row[j];
  }
  if (nan) mx = NAN;  // as the unfused softmax: a NaN score makes the whole row NaN
  const act::f32x4 m4 = act::splat4(mx), lo = act::splat4(-87.33654f), zero = act::splat4(0.0f);
  act::map4(row, row, s, [&](act::f32x4 x) {
    const act::f32x4 z = x - m4;
    return z < lo ? zero : act::exp4(z);  // e^z below exp4's clamp is 0 (masked scores)
  });
  float sum = 0;
  for (int64_t j = 0; j < s; ++j) sum += row[j];
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < s; ++j) row[j] *= inv;
}

void run_unit(const Plan& p, const UnitCalls& c, const void* const* in, float* out, int64_t b0, int64_t r0, int64_t g,
              int64_t t, Scratch& buf) {
  float* scratch = buf.scores_for(static_cast<size_t>(g * t * p.s));
  void* pad = buf.pad_for(std::max(c.qk_scratch, c.pv_scratch));
  const float* q = static_cast<const float*>(in[0]) + (b0 * p.l + r0) * p.d;
  const float* k = static_cast<const float*>(in[1]) + b0 * p.s * p.d;
  const float* v = static_cast<const float*>(in[2]) + b0 * p.s * p.dv;
  float* o = out + (b0 * p.l + r0) * p.dv;
  if (p.d > 0) {
    const void* qk[] = {q, k, scratch, pad};
    c.qk.run(qk);
  } else {
    std::fill(scratch, scratch + g * t * p.s, 0.0f);
  }
  for (int64_t gi = 0; gi < g; ++gi)
    for (int64_t ti = 0; ti < t; ++ti) softmax_row(p, in, b0 + gi, r0 + ti, scratch + (gi * t + ti) * p.s);
  const void* pv[] = {scratch, v, o, pad};
  c.pv.run(pv);
}

Kernel prepare_sdpa(const Metas& in, const TensorMeta& out, const Attrs& a) {
  const size_t r = out.shape.size();
  auto p = std::make_shared<Plan>();
  p->batch_shape = Shape(out.shape.begin(), out.shape.end() - 2);
  p->batch = numel(p->batch_shape);
  p->l = out.shape[r - 2], p->dv = out.shape[r - 1], p->d = in[0].shape[r - 1];
  p->s = in[2].shape[r - 2];
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
  p->t = std::min(p->l, std::max<int64_t>(1, kScoreFloats / p->s));
  p->g = p->t == p->l ? std::clamp<int64_t>(kScoreFloats / (p->l * p->s), 1, p->batch) : 1;
  const bool kt = a.i(2);
  for (int64_t g : {p->g, p->batch % p->g})
    for (int64_t t : {p->t, p->l % p->t})
      if (g > 0 && t > 0 && !p->calls.count({g, t})) p->calls.emplace(std::pair{g, t}, make_calls(*p, g, t, kt));
  const int64_t groups = (p->batch + p->g - 1) / p->g, blocks = (p->l + p->t - 1) / p->t;
  const bool parallel = groups * blocks > 1 && p->batch * p->l * p->s * (p->d + p->dv) >= kParallelMacs;
  return [p, groups, blocks, parallel](const void* const* in, void* o) {
    float* out = static_cast<float*>(o);
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

void register_sdpa_op() { register_op({"sdpa", -1, infer_sdpa, prepare_sdpa}); }

}  // namespace hg
