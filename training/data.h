// In-memory classification data and a shuffling batch loader.
//
//   auto all = hg::training::load_digits(HG_SOURCE_DIR "/models/data/digits.safetensors");
//   auto [train, test] = hg::training::split(all, 0.2, /*seed=*/0);   // 1437 / 360
//   hg::training::DataLoader loader(train, /*batch=*/32, /*shuffle=*/true, /*seed=*/0);
//   for (const auto& b : loader.epoch(0)) { b.x; b.y; }   // x F32 [B, 64] (cpu), y I64 [B]
#pragma once
#include <cstdint>
#include <filesystem>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace hg::training {

struct Dataset {
  std::vector<float> features;  // row-major [size, width]
  std::vector<int64_t> labels;
  int64_t width = 0;
  int64_t num_classes = 0;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

// The 8x8 digits (models/data/digits.safetensors: U8 images [N, 64] 0..16, U8 labels [N]),
// scaled to [0, 1]. Validates shapes, dtypes and value ranges.
Dataset load_digits(const std::filesystem::path& file);
// Shuffles with `seed` and holds out `test_fraction` of the rows.
std::pair<Dataset, Dataset> split(const Dataset& d, double test_fraction, uint64_t seed);

struct Batch {
  Tensor x, y;
};

class DataLoader {
 public:
  DataLoader(const Dataset& d, int64_t batch_size, bool shuffle, uint64_t seed);
  std::vector<Batch> epoch(int64_t epoch_index) const;  // a new order per epoch when shuffling
  int64_t num_batches() const { return (data_.size() + batch_ - 1) / batch_; }
  const Dataset& dataset() const { return data_; }

 private:
  Dataset data_;
  int64_t batch_;
  bool shuffle_;
  uint64_t seed_;
};

}  // namespace hg::training
