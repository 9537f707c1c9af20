#include "models/hpu_wrap.h"

#include <spdlog/spdlog.h>

#include "engine/autograd.h"
#include "engine/error.h"

namespace hg::models {

namespace {

std::string arg_str(const Arg& a) {
  if (auto* i = std::get_if<int64_t>(&a)) return "i" + std::to_string(*i);
  if (auto* d = std::get_if<double>(&a)) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "d%.17g", *d);
    return buf;
  }
  if (auto* b = std::get_if<bool>(&a)) return *b ? "btrue" : "bfalse";
  return "s" + std::to_string(std::get<std::string>(a).size()) + ":" + std::get<std::string>(a);
}

}  // namespace

HPUGraphModule::HPUGraphModule(std::shared_ptr<Module> module, const HPUGraphWrapOptions& opt, ModuleFn fn)
    : module_(std::move(module)), opt_(opt), fn_(std::move(fn)), cache_({.max_entries = opt.max_graphs}) {
  if (!module_) throw InvalidArgument("wrap_in_hpu_graph: no module");
  register_module("module", module_);
  train(module_->training());
  if (!fn_)
    fn_ = [](Module& m, const std::vector<Tensor>& in, const std::vector<Arg>&) { return m.forward_all(in); };
  state_ = module_->named_parameters();
  for (auto& b : module_->named_buffers()) state_.push_back(b);
}

HPUGraphModule::~HPUGraphModule() = default;

Tensor HPUGraphModule::forward(const Tensor& x) { return call({x}).at(0); }

std::vector<Tensor> HPUGraphModule::forward_all(const std::vector<Tensor>& inputs) { return call(inputs); }

std::vector<const Storage*> HPUGraphModule::state_storages() const {
  std::vector<const Storage*> r;
  r.reserve(state_.size());
  for (auto& [name, t] : state_) r.push_back(t->impl()->storage.get());
  return r;
}

bool HPUGraphModule::with_grad() const {
  if (!module_->training() || !grad_mode_enabled()) return false;
  for (auto& [name, p] : module_->named_parameters())
    if (p->requires_grad()) return true;
  return false;
}

std::string HPUGraphModule::key_of(const std::vector<Tensor>& inputs, const std::vector<Arg>& args,
                                   bool with_grad) const {
  std::string k = module_->training() ? (with_grad ? "train+grad" : "train") : "eval";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) throw InvalidArgument("wrap_in_hpu_graph: input " + std::to_string(i) + " is undefined");
    k += '|';
    k += dtype_name(t.dtype());
    k += '@' + t.device().str() + shape_str(t.shape());
    if (!t.is_contiguous()) k += "strides" + shape_str(t.strides());
    if (with_grad && t.requires_grad()) k += "+grad";
  }
  for (const Arg& a : args) k += '|' + arg_str(a);
  return k;
}

void HPUGraphModule::clear_cache() { cache_.clear(); }  // the graphs' destructors wait for queued replays

HPUGraphWrapStats HPUGraphModule::stats() const {
  HPUGraphWrapStats s = stats_;
  const graphs::CacheStats c = cache_.stats();
  s.hits = c.hits;
  s.misses = c.misses;
  s.evictions = c.evictions;
  s.graphs = c.entries;
  s.arena_bytes = 0;
  cache_.for_each([&](const std::string&, const Entry& e) {
    s.arena_bytes += e.graph ? e.graph->arena_bytes()
                             : e.graphed->forward_graph().arena_bytes() + e.graphed->backward_graph().arena_bytes();
  });
  return s;
}

std::vector<std::string> HPUGraphModule::cached_keys() const { return cache_.keys(); }

