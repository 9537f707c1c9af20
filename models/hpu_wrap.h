// wrap_in_hpu_graph: a module that captures one HPU graph per input signature and replays it
// (Habana's htcore.hpu.wrap_in_hpu_graph, with LRU eviction instead of an eager fallback at
// max_graphs, statistics and state checks).
//
//   std::shared_ptr<hg::models::Module> net = hg::models::zoo::resnet18();
//   net->to(hg::Device::hpu(0));
//   net->eval();                                            // eval: weights frozen into the graphs
//   auto g = hg::models::wrap_in_hpu_graph(net, {.max_graphs = 4});
//   hg::Tensor y = g->forward(x);                           // miss: capture (runs once)
//   y = g->forward(x2);                                     // same signature: copy in, replay
//   auto outs = g->call({x}, {}, /*bypass=*/true);          // this call runs eagerly
//   g->stats();                                             // calls, hits, misses, captures, evictions, ...
//   g->clear_cache();                                       // drops every graph
//
// Key: per tensor input its dtype, device, shape and strides (layout), plus the module's
// train/eval mode; non-tensor arguments (`args`) only with key_args_by_value (each distinct
// value captures a graph: logged once as a warning), else a call with args throws.
// As in Habana, a replay returns the same output tensors every time (overwritten by the next
// call with that signature); clone what you keep. With disable_tensor_cache the graphs keep no
// input copies: replays read the caller's inputs in place and write new output tensors.
//
// Eval mode: the module's parameters and buffers are frozen into the graphs (folded,
// pre-packed); after changing weights in place call clear_cache(). Train mode: graphs read the
// live parameters (in-place optimizer updates are seen). In train mode with grad mode on and
// parameters that require grad, each signature gets a forward and a backward graph
// (graphs::make_graphed_callables): the outputs are new tensors with autograd history and
// backward() replays the backward graph (asynchronous, dry_run and disable_tensor_cache do not
// apply to those). Either way, a parameter or buffer replaced by another tensor (to(device), a
// reassigned buffer) drops the cached graphs before the next call.
// Forward-only graphs are captured under NoGradGuard. The wrapper is not thread-safe.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "graphs/graphed_callables.h"
#include "graphs/hpu_graph.h"
#include "graphs/lru_cache.h"
#include "models/module.h"

namespace hg::models {

using Arg = std::variant<int64_t, double, bool, std::string>;  // a non-tensor argument

struct HPUGraphWrapOptions {
  bool asynchronous = false;          // replays are enqueued; a host read of an output waits
  bool disable_tensor_cache = false;  // no static input copies; caller-owned outputs per call
  // Habana's meaning: capture without running, then one replay produces the first outputs
  // (here a capture never runs ops, so only the count of replays shows it).
  bool dry_run = false;
  size_t max_graphs = 0;              // 0: unbounded; else the least recently used graph is evicted
  bool key_args_by_value = false;     // allow non-tensor args: one graph per value
};

struct HPUGraphWrapStats {
  uint64_t calls = 0, hits = 0, misses = 0, captures = 0, evictions = 0, bypasses = 0;
  uint64_t invalidations = 0;  // cache drops because the module's state tensors were replaced
  size_t graphs = 0;           // graphs cached now
  size_t arena_bytes = 0;      // summed over the cached graphs
};

// How the wrapper calls the module; default: module.forward_all(tensors) (args must be empty).
using ModuleFn = std::function<std::vector<Tensor>(Module&, const std::vector<Tensor>&, const std::vector<Arg>&)>;

class HPUGraphModule : public Module {
 public:
  // The wrapped module is a child named "module" (state_dict keys get the "module." prefix).
  HPUGraphModule(std::shared_ptr<Module> module, const HPUGraphWrapOptions& opt, ModuleFn fn = {});
  ~HPUGraphModule() override;

  Tensor forward(const Tensor& x) override;                                      // call({x})[0]
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;  // call(inputs)
  // bypass: call the module itself this once (no lookup, no capture; autograd as usual).
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const std::vector<Arg>& args = {}, bool bypass = false);
  nlohmann::json spec() const override { return module_->spec(); }

  void clear_cache();
  HPUGraphWrapStats stats() const;
  std::vector<std::string> cached_keys() const;  // most recently used first
  Module& module() { return *module_; }

 private:
  struct Entry {
    std::unique_ptr<graphs::HPUGraph> graph;               // forward only
    std::unique_ptr<graphs::GraphedCallable> graphed;      // or forward + backward (training)
    std::vector<Tensor> static_in, outputs;
  };
  std::string key_of(const std::vector<Tensor>& inputs, const std::vector<Arg>& args, bool with_grad) const;
  bool with_grad() const;  // train mode, grad mode on, a parameter that requires grad
  std::vector<const Storage*> state_storages() const;
  std::vector<Tensor> capture(const std::string& key, const std::vector<Tensor>& inputs, const std::vector<Arg>& args);
  std::vector<Tensor> insert(const std::string& key, Entry e, std::vector<Tensor> result);

  std::shared_ptr<Module> module_;
  HPUGraphWrapOptions opt_;
  ModuleFn fn_;
  std::vector<std::pair<std::string, Tensor*>> state_;  // parameters and buffers
  std::vector<const Storage*> captured_state_;          // their storages when the cache was filled
  bool captured_training_ = false;
  graphs::LruCache<std::string, Entry> cache_;
  HPUGraphWrapStats stats_;  // calls, captures, bypasses, invalidations (the cache counts the rest)
  bool warned_args_ = false;
};

std::shared_ptr<HPUGraphModule> wrap_in_hpu_graph(std::shared_ptr<Module> module, const HPUGraphWrapOptions& opt = {},
                                                  ModuleFn fn = {});

}  // namespace hg::models
