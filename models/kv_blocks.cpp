#include "models/kv_blocks.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <limits>

#include "engine/act_math.h"
#include "engine/error.h"
#include "engine/op.h"
#include "engine/vec16.h"
#include "graphs/live_registry.h"

namespace hg::models {

namespace {

using Pools = graphs::LiveRegistry<KVBlockPool>;  // for the ops' kernels

KVBlockPool* pool_or_log(int64_t id, const char* op) {
  if (KVBlockPool* p = Pools::get().find(id)) return p;
  spdlog::error("{}: KV block pool {} was destroyed before a graph that uses it ran", op, id);
  return nullptr;
}

// Host-side: the pool named by the attrs, and qkv matching it.
KVBlockPool& checked_pool(const OpSchema& op, const std::vector<TensorMeta>& in, const Attrs& a) {
  KVBlockPool* p = Pools::get().find(a.i(0));
  if (!p) throw InvalidArgument(op_context(op, in) + ": no live KV block pool " + std::to_string(a.i(0)));
  const TensorMeta& qkv = in[0];
  if (qkv.dtype != DType::F32 || qkv.shape.size() != 3 || qkv.shape[2] != 3 * p->slot_floats())
    throw InvalidArgument(op_context(op, in) + ": qkv must be F32 [N, S, " + std::to_string(3 * p->slot_floats()) +
                          "] for the pool's " + std::to_string(p->options().heads) + " heads of " +
                          std::to_string(p->options().head_dim));
  if (a.i(1) < 0 || a.i(1) >= p->options().layers)
    throw InvalidArgument(op_context(op, in) + ": layer " + std::to_string(a.i(1)) + " outside the pool's " +
                          std::to_string(p->options().layers));
  return *p;
}

void check_index(const OpSchema& op, const std::vector<TensorMeta>& in, size_t i, const Shape& want, const char* what) {
  if (in[i].dtype != DType::I64 || in[i].shape != want)
    throw InvalidArgument(op_context(op, in) + ": " + what + " must be I64 " + shape_str(want));
}

// inputs: qkv, slots; ints {pool, layer} -> token F32 [1]
TensorMeta infer_write(const OpSchema& op, const std::vector<TensorMeta>& in, const Attrs& a) {
  checked_pool(op, in, a);
  check_index(op, in, 1, {in[0].shape[0], in[0].shape[1]}, "slots");
  return {{1}, DType::F32};
}

[[gnu::always_inline]] inline float stored(float x, float) { return x; }
[[gnu::always_inline]] inline bf16 stored(float x, bf16) { return bf16::from_float(x); }

// Each row's keys and values into its slot (KVBlockPool's layout): a block holds, per head, the
// keys transposed ([head_dim][block_size]) and the values by position ([block_size][head_dim]).
template <class T>
void write_rows(const float* qkv, const int64_t* slots, int64_t rows, int64_t heads, int64_t dh, int64_t n_slots,
                int64_t block, T* k, T* v) {
  const int64_t d = heads * dh;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = slots[r];
    if (s < 0 || s >= n_slots) continue;  // padding (or a bad slot, which the decoder's checks exclude)
    const float *kr = qkv + r * 3 * d + d, *vr = qkv + r * 3 * d + 2 * d;
    T* kb = k + (s / block) * block * d + s % block;  // feature e (heads x head_dim) at [e][offset]
    for (int64_t e = 0; e < d; ++e) kb[e * block] = stored(kr[e], T{});
    T* vb = v + (s / block) * block * d + (s % block) * dh;  // head h at [h][offset][0, head_dim)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t e = 0; e < dh; ++e) vb[h * block * dh + e] = stored(vr[h * dh + e], T{});
  }
}

Kernel prepare_write(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs& a) {
  const int64_t id = a.i(0), layer = a.i(1), rows = in[0].shape[0] * in[0].shape[1];
  return [id, layer, rows](const void* const* i, void* o) {
    *static_cast<float*>(o) = 0;
    KVBlockPool* p = pool_or_log(id, "kv_write");
    if (!p) return;
    const auto* qkv = static_cast<const float*>(i[0]);
    const auto* slots = static_cast<const int64_t*>(i[1]);
    const KVBlockOptions& po = p->options();
    if (po.dtype == DType::BF16)
      write_rows(qkv, slots, rows, po.heads, po.head_dim, p->slots(), po.block_size, static_cast<bf16*>(p->keys(layer)),
                 static_cast<bf16*>(p->values(layer)));
    else
      write_rows(qkv, slots, rows, po.heads, po.head_dim, p->slots(), po.block_size,
                 static_cast<float*>(p->keys(layer)), static_cast<float*>(p->values(layer)));
  };
}

// inputs: qkv, token, tables, positions, seqs; ints {pool, layer} -> [N, S, D]
TensorMeta infer_attention(const OpSchema& op, const std::vector<TensorMeta>& in, const Attrs& a) {
  const KVBlockPool& p = checked_pool(op, in, a);
  const int64_t n = in[0].shape[0], s = in[0].shape[1];
  if (in[1] != TensorMeta{{1}, DType::F32}) throw InvalidArgument(op_context(op, in) + ": expects kv_write's token F32 [1]");
  if (in[2].dtype != DType::I64 || in[2].shape.size() != 2 || in[2].shape[0] < 1 || in[2].shape[1] < 1)
    throw InvalidArgument(op_context(op, in) + ": tables must be I64 [B, T]");
  check_index(op, in, 3, {n, s}, "positions");
  check_index(op, in, 4, {n, s}, "seqs");
  return {{n, s, p.slot_floats()}, DType::F32};
}

// acc += s * 16 stored values (bf16: its bits are a float's upper half). By reference: a vector
// passed or returned by value changes the ABI between the target clones.
using u16x16 = uint16_t __attribute__((vector_size(32), aligned(2), may_alias));
using u32x16 = uint32_t __attribute__((vector_size(64)));
[[gnu::always_inline]] inline void add_scaled(f32x16& acc, float s, const float* p) {
  acc += s * *reinterpret_cast<const f32x16*>(p);
}
[[gnu::always_inline]] inline void add_scaled(f32x16& acc, float s, const bf16* p) {
  const u32x16 bits = __builtin_convertvector(*reinterpret_cast<const u16x16*>(p), u32x16) << 16;
  acc += s * *reinterpret_cast<const f32x16*>(&bits);  // f32x16 may alias
}
[[gnu::always_inline]] inline float value(float x) { return x; }
[[gnu::always_inline]] inline float value(bf16 x) { return x.to_float(); }

// Each head's row of scores (heads x positions) becomes its softmax weights (exp four lanes at a
// time: act_math.h's exp4, 2e-7 relative).
[[gnu::always_inline]] inline void softmax_rows(float* scores, int64_t heads, int64_t positions) {
  for (int64_t h = 0; h < heads; ++h) {
    float* sh = scores + h * positions;
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < positions; ++j) top = std::max(top, sh[j]);
    act::f32x4 sum4 = {};
    int64_t j = 0;
    for (; j + 4 <= positions; j += 4) {
      act::f32x4 v;
      std::memcpy(&v, sh + j, sizeof v);
      v = act::exp4(v - top);
      std::memcpy(sh + j, &v, sizeof v);
      sum4 += v;
    }
    float sum = (sum4[0] + sum4[1]) + (sum4[2] + sum4[3]);
    for (; j < positions; ++j) sum += sh[j] = std::exp(sh[j] - top);
    const float inv = 1.0f / sum;
    for (j = 0; j < positions; ++j) sh[j] *= inv;
  }
}

