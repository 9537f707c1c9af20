// Autograd coverage: every op the engine registers is either differentiable or listed below as
// not differentiable with the reason, and every differentiable op has a finite-difference
// gradient check in kGradChecks that really runs it (the op must appear on the autograd graph
// of the checked function). A new op without a backward and a reason, or with a backward and
// no gradient check, fails AutogradCoverage.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/fused_ops.h"
#include "engine/generator.h"
#include "engine/op.h"
#include "engine/ops.h"
#include "tests/gradcheck.h"

namespace hg {
namespace {

using Ts = std::vector<Tensor>;
using Fn = std::function<Tensor(const Ts&)>;

// Ops without a backward, and why.
const std::map<std::string, std::string> kNotDifferentiable = {
    {"argmax", "integer output"},
    {"batch_norm_update_stats", "running statistics, updated outside autograd"},
    {"fused_elementwise", "produced only by the fusion pass on graphs without autograd history"},
    {"squeeze_excite", "produced only by the fusion pass on graphs without autograd history"},
    {"to_blocked", "inference only: the layout pass inserts it into compiled graphs with frozen weights"},
    {"from_blocked", "inference only: the layout pass inserts it into compiled graphs with frozen weights"},
    {"matmul_int8", "inference only: the INT8 precision pass puts it into compiled graphs with frozen weights"},
    {"recurrent", "inference only: the sequence loop of imported ONNX LSTM/GRU/RNN layers (no trainable layer uses it)"},
    {"channel_sum", "only in conv2d's backward formula (no double backward)"},
    {"amax_backward", "backward formula (no double backward)"},
    {"reduce_backward", "backward formula (no double backward)"},
    {"relu_backward", "backward formula (no double backward)"},
    {"clamp_backward", "backward formula (no double backward)"},
    {"softmax_backward", "backward formula (no double backward)"},
    {"gelu_backward", "backward formula (no double backward)"},
    {"silu_backward", "backward formula (no double backward)"},
    {"tanh_backward", "backward formula (no double backward)"},
    {"sigmoid_backward", "backward formula (no double backward)"},
    {"embedding_backward", "backward formula (no double backward)"},
    {"gather_backward", "backward formula (no double backward)"},
    {"where_backward", "backward formula (no double backward)"},
    {"cross_entropy_backward", "backward formula (no double backward)"},
    {"mse_loss_backward", "backward formula (no double backward)"},
    {"conv2d_backward_input", "backward formula (no double backward)"},
    {"conv2d_backward_weight", "backward formula (no double backward)"},
    {"max_pool2d_backward", "backward formula (no double backward)"},
    {"avg_pool2d_backward", "backward formula (no double backward)"},
    {"adaptive_avg_pool2d_backward", "backward formula (no double backward)"},
    {"batch_norm_train_backward", "backward formula (no double backward)"},
    {"batch_norm_eval_backward", "backward formula (no double backward)"},
    {"layer_norm_backward", "backward formula (no double backward)"},
};

// ---- inputs ----

Tensor randn(const Shape& s, uint32_t seed, DType dt = DType::F64, double scale = 1, double shift = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (auto& x : v) x = static_cast<float>(shift + scale * nd(rng));
  return Tensor::from_vector(v, s).to(dt).detach();
}
Tensor f32(const Shape& s, uint32_t seed, double scale = 1) { return randn(s, seed, DType::F32, scale); }
// Values at least 0.1 away from 0 (relu's kink).
Tensor off_zero(const Shape& s, uint32_t seed) {
  Tensor t = randn(s, seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] += t.data<double>()[i] >= 0 ? 0.1 : -0.1;
  return t;
}
Tensor bools(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_indices(v, s).to(DType::BOOL); }

// ---- the check ----

void collect_ops(const Tensor& t, std::set<std::string>& names, std::set<const TensorImpl*>& seen) {
  if (!t.defined() || !seen.insert(t.impl()).second || !t.impl()->grad_fn) return;
  names.insert(t.impl()->grad_fn->op->name);
  for (const auto& in : t.impl()->grad_fn->inputs) collect_ops(in, names, seen);
}

// Finite differences of f in inputs `wrt` (F64: eps 1e-6; F32, the oneDNN kernels: eps 1e-3 and
// a looser tolerance), and `op` must be on f's autograd graph.
void fd(const std::string& op, const Fn& f, Ts inputs, const std::vector<size_t>& wrt, const std::string& what,
        double f32_tol = 5e-3) {
  std::set<std::string> ran;
  auto traced = [&](const Ts& in) {
    Tensor out = f(in);
    if (grad_mode_enabled()) {
      std::set<const TensorImpl*> seen;
      collect_ops(out, ran, seen);
    }
    return out;
  };
  const bool f64 = inputs[wrt[0]].dtype() == DType::F64;
  const test::FdTolerance tol = f64 ? test::FdTolerance{1e-6, 1e-5, 1e-6} : test::FdTolerance{1e-3, f32_tol, f32_tol};
  test::expect_fd_gradients(traced, std::move(inputs), wrt, op + ": " + what, tol);
  EXPECT_TRUE(ran.count(op)) << what << ": op '" << op << "' is not on the autograd graph";
}

Tensor sdpa(const Ts& in, int64_t kind, int64_t causal, bool kt, double scale, double causal_value = -INFINITY,
            double fill = 0) {
  return dispatch("sdpa", in, Attrs{{kind, causal, kt}, {scale, causal_value, fill}});
}

void check_sdpa() {
  const std::string op = "sdpa";
  const Ts qkv{f32({2, 2, 3, 4}, 1), f32({2, 2, 5, 4}, 2), f32({2, 2, 5, 3}, 3)};
  const std::vector<size_t> all{0, 1, 2};
  for (int64_t causal : {sdpa::kNotCausal, sdpa::kCausalAfterMask})
    fd(op, [=](auto& in) { return sdpa(in, sdpa::kNoMask, causal, false, 0.5); }, qkv, all,
       "no mask, causal " + std::to_string(causal));
  // k stored transposed [..., D, S], a finite causal value (its entries get no gradient)
  fd(op, [](auto& in) { return sdpa(in, sdpa::kNoMask, sdpa::kCausalBeforeMask, true, 0.7, 0.3); },
     {f32({2, 3, 4}, 4), f32({2, 4, 3}, 5), f32({2, 3, 2}, 6)}, all, "k transposed, causal value 0.3");
  const Tensor keep = bools({1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0}, {3, 5});  // true = may attend
  const Tensor fill = Tensor::full({1}, -2.0f);
  fd(op, [&](auto& in) { return sdpa({in[0], in[1], in[2], keep, fill}, sdpa::kWhere, sdpa::kNotCausal, false, 0.5); },
     qkv, all, "where mask [3, 5], fill -2");
  fd(op, [&](auto& in) { return sdpa({in[0], in[1], in[2], keep, fill}, sdpa::kWhere, sdpa::kCausalBeforeMask, false, 0.5); },
     qkv, all, "where mask and causal");
  const Tensor masked = bools({0, 1, 0, 0, 1}, {1, 1, 1, 5});  // true = masked
  fd(op, [&](auto& in) { return sdpa({in[0], in[1], in[2], masked}, sdpa::kMaskedFill, sdpa::kNotCausal, false, 0.5, 0, -1.5); },
     qkv, all, "masked_fill with -1.5, mask [1, 1, 1, 5]");
  const Tensor additive = f32({2, 1, 3, 5}, 7);
  for (int64_t causal : {sdpa::kNotCausal, sdpa::kCausalAfterMask})
    fd(op, [&](auto& in) { return sdpa({in[0], in[1], in[2], additive}, sdpa::kAdd, causal, false, 0.5); }, qkv, all,
       "additive mask [2, 1, 3, 5], causal " + std::to_string(causal));
  // A learned additive bias: its gradient too (broadcast over heads, zero where causal filled).
  for (int64_t causal : {sdpa::kNotCausal, sdpa::kCausalAfterMask})
    fd(op, [&](auto& in) { return sdpa(in, sdpa::kAdd, causal, false, 0.5); },
       {qkv[0], qkv[1], qkv[2], additive}, {0, 1, 2, 3}, "additive mask with gradient, causal " + std::to_string(causal));
}

void check_conv(const std::string& op) {
  const bool bias = op == "conv2d";
  auto conv = [bias](const Ts& in, ops::Size2 stride, ops::Size2 pad, int64_t groups) {
    return bias ? ops::conv2d(in[0], in[1], in[2], stride, pad, {1, 1}, groups)
                : ops::conv2d(in[0], in[1], stride, pad, {1, 1}, groups);
  };
  Ts in{f32({2, 2, 5, 5}, 1), f32({4, 2, 3, 3}, 2)};
  if (bias) in.push_back(f32({4}, 3));
  std::vector<size_t> wrt{0, 1};
  if (bias) wrt.push_back(2);
  fd(op, [=](auto& t) { return conv(t, {1, 1}, {0, 0}, 1); }, in, wrt, "dense");
  in[1] = f32({4, 1, 3, 3}, 4);
  fd(op, [=](auto& t) { return conv(t, {2, 2}, {1, 1}, 2); }, in, wrt, "stride 2, padding 1, groups 2");
}

void check_batch_norm(const std::string& op) {
  const bool train = op == "batch_norm_train";
  const Tensor rm = f32({3}, 4, 0.1), rv = Tensor::full({3}, 1.5f);
  fd(op, [=](auto& in) { return ops::batch_norm(in[0], in[1], in[2], rm, rv, train); },
     {f32({4, 3, 2, 2}, 1), f32({3}, 2), f32({3}, 3)}, {0, 1, 2}, "x, weight, bias", 1e-2);
  fd(op, [=](auto& in) { return ops::batch_norm(in[0], {}, {}, rm, rv, train); }, {f32({5, 3}, 5)}, {0},
     "[N, C] without affine", 1e-2);
}

void check_sdpa_like_attention(const std::string& op) {  // where, masked_fill, causal_fill
  if (op == "causal_fill") {
    fd(op, [](auto& in) { return ops::causal_fill(in[0], -3.0); }, {randn({2, 3, 4}, 1)}, {0}, "[2, 3, 4]");
  } else if (op == "where") {
    fd(op, [](auto& in) { return ops::where(in[0], in[1], in[2]); },
       {bools({1, 0}, {2, 1}), randn({1, 3}, 2), randn({2, 3}, 3)}, {1, 2}, "broadcast");
  } else {
    fd(op, [](auto& in) { return ops::masked_fill(in[0], in[1], 0.5); }, {randn({2, 1}, 4), bools({0, 1, 0}, {1, 3})},
       {0}, "mask [1, 3]");
  }
}

// op name -> its gradient checks.
const std::map<std::string, std::function<void(const std::string&)>>& grad_checks() {
  static const std::map<std::string, std::function<void(const std::string&)>> checks = {
      {"cast",
       [](auto& op) { fd(op, [](auto& in) { return ops::mul(in[0].to(DType::F64), in[0].to(DType::F64)); }, {f32({3}, 1)}, {0}, "F32 -> F64"); }},
      {"matmul",
       [](auto& op) {
         for (bool ta : {false, true})
           for (bool tb : {false, true})
             fd(op, [=](auto& in) { return ops::matmul(in[0], in[1], ta, tb); },
                {randn(ta ? Shape{4, 3} : Shape{3, 4}, 1), randn(tb ? Shape{2, 4} : Shape{4, 2}, 2)}, {0, 1},
                "trans " + std::to_string(ta) + std::to_string(tb));
         fd(op, [](auto& in) { return dispatch("matmul", in, Attrs{{0, 1, 0}, {}}); },
            {randn({3, 4}, 3), randn({2, 4}, 4), randn({2}, 5)}, {0, 1, 2}, "with bias");
       }},
      {"linear",
       [](auto& op) {
         fd(op, [](auto& in) { return ops::linear(in[0], in[1], in[2]); }, {randn({2, 3}, 1), randn({4, 3}, 2), randn({4}, 3)},
            {0, 1, 2}, "x, weight, bias");
       }},
      {"binary",
       [](auto& op) {
         const Ts in{randn({2, 1, 3}, 1), randn({4, 1}, 2, DType::F64, 1, 3)};  // b away from 0
         fd(op, [](auto& t) { return ops::add(t[0], t[1]); }, in, {0, 1}, "add broadcast");
         fd(op, [](auto& t) { return ops::sub(t[0], t[1]); }, in, {0, 1}, "sub broadcast");
         fd(op, [](auto& t) { return ops::mul(t[0], t[1]); }, in, {0, 1}, "mul broadcast");
         fd(op, [](auto& t) { return ops::div(t[0], t[1]); }, in, {0, 1}, "div broadcast");
       }},
      {"scale", [](auto& op) { fd(op, [](auto& in) { return ops::scale(in[0], -1.5); }, {randn({3, 2}, 1)}, {0}, "-1.5"); }},
      {"relu", [](auto& op) { fd(op, [](auto& in) { return ops::relu(in[0]); }, {off_zero({3, 4}, 1)}, {0}, "[3, 4]"); }},
      {"softmax",
       [](auto& op) {
         fd(op, [](auto& in) { return ops::softmax(in[0], -1); }, {randn({2, 5}, 1)}, {0}, "softmax dim -1");
         fd(op, [](auto& in) { return ops::log_softmax(in[0], 0); }, {randn({3, 2}, 2)}, {0}, "log_softmax dim 0");
       }},
      {"reshape", [](auto& op) { fd(op, [](auto& in) { return in[0].reshape({3, -1}); }, {randn({2, 3, 2}, 1)}, {0}, "[3, 4]"); }},
      {"expand", [](auto& op) { fd(op, [](auto& in) { return ops::expand(in[0], {3, 2, 4}); }, {randn({2, 1}, 1)}, {0}, "[2, 1] -> [3, 2, 4]"); }},
      {"sum_to", [](auto& op) { fd(op, [](auto& in) { return ops::sum_to(in[0], {2, 1}); }, {randn({3, 2, 4}, 1)}, {0}, "[3, 2, 4] -> [2, 1]"); }},
      {"gelu",
       [](auto& op) {
         fd(op, [](auto& in) { return ops::gelu(in[0]); }, {randn({3, 5}, 1, DType::F64, 2)}, {0}, "erf");
         fd(op, [](auto& in) { return ops::gelu(in[0], "tanh"); }, {randn({3, 5}, 1, DType::F64, 2)}, {0}, "tanh");
       }},
      {"silu", [](auto& op) { fd(op, [](auto& in) { return ops::silu(in[0]); }, {randn({3, 5}, 1, DType::F64, 2)}, {0}, "[3, 5]"); }},
      {"tanh", [](auto& op) { fd(op, [](auto& in) { return ops::tanh(in[0]); }, {randn({3, 5}, 1, DType::F64, 2)}, {0}, "[3, 5]"); }},
      {"sigmoid", [](auto& op) { fd(op, [](auto& in) { return ops::sigmoid(in[0]); }, {randn({3, 5}, 1, DType::F64, 2)}, {0}, "[3, 5]"); }},
      {"clamp",  // randn * 2 has elements on both sides of [-1, 0.5]; none within 1e-3 of a bound
       [](auto& op) {
         fd(op, [](auto& in) { return ops::clamp(in[0], -1.0, 0.5); }, {randn({3, 5}, 2, DType::F64, 2)}, {0}, "[-1, 0.5]");
         fd(op, [](auto& in) { return ops::clamp(in[0], -INFINITY, 0.0); }, {randn({3, 5}, 2, DType::F64, 3)}, {0}, "max only");
       }},
      {"dropout",
       [](auto& op) {
         fd(op,
            [](auto& in) {
              manual_seed(Device::cpu(), 5);  // the same mask on every evaluation
              return ops::dropout(in[0], 0.4);
            },
            {randn({4, 5}, 1)}, {0}, "p 0.4");
       }},
      {"embedding",
       [](auto& op) {
         const Tensor tok = Tensor::from_indices({1, 3, 1, 0, 3, 3}, {2, 3});
         fd(op, [=](auto& in) { return ops::embedding(tok, in[0]); }, {randn({5, 2}, 1)}, {0}, "repeated indices");
       }},
      {"gather",
       [](auto& op) {
         const Tensor i0 = Tensor::from_indices({2, 0, 1, 2, 2, 2, 0, 1}, {2, 4});
         fd(op, [=](auto& in) { return ops::gather(in[0], 0, i0); }, {randn({3, 4}, 1)}, {0}, "dim 0");
         const Tensor i1 = Tensor::from_indices({3, 3, 0, 1, 2, 0}, {3, 2});
         fd(op, [=](auto& in) { return ops::gather(in[0], 1, i1); }, {randn({3, 4}, 2)}, {0}, "dim 1");
       }},
      {"where", check_sdpa_like_attention},
      {"masked_fill", check_sdpa_like_attention},
      {"causal_fill", check_sdpa_like_attention},
      {"cross_entropy",
       [](auto& op) {
         const Tensor t = Tensor::from_indices({1, -100, 3, 0, 2}, {5});
         for (auto red : {ops::Reduction::Mean, ops::Reduction::Sum, ops::Reduction::None})
           for (double smooth : {0.0, 0.1})
             fd(op, [=](auto& in) { return ops::cross_entropy(in[0], t, -100, smooth, red); }, {randn({5, 4}, 1, DType::F64, 2)},
                {0}, "reduction " + std::to_string(static_cast<int>(red)) + " smoothing " + std::to_string(smooth));
       }},
      {"mse_loss",
       [](auto& op) {
         for (auto red : {ops::Reduction::Mean, ops::Reduction::Sum, ops::Reduction::None})
           fd(op, [=](auto& in) { return ops::mse_loss(in[0], in[1], red); }, {randn({3, 4}, 1), randn({3, 4}, 2)}, {0, 1},
              "reduction " + std::to_string(static_cast<int>(red)));
       }},
      {"unary_math",
       [](auto& op) {
         const Tensor pos = randn({3, 4}, 1, DType::F64, 0.2, 1.5);
         fd(op, [](auto& in) { return ops::sqrt(in[0]); }, {pos}, {0}, "sqrt");
         fd(op, [](auto& in) { return ops::erf(in[0]); }, {randn({3, 4}, 2)}, {0}, "erf");
         fd(op, [](auto& in) { return ops::exp(in[0]); }, {randn({3, 4}, 3)}, {0}, "exp");
         fd(op, [](auto& in) { return ops::pow(in[0], 1.5); }, {pos}, {0}, "pow 1.5");
       }},
      {"conv2d", check_conv},
      {"conv2d_nobias", check_conv},
      {"max_pool2d",
       [](auto& op) {
         fd(op, [](auto& in) { return ops::max_pool2d(in[0], {2, 2}); }, {f32({2, 2, 4, 4}, 1)}, {0}, "2x2");
         fd(op, [](auto& in) { return ops::max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}); }, {f32({1, 2, 5, 5}, 2)}, {0},
            "3x3 stride 2 padding 1");
       }},
      {"avg_pool2d",
       [](auto& op) {
         for (bool include : {true, false})
           fd(op, [=](auto& in) { return ops::avg_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, include); }, {f32({1, 2, 5, 5}, 1)}, {0},
              include ? "count_include_pad" : "padding not counted");
       }},
      {"adaptive_avg_pool2d",
       [](auto& op) {
         fd(op, [](auto& in) { return ops::adaptive_avg_pool2d(in[0], {2, 3}); }, {randn({2, 2, 5, 7}, 1)}, {0}, "5x7 -> 2x3");
       }},
      {"batch_norm_train", check_batch_norm},
      {"batch_norm_eval", check_batch_norm},
      {"layer_norm",
       [](auto& op) {
         fd(op, [](auto& in) { return ops::layer_norm(in[0], {3, 4}, in[1], in[2]); },
            {randn({2, 3, 4}, 1), randn({3, 4}, 2), randn({3, 4}, 3)}, {0, 1, 2}, "over [3, 4]");
         fd(op, [](auto& in) { return ops::layer_norm(in[0], {4}, {}, {}); }, {randn({3, 4}, 4)}, {0}, "no affine");
       }},
      {"reduce",
       [](auto& op) {
         for (bool keep : {false, true}) {
           fd(op, [=](auto& in) { return ops::sum(in[0], {0, 2}, keep); }, {randn({2, 3, 4}, 1)}, {0}, "sum {0, 2}");
           fd(op, [=](auto& in) { return ops::mean(in[0], {-1, 1}, keep); }, {randn({2, 3, 2, 2}, 2)}, {0}, "mean {-1, 1}");
           fd(op, [=](auto& in) { return ops::max(in[0], {1, 3}, keep); }, {randn({2, 3, 2, 3}, 3)}, {0}, "max {1, 3}");
         }
         fd(op, [](auto& in) { return ops::mean(in[0]); }, {randn({3, 4}, 4)}, {0}, "mean of all");
       }},
      {"permute",
       [](auto& op) { fd(op, [](auto& in) { return ops::permute(in[0], {2, 0, 3, 1}); }, {randn({2, 3, 2, 2}, 1)}, {0}, "4-D"); }},
      {"contiguous", [](auto& op) { fd(op, [](auto& in) { return dispatch("contiguous", {in[0]}); }, {randn({3, 2}, 1)}, {0}, "copy"); }},
      {"slice",
       [](auto& op) { fd(op, [](auto& in) { return ops::slice(in[0], 1, -5, 7, 2); }, {randn({2, 6, 2}, 1)}, {0}, "step 2"); }},
      {"slice_backward",
       [](auto& op) {
         fd(op, [](auto& in) { return dispatch("slice_backward", {in[0]}, Attrs{{1, 1, 2, 7}, {}}); }, {randn({2, 3, 2}, 1)},
            {0}, "3 of 7 from 1 by 2");
       }},
      {"concat",
       [](auto& op) {
         fd(op, [](auto& in) { return ops::concat(in, 1); }, {randn({2, 1, 3}, 1), randn({2, 2, 3}, 2), randn({2, 3, 3}, 3)},
            {0, 1, 2}, "inner dim");
       }},
      {"bmm",
       [](auto& op) {
         fd(op, [](auto& in) { return ops::bmm(in[0], in[1]); }, {f32({2, 1, 3, 2}, 1), f32({1, 2, 2, 3}, 2)}, {0, 1},
            "broadcast batch");
         fd(op, [](auto& in) { return ops::bmm(in[0], in[1], true, true); }, {f32({2, 3, 2}, 3), f32({4, 3}, 4)}, {0, 1},
            "transposed, 2-D second operand");
       }},
      {"sdpa", [](auto&) { check_sdpa(); }},
  };
  return checks;
}

