// Squeeze-and-excitation (MobileNetV3, EfficientNet, SE-ResNet, RegNetY): after post-op fusion
// the block is four nodes around x [N, C, H, W]:
//   p = adaptive_avg_pool2d(x, 1x1)  or  reduce mean over dims 2, 3 (keepdim)
//   h = conv 1x1 (p, w1[, b1]) with any fused activation      [N, Cr, 1, 1]
//   s = conv 1x1 (h, w2[, b2]) with a fused sigmoid           [N, C, 1, 1]
//   y = x * s                                                 (binary mul, either order)
// and becomes y = squeeze_excite(x, w1, w2[, b1][, b2]) (engine/fused_ops.h): one kernel that
// reads x for the means, runs the two small layers in its own loops (as oneDNN convolutions on
// a 1x1 map they cost more than the whole mean) and scales x. p, h and s must have no other
// reader and not be graph outputs; the convolutions need constant 1x1 weights, groups 1, stride
// 1, no padding, no residual and no INT8 or blocked layout yet (this pass runs before the
// precision and layout passes). Sums in F32 instead of double for the mean: a fusion pass.
#include "engine/kernels_shape.h"
#include "engine/op_attrs.h"
#include "engine/post_ops.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

// Is node `id` a global average pool of `x` to [N, C, 1, 1]?
bool is_global_mean(const Graph& g, int id, int x) {
  const Node& p = g.nodes[id];
  const KnownOps& k = known_ops();
  if (p.inputs.empty() || p.inputs[0] != x || p.meta.shape.size() != 4 || p.meta.shape[2] != 1 || p.meta.shape[3] != 1)
    return false;
  if (is_op(p, k.adaptive_avg_pool2d)) return true;
  if (!is_op(p, k.reduce) || p.attrs.i(0) != static_cast<int64_t>(kernels::ReduceKind::Mean) || p.attrs.i(1) != 1)
    return false;
  const std::vector<int64_t> dims(p.attrs.ints.begin() + 2, p.attrs.ints.end());
  return dims == std::vector<int64_t>{2, 3} || dims == std::vector<int64_t>{-2, -1};
}

// A 1x1 convolution on a 1x1 map that the kernel's loops can run: its weight and bias inputs.
struct Layer {
  int w = -1, b = -1;
  FusedAct act = FusedAct::None;
};
bool as_layer(const Graph& g, const Node& n, Layer* l) {
  const KnownOps& k = known_ops();
  const bool bias = is_op(n, k.conv2d);
  if (!bias && !is_op(n, k.conv2d_nobias)) return false;
  if (n.inputs.size() != (bias ? 3u : 2u) || !is_constant_value(g, n.inputs[1])) return false;
  if (bias && !is_constant_value(g, n.inputs[2])) return false;
  const attrs::Conv c = attrs::Conv::of(n.attrs);
  if (c.stride_h != 1 || c.stride_w != 1 || c.pad_h || c.pad_w || c.groups != 1 || c.int8 || c.src_block || c.dst_block)
    return false;
  const Shape& w = g.nodes[n.inputs[1]].meta.shape;
  if (w.size() != 4 || w[2] != 1 || w[3] != 1 || g.nodes[n.inputs[1]].meta.dtype != DType::F32) return false;
  if (bias && g.nodes[n.inputs[2]].meta.shape != Shape{w[0]}) return false;
  *l = {n.inputs[1], bias ? n.inputs[2] : -1, c.act};
  return true;
}

}  // namespace

int fuse_squeeze_excite(Graph& g) {
  const KnownOps& k = known_ops();
  const OpSchema& se = op_schema("squeeze_excite");
  const auto users = consumers(g);
  auto only_reader = [&](int id, int reader) {
    return users[id].size() == 1 && users[id][0] == reader && !is_graph_output(g, id);
  };
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& m = g.nodes[i];
    if (!is_op(m, k.binary) || attrs::Binary::of(m.attrs).op != kernels::BinaryOp::Mul) continue;
    if (m.meta.shape.size() != 4 || (m.meta.dtype != DType::F32)) continue;
    for (int side = 0; side < 2; ++side) {
      const int x = m.inputs[side], s = m.inputs[1 - side];
      if (g.nodes[x].meta != m.meta || x == s) continue;
      const Node& sn = g.nodes[s];
      Layer expand, reduce;
      if (!only_reader(s, static_cast<int>(i)) || !as_layer(g, sn, &expand) || expand.act != FusedAct::Sigmoid) continue;
      const int h = sn.inputs[0];
      const Node& hn = g.nodes[h];
      if (!only_reader(h, s) || !as_layer(g, hn, &reduce)) continue;
      const int p = hn.inputs[0];
      if (!only_reader(p, h) || !is_global_mean(g, p, x)) continue;
      const int64_t c = m.meta.shape[1];
      const Shape& w1 = g.nodes[reduce.w].meta.shape;
      const Shape& w2 = g.nodes[expand.w].meta.shape;
      if (w1[1] != c || w2[0] != c || w2[1] != w1[0] || sn.meta.shape != Shape{m.meta.shape[0], c, 1, 1}) continue;
      std::vector<int> inputs{x, reduce.w, expand.w};
      int64_t mask = 0;
      if (reduce.b >= 0) inputs.push_back(reduce.b), mask |= 1;
      if (expand.b >= 0) inputs.push_back(expand.b), mask |= 2;
      std::vector<std::string> fused{g.nodes[p].op->name, "conv2d"};
      if (reduce.act != FusedAct::None) fused.emplace_back(fused_act_name(reduce.act));
      fused.insert(fused.end(), {"conv2d", "sigmoid", "mul"});
      m.op = &se;
      m.inputs = std::move(inputs);
      m.attrs = Attrs{{static_cast<int64_t>(reduce.act), mask, 0}, {}};
      m.fused = std::move(fused);
      ++rewrites;
      break;
    }
  }
  if (rewrites) eliminate_dead_code(g);
  return rewrites;
}

}  // namespace hg::graphs
