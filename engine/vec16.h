// Internal: the 16-float vector of the engine's own loops (GCC vector extensions). In a function
// compiled for AVX-512 (target_clones("avx512f", "default"), the CPU picks the clone at load) it
// is one register; otherwise four SSE operations. Unaligned and may_alias, so any float address
// can be read or written through it. Keep vectors inside one function: passing or returning one
// by value changes the ABI between the clones.
//
//   const hg::f32x16 v = *reinterpret_cast<const hg::f32x16*>(x + i);
//   *reinterpret_cast<hg::f32x16*>(y + i) = v * 2.0f;
#pragma once
#include <cstdint>

namespace hg {

using f32x16 = float __attribute__((vector_size(64), aligned(4), may_alias));
inline constexpr int64_t kLanes16 = 16;

}  // namespace hg
