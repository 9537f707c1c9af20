// Internal: the traces ops are recorded into: each device's lazy trace (lazy mode, every thread)
// and the recordings of HPU graph captures (one thread and one device each).
//
//   Trace& t = trace_for(dev);
//   std::lock_guard lk(t.mu);
//   ClosedTrace c = close_trace(t);   // graph with the still-referenced values as outputs
//   auto r = begin_recording(dev);    // this thread's ops on dev now go to r->trace
//   ClosedTrace g = end_recording(*r);
//   abort_values(g, "capture aborted");  // or: the values become unusable, naming their op
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "graphs/executable.h"
#include "graphs/ir.h"

namespace hg::graphs {

struct TracedValue : LazyValue {
  TracedValue(Device d, uint64_t g, int n, const OpSchema* o, bool c)
      : device(d), generation(g), node(n), op(o), in_capture(c) {}
  Device device;
  uint64_t generation;  // of the trace that recorded it (unique across traces)
  int node;
  const OpSchema* op;   // what produced it, for errors
  bool in_capture;      // recorded by an HPU graph capture (no value before capture_end)
};

// Marks a value recorded in a trace that was dropped (an aborted capture): using it throws
// InvalidArgument naming the op that produced it and `why`.
struct AbortedValue : LazyValue {
  AbortedValue(std::string o, std::string w) : op(std::move(o)), why(std::move(w)) {}
  std::string op, why;
};

uint64_t next_trace_generation();  // process-wide, so a value names the one trace it belongs to

struct Trace {
  std::mutex mu;
  Graph graph;
  std::vector<Tensor> externals;                      // inputs, kept alive until the graph runs
  std::unordered_map<TensorImpl*, int> external_node;
  std::vector<std::weak_ptr<TensorImpl>> values;      // per node; empty for inputs
  uint64_t generation = next_trace_generation();
  bool capture = false;  // an HPU graph capture's recording, else a device's lazy trace
};

// An HPU graph capture in progress: the trace one thread records into for one device. Ops of
// other threads, and of this thread on other devices, do not land in it.
struct Recording {
  explicit Recording(Device d) : device(d) { trace.capture = true; }
  Device device;
  Trace trace;
  std::atomic<bool> ended{false};  // end_recording ran (perhaps on another thread)
};

struct ClosedTrace {
  Graph graph;
  std::vector<Tensor> inputs;
  std::vector<std::shared_ptr<TensorImpl>> outputs;  // same order as graph.outputs
};

Trace& trace_for(Device d);  // d's lazy trace (every thread's lazy ops on d)
// The trace the calling thread captures into on `d`, or null when it is not capturing there.
Trace* recording_for(Device d);
// Starts a capture on the calling thread; throws InvalidArgument when the thread already captures.
std::shared_ptr<Recording> begin_recording(Device d);
// Ends `r` (from any thread) and takes its graph.
ClosedTrace end_recording(Recording& r);
// Takes the recorded graph (caller holds t.mu), with every value still referenced as an
// output, and starts a new generation.
ClosedTrace close_trace(Trace& t);
// Gives each output its own storage on `d` and clears its lazy mark.
void bind_outputs(const ClosedTrace& c, Device d);
// Takes what `d`'s lazy trace recorded so far (close_trace under its lock).
ClosedTrace close_pending(Device d);
// Compiles `c` through the graph caches (lazy_stats counts it), gives its outputs storage and
// queues its run on `d`; returns the executable. A compile error aborts c's values and rethrows.
std::shared_ptr<const Executable> launch_closed(ClosedTrace& c, Device d);
// Turns every output of `c` into an AbortedValue (the trace it came from will never run).
void abort_values(const ClosedTrace& c, const std::string& why);

// Where a materialized tensor's elements start, without waiting for its device.
inline const void* data_ptr(const TensorImpl& i) {
  return static_cast<const char*>(i.storage->data) + i.offset * static_cast<int64_t>(dtype_size(i.meta.dtype));
}
inline const void* data_ptr(const Tensor& t) { return data_ptr(*t.impl()); }

}  // namespace hg::graphs
