#include "training/lr_scheduler.h"

#include "engine/error.h"
#include "training/state_fields.h"

namespace hg::training {

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (ParamGroup& g : opt_.param_groups()) {
    g.options.try_emplace("initial_lr", g.lr());
    base_lrs_.push_back(g.options.at("initial_lr"));
    last_lr_.push_back(g.lr());
  }
}

void LRScheduler::step() {
  auto& groups = opt_.param_groups();
  if (groups.size() != base_lrs_.size())
    throw InvalidArgument(name() + ": the optimizer has " + std::to_string(groups.size()) +
                          " param groups, the scheduler was made for " + std::to_string(base_lrs_.size()));
  ++last_epoch_;
  std::vector<double> lrs;
  for (size_t g = 0; g < groups.size(); ++g) lrs.push_back(lr_at(g));
  for (size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(lrs[g]);
  last_lr_ = std::move(lrs);
}

void LRScheduler::step(double) {
  throw InvalidArgument(name() + ": step(metric) is for ReduceLROnPlateau; call step()");
}

nlohmann::json LRScheduler::state_dict() const {
  return {{"name", name()}, {"last_epoch", last_epoch_}, {"last_lr", last_lr_}, {"base_lrs", base_lrs_}};
}

void LRScheduler::load_state_dict(const nlohmann::json& state) {
  const std::string who = name() + " state";
  const std::string n = string_field(state, "name", who);
  if (n != name()) throw InvalidArgument(who + ": field 'name' is '" + n + "', not '" + name() + "'");
  const int64_t epoch = int_field(state, "last_epoch", who);
  const auto groups = static_cast<int64_t>(base_lrs_.size());
  auto last = numbers_field(state, "last_lr", who, groups);
  auto base = numbers_field(state, "base_lrs", who, groups);
  last_epoch_ = epoch;
  last_lr_ = std::move(last);
  base_lrs_ = std::move(base);
}

}  // namespace hg::training
