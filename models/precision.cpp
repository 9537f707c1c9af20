#include "models/precision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/dtype_dispatch.h"

namespace hg::models {

namespace {

double value_at(DType t, const void* p, int64_t i) {
  return visit_dtype(t, [&]<class T>(Type<T>) -> double {
    const T v = static_cast<const T*>(p)[i];
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) return v.to_float();
    else if constexpr (std::is_same_v<T, boolean>) return v.v;
    else return static_cast<double>(v);
  });
}

template <class T>
void fill(std::vector<uint8_t>& bytes, int64_t n, std::mt19937_64& rng, int64_t rows, DType t) {
  bytes.resize(static_cast<size_t>(n) * sizeof(T));
  T* p = reinterpret_cast<T*>(bytes.data());
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, boolean>) p[i] = {1};
    else if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) p[i] = T::from_float(normal(rng));
    else if constexpr (std::is_floating_point_v<T>) p[i] = static_cast<T>(normal(rng));
    else if (rows > 0) p[i] = static_cast<T>(std::uniform_int_distribution<int64_t>(0, rows - 1)(rng));
    else if (t == DType::U8) p[i] = static_cast<T>(std::uniform_int_distribution<int>(0, 255)(rng));
    else p[i] = 1;
  }
}

}  // namespace

std::string PrecisionReport::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s against fp32 on %lld samples: top-1 agreement %.2f%% (%lld rows), max relative error %.3g",
                graphs::precision_name(precision), static_cast<long long>(samples), 100 * top1_agreement,
                static_cast<long long>(rows), max_relative_error);
  return buf;
}

std::vector<std::vector<uint8_t>> precision_sample_inputs(const std::vector<DType>& dtypes,
                                                          const std::vector<int64_t>& elements,
                                                          const std::vector<int64_t>& index_rows, int64_t count,
                                                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint8_t>> out(dtypes.size());
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const int64_t rows = i < index_rows.size() ? index_rows[i] : 0;
    visit_dtype(dtypes[i], [&]<class T>(Type<T>) { fill<T>(out[i], count * elements[i], rng, rows, dtypes[i]); });
  }
  return out;
}

void compare_precision_output(PrecisionReport& r, size_t index, DType dtype, const void* reduced,
                              const void* reference, int64_t n, int64_t last) {
  double scale = 0, err = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = value_at(dtype, reduced, i), b = value_at(dtype, reference, i);
    scale = std::max(scale, std::abs(b));
    err = std::isnan(a) != std::isnan(b) || std::isinf(a) != std::isinf(b) ? INFINITY
                                                                            : std::max(err, std::abs(a - b));
  }
  r.max_relative_error = std::max(r.max_relative_error, scale > 0 ? err / scale : err);
  if (index != 0 || last <= 0) return;
  int64_t agree = 0, rows = n / last;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t ia = 0, ib = 0;
    for (int64_t j = 1; j < last; ++j) {
      if (value_at(dtype, reduced, row * last + j) > value_at(dtype, reduced, row * last + ia)) ia = j;
      if (value_at(dtype, reference, row * last + j) > value_at(dtype, reference, row * last + ib)) ib = j;
    }
    agree += ia == ib;
  }
  r.rows = rows;
  r.top1_agreement = rows ? static_cast<double>(agree) / static_cast<double>(rows) : 1;
}

}  // namespace hg::models
