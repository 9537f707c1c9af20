// Batch-norm folding for inference: y = batch_norm_eval(conv(x, w[, b]), gamma, beta, mean, var)
// with a constant w, b, gamma, beta, mean, var (frozen inputs or constant nodes) and the conv
// read by nothing else becomes one conv2d(x, w', b') with
//   s = gamma / sqrt(var + eps),  w' = w * s (broadcast over [O, 1, 1, 1]),  b' = (b - mean) * s + beta
// (b = 0 for conv2d_nobias). w', b' and the [O]-sized values they come from are new constant
// nodes, computed once at compile; s and b' come from the batch_norm_eval kernel itself (on a
// [1, O] row of ones, and on b), so they round as the unfolded batch norm does. F32 convs only
// (a BF16 w' would round w * s once more); a conv with a residual input or a fused activation is
// left alone.
#include "engine/kernels.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

constexpr size_t kPlainConvAttrs = 7;  // stride, pad, dilation (h, w), groups; ints[7] is a fused activation
constexpr int64_t kMathPow = 3;        // unary_math {fn} / {exponent} (engine/math_ops.cpp)
constexpr int64_t kMul = static_cast<int64_t>(kernels::BinaryOp::Mul);  // binary {op}

bool foldable(const Graph& g, const std::vector<std::vector<int>>& users, const Node& bn) {
  if (!is_op(bn, "batch_norm_eval") || bn.inputs.size() != 5) return false;
  const int c = bn.inputs[0];
  const Node& conv = g.nodes[c];
  const bool bias = is_op(conv, "conv2d");
  if (!bias && !is_op(conv, "conv2d_nobias")) return false;
  if (conv.inputs.size() != (bias ? 3u : 2u) || conv.attrs.i(kPlainConvAttrs) != 0) return false;
  if (conv.meta.dtype != DType::F32 || users[c].size() != 1 || is_graph_output(g, c)) return false;
  for (size_t k = 1; k < conv.inputs.size(); ++k)
    if (!is_constant_value(g, conv.inputs[k])) return false;
  for (size_t k = 1; k < 5; ++k)
    if (!is_constant_value(g, bn.inputs[k])) return false;
  return true;
}

int add_constant(Graph& g, const char* op, std::vector<int> inputs, const Attrs& attrs) {
  const int id = g.add_op(op_schema(op), std::move(inputs), attrs);
  g.nodes[id].constant = true;
  return id;
}

// Rewrites node `b` (the batch norm) into the folded conv; the old conv becomes dead.
void fold(Graph& g, int b) {
  const Node bn = g.nodes[b];
  const Node conv = g.nodes[bn.inputs[0]];
  const int gamma = bn.inputs[1], beta = bn.inputs[2], mean = bn.inputs[3], var = bn.inputs[4];
  const Attrs eps{{}, {bn.attrs.f(0)}};
  const Shape wshape = g.nodes[conv.inputs[1]].meta.shape;
  const int64_t out_ch = wshape[0];

  // pow(v, 0) is 1 for every v (NaN and inf included), so ones and zeros are exact.
  const int ones = add_constant(g, "unary_math", {mean}, Attrs{{kMathPow}, {0.0}});
  const int zeros = add_constant(g, "scale", {ones}, Attrs{{}, {0.0}});
  const int ones2 = add_constant(g, "reshape", {ones}, Attrs{{1, out_ch}, {}});
  const int s2 = add_constant(g, "batch_norm_eval", {ones2, gamma, zeros, zeros, var}, eps);  // gamma / sqrt(var + eps)
  const int s4 = add_constant(g, "reshape", {s2}, Attrs{{out_ch, 1, 1, 1}, {}});
  const int w = add_constant(g, "binary", {conv.inputs[1], s4}, Attrs{{kMul}, {}});
  const int b2 = add_constant(g, "reshape", {conv.inputs.size() == 3 ? conv.inputs[2] : zeros}, Attrs{{1, out_ch}, {}});
  const int b2s = add_constant(g, "batch_norm_eval", {b2, gamma, beta, mean, var}, eps);  // (b - mean) * s + beta
  const int bias = add_constant(g, "reshape", {b2s}, Attrs{{out_ch}, {}});

  Node& n = g.nodes[b];
  n.op = &op_schema("conv2d");
  n.inputs = {conv.inputs[0], w, bias};
  n.attrs = conv.attrs;
  n.fused = conv.fused.empty() ? std::vector<std::string>{conv.op->name} : conv.fused;
  n.fused.push_back("batch_norm_eval");
}

}  // namespace

int fold_batch_norm(Graph& g) {
  const auto users = consumers(g);
  std::vector<int> targets;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (foldable(g, users, g.nodes[i])) targets.push_back(static_cast<int>(i));
  if (targets.empty()) return 0;
  for (int b : targets) fold(g, b);  // appends nodes: existing ids stay valid
  topo_sort(g);
  eliminate_dead_code(g);
  return static_cast<int>(targets.size());
}

}  // namespace hg::graphs
