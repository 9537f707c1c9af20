// The DataLoader: batches of sampler-ordered indices, made on the calling thread or prefetched
// by worker threads and handed out strictly in order.
#include "training/dataloader.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "engine/error.h"

namespace hg::training {

struct DataLoader::Epoch::State {
  std::shared_ptr<const Dataset> data;
  std::vector<std::vector<int64_t>> batches;  // the indices of each batch, in order
  size_t capacity = 0;                        // batches made ahead of the consumer, at most

  std::mutex mu;
  std::condition_variable ready;  // a batch was finished
  std::condition_variable room;   // the consumer took one, or stop
  size_t claimed = 0;             // the next batch a worker will make
  size_t delivered = 0;           // the next batch next() hands out
  bool stop = false;
  struct Result {
    Batch batch;
    std::exception_ptr error;
  };
  std::map<size_t, Result> done;
  std::vector<std::thread> workers;

  void work() {
    std::unique_lock lock(mu);
    for (;;) {
      room.wait(lock, [&] { return stop || claimed >= batches.size() || claimed < delivered + capacity; });
      if (stop || claimed >= batches.size()) return;
      const size_t k = claimed++;
      lock.unlock();
      Result r;
      try {
        r.batch = data->get_batch(batches[k]);
      } catch (...) {
        r.error = std::current_exception();
      }
      lock.lock();
      done.emplace(k, std::move(r));
      ready.notify_all();
    }
  }

  ~State() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    room.notify_all();
    for (auto& w : workers) w.join();
  }
};

DataLoader::Epoch::Epoch(std::unique_ptr<State> s) : s_(std::move(s)) {}
DataLoader::Epoch::Epoch(Epoch&&) noexcept = default;
DataLoader::Epoch::~Epoch() = default;

std::optional<Batch> DataLoader::Epoch::next() {
  State& s = *s_;
  if (s.delivered >= s.batches.size()) return std::nullopt;
  if (s.workers.empty()) return s.data->get_batch(s.batches[s.delivered++]);
  std::unique_lock lock(s.mu);
  s.ready.wait(lock, [&] { return s.done.count(s.delivered) > 0; });
  auto node = s.done.extract(s.delivered);
  ++s.delivered;
  lock.unlock();
  s.room.notify_all();
  if (node.mapped().error) std::rethrow_exception(node.mapped().error);
  return std::move(node.mapped().batch);
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
  s->capacity = static_cast<size_t>(opt_.num_workers) * static_cast<size_t>(opt_.prefetch_factor);
  const size_t threads = std::min(static_cast<size_t>(opt_.num_workers), s->batches.size());
  for (size_t w = 0; w < threads; ++w) s->workers.emplace_back([st = s.get()] { st->work(); });
  return Epoch(std::move(s));
}

DataLoader DataLoader::with_sampler(std::shared_ptr<const Sampler> sampler) const {
  if (!sampler) throw InvalidArgument("DataLoader::with_sampler: no sampler");
  return DataLoader(data_, opt_, std::move(sampler));
}

}  // namespace hg::training
