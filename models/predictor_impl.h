// Internal to models/: the state behind a Predictor (its batch buckets per input signature and
// the captured graphs), shared by predictor.cpp (load, capture, run) and predictor_precision.cpp
// (the precision check and the INT8 calibration).
#pragma once
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "graphs/graph_cache.h"
#include "graphs/hpu_graph.h"
#include "graphs/lru_cache.h"
#include "graphs/rewrite.h"
#include "models/buckets.h"
#include "models/module.h"
#include "models/predictor.h"

namespace hg::models {

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
inline std::string signature_key(const std::vector<Shape>& shapes) {
  std::string k;
  for (const Shape& s : shapes) k += shape_str(s) + ";";
  return k;
}

struct Predictor::Impl {
  ModelPackage package;
  std::filesystem::path dir;
  PredictorOptions opt;
  int64_t calibration_tag = 0;  // > 0 while calibrate_int8 runs: the captures report their ranges
  std::shared_ptr<Module> module;  // shared with a text generator (server/generate.h): one load
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

}  // namespace hg::models
