// fuse_attention (graphs/pass_fuse_attention.cpp) and the sdpa op (engine/sdpa_kernel.cpp):
// golden before/after dumps of the attention chains our engine, the GPT decoder and ONNX
// imports produce (tests/golden/attention/*.txt), fused == unfused within 1e-5 on random shapes
// and masks, the chains that must stay unfused, and a captured HPU graph against eager.
//
// Regenerate the goldens after a deliberate change:
//   HG_UPDATE_GOLDENS=1 build/tests/hg_tests --gtest_filter='AttentionFusion*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/fused_ops.h"
#include "engine/ops.h"
#include "graphs/hpu_graph.h"
#include "graphs/passes.h"
#include "models/gpt.h"
#include "models/zoo.h"
#include "tests/fusion_test_util.h"

using namespace hg;
using namespace hg::graphs;
using namespace hg::test::fusion;

namespace {

const OpSchema& op(const char* name) { return op_schema(name); }

enum class Mask { None, Where, MaskedFill, Add };

struct Case {
  Shape q, k, v;  // k as stored: [..., S, D], or [..., D, S] when k_transposed
  Mask mask = Mask::None;
  Shape mask_shape = {};
  int causal = 0;  // 1: causal_fill before the mask, 2: after it
  bool k_transposed = false;
  bool scaled = true;
  bool scaled_q = false;  // q scaled before the product (PyTorch's nn.MultiheadAttention export)
};

// The chain ops::scaled_dot_product_attention records (or its ONNX form): bmm, scale, mask,
// causal_fill, softmax, bmm.
Graph attention_graph(const Case& c) {
  Graph g;
  const int q = g.add_input({c.q, DType::F32});
  const int k = g.add_input({c.k, DType::F32});
  const int v = g.add_input({c.v, DType::F32});
  const int qs = c.scaled_q ? g.add_op(op("scale"), {q}, Attrs{{}, {0.25}}) : q;
  int s = g.add_op(op("bmm"), {qs, k}, Attrs{{0, c.k_transposed ? 0 : 1}, {}});
  if (c.scaled) s = g.add_op(op("scale"), {s}, Attrs{{}, {1.0 / std::sqrt(double(c.q.back()))}});
  auto causal = [&] { s = g.add_op(op("causal_fill"), {s}, Attrs{{}, {-INFINITY}}); };
  if (c.causal == 1) causal();
  switch (c.mask) {
    case Mask::None: break;
    case Mask::Where:
      s = g.add_op(op("where"), {g.add_input({c.mask_shape, DType::BOOL}), s, g.add_input({{}, DType::F32})}, {});
      break;
    case Mask::MaskedFill:
      s = g.add_op(op("masked_fill"), {s, g.add_input({c.mask_shape, DType::BOOL})}, Attrs{{}, {-1e9}});
      break;
    case Mask::Add: s = g.add_op(op("binary"), {s, g.add_input({c.mask_shape, DType::F32})}, Attrs{{0}, {}}); break;
  }
  if (c.causal == 2) causal();
  const int p = g.add_op(op("softmax"), {s}, Attrs{{static_cast<int64_t>(c.q.size()) - 1, 0}, {}});
  g.outputs = {g.add_op(op("bmm"), {p, v}, Attrs{{0, 0}, {}})};
  return g;
}

// fuse_attention once (expects `rewrites`, then nothing), and fused == unfused.
Graph fused(const Graph& g, int rewrites, uint32_t seed = 1) {
  Graph f = g;
  EXPECT_EQ(fuse_attention(f), rewrites);
  const std::string once = f.dump();
  EXPECT_EQ(fuse_attention(f), 0) << "a second application still rewrote";
  EXPECT_EQ(f.dump(), once);
  EXPECT_EQ(count_ops(f, "sdpa"), rewrites);
  if (rewrites) {
    EXPECT_EQ(count_ops(f, "softmax"), 0);
  }
  const auto data = random_inputs(g, seed);
  expect_near(run_graph(f, data), run_graph(g, data), 1e-5);
  return f;
}

TEST(AttentionFusion, BertEncoderAttention) {
  const Case c{{1, 4, 128, 32}, {1, 4, 128, 32}, {1, 4, 128, 32}};
  const Graph f = fused(attention_graph(c), 1);
  EXPECT_EQ(f.nodes[f.outputs[0]].fused, (std::vector<std::string>{"bmm", "scale", "softmax", "bmm"}));
  expect_golden("attention", "bert", attention_graph(c), f);
}

TEST(AttentionFusion, CausalPrefill) {
  const Case c{{2, 4, 20, 32}, {2, 4, 20, 32}, {2, 4, 20, 32}, Mask::None, {}, 2};
  expect_golden("attention", "causal", attention_graph(c), fused(attention_graph(c), 1));
}

// GPT::decode_step's attention: one query row against a bucket of keys, a BOOL mask of the
// valid positions and the -inf fill as a one-element tensor.
TEST(AttentionFusion, GptDecodeWithWhereMask) {
  const Case c{{1, 4, 1, 32}, {1, 4, 16, 32}, {1, 4, 16, 32}, Mask::Where, {1, 1, 1, 16}};
  expect_golden("attention", "decode_where", attention_graph(c), fused(attention_graph(c), 1));
}

TEST(AttentionFusion, AdditiveAndMaskedFillMasks) {
  const Case add{{2, 2, 12, 16}, {2, 2, 12, 16}, {2, 2, 12, 8}, Mask::Add, {2, 1, 1, 12}};
  expect_golden("attention", "mask_add", attention_graph(add), fused(attention_graph(add), 1));
  const Case mf{{3, 9, 16}, {3, 9, 16}, {3, 9, 16}, Mask::MaskedFill, {9, 9}, 1};
  expect_golden("attention", "masked_fill_causal", attention_graph(mf), fused(attention_graph(mf), 1));
}

// torch.onnx's form: q scaled before the matmul, k transposed by its own op, no scale node.
TEST(AttentionFusion, OnnxTransposedKeysWithoutScale) {
  Case c{{1, 4, 24, 32}, {1, 4, 32, 24}, {1, 4, 24, 32}};
  c.k_transposed = true, c.scaled = false;
  const Graph f = fused(attention_graph(c), 1);
  EXPECT_EQ(f.nodes[f.outputs[0]].attrs.i(2), 1) << "k_transposed";
  expect_golden("attention", "onnx_k_transposed", attention_graph(c), f);
}

// nn.MultiheadAttention's export: q / sqrt(d) before the product (a scale op once the importer
// folds the scalar), k transposed; the two scales multiply into the sdpa's.
TEST(AttentionFusion, QueriesScaledBeforeTheProduct) {
  Case c{{4, 8, 16}, {4, 16, 8}, {4, 8, 16}, Mask::Add, {4, 8, 8}};
  c.k_transposed = true, c.scaled_q = true;
  const Graph f = fused(attention_graph(c), 1);
  EXPECT_EQ(f.nodes[f.outputs[0]].fused, (std::vector<std::string>{"scale", "bmm", "scale", "add", "softmax", "bmm"}));
  EXPECT_DOUBLE_EQ(f.nodes[f.outputs[0]].attrs.f(0), 0.25 / 4.0);
}

TEST(AttentionFusion, RandomShapesAndMasksEqualUnfused) {
  std::mt19937 rng(3);
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1)); };
  // Row tiles with a remainder (L * S above the 16K-score unit), slice groups with a
  // remainder, single rows, odd head dims.
  const std::vector<std::array<int64_t, 5>> shapes = {  // batch, heads, L, S, D
      {1, 1, 200, 150, 8}, {50, 1, 20, 20, 4}, {2, 3, 1, 37, 16}, {1, 2, 7, 300, 5}, {3, 4, 64, 64, 32}};
  int trial = 0;
  for (const auto& [b, h, l, s, d] : shapes)
    for (int variant = 0; variant < 4; ++variant, ++trial) {
      Case c{{b, h, l, d}, {b, h, s, d}, {b, h, s, d + pick(0, 3)}};
      c.mask = static_cast<Mask>(variant);
      // A mask broadcasting over some of [b, h, l, s].
      c.mask_shape = {pick(0, 1) ? b : 1, pick(0, 1) ? h : 1, pick(0, 1) ? l : 1, s};
      if (pick(0, 1)) c.mask_shape.erase(c.mask_shape.begin());
      c.causal = l == s ? pick(0, 2) : 0;
      c.k_transposed = pick(0, 1);
      if (c.k_transposed) c.k = {b, h, d, s};
      SCOPED_TRACE("trial " + std::to_string(trial) + ":\n" + attention_graph(c).dump());
      fused(attention_graph(c), 1, static_cast<uint32_t>(trial));
    }
}

