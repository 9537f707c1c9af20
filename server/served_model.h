// What the server needs from a loaded model: its package spec and a thread-safe batched run.
// Implemented over models::Predictor (make_served_model) and by the identity backend; tests
// may provide their own.
//
//   std::shared_ptr<hg::server::ServedModel> m = hg::server::make_served_model(std::move(predictor));
//   m->run({in.data()}, 3, {out.data()});   // 3 samples; out holds 3 * output_size(0) elements
//   m->buckets();                           // the captured batch sizes, ascending
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "models/package.h"
#include "models/predictor.h"

namespace hg::server {

class ServedModel {
 public:
  virtual ~ServedModel() = default;
  virtual const models::PackageSpec& spec() const = 0;
  // Elements of one sample of input/output i (the shape without the batch dimension); -1 when
  // a dimension besides the batch is dynamic (spec shape -1 after dim 0).
  virtual int64_t input_size(size_t i) const = 0;
  virtual int64_t output_size(size_t i) const = 0;
  // Dynamic dimensions: every run names the sample shape of each input (a signature; {} for a
  // model without them), and this gives the outputs' sample shapes for it. Throws
  // hg::InvalidArgument naming the input and dimension for a shape the model does not take.
  virtual std::vector<Shape> output_shapes(const std::vector<Shape>& input_shapes);
  // The signatures met, captured and evicted (models::Predictor); zero for other models.
  virtual models::SignatureStats signature_stats() const { return {}; }
  // The batch sizes that run from a captured graph, ascending (empty: any batch runs as is).
  virtual std::vector<int64_t> buckets() const { return {}; }
  // Thread-safe. inputs[i] holds batch samples of input i in the datatype spec() declares
  // (FP32: float, INT64: int64_t, ...; input_size(i) elements each, or the elements of
  // input_shapes[i]); outputs[j] receives batch samples of output j. Throws hg::Error on failure.
  virtual void run(const std::vector<const void*>& inputs, int64_t batch, const std::vector<void*>& outputs,
                   const std::vector<Shape>& input_shapes = {}) = 0;
  // A batch gathered from several requests with one copy on each side (models::Predictor::run_staged):
  // fill writes the samples into the model's own input buffers, take reads its outputs. Returns
  // false, having called neither, when the model has no buffers of its own (then use run()).
  using Fill = std::function<void(const std::vector<void*>& inputs)>;
  using Take = std::function<void(const std::vector<const void*>& outputs)>;
  virtual bool run_staged(int64_t /*batch*/, const Fill& /*fill*/, const Take& /*take*/,
                          const std::vector<Shape>& /*input_shapes*/ = {}) {
    return false;
  }
};

// Wraps a loaded, warmed-up Predictor.
std::shared_ptr<ServedModel> make_served_model(std::unique_ptr<models::Predictor> predictor);

}  // namespace hg::server
