#include "models/predictor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/hash.h"
#include "engine/int8_quant.h"
#include "engine/ops.h"
#include "graphs/graph_cache.h"
#include "graphs/hpu_graph.h"
#include "graphs/lru_cache.h"
#include "graphs/rewrite.h"
#include "models/buckets.h"
#include "models/module.h"
#include "models/onnx_import.h"

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

struct Bucket {
  int64_t batch;
  std::atomic<bool> left_out{false};  // by a memory budget
  std::mutex mu;
  std::vector<Tensor> inputs, outputs;  // static buffers of the captured graph
  std::vector<int64_t> index_rows;      // per input: rows of the table it indexes (embedding), or 0
  std::unique_ptr<graphs::HPUGraph> graph;
  BucketInfo info;
};

// One input signature (every input's sample shape) and its batch buckets.
struct Variant {
  std::vector<Shape> in;                         // per input: one sample's shape
  std::vector<std::unique_ptr<Bucket>> buckets;  // ascending batch
  std::mutex mu;                                 // guards out
  std::vector<Shape> out;                        // per output, once a bucket was captured
  std::atomic<size_t> bytes{0};                  // captured arenas + constants
};

// The key of a signature in the LRU: its dimensions as text.
std::string signature_key(const std::vector<Shape>& shapes) {
  std::string k;
  for (const Shape& s : shapes) k += shape_str(s) + ";";
  return k;
}

struct Predictor::Impl {
  ModelPackage package;
  std::filesystem::path dir;
  PredictorOptions opt;
  int64_t calibration_tag = 0;  // > 0 while calibrate_int8 runs: the captures report their ranges
  std::unique_ptr<Module> module;
  std::vector<Tensor> frozen;  // the module's parameters and buffers
  std::vector<int64_t> batch_sizes;
  bool dynamic = false;  // an input has a dynamic dimension besides the batch
  std::shared_ptr<Variant> fixed;  // the one signature of a model without dynamic dimensions
  mutable std::mutex variants_mu;  // guards variants and stats
  graphs::LruCache<std::string, std::shared_ptr<Variant>> variants;
  SignatureStats stats;
  std::mutex warned_mu;
  std::set<int64_t> warned;  // batch sizes warned about running unpadded

  std::shared_ptr<Variant> make_variant(std::vector<Shape> in) const {
    auto v = std::make_shared<Variant>();
    v->in = std::move(in);
    for (int64_t b : batch_sizes) {
      auto bucket = std::make_unique<Bucket>();
      bucket->batch = b;
      bucket->info.batch = b;
      v->buckets.push_back(std::move(bucket));
    }
    return v;
  }

  // The signature of `shapes` (checked against the spec), made on first use.
  std::shared_ptr<Variant> variant(const std::vector<Shape>& shapes) {
    const auto& specs = package.spec.inputs;
    if (!dynamic) {
      if (!shapes.empty() && shapes != fixed->in)
        throw InvalidArgument("Predictor: model '" + package.spec.name + "' has fixed input shapes; got sample shapes " +
                              signature_key(shapes));
      return fixed;
    }
    if (shapes.size() != specs.size())
      throw InvalidArgument("Predictor: model '" + package.spec.name + "' has dynamic dimensions: give the sample shape of each of its " +
                            std::to_string(specs.size()) + " inputs, got " + std::to_string(shapes.size()));
    const size_t lead = batch_dims();
    for (size_t i = 0; i < specs.size(); ++i) {
      const Shape& want = specs[i].shape;
      if (shapes[i].size() + lead != want.size())
        throw InvalidArgument("input '" + specs[i].name + "': a sample has " + std::to_string(shapes[i].size()) +
                              " dimensions, the model takes " + std::to_string(want.size() - lead) + " (shape " +
                              shape_str(want) + ")");
      for (size_t d = 0; d < shapes[i].size(); ++d)
        if (want[d + lead] >= 0 ? shapes[i][d] != want[d + lead] : shapes[i][d] < 1)
          throw InvalidArgument("input '" + specs[i].name + "': dimension " + std::to_string(d + lead) + " is " +
                                std::to_string(shapes[i][d]) + "; the model takes " +
                                (want[d + lead] >= 0 ? std::to_string(want[d + lead]) : std::string("1 or more")) +
                                " (shape " + shape_str(want) + ")");
      if (!capped_sample(shapes[i]))
        throw InvalidArgument("input '" + specs[i].name + "': a sample of shape " + shape_str(shapes[i]) + " is too large");
    }
    const std::string key = signature_key(shapes);
    std::lock_guard lk(variants_mu);
    if (auto* v = variants.get(key)) return *v;
    ++stats.seen;
    std::shared_ptr<Variant> v = make_variant(shapes);
    put_locked(key, v);
    return v;
  }

