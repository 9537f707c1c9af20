// Per-device random generators: a seed plus a counter, read only on the host. Random ops
// (dropout) draw one 64-bit value per call and pass it to their kernel as an input tensor,
// so a cached lazy graph or an HPU graph step gets new randomness through its inputs,
// never through attributes baked into the graph.
//
//   hg::manual_seed(hg::Device::hpu(0), 42);                  // reproducible from here on
//   uint64_t s = hg::default_generator(hg::Device::hpu(0)).next();
//   auto y = hg::ops::dropout(x, 0.1);                         // draws from x's device generator
#pragma once
#include <cstdint>
#include <mutex>

#include "engine/device.h"

namespace hg {

// splitmix64's finaliser: a bijective 64-bit mix (also used by kernels to hash counters).
inline constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;

// A counter-based stream: value k is mix64(seed + (k + 1) * gamma) (splitmix64). Thread-safe.
class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ull;  // PyTorch's default seed
  explicit Generator(uint64_t seed = kDefaultSeed) : seed_(seed) {}
  void manual_seed(uint64_t seed);  // restarts the stream
  uint64_t seed() const;
  uint64_t offset() const;          // values drawn since the last seeding
  // Positions the stream as if `offset` values had been drawn since the seeding (O(1)): the
  // next value is value `offset`. Restores a generator from a checkpoint's seed and offset.
  void set_offset(uint64_t offset);
  uint64_t next();

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t counter_ = 0;
};

// The generator of `d` (throws DeviceError for a device that does not exist).
Generator& default_generator(Device d);
void manual_seed(Device d, uint64_t seed);

}  // namespace hg
