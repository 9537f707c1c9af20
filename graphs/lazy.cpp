#include "graphs/lazy.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>

#include "engine/error.h"
#include "engine/lazy.h"
#include "graphs/graph_cache.h"
#include "graphs/lru_cache.h"
#include "graphs/runtime.h"
#include "graphs/trace.h"

namespace hg::graphs {

namespace {

std::atomic<bool> g_lazy_on{false};
std::atomic<uint64_t> g_steps{0}, g_hits{0}, g_disk_hits{0}, g_misses{0};

thread_local std::shared_ptr<Recording> t_recording;  // this thread's capture, if any

void run_lazy_trace(Device d) {  // mark_step without the capture check
  ClosedTrace c = close_pending(d);
  if (!c.outputs.empty()) launch_closed(c, d);
}

class Tracer final : public LazyBackend {
 public:
  bool traces(Device d) const override {
    if (!d.is_hpu()) return recording_for(d) != nullptr;  // graphs::record_ops on the host
    return g_lazy_on.load(std::memory_order_relaxed) || recording_for(d);
  }

  Tensor record(const OpSchema& op, const std::vector<Tensor>& inputs, const Attrs& attrs, const TensorMeta& out,
                Device d) override {
    Trace* cap = recording_for(d);
    Trace& t = cap ? *cap : trace_for(d);
    std::lock_guard lk(t.mu);
    if (t.capture && !op.capturable)
      throw InvalidArgument("op '" + op.name + "' cannot be captured in an HPU graph on " + d.str() +
                            " (its output shape depends on data or it synchronises with the host); run it "
                            "outside the captured region");
    std::vector<int> ids;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Tensor& in = inputs[k];
      if (auto* dead = dynamic_cast<AbortedValue*>(in.impl()->lazy.get()))
        throw InvalidArgument("op '" + op.name + "': input " + std::to_string(k) + " was produced by op '" +
                              dead->op + "' in " + dead->why + "; it has no value");
      auto* tv = dynamic_cast<TracedValue*>(in.impl()->lazy.get());
      if (tv && tv->generation == t.generation) {
        ids.push_back(tv->node);
        continue;
      }
      if (tv)
        throw InvalidArgument("op '" + op.name + "': input " + std::to_string(k) + " (from op '" + tv->op->name +
                              "') was recorded " +
                              (tv->in_capture ? "by an HPU graph capture that has not ended"
                                              : "in " + tv->device.str() + "'s lazy trace and has not run") +
                              "; " + (t.capture ? "run mark_step before capture_begin" : "end that capture first"));
      auto [it, fresh] = t.external_node.try_emplace(in.impl(), -1);
      if (fresh) {
        it->second = t.graph.add_input(in.meta());
        t.externals.push_back(in);
        t.values.emplace_back();
      }
      ids.push_back(it->second);
    }
    const int node = t.graph.add_op(op, std::move(ids), attrs, out);
    auto impl = std::make_shared<TensorImpl>();
    impl->meta = out;
    impl->strides = contiguous_strides(out.shape);
    impl->device = d;
    impl->lazy = std::make_shared<TracedValue>(d, t.generation, node, &op, t.capture);
    t.values.push_back(impl);
    return Tensor(impl);
  }

  void materialize(TensorImpl& impl) override {
    if (auto* dead = dynamic_cast<AbortedValue*>(impl.lazy.get()))
      throw InvalidArgument("reading a value produced by op '" + dead->op + "' in " + dead->why +
                            ": it has no value");
    auto* tv = dynamic_cast<TracedValue*>(impl.lazy.get());
    if (!tv) throw InternalError("materialize: not a traced value");
    if (tv->in_capture)
      throw InvalidArgument("reading the value of op '" + tv->op->name + "' (node " + std::to_string(tv->node) +
                            ") on the host is not supported during HPU graph capture on " + tv->device.str() +
                            ": a host read (to(cpu), item(), data(), detach() of a traced value) would "
                            "synchronise inside the graph; move it out of the captured region");
    run_lazy_trace(tv->device);  // a lazy value: reading it during a capture is fine
    if (impl.lazy) throw InternalError("materialize: value still lazy after mark_step");
  }
};

Tracer& tracer() {
  static Tracer t;
  return t;
}

}  // namespace

Trace& trace_for(Device d) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Trace>> traces;
  device_backend(d);  // validates
  std::lock_guard lk(mu);
  auto& t = traces[d.index];
  if (!t) t = std::make_unique<Trace>();
  return *t;
}

ClosedTrace close_trace(Trace& t) {
  ClosedTrace c;
  c.graph = std::move(t.graph);
  for (size_t i = 0; i < t.values.size(); ++i)
    if (auto v = t.values[i].lock()) {
      c.graph.outputs.push_back(static_cast<int>(i));
      c.outputs.push_back(std::move(v));
    }
  c.inputs = std::move(t.externals);
  t.graph = Graph();
  t.externals.clear();
  t.external_node.clear();
  t.values.clear();
  t.generation++;
  return c;
}

