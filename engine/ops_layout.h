// Channel-blocked activation layouts: an image batch [N, C, H, W] stored as
// [N, ceil(C / b), H, W, b], b channels innermost, padding channels zero. b = C is
// channels-last (NHWC: [N, 1, H, W, C]), what oneDNN's AVX-512 convolutions prefer; b = 8 or 16
// is oneDNN's nChw8c / nChw16c (ONNX Runtime's NCHWc). The graph compiler's layout pass keeps
// chains of convolutions, element-wise ops, residual adds and global pools in the layout the
// convolutions prefer and reorders only at the chain's edges; these ops are those reorders.
//
//   using namespace hg::ops;
//   Tensor xb = to_blocked(x, 16);             // F32 [1, 24, 56, 56] -> [1, 2, 56, 56, 16]
//   Tensor xl = to_blocked(x, 24);             // channels-last: [1, 1, 56, 56, 24]
//   Tensor back = from_blocked(xb, 24);        // -> [1, 24, 56, 56], equal to x
#pragma once
#include "engine/tensor.h"

namespace hg {

// [N, C, H, W] -> [N, ceil(C / block), H, W, block].
inline Shape blocked_shape(const Shape& nchw, int64_t block) {
  return {nchw[0], (nchw[1] + block - 1) / block, nchw[2], nchw[3], block};
}

namespace ops {

// x F32 or BF16 [N, C, H, W]; block 8, 16 or C.
Tensor to_blocked(const Tensor& x, int64_t block);
// x [N, ceil(C / b), H, W, b] -> [N, C, H, W]: the first `channels` of the blocks.
Tensor from_blocked(const Tensor& x, int64_t channels);

}  // namespace ops
}  // namespace hg
