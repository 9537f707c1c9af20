// HPU graphs (capture/replay, frozen weights, zero-copy replay, statistics, capture safety),
// lazy mode, make_graphed_callables (gradients == eager autograd) and wrap_in_hpu_graph (every
// zoo model == eager, LRU eviction, bypass, signature keys). Zoo weights and inputs come from
// scripts/testdata_zoo.py, as in tests/zoo_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/generator.h"
#include "engine/ops.h"
#include "golden.h"
#include "graphs/graphed_callables.h"
#include "graphs/hpu_graph.h"
#include "graphs/lazy.h"
#include "models/hpu_wrap.h"
#include "models/safetensors.h"
#include "models/state_dict.h"
#include "models/zoo.h"
#include "training/sgd.h"

using namespace hg;
using namespace hg::graphs;
using ::testing::HasSubstr;

namespace {

const Device kHpu = Device::hpu(0);

std::map<std::string, Tensor> zoo_data(const std::string& name) {
  const std::string path = std::string(HG_TESTDATA_DIR) + "/zoo/" + name + ".safetensors";
  if (!std::filesystem::exists(path))
    throw std::runtime_error(path + " is missing: run /usr/bin/python3 scripts/testdata_zoo.py " +
                             std::string(HG_TESTDATA_DIR) + "/zoo");
  return models::tensors_from(safetensors::read(path), path);
}

// The message of the hg::Error `f` throws (a test failure if it throws none).
template <class E = Error, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

Tensor ramp(const Shape& shape, float scale, Device d = kHpu) {
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 17) - 8);
  return Tensor::from_vector(v, shape, d);
}

// An op for the capture-safety tests: a copy whose schema says it cannot be captured, or whose
// kernel cannot be prepared (a compile error at capture_end).
TensorMeta same_meta(const OpSchema&, const std::vector<TensorMeta>& in, const Attrs&) { return in[0]; }
Kernel copy_kernel(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs&) {
  const size_t bytes = in[0].bytes();
  return [bytes](const void* const* x, void* out) { std::memcpy(out, x[0], bytes); };
}
Kernel no_kernel(const std::vector<TensorMeta>&, const TensorMeta&, const Attrs&) {
  throw InvalidArgument("test op has no kernel for graphs");
}
void register_test_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpSchema nc{.name = "test_not_capturable", .num_inputs = 1, .infer = same_meta, .prepare = copy_kernel};
    nc.capturable = false;
    register_op(nc);
    register_op(OpSchema{.name = "test_unpreparable", .num_inputs = 1, .infer = same_meta, .prepare = no_kernel});
  });
}

// ---------------------------------------------------------------------------------------------
// HPUGraph

TEST(HPUGraph, ReplayEqualsEagerForTheGoldenMlp) {
  const auto golden = test::load_json("mlp.json");
  auto net = models::zoo::mlp({64, 32, 10});
  for (auto& [name, p] : net->named_parameters()) p->copy_from(test::tensor_from(golden["weights"][name], Device::cpu()));
  NoGradGuard no_grad;
  Tensor x_cpu = test::tensor_from(golden["input"], Device::cpu());
  const std::vector<float> eager = net->forward(x_cpu).to_vector();
  test::expect_close(eager, golden["output"]["data"].get<std::vector<float>>(), 1e-5, "eager vs PyTorch");

  net->to(kHpu);
  Tensor static_in = Tensor::zeros(x_cpu.shape(), DType::F32, kHpu);
  HPUGraph g(kHpu);
  g.capture_begin();
  Tensor out = net->forward(static_in);
  EXPECT_TRUE(out.is_lazy());
  g.capture_end();
  EXPECT_FALSE(out.is_lazy());
  EXPECT_GT(g.arena_bytes(), 0u);
  for (int rep = 0; rep < 3; ++rep) {
    static_in.copy_from(x_cpu.to(kHpu));
    g.replay();
    test::expect_close(out.to_vector(), eager, 1e-6, "replay vs eager", 0);
  }
  Tensor x2 = ops::scale(x_cpu, 0.5);  // new data through the same static buffers
  static_in.copy_from(x2.to(kHpu));
  g.replay();
  net->to(Device::cpu());
  test::expect_close(out.to_vector(), net->forward(x2).to_vector(), 1e-6, "replay vs eager (second input)", 0);
}

TEST(HPUGraph, DropoutDrawsANewMaskPerReplay) {
  Tensor x = Tensor::full({256}, 1.0f, kHpu);
  HPUGraph g(kHpu);
  g.capture_begin();
  Tensor y = ops::dropout(x, 0.5, true);
  g.capture_end();
  auto replay_mask = [&] {
    g.replay();
    return y.to_vector();
  };
  const auto a = replay_mask(), b = replay_mask();
  EXPECT_NE(a, b);  // 2^-256 odds of a false failure
  for (float v : a) EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
  manual_seed(kHpu, 7);
  const auto c = replay_mask();
  manual_seed(kHpu, 7);
  EXPECT_EQ(replay_mask(), c);  // reproducible from a seed
}

