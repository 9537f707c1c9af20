// Internal to the server and hgraph-capture: the check of a model served in reduced precision
// against FP32 (config.json "precision_check", models/precision.h), run at load after warm-up.
//
//   calibrate_model(*predictor, config, model_dir);          // int8 with "calibration": static ranges
//   models::PrecisionReport r = check_model_precision(*predictor, config, model_dir);
//   log(precision_report_line(config, r));   // "model 'm': bf16 against fp32 on 64 samples: ..."
#pragma once
#include <filesystem>
#include <string>

#include "models/predictor.h"
#include "server/model_config.h"

namespace hg::server {

// Runs the check on precision_check.inputs (a file in model_dir) or on generated inputs (a model
// with dynamic dimensions: at its first padded signature; without one the report says 0
// samples). Throws InvalidArgument naming both figures when the agreement is below
// min_top1_agreement or the error above max_relative_error, FormatError for a bad inputs file.
models::PrecisionReport check_model_precision(models::Predictor& p, const ModelConfig& config,
                                             const std::filesystem::path& model_dir);

// "calibration" (int8): runs the calibration file's inputs through the model to fix the INT8
// convolutions' input ranges (models::Predictor::calibrate_int8) and returns the number of
// ranges; 0 without a "calibration". A model with dynamic dimensions calibrates at the file's
// shapes. Call it before the warm-up: it drops the graphs captured so far. Throws FormatError for
// a bad file.
size_t calibrate_model(models::Predictor& p, const ModelConfig& config, const std::filesystem::path& model_dir);

// The log line of a report.
std::string precision_report_line(const ModelConfig& config, const models::PrecisionReport& r);

}  // namespace hg::server
