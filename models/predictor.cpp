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
#include "graphs/rewrite.h"
#include "models/buckets.h"
#include "models/module.h"
#include "models/onnx_import.h"

namespace hg::models {

namespace {
int64_t sample_size(const IOSpec& s) { return numel(Shape(s.shape.begin() + 1, s.shape.end())); }

// A bucket's static buffer, without waiting for the device: its replays are synchronous and run
// under the bucket's lock, so nothing else uses it while that lock is held (raw_data() would wait
// for every model's work queued on the device).
uint8_t* idle_buffer(const Tensor& t) {
  if (!t.impl()->storage) return static_cast<uint8_t*>(t.raw_data());  // still lazy: materialize it
  return static_cast<uint8_t*>(t.impl()->storage->data) + t.impl()->offset * static_cast<int64_t>(dtype_size(t.dtype()));
}
}  // namespace

struct Bucket {
  int64_t batch;
  std::atomic<bool> left_out{false};  // by a memory budget
  std::mutex mu;
  std::vector<Tensor> inputs, outputs;  // static buffers of the captured graph
  std::vector<int64_t> index_rows;      // per input: rows of the table it indexes (embedding), or 0
  std::unique_ptr<graphs::HPUGraph> graph;
  BucketInfo info;
};

struct Predictor::Impl {
  ModelPackage package;
  PredictorOptions opt;
  std::unique_ptr<Module> module;
  std::vector<Tensor> frozen;                    // the module's parameters and buffers
  std::vector<std::unique_ptr<Bucket>> buckets;  // ascending batch
  std::mutex warned_mu;
  std::set<int64_t> warned;  // batch sizes warned about running unpadded

  void check_outputs(const std::vector<Tensor>& outputs, int64_t batch) const {
    const auto& specs = package.spec.outputs;
    if (outputs.size() != specs.size())
      throw InvalidArgument("Predictor: the model returns " + std::to_string(outputs.size()) + " outputs, the package declares " +
                            std::to_string(specs.size()));
    for (size_t j = 0; j < specs.size(); ++j) {
      Shape want = specs[j].shape;
      want[0] = batch;
      const TensorMeta meta{want, dtype_from_kserve(specs[j].datatype)};
      if (outputs[j].meta() != meta)
        throw InvalidArgument("Predictor: output '" + specs[j].name + "' is " + meta_str(outputs[j].meta()) +
                              ", the package declares " + meta_str(meta));
    }
  }

  std::vector<Tensor> make_inputs(int64_t batch, Device d) const {
    std::vector<Tensor> in;
    for (const auto& io : package.spec.inputs) {
      Shape shape = io.shape;
      shape[0] = batch;
      in.push_back(Tensor::zeros(shape, dtype_from_kserve(io.datatype), d));
    }
    return in;
  }

  BucketInfo capture(Bucket& b) {  // caller holds b.mu
    if (!b.graph) {
      const auto t0 = std::chrono::steady_clock::now();
      b.inputs = make_inputs(b.batch, opt.device);
      auto g = std::make_unique<graphs::HPUGraph>(opt.device);
      NoGradGuard no_grad;
      try {
        g->capture(
            [&] {
              b.outputs = module->forward_all(b.inputs);  // alive at capture_end: the graph's outputs
              for (auto& o : b.outputs) o = ops::contiguous(o);
              check_outputs(b.outputs, b.batch);
            },
            {.frozen = frozen});
      } catch (...) {
        b.outputs.clear();
        throw;
      }
      const graphs::HPUGraphStats& st = g->stats();
      const graphs::Executable& exe = g->executable();
      b.info = {b.batch,
                true,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                st.compile_ms,
                exe.arena_bytes(),
                exe.buffer_bytes(),
                exe.constant_bytes(),
                st.disk_cache_hit,
                st.constants_cache_hit};
      b.index_rows = index_rows(*g, b.inputs);
      g->mark_user_inputs(b.inputs);  // replay_host's order: the package's inputs and outputs
      g->mark_user_outputs(b.outputs);
      b.graph = std::move(g);
    }
    return b.info;
  }

