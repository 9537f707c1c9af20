// Module API: state_dict order and names, strict/non-strict load_state_dict and its errors,
// buffers, to(device), forward_all.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "models/attention.h"
#include "models/module.h"
#include "tests/golden.h"

namespace hg {
namespace {

using namespace models;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A block with own parameters, own buffers and children, like torchvision's BasicBlock.
class Block : public Module {
 public:
  Block() {
    scale_ = &register_parameter("scale", Tensor::full({2}, 1.0f));
    register_buffer("steps", Tensor::zeros({}, DType::I64));
    conv_ = register_module("conv", std::make_shared<Conv2d>(2, 2, ops::Size2{1, 1}, Conv2dOptions{.bias = false}, 3));
    bn_ = register_module("bn", std::make_shared<BatchNorm2d>(2));
  }
  Tensor forward(const Tensor& x) override { return bn_->forward(conv_->forward(x)); }
  nlohmann::json spec() const override { return {{"op", "block"}}; }

 private:
  Tensor* scale_;
  std::shared_ptr<Conv2d> conv_;
  std::shared_ptr<BatchNorm2d> bn_;
};

std::vector<std::string> keys(const StateDict& sd) {
  std::vector<std::string> r;
  for (auto& [k, t] : sd) r.push_back(k);
  return r;
}

std::map<std::string, Tensor> as_map(const StateDict& sd) {
  std::map<std::string, Tensor> m;
  for (auto& [k, t] : sd) m[k] = t.clone();
  return m;
}

TEST(Module, StateDictInPyTorchOrder) {
  Sequential net;
  net.add(std::make_shared<Block>()).add(std::make_shared<ReLU>()).add(std::make_shared<Linear>(2, 3, 0, false));
  EXPECT_THAT(keys(net.state_dict()),
              ElementsAre("0.scale", "0.steps", "0.conv.weight", "0.bn.weight", "0.bn.bias", "0.bn.running_mean",
                          "0.bn.running_var", "0.bn.num_batches_tracked", "2.weight"));
  std::vector<std::string> params, buffers;
  for (auto& [n, t] : net.named_parameters()) params.push_back(n);
  for (auto& [n, t] : net.named_buffers()) buffers.push_back(n);
  EXPECT_THAT(params, ElementsAre("0.scale", "0.conv.weight", "0.bn.weight", "0.bn.bias", "2.weight"));
  EXPECT_THAT(buffers, ElementsAre("0.steps", "0.bn.running_mean", "0.bn.running_var", "0.bn.num_batches_tracked"));
  for (auto& [n, t] : net.named_parameters()) EXPECT_TRUE(t->requires_grad()) << n;
  for (auto& [n, t] : net.named_buffers()) EXPECT_FALSE(t->requires_grad()) << n;
  EXPECT_EQ(net.state_dict()[7].second.dtype(), DType::I64);
}

TEST(Module, LoadStateDictCopiesEveryTensor) {
  auto src = std::make_shared<Block>(), dst = std::make_shared<Block>();
  auto sd = as_map(src->state_dict());
  sd["conv.weight"] = Tensor::from_vector({1, 2, 3, 4}, {2, 2, 1, 1});
  sd["bn.running_var"] = Tensor::from_vector({5, 6}, {2});
  sd["bn.num_batches_tracked"] = Tensor::from_indices({7}, {});
  dst->load_state_dict(sd);
  for (auto& [k, t] : dst->state_dict()) {
    if (t.dtype() == DType::I64)
      EXPECT_EQ(t.to_indices(), sd[k].to_indices()) << k;
    else
      EXPECT_EQ(t.to_vector(), sd[k].to_vector()) << k;
  }
  // Copies, not aliases; parameters stay trainable.
  sd["conv.weight"].copy_from(Tensor::zeros({2, 2, 1, 1}));
  EXPECT_EQ(dst->state_dict()[2].second.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_TRUE(dst->named_parameters()[1].second->requires_grad());
}

TEST(Module, StrictLoadNamesEveryProblemAndCopiesNothing) {
  Block b;
  const auto before = b.state_dict()[2].second.to_vector();
  auto sd = as_map(Block().state_dict());
  sd.erase("bn.running_mean");
  sd["bn.extra"] = Tensor::zeros({2});
  sd["conv.weight"] = Tensor::zeros({2, 2, 3, 3});
  sd["steps"] = Tensor::zeros({});  // F32 instead of I64
  sd["scale"] = Tensor::full({2}, 9.0f);
  try {
    b.load_state_dict(sd);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'bn.running_mean' is missing"));
    EXPECT_THAT(e.what(), HasSubstr("tensor 'bn.extra' is not a parameter or buffer of the model"));
    EXPECT_THAT(e.what(), HasSubstr("tensor 'conv.weight' has shape [2, 2, 3, 3], expected [2, 2, 1, 1]"));
    EXPECT_THAT(e.what(), HasSubstr("tensor 'steps' has dtype F32, expected I64"));
  }
  EXPECT_EQ(b.state_dict()[0].second.to_vector(), (std::vector<float>{1, 1}));  // "scale" untouched
  EXPECT_EQ(b.state_dict()[2].second.to_vector(), before);
}

TEST(Module, NonStrictLoadSkipsMissingAndUnexpectedButNotMismatches) {
  Block b;
  std::map<std::string, Tensor> sd = {{"scale", Tensor::full({2}, 4.0f)}, {"other", Tensor::zeros({1})}};
  b.load_state_dict(sd, /*strict=*/false);
  EXPECT_EQ(b.state_dict()[0].second.to_vector(), (std::vector<float>{4, 4}));
  sd["bn.weight"] = Tensor::zeros({3});
  try {
    b.load_state_dict(sd, false);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'bn.weight' has shape [3], expected [2]"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("other")));
  }
}

TEST(Module, ToMovesParametersAndBuffers) {
  Block b;
  b.to(Device::hpu(0));
  for (auto& [n, t] : b.state_dict()) EXPECT_EQ(t.device(), Device::hpu(0)) << n;
  for (auto& [n, t] : b.named_parameters()) EXPECT_TRUE(t->requires_grad()) << n;
  // load_state_dict keeps the module's device.
  b.load_state_dict(as_map(Block().state_dict()));
  for (auto& [n, t] : b.state_dict()) EXPECT_EQ(t.device(), Device::hpu(0)) << n;
  b.eval();
  NoGradGuard g;
  EXPECT_EQ(b.forward(Tensor::full({1, 2, 3, 3}, 1.0f, Device::hpu(0))).device(), Device::hpu(0));
  synchronize(Device::hpu(0));  // no queued kernel may outlive the test process's statics
}

TEST(Module, ForwardAllTakesExactlyOneInputByDefault) {
  Linear fc(2, 1, 0);
  NoGradGuard g;
  const Tensor x = Tensor::full({1, 2}, 1.0f);
  auto out = fc.forward_all({x});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to_vector(), fc.forward(x).to_vector());
  EXPECT_THROW(fc.forward_all({x, x}), InvalidArgument);
  EXPECT_THROW(fc.forward_all({}), InvalidArgument);
}

TEST(Module, TrainEvalReachesEveryChild) {
  TransformerEncoder enc({.d_model = 8, .nhead = 2, .dim_feedforward = 16}, 2);
  enc.eval();
  EXPECT_FALSE(enc.training());
  Tensor x = Tensor::full({1, 3, 8}, 0.5f);
  NoGradGuard g;
  // Eval: dropout off, so two runs agree.
  EXPECT_EQ(enc.forward(x).to_vector(), enc.forward(x).to_vector());
  enc.train();
  EXPECT_NE(enc.forward(x).to_vector(), enc.forward(x).to_vector());
}

TEST(Module, TrainingStepReachesEveryParameter) {
  Block b;
  b.train();
  Tensor loss = ops::sum(ops::mul(b.forward(Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 1, 2})),
                                  Tensor::from_vector({1, -1, 2, 0.5, 3, 1, -2, 1}, {2, 2, 1, 2})));
  loss.backward();
  for (auto& [n, t] : b.named_parameters())
    if (n != "scale") {
      EXPECT_TRUE(t->grad().defined()) << n;
    }
  EXPECT_EQ(b.state_dict()[7].second.to_indices(), (std::vector<int64_t>{1}));  // bn.num_batches_tracked
}

