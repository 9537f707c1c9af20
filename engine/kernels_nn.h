// Internal: kernel factories of the nn family (conv, pooling, normalisation) and the small
// oneDNN toolkit they share.
//
//   hg::Kernel k = hg::kernels::nn::prepare_conv2d(in_metas, out_meta, attrs);  // primitive built here
//   k(inputs, output);                                                            // per call: memory objects only
//
//   // A primitive whose chosen layouts differ from the tensors' plain ones gets reorders:
//   nn::DnnlStep step(pd, prim, {{DNNL_ARG_SRC, nn::ArgFrom::Input, 0, plain_src_md},
//                                {DNNL_ARG_DST, nn::ArgFrom::Output, 0, plain_dst_md}});
//   step.run(inputs, output);
#pragma once
#include <memory>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/dnnl_context.h"
#include "engine/op.h"

namespace hg::kernels::nn {

// ---- shared geometry (used by the schemas and the kernels) ----

// PyTorch's output size of a convolution or pooling window along one dimension (floor mode);
// <= 0 when the window does not fit.
inline int64_t window_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation = 1) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t room = in + 2 * pad - span;
  return room < 0 ? 0 : room / stride + 1;
}

// Adaptive pooling window [start, end) of output cell i (PyTorch's floor/ceil rule).
inline int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
inline int64_t adaptive_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

// ---- oneDNN toolkit (kernels_conv.cpp) ----

// dnnl_engine(), dnnl_stream() and dnnl_dtype() come from engine/dnnl_context.h.
dnnl::memory::desc plain_md(const Shape& dims, DType t);  // row-major (nchw, oihw, ...)
// [N, C, H, W] in nChw{block}c (engine/ops_layout.h); block 8 or 16, or C (nhwc).
dnnl::memory::desc blocked_md(const Shape& nchw, DType t, int64_t block);
// The channel block of a oneDNN description that is nChw8c, nChw16c (8, 16) or nhwc (C), 0 for
// any other layout.
int64_t block_of(const dnnl::memory::desc& md);

// Thread-local scratch buffer number `slot` (< kScratchSlots) of at least `bytes`, 64-byte
// aligned; valid until the next request for the same slot on the same thread.
inline constexpr int kScratchSlots = 32;
void* scratch(int slot, size_t bytes);

// Turns a oneDNN creation failure into an hg::InternalError naming the op.
[[noreturn]] void rethrow_dnnl(const char* op, const dnnl::error& e);

// InOut: the output, holding input `index`'s data when the primitive starts (oneDNN's sum post-op).
enum class ArgFrom { Input, Output, Temp, InOut };

struct DnnlArg {
  int arg;                       // DNNL_ARG_*
  ArgFrom from;
  int index;                     // input index, or temp slot (temps persist across steps of one call)
  dnnl::memory::desc user_md;    // the tensor's layout (ignored for temps)
};

// One primitive with the reorders between plain tensors and the layouts it chose. Like
// DnnlCall, each thread builds its memory objects on its first run; later runs only swap data
// handles and execute. Copies share the primitive and the packed constants.
class DnnlStep {
 public:
  // constant[i] non-null: input i is fixed for the step's life; when the primitive wants another
  // layout it is reordered once here into a buffer the step owns (weights pre-packing).
  DnnlStep(const dnnl::primitive_desc& pd, dnnl::primitive prim, std::vector<DnnlArg> args,
           const std::vector<const void*>& constant = {});
  void run(const void* const* in, void* out) const;  // never throws for valid pointers
  // Runs on one OpenMP thread (small problems, where a fork/join costs more than it gives).
  void set_single_thread(bool on) { single_thread_ = on; }

 private:
  struct Bound {
    DnnlArg a;
    dnnl::memory::desc prim_md;
    bool reorder = false;
    dnnl::reorder to_prim, from_prim;  // input -> prim layout, prim layout -> output
    dnnl::memory::desc to_scratch, from_scratch;
    std::shared_ptr<void> packed;      // a constant input already in the prim layout
  };
  struct Thread;  // one thread's memory objects and execute arguments
  Thread& bind() const;
  void run_steps(const void* const* in, void* out) const;

