#include "models/predictor.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "graphs/hpu_graph.h"
#include "models/module.h"
#include "models/onnx_import.h"

namespace hg::models {

namespace {
std::mutex& capture_mutex() {  // one capture at a time per process (one per device would do)
  static std::mutex m;
  return m;
}
int64_t sample_size(const IOSpec& s) { return numel(Shape(s.shape.begin() + 1, s.shape.end())); }
}  // namespace

struct Bucket {
  int64_t batch;
  std::mutex mu;
  std::vector<Tensor> inputs, outputs;  // static buffers of the captured graph
  std::unique_ptr<graphs::HPUGraph> graph;
  double capture_ms = 0;
};

struct Predictor::Impl {
  ModelPackage package;
  PredictorOptions opt;
  std::unique_ptr<Module> module;
  std::vector<std::unique_ptr<Bucket>> buckets;  // ascending batch

  void check_outputs(const Bucket& b) const {
    const auto& specs = package.spec.outputs;
    if (b.outputs.size() != specs.size())
      throw InvalidArgument("Predictor: the model returns " + std::to_string(b.outputs.size()) + " outputs, the package declares " +
                            std::to_string(specs.size()));
    for (size_t j = 0; j < specs.size(); ++j) {
      Shape want = specs[j].shape;
      want[0] = b.batch;
      const TensorMeta meta{want, dtype_from_kserve(specs[j].datatype)};
      if (b.outputs[j].meta() != meta)
        throw InvalidArgument("Predictor: output '" + specs[j].name + "' is " + meta_str(b.outputs[j].meta()) +
                              ", the package declares " + meta_str(meta));
    }
  }

  BucketInfo capture(Bucket& b) {  // caller holds b.mu
    if (!b.graph) {
      std::lock_guard lk(capture_mutex());
      const auto t0 = std::chrono::steady_clock::now();
      b.inputs.clear();
      for (const auto& io : package.spec.inputs) {
        Shape shape = io.shape;
        shape[0] = b.batch;
        b.inputs.push_back(Tensor::zeros(shape, dtype_from_kserve(io.datatype), opt.device));
      }
      auto g = std::make_unique<graphs::HPUGraph>(opt.device);
      NoGradGuard no_grad;
      g->capture_begin();
      try {
        b.outputs = module->forward_all(b.inputs);  // alive at capture_end: the graph's outputs
        for (auto& o : b.outputs) o = ops::contiguous(o);
        check_outputs(b);
        g->capture_end();
      } catch (...) {
        b.outputs.clear();
        g.reset();
        throw;
      }
      b.graph = std::move(g);
      b.capture_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    return {b.batch, b.capture_ms, b.graph->arena_bytes()};
  }
};

Predictor::Predictor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Predictor::~Predictor() = default;

std::unique_ptr<Predictor> Predictor::load(const std::filesystem::path& dir, const PredictorOptions& opt) {
  auto impl = std::make_unique<Impl>();
  const bool onnx = !std::filesystem::exists(dir / "model.json") && std::filesystem::exists(dir / "model.onnx");
  impl->package = onnx ? import_onnx(dir / "model.onnx") : load_package(dir, &impl->module);
  impl->opt = opt;
  if (!impl->module) impl->module = build_module(impl->package);
  impl->module->eval();
  impl->module->to(opt.device);
  std::vector<int64_t> sizes = opt.batch_buckets;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.empty() || sizes.front() <= 0) throw InvalidArgument("Predictor: batch buckets must be positive");
  for (int64_t b : sizes) {
    auto bucket = std::make_unique<Bucket>();
    bucket->batch = b;
    impl->buckets.push_back(std::move(bucket));
  }
  return std::unique_ptr<Predictor>(new Predictor(std::move(impl)));
}

const ModelPackage& Predictor::package() const { return impl_->package; }
int64_t Predictor::input_size(size_t i) const { return sample_size(impl_->package.spec.inputs.at(i)); }
int64_t Predictor::output_size(size_t i) const { return sample_size(impl_->package.spec.outputs.at(i)); }
DType Predictor::input_dtype(size_t i) const { return dtype_from_kserve(impl_->package.spec.inputs.at(i).datatype); }
DType Predictor::output_dtype(size_t i) const { return dtype_from_kserve(impl_->package.spec.outputs.at(i).datatype); }

std::vector<BucketInfo> Predictor::capture_all() {
  std::vector<BucketInfo> r;
  for (auto& b : impl_->buckets) {
    std::lock_guard lk(b->mu);
    r.push_back(impl_->capture(*b));
  }
  return r;
}

void Predictor::run(const std::vector<const void*>& inputs, int64_t batch, const std::vector<void*>& outputs) {
  const auto& spec = impl_->package.spec;
  if (inputs.size() != spec.inputs.size() || outputs.size() != spec.outputs.size())
    throw InvalidArgument("Predictor::run: the model has " + std::to_string(spec.inputs.size()) + " inputs and " +
                          std::to_string(spec.outputs.size()) + " outputs, got " + std::to_string(inputs.size()) + " and " +
                          std::to_string(outputs.size()));
  if (batch <= 0) throw InvalidArgument("Predictor::run: batch must be positive");
  for (int64_t done = 0; done < batch;) {
    const int64_t left = batch - done;
    auto it = std::find_if(impl_->buckets.begin(), impl_->buckets.end(), [&](auto& b) { return b->batch >= left; });
    Bucket& b = it == impl_->buckets.end() ? *impl_->buckets.back() : **it;
    const int64_t n = std::min(left, b.batch);
    std::lock_guard lk(b.mu);
    impl_->capture(b);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const size_t sample = dtype_size(b.inputs[i].dtype()) * input_size(i);
      auto* in = static_cast<uint8_t*>(b.inputs[i].raw_data());  // waits for earlier replays on the device
      std::memcpy(in, static_cast<const uint8_t*>(inputs[i]) + done * sample, n * sample);
      std::memset(in + n * sample, 0, (b.batch - n) * sample);  // zero padding (valid token ids too)
    }
    b.graph->replay();
    for (size_t j = 0; j < outputs.size(); ++j) {
      const size_t sample = dtype_size(b.outputs[j].dtype()) * output_size(j);
      std::memcpy(static_cast<uint8_t*>(outputs[j]) + done * sample, b.outputs[j].raw_data(), n * sample);
    }
    done += n;
  }
}

}  // namespace hg::models