// Scores of positions [o0, o0 + 16) of one block for one head: keys `kb` are the block's
// head_dim rows of `block` positions, so feature e of 16 positions is one vector and the scores
// come out as one vector, with no sums across lanes; four chains of multiply-adds over the features.
template <class T>
[[gnu::always_inline]] inline void score_lanes(const float* qh, const T* kb, int64_t dh, int64_t block, int64_t o0,
                                               int64_t n, float scale, float* out) {
  f32x16 acc[4] = {};
  int64_t e = 0;
  for (; e + 4 <= dh; e += 4)
    for (int u = 0; u < 4; ++u) add_scaled(acc[u], qh[e + u], kb + (e + u) * block + o0);
  for (; e < dh; ++e) add_scaled(acc[0], qh[e], kb + e * block + o0);
  const f32x16 r = ((acc[0] + acc[1]) + (acc[2] + acc[3])) * scale;
  if (n >= kLanes16) *reinterpret_cast<f32x16*>(out) = r;
  else
    for (int64_t l = 0; l < n; ++l) out[l] = r[l];  // lanes past the sequence's last position are dropped
}

// out_h = sum_j w_j V_j,h for head_dim = 16 V: the head's output held in V registers. `values`
// points at head h's part of block 0; a block's positions are head_dim apart.
template <int V, class T>
[[gnu::always_inline]] inline void weigh_values(const float* sh, const T* values, const int64_t* table,
                                                int64_t positions, int64_t block, int64_t d, float* oh) {
  constexpr int64_t dh = V * kLanes16;
  f32x16 o[V] = {};
  for (int64_t t = 0, j = 0; j < positions; ++t) {
    const T* x = values + table[t] * block * d;
    for (const int64_t end = std::min(positions, j + block); j < end; ++j, x += dh)
      for (int v = 0; v < V; ++v) add_scaled(o[v], sh[j], x + v * kLanes16);
  }
  for (int v = 0; v < V; ++v) *reinterpret_cast<f32x16*>(oh + v * kLanes16) = o[v];
}

