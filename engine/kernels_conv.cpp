// conv2d forward / backward-data / backward-weights through oneDNN, the per-channel sum that
// gives bias gradients, and the oneDNN toolkit of the nn family (scratch, DnnlStep).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>

#include "engine/dtype_dispatch.h"
#include "engine/error.h"
#include "engine/kernels.h"
#include "engine/kernels_nn.h"
#include "engine/op_attrs.h"

#include <omp.h>

namespace hg::kernels::nn {

// ---- toolkit ----

dnnl::memory::desc plain_md(const Shape& dims, DType t) {
  return dnnl::memory::desc(dims, dnnl_dtype(t), contiguous_strides(dims));
}

dnnl::memory::desc blocked_md(const Shape& nchw, DType t, int64_t block) {
  using tag = dnnl::memory::format_tag;
  if (block == nchw[1]) return dnnl::memory::desc(nchw, dnnl_dtype(t), tag::nhwc);
  if (block != 8 && block != 16) throw InternalError("blocked_md: channel block " + std::to_string(block));
  return dnnl::memory::desc(nchw, dnnl_dtype(t), block == 16 ? tag::nChw16c : tag::nChw8c);
}

int64_t block_of(const dnnl::memory::desc& md) {
  const auto dims = md.dims();
  if (dims.size() != 4) return 0;
  const DType t = md.data_type() == dnnl::memory::data_type::bf16 ? DType::BF16 : DType::F32;
  for (int64_t b : {dims[1], int64_t{16}, int64_t{8}})
    if (md == blocked_md(dims, t, b)) return b;
  return 0;
}

void* scratch(int slot, size_t bytes) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  struct Buf {
    std::unique_ptr<void, Free> p;
    size_t n = 0;
  };
  thread_local Buf bufs[kScratchSlots];
  Buf& b = bufs[slot];
  if (b.n < bytes || !b.p) {
    const size_t n = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
    b.p.reset(std::aligned_alloc(64, n));
    b.n = b.p ? n : 0;
  }
  return b.p.get();
}

void rethrow_dnnl(const char* op, const dnnl::error& e) {
  throw InternalError(std::string("op '") + op + "': oneDNN could not create a primitive: " + e.what());
}

namespace {
constexpr int kReorderScratchpadSlot = kScratchSlots - 2;
constexpr int kScratchpadSlot = kScratchSlots - 1;

dnnl::reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to, dnnl::memory::desc& pad) {
  auto& eng = dnnl_engine();
  dnnl::reorder::primitive_desc pd(eng, from, eng, to, user_scratchpad());
  pad = pd.scratchpad_desc();
  return dnnl::reorder(pd);
}

void set_handle(const dnnl::memory& m, const void* p) {
  dnnl_check(dnnl_memory_set_data_handle_v2(m.get(), const_cast<void*>(p), nullptr), "set_data_handle");
}

void execute(const dnnl::primitive& p, const std::vector<dnnl_exec_arg_t>& args) {
  dnnl_check(dnnl_primitive_execute(p.get(), dnnl_stream().get(), static_cast<int>(args.size()), args.data()),
             "primitive_execute");
}
}  // namespace

// Per argument k: src (the input's user layout), dst (the output's user layout) and prim (the
// primitive's layout: a scratch copy, a temp, or the packed constant), as each needs.
struct DnnlStep::Thread {
  std::vector<dnnl::memory> src, dst, prim;
  dnnl::memory scratchpad, reorder_scratchpad;
  std::vector<std::vector<dnnl_exec_arg_t>> to_prim, from_prim;  // reorder arguments per k
  std::vector<dnnl_exec_arg_t> args;                              // the primitive's
};

