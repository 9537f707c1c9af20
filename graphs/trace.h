// Internal: the per-device trace that lazy mode and HPU graph capture record into.
//
//   Trace& t = trace_for(dev);
//   std::lock_guard lk(t.mu);
//   ClosedTrace c = close_trace(t);   // graph with the still-referenced values as outputs
//   abort_values(c, "capture aborted");  // or: the values become unusable, naming their op
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "graphs/executable.h"
#include "graphs/ir.h"

namespace hg::graphs {

struct TracedValue : LazyValue {
  TracedValue(Device d, uint64_t g, int n) : device(d), generation(g), node(n) {}
  Device device;
  uint64_t generation;
  int node;
};

// Marks a value recorded in a trace that was dropped (an aborted capture): using it throws
// InvalidArgument naming the op that produced it and `why`.
struct AbortedValue : LazyValue {
  AbortedValue(std::string o, std::string w) : op(std::move(o)), why(std::move(w)) {}
  std::string op, why;
};

struct Trace {
  std::mutex mu;
  Graph graph;
  std::vector<Tensor> externals;                      // inputs, kept alive until the graph runs
  std::unordered_map<TensorImpl*, int> external_node;
  std::vector<std::weak_ptr<TensorImpl>> values;      // per node; empty for inputs
  uint64_t generation = 1;
  bool capturing = false;
};

struct ClosedTrace {
  Graph graph;
  std::vector<Tensor> inputs;
  std::vector<std::shared_ptr<TensorImpl>> outputs;  // same order as graph.outputs
};

Trace& trace_for(Device d);
// Takes the recorded graph (caller holds t.mu), with every value still referenced as an
// output, and starts a new generation.
ClosedTrace close_trace(Trace& t);
// Gives each output its own storage on `d` and clears its lazy mark.
void bind_outputs(const ClosedTrace& c, Device d);
// Locks `t`, takes its graph (close_trace) and ends the capture on its device.
ClosedTrace end_capture(Trace& t);
// Takes what `d`'s trace recorded so far (close_trace under its lock); throws InvalidArgument
// naming `who` while the device is capturing an HPU graph.
ClosedTrace close_pending(Device d, const char* who);
// Compiles `c` through the graph caches (lazy_stats counts it), gives its outputs storage and
// queues its run on `d`; returns the executable. A compile error aborts c's values and rethrows.
std::shared_ptr<const Executable> launch_closed(ClosedTrace& c, Device d);
// Turns every output of `c` into an AbortedValue (the trace it came from will never run).
void abort_values(const ClosedTrace& c, const std::string& why);

// Where a materialized tensor's elements start, without waiting for its device.
inline const void* data_ptr(const Tensor& t) {
  const TensorImpl* i = t.impl();
  return static_cast<const char*>(i->storage->data) + i->offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace hg::graphs
