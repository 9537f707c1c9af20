// Engine-op building blocks the optimizers and gradient clipping share: device scalars that
// enter a lazy graph as inputs (so a changing lr does not recompile), one-pass element-wise
// programs, exact element-wise maximum / minimum, and committing a parameter's new value.
//
//   hg::NoGradGuard ng;
//   hg::Tensor lr = hg::training::device_scalar(group.lr(), p->device());   // F32, shape {}
//   hg::training::Fused f;                                                  // p - lr * grad
//   auto p_in = f.in(*p);
//   f.op(hg::ew::Sub, p_in, f.op(hg::ew::Mul, f.in(lr), f.in(p->grad())));
//   hg::training::commit_param(*p, f.run());
#pragma once
#include <array>
#include <utility>
#include <vector>

#include "engine/fused_ops.h"
#include "engine/tensor.h"

namespace hg::training {

// A fresh 0-d F32 tensor holding `value` on `d`. It has storage (never a traced value), so in
// lazy mode it is a graph input: its value is not part of the compiled graph's cache key.
Tensor device_scalar(double value, Device d);

// A device scalar holding `value` on `d`, kept in `slot` while the value and the device stay the
// same and made again when either changes: the same graph input every step, so a replayed step
// (graphs/step_replay.h) reads it as it is (the optimizers' lr, eps, decay factors).
const Tensor& held_scalar(std::pair<double, Tensor>& slot, double value, Device d);

// Writes values[i] into the one-element F32 tensors targets[i] (with storage, all on one
// device) in device order: work queued before reads the old values, work queued after the new.
// The tensors keep their identity, so a replayed step (graphs/step_replay.h) reads the values.
void write_scalars(const std::vector<Tensor>& targets, const std::vector<double>& values);

// An element-wise program run as one fused_elementwise op (one pass, F32: inputs are cast to
// F32, the result is F32; 0-d inputs broadcast). Eagerly it runs at once; lazily it is one node.
class Fused {
 public:
  using Reg = int;  // an input (>= 0) or an instruction's result (< 0)
  Reg in(const Tensor& t);
  Reg op(ew::Opcode code, Reg a, Reg b = 0, double k = 0);
  Reg scale(Reg a, double k) { return op(ew::Scale, a, 0, k); }
  Tensor run() const;  // the value of the last instruction

 private:
  std::vector<Tensor> inputs_;
  std::vector<std::array<int64_t, 3>> code_;  // {opcode, a, b}
  std::vector<double> consts_;
};

// max(a, b) / min(a, b) element-wise with b broadcast to a's shape; exact (NaN propagates).
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// Makes `value` (any dtype: cast to p's) the value of parameter `p`, keeping requires_grad and
// the gradient. A traced (lazy) value rebinds p's Tensor to it, so the update stays in the
// step graph; a computed value is copied into p's storage in device order (in place, as PyTorch:
// HPU graphs and other holders of p's storage see it).
void commit_param(Tensor& p, const Tensor& value);

// Moves optimizer state to the device its parameter lives on now (the module moved).
void follow_device(Tensor& state, Device d);

}  // namespace hg::training