void bind_outputs(const ClosedTrace& c, Device d) {
  for (const auto& o : c.outputs) {
    o->storage = std::make_shared<Storage>(d, std::max<size_t>(o->meta.bytes(), 1));
    o->lazy.reset();
  }
}

uint64_t next_trace_generation() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

Trace* recording_for(Device d) {
  Recording* r = t_recording.get();
  if (!r) return nullptr;
  if (r->ended.load(std::memory_order_acquire)) {  // ended from another thread
    t_recording.reset();
    return nullptr;
  }
  return r->device == d ? &r->trace : nullptr;
}

std::shared_ptr<Recording> begin_recording(Device d) {
  if (t_recording && !t_recording->ended.load(std::memory_order_acquire))
    throw InvalidArgument("HPUGraph::capture_begin: this thread is already capturing on " +
                          t_recording->device.str() + " into another HPUGraph; captures cannot nest");
  t_recording = std::make_shared<Recording>(d);
  return t_recording;
}

ClosedTrace end_recording(Recording& r) {
  ClosedTrace c;
  {
    std::lock_guard lk(r.trace.mu);
    r.ended.store(true, std::memory_order_release);
    c = close_trace(r.trace);
  }
  if (t_recording.get() == &r) t_recording.reset();
  return c;
}

void abort_values(const ClosedTrace& c, const std::string& why) {
  for (size_t k = 0; k < c.outputs.size(); ++k)
    c.outputs[k]->lazy = std::make_shared<AbortedValue>(c.graph.nodes[c.graph.outputs[k]].op->name, why);
}

void enable_lazy_mode(bool on) {
  set_lazy_backend(&tracer());
  g_lazy_on = on;
}

bool lazy_mode_enabled() { return g_lazy_on; }

void init_lazy_mode_from_env() {
  for (const char* name : {"HG_LAZY_MODE", "PT_HPU_LAZY_MODE"}) {
    const char* v = std::getenv(name);
    if (!v) continue;
    if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0)
      throw InvalidArgument(std::string(name) + "='" + v + "' must be 0 (eager) or 1 (lazy)");
    enable_lazy_mode(v[0] == '1');
    return;
  }
  enable_lazy_mode(true);
}

ClosedTrace close_pending(Device d) {
  Trace& t = trace_for(d);
  std::lock_guard lk(t.mu);
  if (t.graph.nodes.empty()) return {};  // nothing recorded: no new generation either
  return close_trace(t);
}

namespace {

// Per device: a Runtime per lazy program, so that a repeated step reuses its arena and bindings.
struct LazyRuntimes {
  std::mutex mu;
  LruCache<const Executable*, std::unique_ptr<Runtime>> cache{
      {.max_entries = 64, .max_bytes = size_t{256} << 20},
      [](const std::unique_ptr<Runtime>& r) { return r->arena_bytes(); }};
};

LazyRuntimes& lazy_runtimes(Device d) {
  static std::mutex mu;
  static auto* all = new std::unordered_map<int, std::unique_ptr<LazyRuntimes>>();  // device threads run at exit
  std::lock_guard lk(mu);
  auto& r = (*all)[d.index];
  if (!r) r = std::make_unique<LazyRuntimes>();
  return *r;
}

}  // namespace

std::shared_ptr<const Executable> launch_closed(ClosedTrace& c, Device d) {
  CompileInfo info;
  std::shared_ptr<const Executable> exe;
  try {
    exe = compile_cached(c.graph, {}, &info);
  } catch (...) {  // the step's values can never be computed: reading one names its op
    abort_values(c, "a lazy step on " + d.str() + " whose compile failed");
    throw;
  }
  ++g_steps;
  ++(info.memory_hit ? g_hits : info.disk_hit ? g_disk_hits : g_misses);
  bind_outputs(c, d);
  std::vector<const void*> in;
  std::vector<void*> out;
  for (const auto& x : c.inputs) in.push_back(data_ptr(x));
  for (const auto& o : c.outputs) out.push_back(o->storage->data);
  LazyRuntimes& rts = lazy_runtimes(d);
  std::lock_guard lk(rts.mu);
  std::unique_ptr<Runtime>* rt = rts.cache.get(exe.get());
  if (!rt) rt = rts.cache.put(exe.get(), std::make_unique<Runtime>(exe, d, RuntimeOptions{.depth = 4}));
  if (!rt) {  // an arena over the cache's bound: a Runtime for this step alone
    Runtime once(exe, d);
    once.setup(in, out);
    once.run();
    return exe;
  }
  Runtime& r = **rt;
  r.setup(in, out);
  // the data the run touches (not the tensors: their gradients and other fields are not the run's)
  for (const auto& x : c.inputs) r.keep(x.impl()->storage);
  for (const auto& o : c.outputs) r.keep(o->storage);
  r.invoke();
  return exe;
}

void mark_step(Device d) {
  if (!d.is_hpu()) return;
  if (recording_for(d)) throw InvalidArgument("mark_step() inside an HPU graph capture on " + d.str());
  run_lazy_trace(d);
}

LazyStats lazy_stats() { return {g_steps.load(), g_hits.load(), g_disk_hits.load(), g_misses.load()}; }

}  // namespace hg::graphs
