#include "models/predictor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "graphs/graph_cache.h"
#include "graphs/hpu_graph.h"
#include "graphs/lru_cache.h"
#include "graphs/rewrite.h"
#include "models/buckets.h"
#include "models/module.h"
#include "models/onnx_import.h"
#include "models/predictor_impl.h"

namespace hg::models {

namespace {

// A bucket's static buffer, without waiting for the device: its replays are synchronous and run
// under the bucket's lock, so nothing else uses it while that lock is held (raw_data() would wait
// for every model's work queued on the device).
uint8_t* idle_buffer(const Tensor& t) {
  if (!t.impl()->storage) return static_cast<uint8_t*>(t.raw_data());  // still lazy: materialize it
  return static_cast<uint8_t*>(t.impl()->storage->data) + t.impl()->offset * static_cast<int64_t>(dtype_size(t.dtype()));
}
}  // namespace

Predictor::Predictor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Predictor::~Predictor() = default;

std::unique_ptr<Predictor> Predictor::load(const std::filesystem::path& dir, const PredictorOptions& opt) {
  auto impl = std::make_unique<Impl>();
  const bool onnx = !std::filesystem::exists(dir / "model.json") && std::filesystem::exists(dir / "model.onnx");
  std::unique_ptr<Module> module;
  impl->package = onnx ? import_onnx(dir / "model.onnx", &module, opt.device) : load_package(dir, &module, opt.device);
  impl->module = std::move(module);
  if (!opt.batched) impl->package.spec.batched = false;
  impl->opt = opt;
  impl->dir = dir;
  impl->module->eval();
  impl->module->to(opt.device);
  for (auto& [name, t] : impl->module->named_parameters()) impl->frozen.push_back(*t);
  for (auto& [name, t] : impl->module->named_buffers()) impl->frozen.push_back(*t);
  try {
    impl->batch_sizes = impl->package.spec.batched ? normalize_buckets(opt.batch_buckets) : std::vector<int64_t>{1};
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("Predictor: ") + e.what());
  }
  std::vector<Shape> in;
  const PackageSpec& spec = impl->package.spec;
  for (const auto& io : spec.inputs) {
    in.push_back(sample_shape(spec, io));
    for (int64_t d : in.back()) impl->dynamic |= d < 0;
  }
  impl->variants = graphs::LruCache<std::string, std::shared_ptr<Variant>>(
      {.max_entries = opt.max_signatures, .max_bytes = opt.max_signature_bytes},
      [](const std::shared_ptr<Variant>& v) { return v->bytes.load(); });
  if (!impl->dynamic) {
    impl->fixed = impl->make_variant(std::move(in));
    for (const auto& io : spec.outputs) impl->fixed->out.push_back(sample_shape(spec, io));
    bool outputs_fixed = true;
    for (const Shape& o : impl->fixed->out)
      for (int64_t d : o) outputs_fixed &= d >= 0;
    if (!outputs_fixed) {
      // Fixed inputs but an output the file leaves open (an upsampling to the input's size): its
      // dimensions follow from the inputs, so they are learnt now (capturing the smallest
      // bucket) and the spec says them, as the metadata and the responses need.
      impl->fixed->out.clear();
      const std::vector<Shape> out = impl->learn_outputs(*impl->fixed);
      for (size_t j = 0; j < out.size(); ++j)
        std::copy(out[j].begin(), out[j].end(), impl->package.spec.outputs[j].shape.end() - out[j].size());
    }
  }
  return std::unique_ptr<Predictor>(new Predictor(std::move(impl)));
}

const ModelPackage& Predictor::package() const { return impl_->package; }
std::shared_ptr<Module> Predictor::module() const { return impl_->module; }

namespace {
int64_t sample_elements(const PackageSpec& spec, const IOSpec& s) {
  int64_t n = 1;
  for (int64_t d : sample_shape(spec, s)) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}
}  // namespace

int64_t Predictor::input_size(size_t i) const {
  return sample_elements(impl_->package.spec, impl_->package.spec.inputs.at(i));
}
int64_t Predictor::output_size(size_t i) const {
  return sample_elements(impl_->package.spec, impl_->package.spec.outputs.at(i));
}
DType Predictor::input_dtype(size_t i) const { return dtype_from_kserve(impl_->package.spec.inputs.at(i).datatype); }
DType Predictor::output_dtype(size_t i) const { return dtype_from_kserve(impl_->package.spec.outputs.at(i).datatype); }

