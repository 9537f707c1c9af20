// A decoder's keys and values in fixed-size blocks (a paged KV cache, as vLLM's PagedAttention):
// one pool of blocks shared by every sequence, its allocator, and the two graph ops that write
// a step's keys and values into the pool and attend over them through a sequence's block table.
//
//   hg::models::KVBlockPool pool({.layers = 4, .heads = 4, .head_dim = 32, .block_size = 16, .blocks = 512});
//   // (.dtype = hg::DType::BF16: keys and values stored in bfloat16)
//   std::vector<int32_t> table;
//   if (!pool.allocate(3, table)) { /* fewer than 3 blocks free: preempt or wait */ }
//   // qkv [N, S, 3D] (a layer's fused projection), slots I64 [N, S] (block * block_size + offset; -1: none),
//   // tables I64 [B, T] (each sequence's blocks), positions I64 [N, S] (-1: padding), seqs I64 [N, S]
//   // (each position's row of tables: a step's tokens from several sequences in one flat list)
//   hg::Tensor written = hg::models::kv_write(qkv, slots, pool, layer);
//   hg::Tensor o = hg::models::paged_attention(qkv, written, tables, positions, seqs, pool, layer);   // [N, S, D]
//   pool.release(table);
//
// Layout: per layer, keys are [blocks, heads, head_dim, block_size] (each block's keys transposed,
// so one feature of a block's positions is contiguous and the attention scores 16 positions per
// vector; block sizes that are multiples of 16 take that path, others work, slower) and values are
// [blocks, heads, block_size, head_dim] (a head's values of a block are contiguous). Slot
// s = block * block_size + offset is one position. The ops find the
// pool by its id when they run, as a graph replayed later must: a graph that outlives its pool
// writes nothing and attends to NaN (logged). Ops never throw while running: out-of-range slots
// are skipped and out-of-range table entries give NaN rows; the decoder checks both on the host
// before a step (models/gpt_paged.h).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/tensor.h"

namespace hg::models {

struct KVBlockOptions {
  int64_t layers = 1, heads = 1, head_dim = 1;
  int64_t block_size = 16;  // positions per block
  int64_t blocks = 0;       // blocks in the pool
  // How keys and values are stored: F32, or BF16 (half the bytes a step reads, which is what
  // bounds a decode step of many long sequences; each stored value rounded to 8 significant bits).
  DType dtype = DType::F32;
};

// Bytes of keys and values a pool with these options holds (a double: it cannot overflow).
double kv_pool_bytes(const KVBlockOptions& opt);

class KVBlockPool {
 public:
  // Throws InvalidArgument naming the field (values < 1, or a pool past 2^40 bytes).
  explicit KVBlockPool(const KVBlockOptions& opt);
  ~KVBlockPool();
  KVBlockPool(const KVBlockPool&) = delete;
  KVBlockPool& operator=(const KVBlockPool&) = delete;

  // Appends n free blocks to `table` and returns true, or leaves it alone and returns false when
  // fewer than n are free. Thread-safe (as release and free_blocks).
  bool allocate(int64_t n, std::vector<int32_t>& table);
  void release(std::vector<int32_t>& table);  // frees every block of `table` and empties it
  int64_t free_blocks() const;
  int64_t total_blocks() const { return opt_.blocks; }
  // Blocks that hold `positions` positions.
  int64_t blocks_for(int64_t positions) const { return (positions + opt_.block_size - 1) / opt_.block_size; }

  const KVBlockOptions& options() const { return opt_; }
  int64_t id() const { return id_; }
  size_t bytes() const { return k_.size() * 2 * static_cast<size_t>(slot_floats() * slots()) * dtype_size(opt_.dtype); }
  int64_t slots() const { return opt_.blocks * opt_.block_size; }
  int64_t slot_floats() const { return opt_.heads * opt_.head_dim; }
  // Layer `layer`'s keys and values, of options().dtype (float or hg::bf16).
  void* keys(int64_t layer) { return k_[static_cast<size_t>(layer)].get(); }
  void* values(int64_t layer) { return v_[static_cast<size_t>(layer)].get(); }

 private:
  KVBlockOptions opt_;
  int64_t id_ = 0;
  struct Free {
    size_t bytes = 0;  // of the mapping
    void operator()(std::byte* p) const;
  };
  // 2 MB aligned anonymous mappings, huge pages where the kernel gives them; a page takes memory
  // (zeros) only when a block on it is first written, so an idle pool costs little.
  std::vector<std::unique_ptr<std::byte[], Free>> k_, v_;
  mutable std::mutex mu_;
  std::vector<int32_t> free_;  // a stack: the block freed last is handed out first (warm in cache)
};

// The ops (see the top of this file). qkv F32 [N, S, 3 * heads * head_dim]; slots, positions
// and seqs I64 [N, S]; tables I64 [B, T]. kv_write returns a token F32 [1] that paged_attention
// takes, so that a layer's attention runs after its keys and values are in the pool. Position p
// of element (n, s), of sequence b = seqs[n, s], attends to positions 0..p of sequence b, in
// slots tables[b][j / block_size] * block_size + j % block_size; an element with position -1 is
// zeros, one whose seqs entry is outside [0, B) is NaN.
Tensor kv_write(const Tensor& qkv, const Tensor& slots, KVBlockPool& pool, int64_t layer);
Tensor paged_attention(const Tensor& qkv, const Tensor& written, const Tensor& tables, const Tensor& positions,
                       const Tensor& seqs, KVBlockPool& pool, int64_t layer);

}  // namespace hg::models
