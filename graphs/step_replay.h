// Training steps that replay: once two consecutive lazy steps record the same graph, later
// steps run it again with the new batch bound, without calling the step's code or tracing it.
//
//   hg::graphs::StepReplay step(hg::Device::hpu(0));
//   for (const auto& [x, y] : batches) {
//     auto out = step.run({x, y}, [&](const std::vector<hg::Tensor>& in) {
//       hg::Tensor loss = hg::ops::cross_entropy(net.forward(in[0]), in[1]);
//       loss.backward();
//       sgd.step();
//       sgd.zero_grad();
//       return std::vector<hg::Tensor>{loss};       // the step's results
//     }, sgd.replay_guard(),                        // host-side settings the body depends on
//     [&] { sgd.on_replayed_step(); });             // host state a replay advances (Adam's counts)
//     losses.push_back(out[0]);                     // read it later: the host runs ahead
//   }
//   step.stats();   // traced, replayed and eager steps; why the last traced step cannot replay
//
// How it decides. Each traced step is one lazy graph (mark_step before and after the body).
// When a step compiles to the same executable as the one before it, with the same guard, each
// of its graph inputs is classified: an argument (bound anew at every replay), a value the
// previous step computed (state: a parameter, a momentum buffer; at each replay it reads the
// last value and the tensor that held it is given the new one, in place, as PyTorch optimizers
// update), a tensor both steps read unchanged (read from its current storage), or a random seed
// (redrawn). Anything else stops replaying, with the reason in stats().last_fallback: an input
// made anew on the host at every step (a scalar computed on the host: the optimizers keep theirs
// in tensors that persist and queue new values in device order), a result that is not
// computed by the step, a value the step computed that someone still holds but the next step
// does not read (replays would leave it stale), a host read or mark_step inside the body.
//
// A replay falls back to tracing (and then replays again after two equal steps) when the guard
// changes, an argument's shape, dtype or device changes, or a state tensor is no longer held by
// anyone but the replayer (the model or optimizer rebound it, e.g. a checkpoint was loaded).
// The body's host-side effects (counters, prints, branches on host values) do not happen on a
// replay: put what they depend on into the guard, or call reset(). With lazy mode off the body
// simply runs (eager). Replays queue on the device like mark_step; the host runs at most 8
// (8) replays ahead of the device.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "graphs/executable.h"

namespace hg::graphs {

struct StepReplayStats {
  uint64_t traced = 0;    // steps that ran the body in lazy mode (one graph each)
  uint64_t replayed = 0;  // steps that replayed without running the body
  uint64_t eager = 0;     // steps that ran the body with lazy mode off
  std::string last_fallback;  // why the last traced step was not followed by replays ("" when ready)
  double replay_host_s = 0;   // host time spent queuing replays, without replay_wait_s
  double replay_wait_s = 0;   // time replays waited for the device (the host was 8 replays ahead)
};

class StepReplay {
 public:
  using Body = std::function<std::vector<Tensor>(const std::vector<Tensor>& args)>;
  explicit StepReplay(Device d = Device::hpu(0));
  ~StepReplay();
  StepReplay(const StepReplay&) = delete;
  StepReplay& operator=(const StepReplay&) = delete;

  // One step: replays when ready and nothing changed, else runs `body(args)` traced. Returns the
  // body's results (fresh tensors on a replay). Throws InvalidArgument inside an HPU graph
  // capture on the device; whatever the body throws propagates (the trace is then dropped by the
  // next mark_step as usual and replaying starts over).
  // on_replay: called on each replay just before it is queued, to advance what the body keeps
  // on the host (Optimizer::on_replayed_step: Adam's step counts and their scalars).
  std::vector<Tensor> run(const std::vector<Tensor>& args, const Body& body, uint64_t guard = 0,
                          const std::function<void()>& on_replay = {});
  // Inside a traced body: a digest of host-side things the step did that a replay repeats (the
  // names of the values it logged, say). Two traced steps become replays only when their notes
  // agree as well as their graphs and guards.
  void note(uint64_t digest);
  void reset();  // forget the recorded steps: the next two steps are traced
  bool ready() const { return plan_ != nullptr; }
  Device device() const { return device_; }
  const StepReplayStats& stats() const { return stats_; }

 private:
  struct Record;
  struct Plan;
  std::vector<Tensor> traced(const std::vector<Tensor>& args, const Body& body, uint64_t guard);
  std::vector<Tensor> replay(const std::vector<Tensor>& args, const std::function<void()>& on_replay);
  bool can_replay(const std::vector<Tensor>& args, uint64_t guard);
  std::string make_plan(const Record& prev, const Record& cur, std::vector<Tensor> inputs,
                        const std::vector<Tensor>& args);

  Device device_;
  std::unique_ptr<Record> last_;
  uint64_t note_ = 0;  // the traced step's notes so far
  std::unique_ptr<Plan> plan_;
  StepReplayStats stats_;
};

}  // namespace hg::graphs
