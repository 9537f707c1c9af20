// Datasets, samplers and the DataLoader (torch.utils.data's model): a Dataset returns one
// example as a list of tensors, a Sampler orders the indices of an epoch, and the DataLoader
// collates them into batches (stacking along a new dim 0), on `num_workers` background threads
// (one oneTBB task per batch) that keep up to num_workers * prefetch_factor batches ready,
// always in sampler order.
//
//   auto digits = hg::training::load_digits(HG_SOURCE_DIR "/models/data/digits.safetensors");
//   auto [train, val] = hg::training::random_split(digits, 0.2, /*seed=*/0);
//   hg::training::DataLoader loader(train, {.batch_size = 32, .shuffle = true, .seed = 0,
//                                           .num_workers = 2});
//   auto it = loader.epoch(/*epoch=*/3);          // a new shuffle per epoch, seeded by seed + epoch
//   while (auto b = it.next()) { (*b)[0]; (*b)[1]; }   // x F32 [32, 64] (cpu), y I64 [32]
//   auto sharded = loader.with_sampler(std::make_shared<hg::training::DistributedSampler>(
//       train->size(), /*num_replicas=*/2, /*rank=*/1, hg::training::DistributedSamplerOptions{}));
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace hg::training {

using Batch = std::vector<Tensor>;  // collated: by convention [0] inputs, [1] targets

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // One example (host tensors without the batch dim). Throws hg::InvalidArgument on a bad index.
  virtual std::vector<Tensor> get(int64_t index) const = 0;
  // The examples stacked along a new dim 0. Default: get() each and stack; datasets holding
  // contiguous rows override it with one copy per row.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
};

// Tensors sharing dim 0 (torch.utils.data.TensorDataset); example i is row i of each.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);  // host tensors, equal dim 0 (checked)
  int64_t size() const override;
  std::vector<Tensor> get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
};

// A view of some rows of another dataset (torch.utils.data.Subset).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  std::vector<Tensor> get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

// The 8x8 digits (models/data/digits.safetensors: U8 images [N, 64] 0..16, U8 labels [N]),
// validated (shapes, dtypes, ranges) and scaled to [0, 1]: examples {x F32 [64], y I64 []}.
// image_size 32 gives LeNet's input instead: x F32 [1, 32, 32], each pixel repeated 4x4.
std::shared_ptr<TensorDataset> load_digits(const std::filesystem::path& file, int64_t image_size = 8);
// Shuffles with `seed` and holds out `holdout_fraction` of the examples: {train, held out}.
std::pair<std::shared_ptr<Subset>, std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> d,
                                                                       double holdout_fraction, uint64_t seed);

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;  // deterministic per epoch
  virtual int64_t size() const = 0;                               // indices(e).size() for every e
};

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A permutation drawn from (seed, epoch): the same on every run and every process.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // false: pad by repeating the first indices to a multiple of replicas
};

// torch.utils.data.DistributedSampler: permutation from seed + epoch (the same on every
// rank), padded or trimmed to a multiple of num_replicas, then rank r takes every
// num_replicas-th index starting at r.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, DistributedSamplerOptions opt = {});
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return per_rank_; }

 private:
  int64_t n_, per_rank_;
  int replicas_, rank_;
  DistributedSamplerOptions opt_;
};

// Changes a batch in place after it is made (on the worker that made it): `indices` are the
// dataset indices of its rows, `epoch` the loader's epoch (training/augment.h's ImageAugment).
using BatchTransform = std::function<void(Batch& batch, const std::vector<int64_t>& indices, int64_t epoch)>;

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;   // RandomSampler(seed) when no sampler is given, else SequentialSampler
  bool drop_last = false; // drop the last incomplete batch
  uint64_t seed = 0;
  int num_workers = 0;    // 0: batches are made on the calling thread
  int prefetch_factor = 2;
  BatchTransform transform{};  // empty: none
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> data, DataLoaderOptions opt, std::shared_ptr<const Sampler> sampler = nullptr);
  // One pass. Owns its workers: destroying it, also mid-epoch, stops them and waits only for
  // the batches being made; an exception in a worker is rethrown by next() for the batch it was
  // making.
  class Epoch {
   public:
    std::optional<Batch> next();
    ~Epoch();
    Epoch(Epoch&&) noexcept;
    Epoch& operator=(Epoch&&) = delete;
    struct State;

   private:
    friend class DataLoader;
    explicit Epoch(std::unique_ptr<State> s);
    std::unique_ptr<State> s_;
  };
  Epoch epoch(int64_t epoch_index) const;
  int64_t num_batches() const;  // len(loader)
  // The same dataset and options over another sampler (the Trainer's DistributedSampler).
  DataLoader with_sampler(std::shared_ptr<const Sampler> sampler) const;
  const DataLoaderOptions& options() const { return opt_; }
  const std::shared_ptr<const Dataset>& dataset() const { return data_; }
  const std::shared_ptr<const Sampler>& sampler() const { return sampler_; }

 private:
  std::shared_ptr<const Dataset> data_;
  DataLoaderOptions opt_;
  std::shared_ptr<const Sampler> sampler_;
};

}  // namespace hg::training
