#include "engine/autograd.h"

#include <unordered_map>
#include <unordered_set>

#include "engine/error.h"
#include "engine/ops.h"

namespace hg {

namespace {
thread_local bool t_grad_enabled = true;
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
  if (!root.impl()->grad_fn) throw InvalidArgument("backward() on a leaf tensor or a graph already freed");
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
    stack.push_back({t, true});
    if (t->grad_fn)
      for (const auto& in : t->grad_fn->inputs)
        if (in.requires_grad() && !seen.count(in.impl())) stack.push_back({in.impl_ptr(), false});
  }
  std::reverse(order.begin(), order.end());
  grads[root.impl()] = Tensor::full(root.shape(), 1.0f, root.device()).to(root.dtype());  // seed in the root's dtype
  for (const Impl& t : order) {
    auto it = grads.find(t.get());
    if (it == grads.end()) continue;
    Tensor g = it->second;
    grads.erase(it);
    if (!t->grad_fn) {  // a leaf: accumulate into .grad
      t->grad = t->grad ? ops::add(Tensor(t->grad), g).impl_ptr() : g.impl_ptr();
      continue;
    }
    std::shared_ptr<GradNode> node = std::move(t->grad_fn);  // the graph is freed as it is used
    std::vector<Tensor> in_grads = node->op->backward(node->inputs, g, node->attrs);
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      const Tensor& in = node->inputs[i];
      if (!in.requires_grad() || !in_grads[i].defined()) continue;
      auto [slot, fresh] = grads.try_emplace(in.impl(), in_grads[i]);
      if (!fresh) slot->second = ops::add(slot->second, in_grads[i]);
    }
  }
}

}  // namespace hg