std::vector<Shape> Predictor::output_shapes(const std::vector<Shape>& input_shapes) {
  return impl_->learn_outputs(*impl_->variant(input_shapes));
}

SignatureStats Predictor::signature_stats() const {
  std::lock_guard lk(impl_->variants_mu);
  SignatureStats s = impl_->stats;
  s.live = impl_->variants.stats().entries;
  s.bytes = impl_->variants.stats().bytes;
  return s;
}

// The buckets of a model without dynamic dimensions, or of opt.signatures; smallest batch first
// within each signature, until the memory budget is spent (the rest are left out).
std::vector<BucketInfo> Predictor::capture_all(const CaptureAllOptions& opt) {
  std::vector<std::shared_ptr<Variant>> variants;
  if (!impl_->dynamic) variants.push_back(impl_->fixed);
  const size_t keep = impl_->opt.max_signatures ? impl_->opt.max_signatures : opt.signatures.size();
  for (size_t k = 0; impl_->dynamic && k < opt.signatures.size(); ++k)
    variants.push_back(k < keep ? impl_->variant(opt.signatures[k]) : impl_->make_variant(opt.signatures[k]));
  std::vector<BucketInfo> r;
  size_t used = 0, done = 0;
  bool over = false;
  const size_t n = variants.size() * impl_->batch_sizes.size();
  for (size_t s = 0; s < variants.size(); ++s) {
    Variant& v = *variants[s];
    int64_t last_batch = 0;  // the signature's previous capture: its batch, arena and constants
    size_t last_arena = 0, last_constants = 0;
    for (auto& bp : v.buckets) {
      Bucket& b = *bp;
      std::lock_guard lk(b.mu);
      // With a budget, a bucket whose arena (grown with the batch from the previous one's) would
      // not fit is left out before it allocates anything.
      if (!over && opt.memory_budget && last_batch > 0 && b.batch > last_batch) {
        const double predicted = static_cast<double>(last_constants) + static_cast<double>(last_arena) *
                                                                           static_cast<double>(b.batch) /
                                                                           static_cast<double>(last_batch);
        over = static_cast<double>(used) + predicted > static_cast<double>(opt.memory_budget);
      }
      if (!over && !b.left_out && s < keep) {
        if (opt.progress) opt.progress(done, n, b.batch);
        BucketInfo info = impl_->capture(v, b);
        const size_t cost = info.arena_bytes + info.constant_bytes;
        if (opt.memory_budget && used + cost > opt.memory_budget) {
          impl_->release(v, b);
          over = true;
        } else {
          used += cost;
          r.push_back(info);
          last_batch = info.batch;
          last_arena = info.arena_bytes;
          last_constants = info.constant_bytes;
          ++done;
          continue;
        }
      }
      if (opt.memory_budget && s < keep) b.left_out = true;
      BucketInfo info = b.info;
      info.captured = false;
      info.signature = impl_->dynamic ? v.in : std::vector<Shape>{};  // set before a capture too
      r.push_back(info);
      ++done;
    }
    if (impl_->dynamic && s < keep) impl_->recost(v.in);
  }
  if (opt.progress) opt.progress(n, n, 0);
  return r;
}

std::vector<int64_t> Predictor::buckets() const {
  if (impl_->dynamic) return impl_->batch_sizes;
  std::vector<int64_t> r;
  for (const auto& b : impl_->fixed->buckets)
    if (!b->left_out) r.push_back(b->batch);
  return r;
}