DnnlStep::DnnlStep(const dnnl::primitive_desc& pd, dnnl::primitive prim, std::vector<DnnlArg> args,
                   const std::vector<const void*>& constant)
    : prim_(std::move(prim)), scratchpad_md_(pd.scratchpad_desc()) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id++;
  if (kTempSlots + args.size() >= static_cast<size_t>(kReorderScratchpadSlot))
    throw InternalError("DnnlStep: too many arguments");
  for (auto& a : args) {
    Bound b;
    b.a = a;
    b.prim_md = pd.query_md(dnnl::query::exec_arg_md, a.arg);
    if (a.from != ArgFrom::Temp && b.prim_md != a.user_md) {
      const bool in = a.from == ArgFrom::Input || a.from == ArgFrom::InOut;
      const bool fixed = a.from == ArgFrom::Input && static_cast<size_t>(a.index) < constant.size() &&
                         constant[a.index] != nullptr;
      if (fixed) b.packed = reorder_once(a.user_md, constant[a.index], b.prim_md);
      else b.reorder = true;
      if (b.reorder && in) b.to_prim = make_reorder(a.user_md, b.prim_md, b.to_scratch);
      if (b.reorder && a.from != ArgFrom::Input) b.from_prim = make_reorder(b.prim_md, a.user_md, b.from_scratch);
      reorder_scratch_bytes_ = std::max({reorder_scratch_bytes_, b.to_scratch.get_size(), b.from_scratch.get_size()});
    }
    args_.push_back(std::move(b));
  }
}

DnnlStep::Thread& DnnlStep::bind() const {
  thread_local std::unordered_map<uint64_t, Thread> bindings;
  thread_local uint64_t last_id = 0;
  thread_local Thread* last = nullptr;
  if (last_id == id_) return *last;
  if (bindings.size() > 4096) bindings.clear();  // steps of freed kernels leave entries behind
  auto [it, fresh] = bindings.try_emplace(id_);
  Thread& t = it->second;
  if (fresh) {
    auto& eng = dnnl_engine();
    const size_t n = args_.size();
    t.src.resize(n), t.dst.resize(n), t.prim.resize(n), t.to_prim.resize(n), t.from_prim.resize(n);
    if (reorder_scratch_bytes_ > 0)
      t.reorder_scratchpad = dnnl::memory(dnnl::memory::desc({static_cast<int64_t>(reorder_scratch_bytes_)},
                                                             dnnl::memory::data_type::u8, dnnl::memory::format_tag::a),
                                          eng, nullptr);
    for (size_t k = 0; k < n; ++k) {
      const Bound& b = args_[k];
      const ArgFrom from = b.a.from;
      if (from == ArgFrom::Temp || b.reorder) t.prim[k] = dnnl::memory(b.prim_md, eng, nullptr);
      if (b.packed) t.prim[k] = dnnl::memory(b.prim_md, eng, b.packed.get());
      if (!b.packed && (from == ArgFrom::Input || from == ArgFrom::InOut)) t.src[k] = dnnl::memory(b.a.user_md, eng, nullptr);
      if (from == ArgFrom::Output || from == ArgFrom::InOut) t.dst[k] = dnnl::memory(b.a.user_md, eng, nullptr);
      auto with_pad = [&](std::vector<dnnl_exec_arg_t> v, const dnnl::memory::desc& pad) {
        if (pad.get_size() > 0) v.push_back({DNNL_ARG_SCRATCHPAD, t.reorder_scratchpad.get()});
        return v;
      };
      if (b.reorder && t.src[k]) t.to_prim[k] = with_pad({{DNNL_ARG_FROM, t.src[k].get()}, {DNNL_ARG_TO, t.prim[k].get()}}, b.to_scratch);
      if (b.reorder && t.dst[k])
        t.from_prim[k] = with_pad({{DNNL_ARG_FROM, t.prim[k].get()}, {DNNL_ARG_TO, t.dst[k].get()}}, b.from_scratch);
      const dnnl::memory& m = t.prim[k] ? t.prim[k] : from == ArgFrom::Input ? t.src[k] : t.dst[k];
      t.args.push_back({b.a.arg, m.get()});
    }
    if (scratchpad_md_.get_size() > 0) {
      t.scratchpad = dnnl::memory(scratchpad_md_, eng, nullptr);
      t.args.push_back({DNNL_ARG_SCRATCHPAD, t.scratchpad.get()});
    }
  }
  last_id = id_, last = &t;
  return t;
}

