// Stochastic gradient descent with PyTorch's formulas (torch.optim.SGD):
//   g = grad + weight_decay * p
//   buf = g on the first step, then momentum * buf + (1 - dampening) * g   (momentum != 0)
//   g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
// The update is engine ops on the parameters' device; lr and momentum enter a lazy graph as
// inputs (a scheduler changing them does not recompile the step).
//
//   hg::training::SGD opt(net->named_parameters(), {.lr = 0.1, .momentum = 0.9});
//   loss.backward();
//   opt.step();
//   opt.zero_grad();
//   // param groups with their own options (missing ones from the defaults):
//   hg::training::SGD two({{body->named_parameters(), {{"lr", 0.01}}}, {head->named_parameters(), {}}},
//                         {.lr = 0.1, .momentum = 0.9});
#pragma once
#include <map>
#include <string>
#include <vector>

#include "training/optimizer.h"
#include "training/param_state.h"

namespace hg::training {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  // Throws InvalidArgument for lr, momentum or weight_decay < 0, or Nesterov without momentum
  // or with dampening (as PyTorch), naming the group.
  SGD(NamedParams params, SGDOptions options);
  SGD(std::vector<ParamGroup> groups, SGDOptions defaults);
  std::string name() const override { return "SGD"; }
  void step() override;
  // state: {name: {}} with tensor "<name>.momentum_buffer" for parameters that have one.
  StateBlob state_dict() const override;
  void load_state_dict(const StateBlob& state) override;

 private:
  std::map<std::string, ParamState> state_;
  // The lr and the momentum as device scalars per group and device (held_scalar,
  // training/update_ops.h).
  std::map<std::pair<size_t, std::string>, std::pair<double, Tensor>> lr_, momentum_;
};

}  // namespace hg::training
