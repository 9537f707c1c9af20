// HPU graphs: capture the ops of a region once, replay them over the same static buffers.
//
//   auto in = hg::Tensor::zeros({8, 64}, hg::DType::F32, hg::Device::hpu(0));   // static input
//   hg::graphs::HPUGraph g(hg::Device::hpu(0));
//   g.capture([&] { out = model.forward(in); },           // recorded, not run; an exception
//             {.frozen = weights});                       // aborts the capture cleanly
//   // (or g.capture_begin({.frozen = weights}); out = model.forward(in); g.capture_end();)
//   in.copy_from(next_batch);
//   g.replay();                              // no dispatch, no allocation; `out` holds the result
//   g.replay_with({batch}, {my_out});        // zero copy: reads `batch`, writes `my_out`
//   g.stats();                               // captures, replays, compile ms, arena bytes, ...
//
// capture_end compiles the recorded graph (passes, memory plan, kernels) and runs it once
// (not with dry_run). Every tensor still referenced at capture_end is a static output;
// tensors from outside the region are static inputs. Frozen tensors (weights of an inference
// graph) must not change while the graph lives: the compiler may fold and pre-pack them.
//
// Capture safety: a capture records only the ops its own thread issues on its device; other
// threads keep running (eagerly, or into the lazy trace), and several threads may capture on one
// device at once. A thread captures into one graph at a time (a nested capture_begin throws); the
// captured region is what runs on the thread that called capture_begin. Reading a captured
// value on the host during capture throws naming the op that produced it; an op whose schema
// says capturable = false throws naming it; an aborted capture (capture_abort, an exception in
// capture(), a compile error, or destroying the graph while capturing) clears the trace, and the
// tensors produced inside it raise a clear error when used. Host-side work on tensors that are
// not traced (copy_from, from_vector) runs once, at capture time, and is not part of the graph:
// fill static inputs before replay(), not inside the captured region. Random ops (dropout) get
// a fresh seed from the device generator at every replay, as Gaudi keeps RNG state per graph.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/tensor.h"
#include "graphs/executable.h"
#include "graphs/runtime.h"

namespace hg::graphs {

struct Recording;  // graphs/trace.h

struct CaptureOptions {
  // Tensors whose values stay fixed for the graph's life (weights): graph inputs sharing their
  // storage become frozen inputs, folded and pre-packed at compile.
  std::vector<Tensor> frozen = {};
  // Compile only: capture_end does not run the graph; outputs hold no values until a replay.
  bool dry_run = false;
  // Bf16: the compiled graph runs its matmuls and convolutions in BF16 (graphs/passes.h,
  // PassOptions::precision); inputs and outputs keep their dtypes.
  Precision precision = Precision::Fp32;
  // Int8: the calibrated input ranges of the INT8 convolutions (PassOptions::int8_ranges).
  std::shared_ptr<const Int8Ranges> int8_ranges = nullptr;
  int64_t int8_calibration_tag = 0;  // PassOptions::int8_calibration_tag
};

struct HPUGraphStats {
  uint64_t captures = 0;           // successful capture_end calls
  uint64_t aborted_captures = 0;   // captures dropped (abort, exception, compile error)
  uint64_t replays = 0;            // replay() calls
  uint64_t zero_copy_replays = 0;  // replay_with() and replay_host() calls
  double compile_ms = 0;           // the last capture_end's compile time (cache lookups included)
  bool memory_cache_hit = false;   // the last capture_end found its executable in memory
  bool disk_cache_hit = false;     // ... or its optimized graph in the disk cache (HG_GRAPH_CACHE)
  bool constants_cache_hit = false;  // ... and the constants computed from its frozen inputs
  size_t nodes = 0, steps = 0;     // recorded nodes; steps after the passes
  size_t inputs = 0, frozen_inputs = 0, outputs = 0;
  size_t arena_bytes = 0;
};

class HPUGraph {
 public:
  explicit HPUGraph(Device d = Device::hpu(0));
  ~HPUGraph();  // aborts a capture in progress
  HPUGraph(const HPUGraph&) = delete;
  HPUGraph& operator=(const HPUGraph&) = delete;

  void capture_begin(const CaptureOptions& opt = {});
  void capture_end();
  // Drops the recording: the trace is cleared, the device stops capturing, and the values
  // recorded so far become unusable (an error names the op that produced them).
  void capture_abort();
  // capture_begin, body(), capture_end; aborts and rethrows if body or the compile throws.
  void capture(const std::function<void()>& body, const CaptureOptions& opt = {});
  bool capturing() const { return capturing_; }

  void replay(bool asynchronous = false);
  // Replay reading the caller's inputs and writing the caller's outputs (no copy into or out of
  // the static buffers; the static outputs keep their old values). inputs[i] stands for user
  // input i, outputs[j] for user output j (see mark_user_inputs/outputs); each is checked against
  // the captured meta and device (InvalidArgument naming the mismatching one). An empty
  // `outputs` writes the static outputs. Asynchronous replays keep the buffers alive until run.
  void replay_with(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs = {},
                   bool asynchronous = false);
  // Which tensors replay_with's arguments stand for, after capture_end. Default inputs: every
  // static input that is neither frozen nor an RNG seed, in static_inputs() order; default
  // outputs: static_outputs(). A user input the graph never reads is allowed (checked, not read);
  // one the graph reads through views (a reshape of it) binds each view at its offset.
  // replay_with for buffers in host memory, which this build's devices compute in (the host
  // backend is the only one): inputs[i] / outputs[j] point at contiguous data of user input i's
  // and user output j's captured meta, and must not overlap the graph's static buffers. Runs in
  // device order and waits; nothing is copied and nothing allocated beyond two pointer arrays.
  void replay_host(const std::vector<const void*>& inputs, const std::vector<void*>& outputs);
  void mark_user_inputs(const std::vector<Tensor>& placeholders);
  void mark_user_outputs(const std::vector<Tensor>& outputs);

  void reset();  // frees the graph and its arena (statistics are kept)

  bool captured() const { return rt_ != nullptr; }
  const Executable& executable() const { return rt_->program(); }
  size_t arena_bytes() const { return rt_ ? rt_->arena_bytes() : 0; }
  const std::vector<Tensor>& static_inputs() const { return inputs_; }
  const std::vector<Tensor>& static_outputs() const { return outputs_; }
  Device device() const { return device_; }
  const HPUGraphStats& stats() const { return stats_; }

 private:
  void launch(bool asynchronous);
  static constexpr size_t kDepth = 4;  // asynchronous replays queued at once

  Device device_;
  bool capturing_ = false;
  std::shared_ptr<Recording> recording_;  // while capturing
  CaptureOptions opt_;
  std::unique_ptr<Runtime> rt_;
  std::vector<Tensor> inputs_, outputs_;
  std::vector<const void*> in_ptrs_;  // the static buffers
  std::vector<bool> frozen_;          // per static input
  std::vector<void*> out_ptrs_;
  // Per user input: the static inputs that read it (the placeholder itself, or views of it such
  // as a reshape) and each one's byte offset into it; empty when the graph does not read it.
  std::vector<std::vector<std::pair<size_t, size_t>>> user_in_;
  std::vector<TensorMeta> user_in_meta_;
  std::vector<size_t> user_out_;    // per user output: its static output index
  HPUGraphStats stats_;
};

}  // namespace hg::graphs
