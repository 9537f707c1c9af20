#include "training/sgd.h"

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "training/update_ops.h"

namespace hg::training {

namespace {

OptionMap defaults_of(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}

void check(const OptionMap& o, const std::string& where) {
  if (!(o.at("lr") >= 0)) throw InvalidArgument(where + ": invalid learning rate " + std::to_string(o.at("lr")));
  if (!(o.at("momentum") >= 0))
    throw InvalidArgument(where + ": invalid momentum " + std::to_string(o.at("momentum")));
  if (!(o.at("weight_decay") >= 0))
    throw InvalidArgument(where + ": invalid weight_decay " + std::to_string(o.at("weight_decay")));
  if (o.at("nesterov") != 0 && (o.at("momentum") <= 0 || o.at("dampening") != 0))
    throw InvalidArgument(where + ": Nesterov momentum requires a momentum and zero dampening");
}

const std::vector<std::string> kBuffers = {"momentum_buffer"};

}  // namespace

SGD::SGD(NamedParams params, SGDOptions options) : SGD(std::vector<ParamGroup>{{std::move(params), {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions defaults) {
  groups_ = std::move(groups);
  complete_groups(groups_, defaults_of(defaults), "SGD", check);
}

void SGD::step() {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_) {
    const double momentum = group.options.at("momentum"), dampening = group.options.at("dampening"),
                 wd = group.options.at("weight_decay");
    const bool nesterov = group.options.at("nesterov") != 0;
    std::map<std::string, Tensor> lr;  // one graph input per device and group, fresh each step
    for (auto& [name, p] : group.params) {
      Tensor g = p->grad();
      if (!g.defined()) continue;
      if (g.shape() != p->shape())
        throw ShapeError("SGD: gradient of '" + name + "' has shape " + shape_str(g.shape()) + ", the parameter " +
                         shape_str(p->shape()));
      const Device d = p->device();
      auto it = lr.find(d.str());
      if (it == lr.end()) it = lr.emplace(d.str(), device_scalar(group.lr(), d)).first;
      if (wd != 0) g = ops::add(g, ops::scale(*p, wd));
      if (momentum != 0) {
        ParamState& s = state_[name];
        Tensor& buf = s.buffers["momentum_buffer"];
        follow_device(buf, d);
        // The first step starts from a copy of g, as PyTorch's clone.
        buf = buf.defined() ? ops::add(ops::scale(buf, momentum), ops::scale(g, 1 - dampening)) : ops::scale(g, 1.0);
        g = nesterov ? ops::add(g, ops::scale(buf, momentum)) : buf;
      }
      commit_param(*p, ops::sub(*p, ops::mul(it->second, g)));
    }
  }
}

StateBlob SGD::state_dict() const { return save_state(groups_, state_, /*with_step=*/false); }

void SGD::load_state_dict(const StateBlob& state) { load_state(groups_, state_, state, kBuffers, "SGD", check); }

}  // namespace hg::training
