#include "training/adam.h"

#include <cmath>
#include <set>
#include <tuple>

#include "engine/autograd.h"
#include "engine/error.h"
#include "training/update_ops.h"

namespace hg::training {

namespace {

OptionMap defaults_of(const AdamOptions& o, bool decoupled) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay.value_or(decoupled ? 1e-2 : 0.0)},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
}

void check(const OptionMap& o, const std::string& where) {
  auto bad = [&](const char* what) {
    return InvalidArgument(where + ": invalid " + what + " " + std::to_string(o.at(what)));
  };
  if (!(o.at("lr") >= 0)) throw bad("lr");
  if (!(o.at("eps") >= 0)) throw bad("eps");
  if (!(o.at("beta1") >= 0 && o.at("beta1") < 1)) throw bad("beta1");
  if (!(o.at("beta2") >= 0 && o.at("beta2") < 1)) throw bad("beta2");
  if (!(o.at("weight_decay") >= 0)) throw bad("weight_decay");
}

const StateSpec kState{.buffers = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
                       .required =
                           [](const OptionMap& o) {
                             std::vector<std::string> r{"exp_avg", "exp_avg_sq"};
                             if (o.at("amsgrad") != 0) r.push_back("max_exp_avg_sq");
                             return r;
                           },
                       .with_step = true};

}  // namespace

Adam::Adam(NamedParams params, AdamOptions options) : Adam({{std::move(params), {}}}, options, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions defaults) : Adam(std::move(groups), defaults, false) {}
AdamW::AdamW(NamedParams params, AdamOptions options) : Adam({{std::move(params), {}}}, options, true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamOptions defaults) : Adam(std::move(groups), defaults, true) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions defaults, bool decoupled) : decoupled_(decoupled) {
  groups_ = std::move(groups);
  complete_groups(groups_, defaults_of(defaults, decoupled), name(), check);
}

void Adam::scalars_for(size_t group, const std::string& dev, size_t slot, int64_t t, std::vector<Tensor>& targets,
                       std::vector<double>& values) {
  const OptionMap& o = groups_[group].options;
  const StepScalars& sc = scalars_.at({group, dev}).at(slot);
  const double bias1 = 1 - std::pow(o.at("beta1"), static_cast<double>(t));
  const double bias2 = 1 - std::pow(o.at("beta2"), static_cast<double>(t));
  targets.insert(targets.end(), {sc.step_size, sc.bias2_sqrt});
  values.insert(values.end(), {o.at("lr") / bias1, std::sqrt(bias2)});
}

