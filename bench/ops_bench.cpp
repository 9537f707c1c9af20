// Engine micro-benchmarks: eager dispatch overhead on tiny tensors, matmul and conv2d
// GFLOP/s through hgraph against oneDNN called directly (no hgraph around it), and the
// activations and softmax: hgraph eager against our own loop kernels and oneDNN's eltwise /
// softmax primitives called as bare kernels (what the dispatch chooses between).
//
//   OMP_NUM_THREADS=1 ./build/bench/hg_bench --benchmark_filter='Dispatch|Matmul|Conv|Eltwise|PointwiseDepthwise|SmallGemm'
//   (bench/run_ops.sh adds PyTorch and prints the ratios)
#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <algorithm>
#include <random>
#include <unordered_map>

#include "engine/act_internal.h"
#include "engine/autograd.h"
#include "engine/kernels.h"
#include "engine/kernels_eltwise.h"
#include "engine/ops.h"
#include "engine/ops_act.h"
#include "engine/ops_nn.h"

namespace {

hg::Tensor rand_tensor(const hg::Shape& s, hg::Device d = hg::Device::cpu()) {
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(hg::numel(s)));
  for (auto& x : v) x = u(rng);
  return hg::Tensor::from_vector(v, s, d);
}

// One small op per iteration, result kept so allocation and free are counted too.
void BM_DispatchAdd(benchmark::State& st) {
  hg::NoGradGuard g;
  hg::Tensor a = rand_tensor({4}), b = rand_tensor({4});
  for (auto _ : st) benchmark::DoNotOptimize(hg::ops::add(a, b));
}
BENCHMARK(BM_DispatchAdd)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_DispatchRelu(benchmark::State& st) {
  hg::NoGradGuard g;
  hg::Tensor a = rand_tensor({4});
  for (auto _ : st) benchmark::DoNotOptimize(hg::ops::relu(a));
}
BENCHMARK(BM_DispatchRelu)->UseRealTime()->Unit(benchmark::kMicrosecond);

void set_flops(benchmark::State& st, int64_t n) {
  st.counters["GFLOPs"] = benchmark::Counter(2.0 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MatmulHgraph(benchmark::State& st) {
  const int64_t n = st.range(0);
  hg::NoGradGuard g;
  hg::Tensor a = rand_tensor({n, n}), b = rand_tensor({n, n});
  for (auto _ : st) benchmark::DoNotOptimize(hg::ops::matmul(a, b));
  set_flops(st, n);
}

void BM_MatmulOneDnnDirect(benchmark::State& st) {
  const int64_t n = st.range(0);
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  memory::desc md({n, n}, memory::data_type::f32, memory::format_tag::ab);
  matmul prim(matmul::primitive_desc(matmul::desc(md, md, md), eng));
  hg::Tensor a = rand_tensor({n, n}), b = rand_tensor({n, n}), c = rand_tensor({n, n});
  memory ma(md, eng, a.raw_data()), mb(md, eng, b.raw_data()), mc(md, eng, c.raw_data());
  const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  for (auto _ : st) {  // same output buffer every time, arguments built once: the best case
    prim.execute(s, args);
    s.wait();
  }
  set_flops(st, n);
}

}  // namespace

// The small-batch GEMM (engine/small_gemm.cpp) against a oneDNN matmul with pre-packed weights
// (what the linear prepack made before it): batch 1-4 rows of the digits MLP, LeNet-5, a
// classifier head. Arguments: rows, in features, out features.
namespace {

void BM_SmallGemmHgraph(benchmark::State& st) {
  const int64_t m = st.range(0), k = st.range(1), n = st.range(2);
  const hg::Tensor x = rand_tensor({m, k}), w = rand_tensor({n, k}), b = rand_tensor({n});
  hg::Tensor y = rand_tensor({m, n});
  const hg::OpSchema& op = hg::op_schema("linear");
  const std::vector<hg::TensorMeta> metas{{{m, k}, hg::DType::F32}, {{n, k}, hg::DType::F32}, {{n}, hg::DType::F32}};
  const hg::Kernel kern = op.prepack(metas, {{m, n}, hg::DType::F32}, hg::Attrs{{0}, {}}, {nullptr, w.raw_data(), nullptr});
  st.SetLabel(hg::kernels::take_kernel_choice());
  const void* in[] = {x.raw_data(), w.raw_data(), b.raw_data()};
  for (auto _ : st) kern(in, y.raw_data());
}

void BM_SmallGemmOneDnnDirect(benchmark::State& st) {
  const int64_t m = st.range(0), k = st.range(1), n = st.range(2);
  using namespace dnnl;
  using tag = memory::format_tag;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const memory::desc a_md({m, k}, memory::data_type::f32, tag::ab), w_plain({k, n}, memory::data_type::f32, tag::ba),
      w_any({k, n}, memory::data_type::f32, tag::any), b_md({1, n}, memory::data_type::f32, tag::ab),
      c_md({m, n}, memory::data_type::f32, tag::ab);
  const matmul::primitive_desc pd(matmul::desc(a_md, w_any, b_md, c_md), eng);
  hg::Tensor x = rand_tensor({m, k}), w = rand_tensor({n, k}), b = rand_tensor({n}), y = rand_tensor({m, n});
  memory user_w(w_plain, eng, w.raw_data()), packed(pd.weights_desc(), eng);
  reorder(user_w, packed).execute(s, user_w, packed);
  const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(a_md, eng, x.raw_data())},
                                             {DNNL_ARG_WEIGHTS, packed},
                                             {DNNL_ARG_BIAS, memory(b_md, eng, b.raw_data())},
                                             {DNNL_ARG_DST, memory(c_md, eng, y.raw_data())}};
  const matmul prim(pd);
  for (auto _ : st) {
    prim.execute(s, args);
    s.wait();
  }
  st.SetLabel(pd.impl_info_str());
}

