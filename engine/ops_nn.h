// Neural-network ops with PyTorch (torch.nn.functional) semantics, NCHW layout: convolution,
// pooling, batch and layer normalisation. All are differentiable (gradients for x, weight and
// bias); conv, pooling and batch norm run on oneDNN (F32, BF16), adaptive pooling and layer
// norm on our own loops (F32, F64; adaptive pooling also BF16).
//
//   using namespace hg::ops;
//   auto y = conv2d(x, w, b, /*stride=*/{2, 2}, /*padding=*/{1, 1});      // w [O, C/groups, kh, kw]
//   y = batch_norm(y, gamma, beta, running_mean, running_var, /*training=*/true);
//   auto s = batch_norm_update_stats(y_in, running_mean, running_var, 0.1);  // new running stats
//   y = max_pool2d(relu(y), {3, 3}, {2, 2}, {1, 1});
//   auto f = adaptive_avg_pool2d(y, {1, 1});                                 // [N, C, 1, 1]
//   auto z = layer_norm(tokens, {hidden}, ln_w, ln_b);                      // over the last dim
#pragma once
#include <array>

#include "engine/tensor.h"

namespace hg::ops {

using Size2 = std::array<int64_t, 2>;  // {h, w}

// x [N, C, H, W], weight [O, C/groups, kh, kw], bias [O] (undefined: no bias). Dilation as in
// PyTorch (1 = dense). Output [N, O, OH, OW], OH = (H + 2*pad - dil*(kh-1) - 1) / stride + 1.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2 stride = {1, 1},
              Size2 padding = {0, 0}, Size2 dilation = {1, 1}, int64_t groups = 1);
Tensor conv2d(const Tensor& x, const Tensor& weight, Size2 stride = {1, 1}, Size2 padding = {0, 0},
              Size2 dilation = {1, 1}, int64_t groups = 1);  // no bias

// Floor-mode pooling over [N, C, H, W]; stride {0, 0} means stride = kernel; padding at most
// half the kernel. Max pooling pads with -inf; average pooling counts padded zeros when
// count_include_pad (PyTorch's default).
Tensor max_pool2d(const Tensor& x, Size2 kernel, Size2 stride = {0, 0}, Size2 padding = {0, 0});
Tensor avg_pool2d(const Tensor& x, Size2 kernel, Size2 stride = {0, 0}, Size2 padding = {0, 0},
                  bool count_include_pad = true);
// x [..., H, W] (rank 3 or 4); window i covers [floor(i*H/out), ceil((i+1)*H/out)).
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

// x [N, C, ...] (rank 2 to 5; F32 or BF16), weight/bias/running stats F32 [C] (weight and
// bias may be undefined: 1 and 0). training: normalise with the batch statistics (biased
// variance); otherwise with running_mean/running_var. Running stats are not updated here
// (`momentum` is accepted for PyTorch's signature only): call batch_norm_update_stats.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

// New running statistics after one training step on x, as PyTorch computes them in place:
// (1 - momentum) * running + momentum * batch statistic, with the unbiased batch variance.
struct BatchNormStats {
  Tensor running_mean, running_var;
};
BatchNormStats batch_norm_update_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                                       double momentum = 0.1);

// Normalises over the trailing dims `normalized_shape` (x's last dims must equal it); weight and
// bias have that shape (undefined: 1 and 0). F32 or F64.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps = 1e-5);

}  // namespace hg::ops
