// A loaded model ready to serve: one captured HPU graph per batch bucket, replayed per call.
//
//   auto p = hg::models::Predictor::load("models/repository/digits_mlp/1", {});
//   for (auto& b : p->capture_all()) printf("batch %lld: %.1f ms, arena %zu B\n", ...);
//   std::vector<float> out(p->output_size(0) * 3);
//   p->run({in.data()}, 3, {out.data()});   // batch 3 runs in the batch-4 bucket, padding dropped
//   p->input_dtype(0);                       // e.g. DType::I64 for token ids: pass int64_t data
//
// A directory holding model.onnx instead of model.json is imported (models/onnx_import.h).
// run() is thread-safe (one replay of a bucket at a time). Batches above the largest bucket
// are run in chunks of the largest bucket.
#pragma once
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/device.h"
#include "models/package.h"

namespace hg::models {

struct PredictorOptions {
  Device device = Device::hpu(0);
  std::vector<int64_t> batch_buckets = {1, 2, 4, 8, 16, 32};
};

struct BucketInfo {
  int64_t batch;
  double capture_ms;
  size_t arena_bytes;
};

class Predictor {
 public:
  static std::unique_ptr<Predictor> load(const std::filesystem::path& dir, const PredictorOptions& opt);
  ~Predictor();
  const ModelPackage& package() const;
  // Elements of one sample of input/output i (the shape without the batch dimension).
  int64_t input_size(size_t i) const;
  int64_t output_size(size_t i) const;
  // The element types the package declares (IOSpec::datatype).
  DType input_dtype(size_t i) const;
  DType output_dtype(size_t i) const;
  // Captures every bucket not yet captured (warmup) and reports each.
  std::vector<BucketInfo> capture_all();
  // inputs[i] holds batch * input_size(i) elements of input_dtype(i) (one per model input, in
  // order); outputs[j] receives batch * output_size(j) elements of output_dtype(j).
  void run(const std::vector<const void*>& inputs, int64_t batch, const std::vector<void*>& outputs);

 private:
  struct Impl;
  explicit Predictor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hg::models
