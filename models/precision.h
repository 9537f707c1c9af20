// Reduced-precision serving: how far the answers of a model compiled in BF16 are from FP32's.
//
//   hg::models::PredictorOptions opt;
//   opt.precision = hg::graphs::Precision::Bf16;             // matmuls and convolutions in BF16
//   auto p = hg::models::Predictor::load(dir, opt);
//   hg::models::PrecisionReport r = p->check_precision({.samples = 64});
//   r.top1_agreement;       // 0.984: the share of rows whose largest output agrees with FP32's
//   r.max_relative_error;   // 0.012: max |x - fp32| / max |fp32|, the worst output
//   spdlog::info("{}", r.summary());
//   // or on the user's own inputs: one tensor per model input in a safetensors file
//   r = p->check_precision(hg::models::precision_samples_file(dir / "samples.safetensors", p->package().spec, 1000));
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/dtype.h"
#include "graphs/passes.h"
#include "models/package.h"

namespace hg::models {

struct PrecisionReport {
  graphs::Precision precision = graphs::Precision::Fp32;
  int64_t samples = 0;  // 0: not checked
  int64_t rows = 0;     // the rows of output 0 (its last dimension) top-1 was compared on
  double top1_agreement = 1;      // the share of those rows whose largest element is where FP32's is
  double max_relative_error = 0;  // over the outputs: max |x - fp32| / max |fp32|
  std::string summary() const;    // "bf16 against fp32 on 64 samples: top-1 agreement 98.4% (...), max relative error 0.0123"
};

struct PrecisionCheckOptions {
  int64_t samples = 64;
  uint64_t seed = 0;
  // Models with dynamic dimensions besides the batch: every input's sample shape to check with.
  std::vector<Shape> signature = {};
  // Given inputs instead of generated ones (precision_samples_file): per model input, `samples`
  // samples of its dtype and sample shape, raw bytes.
  std::vector<std::vector<uint8_t>> inputs = {};
};

// The inputs of a precision check from a safetensors file: one tensor per model input, named as
// the input, of its dtype, shaped [N, sample shape...] with the same N for all (at most
// max_samples). Returns the options with samples = N, inputs and (dynamic dimensions) the
// signature the file's shapes give. Throws FormatError naming the file and the tensor.
PrecisionCheckOptions precision_samples_file(const std::filesystem::path& file, const PackageSpec& spec,
                                             int64_t max_samples);

// The fixed inputs a check runs: per input, `count` samples of `elements[i]` values of
// `dtypes[i]`, the same for the same seed. Floats are standard normal; an input that indexes an
// embedding table (index_rows[i] > 0 rows) holds ids uniform in [0, rows); other integers are 1
// (masks), BOOL true, U8 uniform in [0, 255].
std::vector<std::vector<uint8_t>> precision_sample_inputs(const std::vector<DType>& dtypes,
                                                          const std::vector<int64_t>& elements,
                                                          const std::vector<int64_t>& index_rows, int64_t count,
                                                          uint64_t seed);

// Adds output `index`'s comparison (`n` elements of `dtype`, the last dimension `last`) to `r`:
// its max relative error, and for output 0 the top-1 agreement of its rows.
void compare_precision_output(PrecisionReport& r, size_t index, DType dtype, const void* reduced,
                              const void* reference, int64_t n, int64_t last);

}  // namespace hg::models
