#include "graphs/graphed_callables.h"

#include <mutex>
#include <unordered_map>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"

namespace hg::graphs {

struct GraphedCallable::State {
  explicit State(Device d) : device(d), fwd(d), bwd(d) {}
  Device device;
  HPUGraph fwd, bwd;
  std::vector<Tensor> static_in, static_out;
  std::vector<Tensor> grad_out;  // static grad_output per output (undefined: no gradient flows)
  std::vector<Tensor> zeros;     // per output with a grad_out: zeros of its meta
  std::vector<Tensor> grad_in;   // static gradients: per input, then per param (undefined: none)
  std::vector<Tensor> params;
  int64_t id = 0;
  int64_t calls = 0;  // forward replays; a backward belongs to the latest one
};

namespace {

struct Registry {
  std::mutex mu;
  int64_t next = 1;
  std::unordered_map<int64_t, std::weak_ptr<GraphedCallable::State>> states;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: a backward may run during exit
  return *r;
}

// The autograd node of a graphed output: attrs {callable id, output index, call number}; its
// inputs are the caller's inputs, then the params.
std::vector<Tensor> graphed_backward(const std::vector<Tensor>& in, const Tensor& grad, const Attrs& a) {
  std::shared_ptr<GraphedCallable::State> s;
  {
    std::lock_guard lk(registry().mu);
    auto it = registry().states.find(a.i(0));
    if (it != registry().states.end()) s = it->second.lock();
  }
  if (!s) throw InvalidArgument("backward through a graphed callable that no longer exists");
  if (a.i(2) != s->calls)
    throw InvalidArgument("backward of graphed callable call " + std::to_string(a.i(2)) + " after call " +
                          std::to_string(s->calls) + " replayed the forward graph over its saved activations; run "
                          "each call's backward before the next call");
  const size_t j = static_cast<size_t>(a.i(1));
  for (size_t k = 0; k < s->grad_out.size(); ++k)
    if (s->grad_out[k].defined()) s->grad_out[k].copy_from(k == j ? grad : s->zeros[k]);
  s->bwd.replay();
  std::vector<Tensor> r(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (s->grad_in[i].defined() && in[i].requires_grad()) r[i] = s->grad_in[i].clone();
  return r;
}

TensorMeta graphed_infer(const OpSchema& op, const std::vector<TensorMeta>&, const Attrs&) {
  throw InvalidArgument("op '" + op.name + "' is the autograd node of make_graphed_callables; it cannot be called");
}

const OpSchema& graphed_op() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpSchema op{.name = "graphed_callable", .num_inputs = -1, .infer = graphed_infer, .prepare = nullptr};
    op.backward = graphed_backward;
    op.capturable = false;
    register_op(op);
  });
  return op_schema("graphed_callable");
}

// Clears the gradients of `ts` and puts the old ones back when destroyed.
class GradStash {
 public:
  explicit GradStash(const std::vector<Tensor>& ts) : ts_(ts) {
    for (auto& t : ts_) {
      saved_.push_back(t.impl()->grad);
      t.impl()->grad.reset();
    }
  }
  ~GradStash() {
    for (size_t i = 0; i < ts_.size(); ++i) ts_[i].impl()->grad = saved_[i];
  }
  GradStash(const GradStash&) = delete;
  GradStash& operator=(const GradStash&) = delete;

 private:
  std::vector<Tensor> ts_;
  std::vector<std::shared_ptr<TensorImpl>> saved_;
};

}  // namespace

GraphedCallable::GraphedCallable(std::shared_ptr<State> s) : state_(std::move(s)) {}

GraphedCallable::~GraphedCallable() {
  std::lock_guard lk(registry().mu);
  registry().states.erase(state_->id);
}

const HPUGraph& GraphedCallable::forward_graph() const { return state_->fwd; }
const HPUGraph& GraphedCallable::backward_graph() const { return state_->bwd; }

std::vector<Tensor> GraphedCallable::operator()(const std::vector<Tensor>& inputs) {
  State& s = *state_;
  if (inputs.size() != s.static_in.size())
    throw InvalidArgument("graphed callable: " + std::to_string(inputs.size()) + " inputs given, it was captured with " +
                          std::to_string(s.static_in.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || inputs[i].device() != s.device || inputs[i].meta() != s.static_in[i].meta())
      throw InvalidArgument("graphed callable: input " + std::to_string(i) + " is " +
                            (inputs[i].defined() ? meta_str(inputs[i].meta()) + " on " + inputs[i].device().str()
                                                 : std::string("undefined")) +
                            ", it was captured with " + meta_str(s.static_in[i].meta()) + " on " + s.device.str());
  }
  for (size_t i = 0; i < inputs.size(); ++i) s.static_in[i].copy_from(inputs[i]);
  s.fwd.replay();
  ++s.calls;
  bool history = false;
  if (grad_mode_enabled() && s.bwd.captured()) {
    for (const auto& x : inputs) history |= x.requires_grad();
    for (const auto& p : s.params) history |= p.requires_grad();
  }
  std::vector<Tensor> node_inputs;
  if (history) {
    node_inputs = inputs;
    node_inputs.insert(node_inputs.end(), s.params.begin(), s.params.end());
  }
  std::vector<Tensor> outs;
  for (size_t j = 0; j < s.static_out.size(); ++j) {
    Tensor o = s.static_out[j].clone();
    if (history && s.grad_out[j].defined()) {
      o.impl()->requires_grad = true;
      o.impl()->grad_fn = std::make_shared<GradNode>(
          GradNode{&graphed_op(), node_inputs, Attrs{{s.id, static_cast<int64_t>(j), s.calls}, {}}});
    }
    outs.push_back(std::move(o));
  }
  return outs;
}