void DnnlStep::run(const void* const* in, void* out) const {
  const int threads = single_thread_ ? omp_get_max_threads() : 1;
  if (threads > 1) omp_set_num_threads(1);  // this thread's setting only
  run_steps(in, out);
  if (threads > 1) omp_set_num_threads(threads);
}

void DnnlStep::run_steps(const void* const* in, void* out) const {
  Thread& t = bind();
  if (t.reorder_scratchpad) set_handle(t.reorder_scratchpad, scratch(kReorderScratchpadSlot, reorder_scratch_bytes_));
  if (t.scratchpad) set_handle(t.scratchpad, scratch(kScratchpadSlot, scratchpad_md_.get_size()));
  for (size_t k = 0; k < args_.size(); ++k) {
    const Bound& b = args_[k];
    if (b.a.from == ArgFrom::Temp) {
      set_handle(t.prim[k], scratch(b.a.index, b.prim_md.get_size()));
      continue;
    }
    if (b.packed) continue;
    const void* src = b.a.from == ArgFrom::Output ? nullptr : in[b.a.index];  // the data the arg starts with
    if (t.src[k]) set_handle(t.src[k], src);
    if (t.dst[k]) set_handle(t.dst[k], out);
    if (!b.reorder) {
      if (b.a.from == ArgFrom::InOut && src != out) std::memcpy(out, src, b.a.user_md.get_size());
      continue;
    }
    set_handle(t.prim[k], scratch(kTempSlots + static_cast<int>(k), b.prim_md.get_size()));
    if (!t.to_prim[k].empty()) execute(b.to_prim, t.to_prim[k]);
  }
  execute(prim_, t.args);
  for (size_t k = 0; k < args_.size(); ++k)
    if (!t.from_prim[k].empty()) execute(args_[k].from_prim, t.from_prim[k]);
  dnnl_check(dnnl_stream_wait(dnnl_stream().get()), "stream_wait");
}

// ---- conv2d ----

using dnnl::memory;
using tag = memory::format_tag;

// x [N, C, H, W] (or blocked), weight [O, C/groups, kh, kw] (PyTorch layout), output
// [N, O, OH, OW] (or blocked): dims 0, 2 and 3 sit at the same places in both layouts. The
// backward ops' attrs hold H and W where the forward's hold the layout: they pass layout false.
ConvGeom conv_geom(const Shape& x, const Shape& w, const Shape& y, DType t, const Attrs& a, bool layout) {
  const attrs::Conv c = attrs::Conv::of(a);
  ConvGeom g{x[0], w[1] * c.groups, x[2], x[3], w[0], w[2], w[3], y[2], y[3], c.groups, {}, {}, {}, t};
  g.strides = {c.stride_h, c.stride_w};
  g.pads = {c.pad_h, c.pad_w};
  g.dilates = {c.dilation_h - 1, c.dilation_w - 1};  // oneDNN counts the gaps
  if (layout) g.src_block = c.src_block, g.dst_block = c.dst_block;
  return g;
}

memory::desc src_md(const ConvGeom& g) {
  const Shape s{g.n, g.c, g.h, g.w};
  return g.src_block ? blocked_md(s, g.dtype, g.src_block) : plain_md(s, g.dtype);
}
memory::desc dst_md(const ConvGeom& g) {
  const Shape s{g.n, g.o, g.oh, g.ow};
  return g.dst_block ? blocked_md(s, g.dtype, g.dst_block) : plain_md(s, g.dtype);
}
memory::desc weight_md(const ConvGeom& g) {  // [G, O/G, C/G, kh, kw] is the same memory as PyTorch's
  if (g.groups == 1) return plain_md({g.o, g.c, g.kh, g.kw}, g.dtype);
  return plain_md({g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}, g.dtype);
}
memory::desc any_md(const memory::desc& m) { return memory::desc(m.dims(), m.data_type(), tag::any); }