TEST(AttentionFusion, ChainsReadElsewhereAreNotFused) {
  const Case c{{1, 2, 8, 16}, {1, 2, 8, 16}, {1, 2, 8, 16}, Mask::Add, {8, 8}};
  Graph probs_out = attention_graph(c);  // the softmax is a graph output too
  for (const auto& n : probs_out.nodes)
    if (n.kind == Node::Kind::Op && n.op->name == "softmax") probs_out.outputs.push_back(&n - probs_out.nodes.data());
  fused(probs_out, 0);
  Graph scores_twice = attention_graph(c);  // the scaled scores have a second reader
  for (const auto& n : scores_twice.nodes)
    if (n.kind == Node::Kind::Op && n.op->name == "scale") {
      const int s = static_cast<int>(&n - scores_twice.nodes.data());
      scores_twice.outputs.push_back(scores_twice.add_op(op("relu"), {s}, {}));
      break;
    }
  fused(scores_twice, 0);
  const Case broadcast_keys{{2, 4, 8, 16}, {1, 4, 8, 16}, {2, 4, 8, 16}};  // k's batch broadcast
  fused(attention_graph(broadcast_keys), 0);
  Graph other_axis = attention_graph(c);  // softmax over the query axis
  for (auto& n : other_axis.nodes)
    if (n.kind == Node::Kind::Op && n.op->name == "softmax") n.attrs.ints[0] = 2;
  fused(other_axis, 0);
}