TEST(HPUGraph, FrozenWeightsGiveTheEagerResultAndAreCounted) {
  auto net = models::zoo::mlp({16, 32, 8}, /*seed=*/3);
  net->to(kHpu);
  NoGradGuard no_grad;
  const Tensor x = ramp({4, 16}, 0.1f);
  const std::vector<float> eager = net->forward(x).to_vector();
  std::vector<Tensor> weights;
  for (auto& [name, p] : net->named_parameters()) weights.push_back(*p);
  Tensor in = Tensor::zeros({4, 16}, DType::F32, kHpu), out;
  HPUGraph g(kHpu);
  g.capture([&] { out = net->forward(in); }, {.frozen = weights});
  const HPUGraphStats& s = g.stats();
  EXPECT_EQ(s.captures, 1u);
  EXPECT_EQ(s.frozen_inputs, 4u);  // two weights, two biases
  EXPECT_EQ(s.inputs, 5u);         // and the static input
  EXPECT_EQ(s.outputs, 1u);
  EXPECT_GT(s.nodes, 4u);
  EXPECT_EQ(s.steps, g.executable().num_steps());
  EXPECT_EQ(s.arena_bytes, g.arena_bytes());
  int frozen_nodes = 0;
  for (const auto& n : g.executable().graph().nodes) frozen_nodes += n.kind == Node::Kind::Input && n.frozen;
  EXPECT_EQ(frozen_nodes, 4);
  in.copy_from(x);
  g.replay();
  g.replay();
  test::expect_close(out.to_vector(), eager, 1e-5, "frozen replay vs eager", 1e-6);
  EXPECT_EQ(g.stats().replays, 2u);
  EXPECT_FALSE(g.stats().memory_cache_hit);  // frozen data is baked in: not shared through the cache
  EXPECT_THROW(g.capture_begin({.frozen = {Tensor::zeros({2})}}), InvalidArgument);  // frozen tensor on cpu
}

TEST(HPUGraph, ReplayWithCallerBuffersWritesTheCallersOutput) {
  const Tensor w = ramp({8, 8}, 0.05f);
  Tensor in = Tensor::zeros({2, 8}, DType::F32, kHpu), out;
  HPUGraph g(kHpu);
  g.capture([&] { out = ops::relu(ops::matmul(in, w)); }, {.frozen = {w}});
  const std::vector<float> static_before = out.to_vector();  // relu(0 @ w) = 0

  const Tensor x = ramp({2, 8}, 0.3f);
  Tensor mine = Tensor::zeros({2, 8}, DType::F32, kHpu);
  const void* mine_data = mine.raw_data();
  g.replay_with({x}, {mine});
  EXPECT_EQ(mine.raw_data(), mine_data);  // written in place: the buffer is the caller's
  const std::vector<float> want = ops::relu(ops::matmul(x, w)).to_vector();
  test::expect_close(mine.to_vector(), want, 1e-6, "caller output");
  EXPECT_EQ(out.to_vector(), static_before);               // static output untouched
  EXPECT_EQ(in.to_vector(), std::vector<float>(16, 0.0f));  // static input not copied into
  g.replay_with({x});                                       // no outputs given: the static ones
  test::expect_close(out.to_vector(), want, 1e-6, "static output");
  mine.copy_from(Tensor::zeros({2, 8}, DType::F32, kHpu));
  {  // asynchronous: the caller's buffers stay alive until the queued replay has run
    const Tensor temporary = ramp({2, 8}, 0.3f);
    g.replay_with({temporary}, {mine}, /*asynchronous=*/true);
  }
  test::expect_close(mine.to_vector(), want, 1e-6, "asynchronous caller output");
  EXPECT_EQ(g.stats().zero_copy_replays, 3u);

  EXPECT_THAT(error_of<ShapeError>([&] { g.replay_with({Tensor::zeros({3, 8}, DType::F32, kHpu)}); }),
              HasSubstr("input 0 is F32[3, 8], the graph was captured with F32[2, 8]"));
  EXPECT_THAT(error_of<DTypeError>([&] { g.replay_with({Tensor::zeros({2, 8}, DType::F64, kHpu)}); }),
              HasSubstr("input 0 is F64[2, 8]"));
  EXPECT_THAT(error_of<DeviceError>([&] { g.replay_with({Tensor::zeros({2, 8})}); }),
              HasSubstr("input 0 is on cpu"));
  EXPECT_THAT(error_of<ShapeError>([&] { g.replay_with({x}, {Tensor::zeros({8, 2}, DType::F32, kHpu)}); }),
              HasSubstr("output 0 is F32[8, 2]"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { g.replay_with({x, x}); }), HasSubstr("2 inputs given, the graph has 1"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { g.replay_with({mine}, {mine}); }),
              HasSubstr("output 0 shares memory with input 0"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { g.replay_with({x}, {in}); }),
              HasSubstr("shares memory with a static input"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { g.mark_user_inputs({w}); }), HasSubstr("frozen input"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { g.mark_user_outputs({mine}); }), HasSubstr("not an output"));
}

