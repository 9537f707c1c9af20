// Test helpers: PyTorch golden values (tests/golden/*.json, made by scripts/gen_golden.py
// and scripts/golden_*.py), tolerant comparisons, and the modes every op is checked in.
//
//   auto cases = hg::test::load_json("ops.json");
//   hg::Tensor t = hg::test::tensor_from(cases[0]["inputs"][0], hg::Device::cpu());
//   hg::test::expect_close(t.to_vector(), expected, 1e-5, "matmul output");   // NaN, inf: failures
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "graphs/lazy.h"

namespace hg::test {

// The three ways an op runs: on cpu, eagerly on hpu:0, and lazily traced on hpu:0.
enum class Mode { Cpu, HpuEager, HpuLazy };

struct ModeGuard {  // sets lazy mode for the test and restores eager mode after
  explicit ModeGuard(Mode m) { graphs::enable_lazy_mode(m == Mode::HpuLazy); }
  ~ModeGuard() { graphs::enable_lazy_mode(false); }
};

inline Device device_of(Mode m) { return m == Mode::Cpu ? Device::cpu() : Device::hpu(0); }

inline nlohmann::json load_json(const std::string& name) {
  std::ifstream in(std::string(HG_SOURCE_DIR) + "/tests/golden/" + name);
  EXPECT_TRUE(in.good()) << "missing golden file " << name;
  return nlohmann::json::parse(in);
}

inline Tensor tensor_from(const nlohmann::json& j, Device d) {
  const Shape shape = j["shape"].get<Shape>();
  if (j.value("dtype", std::string("F32")) == "I64")
    return Tensor::from_indices(j["data"].get<std::vector<int64_t>>(), shape, d);
  return Tensor::from_vector(j["data"].get<std::vector<float>>(), shape, d);
}

// The tolerance test of the numeric checks: |got - want| <= atol + rtol * |want|, and false
// whenever got, want or the bound is not finite. (A NaN compares false with everything, so
// `if (err > tol) fail`, std::max(worst, err) or EXPECT_LE(err, tol) with an infinite want
// would each let a NaN or an infinity through.)
inline bool within_tolerance(double got, double want, double rtol, double atol) {
  if (!std::isfinite(got) || !std::isfinite(want)) return false;
  const double bound = atol + rtol * std::fabs(want);
  return std::isfinite(bound) && std::fabs(got - want) <= bound;
}

// The same for a reference that may itself be non-finite (a graph against its rewrite on the
// same inputs): there got must be the same value, NaN for NaN or the same infinity.
inline bool matches_reference(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return within_tolerance(got, want, rtol, atol);
}

// |got - want| <= atol + rtol * |want| element-wise, all finite (NaN or an infinity on either
// side is a failure).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                         const std::string& what, double atol = 1e-6) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(within_tolerance(got[i], want[i], rtol, atol))
        << what << " element " << i << ": got " << got[i] << " want " << want[i] << " (rtol " << rtol << ", atol "
        << atol << ")";
}

}  // namespace hg::test
