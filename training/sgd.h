// Stochastic gradient descent with momentum (PyTorch's formulation:
// buf = momentum * buf + (grad + weight_decay * p); p -= lr * buf).
//
//   hg::training::SGD opt(net->named_parameters(), {.lr = 0.1, .momentum = 0.9});
//   loss.backward();
//   opt.step();        // waits for the gradients (runs the pending lazy graph)
//   opt.zero_grad();
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace hg::training {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
};

class SGD {
 public:
  SGD(std::vector<std::pair<std::string, Tensor*>> params, SGDOptions opt);
  void step();
  void zero_grad();
  const SGDOptions& options() const { return opt_; }
  // Momentum buffers by parameter name (empty until the first step), for checkpoints.
  std::vector<std::pair<std::string, std::vector<float>>>& momentum_buffers() { return bufs_; }
  const std::vector<std::pair<std::string, Tensor*>>& params() const { return params_; }

 private:
  std::vector<std::pair<std::string, Tensor*>> params_;
  SGDOptions opt_;
  std::vector<std::pair<std::string, std::vector<float>>> bufs_;
};

}  // namespace hg::training