namespace {

// A convolution on its own (eager, training, or left NCHW by the layout pass) reorders its
// activations to the layout it runs in and back. Dense convolutions with a spatial kernel on
// small output maps (<= 7x7, e.g. ResNet-18's last stage) then run on NCHW: the reorders cost
// more there than they save (ResNet-18 layer4: 127 GFLOP/s blocked against 180 NCHW). Not 1x1 or
// depthwise convolutions: oneDNN runs those on NCHW through its gemm path at 1.6-6 GFLOP/s
// (EfficientNet-B0's 7x7 stage, one thread: a 672->192 1x1 took 2.1 ms, a 1152-group 5x5 1.75
// ms), against its blocked 1x1 and depthwise kernels. A 1x1 map (squeeze-and-excitation's FC
// layers) stays NCHW: nothing to gain from a layout there. Inside a chain the layout pass keeps
// (no reorders at all), small maps take oneDNN's layout too: ResNet-50 at batch 1, one thread,
// 82 ms with this rule there and 76 ms without.
bool plain_activations(const ConvGeom& g, bool in_chain = false) {
  return g.oh * g.ow == 1 || (!in_chain && g.oh * g.ow <= 49 && g.groups == 1 && g.kh * g.kw > 1);
}

// `attr`: post-ops (the scratchpad mode is set here).
// `in_chain`: the layout pass asks which layouts the conv would choose inside a chain.
dnnl::convolution_forward::primitive_desc conv_fwd_pd(const ConvGeom& g, bool bias, dnnl::prop_kind pk,
                                                      dnnl::primitive_attr attr = {}, bool in_chain = false) {
  const memory::desc bias_md = bias ? plain_md({g.o}, g.dtype) : memory::desc();
  // Fixed layouts: the layout pass chose them (blocked), or NCHW is faster here (plain_activations).
  const bool fixed =
      g.src_block || g.dst_block || (plain_activations(g, in_chain) && pk == dnnl::prop_kind::forward_inference);
  dnnl::convolution_forward::desc d(pk, dnnl::algorithm::convolution_direct, fixed ? src_md(g) : any_md(src_md(g)),
                                    any_md(weight_md(g)), bias_md, fixed ? dst_md(g) : any_md(dst_md(g)), g.strides,
                                    g.dilates, g.pads, g.pads);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return {d, attr, dnnl_engine()};
}

Kernel zero_fill(const TensorMeta& out) {
  return [bytes = out.bytes()](const void* const*, void* o) {
    if (bytes) std::memset(o, 0, bytes);
  };
}

}  // namespace

// y = act(y + residual), in place: the residual of a conv on NCHW activations. oneDNN's gemm
// convolution (the NCHW path) runs a sum post-op slower than this extra pass (ResNet-18
// layer4 at batch 1, one thread: 1190 us plain, 1305 us with sum + relu, 1190 + 20 us so).
DnnlCall residual_step(const ConvGeom& g, FusedAct act) {
  dnnl::primitive_attr attr = user_scratchpad();
  append_post_ops(attr, act, false);
  const memory::desc y = dst_md(g);
  dnnl::binary::primitive_desc pd(dnnl::binary::desc(dnnl::algorithm::binary_add, y, y, y), attr, dnnl_engine());
  return DnnlCall(dnnl::binary(pd), {{DNNL_ARG_SRC_0, y}, {DNNL_ARG_SRC_1, y}, {DNNL_ARG_DST, y}});
}

