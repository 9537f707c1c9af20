// Post-op fusion (oneDNN post-ops): linear, matmul, conv2d and conv2d_nobias absorb the ops
// that follow them when nothing else reads the intermediate value and it is not a graph output:
//   + a bias vector ([N] / [1, N] after linear or matmul, [O, 1, 1] / [1, O, 1, 1] after a
//     conv) when the op has none yet;
//   + a residual of the output's shape (conv only: oneDNN's sum post-op, the ResNet block's
//     conv -> add(identity) -> relu once batch norm is folded);
//   an activation (relu, gelu erf / tanh, silu, sigmoid, tanh, clamp to [0, 6]), also across one reshape in
//     between (linear -> reshape -> gelu, as the zoo's Linear on 3-D inputs traces).
// The consumer node takes over: its op becomes the producer's with the post-op in its attrs
// or inputs (engine/post_ops.h), `fused` lists the merged ops; the producer dies (DCE).
#include <optional>

#include "engine/kernels.h"
#include "engine/op_attrs.h"
#include "engine/post_ops.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

enum class Producer { None, Linear, Matmul, Conv, ConvNoBias };

Producer producer_kind(const Node& n) {
  if (n.kind != Node::Kind::Op) return Producer::None;
  const KnownOps& k = known_ops();
  if (n.op == k.linear) return Producer::Linear;
  if (n.op == k.matmul) return Producer::Matmul;
  if (n.op == k.conv2d) return Producer::Conv;
  if (n.op == k.conv2d_nobias) return Producer::ConvNoBias;
  return Producer::None;
}

// The post-op that computes activation node `n`, if there is one.
std::optional<FusedAct> activation_of(const Node& n) {
  const KnownOps& k = known_ops();
  if (n.op == k.relu) return FusedAct::Relu;
  if (n.op == k.gelu) return attrs::Gelu::of(n.attrs).tanh ? FusedAct::GeluTanh : FusedAct::GeluErf;
  if (n.op == k.silu) return FusedAct::Silu;
  if (n.op == k.sigmoid) return FusedAct::Sigmoid;
  if (n.op == k.tanh) return FusedAct::Tanh;
  if (n.op == k.clamp && n.attrs.f(0) == 0.0 && n.attrs.f(1) == 6.0) return FusedAct::Relu6;  // ReLU6
  return std::nullopt;
}

bool is_conv(Producer p) { return p == Producer::Conv || p == Producer::ConvNoBias; }

bool is_add(const Node& n) {
  return is_op(n, known_ops().binary) && attrs::Binary::of(n.attrs).op == kernels::BinaryOp::Add;
}

bool is_reshape(const Node& n) { return is_op(n, known_ops().reshape); }

// The producer's fused activation (None: none yet).
FusedAct act_of(const Node& p) {
  switch (producer_kind(p)) {
    case Producer::Linear: return attrs::Linear::of(p.attrs).act;
    case Producer::Matmul: return attrs::Matmul::of(p.attrs).act;
    case Producer::Conv:
    case Producer::ConvNoBias: return attrs::Conv::of(p.attrs).act;
    default: return FusedAct::None;
  }
}

void set_act(Node& p, FusedAct act) {
  switch (producer_kind(p)) {
    case Producer::Linear: p.attrs = attrs::Linear{act}.pack(); break;
    case Producer::Matmul: {
      auto m = attrs::Matmul::of(p.attrs);
      m.act = act;
      p.attrs = m.pack();
      break;
    }
    case Producer::Conv:
    case Producer::ConvNoBias: {
      auto c = attrs::Conv::of(p.attrs);
      c.act = act;
      p.attrs = c.pack();
      break;
    }
    default: break;
  }
}

bool has_bias(const Node& p) {
  switch (producer_kind(p)) {
    case Producer::Linear:
    case Producer::Conv: return true;
    case Producer::Matmul: return p.inputs.size() == 3;
    default: return false;
  }
}

bool has_residual(const Node& p) {
  const Producer k = producer_kind(p);
  return is_conv(k) && p.inputs.size() > (k == Producer::Conv ? 3u : 2u);
}

// Does `b` have the shape of a bias of producer `p` (broadcast along its channels)?
bool bias_shaped(const Node& p, const Shape& b) {
  const Shape& y = p.meta.shape;
  if (is_conv(producer_kind(p))) return b == Shape{y[1], 1, 1} || b == Shape{1, y[1], 1, 1};
  return b == Shape{y[1]} || b == Shape{1, y[1]};
}

std::vector<std::string> fused_names(const Node& p, const char* next) {
  std::vector<std::string> f = p.fused.empty() ? std::vector<std::string>{p.op->name} : p.fused;
  f.emplace_back(next);
  return f;
}

// `add` (node c) = producer p + other: folds it into p as a bias or a residual. The add node
// takes p's place; false when neither post-op applies.
bool fuse_add(Graph& g, Node& c, int p_id, int other) {
  const Node& p = g.nodes[p_id];
  const Node& b = g.nodes[other];
  if (c.meta != p.meta || b.meta.dtype != p.meta.dtype || act_of(p) != FusedAct::None) return false;
  const Producer k = producer_kind(p);
  std::vector<int> inputs = p.inputs;
  const OpSchema* op = p.op;
  if (!has_bias(p) && bias_shaped(p, b.meta.shape)) {
    // the bias goes before a residual: conv2d (x, w, b[, res]), matmul (a, b, bias)
    if (k == Producer::ConvNoBias) {
      op = known_ops().conv2d;
      inputs.insert(inputs.begin() + 2, other);
    } else {
      inputs.push_back(other);
    }
  } else if (is_conv(k) && !has_residual(p) && b.meta == p.meta) {
    inputs.push_back(other);
  } else {
    return false;
  }
  c.fused = fused_names(p, "add");
  c.op = op;
  c.inputs = std::move(inputs);
  c.attrs = p.attrs;
  return true;
}

}  // namespace

int fuse_post_ops(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  int fused = 0;
  for (auto& c : g.nodes) {
    if (c.kind != Node::Kind::Op) continue;
    if (is_add(c)) {
      for (int side = 0; side < 2; ++side) {
        const int p = c.inputs[side], other = c.inputs[1 - side];
        if (p == other || producer_kind(g.nodes[p]) == Producer::None || uses[p] != 1) continue;
        if (fuse_add(g, c, p, other)) {
          ++fused;
          break;
        }
      }
      continue;
    }
    const std::optional<FusedAct> act = activation_of(c);
    if (!act) continue;
    int src = c.inputs[0];
    const bool through_reshape = is_reshape(g.nodes[src]) && uses[src] == 1;
    const int p = through_reshape ? g.nodes[src].inputs[0] : src;
    if (uses[src] != 1 || uses[p] != 1) continue;
    Node& prod = g.nodes[p];
    if (producer_kind(prod) == Producer::None || act_of(prod) != FusedAct::None) continue;
    if (through_reshape) {
      // act(reshape(p)) == reshape(act(p)): p keeps its place with the activation, the
      // activation node becomes the reshape, the old reshape dies.
      const Node& r = g.nodes[src];
      prod.fused = fused_names(prod, c.op->name.c_str());
      set_act(prod, *act);
      c.op = r.op;
      c.attrs = r.attrs;
      c.inputs = {p};
    } else {
      c.fused = fused_names(prod, c.op->name.c_str());
      c.op = prod.op;
      c.inputs = prod.inputs;
      c.attrs = prod.attrs;
      set_act(c, *act);
    }
    ++fused;
  }
  if (fused) eliminate_dead_code(g);
  return fused;
}

}  // namespace hg::graphs