// The training-mode attention (explicit softmax, dropout on the weights) agrees with the fused
// eval-mode kernel when dropout drops nothing, for every kind of mask; p = 1 drops everything.
TEST(Module, AttentionTrainingPathMatchesFusedKernel) {
  NoGradGuard g;
  std::vector<float> qv(2 * 3 * 8), kv(2 * 4 * 8);
  for (size_t i = 0; i < qv.size(); ++i) qv[i] = std::sin(0.37f * i);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = std::cos(0.21f * i);
  const Tensor q = Tensor::from_vector(qv, {2, 3, 8}), k = Tensor::from_vector(kv, {2, 4, 8});
  const Tensor add_mask = Tensor::from_vector({0, -1, 0.5, -1e9, 0, 0, -2, 0, 1, 0, 0, 0}, {3, 4});
  std::vector<int64_t> allow = {1, 0, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1};
  const Tensor bool_mask = Tensor::from_indices(allow, {3, 4}).to(DType::BOOL);
  MultiheadAttention mha(8, 2, /*dropout=*/1e-12, 5);
  for (int c = 0; c < 4; ++c) {
    const Tensor mask = c == 1 ? add_mask : c == 2 ? bool_mask : Tensor();
    const Tensor key = c == 3 ? q : k;  // c == 3: causal self-attention
    mha.eval();
    const auto fused = mha.attend(q, key, key, mask, c == 3).to_vector();
    mha.train();
    test::expect_close(mha.attend(q, key, key, mask, c == 3).to_vector(), fused, 1e-5, "mask case " + std::to_string(c));
  }
  MultiheadAttention all(8, 2, 1.0, 5);
  const std::vector<float> bias = {1, 2, 3, 4, 5, 6, 7, 8};  // out_proj.bias: the output when every weight is dropped
  all.state_dict()[3].second.copy_from(Tensor::from_vector(bias, {8}));
  const auto out = all.attend(q, k, k).to_vector();
  for (size_t i = 0; i < out.size(); ++i) EXPECT_FLOAT_EQ(out[i], bias[i % 8]) << i;
}

TEST(Module, LayerArgumentsAreChecked) {
  EXPECT_THROW(Dropout(1.5), InvalidArgument);
  EXPECT_THROW(Conv2d(3, 4, {3, 3}, {.groups = 2}), InvalidArgument);
  EXPECT_THROW(MultiheadAttention(10, 3), InvalidArgument);
  EXPECT_THROW(TransformerEncoderLayer({.d_model = 8, .nhead = 2, .activation = "tanh"}), InvalidArgument);
  BatchNorm2d bn(3);
  EXPECT_THROW(bn.forward(Tensor::zeros({2, 3})), ShapeError);
}

}  // namespace
}  // namespace hg