TEST(HPUGraph, UserInputsChooseWhatReplayWithReplaces) {
  Tensor a = Tensor::zeros({3}, DType::F32, kHpu), b = Tensor::full({3}, 2.0f, kHpu);
  Tensor unused = Tensor::zeros({5}, DType::F32, kHpu);
  Tensor sum, prod;
  HPUGraph g(kHpu);
  g.capture([&] {
    sum = ops::add(a, b);
    prod = ops::mul(a, b);
  });
  g.mark_user_inputs({unused, a});  // b stays static; `unused` is checked but not read
  g.mark_user_outputs({prod});
  Tensor p = Tensor::zeros({3}, DType::F32, kHpu);
  g.replay_with({Tensor::zeros({5}, DType::F32, kHpu), Tensor::from_vector({1, 2, 3}, {3}, kHpu)}, {p});
  EXPECT_EQ(p.to_vector(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(sum.to_vector(), (std::vector<float>{3, 4, 5}));  // not a user output: its static buffer
  EXPECT_THROW(g.replay_with({Tensor::zeros({4}, DType::F32, kHpu), a}), ShapeError);
  HPUGraph again(kHpu);  // the same structure and signature: compiled once, found in memory
  again.capture([&] {
    sum = ops::add(a, b);
    prod = ops::mul(a, b);
  });
  EXPECT_TRUE(again.stats().memory_cache_hit);
  EXPECT_EQ(prod.to_vector(), (std::vector<float>{0, 0, 0}));
}

TEST(HPUGraph, DryRunCompilesWithoutRunning) {
  Tensor x = Tensor::full({128}, 1.0f, kHpu);
  auto capture_mask = [&](bool dry_run) {
    manual_seed(kHpu, 11);
    HPUGraph g(kHpu);
    Tensor y;
    g.capture([&] { y = ops::dropout(x, 0.5, true); }, {.dry_run = dry_run});
    if (dry_run) {
      EXPECT_EQ(g.stats().replays, 0u);
      g.replay();  // the first run
    }
    return y.to_vector();
  };
  // The capture run of a normal capture draws the first seed; a dry run draws none, so its first
  // replay gets that same seed.
  EXPECT_EQ(capture_mask(true), capture_mask(false));
}

// Capture safety ------------------------------------------------------------------------------

TEST(HPUGraph, HostReadDuringCaptureNamesTheOp) {
  Tensor x = Tensor::from_vector({1, -2}, {2}, kHpu);
  HPUGraph g(kHpu);
  g.capture_begin();
  Tensor y = ops::relu(x);
  Tensor z = ops::sum(y);
  EXPECT_THAT(error_of<InvalidArgument>([&] { y.to_vector(); }),
              HasSubstr("reading the value of op 'relu' (node 1) on the host is not supported during HPU graph capture"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { z.item(); }), HasSubstr("op 'reduce' (node 2)"));  // sum's op
  EXPECT_THAT(error_of<InvalidArgument>([&] { mark_step(kHpu); }), HasSubstr("inside an HPU graph capture"));
  g.capture_end();  // the capture survives a caught error
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 0}));
  EXPECT_EQ(z.item(), 1.0f);
  EXPECT_THROW(HPUGraph(Device::cpu()), DeviceError);
  HPUGraph empty(kHpu);
  EXPECT_THROW(empty.replay(), InvalidArgument);
  EXPECT_THROW(empty.capture_end(), InvalidArgument);
}

TEST(HPUGraph, NonCapturableOpIsRejectedByName) {
  register_test_ops();
  Tensor x = Tensor::from_vector({1, 2}, {2}, kHpu);
  EXPECT_EQ(dispatch("test_not_capturable", {x}).to_vector(), (std::vector<float>{1, 2}));  // eager: fine
  HPUGraph g(kHpu);
  g.capture_begin();
  Tensor y = ops::relu(x);
  EXPECT_THAT(error_of<InvalidArgument>([&] { dispatch("test_not_capturable", {y}); }),
              HasSubstr("op 'test_not_capturable' cannot be captured in an HPU graph on hpu:0"));
  g.capture_abort();
  // No builtin op needs the flag: every engine op infers its output shape from shapes alone.
  for (const char* name : {"relu", "matmul", "conv2d", "softmax", "embedding", "gather", "dropout", "argmax"})
    EXPECT_TRUE(op_schema(name).capturable) << name;
}

TEST(HPUGraph, NestedCaptureThrows) {
  HPUGraph outer(kHpu), inner(kHpu);
  Tensor x = Tensor::from_vector({3}, {1}, kHpu);
  outer.capture_begin();
  Tensor y = ops::scale(x, 2);
  EXPECT_THAT(error_of<InvalidArgument>([&] { inner.capture_begin(); }), HasSubstr("captures cannot nest"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { outer.capture_begin(); }), HasSubstr("already capturing"));
  EXPECT_FALSE(inner.capturing());
  outer.capture_end();
  EXPECT_EQ(y.to_vector(), (std::vector<float>{6}));
  inner.capture([&] { y = ops::scale(x, 3); });  // after the outer one ended
  EXPECT_EQ(y.to_vector(), (std::vector<float>{9}));
}

