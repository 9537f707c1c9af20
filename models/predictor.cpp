#include "models/predictor.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/autograd.h"
#include "engine/error.h"
#include "graphs/hpu_graph.h"
#include "models/module.h"

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
  Tensor input;
  std::unique_ptr<graphs::HPUGraph> graph;
  double capture_ms = 0;
};

struct Predictor::Impl {
  ModelPackage package;
  PredictorOptions opt;
  std::unique_ptr<Module> module;
  std::vector<std::unique_ptr<Bucket>> buckets;  // ascending batch

  BucketInfo capture(Bucket& b) {  // caller holds b.mu
    if (!b.graph) {
      std::lock_guard lk(capture_mutex());
      const auto t0 = std::chrono::steady_clock::now();
      Shape shape = package.spec.inputs[0].shape;
      shape[0] = b.batch;
      b.input = Tensor::zeros(shape, DType::F32, opt.device);
      auto g = std::make_unique<graphs::HPUGraph>(opt.device);
      NoGradGuard no_grad;
      g->capture_begin();
      try {
        Tensor out = module->forward(b.input);  // alive at capture_end: the graph's output
        g->capture_end();
      } catch (...) {
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
  impl->package = load_package(dir);
  impl->opt = opt;
  impl->module = build_module(impl->package);
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

std::vector<BucketInfo> Predictor::capture_all() {
  std::vector<BucketInfo> r;
  for (auto& b : impl_->buckets) {
    std::lock_guard lk(b->mu);
    r.push_back(impl_->capture(*b));
  }
  return r;
}

void Predictor::run(const std::vector<const float*>& inputs, int64_t batch, const std::vector<float*>& outputs) {
  if (inputs.size() != 1 || outputs.size() != 1)
    throw InvalidArgument("Predictor::run: the model has one input and one output");
  if (batch <= 0) throw InvalidArgument("Predictor::run: batch must be positive");
  const int64_t in_sz = input_size(0), out_sz = output_size(0);
  for (int64_t done = 0; done < batch;) {
    const int64_t left = batch - done;
    auto it = std::find_if(impl_->buckets.begin(), impl_->buckets.end(), [&](auto& b) { return b->batch >= left; });
    Bucket& b = it == impl_->buckets.end() ? *impl_->buckets.back() : **it;
    const int64_t n = std::min(left, b.batch);
    std::lock_guard lk(b.mu);
    impl_->capture(b);
    float* in = b.input.data<float>();  // waits for earlier replays on the device
    std::memcpy(in, inputs[0] + done * in_sz, sizeof(float) * n * in_sz);
    std::memset(in + n * in_sz, 0, sizeof(float) * (b.batch - n) * in_sz);
    b.graph->replay();
    const float* out = b.graph->static_outputs()[0].data<float>();
    std::memcpy(outputs[0] + done * out_sz, out, sizeof(float) * n * out_sz);
    done += n;
  }
}

}  // namespace hg::models
