#include "training/lightning_module.h"

#include "engine/error.h"
#include "training/trainer_loop.h"

namespace hg::training {

Tensor LightningModule::predict_step(const Batch& batch, int64_t batch_idx) {
  (void)batch_idx;
  if (batch.empty()) throw InvalidArgument("predict_step: the batch is empty");
  return module().forward(batch[0]);
}

void LightningModule::log(const std::string& name, const Tensor& value, const LogOptions& opt) {
  if (!trainer_ || !trainer_->loop_->active)
    throw InvalidArgument("log('" + name + "') outside a step or epoch hook run by a Trainer");
  if (!value.defined()) throw InvalidArgument("log('" + name + "'): the tensor is undefined");
  Trainer::Loop& l = *trainer_->loop_;
  l.active->log(name, value, 0.0, opt, l.step_hook, l.batch_size, l.hook);
}

void LightningModule::log(const std::string& name, double value, const LogOptions& opt) {
  if (!trainer_ || !trainer_->loop_->active)
    throw InvalidArgument("log('" + name + "') outside a step or epoch hook run by a Trainer");
  Trainer::Loop& l = *trainer_->loop_;
  l.active->log(name, Tensor(), value, opt, l.step_hook, l.batch_size, l.hook);
}

std::vector<Optimizer*> LightningModule::optimizers() const {
  if (!trainer_) throw InvalidArgument("optimizers(): the module is not attached to a Trainer");
  std::vector<Optimizer*> out;
  for (const auto& c : trainer_->optimizers_) out.push_back(c.optimizer.get());
  return out;
}

std::vector<LRScheduler*> LightningModule::lr_schedulers() const {
  if (!trainer_) throw InvalidArgument("lr_schedulers(): the module is not attached to a Trainer");
  std::vector<LRScheduler*> out;
  for (const auto& c : trainer_->optimizers_)
    if (c.scheduler) out.push_back(c.scheduler.get());
  return out;
}

void LightningModule::manual_backward(const Tensor& loss) {
  if (!trainer_) throw InvalidArgument("manual_backward(): the module is not attached to a Trainer");
  if (automatic_optimization)
    throw InvalidArgument("manual_backward() needs automatic_optimization = false (the Trainer runs backward itself)");
  Strategy& s = trainer_->strategy();
  s.backward(loss, true);
  s.finish_gradient_sync();
}

int LightningModule::current_epoch() const { return trainer_ ? trainer_->current_epoch() : 0; }
int64_t LightningModule::global_step() const { return trainer_ ? trainer_->global_step() : 0; }
Device LightningModule::device() const { return trainer_ ? trainer_->device() : Device::cpu(); }

}  // namespace hg::training
