#include "models/layers.h"

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "models/init.h"

namespace hg::models {

namespace {
nlohmann::json size2(ops::Size2 s) { return {s[0], s[1]}; }
}  // namespace

Linear::Linear(int64_t in, int64_t out, uint64_t seed, bool bias) : in_(in), out_(out) {
  std::mt19937_64 rng(seed);
  const float bound = init::fan_in_bound(in);
  weight_ = &register_parameter("weight", init::uniform(rng, {out, in}, bound));
  if (bias) bias_ = &register_parameter("bias", init::uniform(rng, {out}, bound));
}

Tensor linear_last_dim(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (x.ndim() < 2) throw ShapeError("linear: input " + shape_str(x.shape()) + " needs rank >= 2");
  const Tensor x2 = x.ndim() == 2 ? x : ops::reshape(x, {-1, x.dim(-1)});
  Tensor y = b.defined() ? ops::linear(x2, w, b) : ops::matmul(x2, w, false, true);
  if (x.ndim() == 2) return y;
  Shape out = x.shape();
  out.back() = w.dim(0);
  return ops::reshape(y, out);
}

Tensor Linear::forward(const Tensor& x) { return linear_last_dim(x, *weight_, bias_ ? *bias_ : Tensor()); }

nlohmann::json Linear::spec() const {
  nlohmann::json j = {{"op", "linear"}, {"in_features", in_}, {"out_features", out_}};
  if (!bias_) j["bias"] = false;
  return j;
}

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }
Tensor GELU::forward(const Tensor& x) { return ops::gelu(x, approximate_); }
Tensor SiLU::forward(const Tensor& x) { return ops::silu(x); }
Tensor Tanh::forward(const Tensor& x) { return ops::tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return ops::sigmoid(x); }

Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0.0 && p <= 1.0)) throw InvalidArgument("Dropout: p = " + std::to_string(p) + " is not in [0, 1]");
}
Tensor Dropout::forward(const Tensor& x) { return ops::dropout(x, p_, training()); }

Tensor Flatten::forward(const Tensor& x) { return ops::flatten(x, start_, end_); }

Conv2d::Conv2d(int64_t in, int64_t out, ops::Size2 kernel, Conv2dOptions opt, uint64_t seed)
    : in_(in), out_(out), kernel_(kernel), opt_(opt) {
  if (in <= 0 || out <= 0 || kernel[0] <= 0 || kernel[1] <= 0 || opt.groups <= 0 || in % opt.groups || out % opt.groups)
    throw InvalidArgument("Conv2d: channels (" + std::to_string(in) + ", " + std::to_string(out) + "), kernel and groups (" +
                          std::to_string(opt.groups) + ") must be positive, channels divisible by groups");
  std::mt19937_64 rng(seed);
  const int64_t fan_in = in / opt.groups * kernel[0] * kernel[1];
  const float bound = init::fan_in_bound(fan_in);
  weight_ = &register_parameter("weight", init::uniform(rng, {out, in / opt.groups, kernel[0], kernel[1]}, bound));
  if (opt.bias) bias_ = &register_parameter("bias", init::uniform(rng, {out}, bound));
}

Tensor Conv2d::forward(const Tensor& x) {
  return ops::conv2d(x, *weight_, bias_ ? *bias_ : Tensor(), opt_.stride, opt_.padding, opt_.dilation, opt_.groups);
}

nlohmann::json Conv2d::spec() const {
  return {{"op", "conv2d"},         {"in_channels", in_},         {"out_channels", out_},
          {"kernel", size2(kernel_)}, {"stride", size2(opt_.stride)}, {"padding", size2(opt_.padding)},
          {"dilation", size2(opt_.dilation)}, {"groups", opt_.groups}, {"bias", opt_.bias}};
}

Tensor MaxPool2d::forward(const Tensor& x) { return ops::max_pool2d(x, kernel_, stride_, padding_); }
nlohmann::json MaxPool2d::spec() const {
  return {{"op", "max_pool2d"}, {"kernel", size2(kernel_)}, {"stride", size2(stride_)}, {"padding", size2(padding_)}};
}

Tensor AvgPool2d::forward(const Tensor& x) { return ops::avg_pool2d(x, kernel_, stride_, padding_); }
nlohmann::json AvgPool2d::spec() const {
  return {{"op", "avg_pool2d"}, {"kernel", size2(kernel_)}, {"stride", size2(stride_)}, {"padding", size2(padding_)}};
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return ops::adaptive_avg_pool2d(x, out_); }
nlohmann::json AdaptiveAvgPool2d::spec() const { return {{"op", "adaptive_avg_pool2d"}, {"output_size", size2(out_)}}; }

BatchNorm2d::BatchNorm2d(int64_t c, double eps, double momentum) : c_(c), eps_(eps), momentum_(momentum) {
  if (c <= 0) throw InvalidArgument("BatchNorm2d: num_features must be positive, got " + std::to_string(c));
  weight_ = &register_parameter("weight", Tensor::full({c}, 1.0f));
  bias_ = &register_parameter("bias", Tensor::zeros({c}));
  running_mean_ = &register_buffer("running_mean", Tensor::zeros({c}));
  running_var_ = &register_buffer("running_var", Tensor::full({c}, 1.0f));
  num_batches_tracked_ = &register_buffer("num_batches_tracked", Tensor::zeros({}, DType::I64));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  if (x.ndim() != 4) throw ShapeError("BatchNorm2d: input " + shape_str(x.shape()) + " is not [N, C, H, W]");
  Tensor y = ops::batch_norm(x, *weight_, *bias_, *running_mean_, *running_var_, training(), momentum_, eps_);
  if (training()) {
    NoGradGuard no_grad;
    auto s = ops::batch_norm_update_stats(x.detach(), *running_mean_, *running_var_, momentum_);
    *running_mean_ = s.running_mean;
    *running_var_ = s.running_var;
    const Tensor one = Tensor::from_indices({1}, {}, num_batches_tracked_->device());
    *num_batches_tracked_ = ops::add(*num_batches_tracked_, one);
  }
  return y;
}

nlohmann::json BatchNorm2d::spec() const {
  return {{"op", "batch_norm2d"}, {"num_features", c_}, {"eps", eps_}, {"momentum", momentum_}};
}

LayerNorm::LayerNorm(int64_t dim, double eps) : dim_(dim), eps_(eps) {
  if (dim <= 0) throw InvalidArgument("LayerNorm: dim must be positive, got " + std::to_string(dim));
  weight_ = &register_parameter("weight", Tensor::full({dim}, 1.0f));
  bias_ = &register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) { return ops::layer_norm(x, {dim_}, *weight_, *bias_, eps_); }

Embedding::Embedding(int64_t num, int64_t dim, uint64_t seed) : num_(num), dim_(dim) {
  if (num <= 0 || dim <= 0) throw InvalidArgument("Embedding: sizes must be positive");
  std::mt19937_64 rng(seed);
  weight_ = &register_parameter("weight", init::normal(rng, {num, dim}));
}

Tensor Embedding::forward(const Tensor& indices) { return ops::embedding(indices, *weight_); }

}  // namespace hg::models
