// The dynamic batcher of one model version (Triton's `dynamic_batching`): requests wait in a
// bounded queue per priority level; `instances` threads each take the oldest requests of the
// highest non-empty level (then the next levels) up to target_batch() samples (the largest
// bucket not above max_batch_size), waiting at most max_queue_delay_us after the oldest one
// arrived for more to come, concatenate them, run the model once (the model pads to the
// smallest captured bucket that fits) and split the outputs back.
//
//   BatcherConfig cfg;  cfg.max_batch_size = 32;  cfg.max_queue_delay_us = 200;
//   auto b = std::make_shared<DynamicBatcher>(model, cfg);
//   auto job = std::make_shared<BatchJob>();
//   job->batch = 2;  job->inputs = {bytes_of_2_samples};
//   job->done = [](BatchJob& j) { if (j.status == 200) use(j.outputs); else report(j.status, j.error); };
//   if (b->submit(job) != DynamicBatcher::Submit::Queued) ...   // 503: full or stopping
//   b->drain();   // refuse new jobs, run every queued one, join the instances
//
// A job whose deadline passes while it waits is never run: done() gets 504. Jobs of a failed
// run all get the failure (http_status() of the exception: 400 for hg::InvalidArgument-like
// errors, 500 otherwise). done() is called exactly once per accepted job, on an instance
// thread, never under the batcher's lock; it must not throw (an exception is swallowed) and
// must not call drain() or destroy the batcher. A job larger than the target batch runs alone.
// Inline runs (inline_max_us): a job that arrives while nothing runs and nothing waits, for a
// model whose recent runs were cheap, runs on the submitting thread (the server's I/O thread)
// instead of being handed to an instance thread and back: done() is then called inside submit().
// It counts as one of the `instances` runs, so batching resumes for the jobs arriving meanwhile.
// Priorities: 1 is the highest; 0 or a level above priority_levels uses default_priority_level.
// The model must have fixed-size datatypes only (BYTES cannot be split by byte offsets). A model
// with dynamic dimensions besides the batch: each job names its samples' shapes, and one run
// takes only jobs of the same shapes (Triton's rule); the others wait for a run of their own.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/served_model.h"

namespace hg::server {

using Clock = std::chrono::steady_clock;

struct BatcherConfig {
  int64_t max_batch_size = 0;       // largest batch one run may take; 0: the model's largest bucket (or 1)
  uint64_t max_queue_delay_us = 0;  // how long the oldest job may wait for a fuller batch (<= 1 h)
  size_t max_queue_size = 0;        // jobs waiting, all levels; 0: unbounded
  bool preserve_ordering = false;   // done() in submission order across instances
  int priority_levels = 1;          // levels 1 (highest) .. priority_levels
  int default_priority_level = 1;   // for jobs with priority 0
  int instances = 1;                // threads running batches concurrently
  // Jobs run inline (see above) when the average of the model's recent runs is at most this
  // many microseconds and max_queue_delay_us is 0; 0: never.
  uint64_t inline_max_us = 0;
  // Called once per run, on the instance thread, before the jobs' done(): the run's batch size
  // (before padding) and its compute time. For metrics; must not throw.
  std::function<void(int64_t batch, Clock::duration compute)> on_batch;
};

struct BatchJob {
  int64_t batch = 1;
  std::vector<std::string> inputs;   // per model input: batch * per-sample bytes
  std::vector<Shape> shapes;         // per model input, one sample's shape: models with dynamic dimensions only
  int priority = 0;                  // 0: the default level
  Clock::time_point deadline = Clock::time_point::max();
  std::shared_ptr<const std::atomic<bool>> cancelled;  // set: the client left; the job is not run
  std::function<void(BatchJob&)> done;
  // Past its deadline or given up by its client: it is answered (504 or 499) without running.
  bool dropped(Clock::time_point now) const {
    return deadline <= now || (cancelled && cancelled->load(std::memory_order_relaxed));
  }

  // Filled by the batcher.
  int status = 0;                    // 200, 4xx/5xx from the run, 504 (deadline)
  std::string error;
  std::vector<std::string> outputs;  // per model output: batch * per-sample bytes
  std::vector<Shape> output_shapes;  // per model output, one sample's shape (with `shapes` only)
  Clock::time_point enqueued, compute_start, compute_end;
  int64_t executed_batch = 0;        // the size of the run this job was part of (before padding)
};

class DynamicBatcher {
 public:
  // Throws hg::InvalidArgument for a config the model cannot run (bad levels or instances, a
  // BYTES tensor).
  DynamicBatcher(std::shared_ptr<ServedModel> model, BatcherConfig cfg);
  ~DynamicBatcher();  // drain()
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  enum class Submit { Queued, QueueFull, Stopped };
  // Throws hg::InvalidArgument (nothing queued, done() not called) when the job is malformed:
  // batch < 1, or an input count, sample shape or byte size that does not match the model.
  Submit submit(std::shared_ptr<BatchJob> job);
  // Stops accepting, runs every queued job (expired ones get 504), joins. Idempotent.
  void drain();
  // From now on, runs what is queued without waiting max_queue_delay_us for a fuller batch
  // (server draining: answer in-flight requests after one run, not after the delay).
  void hurry();

  size_t queue_depth() const;
  uint64_t inline_runs() const;  // jobs run on the submitting thread so far
  const BatcherConfig& config() const;
  // The most samples one run gathers: the largest bucket not above max_batch_size (see
  // BatcherConfig).
  int64_t target_batch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hg::server
