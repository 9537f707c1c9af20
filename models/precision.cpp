#include "models/precision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/dtype_dispatch.h"
#include "engine/error.h"
#include "models/safetensors.h"

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

PrecisionCheckOptions precision_samples_file(const std::filesystem::path& file, const PackageSpec& spec,
                                             int64_t max_samples) {
  const safetensors::File f = safetensors::read(file);
  auto fail = [&](const std::string& why) { throw FormatError(file.string() + ": " + why); };
  PrecisionCheckOptions o;
  o.samples = -1;
  bool dynamic = false;
  for (const IOSpec& io : spec.inputs) {
    const safetensors::Entry* e = f.find(io.name);
    if (!e) fail("no tensor '" + io.name + "' (one tensor per model input, named as the input)");
    const DType want = dtype_from_kserve(io.datatype);
    if (e->dtype != dtype_name(want))
      fail("tensor '" + io.name + "' is " + e->dtype + ", the input is " + dtype_name(want));
    const Shape sample = sample_shape(spec, io);
    const Shape got(e->shape.begin(), e->shape.end());
    bool ok = spec.batched && got.size() == sample.size() + 1;
    for (size_t d = 0; ok && d < sample.size(); ++d) ok = sample[d] < 0 ? got[d + 1] >= 1 : got[d + 1] == sample[d];
    if (!spec.batched) ok = got.size() == sample.size() + 1 && got[0] == 1;
    if (!ok)
      fail("tensor '" + io.name + "' has shape " + shape_str(got) + "; it must be [N, sample shape] with the input's " +
           "sample shape " + shape_str(sample) + (spec.batched ? "" : " and N = 1 (the model has no batch dimension)"));
    if (o.samples >= 0 && got[0] != o.samples)
      fail("tensor '" + io.name + "' holds " + std::to_string(got[0]) + " samples, the others " + std::to_string(o.samples));
    o.samples = got[0];
    for (int64_t d : sample) dynamic |= d < 0;
    o.signature.emplace_back(got.begin() + 1, got.end());
    o.inputs.push_back(e->data);
  }
  if (o.samples < 1 || o.samples > max_samples)
    fail("holds " + std::to_string(o.samples) + " samples; 1 to " + std::to_string(max_samples) + " are allowed");
  if (!dynamic) o.signature.clear();
  return o;
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
