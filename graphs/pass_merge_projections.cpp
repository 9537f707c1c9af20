// Parallel projections as one GEMM: linears (or 2-D matmuls) that read the same activations with
// constant weights (and the same bias presence, fused activation and weight orientation) become
// one whose weight is their weights concatenated along the output features, and each old node a
// slice of its output. The q, k and v projections of exports that keep them separate (Hugging
// Face's BERT and LLaMA-style attention, grouped-query attention with narrower k and v) become the
// QKV projection PyTorch's MultiheadAttention has: one pass over x and one weight stream instead
// of three, and the attention_views pass then reads q, k and v in place from the one output, as
// it does for a packed projection. The concatenated weight and bias are constant nodes (computed
// once at compile, then pre-packed like any weight). A projection whose output is still waiting
// for a post-op (a bias add or an activation that fuse_post_ops has not taken yet) waits a round:
// the members must carry their post-ops before they are merged.
#include <map>
#include <tuple>

#include "engine/op_attrs.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

struct Projection {
  bool by_rows = false;  // weight [N, K] (linear, matmul with trans_b): concatenated along dim 0
  int64_t act = 0;
  bool bias = false;
};

bool activation_op(const Node& n) {
  const KnownOps& k = known_ops();
  for (const OpSchema* op : {k.relu, k.gelu, k.silu, k.sigmoid, k.tanh, k.clamp})
    if (n.op == op) return true;
  return false;
}

// An add or an activation after node `id` that fuse_post_ops may still fold into it.
bool post_op_pending(const Graph& g, const std::vector<std::vector<int>>& users, int id) {
  if (users[id].size() != 1 || is_graph_output(g, id)) return false;
  const Node& c = g.nodes[users[id][0]];
  if (is_op(c, known_ops().reshape) && users[users[id][0]].size() == 1)
    return activation_op(g.nodes[users[users[id][0]][0]]);
  return activation_op(c) ||
         (is_op(c, known_ops().binary) && attrs::Binary::of(c.attrs).op == kernels::BinaryOp::Add);
}

bool as_projection(const Graph& g, const Node& n, Projection* p) {
  const KnownOps& k = known_ops();
  const bool linear = is_op(n, k.linear), matmul = is_op(n, k.matmul);
  if ((!linear && !matmul) || n.constant || n.inputs.size() < 2) return false;
  const TensorMeta& x = g.nodes[n.inputs[0]].meta;
  const TensorMeta& w = g.nodes[n.inputs[1]].meta;
  if (is_constant_value(g, n.inputs[0]) || !is_constant_value(g, n.inputs[1]) || w.shape.size() != 2) return false;
  if (x.dtype != DType::F32 && x.dtype != DType::BF16) return false;
  if (n.inputs.size() == 3 && !is_constant_value(g, n.inputs[2])) return false;
  if (linear) {
    *p = {true, static_cast<int64_t>(attrs::Linear::of(n.attrs).act), true};
    return n.inputs.size() == 3;
  }
  const attrs::Matmul m = attrs::Matmul::of(n.attrs);
  if (m.trans_a || x.shape.size() != 2) return false;
  *p = {m.trans_b, static_cast<int64_t>(m.act), n.inputs.size() == 3};
  return true;
}

}  // namespace

int merge_projections(Graph& g) {
  const auto users = consumers(g);
  // (x, op, weight orientation, act, bias, bias rank, output dtype, weight dtype) -> the projections
  using Key = std::tuple<int, const OpSchema*, bool, int64_t, bool, size_t, DType, DType>;
  std::map<Key, std::vector<int>> groups;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    Projection p;
    if (!as_projection(g, n, &p) || post_op_pending(g, users, static_cast<int>(i))) continue;
    const size_t bias_rank = p.bias ? g.nodes[n.inputs[2]].meta.shape.size() : 0;
    if (p.bias && g.nodes[n.inputs[2]].meta.dtype != g.nodes[n.inputs[1]].meta.dtype) continue;
    groups[{n.inputs[0], n.op, p.by_rows, p.act, p.bias, bias_rank, n.meta.dtype, g.nodes[n.inputs[1]].meta.dtype}]
        .push_back(static_cast<int>(i));
  }
  const OpSchema& concat = *known_ops().concat;
  int merged = 0;
  for (const auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    const bool by_rows = std::get<2>(key), bias = std::get<4>(key);
    const size_t bias_rank = std::get<5>(key);
    std::vector<int> ws, bs;
    for (int m : members) {
      ws.push_back(g.nodes[m].inputs[1]);
      if (bias) bs.push_back(g.nodes[m].inputs[2]);
    }
    const Node first = g.nodes[members[0]];  // a copy: add_op below may move the nodes
    std::vector<int> inputs{first.inputs[0], g.add_op(concat, ws, Attrs{{by_rows ? 0 : 1}, {}})};
    g.nodes[inputs[1]].constant = true;
    if (bias) {
      inputs.push_back(g.add_op(concat, bs, Attrs{{static_cast<int64_t>(bias_rank) - 1}, {}}));
      g.nodes[inputs[2]].constant = true;
    }
    const int y = g.add_op(*first.op, inputs, first.attrs);
    g.nodes[y].fused.assign(members.size(), first.op->name);
    const int64_t last = static_cast<int64_t>(g.nodes[y].meta.shape.size()) - 1;
    int64_t start = 0;
    for (int m : members) {
      Node& n = g.nodes[m];
      const int64_t width = n.meta.shape.back();
      n.op = known_ops().slice;
      n.inputs = {y};
      n.attrs = Attrs{{last, start, start + width, 1}, {}};
      n.fused.clear();
      start += width;
    }
    ++merged;
  }
  if (merged) {
    topo_sort(g);
    eliminate_dead_code(g);
  }
  return merged;
}

}  // namespace hg::graphs
