// Layers with PyTorch's (torch.nn) parameter names, shapes, defaults and initialisation
// distributions (drawn from a seed, so not PyTorch's numbers). Included by models/module.h.
//
//   using namespace hg::models;
//   Conv2d conv(3, 64, {7, 7}, {.stride = {2, 2}, .padding = {3, 3}, .bias = false}, /*seed=*/1);
//   BatchNorm2d bn(64);                       // buffers running_mean, running_var, num_batches_tracked
//   MaxPool2d pool({3, 3}, {2, 2}, {1, 1});
//   Tensor y = pool.forward(ReLU().forward(bn.forward(conv.forward(x))));
//   Linear fc(512, 10, /*seed=*/2);           // any rank >= 2: applies to the last dim
//   Embedding emb(1000, 128, 3);              // I64 ids [N, S] -> [N, S, 128]
//   LayerNorm ln(128);
#pragma once
#include "engine/ops_nn.h"
#include "models/module.h"

namespace hg::models {

// x W^T + b over the last dim of x (rank >= 2), W [out, in], b [out] or undefined (no bias).
Tensor linear_last_dim(const Tensor& x, const Tensor& weight, const Tensor& bias);

// y = x W^T + b over the last dim of x, W [out, in]; U(-1/sqrt(in), 1/sqrt(in)) for W and b.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, uint64_t seed = 0, bool bias = true);
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override;  // {"op": "linear", "in_features", "out_features"[, "bias": false]}
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Tensor *weight_, *bias_ = nullptr;
};

// ---- activations (no parameters) ----
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override { return {{"op", "relu"}}; }
};
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : approximate_(std::move(approximate)) {}  // or "tanh"
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override { return {{"op", "gelu"}, {"approximate", approximate_}}; }

 private:
  std::string approximate_;
};
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override { return {{"op", "silu"}}; }
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override { return {{"op", "tanh"}}; }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override { return {{"op", "sigmoid"}}; }
};

// Zeroes elements with probability p while training (ops::dropout); identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);  // throws InvalidArgument unless 0 <= p <= 1
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override { return {{"op", "dropout"}, {"p", p_}}; }

 private:
  double p_;
};

// torch.flatten(x, start_dim, end_dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override { return {{"op", "flatten"}, {"start_dim", start_}, {"end_dim", end_}}; }

 private:
  int64_t start_, end_;
};

// ---- convolution and pooling (NCHW) ----
struct Conv2dOptions {
  ops::Size2 stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

// weight [out, in/groups, kh, kw], bias [out]; both U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, ops::Size2 kernel, Conv2dOptions opt = {}, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override;

 private:
  int64_t in_, out_;
  ops::Size2 kernel_;
  Conv2dOptions opt_;
  Tensor *weight_, *bias_ = nullptr;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(ops::Size2 kernel, ops::Size2 stride = {0, 0}, ops::Size2 padding = {0, 0})
      : kernel_(kernel), stride_(stride), padding_(padding) {}  // stride {0, 0}: the kernel size
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override;

 private:
  ops::Size2 kernel_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(ops::Size2 kernel, ops::Size2 stride = {0, 0}, ops::Size2 padding = {0, 0})
      : kernel_(kernel), stride_(stride), padding_(padding) {}
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override;

 private:
  ops::Size2 kernel_, stride_, padding_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(ops::Size2 output_size) : out_(output_size) {}
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override;

 private:
  ops::Size2 out_;
};

// ---- normalisation and embedding ----
// weight (1) and bias (0) [C]; buffers running_mean (0), running_var (1) F32 [C] and
// num_batches_tracked I64 []. Training: normalises with the batch statistics and updates the
// running ones, running = (1 - momentum) * running + momentum * batch (unbiased variance), and
// counts the batch; eval: normalises with the running statistics. Each update replaces the
// buffer tensors (take state_dict() after training, not before).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override;

 private:
  int64_t c_;
  double eps_, momentum_;
  Tensor *weight_, *bias_, *running_mean_, *running_var_, *num_batches_tracked_;
};

// Normalises over the last dim (size `dim`); weight (1) and bias (0) [dim].
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override { return {{"op", "layer_norm"}, {"dim", dim_}, {"eps", eps_}}; }

 private:
  int64_t dim_;
  double eps_;
  Tensor *weight_, *bias_;
};

// weight [num_embeddings, dim] ~ N(0, 1); forward maps I64/I32 indices of any shape to
// [*indices.shape, dim].
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, uint64_t seed = 0);
  Tensor forward(const Tensor& indices) override;
  nlohmann::json spec() const override { return {{"op", "embedding"}, {"num_embeddings", num_}, {"dim", dim_}}; }
  const Tensor& weight() const { return *weight_; }

 private:
  int64_t num_, dim_;
  Tensor* weight_;
};

}  // namespace hg::models