std::unique_ptr<GraphedCallable> make_graphed_callables(const TensorFn& fn, const std::vector<Tensor>& sample_inputs,
                                                        const std::vector<Tensor>& params,
                                                        const GraphedCallableOptions& opt) {
  if (sample_inputs.empty()) throw InvalidArgument("make_graphed_callables: no sample inputs");
  const Device d = sample_inputs[0].device();
  if (!d.is_hpu()) throw DeviceError("make_graphed_callables: sample input 0 is on " + d.str() + ", not an hpu");
  auto check_device = [&](const Tensor& t, const std::string& what) {
    if (!t.defined()) throw InvalidArgument("make_graphed_callables: " + what + " is undefined");
    if (t.device() != d)
      throw DeviceError("make_graphed_callables: " + what + " is on " + t.device().str() + ", sample input 0 on " + d.str());
  };
  for (size_t i = 0; i < sample_inputs.size(); ++i) check_device(sample_inputs[i], "sample input " + std::to_string(i));
  for (size_t i = 0; i < params.size(); ++i) check_device(params[i], "param " + std::to_string(i));
  graphed_op();

  auto s = std::make_shared<GraphedCallable::State>(d);
  s->params = params;
  for (const Tensor& x : sample_inputs) {
    Tensor t = Tensor::empty(x.shape(), x.dtype(), d);
    t.copy_from(x);
    if (x.requires_grad()) t.set_requires_grad(true);
    s->static_in.push_back(t);
  }
  std::vector<Tensor> with_grads = s->static_in;
  with_grads.insert(with_grads.end(), params.begin(), params.end());
  GradStash stash(with_grads);  // the capture's backward must not add to existing gradients

  std::vector<Tensor> outs;
  s->fwd.capture([&] {
    outs = fn(s->static_in);
    if (outs.empty()) throw InvalidArgument("make_graphed_callables: the callable returned no outputs");
    for (size_t j = 0; j < outs.size(); ++j)
      if (!outs[j].defined() || !outs[j].is_lazy())
        throw InvalidArgument("make_graphed_callables: output " + std::to_string(j) +
                              " is not computed by the callable (undefined, or an input or parameter itself)");
  });
  s->static_out = outs;
  s->grad_out.resize(outs.size());
  s->zeros.resize(outs.size());
  bool any = false;
  for (size_t j = 0; j < outs.size(); ++j)
    if (outs[j].requires_grad()) {
      s->grad_out[j] = Tensor::zeros(outs[j].shape(), outs[j].dtype(), d);
      s->zeros[j] = Tensor::zeros(outs[j].shape(), outs[j].dtype(), d);
      any = true;
    }
  if (any) {
    s->bwd.capture([&] {
      Tensor loss;
      for (size_t j = 0; j < outs.size(); ++j) {
        if (!s->grad_out[j].defined()) continue;
        Tensor term = ops::sum(ops::mul(outs[j], s->grad_out[j]));
        loss = loss.defined() ? ops::add(loss, term) : term;
      }
      loss.backward();
      for (size_t i = 0; i < with_grads.size(); ++i) {
        Tensor g = with_grads[i].grad();
        const bool wanted = with_grads[i].requires_grad();
        if (wanted && !g.defined() && !opt.allow_unused_input)
          throw InvalidArgument("make_graphed_callables: " +
                                (i < sample_inputs.size() ? "sample input " + std::to_string(i)
                                                          : "param " + std::to_string(i - sample_inputs.size())) +
                                " requires grad but the callable's outputs do not depend on it "
                                "(set allow_unused_input)");
        s->grad_in.push_back(wanted ? g : Tensor());
      }
    });
  } else {
    s->grad_in.resize(with_grads.size());
  }
  for (auto& t : s->static_in) t.set_requires_grad(false);  // the placeholders need no history
  {
    std::lock_guard lk(registry().mu);
    s->id = registry().next++;
    registry().states[s->id] = s;
  }
  return std::make_unique<GraphedCallable>(s);
}

}  // namespace hg::graphs
