#include "server/precision_check.h"

#include "engine/error.h"
#include "server/padding.h"

namespace hg::server {

models::PrecisionReport check_model_precision(models::Predictor& p, const ModelConfig& config,
                                             const std::filesystem::path& model_dir) {
  const PrecisionCheck& c = config.precision_check;
  models::PrecisionCheckOptions o{.samples = c.samples, .seed = c.seed};
  bool dynamic = false;
  for (size_t i = 0; i < p.package().spec.inputs.size(); ++i) dynamic |= p.input_size(i) < 0;
  if (!c.inputs.empty()) {
    o = models::precision_samples_file(model_dir / c.inputs, p.package().spec, kMaxPrecisionSamples);
  } else if (dynamic) {
    const auto grid = config.padding ? padding_signatures(*config.padding, p.package().spec)
                                     : std::vector<std::vector<Shape>>{};
    if (grid.empty()) o.samples = 0;
    else o.signature = grid.front();
  }
  models::PrecisionReport r = p.check_precision(o);
  r.precision = config.precision;
  if (!r.samples) return r;
  const std::string what = "model '" + config.name + "': " + r.summary();
  if (r.top1_agreement < c.min_top1_agreement)
    throw InvalidArgument(what + ", below precision_check.min_top1_agreement " + std::to_string(c.min_top1_agreement));
  if (c.max_relative_error && !(r.max_relative_error <= *c.max_relative_error))
    throw InvalidArgument(what + ", above precision_check.max_relative_error " + std::to_string(*c.max_relative_error));
  return r;
}

size_t calibrate_model(models::Predictor& p, const ModelConfig& config, const std::filesystem::path& model_dir) {
  if (!config.calibration || config.precision != graphs::Precision::Int8) return 0;
  const models::PrecisionCheckOptions o =
      models::precision_samples_file(model_dir / config.calibration->inputs, p.package().spec, config.calibration->samples);
  return p.calibrate_int8(o);
}

std::string precision_report_line(const ModelConfig& config, const models::PrecisionReport& r) {
  if (r.samples) return "model '" + config.name + "': " + r.summary();
  return "model '" + config.name + "': " + graphs::precision_name(config.precision) +
         " not checked against fp32 (dynamic dimensions without padding or an inputs file: no shape to run)";
}

}  // namespace hg::server
