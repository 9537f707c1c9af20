// Kernel factories behind the op schemas (internal to the engine).
//
//   hg::Kernel k = hg::kernels::prepare_linear(in_metas, out_meta, attrs);  // oneDNN primitive
//   k(inputs, output);
#pragma once
#include <string>

#include "engine/op.h"
#include "engine/post_ops.h"

namespace hg::kernels {

// oneDNN (kernels_dnnl.cpp)
Kernel prepare_matmul(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
Kernel prepare_linear(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
// constant B (matmul) / weight (linear): reordered once into the primitive's layout
Kernel prepack_matmul(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                      const std::vector<const void*>& constant);
Kernel prepack_linear(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                      const std::vector<const void*>& constant);
// The small-batch GEMM (small_gemm.cpp): y = act(x w^T + bias) for at most kSmallGemmRows rows,
// F32, w constant ([n, k], or [k, n] when !w_is_nk: copied as rows once), act none, relu or relu6.
// prepack_matmul / prepack_linear pick it over oneDNN when small_gemm_fits: up to kSmallGemmWeights
// weights (128 KB) the primitive call costs more than the arithmetic; beyond, both stream the
// weights from L2 at the same speed (bench/ops_bench.cpp BM_SmallGemm).
constexpr int64_t kSmallGemmRows = 4;
constexpr int64_t kSmallGemmWeights = int64_t{1} << 15;
bool small_gemm_fits(DType t, int64_t m, int64_t k, int64_t n, FusedAct act);
Kernel small_gemm(int64_t m, int64_t k, int64_t n, const float* w, bool w_is_nk, bool bias, FusedAct act);

// A kernel choice worth showing in the graph dump ("small-batch GEMM: ..."): a prepare or prepack
// function notes it on the calling thread, the graph compiler takes it (and clears it) after each
// node's kernel (graphs/executable.cpp).
void note_kernel_choice(std::string why);
std::string take_kernel_choice();
// Bytes a prepack function keeps for its kernel (weights reordered, transposed or quantized: a
// copy per compiled graph), noted on the calling thread and taken by the graph compiler, which
// counts them in the executable's constant bytes (what memory budgets weigh).
void note_prepacked_bytes(size_t bytes);
size_t take_prepacked_bytes();

// element-wise (kernels_pointwise.cpp)
Kernel prepare_binary(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // a.ints[0]: BinaryOp
Kernel prepare_scale(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
// relu: oneDNN's eltwise for F32/BF16 or relu_loop (any dtype), whichever was measured faster
Kernel prepare_relu(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
Kernel relu_loop(const TensorMeta& x);
Kernel prepare_relu_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
Kernel prepare_copy(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
Kernel prepare_expand(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
Kernel prepare_cast(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // any -> any

// reductions, softmax (kernels_reduce.cpp)
Kernel prepare_sum_to(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
// sum/mean/amax over axes and argmax: kernels_reduce_axes.cpp (attrs: kernels_shape.h)
Kernel prepare_reduce(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
Kernel prepare_argmax(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
// softmax: oneDNN's primitive (kernels_eltwise.h) or softmax_loop, whichever bench/ops_bench.cpp
// measured faster; softmax_loop is ours (every float dtype, sums in double).
Kernel prepare_softmax(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // ints[1]: log
Kernel softmax_loop(const TensorMeta& x, int64_t dim, bool log);
Kernel prepare_softmax_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);

enum class BinaryOp : int64_t { Add = 0, Sub = 1, Mul = 2, Div = 3 };  // integer division by 0 gives 0

// Strides of `s` (right-aligned) when broadcast to `out`: 0 along broadcast dims.
Shape broadcast_strides(const Shape& s, const Shape& out);

}  // namespace hg::kernels
