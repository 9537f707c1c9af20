#include "server/served_model.h"

namespace hg::server {
namespace {

class PredictorModel final : public ServedModel {
 public:
  explicit PredictorModel(std::unique_ptr<models::Predictor> p) : p_(std::move(p)) {}
  const models::PackageSpec& spec() const override { return p_->package().spec; }
  int64_t input_size(size_t i) const override { return p_->input_size(i); }
  int64_t output_size(size_t i) const override { return p_->output_size(i); }
  std::vector<int64_t> buckets() const override { return p_->buckets(); }
  void run(const std::vector<const void*>& inputs, int64_t batch, const std::vector<void*>& outputs) override {
    p_->run(inputs, batch, outputs);
  }
  bool run_staged(int64_t batch, const Fill& fill, const Take& take) override {
    p_->run_staged(batch, fill, take);
    return true;
  }

 private:
  std::unique_ptr<models::Predictor> p_;
};

}  // namespace

std::shared_ptr<ServedModel> make_served_model(std::unique_ptr<models::Predictor> predictor) {
  return std::make_shared<PredictorModel>(std::move(predictor));
}

}  // namespace hg::server