TEST(HPUGraph, FailedCaptureLeavesNoHalfBuiltGraph) {
  register_test_ops();
  enable_lazy_mode(true);  // a left-over trace would show up as a lazy step
  Tensor x = Tensor::from_vector({1, -1}, {2}, kHpu);
  mark_step(kHpu);
  HPUGraph g(kHpu);
  Tensor leaked;
  // 1. An exception in user code between begin and end.
  EXPECT_THROW(g.capture([&] {
    leaked = ops::relu(x);
    throw std::runtime_error("user code failed");
  }),
               std::runtime_error);
  EXPECT_FALSE(g.capturing());
  EXPECT_FALSE(g.captured());
  EXPECT_THAT(error_of<InvalidArgument>([&] { leaked.to_vector(); }),
              HasSubstr("value produced by op 'relu' in an aborted HPU graph capture on hpu:0"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { ops::scale(leaked, 2); }), HasSubstr("input 0 was produced by op 'relu'"));
  // 2. A compile error at capture_end.
  Tensor half;
  EXPECT_THROW(g.capture([&] { half = dispatch("test_unpreparable", {ops::relu(x)}); }), InvalidArgument);
  EXPECT_FALSE(g.capturing());
  EXPECT_THAT(error_of<InvalidArgument>([&] { half.to_vector(); }), HasSubstr("whose compile failed"));
  // 3. A graph destroyed while capturing.
  {
    HPUGraph dropped(kHpu);
    dropped.capture_begin();
    leaked = ops::scale(x, 5);
  }
  EXPECT_EQ(g.stats().aborted_captures, 2u);
  // Nothing is left in the trace: the next mark_step runs nothing, the next capture works.
  const LazyStats before = lazy_stats();
  mark_step(kHpu);
  EXPECT_EQ(lazy_stats().steps, before.steps);
  Tensor y;
  g.capture([&] { y = ops::scale(ops::relu(x), 4); });
  EXPECT_EQ(y.to_vector(), (std::vector<float>{4, 0}));
  EXPECT_EQ(g.stats().captures, 1u);
  enable_lazy_mode(false);
}

// ---------------------------------------------------------------------------------------------
// Lazy mode

TEST(Lazy, MarkStepCompilesOnceThenHitsTheCache) {
  test::ModeGuard lazy(test::Mode::HpuLazy);
  Tensor w = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, kHpu);
  const LazyStats s0 = lazy_stats();
  std::vector<float> last;
  for (int i = 0; i < 5; ++i) {
    Tensor x = Tensor::from_vector({float(i), 1, 0, float(-i)}, {2, 2}, kHpu);
    Tensor y = ops::relu(ops::matmul(x, w));
    EXPECT_TRUE(y.is_lazy());
    mark_step(kHpu);
    EXPECT_FALSE(y.is_lazy());
    last = y.to_vector();
  }
  const LazyStats s1 = lazy_stats();
  EXPECT_EQ(s1.steps - s0.steps, 5u);
  EXPECT_EQ(s1.cache_misses - s0.cache_misses, 1u);
  EXPECT_EQ(s1.cache_hits - s0.cache_hits, 4u);
  // x = [[4, 1], [0, -4]] @ [[1, 2], [3, 4]] = [[7, 12], [-12, -16]] -> relu
  EXPECT_EQ(last, (std::vector<float>{7, 12, 0, 0}));
}

TEST(Lazy, AStepWhoseCompileFailsLeavesValuesThatNameTheirOp) {
  register_test_ops();
  test::ModeGuard lazy(test::Mode::HpuLazy);
  Tensor x = Tensor::from_vector({1, -1}, {2}, kHpu);
  Tensor half = dispatch("test_unpreparable", {ops::relu(x)});
  EXPECT_THROW(mark_step(kHpu), InvalidArgument);
  EXPECT_THAT(error_of<InvalidArgument>([&] { half.to_vector(); }),
              HasSubstr("value produced by op 'test_unpreparable' in a lazy step on hpu:0 whose compile failed"));
  Tensor y = ops::scale(x, 2);  // the device keeps working
  EXPECT_EQ(y.to_vector(), (std::vector<float>{2, -2}));
}

TEST(Lazy, HostReadRunsThePendingGraph) {
  test::ModeGuard lazy(test::Mode::HpuLazy);
  Tensor x = Tensor::from_vector({-1, 2}, {2}, kHpu);
  Tensor y = ops::scale(ops::relu(x), 3);
  Tensor s = ops::sum(y);
  EXPECT_TRUE(y.is_lazy());
  const uint64_t steps = lazy_stats().steps;
  EXPECT_EQ(s.item(), 6.0f);  // one step runs both
  EXPECT_FALSE(y.is_lazy());
  EXPECT_EQ(lazy_stats().steps, steps + 1);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 6}));
  EXPECT_EQ(lazy_stats().steps, steps + 1);
}

TEST(Lazy, EnvironmentSelectsEagerOrLazy) {
  struct Restore {
    ~Restore() {
      ::unsetenv("HG_LAZY_MODE");
      ::unsetenv("PT_HPU_LAZY_MODE");
      enable_lazy_mode(false);
    }
  } restore;
  ::unsetenv("HG_LAZY_MODE");
  ::unsetenv("PT_HPU_LAZY_MODE");
  init_lazy_mode_from_env();
  EXPECT_TRUE(lazy_mode_enabled());  // default: lazy
  ::setenv("PT_HPU_LAZY_MODE", "0", 1);  // Habana's switch
  init_lazy_mode_from_env();
  EXPECT_FALSE(lazy_mode_enabled());
  EXPECT_FALSE(ops::relu(Tensor::full({2}, 1.0f, kHpu)).is_lazy());
  ::setenv("HG_LAZY_MODE", "1", 1);  // ours wins
  init_lazy_mode_from_env();
  EXPECT_TRUE(lazy_mode_enabled());
  ::setenv("HG_LAZY_MODE", "0", 1);
  ::setenv("PT_HPU_LAZY_MODE", "1", 1);
  init_lazy_mode_from_env();
  EXPECT_FALSE(lazy_mode_enabled());
  ::setenv("HG_LAZY_MODE", "yes", 1);
  EXPECT_THAT(error_of<InvalidArgument>([] { init_lazy_mode_from_env(); }),
              HasSubstr("HG_LAZY_MODE='yes' must be 0 (eager) or 1 (lazy)"));
}

