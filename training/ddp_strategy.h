// Data-parallel training over processes (PyTorch DistributedDataParallel's semantics, as
// lightning-habana's HPUDDPStrategy "hpu_ddp" / HPUParallelStrategy "hpu_parallel"): every
// rank holds the whole model, rank 0's parameters and buffers are broadcast at setup, each
// rank runs forward and backward on its shard of the batch, and gradient buckets (reverse
// parameter order, first bucket 1 MB, then 25 MB) are all-reduced over Gloo on a
// communication thread while backward is still running; .grad ends up holding the mean over
// the world. A rank whose peer dies or whose launcher reports a failed child prints
// "hgraph DDP rank R: <what happened>" to stderr and exits non-zero — never a hang.
//
// The process group (and the local ranks rank 0 started) belongs to the process, not to one
// strategy: later DDP strategies and Trainers in the same program reuse it (as Lightning reuses
// an initialized torch.distributed group). It ends at exit or with shutdown_process_group().
//
//   hg::training::Trainer t({.accelerator = "hpu", .devices = 2, .strategy = "hpu_ddp"});
//   // or, with options:
//   auto ddp = std::make_shared<hg::training::DDPStrategy>(
//       hg::training::DDPOptions{.bucket_cap_mb = 25, .find_unused_parameters = true});
//   hg::training::Trainer t2({.devices = 2, .strategy_object = ddp});
//
//   // Without the Trainer (what it does per step):
//   hg::training::DDPStrategy s;
//   s.setup_environment({.device = hg::Device::hpu(0), .devices = 2});  // rank 0 starts rank 1
//   s.setup_module(net);                                 // broadcast from rank 0, buckets
//   s.before_forward(net);                               // rank 0's buffers to every rank
//   s.backward(loss, /*sync_gradients=*/true);           // buckets all-reduce as grads appear
//   s.finish_gradient_sync();                            // every .grad = mean over ranks
//   opt->step();
//   hg::training::DDPStrategy::shutdown_process_group();  // optional: also runs at exit
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "training/cluster_env.h"
#include "training/strategy.h"

namespace hg::training {

class DDPReducer;  // training/ddp_reducer.h

struct DDPOptions {
  double bucket_cap_mb = 25;     // bucket size cap (PyTorch's bucket_cap_mb)
  double first_bucket_mb = 1;    // the first bucket (last parameters) is smaller: comm starts early
  // false: a parameter that got no gradient in a synchronizing backward is an error naming it.
  // true: the autograd graph is walked before backward and unused parameters contribute zeros
  // (a parameter no rank used keeps no .grad, as in PyTorch).
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // rank 0's buffers (BatchNorm statistics) to every rank before each forward
};

class DDPStrategy : public Strategy {
 public:
  explicit DDPStrategy(DDPOptions opt = {}, std::string name = "hpu_ddp");
  ~DDPStrategy() override;

  std::string name() const override { return name_; }
  void setup_environment(const StrategyContext& ctx) override;
  Device root_device() const override { return device_; }
  int global_rank() const override { return rank_; }
  int local_rank() const override { return env_.local_rank; }
  int node_rank() const override { return env_.node_rank; }
  int world_size() const override { return world_; }
  void setup_module(models::Module& m) override;
  void before_forward(models::Module& m) override;
  void backward(const Tensor& loss, bool sync_gradients) override;
  void finish_gradient_sync() override;
  // Lazy mode, no find_unused_parameters and no buffers to broadcast (broadcast_buffers false
  // or a module without buffers): the gradient buckets are reduced by ops in the step's graph
  // (DDPReducerOptions::in_graph), so the step is one graph that replays.
  bool replay_steps(bool on) override;
  void before_replayed_step() override;
  double reduce(double value, ReduceOp op) override;
  void barrier(const std::string& name) override;
  void broadcast(std::string& bytes) override;
  DataLoader distribute(const DataLoader& loader, bool shuffle, uint64_t seed) const override;
  // Releases this strategy's module state; the process group stays for later strategies. Reached
  // while an exception unwinds (an error on this rank): kills the local ranks this process
  // started and ends the group, so the original error is what the user sees.
  void teardown() override;

  // Ends this process's group (PyTorch's destroy_process_group): rank 0 of a node then waits (up
  // to the group's timeout) for the local ranks it started to finish their program, and exits 1
  // naming one that failed. Runs by itself at exit; a later DDP strategy starts a new group.
  static void shutdown_process_group();

  const DDPOptions& options() const { return opt_; }
  ProcessGroup* process_group() const { return pg_.get(); }  // null before setup_environment

 private:
  template <class F>
  auto collective(const char* what, F&& f);  // f(); a DistError from it fails the run
  void sync_from_rank0();

  DDPOptions opt_;
  std::string name_;
  Device device_;
  ClusterEnv env_;
  int rank_ = 0, world_ = 1;
  std::shared_ptr<ProcessGroup> pg_;  // the process's group; shared with the reducer's thread
  void make_reducer(bool in_graph);
  std::unique_ptr<DDPReducer> reducer_;  // world > 1 only
  bool in_graph_ = false;                // reducer_ reduces inside the step's graph
  models::Module* module_ = nullptr;
  std::vector<std::pair<std::string, Tensor*>> buffers_;  // broadcast before each forward
  std::vector<float> buffer_bytes_;                       // their bytes, as floats on the wire
};

}  // namespace hg::training
