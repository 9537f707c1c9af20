#include "graphs/hpu_graph.h"

#include <algorithm>
#include <unordered_set>

#include "engine/error.h"
#include "engine/generator.h"
#include "engine/lazy.h"
#include "graphs/graph_cache.h"
#include "graphs/lazy.h"
#include "graphs/trace.h"

namespace hg::graphs {

namespace {

// Throws the hg::Error subclass that fits when `t` cannot stand for a buffer of `want` on `d`.
void check_buffer(const Tensor& t, const TensorMeta& want, Device d, const std::string& what) {
  const std::string where = "HPUGraph::replay_with: " + what;
  if (!t.defined()) throw InvalidArgument(where + " is undefined");
  if (t.device() != d) throw DeviceError(where + " is on " + t.device().str() + ", the graph runs on " + d.str());
  if (t.dtype() != want.dtype)
    throw DTypeError(where + " is " + meta_str(t.meta()) + ", the graph was captured with " + meta_str(want));
  if (t.shape() != want.shape)
    throw ShapeError(where + " is " + meta_str(t.meta()) + ", the graph was captured with " + meta_str(want));
  if (!t.is_contiguous()) throw InvalidArgument(where + " is not contiguous");
}

}  // namespace

HPUGraph::HPUGraph(Device d) : device_(d) {
  if (!d.is_hpu()) throw DeviceError("HPUGraph needs an hpu device, got " + d.str());
  device_backend(d);
}

HPUGraph::~HPUGraph() {
  capture_abort();
  if (rt_) rt_->wait();  // queued replays use the static buffers
}

void HPUGraph::capture_begin(const CaptureOptions& opt) {
  if (capturing_) throw InvalidArgument("HPUGraph::capture_begin: this graph is already capturing on " + device_.str());
  if (!lazy_backend()) enable_lazy_mode(false);  // the tracer must be installed to record
  if (recording_for(device_))
    throw InvalidArgument("HPUGraph::capture_begin: this thread is already capturing on " + device_.str() +
                          " into another HPUGraph; captures cannot nest");
  mark_step(device_);  // flush work recorded before the capture
  for (size_t i = 0; i < opt.frozen.size(); ++i) {
    const Tensor& f = opt.frozen[i];
    if (!f.defined() || f.device() != device_)
      throw InvalidArgument("HPUGraph::capture_begin: frozen tensor " + std::to_string(i) +
                            (f.defined() ? " is on " + f.device().str() + ", not " + device_.str() : " is undefined"));
    materialize(f);
  }
  reset();
  recording_ = begin_recording(device_);
  capturing_ = true;
  opt_ = opt;
}

void HPUGraph::capture_abort() {
  if (!capturing_) return;
  ClosedTrace c = end_recording(*recording_);
  recording_.reset();
  capturing_ = false;
  abort_values(c, "an aborted HPU graph capture on " + device_.str());
  opt_ = {};
  ++stats_.aborted_captures;
}

void HPUGraph::capture(const std::function<void()>& body, const CaptureOptions& opt) {
  capture_begin(opt);
  try {
    body();
  } catch (...) {
    capture_abort();
    throw;
  }
  capture_end();
}

void HPUGraph::capture_end() {
  if (!capturing_) throw InvalidArgument("HPUGraph::capture_end without capture_begin");
  ClosedTrace c = end_recording(*recording_);
  recording_.reset();
  capturing_ = false;
  const CaptureOptions opt = std::move(opt_);
  opt_ = {};
  if (c.outputs.empty()) {
    ++stats_.aborted_captures;
    throw InvalidArgument("HPUGraph::capture_end: nothing was captured on " + device_.str());
  }
  std::unordered_set<const Storage*> frozen_storage;
  for (const Tensor& f : opt.frozen) frozen_storage.insert(f.impl()->storage.get());
  std::vector<const void*> frozen_data(c.inputs.size(), nullptr);
  std::vector<bool> frozen(c.inputs.size(), false);
  for (Node& n : c.graph.nodes) {
    if (n.kind != Node::Kind::Input) continue;
    const Tensor& x = c.inputs[static_cast<size_t>(n.input_index)];
    if (x.impl()->rng_seed || !frozen_storage.count(x.impl()->storage.get())) continue;
    n.frozen = true;
    frozen[static_cast<size_t>(n.input_index)] = true;
    frozen_data[static_cast<size_t>(n.input_index)] = data_ptr(x);
  }
  CompileInfo info;
  std::shared_ptr<const Executable> exe;
  try {
    PassOptions passes = default_pass_options();
    passes.precision = opt.precision;
    passes.int8_ranges = opt.int8_ranges;
    passes.int8_calibration_tag = opt.int8_calibration_tag;
    exe = compile_cached(c.graph, frozen_data, &info, passes);
  } catch (...) {
    abort_values(c, "an HPU graph capture on " + device_.str() + " whose compile failed");
    ++stats_.aborted_captures;
    throw;
  }
  stats_.compile_ms = info.compile_ms;
  stats_.memory_cache_hit = info.memory_hit;
  stats_.disk_cache_hit = info.disk_hit;
  stats_.constants_cache_hit = info.constants_hit;
  bind_outputs(c, device_);
  inputs_ = std::move(c.inputs);
  frozen_ = std::move(frozen);
  for (auto& o : c.outputs) outputs_.emplace_back(o);
  std::vector<size_t> seeds;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    in_ptrs_.push_back(data_ptr(inputs_[i]));
    if (inputs_[i].impl()->rng_seed) seeds.push_back(i);
    else if (!frozen_[i]) {
      user_in_.push_back({{i, 0}});
      user_in_meta_.push_back(inputs_[i].meta());
    }
  }
  for (size_t j = 0; j < outputs_.size(); ++j) {
    out_ptrs_.push_back(outputs_[j].impl()->storage->data);
    user_out_.push_back(j);
  }
  rt_ = std::make_unique<Runtime>(std::move(exe), device_, RuntimeOptions{.depth = kDepth, .seeds = std::move(seeds)});
  const Executable& program = rt_->program();
  ++stats_.captures;
  stats_.nodes = c.graph.nodes.size();
  stats_.steps = program.num_steps();
  stats_.inputs = inputs_.size();
  stats_.frozen_inputs = static_cast<size_t>(std::count(frozen_.begin(), frozen_.end(), true));
  stats_.outputs = outputs_.size();
  stats_.arena_bytes = program.arena_bytes();
  if (!opt.dry_run) {
    rt_->setup(in_ptrs_, out_ptrs_);
    launch(false);
  }
}

