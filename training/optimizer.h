// The optimizer interface and gradient clipping. Updates are engine ops on the parameters'
// device (no host reads), so in lazy mode forward + backward + clipping + update trace into one
// step graph; hyper-parameters that change during training (lr, Adam's step count) enter the
// graph as tensors, so a scheduler changing them does not recompile the step.
//
//   auto opt = std::make_shared<hg::training::AdamW>(net->named_parameters(),
//                                                    hg::training::AdamOptions{.lr = 1e-3});
//   loss.backward();
//   hg::training::clip_grad_norm(opt->params(), /*max_norm=*/1.0);
//   opt->step();                         // traced; runs at the next mark_step / host read
//   opt->zero_grad();
//   opt->param_groups()[0].set_lr(5e-4); // what schedulers do
//   auto s = opt->state_dict();          // PyTorch's layout: param_groups + per-parameter state
//
// Concrete optimizers: training/sgd.h (SGD: momentum, dampening, Nesterov, weight decay) and
// training/adam.h (Adam, AdamW). Schedulers: training/lr_scheduler.h.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace hg::training {

using NamedParams = std::vector<std::pair<std::string, Tensor*>>;

// One parameter group: its parameters and its hyper-parameters by PyTorch's names
// ("lr", "momentum", "dampening", "weight_decay", "beta1", "beta2", "eps", "initial_lr", ...).
struct ParamGroup {
  NamedParams params;
  std::map<std::string, double> options;
  double lr() const { return options.at("lr"); }
  void set_lr(double lr) { options["lr"] = lr; }
};

// Serializable state: scalars and structure in `json`, tensors by name (on the host).
struct StateBlob {
  nlohmann::json json;
  std::vector<std::pair<std::string, Tensor>> tensors;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;  // "SGD", "Adam", "AdamW"
  // Updates every parameter that has a gradient (parameters without one are skipped, as in
  // PyTorch). Engine ops only.
  virtual void step() = 0;
  // A replayed training step (graphs/step_replay.h) ran the graph of this optimizer's last
  // step() without calling it: advance what step() keeps on the host (Adam's step counts) and
  // queue the per-step scalars the graph reads. Called before the replay is queued.
  virtual void on_replayed_step() {}
  void zero_grad();  // drops every parameter's .grad
  // A digest of the host-side settings a step depends on besides tensors: every group's
  // hyper-parameters and parameters. A replayed training step (graphs/step_replay.h) is traced
  // again when it changes (a scheduler set a new lr).
  uint64_t replay_guard() const;
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  NamedParams params() const;  // every group's parameters, in order
  // json: {"param_groups": [{<options>, "params": [names]}], "state": {name: {"step": n, ...}}};
  // tensors: "<param name>.<key>" (momentum_buffer, exp_avg, exp_avg_sq) copied to the host.
  virtual StateBlob state_dict() const = 0;
  // Validates everything first (names, group count, shapes, dtypes); throws
  // hg::InvalidArgument naming the offending key and changes nothing then.
  virtual void load_state_dict(const StateBlob& state) = 0;

 protected:
  std::vector<ParamGroup> groups_;
};

// torch.nn.utils.clip_grad_norm_: scales every gradient by min(1, max_norm / (total + 1e-6)),
// with `total` the norm of all gradients together. Returns the total norm (a 0-d tensor on the
// parameters' device, not read back). error_if_nonfinite: throws if the norm is NaN or inf
// (reads it: one host sync).
Tensor clip_grad_norm(const NamedParams& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);
// torch.nn.utils.clip_grad_value_: clamps every gradient element to [-clip, clip].
void clip_grad_value(const NamedParams& params, double clip_value);

}  // namespace hg::training
