#include "training/metric_store.h"

#include <algorithm>

#include "engine/autograd.h"
#include "engine/error.h"
#include "training/strategy.h"

namespace hg::training {

namespace {

ReduceOp reduce_op(const std::string& fx) {
  if (fx == "mean") return ReduceOp::Mean;
  if (fx == "sum") return ReduceOp::Sum;
  if (fx == "max") return ReduceOp::Max;
  if (fx == "min") return ReduceOp::Min;
  throw InvalidArgument("log: reduce_fx '" + fx + "' is not one of mean, sum, max, min");
}

}  // namespace

void MetricStore::log(const std::string& name, const Tensor& tensor, double value, const LogOptions& opt,
                      bool step_hook, int64_t batch_size, const std::string& hook) {
  if (name.empty()) throw InvalidArgument("log: the metric name is empty");
  if (tensor.defined() && tensor.numel() != 1)
    throw InvalidArgument("log('" + name + "'): the value has " + std::to_string(tensor.numel()) +
                          " elements; only one-element tensors can be logged");
  reduce_op(opt.reduce_fx);
  if (opt.batch_size < 0) throw InvalidArgument("log('" + name + "'): batch_size must be >= 0");
  LogOptions o = opt;
  o.on_step = opt.on_step.value_or(step_hook);
  o.on_epoch = opt.on_epoch.value_or(!step_hook);
  if (*o.on_step && !step_hook)
    throw InvalidArgument("log('" + name + "', on_step=true) is not allowed in " + hook +
                          ": it runs once per epoch, not per batch");
  const int64_t bs = opt.batch_size > 0 ? opt.batch_size : std::max<int64_t>(batch_size, 1);
  auto [it, fresh] = entries_.try_emplace(name);
  Entry& e = it->second;
  if (fresh) {
    e.opt = o;
    e.forked = *o.on_step && *o.on_epoch;
  } else if (*e.opt.on_step != *o.on_step || *e.opt.on_epoch != *o.on_epoch || e.opt.reduce_fx != o.reduce_fx ||
             e.opt.sync_dist != o.sync_dist) {
    throw InvalidArgument("log('" + name + "'): logged again in " + hook +
                          " with other on_step/on_epoch/reduce_fx/sync_dist options than before");
  } else {
    e.opt.prog_bar = o.prog_bar;
    e.opt.logger = o.logger;
  }
  if (tensor.defined()) {
    // Kept as is (detach() would run a lazy graph early); a cast to F32 joins the step graph.
    NoGradGuard no_grad;
    const DType t = tensor.dtype();
    pending_.push_back({name, t == DType::F32 || t == DType::I64 ? tensor : tensor.to(DType::F32), bs});
    if (recording_) recording_->push_back({name, pending_.back().tensor, 0, bs, true});
  } else {
    add(e, value, bs);
    if (recording_) recording_->push_back({name, Tensor(), value, bs, false});
  }
}

void MetricStore::relog(const Logged& l, const Tensor& tensor) {
  if (tensor.defined())
    pending_.push_back({l.name, tensor, l.batch_size});
  else
    add(entries_.at(l.name), l.value, l.batch_size);
}

void MetricStore::add(Entry& e, double v, int64_t batch_size) {
  if (*e.opt.on_step) e.step_value = v;
  if (!*e.opt.on_epoch) return;
  if (e.count == 0) e.max = e.min = v;
  e.max = std::max(e.max, v);
  e.min = std::min(e.min, v);
  if (e.opt.reduce_fx == "mean") {
    e.sum += v * static_cast<double>(batch_size);
    e.weight += static_cast<double>(batch_size);
  } else {
    e.sum += v;
  }
  ++e.count;
}

void MetricStore::read_pending() {
  std::vector<Pending> pending;
  pending.swap(pending_);
  for (Pending& p : pending) {
    const Tensor& t = p.tensor;
    const double v = t.dtype() == DType::I64 ? static_cast<double>(t.to_indices()[0]) : static_cast<double>(t.item());
    add(entries_.at(p.name), v, p.batch_size);
  }
}

MetricSets MetricStore::step_metrics(bool training, Strategy& strategy) {
  MetricSets out;
  for (auto& [name, e] : entries_) {
    if (!e.step_value) continue;
    double v = *e.step_value;
    if (e.opt.sync_dist) v = strategy.reduce(v, reduce_op(e.opt.reduce_fx));
    const std::string forked = e.forked ? name + "_step" : name;
    if (e.opt.logger) out.log[forked] = v;
    if (training) {
      out.callback[name] = v;
      out.callback[forked] = v;
    }
    if (e.opt.prog_bar) out.pbar[forked] = v;
  }
  return out;
}

void MetricStore::clear_step() {
  for (auto& [name, e] : entries_) e.step_value.reset();
}

MetricSets MetricStore::epoch_metrics(Strategy& strategy) const {
  MetricSets out;
  for (const auto& [name, e] : entries_) {
    if (!*e.opt.on_epoch || e.count == 0) continue;
    double v = 0;
    if (e.opt.reduce_fx == "mean") {
      double sum = e.sum, weight = e.weight;
      if (e.opt.sync_dist) {
        sum = strategy.reduce(sum, ReduceOp::Sum);
        weight = strategy.reduce(weight, ReduceOp::Sum);
      }
      v = sum / weight;
    } else {
      v = e.opt.reduce_fx == "sum" ? e.sum : e.opt.reduce_fx == "max" ? e.max : e.min;
      if (e.opt.sync_dist) v = strategy.reduce(v, reduce_op(e.opt.reduce_fx));
    }
    const std::string forked = e.forked ? name + "_epoch" : name;
    if (e.opt.logger) out.log[forked] = v;
    out.callback[name] = v;
    out.callback[forked] = v;
    if (e.opt.prog_bar) out.pbar[forked] = v;
  }
  return out;
}

void MetricStore::reset() {
  entries_.clear();
  pending_.clear();
}

}  // namespace hg::training
