#include "server/served_model.h"

#include "engine/error.h"

namespace hg::server {
namespace {

class PredictorModel final : public ServedModel {
 public:
  explicit PredictorModel(std::unique_ptr<models::Predictor> p) : p_(std::move(p)) {}
  const models::PackageSpec& spec() const override { return p_->package().spec; }
  int64_t input_size(size_t i) const override { return p_->input_size(i); }
  int64_t output_size(size_t i) const override { return p_->output_size(i); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& input_shapes) override {
    return p_->output_shapes(input_shapes);
  }
  models::SignatureStats signature_stats() const override { return p_->signature_stats(); }
  std::vector<int64_t> buckets() const override { return p_->buckets(); }
  void run(const std::vector<const void*>& inputs, int64_t batch, const std::vector<void*>& outputs,
           const std::vector<Shape>& input_shapes) override {
    p_->run(inputs, batch, outputs, input_shapes);
  }
  bool run_staged(int64_t batch, const Fill& fill, const Take& take, const std::vector<Shape>& input_shapes) override {
    p_->run_staged(batch, fill, take, input_shapes);
    return true;
  }

 private:
  std::unique_ptr<models::Predictor> p_;
};

}  // namespace

// The spec's sample shapes (dims after the batch when batched); a model with dynamic
// dimensions overrides this.
std::vector<Shape> ServedModel::output_shapes(const std::vector<Shape>& input_shapes) {
  if (!input_shapes.empty())
    throw InvalidArgument("model '" + spec().name + "' has no dynamic dimensions besides the batch");
  std::vector<Shape> r;
  for (const auto& io : spec().outputs) r.push_back(models::sample_shape(spec(), io));
  return r;
}

std::shared_ptr<ServedModel> make_served_model(std::unique_ptr<models::Predictor> predictor) {
  return std::make_shared<PredictorModel>(std::move(predictor));
}

}  // namespace hg::server
