// The DataLoader: batches of sampler-ordered indices, made on the calling thread or by a oneTBB
// pipeline of num_workers threads and handed out strictly in order.
#include "training/dataloader.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <oneapi/tbb/concurrent_queue.h>
#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_group.h>
#include <string>

#include "engine/error.h"
#include "engine/host_arena.h"

namespace hg::training {

// With workers, one parallel_pipeline per epoch runs in a HostArena of num_workers threads:
// claim the next batch (serial, in order) -> make it (parallel) -> deliver it (serial, in order)
// into `ready`, a bounded queue that next() pops. At most `tokens` batches are in the pipeline
// and `ready` holds at most its capacity, so no more than num_workers * prefetch_factor batches
// are made ahead of the consumer (num_workers + 1 when prefetch_factor is 1: one finished batch
// waits for room). Delivering blocks while `ready` is full: that waits in the epoch's own arena.
struct DataLoader::Epoch::State {
  std::shared_ptr<const Dataset> data;
  std::vector<std::vector<int64_t>> batches;  // the indices of each batch, in order
  size_t delivered = 0;                       // the next batch next() hands out

  struct Result {
    Batch batch;
    std::exception_ptr error;
    bool ends_epoch = false;  // the pipeline itself failed: no batch follows
  };
  std::unique_ptr<HostArena> arena;  // null: batches are made by next()
  tbb::task_group group;
  tbb::concurrent_bounded_queue<Result> ready;
  std::atomic<bool> stop{false};

  void start(int workers, size_t capacity) {
    const auto tokens = static_cast<size_t>(workers);
    ready.set_capacity(static_cast<std::ptrdiff_t>(std::max<size_t>(1, capacity - tokens)));
    arena = std::make_unique<HostArena>(workers);
    (*arena)->enqueue(group.defer([this, tokens] {
      try {
        run(tokens);
      } catch (...) {  // not a batch's error (those travel in their Result): end the epoch with it
        deliver(Result{{}, std::current_exception(), true});
      }
    }));
  }

  void run(size_t tokens) {
    size_t claimed = 0;
    tbb::parallel_pipeline(
        tokens,
        tbb::make_filter<void, size_t>(tbb::filter_mode::serial_in_order,
                                       [&](tbb::flow_control& fc) -> size_t {
                                         if (stop || claimed >= batches.size()) fc.stop();
                                         return claimed++;
                                       }) &
            tbb::make_filter<size_t, Result>(tbb::filter_mode::parallel,
                                             [this](size_t k) {
                                               Result r;
                                               if (stop) return r;
                                               try {
                                                 r.batch = data->get_batch(batches[k]);
                                               } catch (...) {
                                                 r.error = std::current_exception();
                                               }
                                               return r;
                                             }) &
            tbb::make_filter<Result, void>(tbb::filter_mode::serial_in_order,
                                           [this](Result r) { deliver(std::move(r)); }));
  }

  // Blocks while `ready` is full; after stop, returns at once (see ~State).
  void deliver(Result&& r) {
    if (stop) return;
    try {
      ready.push(std::move(r));
    } catch (const tbb::user_abort&) {  // ~State aborted the wait
    }
  }

  ~State() {
    if (!arena) return;
    stop = true;
    ready.abort();  // wakes a deliver() waiting for room
    // A deliver() that passed its stop check just before may still push: make room for it. Only
    // one can (they run one at a time, and every later one sees `stop`).
    Result dropped;
    while (ready.try_pop(dropped)) {
    }
    (*arena)->execute([this] { group.wait(); });
  }
};

DataLoader::Epoch::Epoch(std::unique_ptr<State> s) : s_(std::move(s)) {}
DataLoader::Epoch::Epoch(Epoch&&) noexcept = default;
DataLoader::Epoch::~Epoch() = default;

std::optional<Batch> DataLoader::Epoch::next() {
  State& s = *s_;
  if (s.delivered >= s.batches.size()) return std::nullopt;
  if (!s.arena) return s.data->get_batch(s.batches[s.delivered++]);
  State::Result r;
  s.ready.pop(r);  // the pipeline delivers every batch of the epoch (or ends it with an error)
  s.delivered = r.ends_epoch ? s.batches.size() : s.delivered + 1;
  if (r.error) std::rethrow_exception(r.error);
  return std::move(r.batch);
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> data, DataLoaderOptions opt, std::shared_ptr<const Sampler> sampler)
    : data_(std::move(data)), opt_(opt), sampler_(std::move(sampler)) {
  if (!data_) throw InvalidArgument("DataLoader: no dataset");
  if (opt_.batch_size < 1)
    throw InvalidArgument("DataLoader: batch_size must be >= 1, got " + std::to_string(opt_.batch_size));
  if (opt_.num_workers < 0)
    throw InvalidArgument("DataLoader: num_workers must be >= 0, got " + std::to_string(opt_.num_workers));
  if (opt_.prefetch_factor < 1)
    throw InvalidArgument("DataLoader: prefetch_factor must be >= 1, got " + std::to_string(opt_.prefetch_factor));
  if (!sampler_) {
    if (opt_.shuffle) sampler_ = std::make_shared<RandomSampler>(data_->size(), opt_.seed);
    else sampler_ = std::make_shared<SequentialSampler>(data_->size());
  }
}

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_->size();
  return opt_.drop_last ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
}

DataLoader::Epoch DataLoader::epoch(int64_t epoch_index) const {
  auto s = std::make_unique<Epoch::State>();
  s->data = data_;
  const auto idx = sampler_->indices(epoch_index);
  const auto bs = static_cast<size_t>(opt_.batch_size);
  for (size_t b = 0; b < idx.size(); b += bs) {
    if (opt_.drop_last && b + bs > idx.size()) break;
    s->batches.emplace_back(idx.begin() + static_cast<std::ptrdiff_t>(b),
                            idx.begin() + static_cast<std::ptrdiff_t>(std::min(b + bs, idx.size())));
  }
  const auto workers = static_cast<int>(std::min(static_cast<size_t>(opt_.num_workers), s->batches.size()));
  if (workers > 0) s->start(workers, static_cast<size_t>(opt_.num_workers) * static_cast<size_t>(opt_.prefetch_factor));
  return Epoch(std::move(s));
}

DataLoader DataLoader::with_sampler(std::shared_ptr<const Sampler> sampler) const {
  if (!sampler) throw InvalidArgument("DataLoader::with_sampler: no sampler");
  return DataLoader(data_, opt_, std::move(sampler));
}

}  // namespace hg::training
