#include "engine/post_ops.h"

#include <cmath>

namespace hg {

bool valid_fused_act(int64_t code) { return code >= 0 && code <= static_cast<int64_t>(FusedAct::Relu6); }

const char* fused_act_name(FusedAct act) {
  switch (act) {
    case FusedAct::None: return "none";
    case FusedAct::Relu: return "relu";
    case FusedAct::GeluErf: return "gelu";
    case FusedAct::GeluTanh: return "gelu_tanh";
    case FusedAct::Silu: return "silu";
    case FusedAct::Sigmoid: return "sigmoid";
    case FusedAct::Tanh: return "tanh";
    case FusedAct::Relu6: return "relu6";
  }
  return "?";
}

double apply_fused_act(FusedAct act, double x) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588, kInvSqrt2 = 0.70710678118654752440;
  switch (act) {
    case FusedAct::None: return x;
    case FusedAct::Relu: return x < 0 ? 0.0 : x;
    case FusedAct::GeluErf: return 0.5 * x * std::erfc(-x * kInvSqrt2);
    case FusedAct::GeluTanh: return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
    case FusedAct::Silu: return x / (1 + std::exp(-x));
    case FusedAct::Sigmoid: return 1 / (1 + std::exp(-x));
    case FusedAct::Tanh: return std::tanh(x);
    case FusedAct::Relu6: return x < 0 ? 0.0 : x > 6 ? 6.0 : x;
  }
  return x;
}

}  // namespace hg