// One row: for each head h, softmax(q_h . K_h[0..p] * scale) . V_h[0..p], keys and values (stored
// as T) read through the table block by block. Within a block each head's keys are head_dim rows
// of block_size positions, so with blocks of a multiple of 16 positions the scores of 16 positions
// are one vector (score_lanes), and each head's values are block_size rows of head_dim, summed
// into the head's output held in registers for head sizes of 16, 32, 64 and 128 (weigh_values):
// both walks stream through contiguous memory. Other sizes take plain loops. scores: heads x
// positions floats.
template <class T>
[[gnu::always_inline]] inline void attend(const float* q, const T* keys, const T* values, const int64_t* table,
                                          int64_t positions, int64_t block, int64_t heads, int64_t dh, float scale,
                                          float* scores, float* out) {
  const int64_t used = (positions + block - 1) / block, d = heads * dh;
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + h * dh;
    float* sh = scores + h * positions;
    for (int64_t t = 0; t < used; ++t) {
      const T* kb = keys + (table[t] * heads + h) * dh * block;
      const int64_t n = std::min(block, positions - t * block);
      float* st = sh + t * block;
      if (block % kLanes16 == 0) {
        for (int64_t o0 = 0; o0 < n; o0 += kLanes16) score_lanes(qh, kb, dh, block, o0, n - o0, scale, st + o0);
        continue;
      }
      for (int64_t o = 0; o < n; ++o) {
        float acc = 0;
        for (int64_t e = 0; e < dh; ++e) acc += qh[e] * value(kb[e * block + o]);
        st[o] = acc * scale;
      }
    }
  }
  softmax_rows(scores, heads, positions);
  for (int64_t h = 0; h < heads; ++h) {
    const float* sh = scores + h * positions;
    float* oh = out + h * dh;
    switch (dh) {
      case 16: weigh_values<1>(sh, values + h * block * dh, table, positions, block, d, oh); continue;
      case 32: weigh_values<2>(sh, values + h * block * dh, table, positions, block, d, oh); continue;
      case 64: weigh_values<4>(sh, values + h * block * dh, table, positions, block, d, oh); continue;
      case 128: weigh_values<8>(sh, values + h * block * dh, table, positions, block, d, oh); continue;
      default: break;
    }
    std::fill_n(oh, dh, 0.0f);
    for (int64_t t = 0, j = 0; j < positions; ++t) {
      const T* x = values + table[t] * block * d + h * block * dh;
      for (const int64_t end = std::min(positions, j + block); j < end; ++j, x += dh) {
        const float w = sh[j];
        for (int64_t e = 0; e < dh; ++e) oh[e] += w * value(x[e]);
      }
    }
  }
}

