// Per-parameter optimizer state (step count and buffers such as momentum_buffer, exp_avg) and
// what SGD and Adam share around it: completing param groups from defaults, and the state_dict
// layout of training/optimizer.h with its validation.
//
//   std::map<std::string, hg::training::ParamState> state;            // by parameter name
//   hg::training::complete_groups(groups_, {{"lr", 0.1}, {"momentum", 0}}, "SGD", check);
//   hg::training::StateBlob s = hg::training::save_state(groups_, state, /*with_step=*/true);
//   hg::training::load_state(groups_, state, s, {.buffers = {"momentum_buffer"}, .required = ...}, "SGD", check);
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "training/optimizer.h"

namespace hg::training {

struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;  // on the parameter's device
};

using OptionMap = std::map<std::string, double>;
// Throws hg::InvalidArgument naming `where` and the bad option.
using OptionCheck = std::function<void(const OptionMap& options, const std::string& where)>;

// Fills each group's missing options from `defaults`; throws InvalidArgument for an unknown
// option (anything but the defaults' keys and "initial_lr"), a failing check, an undefined or
// non-float parameter, and a parameter name used twice.
void complete_groups(std::vector<ParamGroup>& groups, const OptionMap& defaults, const std::string& who,
                     const OptionCheck& check);

// {"param_groups": [{options, "params": [names]}], "state": {name: {"step": n}}} and the
// buffers as "<name>.<key>" host tensors (parameters without state are left out).
StateBlob save_state(const std::vector<ParamGroup>& groups, const std::map<std::string, ParamState>& state,
                     bool with_step);

// What one optimizer's per-parameter state holds.
struct StateSpec {
  std::vector<std::string> buffers;  // every buffer name it may hold
  // The buffers every state entry must have, given its group's options.
  std::function<std::vector<std::string>(const OptionMap& options)> required;
  bool with_step = false;  // every state entry has "step"
};

// Validates all of `blob` first (group count, parameter names per group, options, state
// entries complete per `spec`, buffer names, shapes and dtypes), then replaces the groups'
// options and the state. Throws InvalidArgument naming the offending key; nothing changes then.
void load_state(std::vector<ParamGroup>& groups, std::map<std::string, ParamState>& state, const StateBlob& blob,
                const StateSpec& spec, const std::string& who, const OptionCheck& check);

}  // namespace hg::training
