// A loaded model ready to serve: one captured HPU graph per batch bucket, replayed per call;
// with dynamic dimensions besides the batch, one set of buckets per input signature.
//
//   auto p = hg::models::Predictor::load("models/repository/digits_mlp/1", {});
//   for (auto& b : p->capture_all()) printf("batch %lld: %.1f ms, arena %zu B\n", ...);
//   std::vector<float> out(p->output_size(0) * 3);
//   p->run({in.data()}, 3, {out.data()});   // batch 3 runs in the batch-4 bucket, padding dropped
//   p->input_dtype(0);                       // e.g. DType::I64 for token ids: pass int64_t data
//
// A directory holding model.onnx instead of model.json is imported (models/onnx_import.h).
// run() is thread-safe (one replay of a bucket at a time). A batch is padded to the smallest
// bucket that holds it (models/buckets.h) and the padding stripped from the outputs; a batch
// that fills its bucket is not copied at all (the graph reads and writes the caller's buffers,
// HPUGraph::replay_host); a batch above the largest bucket runs unpadded, without a captured graph (a warning is logged once
// per size). The module's parameters and buffers are frozen in every capture (folded and
// pre-packed), and captures compile through the graph cache (graphs/graph_cache.h): with
// HG_GRAPH_CACHE set, a second process starts from the disk cache. A model whose inputs have
// dynamic dimensions besides the batch (an ONNX export with dynamic_axes {0: batch, 1: seq})
// captures per signature on first use (capture_all captures nothing for it), keeps
// max_signatures of them (LRU) and reports them in signature_stats(). A package that is not
// batched (PackageSpec::batched: an ONNX export whose batch is not dimension 0) runs whole
// tensors, one set per run (batch 1), its "sample" shapes being the whole shapes.
//
//   auto shapes = p->output_shapes({{12}});                  // token ids of length 12 -> {{2}}
//   p->run({ids.data()}, 3, {logits.data()}, {{12}});        // 3 samples of 12 ids each
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/device.h"
#include "models/package.h"
#include "models/precision.h"