  // Per model input: the rows of the embedding table it indexes directly in the captured graph
  // (the smallest if several), or 0. A replayed kernel cannot throw, so ids are checked before.
  static std::vector<int64_t> index_rows(const graphs::HPUGraph& g, const std::vector<Tensor>& inputs) {
    const graphs::Graph& gr = g.executable().graph();
    std::vector<int64_t> rows(inputs.size(), 0);
    for (const auto& n : gr.nodes) {
      if (!graphs::is_op(n, graphs::known_ops().embedding)) continue;
      const graphs::Node& ids = gr.nodes[n.inputs[0]];
      if (ids.kind != graphs::Node::Kind::Input) continue;
      const TensorImpl* s = g.static_inputs()[ids.input_index].impl();
      const int64_t table = gr.nodes[n.inputs[1]].meta.shape[0];
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].impl() == s) rows[i] = rows[i] ? std::min(rows[i], table) : table;
    }
    return rows;
  }

  // Throws naming the input, the element and its value when an id is outside [0, rows).
  static void check_ids(const std::string& input, const void* data, DType t, int64_t n, int64_t rows) {
    auto check = [&](const auto* p) {
      for (int64_t k = 0; k < n; ++k)
        if (p[k] < 0 || static_cast<int64_t>(p[k]) >= rows)
          throw InvalidArgument("input '" + input + "': element " + std::to_string(k) + " is " +
                                std::to_string(static_cast<int64_t>(p[k])) + ", outside the embedding table's " +
                                std::to_string(rows) + " rows (valid ids: 0 to " + std::to_string(rows - 1) + ")");
    };
    if (t == DType::I64) check(static_cast<const int64_t*>(data));
    else if (t == DType::I32) check(static_cast<const int32_t*>(data));
  }

  void release(Bucket& b) {  // caller holds b.mu
    b.graph.reset();
    b.inputs.clear();
    b.outputs.clear();
    b.info.captured = false;
  }

  // The smallest bucket (not left out) that holds `batch`, or null when it is above them all.
  Bucket* bucket_for(int64_t batch) {
    for (auto& b : buckets)
      if (!b->left_out && b->batch >= batch) return b.get();
    return nullptr;
  }

  // Above the largest bucket: the module runs on this batch directly, no capture, no padding.
  void run_unpadded(const std::vector<const void*>& in, int64_t batch, const std::vector<void*>& out) {
    {
      std::lock_guard lk(warned_mu);
      int64_t largest = 0;
      for (const auto& b : buckets)
        if (!b->left_out) largest = b->batch;
      if (warned.insert(batch).second)
        spdlog::warn("Predictor '{}': batch {} is above the largest bucket{}; running it unpadded without a "
                     "captured graph (add a bucket to capture it)",
                     package.spec.name, batch, largest ? " " + std::to_string(largest) : " (none captured)");
    }
    NoGradGuard no_grad;
    std::vector<Tensor> host = make_inputs(batch, Device());
    for (size_t i = 0; i < in.size(); ++i) std::memcpy(host[i].raw_data(), in[i], host[i].meta().bytes());
    std::vector<Tensor> dev;
    for (const auto& h : host) dev.push_back(h.to(opt.device));
    std::vector<Tensor> outputs = module->forward_all(dev);
    check_outputs(outputs, batch);
    for (size_t j = 0; j < outputs.size(); ++j) {
      Tensor o = outputs[j].contiguous().to(Device());
      std::memcpy(out[j], o.raw_data(), o.meta().bytes());
    }
  }
};

Predictor::Predictor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Predictor::~Predictor() = default;

std::unique_ptr<Predictor> Predictor::load(const std::filesystem::path& dir, const PredictorOptions& opt) {
  auto impl = std::make_unique<Impl>();
  const bool onnx = !std::filesystem::exists(dir / "model.json") && std::filesystem::exists(dir / "model.onnx");
  impl->package = onnx ? import_onnx(dir / "model.onnx", &impl->module, opt.device)
                        : load_package(dir, &impl->module, opt.device);
  for (const auto& io : impl->package.spec.inputs)
    for (size_t d = 1; d < io.shape.size(); ++d)
      if (io.shape[d] < 0)
        throw InvalidArgument("Predictor: input '" + io.name + "': dimension " + std::to_string(d) +
                              " is dynamic; the Predictor serves only a dynamic batch");
  impl->opt = opt;
  impl->module->eval();
  impl->module->to(opt.device);
  for (auto& [name, t] : impl->module->named_parameters()) impl->frozen.push_back(*t);
  for (auto& [name, t] : impl->module->named_buffers()) impl->frozen.push_back(*t);
  std::vector<int64_t> sizes;
  try {
    sizes = normalize_buckets(opt.batch_buckets);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("Predictor: ") + e.what());
  }
  for (int64_t b : sizes) {
    auto bucket = std::make_unique<Bucket>();
    bucket->batch = b;
    bucket->info.batch = b;
    impl->buckets.push_back(std::move(bucket));
  }
  return std::unique_ptr<Predictor>(new Predictor(std::move(impl)));
}

const ModelPackage& Predictor::package() const { return impl_->package; }
int64_t Predictor::input_size(size_t i) const { return sample_size(impl_->package.spec.inputs.at(i)); }
int64_t Predictor::output_size(size_t i) const { return sample_size(impl_->package.spec.outputs.at(i)); }
DType Predictor::input_dtype(size_t i) const { return dtype_from_kserve(impl_->package.spec.inputs.at(i).datatype); }
DType Predictor::output_dtype(size_t i) const { return dtype_from_kserve(impl_->package.spec.outputs.at(i).datatype); }