// The zoo models zoo_test.cpp does not run lazily (it covers lenet5, resnet18, bert_classifier).
TEST(Lazy, MlpAndGptEqualEager) {
  NoGradGuard no_grad;
  auto mlp = models::zoo::mlp({16, 32, 8}, 1);
  models::GPT gpt(models::GPTConfig{.d_model = 32, .nhead = 2, .layers = 2, .ff = 64, .max_len = 32}, 1);
  mlp->to(kHpu);
  gpt.to(kHpu);
  gpt.eval();
  const Tensor x = ramp({3, 16}, 0.2f);
  const Tensor ids = Tensor::from_indices({72, 101, 108, 108, 111, 32, 119, 111, 114, 108}, {2, 5}, kHpu);
  const std::vector<float> mlp_eager = mlp->forward(x).to_vector(), gpt_eager = gpt.forward(ids).to_vector();
  test::ModeGuard lazy(test::Mode::HpuLazy);
  Tensor a = mlp->forward(x), b = gpt.forward(ids);
  EXPECT_TRUE(a.is_lazy());
  EXPECT_TRUE(b.is_lazy());
  mark_step(kHpu);
  test::expect_close(a.to_vector(), mlp_eager, 1e-5, "mlp lazy vs eager", 1e-6);
  test::expect_close(b.to_vector(), gpt_eager, 1e-4, "gpt lazy vs eager", 1e-5);
}

// ---------------------------------------------------------------------------------------------
// make_graphed_callables

// Copies of one model's parameters, so an eager twin can be compared with a graphed one.
void copy_params(models::Module& from, models::Module& to) {
  auto src = from.named_parameters(), dst = to.named_parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].second->copy_from(*src[i].second);
}

std::vector<Tensor> params_of(models::Module& m) {
  std::vector<Tensor> r;
  for (auto& [n, p] : m.named_parameters()) r.push_back(*p);
  return r;
}

void expect_same_grads(models::Module& graphed, models::Module& eager, const std::string& what) {
  auto g = graphed.named_parameters(), e = eager.named_parameters();
  ASSERT_EQ(g.size(), e.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(g[i].second->grad().defined()) << what << " " << g[i].first;
    test::expect_close(g[i].second->grad().to_vector(), e[i].second->grad().to_vector(), 1e-4,
                       what + " grad of " + g[i].first, 1e-5);
  }
}

TEST(GraphedCallables, MlpTrainingLoopMatchesEagerAutograd) {
  auto eager = models::zoo::mlp({12, 24, 5}, 4), graphed = models::zoo::mlp({12, 24, 5}, 9);
  eager->to(kHpu);
  graphed->to(kHpu);
  copy_params(*eager, *graphed);
  Tensor sample = ramp({6, 12}, 0.1f);
  sample.set_requires_grad(true);
  auto step = make_graphed_callables(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{graphed->forward(in[0])}; }, {sample},
      params_of(*graphed));
  EXPECT_TRUE(step->forward_graph().captured());
  EXPECT_TRUE(step->backward_graph().captured());
  for (auto& [n, p] : graphed->named_parameters()) EXPECT_FALSE(p->grad().defined()) << "capture left a grad on " << n;
  training::SGD opt_e(eager->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  training::SGD opt_g(graphed->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  const Tensor labels = Tensor::from_indices({0, 1, 2, 3, 4, 0}, {6}, kHpu);
  for (int it = 0; it < 3; ++it) {
    Tensor xe = ramp({6, 12}, 0.05f * static_cast<float>(it + 1)), xg = xe.clone();
    xe.set_requires_grad(true);
    xg.set_requires_grad(true);
    opt_e.zero_grad();
    opt_g.zero_grad();
    Tensor le = ops::cross_entropy(eager->forward(xe), labels);
    Tensor lg = ops::cross_entropy((*step)({xg})[0], labels);
    EXPECT_NEAR(lg.item(), le.item(), 1e-5) << "step " << it;
    le.backward();
    lg.backward();
    expect_same_grads(*graphed, *eager, "step " + std::to_string(it));
    test::expect_close(xg.grad().to_vector(), xe.grad().to_vector(), 1e-4, "input grad", 1e-6);
    opt_e.step();
    opt_g.step();  // in place: the graphs read the updated weights
  }
  EXPECT_EQ(step->forward_graph().stats().replays, 3u);
  EXPECT_EQ(step->backward_graph().stats().replays, 3u);
}

TEST(GraphedCallables, LeNetGradsMatchEager) {
  auto eager = models::zoo::lenet5(10, 1), graphed = models::zoo::lenet5(10, 2);
  eager->to(kHpu);
  graphed->to(kHpu);
  copy_params(*eager, *graphed);
  const Tensor x = ramp({2, 1, 32, 32}, 0.02f);
  auto step = make_graphed_callables(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{graphed->forward(in[0])}; }, {x},
      params_of(*graphed));
  const Tensor r = ramp({2, 10}, 0.3f);
  ops::sum(ops::mul(eager->forward(x), r)).backward();
  ops::sum(ops::mul((*step)({x})[0], r)).backward();
  expect_same_grads(*graphed, *eager, "lenet5");
}