namespace {

// act(conv(x, w) + b + residual); inputs x, w[, b][, residual]. constant: see DnnlStep.
// The output never shares the residual's buffer (the schema is not in-place).
Kernel conv2d_forward(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a, bool bias,
                      const std::vector<const void*>& constant) {
  if (attrs::Conv::of(a).int8) return conv2d_int8(in, out, a, bias, constant);
  const bool residual = in.size() > (bias ? 3u : 2u);
  const int res_index = bias ? 3 : 2;
  const auto act = static_cast<FusedAct>(a.i(7));
  if (out.numel() == 0) return zero_fill(out);
  const ConvGeom g = conv_geom(in[0].shape, in[1].shape, out.shape, out.dtype, a);
  const bool sum_post_op = residual && (g.dst_block || !plain_activations(g));
  try {
    dnnl::primitive_attr attr;
    if (!residual || sum_post_op) append_post_ops(attr, act, sum_post_op);
    auto pd = conv_fwd_pd(g, bias, dnnl::prop_kind::forward_inference, attr);
    std::vector<DnnlArg> args{{DNNL_ARG_SRC, ArgFrom::Input, 0, src_md(g)},
                              {DNNL_ARG_WEIGHTS, ArgFrom::Input, 1, weight_md(g)}};
    if (sum_post_op) args.push_back({DNNL_ARG_DST, ArgFrom::InOut, res_index, dst_md(g)});
    else args.push_back({DNNL_ARG_DST, ArgFrom::Output, 0, dst_md(g)});
    if (bias) args.push_back({DNNL_ARG_BIAS, ArgFrom::Input, 2, plain_md({g.o}, g.dtype)});
    DnnlStep step(pd, dnnl::convolution_forward(pd), std::move(args), constant);
    // Small convs (LeNet's: under 2^20 multiply-adds) run on one thread: at 2 threads LeNet-5
    // batch 1 took 30 us against 18 us on one.
    const int64_t macs = g.n * g.o * g.oh * g.ow * (g.c / g.groups) * g.kh * g.kw;
    step.set_single_thread(macs < (int64_t{1} << 20));
    // The small-convolution choices, for the graph dump.
    std::string why;
    if (!g.src_block && !g.dst_block && plain_activations(g))
      why = g.oh * g.ow == 1 ? "NCHW (a 1x1 map)"
                             : "NCHW (a " + std::to_string(g.oh) + "x" + std::to_string(g.ow) +
                                   " map: its reorders would cost more than they save)";
    if (macs < (int64_t{1} << 20))
      why += (why.empty() ? "" : ", ") + std::string("one thread (") + std::to_string(macs) + " multiply-adds < 2^20)";
    if (!why.empty()) note_kernel_choice(why);
    if (residual && !sum_post_op)
      return [step = std::move(step), add = residual_step(g, act), res_index](const void* const* i, void* o) {
        step.run(i, o);
        const void* ptrs[] = {o, i[res_index], o};
        add.run(ptrs);
      };
    return [step = std::move(step)](const void* const* i, void* o) { step.run(i, o); };
  } catch (const dnnl::error& e) {
    rethrow_dnnl("conv2d", e);
  }
}

}  // namespace

ConvLayout conv_layout(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  const ConvGeom g = conv_geom(in[0].shape, in[1].shape, out.shape, out.dtype, a);
  if (g.src_block || g.dst_block) return {g.src_block, g.dst_block};
  if (attrs::Conv::of(a).int8) return g.oh * g.ow == 1 ? ConvLayout{} : ConvLayout{g.c, g.o};  // NHWC (conv_int8.cpp)
  if (plain_activations(g, true)) return {};  // a 1x1 map
  try {
    const auto pd = conv_fwd_pd(g, in.size() > 2, dnnl::prop_kind::forward_inference, {}, true);
    return {block_of(pd.src_desc()), block_of(pd.dst_desc())};
  } catch (const dnnl::error&) {
    return {};  // no convolution for these shapes in another layout: NCHW
  }
}

Kernel prepare_conv2d(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  return conv2d_forward(in, out, a, true, {});
}
Kernel prepare_conv2d_nobias(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  return conv2d_forward(in, out, a, false, {});
}
Kernel prepack_conv2d(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                      const std::vector<const void*>& constant) {
  return conv2d_forward(in, out, a, true, constant);
}
Kernel prepack_conv2d_nobias(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                             const std::vector<const void*>& constant) {
  return conv2d_forward(in, out, a, false, constant);
}

