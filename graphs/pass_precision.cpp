// Reduced precision for inference: after the FP32 passes have folded and fused the graph, its
// matmuls and convolutions run in BF16 (oneDNN, FP32 accumulation) and the values between them
// stay BF16 where every reader can take it; everything else stays FP32.
//   - compute ops (linear, matmul, conv2d, conv2d_nobias, bmm, sdpa's q/k/v) always run in BF16:
//     their constant inputs (weights, bias) become BF16 constants, computed once at compile and
//     pre-packed; other FP32 inputs get a cast;
//   - shape and element-wise ops (activations, clamp, scale, binary, pools, reshape, permute,
//     slice, concat, layout reorders, squeeze_excite's x) run in BF16 when one input already is BF16 and the others are
//     BF16 or constant: a chain conv -> relu -> pool -> conv never leaves BF16;
//   - softmax, normalisations, reductions, fused element-wise programs and anything else read FP32
//     (a cast where a BF16 value reaches them), as do the graph's outputs.
// A node whose schema refuses BF16 inputs stays FP32 (its inputs are cast back).
// INT8 (lower_int8 below) is narrower: linears and matmuls by constant weights become
// matmul_int8, convolutions by constant weights run in INT8 (attrs::Conv::int8; both dynamic
// quantization); nothing else changes.
#include <cmath>
#include <map>

#include "engine/error.h"
#include "engine/int8_quant.h"
#include "engine/op_attrs.h"
#include "engine/ops.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

enum class Role { None, Compute, Follow };

Role role(const Node& n) {
  const KnownOps& k = known_ops();
  for (const OpSchema* op : {k.linear, k.matmul, k.conv2d, k.conv2d_nobias, k.bmm, k.sdpa})
    if (n.op == op) return Role::Compute;
  for (const OpSchema* op : {k.relu, k.silu, k.sigmoid, k.tanh, k.gelu, k.clamp, k.scale, k.binary, k.max_pool2d,
                             k.avg_pool2d, k.adaptive_avg_pool2d, k.reshape, k.permute, k.slice, k.concat,
                             k.contiguous, k.expand, k.to_blocked, k.from_blocked, k.squeeze_excite})
    if (n.op == op) return Role::Follow;
  return Role::None;
}

// Inputs that keep their dtype whatever the node's precision: sdpa's mask (BOOL or F32),
// squeeze_excite's layers (F32: it reads BF16 x, runs its small layers in F32).
bool exempt(const Node& n, size_t i) {
  return (n.op == known_ops().sdpa && i >= 3) || (n.op == known_ops().squeeze_excite && i >= 1);
}

Attrs cast_attrs(DType t) { return Attrs{{static_cast<int64_t>(t)}, {}}; }

// Int8: linear(x, w, b) and matmul(x, w[, b]) with a constant 2-D weight and an FP32 x that is not
// constant become matmul_int8 (engine/int8_ops.cpp): its weights are quantized per output column
// once, at compile; x with every run. conv2d / conv2d_nobias with constant weights and groups 1
// get attrs::Conv::int8 (engine/conv_int8.cpp: the same scheme per output channel) and their
// number in node order; with a range for that number in `ranges` they are static, else dynamic
// (with `tag`, reporting to the calibration session of that tag).
int lower_int8(Graph& g, const Int8Ranges* ranges, int64_t tag) {
  const KnownOps& k = known_ops();
  const OpSchema& int8 = op_schema("matmul_int8");
  int count = 0;
  int64_t convs = 0;  // numbered in node order
  for (Node& n : g.nodes) {
    const bool linear = is_op(n, k.linear), matmul = is_op(n, k.matmul);
    const bool conv = is_op(n, k.conv2d) || is_op(n, k.conv2d_nobias);
    if (conv && !n.constant && n.meta.dtype == DType::F32 && g.nodes[n.inputs[0]].meta.dtype == DType::F32 &&
        !is_constant_value(g, n.inputs[0]) && is_constant_value(g, n.inputs[1])) {
      attrs::Conv c = attrs::Conv::of(n.attrs);
      if (c.int8 || c.src_block || c.dst_block || c.groups > 1) continue;
      const int64_t number = convs++;
      c.int8 = attrs::Conv::kInt8Dynamic;
      c.calib_id = tag > 0 ? tag << kernels::Int8Calibration::kIdBits | number : -1;
      if (ranges && static_cast<size_t>(number) < ranges->ranges.size()) {
        const auto [lo, hi] = ranges->ranges[static_cast<size_t>(number)];
        if (std::isfinite(lo) && std::isfinite(hi) && lo <= hi)
          c.int8 = attrs::Conv::kInt8Static, c.lo = lo, c.hi = hi, c.calib_id = -1;
      }
      n.attrs = c.pack();
      ++count;
      continue;
    }
    if ((!linear && !matmul) || n.constant || n.meta.dtype != DType::F32) continue;
    const Node& x = g.nodes[n.inputs[0]];
    const Node& w = g.nodes[n.inputs[1]];
    if (x.meta.dtype != DType::F32 || is_constant_value(g, n.inputs[0]) || !is_constant_value(g, n.inputs[1])) continue;
    attrs::Matmul m;
    if (linear) {
      m = {false, true, attrs::Linear::of(n.attrs).act};
    } else {
      m = attrs::Matmul::of(n.attrs);
      if (m.trans_a) continue;
    }
    const int64_t kdim = x.meta.shape[1];
    if (kdim == 0 || w.meta.shape.size() != 2) continue;
    Attrs a{{0, m.trans_b, static_cast<int64_t>(m.act)}, {}};
    std::vector<TensorMeta> metas;
    for (int in : n.inputs) metas.push_back(g.nodes[in].meta);
    try {
      if (int8.infer(int8, metas, a) != n.meta) continue;
    } catch (const Error&) {
      continue;
    }
    n.op = &int8;
    n.attrs = std::move(a);
    ++count;
  }
  return count;
}

}  // namespace