void small_gemm_shapes(benchmark::internal::Benchmark* b) {
  for (const auto& s : std::vector<std::vector<int64_t>>{{1, 64, 64}, {4, 64, 64}, {1, 400, 120}, {4, 400, 120},
                                                         {1, 120, 84}, {1, 768, 2}, {1, 512, 512}})
    b->Args(s);
}

}  // namespace

BENCHMARK(BM_SmallGemmHgraph)->Apply(small_gemm_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SmallGemmOneDnnDirect)->Apply(small_gemm_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_MatmulHgraph)->RangeMultiplier(2)->Range(64, 2048)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatmulOneDnnDirect)->RangeMultiplier(2)->Range(64, 2048)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Batch norm on the Fashion CNN's [128, 16, 28, 28] (training/configs/fashion_cnn.json): our
// kernels (engine/kernels_norm.cpp) against oneDNN's batch normalization on the same plain NCHW
// tensors, the primitive they replaced. Argument 0: the training forward; 1: the backward to x
// and to the weight (ours: the two kernels autograd runs; oneDNN: the forward that gives it the
// statistics, then one backward for x and the weight. hgraph ran that pair twice, once per output).
namespace {

const hg::Shape kBnShape{128, 16, 28, 28};

void BM_BatchNormHgraph(benchmark::State& st) {
  const hg::Tensor x = rand_tensor(kBnShape), g = rand_tensor(kBnShape), w = rand_tensor({16}), b = rand_tensor({16});
  hg::Tensor y = rand_tensor(kBnShape), dw = rand_tensor({16});
  const hg::TensorMeta xm{kBnShape, hg::DType::F32}, cm{{16}, hg::DType::F32};
  if (st.range(0) == 0) {
    const hg::Kernel k = hg::op_schema("batch_norm_train").prepare({xm, cm, cm}, xm, hg::Attrs{{}, {1e-5}});
    const void* in[] = {x.raw_data(), w.raw_data(), b.raw_data()};
    for (auto _ : st) k(in, y.raw_data());
    return;
  }
  const hg::OpSchema& op = hg::op_schema("batch_norm_train_backward");
  const hg::Kernel kx = op.prepare({xm, xm, cm}, xm, hg::Attrs{{0}, {1e-5}}),
                   kw = op.prepare({xm, xm, cm}, cm, hg::Attrs{{1}, {1e-5}});
  const void* in[] = {g.raw_data(), x.raw_data(), w.raw_data()};
  for (auto _ : st) {
    kx(in, y.raw_data());
    kw(in, dw.raw_data());
  }
}

void BM_BatchNormOneDnnDirect(benchmark::State& st) {
  using namespace dnnl;
  using flags = normalization_flags;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const memory::desc md({128, 16, 28, 28}, memory::data_type::f32, memory::format_tag::nchw),
      cmd({16}, memory::data_type::f32, memory::format_tag::a);
  const hg::Tensor x = rand_tensor(kBnShape), g = rand_tensor(kBnShape), w = rand_tensor({16}), b = rand_tensor({16});
  hg::Tensor y = rand_tensor(kBnShape), dx = rand_tensor(kBnShape), mean = rand_tensor({16}), var = rand_tensor({16}),
             dw = rand_tensor({16});
  auto mem = [&](const memory::desc& d, const hg::Tensor& t) { return memory(d, eng, t.raw_data()); };
  const flags f = flags::use_scale | flags::use_shift;
  const batch_normalization_forward::primitive_desc fpd(
      batch_normalization_forward::desc(prop_kind::forward_training, md, 1e-5f, f), eng);
  const batch_normalization_forward forward(fpd);
  const std::unordered_map<int, memory> fargs{{DNNL_ARG_SRC, mem(md, x)},       {DNNL_ARG_DST, mem(md, y)},
                                              {DNNL_ARG_SCALE, mem(cmd, w)},    {DNNL_ARG_SHIFT, mem(cmd, b)},
                                              {DNNL_ARG_MEAN, mem(cmd, mean)},  {DNNL_ARG_VARIANCE, mem(cmd, var)}};
  st.SetLabel(fpd.impl_info_str());
  if (st.range(0) == 0) {
    for (auto _ : st) {
      forward.execute(s, fargs);
      s.wait();
    }
    return;
  }
  const batch_normalization_forward::primitive_desc hint(
      batch_normalization_forward::desc(prop_kind::forward_training, md, 1e-5f, flags::use_scale), eng);
  const batch_normalization_backward::primitive_desc bpd(
      batch_normalization_backward::desc(prop_kind::backward, md, md, 1e-5f, flags::use_scale), eng, hint);
  const batch_normalization_backward backward(bpd);
  const std::unordered_map<int, memory> bargs{
      {DNNL_ARG_DIFF_DST, mem(md, g)},  {DNNL_ARG_SRC, mem(md, x)},          {DNNL_ARG_MEAN, mem(cmd, mean)},
      {DNNL_ARG_VARIANCE, mem(cmd, var)}, {DNNL_ARG_SCALE, mem(cmd, w)},      {DNNL_ARG_DIFF_SRC, mem(md, dx)},
      {DNNL_ARG_DIFF_SCALE, mem(cmd, dw)}};
  for (auto _ : st) {
    forward.execute(s, fargs);
    backward.execute(s, bargs);
    s.wait();
  }
}

}  // namespace

