#include "training/data.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "engine/error.h"
#include "models/safetensors.h"

namespace hg::training {

namespace {
std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(idx.begin(), idx.end(), rng);
  return idx;
}

Dataset take(const Dataset& d, const std::vector<int64_t>& rows) {
  Dataset r;
  r.width = d.width;
  r.num_classes = d.num_classes;
  for (int64_t i : rows) {
    r.features.insert(r.features.end(), d.features.begin() + i * d.width, d.features.begin() + (i + 1) * d.width);
    r.labels.push_back(d.labels[i]);
  }
  return r;
}
}  // namespace

Dataset load_digits(const std::filesystem::path& file) {
  const auto f = safetensors::read(file);
  const auto* images = f.find("images");
  const auto* labels = f.find("labels");
  const std::string src = file.string();
  if (!images || !labels) throw FormatError(src + ": expected tensors 'images' and 'labels'");
  if (images->dtype != "U8" || labels->dtype != "U8") throw FormatError(src + ": 'images' and 'labels' must be U8");
  if (images->shape.size() != 2 || labels->shape.size() != 1 || images->shape[0] != labels->shape[0])
    throw FormatError(src + ": 'images' must be [N, W] and 'labels' [N]");
  Dataset d;
  d.width = images->shape[1];
  for (size_t i = 0; i < images->data.size(); ++i) {
    if (images->data[i] > 16) throw FormatError(src + ": 'images' element " + std::to_string(i) + " is above 16");
    d.features.push_back(images->data[i] / 16.0f);
  }
  for (size_t i = 0; i < labels->data.size(); ++i) {
    if (labels->data[i] > 9) throw FormatError(src + ": 'labels' element " + std::to_string(i) + " is not a digit");
    d.labels.push_back(labels->data[i]);
  }
  d.num_classes = 10;
  return d;
}

std::pair<Dataset, Dataset> split(const Dataset& d, double test_fraction, uint64_t seed) {
  if (test_fraction <= 0 || test_fraction >= 1) throw InvalidArgument("split: test_fraction must be in (0, 1)");
  const auto idx = permutation(d.size(), seed);
  const auto n_test = static_cast<int64_t>(static_cast<double>(d.size()) * test_fraction);
  std::vector<int64_t> test(idx.begin(), idx.begin() + n_test), train(idx.begin() + n_test, idx.end());
  return {take(d, train), take(d, test)};
}

DataLoader::DataLoader(const Dataset& d, int64_t batch_size, bool shuffle, uint64_t seed)
    : data_(d), batch_(batch_size), shuffle_(shuffle), seed_(seed) {
  if (batch_size <= 0) throw InvalidArgument("DataLoader: batch_size must be positive");
  if (d.size() == 0) throw InvalidArgument("DataLoader: the data set is empty");
}

std::vector<Batch> DataLoader::epoch(int64_t e) const {
  std::vector<int64_t> idx(static_cast<size_t>(data_.size()));
  if (shuffle_) idx = permutation(data_.size(), seed_ + static_cast<uint64_t>(e) * 1000003u);
  else std::iota(idx.begin(), idx.end(), 0);
  std::vector<Batch> r;
  for (int64_t s = 0; s < data_.size(); s += batch_) {
    const int64_t n = std::min(batch_, data_.size() - s);
    std::vector<float> x;
    std::vector<int64_t> y;
    for (int64_t k = s; k < s + n; ++k) {
      const int64_t i = idx[k];
      x.insert(x.end(), data_.features.begin() + i * data_.width, data_.features.begin() + (i + 1) * data_.width);
      y.push_back(data_.labels[i]);
    }
    r.push_back({Tensor::from_vector(x, {n, data_.width}), Tensor::from_indices(y, {n})});
  }
  return r;
}

}  // namespace hg::training
