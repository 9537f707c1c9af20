#include "training/update_ops.h"

#include <cstring>

#include "engine/error.h"
#include "engine/op.h"
#include "engine/ops.h"

namespace hg::training {

Tensor device_scalar(double value, Device d) { return Tensor::full({}, static_cast<float>(value), d); }

const Tensor& held_scalar(std::pair<double, Tensor>& slot, double value, Device d) {
  if (!slot.second.defined() || slot.first != value || slot.second.device() != d) slot = {value, device_scalar(value, d)};
  return slot.second;
}

void write_scalars(const std::vector<Tensor>& targets, const std::vector<double>& values) {
  if (targets.empty()) return;
  std::vector<std::pair<std::shared_ptr<Storage>, float>> w;
  for (size_t i = 0; i < targets.size(); ++i) {
    const TensorImpl* t = targets[i].impl();
    if (!t->storage || t->meta.dtype != DType::F32 || t->meta.numel() != 1 || t->offset != 0 ||
        t->device != targets[0].device())
      throw InternalError("write_scalars: target " + std::to_string(i) + " is not a one-element F32 tensor with storage");
    w.emplace_back(t->storage, static_cast<float>(values.at(i)));
  }
  device_backend(targets[0].device()).enqueue([w = std::move(w)] {
    for (const auto& [st, v] : w) *static_cast<float*>(st->data) = v;
  });
}

Fused::Reg Fused::in(const Tensor& t) {
  if (!code_.empty()) throw InternalError("Fused: inputs come before instructions");
  inputs_.push_back(t.to(DType::F32));
  return static_cast<Reg>(inputs_.size()) - 1;
}

Fused::Reg Fused::op(ew::Opcode code, Reg a, Reg b, double k) {
  code_.push_back({code, a, b});
  consts_.push_back(k);
  return -static_cast<Reg>(code_.size());
}

Tensor Fused::run() const {
  const auto n = static_cast<int64_t>(inputs_.size());
  auto reg = [n](int64_t r) { return r >= 0 ? r : n - r - 1; };
  Attrs prog;
  for (const auto& [code, a, b] : code_) prog.ints.insert(prog.ints.end(), {code, reg(a), reg(b), 0});
  prog.floats = consts_;
  return dispatch("fused_elementwise", inputs_, prog);
}

namespace {

// Both operands stacked along a new first axis, b broadcast to a's shape.
Tensor stacked(const Tensor& a, const Tensor& b) {
  const Tensor bb = b.shape() == a.shape() ? b : ops::expand(b, a.shape());
  return ops::concat({ops::unsqueeze(a, 0), ops::unsqueeze(bb, 0)}, 0);
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return ops::max(stacked(a, b), 0); }

Tensor minimum(const Tensor& a, const Tensor& b) {
  return ops::scale(ops::max(stacked(ops::scale(a, -1.0), ops::scale(b, -1.0)), 0), -1.0);
}

void commit_param(Tensor& p, const Tensor& value) {
  Tensor v = value.dtype() == p.dtype() ? value : value.to(p.dtype());
  TensorImpl* pi = p.impl();
  if (v.is_lazy() || p.is_lazy() || !p.is_contiguous() || v.device() != p.device()) {
    // v is a fresh op output (a traced value is known to its trace by this impl): it becomes
    // the parameter, with the parameter's flags and gradient.
    TensorImpl* vi = v.impl();
    vi->grad_fn.reset();
    vi->grad = pi->grad;
    vi->requires_grad = pi->requires_grad;
    p = v;
    return;
  }
  v = v.contiguous();
  auto dst = pi->storage, src = v.impl()->storage;
  char* to = static_cast<char*>(dst->data) + pi->offset * static_cast<int64_t>(dtype_size(p.dtype()));
  const char* from =
      static_cast<const char*>(src->data) + v.impl()->offset * static_cast<int64_t>(dtype_size(v.dtype()));
  const size_t bytes = p.meta().bytes();
  device_backend(p.device()).enqueue([dst, src, to, from, bytes] { std::memcpy(to, from, bytes); });
}

void follow_device(Tensor& state, Device d) {
  if (state.defined() && state.device() != d) state = state.to(d);
}

}  // namespace hg::training
