// Internal: the quantization that the INT8 kernels share (matmul_int8 in engine/int8_ops.cpp,
// conv2d in INT8 in engine/conv_int8.cpp), as ONNX Runtime's dynamic quantization does it:
// weights s8 per output channel, symmetric (once, at compile, when they are constant);
// activations u8 per tensor with every call, asymmetric over [min(x, 0), max(x, 0)].
//
//   QuantWeights w = quantize_weights(b, /*channels=*/n, /*per_channel=*/k, /*channel_major=*/true, false);
//   ActivationQuant q;  float s_a = q.measure(x, count);   // s_a, then q.inv_scale, q.zero_point
//   DnnlCall quantize = quantize_call(x_md, u8_md);        // ptrs {x, u8, &q.inv_scale, &q.zero_point}
#pragma once
#include <cstdint>
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

// One call's activation quantization: u8 = saturate(round(x * inv_scale) + zero_point).
struct ActivationQuant {
  float inv_scale = 1;
  int32_t zero_point = 0;
  // Measures `count` floats (NaN ignored) and sets inv_scale and zero_point; returns the scale.
  float measure(const float* x, int64_t count);
};

// A oneDNN reorder from F32 `from` to u8 `to` (any layouts of one shape) with a runtime scale
// and zero point: ptrs {x, u8 out, &inv_scale, &zero_point}. Throws dnnl::error.
DnnlCall quantize_call(const dnnl::memory::desc& from, const dnnl::memory::desc& to, bool single_thread);

}  // namespace hg::kernels
