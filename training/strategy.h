// Strategies: how the Trainer places work on devices and processes (lightning-habana's
// SingleHPUStrategy "hpu_single" and HPUDDPStrategy "hpu_ddp" / HPUParallelStrategy
// "hpu_parallel", here both DDP: training/ddp_strategy.h).
//
//   hg::training::Trainer t({.accelerator = "hpu", .devices = 2, .strategy = "hpu_ddp"});
//   // or: .strategy_object = std::make_shared<hg::training::DDPStrategy>(hg::training::DDPOptions{...})
//   t.strategy().global_rank();   // node_rank * devices + local_rank
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "engine/device.h"
#include "engine/tensor.h"
#include "models/module.h"
#include "training/dataloader.h"
#include "training/process_group.h"

namespace hg::training {

// What the Trainer resolved before calling setup_environment.
struct StrategyContext {
  Device device;                  // hpu:0 or cpu
  int devices = 1;                // processes per node
  int num_nodes = 1;
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  bool deterministic = false;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Once per Trainer, before the first fit/validate/test/predict: DDP launches the other
  // local ranks (rank 0 of a node) and joins the process group.
  virtual void setup_environment(const StrategyContext& ctx) = 0;
  virtual Device root_device() const = 0;
  virtual int global_rank() const { return 0; }
  virtual int local_rank() const { return 0; }
  virtual int node_rank() const { return 0; }
  virtual int world_size() const { return 1; }
  bool is_global_zero() const { return global_rank() == 0; }
  // After the module moved to root_device() and its optimizers exist: DDP broadcasts rank 0's
  // parameters and buffers and builds its gradient buckets.
  virtual void setup_module(models::Module&) {}
  // Before each training_step (every micro-batch), while the module's state is concrete: DDP
  // sends rank 0's buffers (BatchNorm statistics) to every rank, as PyTorch's DDP forward does.
  virtual void before_forward(models::Module&) {}
  // loss.backward(). DDP: all-reduces gradient buckets on its communication thread while
  // backward runs, unless `sync_gradients` is false (no_sync during gradient accumulation).
  virtual void backward(const Tensor& loss, bool sync_gradients) {
    (void)sync_gradients;
    loss.backward();
  }
  // Before clipping and the optimizer step on a synchronizing step: DDP waits for every bucket
  // and leaves each .grad holding the mean over the world.
  virtual void finish_gradient_sync() {}
  virtual double reduce(double value, ReduceOp op) {
    (void)op;
    return value;
  }
  virtual void barrier(const std::string& name) { (void)name; }
  virtual void broadcast(std::string& bytes) { (void)bytes; }  // rank 0's bytes to every rank
  // The loader this rank iterates: DDP replaces its sampler with a DistributedSampler.
  virtual DataLoader distribute(const DataLoader& loader, bool shuffle, uint64_t seed) const {
    (void)shuffle, (void)seed;
    return loader;
  }
  // The Trainer's replay_steps (graphs::StepReplay: a replayed step runs no code of the step):
  // a strategy whose steps can replay sets itself up for it (on) or back (off) and returns
  // true; false names nothing to undo and the Trainer traces every step.
  virtual bool replay_steps(bool on) { return !on || root_device().is_hpu(); }
  // Before each replayed step: DDP throws the error of an all-reduce an earlier step queued.
  virtual void before_replayed_step() {}
  virtual void teardown() {}
};

class SingleHPUStrategy : public Strategy {
 public:
  std::string name() const override { return "hpu_single"; }
  void setup_environment(const StrategyContext& ctx) override { device_ = ctx.device; }
  Device root_device() const override { return device_; }

 private:
  Device device_;
};

}  // namespace hg::training
