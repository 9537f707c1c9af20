// Internal: the quantization that the INT8 kernels share (matmul_int8 in engine/int8_ops.cpp,
// conv2d in INT8 in engine/conv_int8.cpp), as ONNX Runtime's dynamic quantization does it:
// weights s8 per output channel, symmetric (once, at compile, when they are constant);
// activations u8 per tensor with every call, asymmetric over [min(x, 0), max(x, 0)].
//
//   QuantWeights w = quantize_weights(b, /*channels=*/n, /*per_channel=*/k, /*channel_major=*/true, false);
//   ActivationQuant q;  float s_a = q.measure(x, count);   // s_a, then q.inv_scale, q.zero_point
//   float s_x = q.set_range(lo, hi);                       // static: a calibrated range
//   DnnlCall quantize = quantize_call(x_md, u8_md);        // ptrs {x, u8, &q.inv_scale, &q.zero_point}
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/dnnl_context.h"

namespace hg::kernels {

// s8 weights in the source's layout and one scale per output channel.
struct QuantWeights {
  std::vector<int8_t> q;
  std::vector<float> scale;
};

// `w` holds `channels` x `per_channel` values: channel c's k-th at c * per_channel + k when
// `channel_major` (conv weights [O, C/g, kh, kw], matmul weights [N, K]), else at k * channels + c
// ([K, N]). s_c = max |w_c| / 127 (1 for an all-zero channel); q = round(w / s_c), a NaN to 0.
// `uniform`: one scale (the largest) for all channels, for weights that change between calls.
QuantWeights quantize_weights(const float* w, int64_t channels, int64_t per_channel, bool channel_major, bool uniform);

// The largest u8 activation code: 255 where oneDNN multiplies u8 by s8 with VNNI (AVX512-VNNI,
// AVX-VNNI), 127 elsewhere. Without VNNI, AVX2's vpmaddubsw adds two u8 x s8 products in 16
// bits with saturation; 7-bit activations keep every pair exact (PyTorch's fbgemm reduces the
// activation range for the same reason).
int32_t int8_activation_levels();
// Caps `n` u8 codes at int8_activation_levels() (the quantizing reorder saturates at 255: values
// past a calibrated range). Nothing to do where the levels are 255.
void cap_activation_codes(uint8_t* q, size_t n);

// One call's activation quantization: u8 = saturate(round(x * inv_scale) + zero_point), with
// codes in [0, int8_activation_levels()].
struct ActivationQuant {
  float inv_scale = 1;
  int32_t zero_point = 0;
  float lo = 0, hi = 0;  // the range it was set from
  // Measures `count` floats (NaN ignored) and sets the range; returns the scale.
  float measure(const float* x, int64_t count);
  // A fixed range (static quantization: from a calibration): scale (hi - lo) / levels over
  // [min(lo, 0), max(hi, 0)]; returns the scale.
  float set_range(float lo, float hi);
};

// Static quantization's calibration: while a session of `tag` is on, the INT8 kernels that
// quantize dynamically and carry a calibration id of that tag (tag << kIdBits | their number:
// PassOptions::int8_calibration_tag) report each call's activation range, from any thread;
// stop(tag) gives the (min, max) seen per number ((0, 0) for numbers never reported). Sessions of
// different tags (models calibrating at once) do not see each other's kernels.
//   Int8Calibration::start(tag);  ... run the calibration set through the graphs ...
//   std::vector<std::pair<float, float>> ranges = Int8Calibration::stop(tag);
class Int8Calibration {
 public:
  static constexpr int kIdBits = 20;
  static void start(int64_t tag);
  static std::vector<std::pair<float, float>> stop(int64_t tag);
  static bool on();  // any session
  static void record(int64_t id, float lo, float hi);
};

// A oneDNN reorder from F32 `from` to u8 `to` (any layouts of one shape) with a runtime scale
// and zero point: ptrs {x, u8 out, &inv_scale, &zero_point}. Throws dnnl::error.
DnnlCall quantize_call(const dnnl::memory::desc& from, const dnnl::memory::desc& to, bool single_thread);

}  // namespace hg::kernels