void HPUGraph::replay(bool asynchronous) {
  if (!rt_) throw InvalidArgument("HPUGraph::replay before a capture");
  ++stats_.replays;
  rt_->setup(in_ptrs_, out_ptrs_);  // no allocation
  launch(asynchronous);
}

void HPUGraph::launch(bool asynchronous) {
  if (asynchronous) rt_->invoke();
  else rt_->run();
}

void HPUGraph::replay_with(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, bool asynchronous) {
  if (!rt_) throw InvalidArgument("HPUGraph::replay_with before a capture");
  if (inputs.size() != user_in_.size())
    throw InvalidArgument("HPUGraph::replay_with: " + std::to_string(inputs.size()) + " inputs given, the graph has " +
                          std::to_string(user_in_.size()) + " user inputs");
  if (!outputs.empty() && outputs.size() != user_out_.size())
    throw InvalidArgument("HPUGraph::replay_with: " + std::to_string(outputs.size()) +
                          " outputs given, the graph has " + std::to_string(user_out_.size()) + " user outputs");
  for (size_t k = 0; k < inputs.size(); ++k) {
    check_buffer(inputs[k], user_in_meta_[k], device_, "input " + std::to_string(k));
    if (inputs[k].is_lazy()) materialize(inputs[k]);
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    const std::string what = "output " + std::to_string(j);
    check_buffer(outputs[j], outputs_[user_out_[j]].meta(), device_, what);
    if (outputs[j].is_lazy()) materialize(outputs[j]);
    const Storage* s = outputs[j].impl()->storage.get();
    for (size_t k = 0; k < inputs.size() + j; ++k)
      if ((k < inputs.size() ? inputs[k] : outputs[k - inputs.size()]).impl()->storage.get() == s)
        throw InvalidArgument("HPUGraph::replay_with: " + what + " shares memory with " +
                              (k < inputs.size() ? "input " + std::to_string(k)
                                                 : "output " + std::to_string(k - inputs.size())));
    for (const Tensor& x : inputs_)
      if (x.impl()->storage.get() == s)
        throw InvalidArgument("HPUGraph::replay_with: " + what + " shares memory with a static input of the graph");
  }
  rt_->setup(in_ptrs_, out_ptrs_);  // then the caller's buffers replace the static ones
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (const auto& [i, at] : user_in_[k]) rt_->bind_input(i, static_cast<const char*>(data_ptr(inputs[k])) + at);
    if (asynchronous) rt_->keep(inputs[k].impl()->storage);
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    rt_->bind_output(user_out_[j], const_cast<void*>(data_ptr(outputs[j])));
    if (asynchronous) rt_->keep(outputs[j].impl()->storage);
  }
  ++stats_.zero_copy_replays;
  launch(asynchronous);
}

