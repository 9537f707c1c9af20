// Reverse-mode autograd over the op registry: each op output that depends on a tensor with
// requires_grad gets a GradNode; backward() walks them in reverse topological order. The
// backward formulas are themselves ops, so they run eagerly or are traced like the forward.
//
//   auto w = hg::Tensor::from_vector({...}, {3, 4}); w.set_requires_grad(true);
//   auto loss = hg::ops::mean(hg::ops::relu(hg::ops::matmul(x, w, false, true)));
//   loss.backward();            // w.grad() now holds d loss / d w
//   { hg::NoGradGuard g; ... }  // no history recorded inside
#pragma once
#include "engine/op.h"

namespace hg {

struct GradNode {
  const OpSchema* op;
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

}  // namespace hg
