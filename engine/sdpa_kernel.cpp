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

// View mode (ints[3] = 1): q, k and v are read in place from the buffers given (one may be the
// same value for all three: a QKV projection) and the output written in its consumer's layout.
// ints[4..9] B, H, L, S, D, Dv; per q, k, v, output four ints from ints[10]: offset, stride of b,
// stride of h, stride of a row (L or S; the last dim is contiguous); then the output's rank and
// shape. The batch is [B, H]; masks must not vary along it.
struct ViewSpec {
  int64_t b, h, l, s, d, dv;
  int64_t at[4][4];  // q, k, v, out: offset, sb, sh, srow
  Shape out;
};

constexpr size_t kViewInts = 26;

bool view_mode(const Attrs& a) { return a.ints.size() > 3 && a.i(3) == 1; }

ViewSpec view_spec(const Attrs& a) {
  ViewSpec v{a.i(4), a.i(5), a.i(6), a.i(7), a.i(8), a.i(9), {}, {}};
  for (int t = 0; t < 4; ++t)
    for (int k = 0; k < 4; ++k) v.at[t][k] = a.i(10 + 4 * t + k);
  const int64_t rank = a.ints.size() > kViewInts ? a.i(kViewInts) : -1;
  if (rank >= 0 && a.ints.size() == kViewInts + 1 + static_cast<size_t>(rank))
    v.out.assign(a.ints.begin() + kViewInts + 1, a.ints.end());
  return v;
}

TensorMeta infer_sdpa_view(const OpSchema& op, const Metas& in, const Attrs& a) {
  if (a.ints.size() <= kViewInts) fail(op, in, "view mode needs " + std::to_string(kViewInts + 1) + "+ ints");
  const ViewSpec v = view_spec(a);
  if (v.out.empty() || a.i(2) != 0) fail(op, in, "bad view attributes");
  for (int64_t x : {v.b, v.h, v.l, v.s, v.d, v.dv})
    if (x < 1) fail(op, in, "view sizes must be positive");
  const int64_t rows[4] = {v.l, v.s, v.s, v.l}, cols[4] = {v.d, v.d, v.dv, v.dv};
  for (int t = 0; t < 4; ++t) {
    const int64_t* at = v.at[t];
    for (int k = 0; k < 4; ++k)
      if (at[k] < 0) fail(op, in, "view strides and offsets must be non-negative");
    if ((v.b > 1 && at[1] == 0) || (v.h > 1 && at[2] == 0) || (rows[t] > 1 && at[3] == 0))
      fail(op, in, "a view stride is 0 along a dimension of more than one element");
    const int64_t last = at[0] + (v.b - 1) * at[1] + (v.h - 1) * at[2] + (rows[t] - 1) * at[3] + cols[t] - 1;
    const int64_t size = t < 3 ? in[t].numel() : numel(v.out);
    if (last >= size) fail(op, in, "a view reaches past its buffer");
  }
  if (numel(v.out) != v.b * v.h * v.l * v.dv) fail(op, in, "the output view must cover its buffer");
  if (in.size() > 3) {
    const Shape& m = in[3].shape;
    const Shape scores{v.l, v.s};
    const Shape rows(m.end() - std::min<size_t>(2, m.size()), m.end());
    if (numel(m) != numel(rows) || broadcast_shapes(rows, scores) != scores)
      fail(op, in, "in view mode the mask must broadcast to [L, S] = " + shape_str(scores) + " without batch dims");
  }
  if (in.size() > 4 && (in[4].dtype != DType::F32 || in[4].numel() != 1)) fail(op, in, "the fill value must be one F32");
  return {v.out, in[0].dtype};
}

