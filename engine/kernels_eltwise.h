// Internal: oneDNN eltwise and softmax forward primitives for F32 and BF16 tensors, each
// created once per prepared kernel and run through DnnlCall (memory objects bound once per
// thread). The op families choose between these and their own loops: kernels_act.cpp,
// kernels_pointwise.cpp (relu) and kernels_reduce.cpp (softmax).
//
//   hg::Kernel k = hg::kernels::dnnl_eltwise(dnnl::algorithm::eltwise_gelu_erf, DType::F32, n);
//   if (!k) k = own_loop(...);   // an empty Kernel: oneDNN has no optimised implementation
#pragma once
#include "engine/dnnl_context.h"
#include "engine/op.h"

namespace hg::kernels {

bool dnnl_float(DType t);  // F32 or BF16: the dtypes these primitives take

// y = f(x) over n contiguous elements; alpha as oneDNN defines it per algorithm (0 for
// relu, 1 for swish = silu). Empty when oneDNN offers only its reference implementation or
// rejects the descriptor (dnnl::error is caught: callers fall back to their loops).
Kernel dnnl_eltwise(dnnl::algorithm alg, DType t, int64_t n, float alpha = 0);

// Softmax (log: log-softmax) along `dim` of a contiguous tensor of shape `s`. Empty when
// oneDNN offers only its reference implementation (e.g. some strided axes) or rejects the descriptor.
Kernel dnnl_softmax(const Shape& s, DType t, int64_t dim, bool log);

}  // namespace hg::kernels
