// The DataLoader: batches of sampler-ordered indices, made on the calling thread or as oneTBB
// tasks on num_workers threads, and handed out strictly in order.
#include "training/dataloader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <oneapi/tbb/task_group.h>
#include <optional>
#include <string>

#include "engine/error.h"
#include "engine/host_arena.h"

namespace hg::training {

// With workers, each batch is one task in a HostArena of num_workers threads. The consumer keeps
// at most `ahead` (num_workers * prefetch_factor) batches launched and not yet handed out: batch
// k is launched only once batch k - ahead has been handed out, so its result slot (k % ahead) is
// free. A task makes its batch and never waits for anything, so an epoch whose consumer has
// stopped taking batches (the Trainer validating mid-epoch) holds no thread: another loader's
// tasks, in their own arena, always find one.
struct DataLoader::Epoch::State {
  std::shared_ptr<const Dataset> data;
  std::vector<std::vector<int64_t>> batches;  // the indices of each batch, in order
  BatchTransform transform;
  int64_t epoch = 0;
  size_t delivered = 0;                       // the next batch next() hands out

  struct Result {
    Batch batch;
    std::exception_ptr error;
  };
  std::unique_ptr<HostArena> arena;  // null: batches are made by next()
  tbb::task_group group;
  size_t launched = 0;                     // batches [0, launched) have a task
  std::vector<std::optional<Result>> made;  // batch k's result waits in made[k % made.size()]
  std::mutex mu;
  std::condition_variable done;
  std::atomic<bool> stop{false};

  Batch make_batch(size_t k) const {
    Batch b = data->get_batch(batches[k]);
    if (transform) transform(b, batches[k], epoch);
    return b;
  }

  void start(int workers, size_t ahead) {
    made.resize(ahead);
    arena = std::make_unique<HostArena>(workers);
    launch();
  }

  // Consumer side: tasks for the batches up to `ahead` past the next one handed out.
  void launch() {
    while (launched < batches.size() && launched < delivered + made.size()) {
      const size_t k = launched++;
      (*arena)->enqueue(group.defer([this, k] { make(k); }));
    }
  }

  void make(size_t k) {
    Result r;
    if (!stop) {
      try {
        r.batch = make_batch(k);
      } catch (...) {
        r.error = std::current_exception();
      }
    }
    {
      std::lock_guard lock(mu);
      made[k % made.size()] = std::move(r);
    }
    done.notify_all();
  }

  Result take() {
    std::optional<Result>& slot = made[delivered % made.size()];
    Result r;
    {
      std::unique_lock lock(mu);
      done.wait(lock, [&] { return slot.has_value(); });  // its task is launched and runs to the end
      r = std::move(*slot);
      slot.reset();
    }
    ++delivered;
    launch();
    return r;
  }

  ~State() {
    if (!arena) return;
    stop = true;  // tasks not yet started return at once
    (*arena)->execute([this] { group.wait(); });
  }
};

DataLoader::Epoch::Epoch(std::unique_ptr<State> s) : s_(std::move(s)) {}
DataLoader::Epoch::Epoch(Epoch&&) noexcept = default;
DataLoader::Epoch::~Epoch() = default;

std::optional<Batch> DataLoader::Epoch::next() {
  State& s = *s_;
  if (s.delivered >= s.batches.size()) return std::nullopt;
  if (!s.arena) return s.make_batch(s.delivered++);
  State::Result r = s.take();
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
  s->transform = opt_.transform;
  s->epoch = epoch_index;
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
