// Batch-norm folding for inference: y = batch_norm_eval(conv(x, w[, b]), gamma, beta, mean, var)
// with a constant w, b, gamma, beta, mean, var (frozen inputs or constant nodes) and the conv
// read by nothing else becomes one conv2d(x, w', b') with
//   s = gamma / sqrt(var + eps),  w' = w * s (broadcast over [O, 1, 1, 1]),  b' = (b - mean) * s + beta
// (b = 0 for conv2d_nobias). linear(x, w, b) -> batch_norm_eval (BatchNorm1d after a Linear)
// folds the same way into one linear (s broadcast over [O, 1]). w', b' and the [O]-sized values
// they come from are new constant nodes, computed once at compile; s and b' come from the
// batch_norm_eval kernel itself (on a [1, O] row of ones, and on b), so they round as the
// unfolded batch norm does. F32 only (a BF16 w' would round w * s once more); a producer with a
// residual input or a fused activation is left alone.
#include "engine/kernels.h"
#include "engine/op_attrs.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

// The producer a batch norm can fold into: a conv or linear whose output channel (dim 1) is its
// weight's dim 0, with no fused activation or residual yet. Returns its bias input count (0 or 1),
// or -1 when `n` is not one.
int plain_producer_bias(const Node& n) {
  const KnownOps& k = known_ops();
  if (is_op(n, k.conv2d) || is_op(n, k.conv2d_nobias)) {
    const int bias = is_op(n, k.conv2d) ? 1 : 0;
    return n.inputs.size() == 2u + bias && attrs::Conv::of(n.attrs).act == FusedAct::None ? bias : -1;
  }
  if (is_op(n, k.linear)) return n.inputs.size() == 3 && attrs::Linear::of(n.attrs).act == FusedAct::None ? 1 : -1;
  return -1;
}

bool foldable(const Graph& g, const std::vector<std::vector<int>>& users, const Node& bn) {
  if (!is_op(bn, known_ops().batch_norm_eval) || bn.inputs.size() != 5) return false;
  const int c = bn.inputs[0];
  const Node& prod = g.nodes[c];
  if (plain_producer_bias(prod) < 0) return false;
  if (prod.meta.dtype != DType::F32 || users[c].size() != 1 || is_graph_output(g, c)) return false;
  for (size_t k = 1; k < prod.inputs.size(); ++k)
    if (!is_constant_value(g, prod.inputs[k])) return false;
  for (size_t k = 1; k < 5; ++k)
    if (!is_constant_value(g, bn.inputs[k])) return false;
  return true;
}

int add_constant(Graph& g, const OpSchema* op, std::vector<int> inputs, const Attrs& attrs) {
  const int id = g.add_op(*op, std::move(inputs), attrs);
  g.nodes[id].constant = true;
  return id;
}

// Rewrites node `b` (the batch norm) into the folded conv or linear; the old one becomes dead.
void fold(Graph& g, int b) {
  const Node bn = g.nodes[b];
  const Node prod = g.nodes[bn.inputs[0]];
  const int gamma = bn.inputs[1], beta = bn.inputs[2], mean = bn.inputs[3], var = bn.inputs[4];
  const KnownOps& k = known_ops();
  const Attrs eps = attrs::BatchNorm::of(bn.attrs).pack();
  const Shape wshape = g.nodes[prod.inputs[1]].meta.shape;
  const int64_t out_ch = wshape[0];
  Shape per_channel(wshape.size(), 1);  // [O, 1, 1, 1] (conv) or [O, 1] (linear)
  per_channel[0] = out_ch;

  // pow(v, 0) is 1 for every v (NaN and inf included), so ones and zeros are exact.
  const int ones = add_constant(g, k.unary_math, {mean}, attrs::UnaryMath{attrs::MathFn::Pow, 0.0}.pack());
  const int zeros = add_constant(g, k.scale, {ones}, attrs::Scale{0.0}.pack());
  const int ones2 = add_constant(g, k.reshape, {ones}, Attrs{{1, out_ch}, {}});
  const int s2 = add_constant(g, k.batch_norm_eval, {ones2, gamma, zeros, zeros, var}, eps);  // gamma / sqrt(var + eps)
  const int sw = add_constant(g, k.reshape, {s2}, Attrs{per_channel, {}});
  const int w = add_constant(g, k.binary, {prod.inputs[1], sw}, attrs::Binary{kernels::BinaryOp::Mul}.pack());
  const int b2 = add_constant(g, k.reshape, {plain_producer_bias(prod) ? prod.inputs[2] : zeros}, Attrs{{1, out_ch}, {}});
  const int b2s = add_constant(g, k.batch_norm_eval, {b2, gamma, beta, mean, var}, eps);  // (b - mean) * s + beta
  const int bias = add_constant(g, k.reshape, {b2s}, Attrs{{out_ch}, {}});

  Node& n = g.nodes[b];
  n.op = is_op(prod, k.linear) ? k.linear : k.conv2d;
  n.inputs = {prod.inputs[0], w, bias};
  n.attrs = prod.attrs;
  n.fused = prod.fused.empty() ? std::vector<std::string>{prod.op->name} : prod.fused;
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
