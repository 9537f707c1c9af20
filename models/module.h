// The module library: parameters and buffers with PyTorch state_dict names, train/eval,
// state_dict()/load_state_dict(), to(device). The layers are in models/layers.h and
// models/attention.h, the model builders in models/zoo.h.
//
//   auto net = std::make_shared<hg::models::Sequential>();
//   net->add(std::make_shared<hg::models::Linear>(64, 32, /*seed=*/1));
//   net->add(std::make_shared<hg::models::ReLU>());
//   net->add(std::make_shared<hg::models::Linear>(32, 10, 2));
//   net->load_state_dict(weights);         // std::map<std::string, Tensor>: "0.weight", "0.bias", ...
//   net->to(hg::Device::hpu(0));
//   net->eval();
//   hg::Tensor logits = net->forward(x);
//   for (auto& [name, t] : net->state_dict()) ...   // params then buffers, children recursively
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace hg::models {

using StateDict = std::vector<std::pair<std::string, Tensor>>;

// How load_state_dict takes the tensors: Copy writes their values into the module's tensors;
// Adopt makes the module's tensors be the given ones (shared storage, requires_grad kept), for
// freshly read weights that nothing else writes.
enum class LoadMode { Copy, Adopt };

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  // Not copyable: layers keep pointers to their own parameters.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual Tensor forward(const Tensor& x) = 0;
  // Every input to every output. Default: exactly one input (hg::InvalidArgument otherwise),
  // returns {forward(inputs[0])}. Multi-input modules override it.
  virtual std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs);
  // This module's entry in model.json's graph (see models/package.h).
  virtual nlohmann::json spec() const = 0;

  Tensor operator()(const Tensor& x) { return forward(x); }
  // Trainable tensors, own first then children's ("layer1.0.conv1.weight").
  std::vector<std::pair<std::string, Tensor*>> named_parameters();
  std::vector<std::pair<std::string, const Tensor*>> named_parameters() const;
  // Non-trainable state (BatchNorm running statistics), named the same way.
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  // PyTorch's order: own parameters, own buffers, then each child's state_dict. The tensors
  // share storage with the module's.
  StateDict state_dict() const;
  // Copies every tensor into the module (converting nothing: dtypes and shapes must match;
  // the module's devices are kept). strict: every key of state_dict() present and no other.
  // Throws hg::InvalidArgument listing every missing / unexpected key and every dtype or
  // shape mismatch (those also when not strict); nothing is copied then.
  void load_state_dict(const std::map<std::string, Tensor>& tensors, bool strict = true, LoadMode mode = LoadMode::Copy);
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }
  void to(Device d);  // moves every parameter (keeping requires_grad) and buffer

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  // Returns m, so constructors can keep a typed pointer: fc_ = register_module("fc", make_shared<Linear>(..)).
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

 private:
  // Pointers to every tensor of state_dict(), in its order, keys prefixed with `prefix`.
  void collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);

  std::deque<std::pair<std::string, Tensor>> params_, buffers_;  // deque: references stay valid
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Runs its children in order; children are named "0", "1", ...
class Sequential : public Module {
 public:
  Sequential& add(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  nlohmann::json spec() const override;  // {"type": "sequential", "layers": [...]}
  size_t size() const { return children().size(); }
  Module& at(size_t i) const { return *children()[i].second; }
};

}  // namespace hg::models

#include "models/layers.h"  // Linear, ReLU, ... (module.h users get the basic layers)