TEST(AttentionFusion, SdpaOpEqualsTheUnfusedOpsEagerly) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  auto randn = [&](const Shape& s) {
    std::vector<float> v(numel(s));
    for (auto& x : v) x = nd(rng);
    return Tensor::from_vector(v, s);
  };
  const Tensor qs = randn({2, 3, 5, 8}), ks = randn({2, 3, 6, 8}), vs = randn({2, 3, 6, 4});
  const Tensor mask = randn({1, 1, 5, 6});
  const double scale = 1.0 / std::sqrt(8.0);
  const Tensor want = ops::scaled_dot_product_attention(qs, ks, vs, mask, false);
  const Tensor got = dispatch("sdpa", {qs, ks, vs, mask}, Attrs{{sdpa::kAdd, 0, 0}, {scale, 0, 0}});
  ASSERT_EQ(got.shape(), (Shape{2, 3, 5, 4}));
  expect_near({got.to_vector()}, {want.to_vector()}, 1e-5);
}

TEST(AttentionFusion, SdpaSchemaErrorsNameTheProblem) {
  const OpSchema& s = op("sdpa");
  const TensorMeta q{{2, 5, 8}, DType::F32}, k{{2, 6, 8}, DType::F32}, v{{2, 6, 4}, DType::F32};
  auto infer = [&](std::vector<TensorMeta> in, Attrs a) { return s.infer(s, in, a); };
  EXPECT_EQ(infer({q, k, v}, Attrs{{0, 0, 0}, {1, 0, 0}}).shape, (Shape{2, 5, 4}));
  EXPECT_THROW(infer({q, k, v}, Attrs{{7, 0, 0}, {1, 0, 0}}), ShapeError);                       // mask kind
  EXPECT_THROW(infer({q, k, v}, Attrs{{sdpa::kAdd, 0, 0}, {1, 0, 0}}), ShapeError);              // no mask input
  EXPECT_THROW(infer({q, {{2, 6, 7}, DType::F32}, v}, Attrs{{0, 0, 0}, {1, 0, 0}}), ShapeError);  // head dim
  EXPECT_THROW(infer({q, k, {{2, 5, 4}, DType::F32}}, Attrs{{0, 0, 0}, {1, 0, 0}}), ShapeError);  // S of v
  EXPECT_THROW(infer({q, {{1, 6, 8}, DType::F32}, v}, Attrs{{0, 0, 0}, {1, 0, 0}}), ShapeError);  // batch
  EXPECT_THROW(infer({q, k, v, {{5, 6}, DType::F32}}, Attrs{{sdpa::kWhere, 0, 0}, {1, 0, 0}}), ShapeError);
  EXPECT_THROW(infer({q, k, v, {{5, 6}, DType::F32}}, Attrs{{sdpa::kMaskedFill, 0, 0}, {1, 0, 0}}), DTypeError);
  EXPECT_THROW(infer({q, k, v, {{4, 6}, DType::F32}}, Attrs{{sdpa::kAdd, 0, 0}, {1, 0, 0}}), ShapeError);
  EXPECT_THROW(infer({q, k, v, {{5, 6}, DType::BOOL}, {{2}, DType::F32}}, Attrs{{sdpa::kWhere, 0, 0}, {1, 0, 0}}),
               ShapeError);  // fill of two elements
}

