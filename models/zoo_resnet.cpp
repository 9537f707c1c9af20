#include <cmath>

#include "engine/error.h"
#include "engine/ops.h"
#include "models/init.h"
#include "models/zoo.h"

namespace hg::models::zoo {

namespace {

// A bias-free k x k convolution with padding k / 2, initialised as torchvision does:
// N(0, 2 / fan_out), fan_out = out * k * k (kaiming normal, mode "fan_out", relu gain).
std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride, uint64_t seed) {
  auto c = std::make_shared<Conv2d>(
      in, out, ops::Size2{k, k}, Conv2dOptions{.stride = {stride, stride}, .padding = {k / 2, k / 2}, .bias = false}, seed);
  std::mt19937_64 rng(seed);
  init::normal_(*c->named_parameters()[0].second, rng, std::sqrt(2.0f / static_cast<float>(out * k * k)));
  return c;
}

// torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + downsample(x)).
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in, int64_t planes, int64_t stride, uint64_t seed) {
    conv1_ = register_module("conv1", conv(in, planes, 3, stride, seed));
    bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
    relu_ = register_module("relu", std::make_shared<ReLU>());
    conv2_ = register_module("conv2", conv(planes, planes, 3, 1, seed + 1));
    bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
    if (stride != 1 || in != planes) {
      auto ds = std::make_shared<Sequential>();
      ds->add(conv(in, planes, 1, stride, seed + 2)).add(std::make_shared<BatchNorm2d>(planes));
      downsample_ = register_module("downsample", ds);
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu_->forward(bn1_->forward(conv1_->forward(x)));
    h = bn2_->forward(conv2_->forward(h));
    return relu_->forward(ops::add(h, downsample_ ? downsample_->forward(x) : x));
  }
  nlohmann::json spec() const override { return {{"op", "basic_block"}}; }

 private:
  std::shared_ptr<Module> conv1_, bn1_, relu_, conv2_, bn2_, downsample_;
};

}  // namespace

ResNet18::ResNet18(int64_t num_classes, uint64_t seed) : classes_(num_classes) {
  if (num_classes <= 0) throw InvalidArgument("ResNet18: num_classes must be positive, got " + std::to_string(num_classes));
  stages_.push_back(register_module("conv1", conv(3, 64, 7, 2, seed)));
  stages_.push_back(register_module("bn1", std::make_shared<BatchNorm2d>(64)));
  stages_.push_back(register_module("relu", std::make_shared<ReLU>()));
  stages_.push_back(register_module("maxpool", std::make_shared<MaxPool2d>(ops::Size2{3, 3}, ops::Size2{2, 2}, ops::Size2{1, 1})));
  int64_t in = 64;
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t planes = 64 << i, stride = i == 0 ? 1 : 2;
    const uint64_t s = seed + 10 * static_cast<uint64_t>(i + 1);
    auto layer = std::make_shared<Sequential>();
    layer->add(std::make_shared<BasicBlock>(in, planes, stride, s)).add(std::make_shared<BasicBlock>(planes, planes, 1, s + 5));
    stages_.push_back(register_module("layer" + std::to_string(i + 1), layer));
    in = planes;
  }
  stages_.push_back(register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(ops::Size2{1, 1})));
  fc_ = register_module("fc", std::make_shared<Linear>(512, num_classes, seed + 100));
}

Tensor ResNet18::forward(const Tensor& x) {
  if (x.ndim() != 4 || x.dim(1) != 3 || x.dim(2) < 32 || x.dim(3) < 32)
    throw ShapeError("ResNet18: input " + shape_str(x.shape()) + " is not [N, 3, H, W] with H, W >= 32");
  Tensor h = x;
  for (auto& s : stages_) h = s->forward(h);
  return fc_->forward(ops::flatten(h, 1));
}

nlohmann::json ResNet18::spec() const {
  return {{"type", "zoo"}, {"model", "resnet18"}, {"config", {{"num_classes", classes_}}}};
}

std::unique_ptr<ResNet18> resnet18(int64_t num_classes, uint64_t seed) { return std::make_unique<ResNet18>(num_classes, seed); }

}  // namespace hg::models::zoo
