#include "graphs/hpu_graph.h"

#include "engine/error.h"
#include "engine/generator.h"
#include "engine/lazy.h"
#include "graphs/graph_cache.h"
#include "graphs/lazy.h"
#include "graphs/trace.h"

namespace hg::graphs {

HPUGraph::HPUGraph(Device d) : device_(d) {
  if (!d.is_hpu()) throw DeviceError("HPUGraph needs an hpu device, got " + d.str());
  device_backend(d);
}

HPUGraph::~HPUGraph() {
  if (capturing_) {
    Trace& t = trace_for(device_);
    std::lock_guard lk(t.mu);
    close_trace(t);
    t.capturing = false;
  }
  if (arena_) synchronize(device_);  // a queued replay may still use the arena
}

void HPUGraph::capture_begin() {
  if (capturing_) throw InvalidArgument("HPUGraph::capture_begin: a capture is already in progress");
  if (!lazy_backend()) enable_lazy_mode(false);  // the tracer must be installed to record
  mark_step(device_);                             // flush work recorded before the capture
  Trace& t = trace_for(device_);
  std::lock_guard lk(t.mu);
  if (t.capturing) throw InvalidArgument("HPUGraph::capture_begin: another capture is active on " + device_.str());
  reset();
  t.capturing = true;
  capturing_ = true;
}

void HPUGraph::capture_end() {
  if (!capturing_) throw InvalidArgument("HPUGraph::capture_end without capture_begin");
  Trace& t = trace_for(device_);
  ClosedTrace c;
  {
    std::lock_guard lk(t.mu);
    c = close_trace(t);
    t.capturing = false;
    capturing_ = false;
  }
  if (c.outputs.empty()) throw InvalidArgument("HPUGraph::capture_end: nothing was captured on " + device_.str());
  exe_ = compile_cached(c.graph);
  bind_outputs(c, device_);
  inputs_ = std::move(c.inputs);
  outputs_.clear();
  for (auto& o : c.outputs) outputs_.emplace_back(o);
  arena_ = std::make_shared<Storage>(device_, std::max<size_t>(exe_->arena_bytes(), 1));
  for (const auto& x : inputs_)
    in_ptrs_.push_back(static_cast<const char*>(x.impl()->storage->data) +
                       x.impl()->offset * static_cast<int64_t>(dtype_size(x.dtype())));
  for (const auto& o : outputs_) out_ptrs_.push_back(o.impl()->storage->data);
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (inputs_[i].impl()->rng_seed) rng_inputs_.push_back(i);
  replay();
}

void HPUGraph::replay(bool asynchronous) {
  if (!exe_) throw InvalidArgument("HPUGraph::replay before a capture");
  if (!rng_inputs_.empty()) {  // new seeds, written in queue order just before this replay
    std::vector<int64_t> seeds;
    Generator& gen = default_generator(device_);
    for (size_t k = 0; k < rng_inputs_.size(); ++k) seeds.push_back(static_cast<int64_t>(gen.next()));
    auto run = [this, seeds = std::move(seeds)] {
      for (size_t k = 0; k < rng_inputs_.size(); ++k)
        *static_cast<int64_t*>(const_cast<void*>(in_ptrs_[rng_inputs_[k]])) = seeds[k];
      exe_->run(arena_->data, in_ptrs_.data(), out_ptrs_.data());
    };
    if (asynchronous) device_backend(device_).enqueue(run);
    else device_backend(device_).run_sync(run);
    return;
  }
  auto run = [this] { exe_->run(arena_->data, in_ptrs_.data(), out_ptrs_.data()); };
  if (asynchronous) device_backend(device_).enqueue(run);
  else device_backend(device_).run_sync(run);
}

void HPUGraph::reset() {
  if (arena_) synchronize(device_);
  exe_.reset();
  inputs_.clear();
  outputs_.clear();
  in_ptrs_.clear();
  out_ptrs_.clear();
  rng_inputs_.clear();
  arena_.reset();
}

}  // namespace hg::graphs
