#include "engine/autograd.h"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "engine/error.h"
#include "engine/fused_ops.h"
#include "engine/ops.h"

namespace hg {

namespace {
thread_local bool t_grad_enabled = true;

// Post-accumulate-grad hooks: leaf impl -> hooks in registration order. The impl is held weakly
// so a hook never keeps a parameter alive and a new tensor at a dead one's address is not hooked.
struct HookEntry {
  uint64_t id;
  std::weak_ptr<TensorImpl> leaf;
  std::shared_ptr<PostAccumulateGradHook> fn;
};
struct HookRegistry {
  std::mutex mu;
  std::unordered_map<TensorImpl*, std::vector<HookEntry>> by_leaf;
  std::unordered_map<uint64_t, TensorImpl*> leaf_of;
  uint64_t next_id = 1;
};
HookRegistry& hooks() {
  static HookRegistry r;
  return r;
}
std::atomic<size_t> g_hook_count{0};  // backward skips the lookup while it is 0

// What backward leaves in a node's grad_fn once it ran: the tensor stays a non-leaf (a later
// backward through it is an error, as in PyTorch) but its saved inputs are released.
const std::shared_ptr<GradNode>& freed_node() {
  static const std::shared_ptr<GradNode> n = std::make_shared<GradNode>(GradNode{nullptr, {}, {}});
  return n;
}
bool is_freed(const TensorImpl& t) { return t.grad_fn && !t.grad_fn->op; }
constexpr const char* kFreedGraph =
    "backward() reached a tensor whose graph an earlier backward() already freed (trying to backward through "
    "the graph a second time): a result of a previous step used without .detach(), or backward() called twice "
    "on the same loss; detach() values kept across steps or recompute them";

void run_post_accumulate_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  std::vector<std::shared_ptr<PostAccumulateGradHook>> fns;
  {
    HookRegistry& r = hooks();
    std::lock_guard lk(r.mu);
    auto it = r.by_leaf.find(leaf.get());
    if (it == r.by_leaf.end()) return;
    for (const HookEntry& e : it->second)
      if (e.leaf.lock() == leaf) fns.push_back(e.fn);
  }
  const Tensor t(leaf);
  for (const auto& fn : fns) (*fn)(t);
}

// The gradient backward starts from: ones in the root's shape and dtype. Traced (lazy mode or a
// capture) it is an op of the graph, x^0 (1 for every x, NaN and inf included), not a tensor made
// on the host: a traced step then has no input that is new at every step, which a replayed step
// (graphs/step_replay.h) needs.
Tensor ones_like_root(const Tensor& root) {
  if (!root.is_lazy()) return Tensor::full(root.shape(), 1.0f, root.device()).to(root.dtype());
  const Tensor x = root.dtype() == DType::F32 ? root : root.to(DType::F32);
  return dispatch("fused_elementwise", {x}, Attrs{{ew::Pow, 0, 0, 0}, {0.0}}).to(root.dtype());
}
}  // namespace

GradHookHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  if (!leaf.defined() || !leaf.requires_grad() || leaf.impl()->grad_fn)
    throw InvalidArgument("register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad");
  if (!hook) throw InvalidArgument("register_post_accumulate_grad_hook: empty hook");
  HookRegistry& r = hooks();
  std::lock_guard lk(r.mu);
  const uint64_t id = r.next_id++;
  r.by_leaf[leaf.impl()].push_back({id, leaf.impl_ptr(), std::make_shared<PostAccumulateGradHook>(std::move(hook))});
  r.leaf_of[id] = leaf.impl();
  ++g_hook_count;
  return GradHookHandle(id);
}

GradHookHandle& GradHookHandle::operator=(GradHookHandle&& o) noexcept {
  if (this != &o) {
    remove();
    id_ = o.id_;
    o.id_ = 0;
  }
  return *this;
}

void GradHookHandle::remove() {
  if (!id_) return;
  HookRegistry& r = hooks();
  std::lock_guard lk(r.mu);
  auto l = r.leaf_of.find(id_);
  if (l != r.leaf_of.end()) {
    auto it = r.by_leaf.find(l->second);
    auto& v = it->second;
    std::erase_if(v, [&](const HookEntry& e) { return e.id == id_; });
    if (v.empty()) r.by_leaf.erase(it);
    r.leaf_of.erase(l);
    --g_hook_count;
  }
  id_ = 0;
}

bool grad_mode_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }

void record_grad(const OpSchema& op, const std::vector<Tensor>& inputs, const Attrs& attrs, Tensor& out) {
  if (!t_grad_enabled || !op.backward) return;
  bool any = false;
  for (const auto& t : inputs) any |= t.requires_grad();
  if (!any) return;
  out.impl()->requires_grad = true;
  out.impl()->grad_fn = std::make_shared<GradNode>(GradNode{&op, inputs, attrs});
}

void run_backward(const Tensor& root) {
  if (!root.requires_grad()) throw InvalidArgument("backward() on a tensor that does not require grad");
  if (root.numel() != 1)
    throw ShapeError("backward() needs a one-element tensor, got shape " + shape_str(root.shape()));
  if (!root.impl()->grad_fn) throw InvalidArgument("backward() on a leaf tensor (it has no graph)");
  if (is_freed(*root.impl())) throw InvalidArgument(kFreedGraph);
  NoGradGuard no_grad;
  // Gradients are keyed by the tensor they belong to; a non-leaf has exactly one grad_fn.
  using Impl = std::shared_ptr<TensorImpl>;
  std::unordered_map<TensorImpl*, Tensor> grads;
  std::vector<Impl> order;  // post-order: producers before consumers
  std::unordered_set<TensorImpl*> seen;
  std::vector<std::pair<Impl, bool>> stack{{root.impl_ptr(), false}};
  while (!stack.empty()) {
    auto [t, expanded] = std::move(stack.back());
    stack.pop_back();
    if (expanded) {
      order.push_back(std::move(t));
      continue;
    }
    if (!seen.insert(t.get()).second) continue;
    if (is_freed(*t)) throw InvalidArgument(kFreedGraph);  // before any gradient was accumulated
    stack.push_back({t, true});
    if (t->grad_fn)
      for (const auto& in : t->grad_fn->inputs)
        if (in.requires_grad() && !seen.count(in.impl())) stack.push_back({in.impl_ptr(), false});
  }
  std::reverse(order.begin(), order.end());
  // A leaf's gradient is complete once its last consumer ran, so it is accumulated right then
  // (its own place in `order` tends to be after every node): post-accumulate hooks fire as early
  // as possible, and DDP reduces a bucket while the rest of backward runs.
  const auto is_leaf_input = [](const Tensor& in) { return in.requires_grad() && !in.impl()->grad_fn; };
  std::unordered_map<TensorImpl*, int> pending_uses;
  for (const Impl& t : order)
    if (t->grad_fn)
      for (const auto& in : t->grad_fn->inputs)
        if (is_leaf_input(in)) ++pending_uses[in.impl()];
  const auto use_done = [&](const Tensor& leaf) {
    if (--pending_uses[leaf.impl()] != 0) return;
    auto it = grads.find(leaf.impl());
    if (it == grads.end()) return;
    Tensor g = std::move(it->second);
    grads.erase(it);
    TensorImpl* l = leaf.impl();
    l->grad = l->grad ? ops::add(Tensor(l->grad), g).impl_ptr() : g.impl_ptr();
    if (g_hook_count.load(std::memory_order_relaxed) != 0) run_post_accumulate_hooks(leaf.impl_ptr());
  };
  grads[root.impl()] = ones_like_root(root);
  for (const Impl& t : order) {
    if (!t->grad_fn) continue;  // a leaf: accumulated by use_done
    auto it = grads.find(t.get());
    if (it == grads.end()) {  // no gradient reached this node: its leaves lose a use anyway
      const std::shared_ptr<GradNode> node = std::exchange(t->grad_fn, freed_node());
      for (const auto& in : node->inputs)
        if (is_leaf_input(in)) use_done(in);
      continue;
    }
    Tensor g = it->second;
    grads.erase(it);
    // The graph is freed as it is used; the marker stays.
    const std::shared_ptr<GradNode> node = std::exchange(t->grad_fn, freed_node());
    std::vector<Tensor> in_grads = node->op->backward(node->inputs, g, node->attrs);
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      const Tensor& in = node->inputs[i];
      if (!in.requires_grad() || !in_grads[i].defined()) continue;
      auto [slot, fresh] = grads.try_emplace(in.impl(), in_grads[i]);
      if (!fresh) slot->second = ops::add(slot->second, in_grads[i]);
    }
    for (const auto& in : node->inputs)
      if (is_leaf_input(in)) use_done(in);
  }
}

}  // namespace hg
