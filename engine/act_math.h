// Internal: SIMD versions of exp, tanh and the normal CDF for the F32 activation kernels
// (kernels_act.cpp), written with GCC/Clang vector extensions: 4 floats per operation (the
// SSE2 baseline; GCC lowers wider vectors' selects lane by lane there), so the loops are
// vectorised whatever the compiler's cost model decides (libm calls never are
// without -ffast-math, and branchy scalar code is split into paths instead). Accuracy, tested
// in tests/act_test.cpp: exp, sigmoid and tanh within 2e-7 relative; the normal CDF within
// 4e-7 for x >= 0, growing as x^2 * 1e-7 in the lower tail (2e-6 at x = -5, where PyTorch's
// float 0.5 (1 + erf) form has lost most digits to cancellation).
//
//   hg::act::f32x4 v = ...;  v = hg::act::exp4(v);
//   hg::act::map4(x, y, n, [](f32x4 v) { return v * sigmoid4(v); });   // any n (tail padded)
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>

namespace hg::act {

using f32x4 = float __attribute__((vector_size(16)));
using u32x4 = uint32_t __attribute__((vector_size(16)));

#define HG_SIMD_INLINE [[gnu::always_inline]] inline

HG_SIMD_INLINE f32x4 splat4(float c) { return f32x4{c, c, c, c}; }

HG_SIMD_INLINE f32x4 abs4(f32x4 x) { return std::bit_cast<f32x4>(std::bit_cast<u32x4>(x) & 0x7fffffffu); }

// |mag| with the sign of `sign`.
HG_SIMD_INLINE f32x4 copysign4(f32x4 mag, f32x4 sign) {
  return std::bit_cast<f32x4>((std::bit_cast<u32x4>(mag) & 0x7fffffffu) | (std::bit_cast<u32x4>(sign) & 0x80000000u));
}

// e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2)/2; e^r by its Taylor series to
// degree 7 (remainder < 6e-9 relative). x is clamped to [-87.3, 88]: below, the result is
// about 1.2e-38 instead of 0, above 1.65e38 instead of inf, which the activations built on it
// absorb (sigmoid(-100) comes out 6e-39 instead of 4e-44). NaN stays NaN.
HG_SIMD_INLINE f32x4 exp4(f32x4 x) {
  const f32x4 lo = splat4(-87.33654f), hi = splat4(88.0f), round = splat4(12582912.0f);  // 1.5 * 2^23
  f32x4 xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const f32x4 t = xc * splat4(1.44269504088896341f) + round;  // round to nearest by the addition
  const f32x4 n = t - round;
  const u32x4 e = (std::bit_cast<u32x4>(t) - std::bit_cast<u32x4>(round) + 127u) << 23;  // 2^n, n in [-126, 127]
  f32x4 r = xc - n * splat4(0.693359375f);  // ln 2 in two parts (Cody and Waite)
  r = r - n * splat4(-2.12194440e-4f);
  f32x4 p = splat4(1.0f / 5040);
  p = p * r + splat4(1.0f / 720);
  p = p * r + splat4(1.0f / 120);
  p = p * r + splat4(1.0f / 24);
  p = p * r + splat4(1.0f / 6);
  p = p * r + splat4(0.5f);
  p = p * r + splat4(1.0f);
  p = p * r + splat4(1.0f);
  return p * std::bit_cast<f32x4>(e);
}

HG_SIMD_INLINE f32x4 sigmoid4(f32x4 x) { return splat4(1.0f) / (splat4(1.0f) + exp4(-x)); }

// Odd Taylor series to x^17 below 0.55 (remainder < 1e-8 relative), 1 - 2 / (e^{2|x|} + 1) above.
HG_SIMD_INLINE f32x4 tanh4(f32x4 x) {
  const f32x4 a = abs4(x), x2 = x * x;
  f32x4 p = splat4(float(6404582.0 / 10854718875.0));
  p = p * x2 + splat4(float(-929569.0 / 638512875.0));
  p = p * x2 + splat4(float(21844.0 / 6081075.0));
  p = p * x2 + splat4(float(-1382.0 / 155925.0));
  p = p * x2 + splat4(float(62.0 / 2835.0));
  p = p * x2 + splat4(float(-17.0 / 315.0));
  p = p * x2 + splat4(float(2.0 / 15.0));
  p = p * x2 + splat4(float(-1.0 / 3.0));
  const f32x4 small = x + x * x2 * p;
  const f32x4 one = splat4(1.0f), two = splat4(2.0f);
  const f32x4 big = copysign4(one - two / (exp4(two * a) + one), x);
  return a < splat4(0.55f) ? small : big;
}

// erfc(z) for z >= 0: t exp(P(t) - z^2) with t = 1 / (1 + z/2), the Chebyshev fit of
// Numerical Recipes' erfcc (relative error below 1.2e-7 in exact arithmetic; the rounding of
// z^2 adds about z^2 * 6e-8).
HG_SIMD_INLINE f32x4 erfc_nonneg4(f32x4 z) {
  const f32x4 t = splat4(1.0f) / (splat4(1.0f) + splat4(0.5f) * z);
  f32x4 p = splat4(0.17087277f);
  p = p * t - splat4(0.82215223f);
  p = p * t + splat4(1.48851587f);
  p = p * t - splat4(1.13520398f);
  p = p * t + splat4(0.27886807f);
  p = p * t - splat4(0.18628806f);
  p = p * t + splat4(0.09678418f);
  p = p * t + splat4(0.37409196f);
  p = p * t + splat4(1.00002368f);
  p = p * t - splat4(1.26551223f);
  return t * exp4(p - z * z);
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, without cancellation for x << 0.
HG_SIMD_INLINE f32x4 normal_cdf4(f32x4 x) {
  const f32x4 h = splat4(0.5f) * erfc_nonneg4(abs4(x) * splat4(0.70710678118654752f));
  const f32x4 one_minus_h = splat4(1.0f) - h;  // computed before the select: both lanes' values live
  return x < splat4(0.0f) ? h : one_minus_h;
}

// y[i] = f(x[i]) for i < n, 4 at a time; the tail runs on a zero-padded block.
template <class F>
void map4(const float* x, float* y, int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    f32x4 v;
    std::memcpy(&v, x + i, sizeof v);
    v = f(v);
    std::memcpy(y + i, &v, sizeof v);
  }
  if (i == n) return;
  const size_t rest = static_cast<size_t>(n - i) * sizeof(float);
  f32x4 v{};
  std::memcpy(&v, x + i, rest);
  v = f(v);
  std::memcpy(y + i, &v, rest);
}

// z[i] = f(a[i], b[i]) for i < n.
template <class F>
void map4(const float* a, const float* b, float* z, int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    f32x4 u, v;
    std::memcpy(&u, a + i, sizeof u);
    std::memcpy(&v, b + i, sizeof v);
    u = f(u, v);
    std::memcpy(z + i, &u, sizeof u);
  }
  if (i == n) return;
  const size_t rest = static_cast<size_t>(n - i) * sizeof(float);
  f32x4 u{}, v{};
  std::memcpy(&u, a + i, rest);
  std::memcpy(&v, b + i, rest);
  u = f(u, v);
  std::memcpy(z + i, &u, rest);
}

#undef HG_SIMD_INLINE

}  // namespace hg::act