  // Under variants_mu: (re)inserts with its current bytes; evicted signatures free their graphs
  // once no run holds them.
  void put_locked(const std::string& key, std::shared_ptr<Variant> v) {
    const uint64_t before = variants.stats().evictions;
    variants.put(key, std::move(v));
    stats.evictions += variants.stats().evictions - before;
  }

  static bool capped_sample(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s)
      if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 31)) return false;
    return true;
  }

  // The outputs' sample shapes: fixed by the spec, or recorded at a signature's first capture.
  void check_outputs(Variant& v, const std::vector<Tensor>& outputs, int64_t batch) const {
    const auto& specs = package.spec.outputs;
    if (outputs.size() != specs.size())
      throw InvalidArgument("Predictor: the model returns " + std::to_string(outputs.size()) + " outputs, the package declares " +
                            std::to_string(specs.size()));
    const size_t lead = batch_dims();
    std::lock_guard lk(v.mu);
    for (size_t j = 0; j < specs.size(); ++j) {
      const DType dt = dtype_from_kserve(specs[j].datatype);
      const Shape& got = outputs[j].shape();
      bool ok = outputs[j].dtype() == dt && got.size() == specs[j].shape.size() && (!lead || got[0] == batch);
      for (size_t d = lead; ok && d < got.size(); ++d)
        ok = specs[j].shape[d] < 0 || specs[j].shape[d] == got[d];
      if (ok && v.out.size() == specs.size()) ok = Shape(got.begin() + lead, got.end()) == v.out[j];
      if (!ok) {
        Shape want = specs[j].shape;
        if (lead) want[0] = batch;
        throw InvalidArgument("Predictor: output '" + specs[j].name + "' is " + meta_str(outputs[j].meta()) +
                              ", the package declares " + meta_str({want, dt}) +
                              (v.out.size() == specs.size() ? " (this signature gave " + shape_str(v.out[j]) + " before)" : ""));
      }
    }
    if (v.out.size() != specs.size()) {
      v.out.clear();
      for (const Tensor& o : outputs) v.out.emplace_back(o.shape().begin() + lead, o.shape().end());
    }
  }

  std::vector<Tensor> make_inputs(const Variant& v, int64_t batch, Device d) const {
    std::vector<Tensor> in;
    for (size_t i = 0; i < v.in.size(); ++i) {
      Shape shape = v.in[i];
      if (package.spec.batched) shape.insert(shape.begin(), batch);  // unbatched: the batch is 1
      in.push_back(Tensor::zeros(shape, dtype_from_kserve(package.spec.inputs[i].datatype), d));
    }
    return in;
  }

  BucketInfo capture(Variant& v, Bucket& b) {  // caller holds b.mu
    if (!b.graph) {
      const auto t0 = std::chrono::steady_clock::now();
      b.inputs = make_inputs(v, b.batch, opt.device);
      auto g = std::make_unique<graphs::HPUGraph>(opt.device);
      NoGradGuard no_grad;
      try {
        g->capture(
            [&] {
              b.outputs = module->forward_all(b.inputs);  // alive at capture_end: the graph's outputs
              for (auto& o : b.outputs) o = ops::contiguous(o);
              check_outputs(v, b.outputs, b.batch);
            },
            {.frozen = frozen, .precision = opt.precision, .int8_ranges = opt.int8_ranges,
             .int8_calibration_tag = calibration_tag});
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
                st.constants_cache_hit,
                dynamic ? v.in : std::vector<Shape>{}};
      b.index_rows = index_rows(*g, b.inputs);
      g->mark_user_inputs(b.inputs);  // replay_host's order: the package's inputs and outputs
      g->mark_user_outputs(b.outputs);
      b.graph = std::move(g);
      v.bytes += b.info.arena_bytes + b.info.constant_bytes;
      if (dynamic) {
        std::lock_guard lk(variants_mu);
        ++stats.captures;
      }
    }
    return b.info;
  }

  // A dynamic signature's bytes changed (a capture): its LRU cost follows, which may evict others.
  void recost(const std::vector<Shape>& shapes) {
    if (!dynamic) return;
    const std::string key = signature_key(shapes);
    std::lock_guard lk(variants_mu);
    if (auto* v = variants.get(key)) put_locked(key, *v);
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

  void release(Variant& v, Bucket& b) {  // caller holds b.mu
    v.bytes -= b.info.arena_bytes + b.info.constant_bytes;
    b.graph.reset();
    b.inputs.clear();
    b.outputs.clear();
    b.info.captured = false;
  }

  // The dimensions before a sample's: the batch (1), or none for an unbatched model.
  size_t batch_dims() const { return package.spec.batched ? 1 : 0; }

  // An unbatched model's tensors are whole: one per run.
  void check_unbatched(int64_t batch) const {
    if (!package.spec.batched && batch != 1)
      throw InvalidArgument("Predictor: model '" + package.spec.name + "' has no batch dimension (its tensors are whole); "
                            "a run takes one set of inputs, got a batch of " + std::to_string(batch));
  }

  // The smallest bucket (not left out) that holds `batch`, or null when it is above them all.
  static Bucket* bucket_for(Variant& v, int64_t batch) {
    for (auto& b : v.buckets)
      if (!b->left_out && b->batch >= batch) return b.get();
    return nullptr;
  }

  // Elements of one sample of input i / output j under signature v.
  static int64_t in_elements(const Variant& v, size_t i) { return numel(v.in[i]); }
  int64_t out_elements(Variant& v, size_t j) {
    std::lock_guard lk(v.mu);
    return numel(v.out.at(j));
  }

  // The outputs' sample shapes of v, capturing its smallest bucket to learn them.
  std::vector<Shape> learn_outputs(Variant& v) {
    {
      std::lock_guard lk(v.mu);
      if (v.out.size() == package.spec.outputs.size()) return v.out;
    }
    Bucket* b = bucket_for(v, 1);
    if (!b) {  // no bucket: a batch of one, unpadded
      std::vector<std::vector<uint8_t>> in(v.in.size());
      std::vector<const void*> ptrs;
      for (size_t i = 0; i < in.size(); ++i) {
        in[i].assign(static_cast<size_t>(in_elements(v, i)) * dtype_size(dtype_from_kserve(package.spec.inputs[i].datatype)), 0);
        ptrs.push_back(in[i].data());
      }
      run_unpadded(v, ptrs, 1, {});
    } else {
      std::lock_guard lk(b->mu);
      capture(v, *b);
      recost(v.in);
    }
    std::lock_guard lk(v.mu);
    return v.out;
  }

  // Above the largest bucket: the module runs on this batch directly, no capture, no padding
  // (in FP32; quiet: as the reference of check_precision, not warned about).
  // out empty: only the output shapes are learnt.
  void run_unpadded(Variant& v, const std::vector<const void*>& in, int64_t batch, const std::vector<void*>& out,
                    bool quiet = false) {
    if (!out.empty() && !quiet) {
      std::lock_guard lk(warned_mu);
      int64_t largest = 0;
      for (const auto& b : v.buckets)
        if (!b->left_out) largest = b->batch;
      if (warned.insert(batch).second)
        spdlog::warn("Predictor '{}': batch {} is above the largest bucket{}; running it unpadded without a "
                     "captured graph (add a bucket to capture it)",
                     package.spec.name, batch, largest ? " " + std::to_string(largest) : " (none captured)");
    }
    NoGradGuard no_grad;
    std::vector<Tensor> host = make_inputs(v, batch, Device());
    for (size_t i = 0; i < in.size(); ++i) std::memcpy(host[i].raw_data(), in[i], host[i].meta().bytes());
    std::vector<Tensor> dev;
    for (const auto& h : host) dev.push_back(h.to(opt.device));
    std::vector<Tensor> outputs = module->forward_all(dev);
    check_outputs(v, outputs, batch);
    for (size_t j = 0; j < out.size(); ++j) {
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
    for (auto& bp : v.buckets) {
      Bucket& b = *bp;
      std::lock_guard lk(b.mu);
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

// The inputs of a precision check or a calibration, for the signature o.signature: o.inputs, or
// generated (models/precision.h); then runs them through the captured graphs in chunks of the
// largest bucket, `each(inputs of the chunk, n, first sample)`.
struct Predictor::Samples {
  std::shared_ptr<Variant> variant;
  int64_t samples = 0;
  std::vector<DType> types;
  std::vector<int64_t> elements;
  std::vector<std::vector<uint8_t>> generated;
  const std::vector<std::vector<uint8_t>>* given = nullptr;  // a samples file is not copied
  const std::vector<std::vector<uint8_t>>& inputs() const { return given ? *given : generated; }
};

Predictor::Samples Predictor::samples(const PrecisionCheckOptions& o) {
  const PackageSpec& spec = impl_->package.spec;
  Samples r;
  r.variant = impl_->variant(o.signature);
  Variant& v = *r.variant;
  std::vector<int64_t> rows;  // the embedding rows each input indexes, known once a bucket is captured
  {
    Bucket& first = *v.buckets.front();
    std::lock_guard lk(first.mu);
    if (!first.graph && !first.left_out) {
      impl_->capture(v, first);
      impl_->recost(v.in);
    }
    rows = first.index_rows;
  }
  r.samples = spec.batched ? o.samples : 1;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    r.types.push_back(input_dtype(i));
    r.elements.push_back(Impl::in_elements(v, i));
  }
  if (o.inputs.empty()) r.generated = precision_sample_inputs(r.types, r.elements, rows, r.samples, o.seed);
  if (!o.inputs.empty()) r.given = &o.inputs;
  bool sized = r.inputs().size() == r.types.size();  // given inputs: checked (run() checks token ids)
  for (size_t i = 0; sized && i < r.inputs().size(); ++i)
    sized = r.inputs()[i].size() == static_cast<size_t>(r.samples * r.elements[i]) * dtype_size(r.types[i]);
  if (!sized)
    throw InvalidArgument("the given inputs do not hold " + std::to_string(r.samples) + " samples of every model input");
  return r;
}

// In chunks of the largest captured bucket, so that every sample runs in a captured graph.
void Predictor::for_each_chunk(const Samples& s, const std::function<void(const std::vector<const void*>&, int64_t, int64_t)>& each) {
  const std::vector<int64_t> caught = impl_->package.spec.batched ? buckets() : std::vector<int64_t>{1};
  const int64_t chunk = caught.empty() ? 1 : caught.back();
  for (int64_t first = 0; first < s.samples; first += chunk) {
    const int64_t n = std::min(chunk, s.samples - first);
    std::vector<const void*> in;
    for (size_t i = 0; i < s.inputs().size(); ++i)
      in.push_back(s.inputs()[i].data() + first * s.elements[i] * dtype_size(s.types[i]));
    each(in, n, first);
  }
}

PrecisionReport Predictor::check_precision(const PrecisionCheckOptions& o) {
  PrecisionReport r;
  r.precision = impl_->opt.precision;
  if (r.precision == graphs::Precision::Fp32 || o.samples <= 0) return r;
  Samples in;
  try {
    in = samples(o);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("check_precision: ") + e.what());
  }
  Variant& v = *in.variant;
  const std::vector<Shape> out_shapes = impl_->learn_outputs(v);
  const int64_t samples = in.samples;
  std::vector<std::vector<uint8_t>> low(impl_->package.spec.outputs.size()), ref(low.size());
  for (size_t j = 0; j < low.size(); ++j) {
    low[j].resize(static_cast<size_t>(samples * numel(out_shapes[j])) * dtype_size(output_dtype(j)));
    ref[j].resize(low[j].size());
  }
  for_each_chunk(in, [&](const std::vector<const void*>& x, int64_t n, int64_t first) {
    std::vector<void*> a, b;
    for (size_t j = 0; j < low.size(); ++j) {
      const size_t at = static_cast<size_t>(first * numel(out_shapes[j])) * dtype_size(output_dtype(j));
      a.push_back(low[j].data() + at);
      b.push_back(ref[j].data() + at);
    }
    run(x, n, a, o.signature);
    impl_->run_unpadded(v, x, n, b, /*quiet=*/true);
  });
  r.samples = samples;
  for (size_t j = 0; j < low.size(); ++j)
    compare_precision_output(r, j, output_dtype(j), low[j].data(), ref[j].data(), samples * numel(out_shapes[j]),
                             out_shapes[j].empty() ? 1 : out_shapes[j].back());
  return r;
}

size_t Predictor::calibrate_int8(const PrecisionCheckOptions& o) {
  if (impl_->opt.precision != graphs::Precision::Int8 || o.samples <= 0) return 0;
  // The session's tag: the model folder's, so that models calibrating at once stay apart and a
  // restart compiles the same calibration graphs (the disk cache serves them).
  const int64_t tag = static_cast<int64_t>(hash64(impl_->dir.string()) & ((uint64_t{1} << 40) - 1)) | 1;
  release_all();
  impl_->calibration_tag = tag;
  kernels::Int8Calibration::start(tag);
  std::vector<std::pair<float, float>> ranges;
  try {
    Samples in = samples(o);
    const std::vector<Shape> out_shapes = impl_->learn_outputs(*in.variant);
    std::vector<std::vector<uint8_t>> sink(impl_->package.spec.outputs.size());
    for (size_t j = 0; j < sink.size(); ++j)
      sink[j].resize(static_cast<size_t>(in.samples * numel(out_shapes[j])) * dtype_size(output_dtype(j)));
    for_each_chunk(in, [&](const std::vector<const void*>& x, int64_t n, int64_t) {
      std::vector<void*> out;
      for (auto& b : sink) out.push_back(b.data());
      run(x, n, out, o.signature);
    });
  } catch (...) {
    kernels::Int8Calibration::stop(tag);
    impl_->calibration_tag = 0;
    release_all();
    throw;
  }
  ranges = kernels::Int8Calibration::stop(tag);
  impl_->calibration_tag = 0;
  release_all();  // the next captures use the ranges
  if (ranges.empty()) return 0;
  auto r = std::make_shared<graphs::Int8Ranges>();
  r->ranges = std::move(ranges);
  impl_->opt.int8_ranges = std::move(r);
  return impl_->opt.int8_ranges->ranges.size();
}

void Predictor::release_all() {
  std::vector<std::shared_ptr<Variant>> all;
  if (impl_->fixed) all.push_back(impl_->fixed);
  {
    std::lock_guard lk(impl_->variants_mu);
    for (const auto& key : impl_->variants.keys())
      if (auto* v = impl_->variants.get(key)) all.push_back(*v);
  }
  for (auto& v : all)
    for (auto& b : v->buckets) {
      std::lock_guard lk(b->mu);
      if (b->graph) impl_->release(*v, *b);
    }
}

}  // namespace hg::models
