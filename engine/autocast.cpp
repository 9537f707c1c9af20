#include "engine/autocast.h"

#include <array>

#include "engine/op.h"

namespace hg {

namespace {
thread_local bool t_enabled = false;
thread_local DType t_lower = DType::BF16;

constexpr std::array kLower{"matmul", "linear", "conv2d", "bmm"};
constexpr std::array kFp32{"softmax", "softmax_backward", "reduce", "sum_to", "cross_entropy",
                           "cross_entropy_backward", "mse_loss", "batch_norm", "layer_norm", "log_softmax"};
}  // namespace

AutocastGuard::AutocastGuard(bool enabled, DType lower) : prev_enabled_(t_enabled), prev_dtype_(t_lower) {
  t_enabled = enabled;
  t_lower = lower;
}

AutocastGuard::~AutocastGuard() {
  t_enabled = prev_enabled_;
  t_lower = prev_dtype_;
}

bool autocast_enabled() { return t_enabled; }

AutocastPolicy autocast_policy(std::string_view op) {
  for (const char* n : kLower)
    if (op == n) return AutocastPolicy::Lower;
  for (const char* n : kFp32)
    if (op == n) return AutocastPolicy::Fp32;
  if (op == "cast") return AutocastPolicy::Keep;
  return AutocastPolicy::Widest;
}

void apply_autocast(const OpSchema& op, std::vector<Tensor>& inputs) {
  if (!t_enabled) return;
  const AutocastPolicy p = autocast_policy(op.name);
  if (p == AutocastPolicy::Keep) return;
  DType target = p == AutocastPolicy::Lower ? t_lower : DType::F32;
  if (p == AutocastPolicy::Widest) {
    bool any = false;
    for (const auto& t : inputs)
      if (is_floating(t.dtype())) target = any ? promote_types(target, t.dtype()) : t.dtype(), any = true;
    if (!any) return;
  }
  for (auto& t : inputs)
    if (is_floating(t.dtype()) && t.dtype() != target && !(p == AutocastPolicy::Fp32 && t.dtype() == DType::F64))
      t = t.to(target);
}

}  // namespace hg