std::vector<BucketInfo> Predictor::capture_all(const CaptureAllOptions& opt) {
  std::vector<BucketInfo> r;
  size_t used = 0;
  bool over = false;
  const size_t n = impl_->buckets.size();
  for (size_t k = 0; k < n; ++k) {
    Bucket& b = *impl_->buckets[k];
    std::lock_guard lk(b.mu);
    if (!over && !b.left_out) {
      if (opt.progress) opt.progress(k, n, b.batch);
      BucketInfo info = impl_->capture(b);
      const size_t cost = info.arena_bytes + info.constant_bytes;
      if (opt.memory_budget && used + cost > opt.memory_budget) {
        impl_->release(b);
        over = true;
      } else {
        used += cost;
        r.push_back(info);
        continue;
      }
    }
    if (opt.memory_budget) b.left_out = true;
    BucketInfo info = b.info;
    info.captured = false;
    r.push_back(info);
  }
  if (opt.progress) opt.progress(n, n, 0);
  return r;
}

std::vector<int64_t> Predictor::buckets() const {
  std::vector<int64_t> r;
  for (const auto& b : impl_->buckets)
    if (!b->left_out) r.push_back(b->batch);
  return r;
}

void Predictor::run(const std::vector<const void*>& inputs, int64_t batch, const std::vector<void*>& outputs) {
  const auto& spec = impl_->package.spec;
  if (inputs.size() != spec.inputs.size() || outputs.size() != spec.outputs.size())
    throw InvalidArgument("Predictor::run: the model has " + std::to_string(spec.inputs.size()) + " inputs and " +
                          std::to_string(spec.outputs.size()) + " outputs, got " + std::to_string(inputs.size()) + " and " +
                          std::to_string(outputs.size()));
  if (batch <= 0) throw InvalidArgument("Predictor::run: batch must be positive");
  Bucket* b = impl_->bucket_for(batch);
  if (!b) return impl_->run_unpadded(inputs, batch, outputs);
  if (batch == b->batch) {  // a full bucket: the graph reads and writes the caller's buffers
    std::lock_guard lk(b->mu);
    impl_->capture(*b);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (b->index_rows[i] > 0)
        Impl::check_ids(spec.inputs[i].name, inputs[i], b->inputs[i].dtype(), batch * input_size(i), b->index_rows[i]);
    b->graph->replay_host(inputs, outputs);
    return;
  }
  run_staged(
      batch,
      [&](const std::vector<void*>& in) {
        for (size_t i = 0; i < in.size(); ++i)
          std::memcpy(in[i], inputs[i], static_cast<size_t>(batch) * dtype_size(input_dtype(i)) * input_size(i));
      },
      [&](const std::vector<const void*>& out) {
        for (size_t j = 0; j < out.size(); ++j)
          std::memcpy(outputs[j], out[j], static_cast<size_t>(batch) * dtype_size(output_dtype(j)) * output_size(j));
      });
}

void Predictor::run_staged(int64_t batch, const Fill& fill, const Take& take) {
  const auto& spec = impl_->package.spec;
  if (batch <= 0) throw InvalidArgument("Predictor::run_staged: batch must be positive");
  Bucket* found = impl_->bucket_for(batch);
  if (!found) {  // above the largest bucket: temporary buffers around the unpadded run
    std::vector<std::vector<uint8_t>> in(spec.inputs.size()), out(spec.outputs.size());
    std::vector<void*> in_ptrs;
    std::vector<const void*> in_const;
    std::vector<void*> out_ptrs;
    for (size_t i = 0; i < in.size(); ++i) {
      in[i].resize(static_cast<size_t>(batch) * dtype_size(input_dtype(i)) * input_size(i));
      in_ptrs.push_back(in[i].data());
      in_const.push_back(in[i].data());
    }
    for (size_t j = 0; j < out.size(); ++j) {
      out[j].resize(static_cast<size_t>(batch) * dtype_size(output_dtype(j)) * output_size(j));
      out_ptrs.push_back(out[j].data());
    }
    fill(in_ptrs);
    impl_->run_unpadded(in_const, batch, out_ptrs);
    take(std::vector<const void*>(out_ptrs.begin(), out_ptrs.end()));
    return;
  }
  Bucket& b = *found;
  std::lock_guard lk(b.mu);
  impl_->capture(b);
  std::vector<void*> in(b.inputs.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = idle_buffer(b.inputs[i]);
  fill(in);
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t sample = dtype_size(b.inputs[i].dtype()) * input_size(i);
    if (b.index_rows[i] > 0)
      Impl::check_ids(spec.inputs[i].name, in[i], b.inputs[i].dtype(), batch * input_size(i), b.index_rows[i]);
    std::memset(static_cast<uint8_t*>(in[i]) + batch * sample, 0, (b.batch - batch) * sample);  // valid token ids too
  }
  b.graph->replay();
  std::vector<const void*> out(b.outputs.size());
  for (size_t j = 0; j < out.size(); ++j) out[j] = idle_buffer(b.outputs[j]);
  take(out);
}

}  // namespace hg::models
