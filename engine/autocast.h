// Mixed precision like Gaudi's `bf16-mixed`: inside an AutocastGuard, matmul/linear/conv
// run in BF16 and reductions, softmax, norms and losses in F32; other ops run in the widest
// float dtype among their inputs. Casts are ordinary (differentiable) ops, so gradients flow
// back to F32 master weights.
//
//   {
//     hg::AutocastGuard autocast;                 // BF16, this thread only
//     auto logits = net.forward(x);               // linear in BF16
//     auto loss = hg::ops::cross_entropy(logits, y);   // computed in F32
//   }
#pragma once
#include <string_view>
#include <vector>

#include "engine/tensor.h"

namespace hg {

struct OpSchema;

class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true, DType lower = DType::BF16);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

bool autocast_enabled();

enum class AutocastPolicy { Keep, Lower, Fp32, Widest };
AutocastPolicy autocast_policy(std::string_view op);

// Called by dispatch: casts the floating inputs of `op` as the policy says.
void apply_autocast(const OpSchema& op, std::vector<Tensor>& inputs);

}  // namespace hg