// ops::scaled_dot_product_attention captured in an HPU graph compiles to one sdpa node, and
// replays equal eager CPU.
TEST(AttentionFusion, CapturedAttentionUsesTheFusedKernel) {
  NoGradGuard no_grad;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  auto randn = [&](const Shape& s) {
    std::vector<float> v(numel(s));
    for (auto& x : v) x = nd(rng);
    return Tensor::from_vector(v, s);
  };
  const Tensor q = randn({2, 4, 16, 32}), k = randn({2, 4, 16, 32}), v = randn({2, 4, 16, 32});
  const Tensor want = ops::scaled_dot_product_attention(q, k, v, {}, /*causal=*/true);
  const Device d = Device::hpu(0);
  Tensor qd = q.to(d), kd = k.to(d), vd = v.to(d);
  HPUGraph g(d);
  g.capture_begin();
  Tensor out = ops::scaled_dot_product_attention(qd, kd, vd, {}, /*causal=*/true);
  g.capture_end();
  EXPECT_EQ(count_ops(g.executable().graph(), "sdpa"), default_pass_options().fusion ? 1 : 0);
  g.replay();
  expect_near({out.to_vector()}, {want.to_vector()}, 1e-5);
}

// Sets HG_DISABLE_FUSION for the compiles in its scope, then restores the variable.
class FusionEnv {
 public:
  explicit FusionEnv(bool fusion) {
    if (const char* v = std::getenv("HG_DISABLE_FUSION")) saved_ = v;
    if (fusion) unsetenv("HG_DISABLE_FUSION");
    else setenv("HG_DISABLE_FUSION", "1", 1);
  }
  ~FusionEnv() {
    if (saved_) setenv("HG_DISABLE_FUSION", saved_->c_str(), 1);
    else unsetenv("HG_DISABLE_FUSION");
  }

 private:
  std::optional<std::string> saved_;
};

// GPT decode steps of batch 2 in every attention bucket (16 to 256 positions) capture to graphs
// with one sdpa per layer, whose replay equals the same capture with fusion off.
TEST(AttentionFusion, GptDecodeBucketsFuseAndEqualUnfused) {
  NoGradGuard no_grad;
  const Device d = Device::hpu(0);
  const models::GPTConfig config;
  auto gpt = models::zoo::gpt(config, 3);
  gpt->eval();
  gpt->to(d);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  const Shape kv{2, config.nhead, config.max_len, config.d_model / config.nhead};
  std::vector<std::vector<float>> k(config.layers), v(config.layers);
  for (int64_t l = 0; l < config.layers; ++l) {
    k[l].resize(numel(kv)), v[l].resize(numel(kv));
    for (auto& x : k[l]) x = nd(rng);
    for (auto& x : v[l]) x = nd(rng);
  }
  for (int64_t len : {5, 20, 40, 100, 200, 255}) {
    std::vector<float> out[2];
    for (int fusion : {0, 1}) {
      const FusionEnv env(fusion);
      models::KVCache cache;
      for (int64_t l = 0; l < config.layers; ++l) {
        cache.k.push_back(Tensor::from_vector(k[l], kv).to(d));
        cache.v.push_back(Tensor::from_vector(v[l], kv).to(d));
      }
      cache.length = len;
      const models::DecodeInputs in = gpt->decode_inputs(Tensor::from_indices({7, 200}, {2}), cache);
      HPUGraph g(d);
      g.capture_begin();
      const Tensor logits = gpt->decode(in, cache);
      g.capture_end();
      EXPECT_EQ(count_ops(g.executable().graph(), "sdpa"), fusion ? config.layers : 0) << "length " << len;
      out[fusion] = logits.to_vector();
    }
    SCOPED_TRACE("length " + std::to_string(len));
    expect_near({out[1]}, {out[0]}, 1e-5, 1e-5);
  }
}

}  // namespace
