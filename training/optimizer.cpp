#include "training/optimizer.h"

#include <cmath>
#include <limits>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/hash.h"
#include "engine/ops.h"
#include "training/update_ops.h"

namespace hg::training {

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_)
    for (auto& [name, p] : g.params) p->zero_grad();
}

uint64_t Optimizer::replay_guard() const {
  Hasher h;
  auto add = [&](const void* p, size_t n) { h.update({static_cast<const uint8_t*>(p), n}); };
  for (const ParamGroup& g : groups_) {
    for (const auto& [key, value] : g.options) {
      add(key.data(), key.size() + 1);  // with the terminating zero: keys stay apart
      add(&value, sizeof value);
    }
    for (const auto& [name, p] : g.params) add(&p, sizeof p);
  }
  return h.digest();
}

NamedParams Optimizer::params() const {
  NamedParams all;
  for (const ParamGroup& g : groups_) all.insert(all.end(), g.params.begin(), g.params.end());
  return all;
}

namespace {

// The parameters that have a gradient, all on one device.
std::vector<Tensor*> with_grads(const NamedParams& params, const char* who) {
  std::vector<Tensor*> out;
  for (const auto& [name, p] : params) {
    if (!p->grad().defined()) continue;
    if (!out.empty() && p->grad().device() != out[0]->grad().device())
      throw InvalidArgument(std::string(who) + ": the gradient of '" + name + "' is on " +
                            p->grad().device().str() + ", the others on " + out[0]->grad().device().str());
    out.push_back(p);
  }
  return out;
}

void set_grad(Tensor* p, const Tensor& g) {
  p->impl()->grad = (g.dtype() == p->dtype() ? g : g.to(p->dtype())).impl_ptr();
}

Tensor flat(const Tensor& t) { return ops::reshape(t, {t.numel()}); }

}  // namespace

Tensor clip_grad_norm(const NamedParams& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  if (!(norm_type > 0)) throw InvalidArgument("clip_grad_norm: norm_type " + std::to_string(norm_type) + " must be > 0");
  NoGradGuard no_grad;
  const std::vector<Tensor*> ps = with_grads(params, "clip_grad_norm");
  if (ps.empty()) return Tensor::zeros({});
  const Device d = ps[0]->grad().device();
  const bool inf = std::isinf(norm_type);
  std::vector<Tensor> parts;  // one [1] tensor per gradient
  for (Tensor* p : ps) {
    const Tensor g = flat(p->grad().to(DType::F32));
    if (g.numel() == 0) continue;
    Tensor part;
    if (inf)
      part = ops::max(ops::concat({g, ops::scale(g, -1.0)}, 0));  // max |g|
    else if (norm_type == 2.0)  // g . g as a [1, n] x [n, 1] matmul: faster than mul + sum
      part = ops::matmul(ops::reshape(g, {1, g.numel()}), ops::reshape(g, {1, g.numel()}), false, true);
    else
      part = ops::sum(ops::pow(maximum(g, ops::scale(g, -1.0)), norm_type));
    parts.push_back(ops::reshape(part, {1}));
  }
  if (parts.empty()) return Tensor::zeros({}, DType::F32, d);
  const Tensor all = parts.size() == 1 ? parts[0] : ops::concat(parts, 0);
  Tensor total = inf ? ops::max(all) : norm_type == 2.0 ? ops::sqrt(ops::sum(all))
                                                         : ops::pow(ops::sum(all), 1.0 / norm_type);
  if (error_if_nonfinite && !std::isfinite(total.item()))
    throw InvalidArgument("clip_grad_norm: the total norm of order " + std::to_string(norm_type) +
                          " of the gradients is non-finite, so it cannot be clipped");
  // clip_coef = max_norm / (total + 1e-6), at most 1; the constants computed from `total` (x^0 is
  // 1 for every x), not made on the host: a step that clips stays replayable (graphs/step_replay.h)
  const Tensor one = ops::pow(total, 0.0);
  const Tensor coef = minimum(ops::div(ops::scale(one, max_norm), ops::add(total, ops::scale(one, 1e-6))), one);
  for (Tensor* p : ps) set_grad(p, ops::mul(p->grad(), coef));
  return total;
}

void clip_grad_value(const NamedParams& params, double clip_value) {
  if (!(clip_value >= 0)) throw InvalidArgument("clip_grad_value: clip_value " + std::to_string(clip_value) + " must be >= 0");
  NoGradGuard no_grad;
  for (Tensor* p : with_grads(params, "clip_grad_value")) {
    const Tensor g = p->grad();
    // the bounds computed from g (as clip_grad_norm's constants), not made on the host
    const Tensor one = ops::pow(ops::sum(g.to(DType::F32)), 0.0);
    set_grad(p, minimum(maximum(g, ops::scale(one, -clip_value).to(g.dtype())), ops::scale(one, clip_value).to(g.dtype())));
  }
}

}  // namespace hg::training
