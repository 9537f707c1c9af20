// Batch buckets: the batch sizes a model is captured at. A batch is padded to the smallest
// bucket that holds it (models/predictor.h strips the padding from the outputs).
//
//   auto b = hg::models::linear_buckets(8, 64, 8);       // 8, 16, 24, ..., 64
//   auto e = hg::models::exponential_buckets(1, 48);     // 1, 2, 4, 8, 16, 32, 48
//   auto p = hg::models::parse_buckets("exp:1:64");      // also "linear:1:8:1", "1,2,4,8"
//   std::optional<int64_t> fit = hg::models::pick_bucket(p, 5);   // 8; nullopt above 64
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace hg::models {

// The most buckets a list may hold (each is a captured graph).
inline constexpr size_t kMaxBuckets = 4096;

// start, start + step, ... while <= max, and max itself when the steps miss it.
std::vector<int64_t> linear_buckets(int64_t start, int64_t max, int64_t step = 1);
// min, then every power of two above min and below max, then max.
std::vector<int64_t> exponential_buckets(int64_t min, int64_t max);
// Sorted, duplicates removed; throws InvalidArgument on an empty list or a value < 1.
std::vector<int64_t> normalize_buckets(std::vector<int64_t> buckets);
// "1,2,4,8" (explicit), "linear:START:MAX[:STEP]" (STEP defaults to 1) or "exp:MIN:MAX".
// Throws InvalidArgument naming the bad part.
std::vector<int64_t> parse_buckets(std::string_view spec);
// The smallest bucket >= batch in an ascending list; nullopt when batch exceeds them all.
std::optional<int64_t> pick_bucket(const std::vector<int64_t>& buckets, int64_t batch);

}  // namespace hg::models
