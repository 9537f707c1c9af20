// Samplers: sequential, seeded random permutations and torch's DistributedSampler.
#include <numeric>
#include <random>
#include <string>

#include "engine/error.h"
#include "training/dataloader.h"

namespace hg::training {

namespace {

// Fisher-Yates over mt19937_64 with an exact (rejection) uniform draw: the same permutation
// for the same (n, seed) on every platform and in every process.
std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t range = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % range;  // draws >= limit would bias
    uint64_t r;
    do r = rng(); while (r >= limit);
    std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(r % range)]);
  }
  return idx;
}

void check_size(const char* what, int64_t n) {
  if (n < 0) throw InvalidArgument(std::string(what) + ": negative dataset size " + std::to_string(n));
}

}  // namespace

SequentialSampler::SequentialSampler(int64_t n) : n_(n) { check_size("SequentialSampler", n); }

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> idx(static_cast<size_t>(n_));
  std::iota(idx.begin(), idx.end(), 0);
  return idx;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) { check_size("RandomSampler", n); }

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return permutation(n_, seed_ + static_cast<uint64_t>(epoch));
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank, DistributedSamplerOptions opt)
    : n_(dataset_size), replicas_(num_replicas), rank_(rank), opt_(opt) {
  check_size("DistributedSampler", dataset_size);
  if (num_replicas < 1)
    throw InvalidArgument("DistributedSampler: num_replicas must be >= 1, got " + std::to_string(num_replicas));
  if (rank < 0 || rank >= num_replicas)
    throw InvalidArgument("DistributedSampler: rank " + std::to_string(rank) + " is not in [0, " +
                          std::to_string(num_replicas) + ")");
  // torch: drop_last with a remainder rounds down, otherwise up (padding).
  per_rank_ = opt.drop_last ? n_ / replicas_ : (n_ + replicas_ - 1) / replicas_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all;
  if (opt_.shuffle) {
    all = permutation(n_, opt_.seed + static_cast<uint64_t>(epoch));
  } else {
    all.resize(static_cast<size_t>(n_));
    std::iota(all.begin(), all.end(), 0);
  }
  const auto total = static_cast<size_t>(per_rank_ * replicas_);
  if (total < all.size()) {
    all.resize(total);
  } else if (n_ > 0) {
    for (size_t k = 0; all.size() < total; ++k) all.push_back(all[k]);  // repeats the head, cyclically
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (size_t k = static_cast<size_t>(rank_); k < all.size(); k += static_cast<size_t>(replicas_)) mine.push_back(all[k]);
  return mine;
}

}  // namespace hg::training
