// Validation (inside fit, its sanity check, and Trainer::validate), test and predict loops.
#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "training/ddp_strategy.h"
#include "training/predict_gather.h"
#include "training/trainer_loop.h"

namespace hg::training {

std::map<std::string, double> Trainer::Loop::evaluate(LightningModule& m, const DataLoader& data, int64_t n, bool test) {
  const bool sanity = t.sanity_checking_;
  MetricStore& s = eval_metrics;
  s.reset();
  const bool was_training = m.module().training();
  m.module().eval();
  NoGradGuard no_grad;
  if (!test) {
    HookScope scope(*this, &s, false, "on_validation_epoch_start");
    for (auto& cb : t.callbacks_) cb->on_validation_epoch_start(t, m);
    m.on_validation_epoch_start();
  }
  DataLoader::Epoch it = data.epoch(0);
  for (int64_t idx = 0; idx < n; ++idx) {
    std::optional<Batch> host = it.next();
    if (!host) break;
    const Batch batch = to_device(*host);
    {
      HookScope scope(*this, &s, false, test ? "test_step" : "validation_step");
      AutocastGuard autocast(precision_bf16());
      if (test)
        m.test_step(batch, idx);
      else
        m.validation_step(batch, idx);
    }
    step_sync();
    s.read_pending();
    HookScope scope(*this, &s, false, test ? "on_test_batch_end" : "on_validation_batch_end");
    for (auto& cb : t.callbacks_) {
      if (test)
        cb->on_test_batch_end(t, m, *host, idx);
      else
        cb->on_validation_batch_end(t, m, *host, idx);
    }
  }
  {
    HookScope scope(*this, &s, false, test ? "on_test_epoch_end" : "on_validation_epoch_end");
    publish(s.epoch_metrics(*strategy), true);
    for (auto& cb : t.callbacks_) {
      if (test)
        cb->on_test_epoch_end(t, m);
      else
        cb->on_validation_epoch_end(t, m);
    }
    if (test)
      m.on_test_epoch_end();
    else
      m.on_validation_epoch_end();
  }
  const MetricSets e = s.epoch_metrics(*strategy);
  publish(e, true);
  if (!sanity) log_to_loggers(e.log, t.global_step_);
  if (!test)
    for (auto& cb : t.callbacks_) cb->on_validation_end(t, m);
  m.module().train(was_training);
  return e.callback;
}

std::vector<Tensor> Trainer::Loop::predict(LightningModule& m, const DataLoader& data) {
  // Data parallel: every rank predicts its stride of the loader, rank 0 gathers them in order.
  const int world = strategy->world_size();
  auto* ddp = world > 1 ? dynamic_cast<DDPStrategy*>(strategy.get()) : nullptr;
  if (world > 1 && (!ddp || !ddp->process_group()))
    throw InvalidArgument("predict with world_size " + std::to_string(world) + " needs DDPStrategy's process group");
  const DataLoader d = world > 1 ? strided_loader(data, world, strategy->global_rank()) : data;
  const int64_t n = limit_batches(t.opt_.limit_predict_batches, d.num_batches(), "limit_predict_batches");
  const bool was_training = m.module().training();
  m.module().eval();
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  DataLoader::Epoch it = d.epoch(0);
  for (int64_t idx = 0; idx < n; ++idx) {
    std::optional<Batch> host = it.next();
    if (!host) break;
    const Batch batch = to_device(*host);
    {
      AutocastGuard autocast(precision_bf16());
      out.push_back(m.predict_step(batch, idx));
    }
    step_sync();
    for (auto& cb : t.callbacks_) cb->on_predict_batch_end(t, m, *host, idx);
  }
  m.module().train(was_training);
  if (ddp) return gather_predictions(out, *ddp->process_group(), data.options().batch_size);
  return out;
}

}  // namespace hg::training
