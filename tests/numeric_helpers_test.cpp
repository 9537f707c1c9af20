// The shared numeric comparisons of the tests (golden.h, gradcheck.h, fusion_test_util.h,
// ddp_test_util.h) fail on NaN and on infinities instead of letting them through. (The helpers
// local to one test file are checked in that file.)
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/ops.h"
#include "engine/ops_math.h"
#include "tests/ddp_test_util.h"
#include "tests/fusion_test_util.h"
#include "tests/golden.h"
#include "tests/gradcheck.h"

namespace hg::test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(NumericHelpers, WithinToleranceIsFalseForEveryNonFiniteValue) {
  EXPECT_TRUE(within_tolerance(1.0, 1.0 + 1e-7, 1e-6, 0));
  EXPECT_FALSE(within_tolerance(1.0, 1.1, 1e-6, 1e-6));
  for (double bad : {kNaN, kInf, -kInf}) {
    EXPECT_FALSE(within_tolerance(bad, 1.0, 1e-3, 1e-3)) << bad;
    EXPECT_FALSE(within_tolerance(1.0, bad, 1e-3, 1e-3)) << bad;
    EXPECT_FALSE(within_tolerance(bad, bad, 1e-3, 1e-3)) << bad;
    EXPECT_FALSE(within_tolerance(1.0, 1.0, bad, 1e-3)) << "tolerance " << bad;
    EXPECT_FALSE(within_tolerance(1.0, 1.0, 1e-3, bad)) << "tolerance " << bad;
  }
  // A reference that is itself non-finite must be met exactly.
  EXPECT_TRUE(matches_reference(kNaN, kNaN, 1e-3, 1e-3));
  EXPECT_TRUE(matches_reference(-kInf, -kInf, 1e-3, 1e-3));
  EXPECT_FALSE(matches_reference(kInf, -kInf, 1e-3, 1e-3));
  EXPECT_FALSE(matches_reference(1e30, kInf, 1e-3, 1e-3));
  EXPECT_FALSE(matches_reference(kNaN, 1.0, 1e-3, 1e-3));
  EXPECT_FALSE(matches_reference(kInf, 1.0, 1e-3, 1e-3));
  EXPECT_TRUE(matches_reference(1.0, 1.0, 1e-3, 1e-3));
}

// EXPECT_NONFATAL_FAILURE's statement cannot use a test's locals: the vectors are statics.
const std::vector<float> kWant = {1.f, -2.f, 3.f};
const std::vector<float> kNaNGot = {1.f, NAN, 3.f};
const std::vector<float> kInfGot = {1.f, -INFINITY, 3.f};
const std::vector<float> kInfWant = {1.f, INFINITY, 3.f};
const std::vector<float> kNaNWant = {1.f, NAN, 3.f};

TEST(NumericHelpers, GoldenExpectCloseFailsOnNaNAndInfinity) {
  expect_close(kWant, kWant, 1e-6, "equal");
  EXPECT_NONFATAL_FAILURE(expect_close(kNaNGot, kWant, 1e-3, "nan got", 1.0), "nan got element 1");
  EXPECT_NONFATAL_FAILURE(expect_close(kInfGot, kWant, 1e-3, "inf got", 1.0), "inf got element 1");
  EXPECT_NONFATAL_FAILURE(expect_close(kWant, kInfWant, 1e-3, "inf want", 1.0), "inf want element 1");
  EXPECT_NONFATAL_FAILURE(expect_close(kNaNWant, kNaNWant, 1e-3, "nan both", 1.0), "nan both element 1");
  EXPECT_NONFATAL_FAILURE(expect_close(kInfWant, kInfWant, 1e-3, "inf both", 1.0), "inf both element 1");
}

TEST(NumericHelpers, FusionExpectNearFailsOnNaNAndInfinityTheReferenceDoesNotHave) {
  fusion::expect_near({kWant}, {kWant}, 1e-6);
  fusion::expect_near({kNaNWant, kInfWant}, {kNaNWant, kInfWant}, 1e-6);  // the unfused graph's own NaN, inf
  EXPECT_FATAL_FAILURE(fusion::expect_near({kNaNGot}, {kWant}, 1e-3, 1.0), "output 0 element 1");
  EXPECT_FATAL_FAILURE(fusion::expect_near({kInfGot}, {kWant}, 1e-3, 1.0), "output 0 element 1");
  EXPECT_FATAL_FAILURE(fusion::expect_near({kWant}, {kInfWant}, 1e-3, 1.0), "output 0 element 1");
  EXPECT_FATAL_FAILURE(fusion::expect_near({kWant}, {kNaNWant}, 1e-3, 1.0), "output 0 element 1");
}

TEST(NumericHelpers, DdpExpectCloseAndMaxDiffFailOnNaNAndInfinity) {
  training::ddp_test::expect_close(kWant, kWant, "equal");
  EXPECT_NONFATAL_FAILURE(training::ddp_test::expect_close(kNaNGot, kWant, "nan got"), "nan got: element 1 is not finite");
  EXPECT_NONFATAL_FAILURE(training::ddp_test::expect_close(kInfGot, kWant, "inf got"), "inf got: element 1 is not finite");
  EXPECT_NONFATAL_FAILURE(training::ddp_test::expect_close(kWant, kInfWant, "inf want"), "inf want: element 1");
  // max_diff is NaN then: neither "equal within" nor "different by more than" holds.
  for (const auto* bad : {&kNaNGot, &kInfGot, &kInfWant}) {
    const float d = training::ddp_test::max_diff(*bad, kWant);
    EXPECT_TRUE(std::isnan(d));
    EXPECT_FALSE(d <= 1e-5f);
    EXPECT_FALSE(d > 1e-3f);
  }
  EXPECT_EQ(training::ddp_test::max_diff(kWant, kWant), 0.f);
}

TEST(NumericHelpers, GradientCheckFailsOnNaNAndInfinity) {
  // exp at 709.5 with a step of 1: exp(710.5) overflows, so the central difference is infinite
  // while the analytic gradient exp(709.5) * upstream is finite (an infinite bound passed it).
  // Static: EXPECT_NONFATAL_FAILURE's statement may not name locals. Released at the end, before
  // static destruction could outlive the device backends their storage returns to.
  static Tensor big, nan_x;
  big = Tensor::from_vector({709.5f}, {1}).to(DType::F64);
  nan_x = Tensor::from_vector({NAN}, {1}).to(DType::F64);
  EXPECT_NONFATAL_FAILURE(expect_fd_gradients([](const std::vector<Tensor>& in) { return ops::exp(in[0]); }, {big}, {0},
                                              "exp at 709.5", {.eps = 1.0, .rtol = 1e-3, .atol = 1e-3}),
                          "input 0 element 0");
  EXPECT_NONFATAL_FAILURE(expect_fd_gradients([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[0]); },
                                              {nan_x}, {0}, "x * x at NaN", {.eps = 1e-6, .rtol = 1e-3, .atol = 1e-3}),
                          "input 0 element 0");
  expect_fd_gradients([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[0]); },
                      {Tensor::from_vector({0.5f, -1.5f}, {2}).to(DType::F64)}, {0}, "x * x",
                      {.eps = 1e-6, .rtol = 1e-5, .atol = 1e-6});
  big = nan_x = Tensor();
}

}  // namespace
}  // namespace hg::test