void Adam::step() {
  NoGradGuard no_grad;
  stepped_.clear();
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& group = groups_[gi];
    const double lr = group.lr(), beta1 = group.options.at("beta1"), beta2 = group.options.at("beta2"),
                 eps = group.options.at("eps"), wd = group.options.at("weight_decay");
    const bool amsgrad = group.options.at("amsgrad") != 0;
    std::map<std::pair<std::string, int64_t>, size_t> slot_of;  // (device, step count) -> slot
    for (auto& [name, p] : group.params) {
      Tensor g = p->grad();
      if (!g.defined()) continue;
      if (g.shape() != p->shape())
        throw ShapeError(this->name() + ": gradient of '" + name + "' has shape " + shape_str(g.shape()) +
                         ", the parameter " + shape_str(p->shape()));
      const Device d = p->device();
      const std::string dev = d.str();
      ParamState& s = state_[name];
      Tensor &m = s.buffers["exp_avg"], &v = s.buffers["exp_avg_sq"];
      if (!m.defined()) {
        m = Tensor::zeros(p->shape(), p->dtype(), d);
        v = Tensor::zeros(p->shape(), p->dtype(), d);
      }
      if (amsgrad && !s.buffers["max_exp_avg_sq"].defined())
        s.buffers["max_exp_avg_sq"] = Tensor::zeros(p->shape(), p->dtype(), d);
      if (!amsgrad) s.buffers.erase("max_exp_avg_sq");
      for (auto& [key, t] : s.buffers) follow_device(t, d);
      const int64_t t = ++s.step;
      std::vector<StepScalars>& slots = scalars_[{gi, dev}];
      const auto [slot, fresh] = slot_of.try_emplace({dev, t}, slot_of.size());
      if (fresh) {  // its values queued before the ops that read them (eager mode runs them now)
        if (slots.size() <= slot->second) slots.push_back({device_scalar(0, d), device_scalar(0, d)});
        std::vector<Tensor> targets;
        std::vector<double> values;
        scalars_for(gi, dev, slot->second, t, targets, values);
        write_scalars(targets, values);
      }
      stepped_.push_back({name, gi, dev, slot->second});
      const StepScalars& sc = slots[slot->second];
      // g (+ weight_decay * p for Adam's L2), inside each program that needs it.
      const bool l2 = wd != 0 && !decoupled_;
      auto grad = [&, param = p](Fused& f) {  // a copy: clang 14 cannot capture a structured binding
        const Fused::Reg gr = f.in(g), pr = l2 ? f.in(*param) : 0;
        return l2 ? f.op(ew::Add, gr, f.scale(pr, wd)) : gr;
      };
      Fused fm, fv;
      // beta1 enters as an input (OneCycleLR cycles it every step), beta2 as a constant.
      const Fused::Reg m_old = fm.in(m), b1 = fm.in(held_scalar(beta1_[{gi, dev}], beta1, d)),
                       c1 = fm.in(held_scalar(one_minus_beta1_[{gi, dev}], 1 - beta1, d)), v_old = fv.in(v),
                       gm = grad(fm), gv = grad(fv);
      fm.op(ew::Add, fm.op(ew::Mul, m_old, b1), fm.op(ew::Mul, gm, c1));
      fv.op(ew::Add, fv.scale(v_old, beta2), fv.scale(fv.op(ew::Mul, gv, gv), 1 - beta2));
      m = fm.run().to(p->dtype());
      v = fv.run().to(p->dtype());
      Tensor v_hat = v;
      if (amsgrad) v_hat = s.buffers["max_exp_avg_sq"] = maximum(s.buffers["max_exp_avg_sq"], v);
      // p (* (1 - lr * wd) for AdamW) - step_size * m / (sqrt(v_hat) / sqrt(bias2) + eps)
      Fused u;
      const bool decay = wd != 0 && decoupled_;
      const Fused::Reg pr = u.in(*p), mr = u.in(m), vr = u.in(v_hat), ss = u.in(sc.step_size),
                       b2 = u.in(sc.bias2_sqrt), er = u.in(held_scalar(eps_[{gi, dev}], eps, d)),
                       dr = decay ? u.in(held_scalar(decay_[{gi, dev}], 1 - lr * wd, d)) : 0;
      const Fused::Reg denom = u.op(ew::Add, u.op(ew::Div, u.op(ew::Sqrt, vr), b2), er);
      const Fused::Reg delta = u.op(ew::Mul, ss, u.op(ew::Div, mr, denom));
      u.op(ew::Sub, decay ? u.op(ew::Mul, pr, dr) : pr, delta);
      commit_param(*p, u.run());
    }
  }
}

void Adam::on_replayed_step() {
  std::map<std::string, std::pair<std::vector<Tensor>, std::vector<double>>> writes;  // by device
  std::set<std::tuple<size_t, std::string, size_t>> written;
  for (const Stepped& e : stepped_) {
    const int64_t t = ++state_.at(e.name).step;
    if (written.insert({e.group, e.device, e.slot}).second)
      scalars_for(e.group, e.device, e.slot, t, writes[e.device].first, writes[e.device].second);
  }
  for (const auto& [dev, w] : writes) write_scalars(w.first, w.second);
}

StateBlob Adam::state_dict() const { return save_state(groups_, state_, /*with_step=*/true); }

void Adam::load_state_dict(const StateBlob& state) { load_state(groups_, state_, state, kState, name(), check); }

}  // namespace hg::training