TensorMeta infer_sdpa(const OpSchema& op, const Metas& in, const Attrs& a) {
  const int64_t kind = a.i(0), causal = a.i(1);
  if (kind < sdpa::kNoMask || kind > sdpa::kAdd) fail(op, in, "bad mask kind " + std::to_string(kind));
  if (causal < sdpa::kNotCausal || causal > sdpa::kCausalAfterMask) fail(op, in, "bad causal mode " + std::to_string(causal));
  if (in.size() != expected_inputs(kind))
    fail(op, in, "mask kind " + std::to_string(kind) + " takes " + std::to_string(expected_inputs(kind)) + " inputs");
  if (in[0].dtype != DType::F32 && in[0].dtype != DType::BF16) fail(op, in, "q must be F32 or BF16");
  for (size_t i = 1; i < 3; ++i) expect_dtype(op, in, i, in[0].dtype);
  if (view_mode(a)) {
    if (kind == sdpa::kAdd) expect_dtype(op, in, 3, DType::F32);
    if (kind == sdpa::kWhere || kind == sdpa::kMaskedFill) expect_dtype(op, in, 3, DType::BOOL);
    return infer_sdpa_view(op, in, a);
  }
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

// Where a tensor's slices and rows are: slice i (of batch * heads) starts at
// off + (i / heads) * sb + (i % heads) * sh, its rows srow apart, its last dim contiguous.
struct Layout {
  int64_t off = 0, sb = 0, sh = 0, srow = 0;
  int64_t at(int64_t slice, int64_t heads, int64_t row) const { return off + (slice / heads) * sb + (slice % heads) * sh + row * srow; }
};

struct Plan {
  int64_t batch, l, s, d, dv, g, t;  // g slices per unit, t rows per unit
  int64_t heads;                     // slices per b (view mode: H; else the whole batch)
  Layout q, k, v, o;                 // k: rows are keys, each of d contiguous values ...
  int64_t k_col = 1;                 // ... unless k_transposed: then element (j, c) is at j + c * k_col
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
  const auto q = md3(g, t, p.d, p.q.sh, p.q.srow, 1, p.dt);
  const auto k = kt ? md3(g, p.d, p.s, p.k.sh, p.k_col, 1, p.dt) : md3(g, p.d, p.s, p.k.sh, 1, p.k.srow, p.dt);
  const auto sc = md3(g, t, p.s, t * p.s, p.s, 1);
  const auto probs = md3(g, t, p.s, t * p.s, p.s, 1, p.dt);
  const auto v = md3(g, p.s, p.dv, p.v.sh, p.v.srow, 1, p.dt);
  const auto o = md3(g, t, p.dv, p.o.sh, p.o.srow, 1, p.dt);
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
  const void* q = at(in[0], p.q.at(b0, p.heads, r0));
  const void* k = at(in[1], p.k.at(b0, p.heads, 0));
  const void* v = at(in[2], p.v.at(b0, p.heads, 0));
  void* o = const_cast<std::byte*>(at(out, p.o.at(b0, p.heads, r0)));
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
  auto p = std::make_shared<Plan>();
  const bool kt = a.i(2);
  if (view_mode(a)) {
    const ViewSpec v = view_spec(a);
    p->batch_shape = {v.b, v.h};
    p->batch = v.b * v.h, p->heads = v.h;
    p->l = v.l, p->s = v.s, p->d = v.d, p->dv = v.dv;
    Layout* lay[4] = {&p->q, &p->k, &p->v, &p->o};
    const int64_t rows[4] = {v.l, v.s, v.s, v.l}, cols[4] = {v.d, v.d, v.dv, v.dv};
    for (int t = 0; t < 4; ++t) {
      *lay[t] = {v.at[t][0], v.at[t][1], v.at[t][2], v.at[t][3]};
      // oneDNN refuses a zero stride even where a dimension has one element (a decode step's
      // single query row, a single head): give those the stride a dense layout would.
      if (rows[t] == 1) lay[t]->srow = cols[t];
      if (v.h == 1) lay[t]->sh = rows[t] * lay[t]->srow;
    }
  } else {
    const size_t r = out.shape.size();
    p->batch_shape = Shape(out.shape.begin(), out.shape.end() - 2);
    p->batch = numel(p->batch_shape), p->heads = std::max<int64_t>(p->batch, 1);
    p->l = out.shape[r - 2], p->dv = out.shape[r - 1], p->d = in[0].shape[r - 1];
    p->s = in[2].shape[r - 2];
    p->q = {0, 0, p->l * p->d, p->d};
    p->k = {0, 0, p->s * p->d, p->d};  // kt: slices of d x s, element (j, c) at c * s + j
    p->k_col = p->s;
    p->v = {0, 0, p->s * p->dv, p->dv};
    p->o = {0, 0, p->l * p->dv, p->dv};
  }
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
    Shape mask = in[3].shape;  // view mode: a mask without batch dims, aligned to [L, S]
    if (view_mode(a)) mask.erase(mask.begin(), mask.end() - std::min<size_t>(2, mask.size()));
    p->mask_strides = kernels::broadcast_strides(mask, scores);
  }
  // Work worth sharing is cut into at least one unit per thread.
  const bool big = p->batch * p->l * p->s * (p->d + p->dv) >= kParallelMacs;
  const int64_t threads = big ? std::max(1, omp_get_max_threads()) : 1;
  p->t = std::min(p->l, std::max<int64_t>(1, kScoreFloats / p->s));
  if (p->t == p->l)
    p->g = std::clamp<int64_t>(kScoreFloats / (p->l * p->s), 1, std::max<int64_t>(1, p->batch / threads));
  else
    p->g = 1;
  while (p->heads % p->g) --p->g;  // a unit's slices share one b (view mode: strides differ across b)
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
