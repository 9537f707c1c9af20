// Reverse-mode autograd over the op registry: each op output that depends on a tensor with
// requires_grad gets a GradNode; backward() walks them in reverse topological order. The
// backward formulas are themselves ops, so they run eagerly or are traced like the forward.
//
//   auto w = hg::Tensor::from_vector({...}, {3, 4}); w.set_requires_grad(true);
//   auto loss = hg::ops::mean(hg::ops::relu(hg::ops::matmul(x, w, false, true)));
//   loss.backward();            // w.grad() now holds d loss / d w
//   { hg::NoGradGuard g; ... }  // no history recorded inside
//   // backward frees the graph it ran: a second backward through any of its tensors throws
//   // hg::InvalidArgument ("trying to backward through the graph a second time"), as in PyTorch.
//
//   // PyTorch's register_post_accumulate_grad_hook: runs during backward, right after a leaf's
//   // .grad was accumulated (in lazy mode .grad is still a pending traced value then).
//   hg::GradHookHandle h = hg::register_post_accumulate_grad_hook(w, [](const hg::Tensor& leaf) {
//     use(leaf.grad());
//   });                         // removed when `h` goes (or h.remove())
#pragma once
#include <functional>

#include "engine/op.h"

namespace hg {

struct GradNode {
  const OpSchema* op;          // null: a marker left by backward (the graph was freed)
  std::vector<Tensor> inputs;  // saved inputs (their impls carry the edges)
  Attrs attrs;
};

bool grad_mode_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Called by dispatch: attaches history to `out` when grad mode is on and an input needs it.
void record_grad(const OpSchema& op, const std::vector<Tensor>& inputs, const Attrs& attrs, Tensor& out);
void run_backward(const Tensor& root);

// Hooks on leaf tensors (requires_grad, no grad_fn), keyed by the tensor's impl: a tensor
// that shares the impl shares the hooks. Hooks run on the thread running backward, in
// registration order; one that throws ends backward with its exception. Registering or
// removing hooks from inside a hook is allowed (it takes effect at the next leaf).
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

class GradHookHandle {
 public:
  GradHookHandle() = default;
  ~GradHookHandle() { remove(); }
  GradHookHandle(GradHookHandle&& o) noexcept : id_(o.id_) { o.id_ = 0; }
  GradHookHandle& operator=(GradHookHandle&& o) noexcept;
  GradHookHandle(const GradHookHandle&) = delete;
  GradHookHandle& operator=(const GradHookHandle&) = delete;
  void remove();  // idempotent
  bool active() const { return id_ != 0; }

 private:
  friend GradHookHandle register_post_accumulate_grad_hook(const Tensor&, PostAccumulateGradHook);
  explicit GradHookHandle(uint64_t id) : id_(id) {}
  uint64_t id_ = 0;
};

// Throws InvalidArgument for a tensor that is not a leaf requiring grad.
[[nodiscard]] GradHookHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);

}  // namespace hg
