#include "models/module.h"

#include <cmath>
#include <random>

#include "engine/ops.h"

namespace hg::models {

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Tensor*>> r;
  for (auto& [n, t] : params_) r.emplace_back(n, &t);
  for (auto& [cn, c] : children_)
    for (auto& [n, t] : c->named_parameters()) r.emplace_back(cn + "." + n, t);
  return r;
}

std::vector<std::pair<std::string, const Tensor*>> Module::named_parameters() const {
  std::vector<std::pair<std::string, const Tensor*>> r;
  for (auto& [n, t] : const_cast<Module*>(this)->named_parameters()) r.emplace_back(n, t);
  return r;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to(Device d) {
  for (auto& [n, t] : params_) {
    const bool rg = t.requires_grad();
    t = t.detach().to(d);
    t.set_requires_grad(rg);
  }
  for (auto& [n, c] : children_) c->to(d);
}

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  t.set_requires_grad(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> m) {
  children_.emplace_back(name, std::move(m));
}

Linear::Linear(int64_t in, int64_t out, uint64_t seed) : in_(in), out_(out) {
  std::mt19937_64 rng(seed);
  const float bound = in > 0 ? 1.0f / std::sqrt(static_cast<float>(in)) : 0.0f;
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<float> w(static_cast<size_t>(in * out)), b(static_cast<size_t>(out));
  for (auto& v : w) v = u(rng);
  for (auto& v : b) v = u(rng);
  weight_ = &register_parameter("weight", Tensor::from_vector(w, {out, in}));
  bias_ = &register_parameter("bias", Tensor::from_vector(b, {out}));
}

Tensor Linear::forward(const Tensor& x) { return ops::linear(x, *weight_, *bias_); }

nlohmann::json Linear::spec() const { return {{"op", "linear"}, {"in_features", in_}, {"out_features", out_}}; }

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }

Sequential& Sequential::add(std::shared_ptr<Module> m) {
  register_module(std::to_string(children().size()), std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& [n, c] : children()) h = c->forward(h);
  return h;
}

nlohmann::json Sequential::spec() const {
  nlohmann::json layers = nlohmann::json::array();
  for (auto& [n, c] : children()) {
    nlohmann::json l = c->spec();
    l["name"] = n;
    layers.push_back(std::move(l));
  }
  return {{"type", "sequential"}, {"layers", layers}};
}

}  // namespace hg::models