void HPUGraph::replay_host(const std::vector<const void*>& inputs, const std::vector<void*>& outputs) {
  if (!rt_) throw InvalidArgument("HPUGraph::replay_host before a capture");
  if (inputs.size() != user_in_.size() || outputs.size() != user_out_.size())
    throw InvalidArgument("HPUGraph::replay_host: " + std::to_string(inputs.size()) + " inputs and " +
                          std::to_string(outputs.size()) + " outputs given, the graph has " +
                          std::to_string(user_in_.size()) + " and " + std::to_string(user_out_.size()));
  for (size_t k = 0; k < inputs.size(); ++k)
    if (!inputs[k]) throw InvalidArgument("HPUGraph::replay_host: input " + std::to_string(k) + " is null");
  for (size_t j = 0; j < outputs.size(); ++j)
    if (!outputs[j]) throw InvalidArgument("HPUGraph::replay_host: output " + std::to_string(j) + " is null");
  rt_->setup(in_ptrs_, out_ptrs_);  // no allocation: the caller's pointers replace the static ones
  for (size_t k = 0; k < inputs.size(); ++k)
    for (const auto& [i, at] : user_in_[k]) rt_->bind_input(i, static_cast<const char*>(inputs[k]) + at);
  for (size_t j = 0; j < outputs.size(); ++j) rt_->bind_output(user_out_[j], outputs[j]);
  ++stats_.zero_copy_replays;
  launch(false);
}

void HPUGraph::mark_user_inputs(const std::vector<Tensor>& placeholders) {
  if (!rt_) throw InvalidArgument("HPUGraph::mark_user_inputs before a capture");
  std::vector<std::vector<std::pair<size_t, size_t>>> idx;
  std::vector<TensorMeta> metas;
  for (size_t k = 0; k < placeholders.size(); ++k) {
    const Tensor& p = placeholders[k];
    const std::string what = "HPUGraph::mark_user_inputs: placeholder " + std::to_string(k);
    if (!p.defined() || p.device() != device_)
      throw InvalidArgument(what + (p.defined() ? " is on " + p.device().str() : " is undefined"));
    const TensorImpl& pi = *p.impl();
    const size_t p_at = static_cast<size_t>(pi.offset) * dtype_size(p.dtype()), p_bytes = p.meta().bytes();
    // The static inputs over the placeholder's bytes: itself, or a view of it (a reshape).
    std::vector<std::pair<size_t, size_t>> reads;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const TensorImpl& x = *inputs_[i].impl();
      const size_t at = static_cast<size_t>(x.offset) * dtype_size(x.meta.dtype);
      const bool same = &x == &pi;
      if (!same && (!pi.storage || x.storage != pi.storage || at < p_at || at + x.meta.bytes() > p_at + p_bytes)) continue;
      if (frozen_[i] || x.rng_seed)
        throw InvalidArgument(what + " is a frozen input of the graph (or an RNG seed); it cannot be replaced");
      if (!same && (pi.strides != contiguous_strides(p.shape()) || x.strides != contiguous_strides(x.meta.shape)))
        throw InvalidArgument(what + " is read through a strided view (" + meta_str(x.meta) +
                              "); replays cannot bind it");
      reads.emplace_back(i, same ? 0 : at - p_at);
    }
    idx.push_back(std::move(reads));
    metas.push_back(p.meta());
  }
  user_in_ = std::move(idx);
  user_in_meta_ = std::move(metas);
}

void HPUGraph::mark_user_outputs(const std::vector<Tensor>& outs) {
  if (!rt_) throw InvalidArgument("HPUGraph::mark_user_outputs before a capture");
  std::vector<size_t> idx;
  for (size_t k = 0; k < outs.size(); ++k) {
    size_t found = outputs_.size();
    for (size_t j = 0; j < outputs_.size() && found == outputs_.size(); ++j)
      if (outs[k].defined() && (outputs_[j].impl() == outs[k].impl() ||
                                (outputs_[j].impl()->storage == outs[k].impl()->storage && outs[k].impl()->offset == 0 &&
                                 outputs_[j].meta() == outs[k].meta())))
        found = j;
    if (found == outputs_.size())
      throw InvalidArgument("HPUGraph::mark_user_outputs: tensor " + std::to_string(k) +
                            " is not an output of the captured graph (a view of one is not either)");
    idx.push_back(found);
  }
  user_out_ = std::move(idx);
}

void HPUGraph::reset() {
  rt_.reset();  // waits for its queued replays
  inputs_.clear();
  outputs_.clear();
  in_ptrs_.clear();
  out_ptrs_.clear();
  frozen_.clear();
  user_in_.clear();
  user_in_meta_.clear();
  user_out_.clear();
}

}  // namespace hg::graphs