int lower_precision(Graph& g, Precision p, const Int8Ranges* int8_ranges, int64_t int8_calibration_tag) {
  if (p == Precision::Int8) return lower_int8(g, int8_ranges, int8_calibration_tag);
  if (p != Precision::Bf16) return 0;
  const size_t n = g.nodes.size();
  std::vector<char> lowered(n, 0);
  int count = 0;
  for (size_t id = 0; id < n; ++id) {
    const Node& node = g.nodes[id];
    if (node.kind != Node::Kind::Op || node.constant || node.meta.dtype != DType::F32) continue;
    const Role r = role(node);
    if (r == Role::None) continue;
    std::vector<TensorMeta> metas;
    bool from_low = false, all_low = true;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int in = node.inputs[i];
      TensorMeta m = g.nodes[in].meta;
      if (m.dtype == DType::F32 && !exempt(node, i)) {
        if (lowered[in]) from_low = true;
        else if (!is_constant_value(g, in)) all_low = false;
        m.dtype = DType::BF16;
      }
      metas.push_back(std::move(m));
    }
    if (r == Role::Follow && !(from_low && all_low)) continue;
    try {
      if (node.op->infer(*node.op, metas, node.attrs).dtype != DType::BF16) continue;
    } catch (const Error&) {
      continue;  // this op does not take BF16 here: it stays FP32
    }
    lowered[id] = 1;
    ++count;
  }
  if (!count) return 0;

  const OpSchema& cast = op_schema("cast");
  std::map<int, int> down, up;  // value -> its cast to BF16 / back to F32
  auto cast_of = [&](std::map<int, int>& memo, int v, DType t) {
    auto it = memo.find(v);
    if (it != memo.end()) return it->second;
    const int c = g.add_op(cast, {v}, cast_attrs(t));
    g.nodes[c].constant = is_constant_value(g, v);
    return memo[v] = c;
  };
  for (size_t id = 0; id < n; ++id) {
    if (!lowered[id]) continue;
    for (size_t i = 0; i < g.nodes[id].inputs.size(); ++i) {  // no reference: add_op may move the nodes
      const int in = g.nodes[id].inputs[i];
      if (!lowered[in] && g.nodes[in].meta.dtype == DType::F32 && !exempt(g.nodes[id], i))
        g.nodes[id].inputs[i] = cast_of(down, in, DType::BF16);
    }
    Node& lowered_node = g.nodes[id];
    std::vector<TensorMeta> metas;
    for (int in : lowered_node.inputs) metas.push_back(g.nodes[in].meta);
    lowered_node.meta = lowered_node.op->infer(*lowered_node.op, metas, lowered_node.attrs);
  }
  // Readers that stay FP32, and the graph's outputs, get the value cast back.
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    if (id < n && lowered[id]) continue;
    for (size_t i = 0; i < g.nodes[id].inputs.size(); ++i) {
      const int in = g.nodes[id].inputs[i];
      if (in < static_cast<int>(n) && lowered[in] && g.nodes[in].meta.dtype == DType::BF16 &&
          !(is_op(g.nodes[id], &cast) && up.count(in) && up[in] == static_cast<int>(id)))
        g.nodes[id].inputs[i] = cast_of(up, in, DType::F32);
    }
  }
  for (int& o : g.outputs)
    if (o < static_cast<int>(n) && lowered[o]) o = cast_of(up, o, DType::F32);
  topo_sort(g);
  return count;
}

}  // namespace hg::graphs
