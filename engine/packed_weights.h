// Internal: prepacked copies of constant weights, shared by every kernel that packs the same bytes
// the same way. The graphs of a bucket grid (a Predictor's batch buckets, a text generator's
// (tokens, sequences) steps) all freeze one model's weights, and each kernel's prepack used to
// keep its own copy: 39 step graphs of a 0.8M-parameter GPT held 122 MB of copies. A copy is
// found by the digest of the source bytes (engine/hash.h) and its layout, so weights changed in
// place and captured again get a fresh copy, never a stale one; it lives while a kernel holds it.
//
//   hg::kernels::PackedWeights<std::tuple<int64_t, int64_t>> packs;              // layout: any ==-comparable
//   std::shared_ptr<void> p = packs.get(w, w_bytes, {k, n}, packed_bytes,
//                                       [&](void* dst) { /* write the packed layout */ });
#pragma once
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <vector>

#include "engine/hash.h"
#include "engine/kernels.h"

namespace hg::kernels {

template <class Layout>
class PackedWeights {
 public:
  // The packed copy of `source` (source_bytes) in `layout`: an existing one, or a new 64-byte
  // aligned buffer of `bytes` that `fill` writes (its bytes noted as prepacked: a graph that
  // shares a copy does not count it again). Thread-safe; fill runs under the lock.
  std::shared_ptr<void> get(const void* source, size_t source_bytes, const Layout& layout, size_t bytes,
                            const std::function<void(void*)>& fill) {
    const uint64_t digest = hash64(std::span(static_cast<const uint8_t*>(source), source_bytes));
    std::lock_guard lk(mu_);
    std::erase_if(entries_, [](const Entry& e) { return e.packed.expired(); });
    for (const Entry& e : entries_)
      if (e.digest == digest && e.source_bytes == source_bytes && e.layout == layout)
        if (auto p = e.packed.lock()) return p;
    const size_t rounded = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
    std::shared_ptr<void> buf(std::aligned_alloc(64, rounded), std::free);
    if (!buf) throw std::bad_alloc();
    fill(buf.get());
    note_prepacked_bytes(rounded);
    entries_.push_back({digest, source_bytes, layout, buf});
    return buf;
  }

 private:
  struct Entry {
    uint64_t digest;
    size_t source_bytes;
    Layout layout;
    std::weak_ptr<void> packed;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;  // live copies (expired ones are dropped on the next get)
};

}  // namespace hg::kernels