std::vector<Tensor> HPUGraphModule::call(const std::vector<Tensor>& inputs, const std::vector<Arg>& args, bool bypass) {
  ++stats_.calls;
  if (bypass) {
    ++stats_.bypasses;
    return fn_(*module_, inputs, args);
  }
  if (!args.empty() && !opt_.key_args_by_value)
    throw InvalidArgument("wrap_in_hpu_graph: non-tensor argument 0 (" + arg_str(args[0]).substr(1) +
                          ") would be baked into the captured graph; pass it as a tensor, or set "
                          "key_args_by_value (one graph per distinct value)");
  if (!args.empty() && !warned_args_) {
    warned_args_ = true;
    spdlog::warn("wrap_in_hpu_graph: keying graphs on non-tensor argument values; every distinct value captures "
                 "a graph of its own (pass per-call scalars as tensors to avoid it)");
  }
  if (cache_.size() && (state_storages() != captured_state_ || module_->training() != captured_training_)) {
    ++stats_.invalidations;
    clear_cache();
  }
  const std::string key = key_of(inputs, args, with_grad());
  Entry* hit = cache_.get(key);
  if (!hit) return capture(key, inputs, args);
  Entry& e = *hit;
  if (e.graphed) return (*e.graphed)(inputs);
  if (opt_.disable_tensor_cache) {
    std::vector<Tensor> outs;
    for (const Tensor& o : e.outputs) outs.push_back(Tensor::empty(o.shape(), o.dtype(), o.device()));
    std::vector<Tensor> in;
    for (const Tensor& x : inputs) in.push_back(x.is_contiguous() ? x : x.contiguous());
    e.graph->replay_with(in, outs, opt_.asynchronous);
    return outs;
  }
  for (size_t i = 0; i < inputs.size(); ++i) e.static_in[i].copy_from(inputs[i]);
  e.graph->replay(opt_.asynchronous);
  return e.outputs;
}

std::vector<Tensor> HPUGraphModule::capture(const std::string& key, const std::vector<Tensor>& inputs,
                                            const std::vector<Arg>& args) {
  if (!cache_.size()) {
    captured_state_ = state_storages();
    captured_training_ = module_->training();
  }
  Entry e;
  if (with_grad()) {
    std::vector<Tensor> params;
    for (auto& [name, p] : module_->named_parameters()) params.push_back(*p);
    e.graphed = graphs::make_graphed_callables(
        [this, &args](const std::vector<Tensor>& in) { return fn_(*module_, in, args); }, inputs, params,
        {.allow_unused_input = true});
    std::vector<Tensor> result = (*e.graphed)(inputs);
    return insert(key, std::move(e), std::move(result));
  }
  if (opt_.disable_tensor_cache) {
    for (const Tensor& x : inputs) e.static_in.push_back(x.is_contiguous() ? x : x.contiguous());
  } else {
    for (const Tensor& x : inputs) {
      Tensor s = Tensor::empty(x.shape(), x.dtype(), x.device());
      s.copy_from(x);
      e.static_in.push_back(s);
    }
  }
  graphs::CaptureOptions copt{.dry_run = opt_.dry_run};
  if (!module_->training())
    for (auto& [name, t] : state_) copt.frozen.push_back(*t);
  const Device d = inputs.empty() ? Device::hpu(0) : inputs[0].device();
  e.graph = std::make_unique<graphs::HPUGraph>(d);
  NoGradGuard no_grad;
  e.graph->capture(
      [&] {
        e.outputs = fn_(*module_, e.static_in, args);
        for (size_t j = 0; j < e.outputs.size(); ++j)
          if (!e.outputs[j].defined() || !e.outputs[j].is_lazy())
            throw InvalidArgument("wrap_in_hpu_graph: output " + std::to_string(j) +
                                  " is not computed by the module (undefined, or an input or parameter passed through)");
      },
      copt);
  const std::vector<const Storage*> after = state_storages();
  for (size_t i = 0; i < state_.size(); ++i)
    if (after[i] != captured_state_[i]) {
      e.graph.reset();
      clear_cache();
      throw InvalidArgument("wrap_in_hpu_graph: the module replaced its tensor '" + state_[i].first +
                            "' while being captured (a state update such as train-mode BatchNorm statistics "
                            "cannot be replayed); call it in eval mode or with bypass");
    }
  if (opt_.dry_run) e.graph->replay(opt_.asynchronous);
  std::vector<Tensor> result = e.outputs;
  if (opt_.disable_tensor_cache) {
    e.graph->mark_user_inputs(e.static_in);
    e.graph->mark_user_outputs(e.outputs);
    for (auto& r : result) r = r.clone();
  }
  return insert(key, std::move(e), std::move(result));
}

std::vector<Tensor> HPUGraphModule::insert(const std::string& key, Entry e, std::vector<Tensor> result) {
  ++stats_.captures;
  cache_.put(key, std::move(e));  // evicts the least recently used beyond max_graphs
  return result;
}

std::shared_ptr<HPUGraphModule> wrap_in_hpu_graph(std::shared_ptr<Module> module, const HPUGraphWrapOptions& opt,
                                                  ModuleFn fn) {
  return std::make_shared<HPUGraphModule>(std::move(module), opt, std::move(fn));
}

}  // namespace hg::models
