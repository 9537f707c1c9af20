// to_blocked / from_blocked (engine/ops_layout.h): schemas and kernels, oneDNN reorders between
// NCHW and nChw8c / nChw16c / nhwc. Inference only: the layout pass inserts them into compiled graphs.
#include "engine/error.h"
#include "engine/kernels_nn.h"
#include "engine/op_families.h"
#include "engine/ops_layout.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using Metas = std::vector<TensorMeta>;
using namespace schema;

void expect_image(const OpSchema& op, const Metas& in, size_t rank) {
  if (in[0].dtype != DType::F32 && in[0].dtype != DType::BF16) fail(op, in, "input must be F32 or BF16");
  expect_rank(op, in, 0, rank);
}

TensorMeta infer_to_blocked(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_image(op, in, 4);
  const int64_t b = a.i(0), c = in[0].shape[1];
  if (b != 8 && b != 16 && b != c)
    fail(op, in, "channel block must be 8, 16 or the channel count " + std::to_string(c) + ", got " + std::to_string(b));
  return {blocked_shape(in[0].shape, b), in[0].dtype};
}

TensorMeta infer_from_blocked(const OpSchema& op, const Metas& in, const Attrs& a) {
  expect_image(op, in, 5);
  const Shape& s = in[0].shape;
  const int64_t c = a.i(0), blocks = s[1], b = s[4];
  if (b != 8 && b != 16 && !(blocks == 1 && c == b))
    fail(op, in, "channel block must be 8, 16 or the channel count (one block), got " + std::to_string(b));
  if (c <= (blocks - 1) * b || c > blocks * b)
    fail(op, in, std::to_string(c) + " channels do not fill " + std::to_string(blocks) + " blocks of " + std::to_string(b));
  return {{s[0], c, s[2], s[3]}, in[0].dtype};
}

// One reorder between the plain and the blocked descriptions of the same [N, C, H, W].
Kernel reorder_kernel(const Shape& nchw, DType t, int64_t block, bool to_blocked) {
  const auto plain = kernels::nn::plain_md(nchw, t), blocked = kernels::nn::blocked_md(nchw, t, block);
  const auto& from = to_blocked ? plain : blocked;
  const auto& to = to_blocked ? blocked : plain;
  try {
    dnnl::reorder::primitive_desc pd(kernels::dnnl_engine(), from, kernels::dnnl_engine(), to);
    kernels::DnnlCall call(dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    return [call = std::move(call)](const void* const* in, void* out) {
      const void* ptrs[] = {in[0], out};
      call.run(ptrs);
    };
  } catch (const dnnl::error& e) {
    kernels::nn::rethrow_dnnl(to_blocked ? "to_blocked" : "from_blocked", e);
  }
}

Kernel prepare_to_blocked(const Metas& in, const TensorMeta&, const Attrs& a) {
  return reorder_kernel(in[0].shape, in[0].dtype, a.i(0), true);
}

Kernel prepare_from_blocked(const Metas& in, const TensorMeta& out, const Attrs&) {
  return reorder_kernel(out.shape, out.dtype, in[0].shape[4], false);
}

}  // namespace

void register_layout_ops() {
  register_op({"to_blocked", 1, infer_to_blocked, prepare_to_blocked});
  register_op({"from_blocked", 1, infer_from_blocked, prepare_from_blocked});
}

namespace ops {

Tensor to_blocked(const Tensor& x, int64_t block) { return dispatch("to_blocked", {x}, Attrs{{block}, {}}); }
Tensor from_blocked(const Tensor& x, int64_t channels) { return dispatch("from_blocked", {x}, Attrs{{channels}, {}}); }

}  // namespace ops
}  // namespace hg