void Predictor::run(const std::vector<const void*>& inputs, int64_t batch, const std::vector<void*>& outputs,
                    const std::vector<Shape>& input_shapes) {
  const auto& spec = impl_->package.spec;
  if (inputs.size() != spec.inputs.size() || outputs.size() != spec.outputs.size())
    throw InvalidArgument("Predictor::run: the model has " + std::to_string(spec.inputs.size()) + " inputs and " +
                          std::to_string(spec.outputs.size()) + " outputs, got " + std::to_string(inputs.size()) + " and " +
                          std::to_string(outputs.size()));
  if (batch <= 0) throw InvalidArgument("Predictor::run: batch must be positive");
  impl_->check_unbatched(batch);
  const std::shared_ptr<Variant> vp = impl_->variant(input_shapes);
  Variant& v = *vp;
  Bucket* b = Impl::bucket_for(v, batch);
  if (!b) return impl_->run_unpadded(v, inputs, batch, outputs);
  if (batch == b->batch) {  // a full bucket: the graph reads and writes the caller's buffers
    std::lock_guard lk(b->mu);
    if (!b->graph) {
      impl_->capture(v, *b);
      impl_->recost(v.in);
    }
    for (size_t i = 0; i < inputs.size(); ++i)
      if (b->index_rows[i] > 0)
        Impl::check_ids(spec.inputs[i].name, inputs[i], b->inputs[i].dtype(), batch * Impl::in_elements(v, i), b->index_rows[i]);
    b->graph->replay_host(inputs, outputs);
    return;
  }
  std::vector<size_t> in_bytes, out_bytes;
  for (size_t i = 0; i < inputs.size(); ++i) in_bytes.push_back(dtype_size(input_dtype(i)) * Impl::in_elements(v, i));
  run_staged(
      batch,
      [&](const std::vector<void*>& in) {
        for (size_t i = 0; i < in.size(); ++i) std::memcpy(in[i], inputs[i], static_cast<size_t>(batch) * in_bytes[i]);
      },
      [&](const std::vector<const void*>& out) {
        for (size_t j = 0; j < out.size(); ++j)
          std::memcpy(outputs[j], out[j],
                      static_cast<size_t>(batch) * dtype_size(output_dtype(j)) * impl_->out_elements(v, j));
      },
      input_shapes);
}

void Predictor::run_staged(int64_t batch, const Fill& fill, const Take& take, const std::vector<Shape>& input_shapes) {
  const auto& spec = impl_->package.spec;
  if (batch <= 0) throw InvalidArgument("Predictor::run_staged: batch must be positive");
  impl_->check_unbatched(batch);
  const std::shared_ptr<Variant> vp = impl_->variant(input_shapes);
  Variant& v = *vp;
  Bucket* found = Impl::bucket_for(v, batch);
  if (!found) {  // above the largest bucket: temporary buffers around the unpadded run
    const std::vector<Shape> out_shapes = impl_->learn_outputs(v);
    std::vector<std::vector<uint8_t>> in(spec.inputs.size()), out(spec.outputs.size());
    std::vector<void*> in_ptrs;
    std::vector<const void*> in_const;
    std::vector<void*> out_ptrs;
    for (size_t i = 0; i < in.size(); ++i) {
      in[i].resize(static_cast<size_t>(batch) * dtype_size(input_dtype(i)) * Impl::in_elements(v, i));
      in_ptrs.push_back(in[i].data());
      in_const.push_back(in[i].data());
    }
    for (size_t j = 0; j < out.size(); ++j) {
      out[j].resize(static_cast<size_t>(batch) * dtype_size(output_dtype(j)) * numel(out_shapes[j]));
      out_ptrs.push_back(out[j].data());
    }
    fill(in_ptrs);
    impl_->run_unpadded(v, in_const, batch, out_ptrs);
    take(std::vector<const void*>(out_ptrs.begin(), out_ptrs.end()));
    return;
  }
  Bucket& b = *found;
  std::lock_guard lk(b.mu);
  if (!b.graph) {
    impl_->capture(v, b);
    impl_->recost(v.in);
  }
  std::vector<void*> in(b.inputs.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = idle_buffer(b.inputs[i]);
  fill(in);
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t sample = dtype_size(b.inputs[i].dtype()) * Impl::in_elements(v, i);
    if (b.index_rows[i] > 0)
      Impl::check_ids(spec.inputs[i].name, in[i], b.inputs[i].dtype(), batch * Impl::in_elements(v, i), b.index_rows[i]);
    std::memset(static_cast<uint8_t*>(in[i]) + batch * sample, 0, (b.batch - batch) * sample);  // valid token ids too
  }
  b.graph->replay();
  std::vector<const void*> out(b.outputs.size());
  for (size_t j = 0; j < out.size(); ++j) out[j] = idle_buffer(b.outputs[j]);
  take(out);
}

}  // namespace hg::models