std::vector<std::string> checked_ops() {
  std::vector<std::string> names;
  for (const auto& [name, check] : grad_checks()) names.push_back(name);
  return names;
}

TEST(AutogradCoverage, EveryBuiltinOpHasABackwardOrAReasonWhyNot) {
  std::set<std::string> registered;
  for (const std::string& name : builtin_op_names()) {
    registered.insert(name);
    const bool listed = kNotDifferentiable.count(name) > 0;
    if (op_schema(name).backward)
      EXPECT_FALSE(listed) << "op '" << name << "' has a backward but is listed as not differentiable";
    else
      EXPECT_TRUE(listed) << "op '" << name << "' has no backward and no reason in kNotDifferentiable";
  }
  for (const auto& [name, why] : kNotDifferentiable) EXPECT_TRUE(registered.count(name)) << "stale entry '" << name << "'";
}

TEST(AutogradCoverage, GradientChecksCoverTheDifferentiableOpsExactly) {
  std::set<std::string> differentiable;
  for (const std::string& name : builtin_op_names())
    if (op_schema(name).backward) differentiable.insert(name);
  const std::vector<std::string> checked = checked_ops();
  for (const std::string& name : differentiable)
    EXPECT_TRUE(grad_checks().count(name)) << "differentiable op '" << name << "' has no gradient check in grad_checks()";
  for (const std::string& name : checked)
    EXPECT_TRUE(differentiable.count(name)) << "grad_checks() has '" << name << "', which is not a differentiable builtin op";
  EXPECT_GE(differentiable.size(), 39u);
}

class AutogradGradCheck : public ::testing::TestWithParam<std::string> {};

TEST_P(AutogradGradCheck, FiniteDifferences) { grad_checks().at(GetParam())(GetParam()); }

INSTANTIATE_TEST_SUITE_P(EveryDifferentiableOp, AutogradGradCheck, ::testing::ValuesIn(checked_ops()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hg