BENCHMARK(BM_BatchNormHgraph)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BatchNormOneDnnDirect)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

// conv2d on ResNet-18's layer shapes (batch 1, 224x224 input): hgraph eager against oneDNN
// called directly with NCHW activations and weights reordered once to oneDNN's preferred
// layout (the best a direct caller gets with user-facing NCHW tensors).
namespace {

struct ConvShape {
  const char* name;
  int64_t in, out, k, stride, hw;
};
constexpr ConvShape kConvShapes[] = {
    {"conv1", 3, 64, 7, 2, 224},        {"layer1", 64, 64, 3, 1, 56},     {"layer2_down", 64, 128, 3, 2, 56},
    {"layer2", 128, 128, 3, 1, 28},     {"layer3_down", 128, 256, 3, 2, 28}, {"layer3", 256, 256, 3, 1, 14},
    {"layer4_down", 256, 512, 3, 2, 14}, {"layer4", 512, 512, 3, 1, 7}};

int64_t conv_out(const ConvShape& c) { return (c.hw + 2 * (c.k / 2) - c.k) / c.stride + 1; }

void set_conv_flops(benchmark::State& st, const ConvShape& c) {
  const double ho = static_cast<double>(conv_out(c));
  st.counters["GFLOPs"] = benchmark::Counter(2.0 * c.out * ho * ho * c.in * c.k * c.k / 1e9,
                                             benchmark::Counter::kIsIterationInvariantRate);
}

void conv_hgraph(benchmark::State& st, ConvShape c) {
  hg::NoGradGuard g;
  hg::Tensor x = rand_tensor({1, c.in, c.hw, c.hw}), w = rand_tensor({c.out, c.in, c.k, c.k});
  for (auto _ : st) benchmark::DoNotOptimize(hg::ops::conv2d(x, w, {c.stride, c.stride}, {c.k / 2, c.k / 2}));
  set_conv_flops(st, c);
}

void conv_onednn(benchmark::State& st, ConvShape c) {
  using namespace dnnl;
  using tag = memory::format_tag;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const int64_t ho = conv_out(c), p = c.k / 2;
  memory::desc src({1, c.in, c.hw, c.hw}, memory::data_type::f32, tag::nchw);
  memory::desc dst({1, c.out, ho, ho}, memory::data_type::f32, tag::nchw);
  memory::desc wany({c.out, c.in, c.k, c.k}, memory::data_type::f32, tag::any);
  convolution_forward::primitive_desc pd(
      convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, src, wany, dst,
                                {c.stride, c.stride}, {p, p}, {p, p}),
      eng);
  hg::Tensor x = rand_tensor({1, c.in, c.hw, c.hw}), w = rand_tensor({c.out, c.in, c.k, c.k}),
             y = rand_tensor({1, c.out, ho, ho});
  memory user_w({{c.out, c.in, c.k, c.k}, memory::data_type::f32, tag::oihw}, eng, w.raw_data());
  memory packed_w(pd.weights_desc(), eng);
  reorder(user_w, packed_w).execute(s, user_w, packed_w);
  memory mx(src, eng, x.raw_data()), my(dst, eng, y.raw_data());
  convolution_forward prim(pd);
  for (auto _ : st) {
    prim.execute(s, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, packed_w}, {DNNL_ARG_DST, my}});
    s.wait();
  }
  set_conv_flops(st, c);
}

