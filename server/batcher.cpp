#include "server/batcher.h"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "engine/error.h"
#include "server/http_error.h"
#include "server/wire.h"

namespace hg::server {
namespace {

// Bytes of one element of a model tensor; the batcher splits by byte offsets, so BYTES (and
// any unknown name) is refused.
size_t element_bytes(const models::IOSpec& t, const char* kind) {
  auto w = wire_type_from_name(t.datatype);
  std::string what = std::string(kind) + " '" + t.name + "'";
  if (!w) throw InvalidArgument("dynamic batcher: " + what + " has unknown datatype '" + t.datatype + "'");
  size_t n = wire_type_size(*w);
  if (n == 0)
    throw InvalidArgument("dynamic batcher: " + what +
                          " is BYTES, which cannot be batched by byte offsets (variable-size elements)");
  return n;
}

// Storage kept between runs; grows, never shrinks, and is not zero-filled.
class ByteBuffer {
 public:
  std::byte* at_least(size_t n) {
    if (n > capacity_) {
      data_ = std::make_unique_for_overwrite<std::byte[]>(n);
      capacity_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<std::byte[]> data_;
  size_t capacity_ = 0;
};

struct Entry {
  std::shared_ptr<BatchJob> job;
  uint64_t seq = 0;  // submission order, for preserve_ordering
};

void call_done(BatchJob& job) {
  if (!job.done) return;
  try {
    job.done(job);
  } catch (...) {
    // done() must not throw; an instance thread has nobody to hand the exception to.
  }
}

constexpr uint64_t kMaxQueueDelayUs = 3'600'000'000;

// The elements of a sample shape a job names, or -1 when a dimension is negative or the count
// passes 2^40 (the byte count check that follows must not overflow).
int64_t sample_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 40)) return -1;
  return n;
}

int64_t micros(Clock::duration d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); }
int64_t ns_since_epoch(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

struct DynamicBatcher::Impl {
  // What one instance thread reuses from run to run.
  struct Worker {
    std::vector<Entry> batch, finished;
    std::vector<size_t> in_bytes, out_bytes;  // per sample, this run's
    std::vector<Shape> output_shapes;         // dynamic: this run's outputs' sample shapes
    std::vector<ByteBuffer> in_buf, out_buf;
    std::vector<const void*> in_ptrs;
    std::vector<void*> out_ptrs, gathered;
    std::vector<std::shared_ptr<BatchJob>> deliver;
  };

  std::shared_ptr<ServedModel> model;
  BatcherConfig cfg;
  int64_t target = 1;
  std::vector<size_t> in_bytes, out_bytes;  // per sample (dynamic: per element)
  bool dynamic = false;  // dimensions besides the batch vary: each job has its sample shapes

  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<std::deque<Entry>> levels;  // [0] is priority 1
  size_t queued = 0;
  int busy = 0;  // runs in progress: instance threads and inline runs (at most cfg.instances)
  uint64_t next_seq = 0;
  bool stopping = false;
  bool hurry = false;  // run what is queued without waiting for a fuller batch

  // preserve_ordering: finished jobs wait here until every earlier one was delivered.
  std::mutex order_mu;
  std::deque<std::shared_ptr<BatchJob>> reorder;  // [k] holds seq next_deliver + k
  uint64_t next_deliver = 0;
  bool delivering = false;

  std::mutex join_mu;
  std::vector<std::thread> threads;

  // Inline runs: the mean run time (ns; an exponential average, -1 before the first run) and the
  // buffers of the one inline run that may be in progress (it holds a busy slot with nothing else
  // running).
  std::atomic<int64_t> mean_run_ns{-1};
  std::atomic<int64_t> last_end_ns{0};  // when the last run ended (steady clock)
  Worker inline_worker;
  std::atomic<uint64_t> inline_runs{0};
  bool run_inline_locked() const;

  void instance_loop();
  bool take(Worker& w, std::unique_lock<std::mutex>& lk);
  void sizes(Worker& w);
  void run_batch(Worker& w);
  void bind_buffers(Worker& w, int64_t total);
  void gather_inputs(const Worker& w, const std::vector<void*>& dst) const;
  void split_outputs(const Worker& w, const void* const* src, BatchJob& job, size_t offset) const;
  void expire(Entry& e, Clock::time_point now, std::vector<Entry>& finished);
  void complete(Worker& w);
  void stop_and_join();
};

void DynamicBatcher::Impl::instance_loop() {
  Worker w;
  w.in_buf.resize(in_bytes.size());
  w.out_buf.resize(out_bytes.size());
  std::unique_lock lk(mu);
  for (;;) {
    if (!take(w, lk)) return;
    ++busy;
    bool more = queued > 0;
    lk.unlock();
    if (more) cv.notify_one();
    run_batch(w);
    lk.lock();
    --busy;
    if (queued > 0) cv.notify_one();  // a slot is free for a waiting instance
  }
}

// Under `mu`: a job submitted now may run on the submitting thread.
// Only at low load: under a steady stream of requests the runs follow each other closely, and
// an I/O thread that runs the model stops reading the other connections while jobs that would
// have been batched together run one by one. So the model must also have been idle for a while:
// at least twice its mean run and 50 us since the last run ended.
bool DynamicBatcher::Impl::run_inline_locked() const {
  if (cfg.inline_max_us == 0 || cfg.max_queue_delay_us != 0 || queued > 0 || busy > 0 || stopping) return false;
  const int64_t mean = mean_run_ns.load(std::memory_order_relaxed);
  if (mean < 0 || static_cast<uint64_t>(mean) > cfg.inline_max_us * 1000) return false;
  const int64_t idle = ns_since_epoch(Clock::now()) - last_end_ns.load(std::memory_order_relaxed);
  return idle >= std::max<int64_t>(2 * mean, 50'000);
}

// Under `lk`: waits for work, then moves the next batch into w.batch and the expired jobs met
// on the way into w.finished. Returns false when stopping with nothing queued.
bool DynamicBatcher::Impl::take(Worker& w, std::unique_lock<std::mutex>& lk) {
  for (;;) {
    // An inline run may hold the last free slot: wait for it (and for work).
    cv.wait(lk, [&] { return (queued > 0 && busy < cfg.instances) || (stopping && queued == 0); });
    if (queued == 0) return false;
    // Walk the queue in pick order (levels high to low, FIFO within each) to see whether a full
    // batch is there and when the oldest candidate arrived.
    Clock::time_point now = Clock::now(), oldest = Clock::time_point::max();
    int64_t sum = 0;
    bool full = false;
    const std::vector<Shape>* shapes = nullptr;  // the run's signature: its first job's
    auto other = [&](const Entry& e) {
      if (!shapes) shapes = &e.job->shapes;
      return e.job->shapes != *shapes;
    };
    for (auto& level : levels) {
      for (auto& e : level) {
        if (e.job->dropped(now) || other(e)) continue;
        if (sum > 0 && sum + e.job->batch > target) {
          full = true;
          break;
        }
        sum += e.job->batch;
        oldest = std::min(oldest, e.job->enqueued);
        if (sum >= target) {
          full = true;
          break;
        }
      }
      if (full) break;
    }
    bool go = full || sum == 0 || stopping || hurry || cfg.max_queue_delay_us == 0;
    Clock::time_point until = oldest;
    if (!go) {
      until = oldest + std::chrono::microseconds(cfg.max_queue_delay_us);
      go = now >= until;
    }
    if (!go) {
      cv.wait_until(lk, until);
      continue;
    }
    // Pop the same sequence the walk saw; jobs of another signature stay queued.
    sum = 0;
    shapes = nullptr;
    std::vector<Shape> signature;
    for (auto& level : levels) {
      for (auto it = level.begin(); it != level.end();) {
        Entry& e = *it;
        if (e.job->dropped(now)) {
          expire(e, now, w.finished);
        } else if (other(e)) {
          ++it;
          continue;
        } else if (sum > 0 && sum + e.job->batch > target) {
          return true;
        } else {
          if (sum == 0) signature = e.job->shapes, shapes = &signature;  // the entry moves out below
          sum += e.job->batch;
          w.batch.push_back(std::move(e));
        }
        it = level.erase(it);
        --queued;
        if (sum >= target) return true;
      }
    }
    return true;
  }
}

void DynamicBatcher::Impl::expire(Entry& e, Clock::time_point now, std::vector<Entry>& finished) {
  if (e.job->deadline <= now) {
    e.job->status = 504;
    e.job->error = "request timeout expired after " + std::to_string(micros(now - e.job->enqueued)) + " us in the queue";
  } else {
    e.job->status = 499;
    e.job->error = "the client closed the connection before its request ran";
  }
  finished.push_back(std::move(e));
}

// Points w.in_ptrs/w.out_ptrs at the run's buffers: the job's own for a single job, else the
// instance's buffers with every job's inputs copied in, in batch order.
void DynamicBatcher::Impl::bind_buffers(Worker& w, int64_t total) {
  const std::vector<size_t>&in_bytes = w.in_bytes, &out_bytes = w.out_bytes;
  size_t n_in = in_bytes.size(), n_out = out_bytes.size();
  w.in_ptrs.resize(n_in);
  w.out_ptrs.resize(n_out);
  if (w.batch.size() == 1) {
    BatchJob& job = *w.batch[0].job;
    job.outputs.resize(n_out);
    for (size_t i = 0; i < n_in; ++i) w.in_ptrs[i] = job.inputs[i].data();
    for (size_t j = 0; j < n_out; ++j) {
      job.outputs[j].resize(static_cast<size_t>(total) * out_bytes[j]);
      w.out_ptrs[j] = job.outputs[j].data();
    }
    return;
  }
  w.gathered.resize(n_in);
  for (size_t i = 0; i < n_in; ++i) w.gathered[i] = w.in_buf[i].at_least(static_cast<size_t>(total) * in_bytes[i]);
  gather_inputs(w, w.gathered);
  for (size_t i = 0; i < n_in; ++i) w.in_ptrs[i] = w.gathered[i];
  for (size_t j = 0; j < n_out; ++j) w.out_ptrs[j] = w.out_buf[j].at_least(static_cast<size_t>(total) * out_bytes[j]);
}

// This run's bytes per sample: the model's, or (dynamic dimensions) those of its jobs' shapes and
// the output shapes the model gives for them (which may capture the signature's first graph).
void DynamicBatcher::Impl::sizes(Worker& w) {
  if (!dynamic) {
    w.in_bytes = in_bytes;
    w.out_bytes = out_bytes;
    return;
  }
  const std::vector<Shape>& shapes = w.batch[0].job->shapes;
  w.output_shapes = model->output_shapes(shapes);
  w.in_bytes.resize(in_bytes.size());
  w.out_bytes.resize(out_bytes.size());
  for (size_t i = 0; i < in_bytes.size(); ++i) w.in_bytes[i] = in_bytes[i] * static_cast<size_t>(numel(shapes[i]));
  for (size_t j = 0; j < out_bytes.size(); ++j) w.out_bytes[j] = out_bytes[j] * static_cast<size_t>(numel(w.output_shapes[j]));
}

// Copies every job's inputs, in batch order, to dst (one buffer per model input).
void DynamicBatcher::Impl::gather_inputs(const Worker& w, const std::vector<void*>& dst) const {
  for (size_t i = 0; i < w.in_bytes.size(); ++i) {
    std::byte* at = static_cast<std::byte*>(dst[i]);
    for (const auto& e : w.batch) {
      const std::string& src = e.job->inputs[i];
      std::memcpy(at, src.data(), src.size());
      at += src.size();
    }
  }
}

// Copies the job's samples (starting at sample `offset` of the run) out of the run's outputs.
void DynamicBatcher::Impl::split_outputs(const Worker& w, const void* const* src, BatchJob& job, size_t offset) const {
  const std::vector<size_t>& out_bytes = w.out_bytes;
  job.outputs.resize(out_bytes.size());
  for (size_t j = 0; j < out_bytes.size(); ++j) {
    const char* from = static_cast<const char*>(src[j]) + offset * out_bytes[j];
    job.outputs[j].assign(from, static_cast<size_t>(job.batch) * out_bytes[j]);
  }
}

void DynamicBatcher::Impl::run_batch(Worker& w) {
  // Deadlines again: the wait for the lock and the previous run may have taken a while.
  Clock::time_point now = Clock::now();
  int64_t total = 0;
  size_t live = 0;
  for (auto& e : w.batch) {
    if (e.job->dropped(now)) {
      expire(e, now, w.finished);
    } else {
      total += e.job->batch;
      if (&w.batch[live] != &e) w.batch[live] = std::move(e);
      ++live;
    }
  }
  w.batch.resize(live);
  if (live == 0) {
    complete(w);
    return;
  }

  int status = 200;
  std::string error;
  Clock::time_point start = Clock::now();  // compute includes the input copy, as Triton's does
  bool staged = false;  // the outputs were split inside the run (several jobs, one copy each way)
  try {
    sizes(w);
    const std::vector<Shape>& shapes = w.batch[0].job->shapes;
    size_t offset = 0;
    staged = w.batch.size() > 1 &&
             model->run_staged(
                 total, [&](const std::vector<void*>& in) { gather_inputs(w, in); },
                 [&](const std::vector<const void*>& out) {
                   for (auto& e : w.batch) {
                     split_outputs(w, out.data(), *e.job, offset);
                     offset += static_cast<size_t>(e.job->batch);
                   }
                 },
                 shapes);
    if (!staged) {
      bind_buffers(w, total);
      model->run(w.in_ptrs, total, w.out_ptrs, shapes);
    }
  } catch (const std::exception& e) {
    status = http_status(e);
    error = e.what();
  } catch (...) {
    status = 500;
    error = "model run failed with an unknown exception";
  }
  Clock::time_point end = Clock::now();
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
  const int64_t mean = mean_run_ns.load(std::memory_order_relaxed);  // races only blur the average
  mean_run_ns.store(mean < 0 ? ns : mean + (ns - mean) / 8, std::memory_order_relaxed);
  last_end_ns.store(ns_since_epoch(end), std::memory_order_relaxed);

  size_t offset_samples = 0;
  for (auto& e : w.batch) {
    BatchJob& job = *e.job;
    job.status = status;
    job.error = error;
    job.compute_start = start;
    job.compute_end = end;
    job.executed_batch = total;
    try {
      if (status == 200 && w.batch.size() > 1 && !staged) split_outputs(w, w.out_ptrs.data(), job, offset_samples);
      if (status == 200 && dynamic) job.output_shapes = w.output_shapes;
    } catch (const std::exception& x) {  // allocating the job's outputs
      job.status = http_status(x);
      job.error = std::string("splitting the batch's outputs: ") + x.what();
    }
    if (job.status != 200) job.outputs.clear();
    offset_samples += static_cast<size_t>(job.batch);
  }
  w.finished.insert(w.finished.end(), std::make_move_iterator(w.batch.begin()), std::make_move_iterator(w.batch.end()));
  w.batch.clear();
  // Recorded before the answers go out: a client that reads the statistics after its answer
  // sees the run that produced it.
  if (cfg.on_batch) {
    try {
      cfg.on_batch(total, end - start);
    } catch (...) {
      // on_batch must not throw (metrics); the instance keeps serving.
    }
  }
  complete(w);
}

// Calls done() of every job in w.finished (in submission order across instances when asked),
// outside `mu`.
void DynamicBatcher::Impl::complete(Worker& w) {
  if (!cfg.preserve_ordering) {
    for (auto& e : w.finished) call_done(*e.job);
    w.finished.clear();
    return;
  }
  {
    std::lock_guard lk(order_mu);
    for (auto& e : w.finished) {
      size_t k = static_cast<size_t>(e.seq - next_deliver);
      if (k >= reorder.size()) reorder.resize(k + 1);
      reorder[k] = std::move(e.job);
    }
    w.finished.clear();
    if (delivering) return;  // the delivering thread picks these up
    delivering = true;
  }
  for (;;) {
    {
      std::lock_guard lk(order_mu);
      while (!reorder.empty() && reorder.front()) {
        w.deliver.push_back(std::move(reorder.front()));
        reorder.pop_front();
        ++next_deliver;
      }
      if (w.deliver.empty()) {
        delivering = false;
        return;
      }
    }
    for (auto& job : w.deliver) call_done(*job);
    w.deliver.clear();
  }
}

void DynamicBatcher::Impl::stop_and_join() {
  {
    std::lock_guard lk(mu);
    stopping = true;
  }
  cv.notify_all();
  std::lock_guard lk(join_mu);
  for (auto& t : threads)
    if (t.joinable()) t.join();
  threads.clear();
  std::unique_lock wait_lk(mu);  // an inline run still in progress uses the batcher
  cv.wait(wait_lk, [&] { return busy == 0; });
}

DynamicBatcher::DynamicBatcher(std::shared_ptr<ServedModel> model, BatcherConfig cfg) : impl_(std::make_unique<Impl>()) {
  if (!model) throw InvalidArgument("dynamic batcher: no model");
  if (cfg.instances < 1) throw InvalidArgument("dynamic batcher: instances must be >= 1, got " + std::to_string(cfg.instances));
  if (cfg.priority_levels < 1)
    throw InvalidArgument("dynamic batcher: priority_levels must be >= 1, got " + std::to_string(cfg.priority_levels));
  if (cfg.default_priority_level < 1 || cfg.default_priority_level > cfg.priority_levels)
    throw InvalidArgument("dynamic batcher: default_priority_level " + std::to_string(cfg.default_priority_level) +
                          " is outside 1.." + std::to_string(cfg.priority_levels));
  if (cfg.max_batch_size < 0)
    throw InvalidArgument("dynamic batcher: max_batch_size must be >= 0, got " + std::to_string(cfg.max_batch_size));
  if (cfg.max_queue_delay_us > kMaxQueueDelayUs)
    throw InvalidArgument("dynamic batcher: max_queue_delay_us " + std::to_string(cfg.max_queue_delay_us) +
                          " is above one hour (" + std::to_string(kMaxQueueDelayUs) + ")");
  Impl& m = *impl_;
  const models::PackageSpec& spec = model->spec();
  for (size_t i = 0; i < spec.inputs.size(); ++i) m.dynamic |= model->input_size(i) < 0;
  for (size_t i = 0; i < spec.inputs.size(); ++i)
    m.in_bytes.push_back((m.dynamic ? 1 : static_cast<size_t>(model->input_size(i))) * element_bytes(spec.inputs[i], "input"));
  for (size_t j = 0; j < spec.outputs.size(); ++j)
    m.out_bytes.push_back((m.dynamic ? 1 : static_cast<size_t>(model->output_size(j))) * element_bytes(spec.outputs[j], "output"));

  std::vector<int64_t> buckets = model->buckets();
  if (cfg.max_batch_size == 0) {
    m.target = buckets.empty() ? 1 : *std::max_element(buckets.begin(), buckets.end());
  } else {
    m.target = cfg.max_batch_size;
    int64_t best = 0;
    for (int64_t b : buckets)
      if (b <= cfg.max_batch_size) best = std::max(best, b);
    if (best > 0) m.target = best;
  }
  m.model = std::move(model);
  m.levels.resize(static_cast<size_t>(cfg.priority_levels));
  m.inline_worker.in_buf.resize(m.in_bytes.size());
  m.inline_worker.out_buf.resize(m.out_bytes.size());
  m.cfg = std::move(cfg);
  try {
    for (int i = 0; i < m.cfg.instances; ++i) m.threads.emplace_back([&m] { m.instance_loop(); });
  } catch (...) {
    m.stop_and_join();
    throw;
  }
}

DynamicBatcher::~DynamicBatcher() { drain(); }

DynamicBatcher::Submit DynamicBatcher::submit(std::shared_ptr<BatchJob> job) {
  Impl& m = *impl_;
  if (!job) throw InvalidArgument("dynamic batcher: null job");
  if (job->batch < 1) throw InvalidArgument("batch size must be >= 1, got " + std::to_string(job->batch));
  const models::PackageSpec& spec = m.model->spec();
  if (job->inputs.size() != m.in_bytes.size())
    throw InvalidArgument("model '" + spec.name + "' expects " + std::to_string(m.in_bytes.size()) + " inputs, got " +
                          std::to_string(job->inputs.size()));
  if (m.dynamic != !job->shapes.empty() || (m.dynamic && job->shapes.size() != m.in_bytes.size()))
    throw InvalidArgument(m.dynamic ? "model '" + spec.name + "' has dynamic dimensions: the job must give the sample shape of each of its " +
                                          std::to_string(m.in_bytes.size()) + " inputs"
                                    : "model '" + spec.name + "' has fixed shapes: the job gives sample shapes");
  for (size_t i = 0; i < m.in_bytes.size(); ++i) {
    const int64_t elements = m.dynamic ? sample_elements(job->shapes[i]) : 1;
    if (elements < 0)
      throw InvalidArgument("input '" + spec.inputs[i].name + "': sample shape " + shape_str(job->shapes[i]) +
                            " has a negative dimension or more than 2^40 elements");
    size_t have = job->inputs[i].size(), per = m.in_bytes[i] * static_cast<size_t>(elements);
    bool ok = per == 0 ? have == 0 : have % per == 0 && have / per == static_cast<uint64_t>(job->batch);
    if (!ok)
      throw InvalidArgument("input '" + spec.inputs[i].name + "': " + std::to_string(have) + " bytes for batch " +
                            std::to_string(job->batch) + ", expected " + std::to_string(per) + " bytes per sample");
  }
  int level = job->priority >= 1 && job->priority <= m.cfg.priority_levels ? job->priority : m.cfg.default_priority_level;
  job->status = 0;
  job->error.clear();
  job->outputs.clear();
  job->executed_batch = 0;
  bool run_here = false;
  {
    std::lock_guard lk(m.mu);
    if (m.stopping) return Submit::Stopped;
    if (m.cfg.max_queue_size > 0 && m.queued >= m.cfg.max_queue_size) return Submit::QueueFull;
    job->enqueued = Clock::now();
    run_here = m.run_inline_locked();
    if (run_here) {
      ++m.busy;  // the one run in progress: no instance runs and no other job goes inline meanwhile
      m.inline_worker.batch.push_back(Entry{std::move(job), m.next_seq++});
    } else {
      m.levels[static_cast<size_t>(level - 1)].push_back(Entry{std::move(job), m.next_seq++});
      ++m.queued;
    }
  }
  if (!run_here) {
    m.cv.notify_one();
    return Submit::Queued;
  }
  m.run_batch(m.inline_worker);  // answers the job (done) on this thread
  m.inline_runs.fetch_add(1, std::memory_order_relaxed);
  bool wake = false;
  {
    std::lock_guard lk(m.mu);
    --m.busy;
    wake = m.queued > 0 || m.stopping;
  }
  if (wake) m.cv.notify_all();  // instances waiting for the slot, or a drain waiting for the run
  return Submit::Queued;
}

void DynamicBatcher::drain() { impl_->stop_and_join(); }

void DynamicBatcher::hurry() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->hurry = true;
  }
  impl_->cv.notify_all();
}

uint64_t DynamicBatcher::inline_runs() const { return impl_->inline_runs.load(std::memory_order_relaxed); }

size_t DynamicBatcher::queue_depth() const {
  std::lock_guard lk(impl_->mu);
  return impl_->queued;
}

const BatcherConfig& DynamicBatcher::config() const { return impl_->cfg; }

int64_t DynamicBatcher::target_batch() const { return impl_->target; }

}  // namespace hg::server