TEST(GraphedCallables, MultipleOutputsAndNoGrad) {
  Tensor w = ramp({4, 4}, 0.1f);
  w.set_requires_grad(true);
  auto fn = [&](const std::vector<Tensor>& in) {
    Tensor h = ops::matmul(in[0], w);
    return std::vector<Tensor>{ops::relu(h), ops::sum(ops::mul(h, h))};
  };
  const Tensor x = ramp({3, 4}, 0.25f);
  auto g = make_graphed_callables(fn, {x}, {w});
  auto loss_of = [](const std::vector<Tensor>& o) { return ops::add(ops::sum(ops::scale(o[0], 2)), o[1]); };
  loss_of(fn({x})).backward();
  const std::vector<float> eager_grad = w.grad().to_vector();
  w.zero_grad();
  loss_of((*g)({x})).backward();
  test::expect_close(w.grad().to_vector(), eager_grad, 1e-5, "two-output grad", 1e-5);
  EXPECT_EQ(g->backward_graph().stats().replays, 2u);  // one per output that got a gradient
  NoGradGuard no_grad;
  auto outs = (*g)({x});
  EXPECT_FALSE(outs[0].requires_grad());
  test::expect_close(outs[1].to_vector(), fn({x})[1].to_vector(), 1e-6, "no-grad forward");
}

TEST(GraphedCallables, ErrorsNameTheProblem) {
  Tensor w = ramp({4, 2}, 0.1f);
  w.set_requires_grad(true);
  Tensor x = ramp({3, 4}, 0.2f), unused = ramp({2}, 1.0f);
  unused.set_requires_grad(true);
  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::matmul(in[0], w)}; };
  EXPECT_THAT(error_of<InvalidArgument>([&] { make_graphed_callables(fn, {x, unused}, {w}); }),
              HasSubstr("sample input 1 requires grad but the callable's outputs do not depend on it"));
  auto g = make_graphed_callables(fn, {x, unused}, {w}, {.allow_unused_input = true});
  EXPECT_THAT(error_of<InvalidArgument>([&] { (*g)({ramp({5, 4}, 1.0f), unused}); }),
              HasSubstr("input 0 is F32[5, 4] on hpu:0, it was captured with F32[3, 4]"));
  Tensor first = (*g)({x, unused})[0];
  Tensor second = (*g)({x, unused})[0];
  EXPECT_THAT(error_of<InvalidArgument>([&] { ops::sum(first).backward(); }),
              HasSubstr("run each call's backward before the next call"));
  ops::sum(second).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(unused.grad().defined());
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                make_graphed_callables([&](const std::vector<Tensor>& in) { return in; }, {x}, {});
              }),
              HasSubstr("output 0 is not computed by the callable"));
}

// ---------------------------------------------------------------------------------------------
// wrap_in_hpu_graph

struct ZooCase {
  std::string name;
  std::shared_ptr<models::Module> module;
  Tensor input, other;  // two inputs of one signature
};

std::vector<ZooCase> zoo_cases() {
  std::vector<ZooCase> r;
  r.push_back({"mlp", models::zoo::mlp({64, 32, 10}, 2), ramp({4, 64}, 0.1f, Device::cpu()),
               ramp({4, 64}, -0.07f, Device::cpu())});
  for (const char* name : {"lenet5", "resnet18", "bert_classifier"}) {
    std::shared_ptr<models::Module> m;
    if (name == std::string("lenet5")) m = models::zoo::lenet5();
    else if (name == std::string("resnet18")) m = models::zoo::resnet18();
    else m = models::zoo::bert_classifier();
    m->load_state_dict(zoo_data(name));
    const Tensor x = zoo_data(std::string(name) + "_io")["input"];
    Tensor other;
    if (x.dtype() == DType::I64) {  // other token ids below the vocabulary size (1000)
      std::vector<int64_t> ids = x.to_indices();
      for (auto& v : ids) v = (v * 7 + 3) % 1000;
      other = Tensor::from_indices(ids, x.shape());
    } else {
      other = ops::scale(x, -0.5);
    }
    r.push_back({name, m, x, other});
  }
  std::vector<int64_t> ids(2 * 12), ids2(2 * 12);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>(i * 37 % 256);
    ids2[i] = static_cast<int64_t>(i * 11 % 256);
  }
  const models::GPTConfig gpt{.d_model = 64, .nhead = 4, .layers = 2, .ff = 128, .max_len = 64};
  r.push_back({"gpt", std::make_shared<models::GPT>(gpt, 3),
               Tensor::from_indices(ids, {2, 12}), Tensor::from_indices(ids2, {2, 12})});
  return r;
}