// A MobileNetV2 expansion (1x1 conv + ReLU6) followed by its 3x3 depthwise conv (+ ReLU6), batch 1,
// channels as oneDNN prefers them: two primitives, or one with oneDNN's depthwise post-op
// (append_dw: the 1x1's output rows go to the depthwise kernel without a round trip through
// memory). The label names the implementation oneDNN picked: the graph compiler would fuse only
// where that one is faster.
struct PwDwShape {
  const char* name;
  int64_t in, expanded, hw, stride;
};
constexpr PwDwShape kPwDwShapes[] = {{"16x96_112_s2", 16, 96, 112, 2},
                                     {"24x144_56_s1", 24, 144, 56, 1},
                                     {"24x144_56_s2", 24, 144, 56, 2},
                                     {"32x192_28_s1", 32, 192, 28, 1}};

void pointwise_depthwise(benchmark::State& st, PwDwShape c, bool fused) {
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const int64_t h = c.hw, ho = (h + 2 - 3) / c.stride + 1;
  const memory::desc src({1, c.in, h, h}, dt::f32, tag::any), w1({c.expanded, c.in, 1, 1}, dt::f32, tag::any),
      b({c.expanded}, dt::f32, tag::x), mid({1, c.expanded, h, h}, dt::f32, tag::any),
      w2({c.expanded, 1, 1, 3, 3}, dt::f32, tag::any), dst({1, c.expanded, ho, ho}, dt::f32, tag::any);
  auto relu6 = [](post_ops& po) { po.append_eltwise(1.f, algorithm::eltwise_clip, 0.f, 6.f); };
  auto conv_desc = [&](const memory::desc& in, const memory::desc& w, const memory::desc& out, int64_t stride,
                       int64_t pad) {
    return convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, in, w, b, out,
                                     {stride, stride}, {pad, pad}, {pad, pad});
  };
  primitive_attr a1, a2;
  post_ops p1, p2;
  relu6(p1);
  relu6(p2);
  if (fused) {
    p1.append_dw(dt::f32, dt::f32, dt::f32, 3, c.stride, 1, 0, {1.f});
    relu6(p1);
  }
  a1.set_post_ops(p1);
  a2.set_post_ops(p2);
  const convolution_forward::primitive_desc pd1(conv_desc(src, w1, mid, 1, 0), a1, eng);
  // fused: pd1's output is the depthwise one; the depthwise weights keep the separate layout
  const convolution_forward::primitive_desc pd2(conv_desc(fused ? mid : pd1.dst_desc(), w2, dst, c.stride, 1), a2, eng);
  memory x(pd1.src_desc(), eng), wp(pd1.weights_desc(), eng), bias(b, eng), y(pd1.dst_desc(), eng),
      wd(pd2.weights_desc(), eng), z(pd2.dst_desc(), eng), dw_src(pd2.src_desc(), eng);
  for (memory* m : {&x, &wp, &bias, &wd})
    std::fill_n(static_cast<float*>(m->get_data_handle()), m->get_desc().get_size() / sizeof(float), 0.01f);
  const convolution_forward first(pd1), second(pd2);
  std::unordered_map<int, memory> args1{{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, wp}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, y}};
  if (fused) {
    args1[DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS] = wd;
    args1[DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS] = bias;
  }
  const std::unordered_map<int, memory> args2{{DNNL_ARG_SRC, fused ? dw_src : y}, {DNNL_ARG_WEIGHTS, wd}, {DNNL_ARG_BIAS, bias},
                                              {DNNL_ARG_DST, z}};
  for (auto _ : st) {
    first.execute(s, args1);
    if (!fused) second.execute(s, args2);
    s.wait();
  }
  st.SetLabel(fused ? pd1.impl_info_str() : std::string(pd1.impl_info_str()) + " + " + pd2.impl_info_str());
}

