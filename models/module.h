// The module library: parameters with PyTorch state_dict names, train/eval, to(device).
//
//   auto net = std::make_shared<hg::models::Sequential>();
//   net->add(std::make_shared<hg::models::Linear>(64, 32, /*seed=*/1));
//   net->add(std::make_shared<hg::models::ReLU>());
//   net->add(std::make_shared<hg::models::Linear>(32, 10, 2));
//   net->to(hg::Device::hpu(0));
//   hg::Tensor logits = net->forward(x);
//   for (auto& [name, p] : net->named_parameters()) ...   // "0.weight", "0.bias", "2.weight", ...
#pragma once
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace hg::models {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  // This module's entry in model.json's graph (see models/package.h).
  virtual nlohmann::json spec() const = 0;

  Tensor operator()(const Tensor& x) { return forward(x); }
  std::vector<std::pair<std::string, Tensor*>> named_parameters();
  std::vector<std::pair<std::string, const Tensor*>> named_parameters() const;
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }
  void to(Device d);  // moves every parameter, keeping requires_grad

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);
  void register_module(const std::string& name, std::shared_ptr<Module> m);
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

 private:
  std::deque<std::pair<std::string, Tensor>> params_;  // deque: references stay valid
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// y = x W^T + b, W [out, in]; initialised like PyTorch: U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Tensor *weight_, *bias_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override { return {{"op", "relu"}}; }
};

class Sequential : public Module {
 public:
  Sequential& add(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override;  // {"type": "sequential", "layers": [...]}
  size_t size() const { return children().size(); }
  Module& at(size_t i) const { return *children()[i].second; }
};

}  // namespace hg::models