TEST(WrapInHPUGraph, EveryZooModelEqualsEager) {
  for (ZooCase& c : zoo_cases()) {
    c.module->to(kHpu);
    c.module->eval();
    std::vector<float> eager_a, eager_b;
    {
      NoGradGuard no_grad;
      eager_a = c.module->forward(c.input.to(kHpu)).to_vector();
      eager_b = c.module->forward(c.other.to(kHpu)).to_vector();
    }
    auto wrapped = models::wrap_in_hpu_graph(c.module);
    const Tensor a = wrapped->forward(c.input.to(kHpu));  // capture (weights frozen)
    test::expect_close(a.to_vector(), eager_a, 1e-4, c.name + " capture vs eager", 1e-4);
    const Tensor b = wrapped->forward(c.other.to(kHpu));  // replay
    test::expect_close(b.to_vector(), eager_b, 1e-4, c.name + " replay vs eager", 1e-4);
    EXPECT_EQ(b.impl(), a.impl()) << c.name << ": a replay returns the static outputs, as Habana's";
    const models::HPUGraphWrapStats s = wrapped->stats();
    EXPECT_EQ(s.calls, 2u) << c.name;
    EXPECT_EQ(s.misses, 1u) << c.name;
    EXPECT_EQ(s.hits, 1u) << c.name;
    EXPECT_EQ(s.captures, 1u) << c.name;
    EXPECT_EQ(s.graphs, 1u) << c.name;
  }
}

std::shared_ptr<models::Module> small_mlp() {
  std::shared_ptr<models::Module> m = models::zoo::mlp({8, 16, 3}, 5);
  m->to(kHpu);
  m->eval();
  return m;
}

std::vector<float> eager_of(models::Module& m, const Tensor& x) {
  NoGradGuard no_grad;
  return m.forward(x).to_vector();
}

TEST(WrapInHPUGraph, EvictsTheLeastRecentlyUsedGraph) {
  auto m = small_mlp();
  auto w = models::wrap_in_hpu_graph(m, {.max_graphs = 2});
  auto batch = [](int64_t n) { return ramp({n, 8}, 0.1f * static_cast<float>(n)); };
  auto key = [](int64_t n) { return "eval|F32@hpu:0[" + std::to_string(n) + ", 8]"; };
  for (int64_t n : {1, 2, 1}) w->forward(batch(n));  // b1 miss, b2 miss, b1 hit
  EXPECT_EQ(w->cached_keys(), (std::vector<std::string>{key(1), key(2)}));
  const Tensor y3 = w->forward(batch(3));  // evicts b2, the least recently used
  EXPECT_EQ(w->cached_keys(), (std::vector<std::string>{key(3), key(1)}));
  test::expect_close(y3.to_vector(), eager_of(*m, batch(3)), 1e-5, "b3");
  const Tensor y2 = w->forward(batch(2));  // captured again; evicts b1
  EXPECT_EQ(w->cached_keys(), (std::vector<std::string>{key(2), key(3)}));
  test::expect_close(y2.to_vector(), eager_of(*m, batch(2)), 1e-5, "b2 again");
  const models::HPUGraphWrapStats s = w->stats();
  EXPECT_EQ(s.calls, 5u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.captures, 4u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.graphs, 2u);
  EXPECT_GT(s.arena_bytes, 0u);
  w->clear_cache();
  EXPECT_TRUE(w->cached_keys().empty());
  EXPECT_EQ(w->stats().graphs, 0u);
  w->forward(batch(3));
  EXPECT_EQ(w->stats().captures, 5u);
}

TEST(WrapInHPUGraph, BypassRunsEagerAndSignatureSeesDtypeAndLayout) {
  auto m = small_mlp();
  auto w = models::wrap_in_hpu_graph(m);
  const Tensor x = ramp({2, 8}, 0.3f);
  const std::vector<Tensor> out = w->call({x}, {}, /*bypass=*/true);
  EXPECT_FALSE(out[0].is_lazy());
  test::expect_close(out[0].to_vector(), eager_of(*m, x), 1e-6, "bypass");
  EXPECT_EQ(w->stats().bypasses, 1u);
  EXPECT_EQ(w->stats().graphs, 0u);
  // A transposed input of the same shape is another layout: another graph.
  const Tensor xt = ramp({8, 2}, 0.3f).transpose(0, 1);
  w->forward(x);
  test::expect_close(w->forward(xt).to_vector(), eager_of(*m, xt.contiguous()), 1e-5, "transposed input");
  EXPECT_EQ(w->stats().graphs, 2u);
  EXPECT_THAT(w->cached_keys()[0], HasSubstr("strides[1, 2]"));
  // The BERT classifier takes I64 or I32 ids: one graph each.
  std::shared_ptr<models::Module> bert =
      models::zoo::bert_classifier({.vocab = 50, .d_model = 16, .nhead = 2, .layers = 1, .ff = 32, .max_len = 8});
  bert->to(kHpu);
  bert->eval();
  auto wb = models::wrap_in_hpu_graph(bert);
  const Tensor ids = Tensor::from_indices({1, 5, 7, 9}, {1, 4}, kHpu);
  const std::vector<float> a = wb->forward(ids).to_vector(), b = wb->forward(ids.to(DType::I32)).to_vector();
  EXPECT_EQ(wb->stats().captures, 2u);
  test::expect_close(b, a, 1e-6, "I32 ids vs I64 ids");
}

