#include "training/sgd.h"

#include "engine/autograd.h"
#include "engine/error.h"
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

// A state entry exists only for a parameter that has a momentum buffer.
const StateSpec kState{.buffers = {"momentum_buffer"},
                       .required = [](const OptionMap&) { return std::vector<std::string>{"momentum_buffer"}; }};

}  // namespace

SGD::SGD(NamedParams params, SGDOptions options) : SGD(std::vector<ParamGroup>{{std::move(params), {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions defaults) {
  groups_ = std::move(groups);
  complete_groups(groups_, defaults_of(defaults), "SGD", check);
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& group = groups_[gi];
    const double momentum = group.options.at("momentum"), dampening = group.options.at("dampening"),
                 wd = group.options.at("weight_decay");
    const bool nesterov = group.options.at("nesterov") != 0;
    for (auto& [name, p] : group.params) {
      Tensor g = p->grad();
      if (!g.defined()) continue;
      if (g.shape() != p->shape())
        throw ShapeError("SGD: gradient of '" + name + "' has shape " + shape_str(g.shape()) + ", the parameter " +
                         shape_str(p->shape()));
      const Device d = p->device();
      const Tensor& lr = held_scalar(lr_[{gi, d.str()}], group.lr(), d);
      // An input, not a constant: OneCycleLR cycles the momentum every step.
      auto momentum_scalar = [&]() -> const Tensor& { return held_scalar(momentum_[{gi, d.str()}], momentum, d); };
      // g + weight_decay * p, inside each program that needs it (recomputed: no extra pass).
      auto decayed = [&](Fused& f, Fused::Reg gr, Fused::Reg pr) {
        return wd != 0 ? f.op(ew::Add, gr, f.scale(pr, wd)) : gr;
      };
      Tensor buf;
      if (momentum != 0) {
        Tensor& state = state_[name].buffers["momentum_buffer"];
        follow_device(state, d);
        Fused b;  // the first step starts from a copy of g (PyTorch's clone)
        const Fused::Reg old = state.defined() ? b.in(state) : 0, mr = state.defined() ? b.in(momentum_scalar()) : 0,
                         gr = b.in(g), pr = wd != 0 ? b.in(*p) : 0;
        const Fused::Reg gd = decayed(b, gr, pr);
        if (state.defined())
          b.op(ew::Add, b.op(ew::Mul, old, mr), b.scale(gd, 1 - dampening));
        else
          b.scale(gd, 1.0);
        buf = state = b.run().to(p->dtype());
      }
      Fused u;  // p - lr * step, step = g, buf, or g + momentum * buf (Nesterov)
      const bool uses_g = !buf.defined() || nesterov;
      const Fused::Reg pr = u.in(*p), lr_r = u.in(lr), gr = uses_g ? u.in(g) : 0,
                       br = buf.defined() ? u.in(buf) : 0, mr = buf.defined() && nesterov ? u.in(momentum_scalar()) : 0;
      Fused::Reg step = uses_g ? decayed(u, gr, pr) : br;
      if (buf.defined() && nesterov) step = u.op(ew::Add, step, u.op(ew::Mul, br, mr));
      u.op(ew::Sub, pr, u.op(ew::Mul, lr_r, step));
      commit_param(*p, u.run());
    }
  }
}

StateBlob SGD::state_dict() const { return save_state(groups_, state_, /*with_step=*/false); }

void SGD::load_state_dict(const StateBlob& state) { load_state(groups_, state_, state, kState, "SGD", check); }

}  // namespace hg::training
