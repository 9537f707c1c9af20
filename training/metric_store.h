// What LightningModule::log() records during one loop (training, or one validation/test run):
// step values, read after the step graph ran, and their epoch reductions, with Lightning's
// naming ("<name>_step" / "<name>_epoch" when logged both ways) and its callback, progress-bar
// and logger subsets.
//
//   hg::training::MetricStore m;
//   m.log("loss", loss_tensor, 0.0, {.prog_bar = true}, /*step_hook=*/true, /*batch_size=*/32);
//   hg::graphs::mark_step(device);        // the step graph runs
//   m.read_pending();                     // host reads of the logged tensors, after the graph
//   auto s = m.step_metrics(true);        // s.callback["loss"], s.log["loss"], s.pbar["loss"]
//   auto e = m.epoch_metrics(true, strategy);   // weighted means, sync_dist over ranks
//   m.reset();                            // next epoch
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "training/lightning_module.h"

namespace hg::training {

class Strategy;

struct MetricSets {
  std::map<std::string, double> callback, log, pbar;
};

class MetricStore {
 public:
  // `value` is used when `tensor` is undefined. step_hook: logged from a batch-level hook
  // (on_step defaults to true there). Throws hg::InvalidArgument for a tensor with more than
  // one element, an unknown reduce_fx, or options that change between calls for one name.
  void log(const std::string& name, const Tensor& tensor, double value, const LogOptions& opt, bool step_hook,
           int64_t batch_size, const std::string& hook);
  // One log() call, kept so that a replayed training step (graphs/step_replay.h) can log the
  // same again: `tensor` is what log() keeps (an F32 or I64 one-element tensor), undefined for a
  // host value.
  struct Logged {
    std::string name;
    Tensor tensor;
    double value = 0;
    int64_t batch_size = 1;
    bool is_tensor = false;  // kept when `tensor` is dropped
  };
  // While set, every log() call is also appended to *sink (nullptr stops).
  void record_logs(std::vector<Logged>* sink) { recording_ = sink; }
  // Logs `l` again (its name was logged before, options unchanged) with `tensor` as the value,
  // or l.value when `tensor` is undefined.
  void relog(const Logged& l, const Tensor& tensor);
  // Reads every tensor logged since the last call (after the step graph ran).
  void read_pending();
  // Values logged with on_step since the last clear_step(). training: callback metrics also
  // get the step values (as Lightning does in the training loop).
  MetricSets step_metrics(bool training, Strategy& strategy);
  void clear_step();
  // The epoch reduction of everything logged with on_epoch (collectives for sync_dist, in name
  // order, so every rank must have logged the same names).
  MetricSets epoch_metrics(Strategy& strategy) const;
  bool empty() const { return entries_.empty(); }
  void reset();

 private:
  struct Entry {
    LogOptions opt;  // on_step / on_epoch resolved
    bool forked = false;
    std::optional<double> step_value;
    double sum = 0, weight = 0, max = 0, min = 0;
    int64_t count = 0;
  };
  struct Pending {
    std::string name;
    Tensor tensor;
    int64_t batch_size;
  };
  void add(Entry& e, double v, int64_t batch_size);
  std::map<std::string, Entry> entries_;
  std::vector<Pending> pending_;
  std::vector<Logged>* recording_ = nullptr;
};

}  // namespace hg::training