  dnnl::primitive prim_;
  dnnl::memory::desc scratchpad_md_;
  std::vector<Bound> args_;
  size_t reorder_scratch_bytes_ = 0;  // the largest reorder scratchpad
  uint64_t id_;                       // unique per constructed step: the key of each thread's bindings
  bool single_thread_ = false;
};

// Temp slots used by steps; reorder buffers and scratchpads use the slots above these.
inline constexpr int kTempSlots = 8;

// ---- kernel factories ----

// kernels_conv.cpp. Attrs ints: {stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, ...}
// Post-ops (ints[7] activation, a residual input last): engine/post_ops.h. prepack_*: constant
// weights reordered once into the primitive's layout.
// The activation layouts a plain conv2d / conv2d_nobias node runs best with inside a chain:
// channel blocks of its x and output (0 = NCHW; engine/ops_layout.h) as oneDNN chooses them.
struct ConvLayout {
  int64_t src_block = 0, dst_block = 0;
};
ConvLayout conv_layout(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
// A conv2d node's geometry (kernels_conv.cpp), shared with its INT8 form (conv_int8.cpp).
struct ConvGeom {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups;
  dnnl::memory::dims strides, dilates, pads;
  DType dtype;
  int64_t src_block = 0, dst_block = 0;  // engine/ops_layout.h: 0 = NCHW
};
// `layout` false: the backward ops' attrs hold H and W where the forward's hold the layout.
ConvGeom conv_geom(const Shape& x, const Shape& w, const Shape& y, DType t, const Attrs& a, bool layout = true);
dnnl::memory::desc src_md(const ConvGeom& g);     // x in its layout (plain or blocked)
dnnl::memory::desc dst_md(const ConvGeom& g);     // the output (and residual) in its layout
dnnl::memory::desc weight_md(const ConvGeom& g);  // PyTorch's [O, C/groups, kh, kw]
dnnl::memory::desc any_md(const dnnl::memory::desc& m);
// y = act(y + residual) in place, for outputs in NCHW: ptrs {y, residual, y}.
DnnlCall residual_step(const ConvGeom& g, FusedAct act);
// conv2d with attrs::Conv::int8 (conv_int8.cpp): inputs x, w[, b][, residual].
Kernel conv2d_int8(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a, bool bias,
                   const std::vector<const void*>& constant);
Kernel prepare_conv2d(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // x, w, b[, res]
Kernel prepare_conv2d_nobias(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // x, w[, res]
Kernel prepack_conv2d(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                      const std::vector<const void*>& constant);
Kernel prepack_conv2d_nobias(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                             const std::vector<const void*>& constant);
Kernel prepare_conv2d_backward_input(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);   // g, w
Kernel prepare_conv2d_backward_weight(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // g, x
Kernel prepare_channel_sum(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // [N, C, ...] -> [C]

// kernels_pool.cpp. Attrs ints: {kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, ...}
Kernel prepare_max_pool2d(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
Kernel prepare_max_pool2d_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // g, x
Kernel prepare_avg_pool2d(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
Kernel prepare_avg_pool2d_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // g
Kernel prepare_adaptive_avg_pool2d(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
Kernel prepare_adaptive_avg_pool2d_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);

// kernels_norm.cpp
Kernel prepare_batch_norm_train(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // x, w, b
Kernel prepare_batch_norm_eval(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);   // x, w, b, rm, rv
Kernel prepare_batch_norm_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // g, x, w[, rm, rv]
Kernel prepare_batch_norm_update_stats(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
Kernel prepare_layer_norm(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // x, w, b
Kernel prepare_layer_norm_backward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);  // g, x, w

}  // namespace hg::kernels::nn