// inputs: grad [N, O, OH, OW], weight; output: grad of x [N, C, H, W].
Kernel prepare_conv2d_backward_input(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  if (out.numel() == 0 || in[0].numel() == 0) return zero_fill(out);
  const ConvGeom g = conv_geom(out.shape, in[1].shape, in[0].shape, out.dtype, a, false);
  try {
    auto hint = conv_fwd_pd(g, false, dnnl::prop_kind::forward_training);
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, any_md(src_md(g)),
                                            any_md(weight_md(g)), any_md(dst_md(g)), g.strides, g.dilates, g.pads,
                                            g.pads);
    dnnl::convolution_backward_data::primitive_desc pd(d, user_scratchpad(), dnnl_engine(), hint);
    DnnlStep step(pd, dnnl::convolution_backward_data(pd),
                  {{DNNL_ARG_DIFF_DST, ArgFrom::Input, 0, dst_md(g)},
                   {DNNL_ARG_WEIGHTS, ArgFrom::Input, 1, weight_md(g)},
                   {DNNL_ARG_DIFF_SRC, ArgFrom::Output, 0, src_md(g)}});
    return [step = std::move(step)](const void* const* i, void* o) { step.run(i, o); };
  } catch (const dnnl::error& e) {
    rethrow_dnnl("conv2d_backward_input", e);
  }
}

// inputs: grad [N, O, OH, OW], x [N, C, H, W]; output: grad of the weight [O, C/groups, kh, kw].
Kernel prepare_conv2d_backward_weight(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a) {
  if (out.numel() == 0 || in[0].numel() == 0) return zero_fill(out);
  const ConvGeom g = conv_geom(in[1].shape, out.shape, in[0].shape, out.dtype, a, false);
  try {
    auto hint = conv_fwd_pd(g, false, dnnl::prop_kind::forward_training);
    dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, any_md(src_md(g)),
                                               any_md(weight_md(g)), any_md(dst_md(g)), g.strides, g.dilates,
                                               g.pads, g.pads);
    dnnl::convolution_backward_weights::primitive_desc pd(d, user_scratchpad(), dnnl_engine(), hint);
    DnnlStep step(pd, dnnl::convolution_backward_weights(pd),
                  {{DNNL_ARG_DIFF_DST, ArgFrom::Input, 0, dst_md(g)},
                   {DNNL_ARG_SRC, ArgFrom::Input, 1, src_md(g)},
                   {DNNL_ARG_DIFF_WEIGHTS, ArgFrom::Output, 0, weight_md(g)}});
    return [step = std::move(step)](const void* const* i, void* o) { step.run(i, o); };
  } catch (const dnnl::error& e) {
    rethrow_dnnl("conv2d_backward_weight", e);
  }
}

// [N, C, ...] -> [C]: sums every dim but dim 1 (bias gradients). Accumulates in double.
Kernel prepare_channel_sum(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs&) {
  const Shape& s = in[0].shape;
  const int64_t n = s[0], c = s[1], inner = numel(s) / std::max<int64_t>(n * c, 1);
  return visit_dtype(in[0].dtype, [&]<class T>(Type<T>) -> Kernel {
    return visit_dtype(out.dtype, [&]<class U>(Type<U>) -> Kernel {
      if constexpr (!std::is_floating_point_v<compute_t<T>> || !std::is_floating_point_v<compute_t<U>>) {
        throw InternalError("channel_sum: floating-point dtypes only");
      } else {
        return [n, c, inner](const void* const* inp, void* o) {
          const T* x = static_cast<const T*>(inp[0]);
          U* y = static_cast<U*>(o);
          // Up to 8 channels at once, each in its own accumulator: per channel the same
          // additions in the same order as one channel at a time, but 8 independent chains
          // of dependent adds instead of one.
          constexpr int64_t kLanes = 8;
          for (int64_t c0 = 0; c0 < c; c0 += kLanes) {
            const int64_t w = std::min(kLanes, c - c0);
            double acc[kLanes] = {};
            for (int64_t b = 0; b < n; ++b) {
              const T* p = x + (b * c + c0) * inner;
              for (int64_t k = 0; k < inner; ++k)
                for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<double>(load(p[j * inner + k]));
            }
            for (int64_t j = 0; j < w; ++j) y[c0 + j] = store<U>(acc[j]);
          }
        };
      }
    });
  });
}

}  // namespace hg::kernels::nn