// attend for keys and values stored as F32 or BF16; false when a table entry is outside the pool
// (the row is then NaN).
__attribute__((target_clones("avx512f", "default"))) bool attend_row(const float* q, const void* keys,
                                                                     const void* values, DType dtype,
                                                                     const int64_t* table, int64_t positions,
                                                                     int64_t block, int64_t blocks, int64_t heads,
                                                                     int64_t dh, float scale, float* scores,
                                                                     float* out) {
  for (int64_t t = 0, used = (positions + block - 1) / block; t < used; ++t)
    if (table[t] < 0 || table[t] >= blocks) return false;
  if (dtype == DType::BF16)
    attend(q, static_cast<const bf16*>(keys), static_cast<const bf16*>(values), table, positions, block, heads, dh,
           scale, scores, out);
  else
    attend(q, static_cast<const float*>(keys), static_cast<const float*>(values), table, positions, block, heads, dh,
           scale, scores, out);
  return true;
}

Kernel prepare_attention(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const int64_t id = a.i(0), layer = a.i(1), n = out.shape[0], s = out.shape[1], d = out.shape[2];
  const int64_t b = in[2].shape[0], t = in[2].shape[1];
  return [id, layer, n, s, d, b, t](const void* const* i, void* o) {
    auto* y = static_cast<float*>(o);
    KVBlockPool* p = pool_or_log(id, "paged_attention");
    if (!p) {
      std::fill_n(y, n * s * d, std::numeric_limits<float>::quiet_NaN());
      return;
    }
    const auto* qkv = static_cast<const float*>(i[0]);
    const auto* tables = static_cast<const int64_t*>(i[2]);
    const auto* pos = static_cast<const int64_t*>(i[3]);
    const auto* seqs = static_cast<const int64_t*>(i[4]);
    const int64_t heads = p->options().heads, dh = p->options().head_dim, block = p->options().block_size;
    const int64_t blocks = p->total_blocks(), span = t * block;
    const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
    const void *keys = p->keys(layer), *values = p->values(layer);
    const DType dtype = p->options().dtype;
    const int64_t rows = n * s;
#pragma omp parallel for schedule(dynamic, 1) if (rows * span * d >= (int64_t{1} << 18))
    for (int64_t r = 0; r < rows; ++r) {
      thread_local std::vector<float> scores;
      float* yr = y + r * d;
      const int64_t at = pos[r];
      if (at < 0) {
        std::fill_n(yr, d, 0.0f);
        continue;
      }
      const int64_t seq = seqs[r];
      bool ok = at < span && seq >= 0 && seq < b;
      if (ok && static_cast<int64_t>(scores.size()) < heads * (at + 1))
        scores.resize(static_cast<size_t>(heads * (at + 1)));
      ok = ok && attend_row(qkv + r * 3 * d, keys, values, dtype, tables + seq * t, at + 1, block, blocks, heads, dh,
                            scale, scores.data(), yr);
      if (!ok) std::fill_n(yr, d, std::numeric_limits<float>::quiet_NaN());
    }
  };
}

const OpSchema& write_op() {
  static const OpSchema& op = (register_op({"kv_write", 2, infer_write, prepare_write}), op_schema("kv_write"));
  return op;
}
const OpSchema& attention_op() {
  static const OpSchema& op =
      (register_op({"paged_attention", 5, infer_attention, prepare_attention}), op_schema("paged_attention"));
  return op;
}

}  // namespace

