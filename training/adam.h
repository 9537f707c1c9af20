// Adam and AdamW with PyTorch's formulas (torch.optim.Adam / AdamW), per parameter at step t:
//   AdamW: p = p * (1 - lr * weight_decay)          Adam: g = grad + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//   v_hat = amsgrad ? (v_max = max(v_max, v)) : v
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
// lr, beta1 and the step-dependent factors enter a lazy graph as inputs (device scalars), so
// neither a scheduler (OneCycleLR also cycles beta1) nor the step count recompiles the step graph.
//
//   hg::training::AdamW opt(net->named_parameters(), {.lr = 1e-3});   // weight_decay 1e-2
//   hg::training::Adam adam(net->named_parameters(), {.lr = 1e-3, .amsgrad = true});
//   loss.backward();
//   opt.step();
//   opt.zero_grad();
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "training/optimizer.h"
#include "training/param_state.h"

namespace hg::training {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // Adam: L2 added to the gradient (default 0). AdamW: decoupled decay (unset: 1e-2).
  std::optional<double> weight_decay = std::nullopt;
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  // Throws InvalidArgument for lr, eps or weight_decay < 0 or a beta outside [0, 1), naming
  // the group.
  Adam(NamedParams params, AdamOptions options);
  Adam(std::vector<ParamGroup> groups, AdamOptions defaults);
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  void step() override;
  void on_replayed_step() override;  // the step counts of the last step's parameters advance
  // state: {name: {"step": t}} with tensors "<name>.exp_avg", ".exp_avg_sq" and, with
  // amsgrad, ".max_exp_avg_sq".
  StateBlob state_dict() const override;
  void load_state_dict(const StateBlob& state) override;

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions defaults, bool decoupled);

 private:
  // The step's scalars per (group, device) and distinct step count (slot): the same tensors every
  // step, their values queued in device order, so a replayed step reads this step's values.
  struct StepScalars {
    Tensor step_size, bias2_sqrt;  // lr / (1 - beta1^t), sqrt(1 - beta2^t)
  };
  struct Stepped {  // a parameter the last step() updated
    std::string name;
    size_t group;
    std::string device;
    size_t slot;
  };
  // Queues slot `slot`'s values for step count t into `targets` / `values`.
  void scalars_for(size_t group, const std::string& dev, size_t slot, int64_t t, std::vector<Tensor>& targets,
                   std::vector<double>& values);
  bool decoupled_;
  std::map<std::string, ParamState> state_;
  std::map<std::pair<size_t, std::string>, std::vector<StepScalars>> scalars_;
  // Remade when the value changes.
  std::map<std::pair<size_t, std::string>, std::pair<double, Tensor>> eps_, decay_, beta1_, one_minus_beta1_;
  std::vector<Stepped> stepped_;
};

class AdamW : public Adam {
 public:
  AdamW(NamedParams params, AdamOptions options);
  AdamW(std::vector<ParamGroup> groups, AdamOptions defaults);
};

}  // namespace hg::training