const bool kConvRegistered = [] {
  for (const PwDwShape& c : kPwDwShapes)
    for (bool fused : {false, true})
      benchmark::RegisterBenchmark((std::string("BM_PointwiseDepthwise/") + (fused ? "fused/" : "separate/") + c.name).c_str(),
                                   pointwise_depthwise, c, fused)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
  for (const ConvShape& c : kConvShapes) {
    benchmark::RegisterBenchmark((std::string("BM_ConvHgraph/") + c.name).c_str(), conv_hgraph, c)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("BM_ConvOneDnnDirect/") + c.name).c_str(), conv_onednn, c)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace

// Activations and softmax (over the last dim), F32 at three sizes and BF16 at one:
// Hgraph = the eager op (dispatch, allocation and the chosen kernel), Loop = our kernel,
// OneDnn = oneDNN's primitive (both bare kernels on preallocated buffers).
namespace {

struct EltwiseOp {
  const char* name;
  hg::Tensor (*eager)(const hg::Tensor&);
  hg::Kernel (*loop)(const hg::TensorMeta&);
  hg::Kernel (*onednn)(const hg::TensorMeta&);
};

template <hg::act::Act A>
hg::Kernel act_loop(const hg::TensorMeta& m) {
  return hg::act::activation_loop(A, false, m.dtype, m.numel());
}
template <dnnl::algorithm Alg, int Alpha = 0>
hg::Kernel act_onednn(const hg::TensorMeta& m) {
  return hg::kernels::dnnl_eltwise(Alg, m.dtype, m.numel(), Alpha);
}
template <bool Log>
hg::Kernel softmax_loop(const hg::TensorMeta& m) {
  return hg::kernels::softmax_loop(m, static_cast<int64_t>(m.shape.size()) - 1, Log);
}
template <bool Log>
hg::Kernel softmax_onednn(const hg::TensorMeta& m) {
  return hg::kernels::dnnl_softmax(m.shape, m.dtype, static_cast<int64_t>(m.shape.size()) - 1, Log);
}

using Act = hg::act::Act;
using alg = dnnl::algorithm;
const EltwiseOp kEltwiseOps[] = {
    {"relu", [](const hg::Tensor& x) { return hg::ops::relu(x); }, hg::kernels::relu_loop,
     act_onednn<alg::eltwise_relu>},
    {"gelu_erf", [](const hg::Tensor& x) { return hg::ops::gelu(x); }, act_loop<Act::GeluErf>,
     act_onednn<alg::eltwise_gelu_erf>},
    {"gelu_tanh", [](const hg::Tensor& x) { return hg::ops::gelu(x, "tanh"); }, act_loop<Act::GeluTanh>,
     act_onednn<alg::eltwise_gelu_tanh>},
    {"silu", [](const hg::Tensor& x) { return hg::ops::silu(x); }, act_loop<Act::Silu>,
     act_onednn<alg::eltwise_swish, 1>},
    {"tanh", [](const hg::Tensor& x) { return hg::ops::tanh(x); }, act_loop<Act::Tanh>,
     act_onednn<alg::eltwise_tanh>},
    {"sigmoid", [](const hg::Tensor& x) { return hg::ops::sigmoid(x); }, act_loop<Act::Sigmoid>,
     act_onednn<alg::eltwise_logistic>},
    {"softmax", [](const hg::Tensor& x) { return hg::ops::softmax(x, -1); }, softmax_loop<false>,
     softmax_onednn<false>},
    {"log_softmax", [](const hg::Tensor& x) { return hg::ops::log_softmax(x, -1); }, softmax_loop<true>,
     softmax_onednn<true>},
};

struct EltwiseShape {
  const char* name;
  hg::Shape shape;
  hg::DType dtype;
};
// 1x64: a tiny tensor (where per-call overhead decides); 64x1000: classifier logits;
// 256x4096: a wide MLP activation; 4x128x128: BERT's attention scores (4 heads, 128 tokens).
const EltwiseShape kEltwiseShapes[] = {{"1x64", {1, 64}, hg::DType::F32},
                                       {"64x1000", {64, 1000}, hg::DType::F32},
                                       {"256x4096", {256, 4096}, hg::DType::F32},
                                       {"4x128x128", {4, 128, 128}, hg::DType::F32},
                                       {"256x4096_bf16", {256, 4096}, hg::DType::BF16}};

void set_bytes(benchmark::State& st, const hg::TensorMeta& m) {
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(2 * m.bytes()));
}