double kv_pool_bytes(const KVBlockOptions& opt) {
  return 2.0 * static_cast<double>(dtype_size(opt.dtype)) * static_cast<double>(opt.layers) *
         static_cast<double>(opt.blocks) * static_cast<double>(opt.block_size) * static_cast<double>(opt.heads) *
         static_cast<double>(opt.head_dim);
}

KVBlockPool::KVBlockPool(const KVBlockOptions& opt) : opt_(opt) {
  for (auto [name, v] : {std::pair{"layers", opt.layers}, {"heads", opt.heads}, {"head_dim", opt.head_dim},
                         {"block_size", opt.block_size}, {"blocks", opt.blocks}})
    if (v < 1 || v > (int64_t{1} << 31))
      throw InvalidArgument(std::string("KV block pool: ") + name + " must be in [1, 2^31], got " + std::to_string(v));
  if (opt.dtype != DType::F32 && opt.dtype != DType::BF16)
    throw InvalidArgument(std::string("KV block pool: dtype must be F32 or BF16, got ") + dtype_name(opt.dtype));
  const double bytes = kv_pool_bytes(opt);
  if (bytes > std::ldexp(1.0, 40))
    throw InvalidArgument("KV block pool: " + std::to_string(bytes) + " bytes is past the 2^40 limit");
  const auto n = static_cast<size_t>(slots() * slot_floats()) * dtype_size(opt.dtype);
  // A step reads blocks all over the pool: with 4 KB pages each block is a TLB miss or two, so the
  // pool asks for 2 MB pages (transparent huge pages, where the kernel allows them).
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (n + kHuge - 1) / kHuge * kHuge;
  // Anonymous pages read as zeros (a slot never written reads as 0, not garbage) and take memory
  // only when first touched: the pool is not filled at load. Mapped with room to align to 2 MB.
  auto zeroed = [&] {
    void* m = mmap(nullptr, rounded + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    auto* base = static_cast<std::byte*>(m);
    const size_t lead = (kHuge - reinterpret_cast<uintptr_t>(base) % kHuge) % kHuge;
    if (lead) munmap(base, lead);
    if (kHuge - lead) munmap(base + lead + rounded, kHuge - lead);
    std::unique_ptr<std::byte[], Free> p(base + lead, Free{rounded});
    madvise(p.get(), rounded, MADV_HUGEPAGE);  // advice only: without huge pages it still works
    return p;
  };
  for (int64_t l = 0; l < opt.layers; ++l) {
    k_.push_back(zeroed());
    v_.push_back(zeroed());
  }
  for (int64_t b = opt.blocks; b-- > 0;) free_.push_back(static_cast<int32_t>(b));
  write_op();
  attention_op();
  id_ = Pools::get().add(this);
}

KVBlockPool::~KVBlockPool() { Pools::get().remove(id_); }

void KVBlockPool::Free::operator()(std::byte* p) const { munmap(p, bytes); }

bool KVBlockPool::allocate(int64_t n, std::vector<int32_t>& table) {
  std::lock_guard lk(mu_);
  if (n < 0 || n > static_cast<int64_t>(free_.size())) return false;
  for (int64_t i = 0; i < n; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KVBlockPool::release(std::vector<int32_t>& table) {
  std::lock_guard lk(mu_);
  free_.insert(free_.end(), table.rbegin(), table.rend());
  table.clear();
}

int64_t KVBlockPool::free_blocks() const {
  std::lock_guard lk(mu_);
  return static_cast<int64_t>(free_.size());
}

Tensor kv_write(const Tensor& qkv, const Tensor& slots, KVBlockPool& pool, int64_t layer) {
  return dispatch(write_op(), {qkv, slots}, Attrs{{pool.id(), layer}, {}});
}

Tensor paged_attention(const Tensor& qkv, const Tensor& written, const Tensor& tables, const Tensor& positions,
                       const Tensor& seqs, KVBlockPool& pool, int64_t layer) {
  return dispatch(attention_op(), {qkv, written, tables, positions, seqs}, Attrs{{pool.id(), layer}, {}});
}

}  // namespace hg::models
