#include "models/module.h"

#include <set>

#include "engine/error.h"

namespace hg::models {

std::vector<Tensor> Module::forward_all(const std::vector<Tensor>& inputs) {
  if (inputs.size() != 1)
    throw InvalidArgument("Module::forward_all: this module takes one input, got " + std::to_string(inputs.size()));
  return {forward(inputs[0])};
}

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

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Tensor*>> r;
  for (auto& [n, t] : buffers_) r.emplace_back(n, &t);
  for (auto& [cn, c] : children_)
    for (auto& [n, t] : c->named_buffers()) r.emplace_back(cn + "." + n, t);
  return r;
}

void Module::collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& [n, t] : params_) out.emplace_back(prefix + n, &t);
  for (auto& [n, t] : buffers_) out.emplace_back(prefix + n, &t);
  for (auto& [cn, c] : children_) c->collect_state(prefix + cn + ".", out);
}

StateDict Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor*>> own;
  const_cast<Module*>(this)->collect_state("", own);
  StateDict r;
  for (auto& [n, t] : own) r.emplace_back(n, *t);
  return r;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& tensors, bool strict, LoadMode mode) {
  std::vector<std::pair<std::string, Tensor*>> own;
  collect_state("", own);
  std::vector<std::string> problems;
  std::set<std::string> known;
  for (auto& [name, t] : own) {
    known.insert(name);
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      if (strict) problems.push_back("tensor '" + name + "' is missing");
      continue;
    }
    const Tensor& src = it->second;
    if (!src.defined()) {
      problems.push_back("tensor '" + name + "' is undefined");
    } else if (src.dtype() != t->dtype()) {
      problems.push_back("tensor '" + name + "' has dtype " + dtype_name(src.dtype()) + ", expected " +
                         dtype_name(t->dtype()));
    } else if (src.shape() != t->shape()) {
      problems.push_back("tensor '" + name + "' has shape " + shape_str(src.shape()) + ", expected " +
                         shape_str(t->shape()));
    }
  }
  if (strict)
    for (auto& [name, t] : tensors)
      if (!known.count(name)) problems.push_back("tensor '" + name + "' is not a parameter or buffer of the model");
  if (!problems.empty()) {
    std::string msg = "load_state_dict: ";
    for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw InvalidArgument(msg);
  }
  for (auto& [name, t] : own) {
    auto it = tensors.find(name);
    if (it == tensors.end()) continue;
    if (mode == LoadMode::Copy) {
      t->copy_from(it->second);
      continue;
    }
    const bool rg = t->requires_grad();
    *t = it->second.detach();
    t->set_requires_grad(rg);
  }
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
  for (auto& [n, t] : buffers_) t = t.detach().to(d);
  for (auto& [n, c] : children_) c->to(d);
}

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  t.set_requires_grad(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

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