void eltwise_eager(benchmark::State& st, EltwiseOp op, EltwiseShape sh) {
  hg::NoGradGuard g;
  const hg::Tensor x = rand_tensor(sh.shape).to(sh.dtype);
  for (auto _ : st) benchmark::DoNotOptimize(op.eager(x));
  set_bytes(st, x.meta());
}

void eltwise_kernel(benchmark::State& st, hg::Kernel (*make)(const hg::TensorMeta&), EltwiseShape sh) {
  const hg::Tensor x = rand_tensor(sh.shape).to(sh.dtype), y = hg::Tensor::empty(sh.shape, sh.dtype);
  const hg::Kernel k = make(x.meta());
  if (!k) return st.SkipWithError("no optimised oneDNN implementation");
  const void* in[] = {x.raw_data()};
  void* out = y.raw_data();
  for (auto _ : st) k(in, out);
  set_bytes(st, x.meta());
}

const bool kEltwiseRegistered = [] {
  for (const EltwiseShape& sh : kEltwiseShapes)
    for (const EltwiseOp& op : kEltwiseOps) {
      const std::string suffix = std::string("/") + op.name + "/" + sh.name;
      benchmark::RegisterBenchmark(("BM_EltwiseHgraph" + suffix).c_str(), eltwise_eager, op, sh)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("BM_EltwiseLoop" + suffix).c_str(), eltwise_kernel, op.loop, sh)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("BM_EltwiseOneDnn" + suffix).c_str(), eltwise_kernel, op.onednn, sh)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  return true;
}();

}  // namespace
