#include "graphs/step_replay.h"

#include <algorithm>
#include <chrono>

#include "engine/error.h"
#include "graphs/lazy.h"
#include "graphs/runtime.h"
#include "graphs/trace.h"

namespace hg::graphs {

// One traced step: what its graph read and computed, by identity (weak: a record keeps nothing alive).
struct StepReplay::Record {
  std::shared_ptr<const Executable> exe;  // null when the body recorded nothing
  uint64_t guard = 0, note = 0;
  std::vector<std::weak_ptr<TensorImpl>> inputs, outputs;
  std::vector<int> results;  // per result: its output index, -1 when the graph did not compute it
};

// How a replay binds the executable's inputs and outputs.
struct StepReplay::Plan {
  enum class Kind : uint8_t { Arg, State, Held, Seed };
  struct In {
    Kind kind;
    size_t index;  // argument, carrier, held tensor or seed slot
  };
  static constexpr size_t kSlots = 8;  // the Runtime's bindings: how far the host runs ahead
  std::unique_ptr<Runtime> rt;
  uint64_t guard = 0;
  std::vector<In> ins;
  std::vector<TensorMeta> arg_metas;
  std::vector<std::shared_ptr<TensorImpl>> carriers;  // state: given its output's value after each replay
  std::vector<size_t> carrier_out;
  // Per carrier: where its next value goes. The storage a replay reads becomes the one the
  // replay after it writes (the queue runs in order), unless someone else holds it by then.
  std::vector<std::shared_ptr<Storage>> spare;
  std::vector<std::shared_ptr<TensorImpl>> held;  // read as they are
  std::vector<size_t> result_out;                 // the outputs the caller gets, each once
  std::vector<size_t> results;                    // per result: its index in result_out
  std::vector<void*> scratch_out;                 // per output no one reads: where it goes, else null
  std::shared_ptr<Storage> scratch;
  std::vector<size_t> seeds;                      // the inputs that are random seeds
  // Per Runtime binding: the result storages handed to the caller (reused once released).
  std::vector<std::vector<std::shared_ptr<Storage>>> results_of =
      std::vector<std::vector<std::shared_ptr<Storage>>>(kSlots);
  ~Plan() {  // queued replays write the scratch and the spares
    if (rt) rt->wait();
  }
};

namespace {

bool bindable(const TensorImpl& i, Device d) {
  return i.storage && !i.lazy && i.device == d && i.strides == contiguous_strides(i.meta.shape);
}

}  // namespace

StepReplay::StepReplay(Device d) : device_(d) {
  if (!d.is_hpu()) throw DeviceError("StepReplay needs an hpu device, got " + d.str());
  device_backend(d);
}

StepReplay::~StepReplay() = default;  // the plan's Runtime waits for its replays

void StepReplay::reset() {
  plan_.reset();
  last_.reset();
}

std::vector<Tensor> StepReplay::run(const std::vector<Tensor>& args, const Body& body, uint64_t guard,
                                    const std::function<void()>& on_replay) {
  if (!lazy_mode_enabled()) {
    ++stats_.eager;
    reset();
    return body(args);
  }
  mark_step(device_);  // work recorded before this step runs first (and a capture throws here)
  if (plan_) {
    if (can_replay(args, guard)) return replay(args, on_replay);
    stats_.last_fallback = "the guard, an argument or a state tensor changed";
    reset();
  }
  return traced(args, body, guard);
}

bool StepReplay::can_replay(const std::vector<Tensor>& args, uint64_t guard) {
  const Plan& p = *plan_;
  if (guard != p.guard || args.size() != p.arg_metas.size()) return false;
  for (size_t k = 0; k < args.size(); ++k)
    if (!args[k].defined() || args[k].meta() != p.arg_metas[k] || !bindable(*args[k].impl(), device_)) return false;
  // use_count 1: only the plan holds it, its owner rebound or dropped it (a loaded checkpoint)
  for (const auto& c : p.carriers)
    if (c.use_count() < 2 || !bindable(*c, device_)) return false;
  for (const auto& h : p.held)
    if (h.use_count() < 2 || !bindable(*h, device_)) return false;
  return true;
}

void StepReplay::note(uint64_t digest) { note_ = note_ * 0x9E3779B97F4A7C15ull + digest + 1; }

std::vector<Tensor> StepReplay::traced(const std::vector<Tensor>& args, const Body& body, uint64_t guard) {
  note_ = 0;
  std::vector<Tensor> results = body(args);
  ++stats_.traced;
  auto rec = std::make_unique<Record>();
  rec->guard = guard;
  rec->note = note_;
  std::vector<Tensor> inputs;  // alive while the plan classifies them
  {
    ClosedTrace c = close_pending(device_);
    if (!c.outputs.empty()) rec->exe = launch_closed(c, device_);
    for (const Tensor& x : c.inputs) rec->inputs.push_back(x.impl_ptr());
    for (const auto& o : c.outputs) rec->outputs.push_back(o);
    for (const Tensor& r : results) {
      const auto it = std::find_if(c.outputs.begin(), c.outputs.end(),
                                   [&](const auto& o) { return r.defined() && o.get() == r.impl(); });
      rec->results.push_back(it == c.outputs.end() ? -1 : static_cast<int>(it - c.outputs.begin()));
    }
    inputs = std::move(c.inputs);
  }  // from here on an output is alive only when the step's code kept it (or it is a result)
  stats_.last_fallback = last_ ? make_plan(*last_, *rec, std::move(inputs), args) : "only one step traced so far";
  last_ = std::move(rec);
  return results;
}

std::string StepReplay::make_plan(const Record& prev, const Record& cur, std::vector<Tensor> inputs,
                                  const std::vector<Tensor>& args) {
  if (!cur.exe) return "the step recorded nothing (a host read or mark_step inside the body runs it)";
  if (cur.exe != prev.exe) return "the step's graph differs from the previous step's";
  if (cur.guard != prev.guard) return "the guard changed";
  if (cur.note != prev.note) return "the step's notes (what it logged) changed";
  auto p = std::make_unique<Plan>();
  p->guard = cur.guard;
  const size_t nout = cur.outputs.size();
  std::vector<bool> linked(nout, false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::shared_ptr<TensorImpl> x = inputs[i].impl_ptr();
    const auto arg = std::find_if(args.begin(), args.end(), [&](const Tensor& a) { return a.impl() == x.get(); });
    if (arg != args.end()) {
      p->ins.push_back({Plan::Kind::Arg, static_cast<size_t>(arg - args.begin())});
      continue;
    }
    if (x->rng_seed) {
      p->ins.push_back({Plan::Kind::Seed, p->seeds.size()});
      p->seeds.push_back(i);
      continue;
    }
    const auto from = std::find_if(prev.outputs.begin(), prev.outputs.end(),
                                   [&](const auto& o) { return o.lock().get() == x.get(); });
    if (from != prev.outputs.end()) {
      const size_t j = static_cast<size_t>(from - prev.outputs.begin());
      std::shared_ptr<TensorImpl> carrier = cur.outputs[j].lock();
      if (!carrier) return "state read as graph input " + std::to_string(i) + " is not kept by the step";
      linked[j] = true;
      p->ins.push_back({Plan::Kind::State, p->carriers.size()});
      p->carriers.push_back(std::move(carrier));
      p->carrier_out.push_back(j);
      continue;
    }
    if (i < prev.inputs.size() && prev.inputs[i].lock() == x) {
      p->ins.push_back({Plan::Kind::Held, p->held.size()});
      p->held.push_back(std::move(x));
      continue;
    }
    return "graph input " + std::to_string(i) + " (" + meta_str(x->meta) +
           ") is a new tensor at every step that is neither an argument nor computed by the step before "
           "(a value made on the host): pass it as an argument or keep it in a tensor that persists";
  }
  inputs.clear();  // an old parameter value keeps its gradient alive
  for (size_t k = 0; k < cur.results.size(); ++k) {
    if (cur.results[k] < 0) return "result " + std::to_string(k) + " is not computed by the step's graph";
    if (linked[static_cast<size_t>(cur.results[k])])
      return "result " + std::to_string(k) + " is also state that the next step reads";
    const auto j = static_cast<size_t>(cur.results[k]);  // a value returned twice shares one storage
    const auto at = std::find(p->result_out.begin(), p->result_out.end(), j);
    p->results.push_back(static_cast<size_t>(at - p->result_out.begin()));
    if (at == p->result_out.end()) p->result_out.push_back(j);
  }
  // A value a step computed that the code still holds, that the next step does not read and that
  // is not a result: a replay would never update it.
  for (const Record* r : {&prev, &cur})
    for (size_t j = 0; j < nout; ++j)
      if (!linked[j] && std::find(r->results.begin(), r->results.end(), static_cast<int>(j)) == r->results.end() &&
          !r->outputs[j].expired())
        return "output " + std::to_string(j) + " (" + meta_str(cur.exe->output_metas()[j]) +
               ") of a step is still held but the next step does not read it; a replay would leave it stale";
  std::vector<bool> read(nout, false);
  for (size_t j : p->carrier_out) read[j] = true;
  for (size_t j : p->result_out) read[j] = true;
  std::vector<size_t> at(nout, 0);
  size_t scratch = 0;
  for (size_t j = 0; j < nout; ++j)
    if (!read[j]) {
      at[j] = scratch;
      scratch += (cur.exe->output_metas()[j].bytes() + 63) / 64 * 64;
    }
  for (const Tensor& a : args) p->arg_metas.push_back(a.meta());
  p->scratch = std::make_shared<Storage>(device_, std::max<size_t>(scratch, 1));
  p->scratch_out.assign(nout, nullptr);
  for (size_t j = 0; j < nout; ++j)
    if (!read[j]) p->scratch_out[j] = static_cast<char*>(p->scratch->data) + at[j];
  for (size_t j : p->carrier_out)
    p->spare.push_back(std::make_shared<Storage>(device_, std::max<size_t>(cur.exe->output_metas()[j].bytes(), 1)));
  for (auto& r : p->results_of) r.resize(p->result_out.size());
  p->rt = std::make_unique<Runtime>(cur.exe, device_, RuntimeOptions{.depth = Plan::kSlots, .seeds = p->seeds});
  plan_ = std::move(p);
  return "";
}

std::vector<Tensor> StepReplay::replay(const std::vector<Tensor>& args, const std::function<void()>& on_replay) {
  Plan& p = *plan_;
  Runtime& rt = *p.rt;
  const Executable& exe = rt.program();
  const auto t0 = std::chrono::steady_clock::now();
  const double waited = rt.stats().wait_s;
  // The binding used kSlots replays ago must have run (the host is that far ahead at most); the
  // seeds are drawn here, in tracing's order.
  const size_t slot = rt.setup();
  auto storage = [&](std::shared_ptr<Storage>& st, size_t j) {  // reused when only we hold it
    if (st && st.use_count() == 1) return st->data;
    // The replay before this one may still read a spare (its carrier's last value): it lives
    // until this replay has run.
    if (st) rt.keep(std::move(st));
    st = std::make_shared<Storage>(device_, std::max<size_t>(exe.output_metas()[j].bytes(), 1));
    return st->data;
  };
  for (size_t i = 0; i < p.ins.size(); ++i) {
    const Plan::In& b = p.ins[i];
    switch (b.kind) {
      case Plan::Kind::Arg:
        rt.keep(args[b.index].impl()->storage);  // the argument's data, alive until the run
        rt.bind_input(i, data_ptr(*args[b.index].impl()));
        break;
      case Plan::Kind::State: rt.bind_input(i, data_ptr(*p.carriers[b.index])); break;
      case Plan::Kind::Held: rt.bind_input(i, data_ptr(*p.held[b.index])); break;
      case Plan::Kind::Seed: break;  // bound by the Runtime
    }
  }
  for (size_t j = 0; j < p.scratch_out.size(); ++j)
    if (p.scratch_out[j]) rt.bind_output(j, p.scratch_out[j]);
  for (size_t k = 0; k < p.carriers.size(); ++k) rt.bind_output(p.carrier_out[k], storage(p.spare[k], p.carrier_out[k]));
  std::vector<std::shared_ptr<Storage>>& mine = p.results_of[slot];
  for (size_t u = 0; u < p.result_out.size(); ++u) rt.bind_output(p.result_out[u], storage(mine[u], p.result_out[u]));
  if (on_replay) on_replay();  // what it queues runs before the replay
  rt.invoke();
  for (size_t k = 0; k < p.carriers.size(); ++k) {
    TensorImpl& c = *p.carriers[k];
    std::swap(c.storage, p.spare[k]);
    c.offset = 0;
  }
  std::vector<Tensor> results;
  results.reserve(p.results.size());
  for (size_t u : p.results) {
    auto t = std::make_shared<TensorImpl>();
    t->meta = exe.output_metas()[p.result_out[u]];
    t->strides = contiguous_strides(t->meta.shape);
    t->device = device_;
    t->storage = mine[u];
    results.emplace_back(std::move(t));
  }
  ++stats_.replayed;
  const double wait = rt.stats().wait_s - waited;
  stats_.replay_wait_s += wait;
  stats_.replay_host_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - wait;
  return results;
}

}  // namespace hg::graphs
