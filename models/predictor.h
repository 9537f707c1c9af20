// A loaded model ready to serve: one captured HPU graph per batch bucket, replayed per call.
//
//   auto p = hg::models::Predictor::load("models/repository/digits_mlp/1", {});
//   for (auto& b : p->capture_all()) printf("batch %lld: %.1f ms, arena %zu B\n", ...);
//   std::vector<float> out(p->output_size(0) * 3);
//   p->run({in.data()}, 3, {out.data()});   // batch 3 runs in the batch-4 bucket, padding dropped
//
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
  // Captures every bucket not yet captured (warmup) and reports each.
  std::vector<BucketInfo> capture_all();
  // inputs[i] holds batch * input_size(i) floats; outputs[i] receives batch * output_size(i).
  void run(const std::vector<const float*>& inputs, int64_t batch, const std::vector<float*>& outputs);

 private:
  struct Impl;
  explicit Predictor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hg::models
