#include "training/update_ops.h"

#include <cstring>

#include "engine/ops.h"

namespace hg::training {

Tensor device_scalar(double value, Device d) { return Tensor::full({}, static_cast<float>(value), d); }

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