TEST(WrapInHPUGraph, TrainModeReadsLiveWeightsAndReplacedStateRecaptures) {
  auto m = small_mlp();
  m->train();
  auto w = models::wrap_in_hpu_graph(m);
  EXPECT_TRUE(m->training());
  const Tensor x = ramp({3, 8}, 0.2f);
  w->forward(x);
  Tensor& w0 = *m->named_parameters()[0].second;
  w0.copy_from(ops::scale(w0, 1.5));  // in place, as an optimizer step: the graph sees it
  test::expect_close(w->forward(x).to_vector(), eager_of(*m, x), 1e-5, "train mode after an in-place update");
  EXPECT_EQ(w->stats().captures, 1u);
  // Eval mode: the weights are frozen into a new graph (the mode is part of the key).
  w->eval();
  test::expect_close(w->forward(x).to_vector(), eager_of(*m, x), 1e-5, "eval mode");
  EXPECT_EQ(w->stats().invalidations, 1u);  // the cache of the train-mode graphs was dropped
  // A parameter replaced by another tensor (as to(device) does): the graphs holding the old one
  // are dropped.
  w0 = ops::scale(w0, 2).detach();
  w0.set_requires_grad(true);
  test::expect_close(w->forward(x).to_vector(), eager_of(*m, x), 1e-5, "after replacing a parameter");
  EXPECT_EQ(w->stats().invalidations, 2u);
  EXPECT_EQ(w->stats().captures, 3u);
}

TEST(WrapInHPUGraph, TrainModeWithGradGivesEagerGradients) {
  auto m = small_mlp();
  m->train();
  auto twin = models::zoo::mlp({8, 16, 3}, 6);
  twin->to(kHpu);
  copy_params(*m, *twin);
  auto w = models::wrap_in_hpu_graph(m);
  const Tensor r = ramp({4, 3}, 0.2f);
  for (int it = 0; it < 2; ++it) {
    const Tensor x = ramp({4, 8}, 0.1f * static_cast<float>(it + 1));
    for (auto* mod : {static_cast<models::Module*>(m.get()), static_cast<models::Module*>(twin.get())})
      for (auto& [n, p] : mod->named_parameters()) p->zero_grad();
    const Tensor y = w->forward(x);
    EXPECT_TRUE(y.requires_grad());
    ops::sum(ops::mul(y, r)).backward();
    ops::sum(ops::mul(twin->forward(x), r)).backward();
    expect_same_grads(*m, *twin, "wrapped train step " + std::to_string(it));
  }
  EXPECT_EQ(w->stats().captures, 1u);
  EXPECT_EQ(w->stats().hits, 1u);
  EXPECT_THAT(w->cached_keys()[0], HasSubstr("train+grad"));
  NoGradGuard no_grad;  // train mode without grad: a forward-only graph of its own
  const Tensor x = ramp({4, 8}, 0.3f);
  const Tensor y = w->forward(x);
  EXPECT_FALSE(y.requires_grad());
  test::expect_close(y.to_vector(), twin->forward(x).to_vector(), 1e-5, "train mode, no grad");
  EXPECT_EQ(w->stats().captures, 2u);
}

TEST(WrapInHPUGraph, NonTensorArgumentsAreKeyedOnlyWhenAsked) {
  auto m = small_mlp();
  models::ModuleFn scaled = [](models::Module& mod, const std::vector<Tensor>& in, const std::vector<models::Arg>& a) {
    return std::vector<Tensor>{ops::scale(mod.forward(in[0]), static_cast<double>(std::get<int64_t>(a.at(0))))};
  };
  const Tensor x = ramp({2, 8}, 0.1f);
  auto plain = models::wrap_in_hpu_graph(m, {}, scaled);
  EXPECT_THAT(error_of<InvalidArgument>([&] { plain->call({x}, {int64_t{3}}); }),
              HasSubstr("non-tensor argument 0 (3) would be baked into the captured graph"));
  auto keyed = models::wrap_in_hpu_graph(m, {.key_args_by_value = true}, scaled);
  const std::vector<float> base = eager_of(*m, x);
  for (int64_t k : {2, 3, 2}) {
    const std::vector<float> got = keyed->call({x}, {k})[0].to_vector();
    for (size_t i = 0; i < base.size(); ++i) EXPECT_NEAR(got[i], base[i] * static_cast<float>(k), 1e-5) << "k=" << k;
  }
  EXPECT_EQ(keyed->stats().captures, 2u);
  EXPECT_EQ(keyed->stats().hits, 1u);
}

TEST(WrapInHPUGraph, DisableTensorCacheDryRunAndAsynchronous) {
  auto m = small_mlp();
  const Tensor x1 = ramp({2, 8}, 0.1f), x2 = ramp({2, 8}, -0.2f);
  auto fresh = models::wrap_in_hpu_graph(m, {.disable_tensor_cache = true});
  const Tensor a = fresh->forward(x1), b = fresh->forward(x2);
  EXPECT_NE(a.impl()->storage, b.impl()->storage);  // caller-owned outputs: the first stays valid
  test::expect_close(a.to_vector(), eager_of(*m, x1), 1e-5, "first output kept");
  test::expect_close(b.to_vector(), eager_of(*m, x2), 1e-5, "second output");
  EXPECT_EQ(fresh->stats().hits, 1u);
  for (models::HPUGraphWrapOptions opt : {models::HPUGraphWrapOptions{.dry_run = true},
                                          models::HPUGraphWrapOptions{.asynchronous = true}}) {
    auto w = models::wrap_in_hpu_graph(m, opt);
    test::expect_close(w->forward(x1).to_vector(), eager_of(*m, x1), 1e-5, "first call");
    test::expect_close(w->forward(x2).to_vector(), eager_of(*m, x2), 1e-5, "second call");
    EXPECT_EQ(w->stats().captures, 1u);
  }
}

}  // namespace
