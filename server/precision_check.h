// Internal to the server and hgraph-capture: the check of a model served in reduced precision
// against FP32 (config.json "precision_check", models/precision.h), run at load after warm-up.
//
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

// The log line of a report.
std::string precision_report_line(const ModelConfig& config, const models::PrecisionReport& r);

}  // namespace hg::server
