// DDP's gradient reducer (PyTorch's c10d Reducer): parameters are grouped into buckets in
// reverse registration order (the order backward usually produces their gradients), the first
// bucket capped at first_bucket_mb and the others at bucket_cap_mb. A post-accumulate-grad hook
// on every parameter marks it ready; when every gradient of a bucket is ready the bucket goes
// to a communication thread — always in bucket-index order, the same on every rank — that
// flattens it, all-reduces it, divides by the world size and writes the mean into fresh
// device tensors, which finish() installs as each .grad (a gradient another op may still hold
// is never overwritten in place). In lazy mode a completed bucket first runs the traced part of
// backward that produced it (graphs::mark_step), so communication overlaps with the rest of
// backward and each backward segment is a graph served from the cache after the first step.
//
// With in_graph the reduction is part of the step's graph instead (XLA's all-reduce-start /
// all-reduce-done): a completed bucket records an op that, when the device reaches it, copies
// the bucket's gradients and hands them to the communication thread, and each .grad becomes an
// op that waits for its bucket and divides by the world size. The device keeps computing the
// rest of backward meanwhile, the host never waits, and a lazy step stays one graph, which
// graphs::StepReplay can replay (the Trainer's replay_steps under DDP).
//
// With allreduce_inline (a group whose ranks share this host's memory: ProcessGroup::
// shares_memory) there is no hand-off: the start op all-reduces the bucket itself on the device's
// queue, and outside in_graph the last bucket is reduced on the host thread that completes it.
//
//   auto allreduce = [&pg](float* d, size_t n, uint32_t tag) { pg.allreduce(d, n, hg::training::ReduceOp::Sum, tag); };
//   hg::training::DDPReducer r(net.named_parameters(), allreduce, pg.size(), {.bucket_cap_mb = 25});
//   r.prepare_for_backward(loss, /*sync=*/true);   // hooks armed (find_unused: graph walked)
//   loss.backward();                                // buckets leave as they fill
//   r.finish();                                     // waits; .grad = mean; rethrows comm errors
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/tensor.h"

namespace hg::training {

// Indices into `bytes` per bucket: walked from the last parameter to the first, a bucket is
// closed once it holds at least its cap (the first bucket first_mb, then cap_mb; MB = 2^20
// bytes), so a parameter larger than the cap gets a bucket of its own.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& bytes, double first_mb, double cap_mb);

struct DDPReducerOptions {
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  bool find_unused_parameters = false;
  // Reduce inside the step's graph (see above). Not with find_unused_parameters (which reduces
  // used-flags the host reads). A communication error makes that step's gradients NaN (the ops
  // run on the device, where nothing throws) and is thrown by the next prepare_for_backward,
  // finish or check_error.
  bool in_graph = false;
  // The all-reduce does not block in socket I/O (ProcessGroup::shares_memory): run it where the
  // bucket completes instead of handing it to the communication thread. in_graph: every bucket,
  // on the device's queue inside its start op; otherwise the last bucket (nothing of backward is
  // left to overlap with), on the host thread, after the earlier buckets.
  bool allreduce_inline = false;
};

class DDPReducer {
 public:
  // Sums n floats over every rank in place; tag >= 1000 (1000 + bucket index).
  using AllReduce = std::function<void(float* data, size_t n, uint32_t tag)>;

  // Parameters that do not require grad are left out. Every parameter must be F32 on one device.
  DDPReducer(std::vector<std::pair<std::string, Tensor*>> params, AllReduce allreduce, int world_size,
             DDPReducerOptions opt = {});
  ~DDPReducer();  // waits for the communication thread
  DDPReducer(const DDPReducer&) = delete;
  DDPReducer& operator=(const DDPReducer&) = delete;

  // Before loss.backward(). sync false (no_sync): gradients only accumulate locally; the next
  // synchronizing backward reduces the accumulated ones. A synchronizing round not finished
  // yet is finished first. find_unused_parameters: parameters `loss` does not reach are
  // marked ready now (their accumulated .grad, else zeros).
  void prepare_for_backward(const Tensor& loss, bool sync);
  // After a synchronizing backward: waits for every bucket, then each .grad holds the mean
  // over the world. Throws the communication thread's error (e.g. hg::training::DistError), or
  // hg::InvalidArgument naming the parameters that got no gradient (find_unused_parameters
  // false) — after reducing the rest, so the other ranks are not left waiting. No-op outside
  // a synchronizing round.
  void finish();

  // in_graph: throws the communication thread's first error (hg::training::DistError) if there
  // was one. For a host that only replays steps and so calls nothing else here.
  void check_error() const;

  // Parameter indices (named_parameters order) per bucket, reduction order.
  const std::vector<std::vector<size_t>>& bucket_indices() const { return layout_; }
  const std::string& param_name(size_t i) const { return params_[i].name; }

 private:
  struct Param {
    std::string name;
    Tensor* tensor;
    // The impl the hook is on: in lazy mode the optimizer rebinds the parameter to its new
    // value's impl every step (training/update_ops.h), so the hook is re-armed when it changed.
    std::weak_ptr<TensorImpl> hooked;
    GradHookHandle hook;
    size_t bucket = 0, offset = 0;  // in its bucket's flat buffer (floats)
    bool ready = false;
    Tensor grad;  // this round's local gradient (null: unused, reduced as zeros)
    Tensor mean;  // the reduced result, set by the communication thread
  };
  struct Bucket {
    std::vector<size_t> params;
    size_t numel = 0, pending = 0;
    std::vector<float> flat;  // numel gradients, then one used-flag per parameter (find_unused)
    uint64_t device_event = 0;  // the device queue's event after which the gradients are valid
  };

  void arm_hooks();
  void on_grad_ready(size_t i, const Tensor& leaf);
  void mark_ready(size_t i, Tensor grad);
  void launch_ready_buckets();
  void reduce_bucket(size_t b);  // communication thread (or inline)
  void reduce_and_count(size_t b);  // reduce_bucket, its error recorded, the bucket counted done
  void comm_loop();
  // in_graph: the ops' kernels, on the device's queue (ddp_reducer.cpp).
  struct GraphOps;
  void start_in_graph(size_t b, size_t first, size_t count, const void* const* grads, bool last);
  void mean_in_graph(size_t b, size_t offset, size_t n, float* out);
  void finish_in_graph();

  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<size_t>> layout_;
  AllReduce allreduce_;
  int world_;
  DDPReducerOptions opt_;
  Device device_;
  bool armed_ = false;  // inside a synchronizing round (prepare .. finish)
  size_t next_launch_ = 0;

  struct CommQueue;                 // ddp_reducer.cpp: the buckets for the communication thread
  std::unique_ptr<CommQueue> queue_;
  std::atomic<size_t> reduced_{0};  // buckets done this round (finish() waits on it)
  std::exception_ptr error_;        // the round's first communication error; read once reduced_ is complete
  std::atomic<bool> stop_{false};
  // in_graph: this reducer's id in the ops' attributes, each bucket's start op's result (the
  // token its .grad ops wait on), and per bucket how many rounds the device started and the
  // communication thread finished.
  int64_t id_ = 0;
  std::vector<Tensor> tokens_;
  std::unique_ptr<std::atomic<uint64_t>[]> started_, done_;
  std::atomic<bool> failed_{false};  // error_ is set (in_graph: read at any time once this is)
  std::thread comm_;
};

}  // namespace hg::training
