#include "engine/error.h"
#include "engine/ops.h"
#include "models/zoo.h"

namespace hg::models::zoo {

LeNet5::LeNet5(int64_t classes, uint64_t seed) : classes_(classes) {
  if (classes <= 0) throw InvalidArgument("LeNet5: classes must be positive, got " + std::to_string(classes));
  conv1_ = register_module("conv1", std::make_shared<Conv2d>(1, 6, ops::Size2{5, 5}, Conv2dOptions{}, seed));
  conv2_ = register_module("conv2", std::make_shared<Conv2d>(6, 16, ops::Size2{5, 5}, Conv2dOptions{}, seed + 1));
  fc1_ = register_module("fc1", std::make_shared<Linear>(400, 120, seed + 2));
  fc2_ = register_module("fc2", std::make_shared<Linear>(120, 84, seed + 3));
  fc3_ = register_module("fc3", std::make_shared<Linear>(84, classes, seed + 4));
}

Tensor LeNet5::forward(const Tensor& x) {
  if (x.ndim() != 4 || x.dim(1) != 1 || x.dim(2) != 32 || x.dim(3) != 32)
    throw ShapeError("LeNet5: input " + shape_str(x.shape()) + " is not [N, 1, 32, 32]");
  Tensor h = ops::max_pool2d(ops::relu(conv1_->forward(x)), {2, 2});
  h = ops::max_pool2d(ops::relu(conv2_->forward(h)), {2, 2});
  h = ops::relu(fc1_->forward(ops::flatten(h, 1)));
  h = ops::relu(fc2_->forward(h));
  return fc3_->forward(h);
}

nlohmann::json LeNet5::spec() const { return {{"type", "zoo"}, {"model", "lenet5"}, {"config", {{"classes", classes_}}}}; }

std::unique_ptr<LeNet5> lenet5(int64_t classes, uint64_t seed) { return std::make_unique<LeNet5>(classes, seed); }

}  // namespace hg::models::zoo
