#include "models/buckets.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "engine/error.h"

namespace hg::models {

namespace {

void check_count(int64_t count, const std::string& what) {
  if (count > static_cast<int64_t>(kMaxBuckets))
    throw InvalidArgument(what + " gives " + std::to_string(count) + " buckets, more than " +
                          std::to_string(kMaxBuckets));
}

int64_t parse_int(std::string_view item, std::string_view spec, const char* field) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
  if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < 1)
    throw InvalidArgument("buckets '" + std::string(spec) + "': " + field + " '" + std::string(item) +
                          "' is not a positive integer");
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t pos = 0;
  while (true) {
    const size_t at = s.find(sep, pos);
    parts.push_back(s.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos));
    if (at == std::string_view::npos) return parts;
    pos = at + 1;
  }
}

}  // namespace

std::vector<int64_t> linear_buckets(int64_t start, int64_t max, int64_t step) {
  const std::string what = "linear buckets (start " + std::to_string(start) + ", max " + std::to_string(max) +
                           ", step " + std::to_string(step) + ")";
  if (start < 1 || step < 1 || max < start) throw InvalidArgument(what + ": need 1 <= start <= max and step >= 1");
  check_count((max - start) / step + 1, what);
  std::vector<int64_t> b;
  for (int64_t v = start; v <= max; v += step) {
    b.push_back(v);
    if (max - v < step) break;
  }
  if (b.back() != max) b.push_back(max);
  return b;
}

std::vector<int64_t> exponential_buckets(int64_t min, int64_t max) {
  const std::string what = "exponential buckets (min " + std::to_string(min) + ", max " + std::to_string(max) + ")";
  if (min < 1 || max < min) throw InvalidArgument(what + ": need 1 <= min <= max");
  // min, the powers of two above min and below max, then max: counted before anything is
  // allocated, and doubled only while the double stays below max (no overflow near 2^63).
  int64_t first = 1;  // the first power of two above min, or 0 when there is none below max
  while (first <= min && first <= max / 2) first *= 2;
  if (first <= min) first = 0;
  int64_t count = 1;
  for (int64_t p = first; p != 0 && p < max; p = p <= max / 2 ? p * 2 : max) ++count;
  check_count(count + 1, what);
  std::vector<int64_t> b{min};
  for (int64_t p = first; p != 0 && p < max; p = p <= max / 2 ? p * 2 : max) b.push_back(p);
  if (b.back() != max) b.push_back(max);
  return b;
}

std::vector<int64_t> normalize_buckets(std::vector<int64_t> buckets) {
  if (buckets.empty()) throw InvalidArgument("the bucket list is empty");
  for (int64_t v : buckets)
    if (v < 1) throw InvalidArgument("bucket " + std::to_string(v) + " is not a positive batch size");
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  check_count(static_cast<int64_t>(buckets.size()), "the bucket list");
  return buckets;
}

std::vector<int64_t> parse_buckets(std::string_view spec) {
  const std::vector<std::string_view> parts = split(spec, ':');
  if (parts[0] == "linear") {
    if (parts.size() != 3 && parts.size() != 4)
      throw InvalidArgument("buckets '" + std::string(spec) + "': expected linear:START:MAX[:STEP]");
    return linear_buckets(parse_int(parts[1], spec, "START"), parse_int(parts[2], spec, "MAX"),
                          parts.size() == 4 ? parse_int(parts[3], spec, "STEP") : 1);
  }
  if (parts[0] == "exp") {
    if (parts.size() != 3) throw InvalidArgument("buckets '" + std::string(spec) + "': expected exp:MIN:MAX");
    return exponential_buckets(parse_int(parts[1], spec, "MIN"), parse_int(parts[2], spec, "MAX"));
  }
  if (parts.size() != 1)
    throw InvalidArgument("buckets '" + std::string(spec) +
                          "': expected a list like 1,2,4,8, linear:START:MAX[:STEP] or exp:MIN:MAX");
  std::vector<int64_t> b;
  for (std::string_view item : split(spec, ',')) b.push_back(parse_int(item, spec, "batch size"));
  check_count(static_cast<int64_t>(b.size()), "buckets '" + std::string(spec) + "'");
  return normalize_buckets(std::move(b));
}

std::optional<int64_t> pick_bucket(const std::vector<int64_t>& buckets, int64_t batch) {
  auto it = std::lower_bound(buckets.begin(), buckets.end(), batch);
  if (it == buckets.end()) return std::nullopt;
  return *it;
}

}  // namespace hg::models