namespace hg::models {

struct PredictorOptions {
  Device device = Device::hpu(0);
  std::vector<int64_t> batch_buckets = {1, 2, 4, 8, 16, 32};
  // Models with dynamic dimensions besides the batch: the input signatures (each input's sample
  // shape) kept with their captured graphs, least recently used out; 0: unbounded.
  size_t max_signatures = 16;
  size_t max_signature_bytes = 0;  // their captured graphs' arena + constant bytes
  // false: serve the model without a batch dimension even when its package has one (its tensors
  // are whole, any -1 is a dynamic dimension, each run is one request: a batch of 1).
  bool batched = true;
  // Bf16: the captured graphs run their matmuls and convolutions in BF16 (weights converted and
  // pre-packed at capture; graphs/passes.h). check_precision() measures the cost against FP32. A
  // batch above the largest bucket runs uncaptured, in FP32.
  graphs::Precision precision = graphs::Precision::Fp32;
  // Int8: the calibrated input ranges of the INT8 convolutions (static quantization); null: they
  // measure their input with every call. calibrate_int8() sets them.
  std::shared_ptr<const graphs::Int8Ranges> int8_ranges = nullptr;
};

// A model with dynamic dimensions: the signatures (distinct input sample shapes) met so far, the
// graphs captured for them and the signatures evicted by the limits above.
struct SignatureStats {
  uint64_t seen = 0, captures = 0, evictions = 0;
  size_t live = 0, bytes = 0;
};

struct BucketInfo {
  int64_t batch = 0;
  bool captured = false;    // false: left out (memory budget)
  double capture_ms = 0;    // trace + compile + first run
  double compile_ms = 0;    // the graph cache lookup and compile alone
  size_t arena_bytes = 0;   // the planned arena
  size_t buffer_bytes = 0;  // the sum of the arena's buffers without reuse
  size_t constant_bytes = 0;
  bool disk_hit = false;    // compiled from the disk cache (passes skipped)
  bool constants_hit = false;  // ... with the constants computed from the weights (folding skipped)
  std::vector<Shape> signature;  // dynamic dimensions: the inputs' sample shapes it was captured for
};

struct CaptureAllOptions {
  // Arena + constant bytes all captured buckets may take; 0: no limit. Buckets are captured
  // smallest first; the bucket that would exceed the budget and every larger one are left out
  // (reported with captured = false) and later batches pad to the captured buckets only. A
  // bucket whose cost, predicted from the previous bucket's (its arena grown with the batch), is
  // past the budget is left out before it is captured, so it never allocates.
  size_t memory_budget = 0;
  // Called before each bucket's capture: (index, count, batch).
  std::function<void(size_t, size_t, int64_t)> progress;
  // Dynamic dimensions: the signatures to capture (every input's sample shape), each in every
  // batch bucket, in this order (at most max_signatures of them: the others are reported left
  // out). Empty: a model with dynamic dimensions captures nothing ahead.
  std::vector<std::vector<Shape>> signatures;
};

class Predictor {
 public:
  static std::unique_ptr<Predictor> load(const std::filesystem::path& dir, const PredictorOptions& opt);
  ~Predictor();
  const ModelPackage& package() const;
  // The loaded module, frozen into the captured graphs: do not change its weights. Shared so that
  // another user of the same weights (the text generator of a GPT package) needs no second load.
  std::shared_ptr<Module> module() const;
  // Elements of one sample of input/output i (the shape without the batch dimension); -1 when
  // a dimension besides the batch is dynamic.
  int64_t input_size(size_t i) const;
  int64_t output_size(size_t i) const;
  // Dynamic dimensions besides the batch: the sample shape of every input (a signature; {} for a
  // model without them) gives the sample shape of every output. Captures the smallest batch
  // bucket of a new signature. Throws hg::InvalidArgument naming the input and dimension for a
  // shape the model does not accept.
  std::vector<Shape> output_shapes(const std::vector<Shape>& input_shapes = {});
  SignatureStats signature_stats() const;
  // The element types the package declares (IOSpec::datatype).
  DType input_dtype(size_t i) const;
  DType output_dtype(size_t i) const;
  // Captures every bucket not yet captured (warmup) and reports each, in ascending order (with
  // dynamic dimensions: those of opt.signatures, signature by signature).
  std::vector<BucketInfo> capture_all(const CaptureAllOptions& opt = {});
  // The buckets batches are padded to (ascending; those left out by a budget excluded).
  std::vector<int64_t> buckets() const;
  // inputs[i] holds batch * input_size(i) elements of input_dtype(i) (one per model input, in
  // order); outputs[j] receives batch * output_size(j) elements of output_dtype(j).
  // Dynamic dimensions: input_shapes is the signature (see output_shapes), and the sizes above
  // are those of its sample shapes. One set of captured batch buckets per signature.
  void run(const std::vector<const void*>& inputs, int64_t batch, const std::vector<void*>& outputs,
           const std::vector<Shape>& input_shapes = {});
  // The same for a batch gathered from several requests, with one copy on each side:
  // fill(inputs) writes the batch's samples straight into the bucket's input buffers (one pointer
  // per model input, room for `batch` samples; the padding is zeroed after it), take(outputs)
  // reads the batch's samples from the bucket's output buffers. Both run under the bucket's lock
  // and must not call the Predictor. Above the largest bucket they get temporary buffers.
  using Fill = std::function<void(const std::vector<void*>& inputs)>;
  using Take = std::function<void(const std::vector<const void*>& outputs)>;
  void run_staged(int64_t batch, const Fill& fill, const Take& take, const std::vector<Shape>& input_shapes = {});
  // Runs opt.samples fixed inputs (models/precision.h) through the captured graphs and through
  // the module in FP32, and compares the outputs. A model served in FP32 reports samples = 0.
  PrecisionReport check_precision(const PrecisionCheckOptions& opt = {});
  // Int8: static quantization. Runs opt.samples inputs (a calibration set: precision_samples_file,
  // or generated as check_precision's) through the captured graphs with their convolutions
  // quantizing dynamically, keeps each convolution's input range over all of them, then drops
  // the captured graphs: the next captures (capture_all) run those convolutions with the fixed
  // ranges. Returns the number of ranges; 0 for other precisions or a model without INT8
  // convolutions. Call it before serving (it runs the graphs).
  size_t calibrate_int8(const PrecisionCheckOptions& opt);

 private:
  struct Impl;
  struct Samples;
  explicit Predictor(std::unique_ptr<Impl> impl);
  Samples samples(const PrecisionCheckOptions& o);
  void for_each_chunk(const Samples& s, const std::function<void(const std::vector<const void*>&, int64_t, int64_t)>& each);
  void release_all();  // every captured graph (calibrate_int8)
  std::unique_ptr<Impl> impl_;
};

}  // namespace hg::models
