// Lazy mode on HPUs: op calls on an `hpu` device record IR nodes instead of running; the
// graph runs at mark_step() (or when a value is read on the host), compiled once per
// structure + input signature and then served from the graph cache.
//
//   hg::graphs::init_lazy_mode_from_env();       // lazy unless HG_LAZY_MODE=0 or PT_HPU_LAZY_MODE=0
//   auto y = hg::ops::relu(hg::ops::linear(x, w, b));   // x, w, b on hpu:0: recorded only
//   hg::graphs::mark_step(hg::Device::hpu(0));   // compile (first time) and launch
//   y.to_vector();                               // waits for hpu:0
//   hg::graphs::lazy_stats();                    // graphs run, cache hits and misses
//
// A host read of a pending value runs mark_step for its device first. Every thread's lazy ops on
// a device go to that device's one trace. On a thread that is capturing an HPU graph
// (graphs/hpu_graph.h), its ops on that device go to the capture instead, and mark_step for the
// device and host reads of captured values throw.
#pragma once
#include <cstdint>

#include "engine/device.h"
#include "engine/tensor.h"

namespace hg::graphs {

// Installs the tracer; `on` = lazy tracing of every HPU op. With `on` false the tracer stays
// installed (HPU graph capture needs it) but ops run eagerly outside captures.
void enable_lazy_mode(bool on = true);
bool lazy_mode_enabled();
// Reads HG_LAZY_MODE, else Habana's PT_HPU_LAZY_MODE (default 1: lazy; 0: eager) and calls
// enable_lazy_mode with it. Any other value throws InvalidArgument naming the variable.
void init_lazy_mode_from_env();

void mark_step(Device d = Device::hpu(0));

struct LazyStats {
  uint64_t steps = 0;
  uint64_t cache_hits = 0;       // compiled executable found in memory
  uint64_t disk_cache_hits = 0;  // optimized graph read from the disk cache (HG_GRAPH_CACHE), kernels prepared
  uint64_t cache_misses = 0;     // compiled from scratch
};
LazyStats lazy_stats();

}  // namespace hg::graphs
