#include "models/kv_blocks.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

Kernel prepare_write(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs& a) {
  const int64_t id = a.i(0), layer = a.i(1), rows = in[0].shape[0] * in[0].shape[1], d = in[0].shape[2] / 3;
  return [id, layer, rows, d](const void* const* i, void* o) {
    *static_cast<float*>(o) = 0;
    KVBlockPool* p = pool_or_log(id, "kv_write");
    if (!p) return;
    const auto* qkv = static_cast<const float*>(i[0]);
    const auto* slots = static_cast<const int64_t*>(i[1]);
    float *k = p->keys(layer), *v = p->values(layer);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t s = slots[r];
      if (s < 0 || s >= p->slots()) continue;  // padding (or a bad slot, which the decoder's checks exclude)
      std::memcpy(k + s * d, qkv + r * 3 * d + d, static_cast<size_t>(d) * sizeof(float));
      std::memcpy(v + s * d, qkv + r * 3 * d + 2 * d, static_cast<size_t>(d) * sizeof(float));
    }
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

// One (row, head): softmax(q . K[0..p] * scale) . V[0..p], keys and values read through the table.
// False when a table entry is outside the pool (the row is then NaN).
__attribute__((target_clones("avx512f", "default"))) bool attend_head(const float* q, const float* keys,
                                                                      const float* values, const int64_t* table,
                                                                      int64_t positions, int64_t block, int64_t blocks,
                                                                      int64_t d, int64_t dh, float scale, float* scores,
                                                                      float* out) {
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < positions; ++j) {
    const int64_t b = table[j / block];
    if (b < 0 || b >= blocks) return false;
    const float* kj = keys + (b * block + j % block) * d;
    float acc = 0;
    for (int64_t e = 0; e < dh; ++e) acc += q[e] * kj[e];
    scores[j] = acc * scale;
    top = std::max(top, scores[j]);
  }
  float sum = 0;
  for (int64_t j = 0; j < positions; ++j) sum += scores[j] = std::exp(scores[j] - top);
  const float inv = 1.0f / sum;
  std::fill_n(out, dh, 0.0f);
  for (int64_t j = 0; j < positions; ++j) {
    const float w = scores[j] * inv;
    const float* vj = values + (table[j / block] * block + j % block) * d;
    for (int64_t e = 0; e < dh; ++e) out[e] += w * vj[e];
  }
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
    const float *keys = p->keys(layer), *values = p->values(layer);
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
      if (ok && static_cast<int64_t>(scores.size()) < at + 1) scores.resize(static_cast<size_t>(at + 1));
      for (int64_t h = 0; ok && h < heads; ++h)
        ok = attend_head(qkv + r * 3 * d + h * dh, keys + h * dh, values + h * dh, tables + seq * t, at + 1, block,
                         blocks, d, dh, scale, scores.data(), yr + h * dh);
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

KVBlockPool::KVBlockPool(const KVBlockOptions& opt) : opt_(opt) {
  for (auto [name, v] : {std::pair{"layers", opt.layers}, {"heads", opt.heads}, {"head_dim", opt.head_dim},
                         {"block_size", opt.block_size}, {"blocks", opt.blocks}})
    if (v < 1 || v > (int64_t{1} << 31))
      throw InvalidArgument(std::string("KV block pool: ") + name + " must be in [1, 2^31], got " + std::to_string(v));
  const double bytes = 2.0 * 4.0 * static_cast<double>(opt.layers) * static_cast<double>(opt.blocks) *
                       static_cast<double>(opt.block_size) * static_cast<double>(opt.heads * opt.head_dim);
  if (bytes > std::ldexp(1.0, 40))
    throw InvalidArgument("KV block pool: " + std::to_string(bytes) + " bytes is past the 2^40 limit");
  const auto floats = static_cast<size_t>(slots() * slot_floats());
  for (int64_t l = 0; l < opt.layers; ++l) {
    k_.push_back(std::make_unique<float[]>(floats));  // zeros: a slot never written reads as 0, not garbage
    v_.push_back(std::make_unique<float[]>(floats));
  }
  for (int64_t b = opt.blocks; b-- > 0;) free_.push_back(static_cast<int32_t>(b));
  write_op();
  attention_op();
  id_ = Pools::get().add(this);
}

KVBlockPool::~KVBlockPool() { Pools::get().remove(id_); }

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
