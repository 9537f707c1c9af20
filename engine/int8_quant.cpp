#include "engine/int8_quant.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include "engine/kernels.h"

namespace hg::kernels {

namespace {

// min(x, 0) and max(x, 0) over `count` floats (NaN ignored), 4 lanes at a time.
std::pair<float, float> range_with_zero(const float* a, int64_t count) {
  __m128 lo = _mm_setzero_ps(), hi = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const __m128 x = _mm_loadu_ps(a + i);
    lo = _mm_min_ps(x, lo);  // a NaN lane keeps lo (minps returns its second operand)
    hi = _mm_max_ps(x, hi);
  }
  float l[4], h[4];
  _mm_storeu_ps(l, lo), _mm_storeu_ps(h, hi);
  float mn = std::min({l[0], l[1], l[2], l[3]}), mx = std::max({h[0], h[1], h[2], h[3]});
  for (; i < count; ++i) mn = a[i] < mn ? a[i] : mn, mx = a[i] > mx ? a[i] : mx;
  return {mn, mx};
}

}  // namespace

QuantWeights quantize_weights(const float* w, int64_t channels, int64_t per_channel, bool channel_major, bool uniform) {
  QuantWeights r{std::vector<int8_t>(static_cast<size_t>(channels * per_channel)),
                 std::vector<float>(static_cast<size_t>(channels), 0.0f)};
  note_prepacked_bytes(r.q.size() + r.scale.size() * sizeof(float));  // a prepack's copy of the weights
  auto at = [&](int64_t c, int64_t k) { return channel_major ? c * per_channel + k : k * channels + c; };
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t k = 0; k < per_channel; ++k) r.scale[c] = std::max(r.scale[c], std::abs(w[at(c, k)]));
  if (uniform && channels > 0) std::fill(r.scale.begin(), r.scale.end(), *std::max_element(r.scale.begin(), r.scale.end()));
  for (float& s : r.scale) s = s > 0 && std::isfinite(s) ? s / 127.0f : 1.0f;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t k = 0; k < per_channel; ++k) {
      const float q = std::nearbyint(w[at(c, k)] / r.scale[c]);
      r.q[at(c, k)] = static_cast<int8_t>(q == q ? std::clamp(q, -127.0f, 127.0f) : 0.0f);
    }
  return r;
}

float ActivationQuant::measure(const float* x, int64_t count) {
  const auto [l, h] = range_with_zero(x, count);
  return set_range(l, h);
}

int32_t int8_activation_levels() {
  static const int32_t levels = [] {
    using isa = dnnl::cpu_isa;
    auto bits = [](isa i) { return static_cast<unsigned>(i); };
    // The ISA masks nest: the VNNI bits are what avx512_core_vnni adds to avx512_core, and
    // avx2_vnni to avx2.
    const unsigned vnni = (bits(isa::avx512_core_vnni) ^ bits(isa::avx512_core)) | (bits(isa::avx2_vnni) ^ bits(isa::avx2));
    return bits(dnnl::get_effective_cpu_isa()) & vnni ? 255 : 127;
  }();
  return levels;
}

void cap_activation_codes(uint8_t* q, size_t n) {
  const int32_t levels = int8_activation_levels();
  if (levels >= 255) return;
  const auto cap = static_cast<uint8_t>(levels);
  for (size_t i = 0; i < n; ++i) q[i] = std::min(q[i], cap);
}

float ActivationQuant::set_range(float l, float h) {
  lo = std::min(l, 0.0f), hi = std::max(h, 0.0f);
  const auto levels = static_cast<float>(int8_activation_levels());
  const float scale = hi > lo && std::isfinite(hi - lo) ? (hi - lo) / levels : 1.0f;
  zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / scale), 0.0f, levels));
  inv_scale = 1.0f / scale;
  return scale;
}

namespace {
std::atomic<int> g_sessions{0};
std::mutex g_calibration_mu;
std::map<int64_t, std::vector<std::pair<float, float>>>& calibration_sessions() {
  static std::map<int64_t, std::vector<std::pair<float, float>>> r;
  return r;
}
}  // namespace

void Int8Calibration::start(int64_t tag) {
  std::lock_guard lock(g_calibration_mu);
  if (calibration_sessions().try_emplace(tag).second) ++g_sessions;
}

bool Int8Calibration::on() { return g_sessions.load(std::memory_order_relaxed) > 0; }

std::vector<std::pair<float, float>> Int8Calibration::stop(int64_t tag) {
  std::lock_guard lock(g_calibration_mu);
  auto it = calibration_sessions().find(tag);
  if (it == calibration_sessions().end()) return {};
  std::vector<std::pair<float, float>> r = std::move(it->second);
  calibration_sessions().erase(it);
  --g_sessions;
  return r;
}

void Int8Calibration::record(int64_t id, float lo, float hi) {
  if (id < 0) return;
  const size_t k = static_cast<size_t>(id & ((int64_t{1} << kIdBits) - 1));
  std::lock_guard lock(g_calibration_mu);
  auto it = calibration_sessions().find(id >> kIdBits);
  if (it == calibration_sessions().end()) return;
  auto& r = it->second;
  if (k >= r.size()) r.resize(k + 1, {0.0f, 0.0f});
  r[k] = {std::min(r[k].first, lo), std::max(r[k].second, hi)};
}

DnnlCall quantize_call(const dnnl::memory::desc& from, const dnnl::memory::desc& to, bool single_thread) {
  const dnnl::memory::desc one_f32({1}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  const dnnl::memory::desc zp_md({1}, dnnl::memory::data_type::s32, dnnl::memory::format_tag::a);
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
  const dnnl::reorder::primitive_desc pd(dnnl_engine(), from, dnnl_engine(), to, attr);
  return DnnlCall(dnnl::reorder(pd),
                  {{DNNL_ARG_SRC, from}, {DNNL_ARG_DST, to}, {DNNL_ARG_ATTR_OUTPUT_SCALES, one_f32},
                   {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, zp_md}},
                  single_thread);
}

}  // namespace hg::kernels
