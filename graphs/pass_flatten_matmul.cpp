// flatten_matmul: a batched matmul whose right operand is one 2-D matrix shared by every batch
// (what an ONNX MatMul of activations [.., M, K] by a weight [K, N] imports as) becomes one 2-D
// GEMM over all the rows: bmm(a, w) -> reshape(matmul(reshape(a, [R, K]), w), a's batch dims +
// [M, N]). One large matmul instead of one per batch (PyTorch's MultiheadAttention runs its
// input projection on [S, B, E]: at batch 1 that was 128 matmuls of one row each), and the
// weight can be pre-packed like a linear's. A bias add of an [N] / [1, N] vector that is the
// bmm's only reader goes into the matmul as its bias. Not exact to the bit (a different
// summation order), so it is a fusion pass; the reshapes are planned in place (no copies), one per
// activation however many bmms read it (separate q, k, v projections then share their input).
#include <map>

#include "engine/kernels.h"
#include "engine/op_attrs.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

struct Match {
  int bmm;
  int bias_add = -1;  // the add that becomes the matmul's bias, or -1
  int bias = -1;      // its vector operand
};

bool is_bias_add(const Graph& g, const Node& add, int bmm, int* vec) {
  if (!is_op(add, known_ops().binary) || attrs::Binary::of(add.attrs).op != kernels::BinaryOp::Add) return false;
  const Node& y = g.nodes[bmm];
  if (add.meta != y.meta) return false;
  const int64_t n = y.meta.shape.back();
  for (int side = 0; side < 2; ++side) {
    const int other = add.inputs[1 - side];
    const TensorMeta& m = g.nodes[other].meta;
    if (add.inputs[side] == bmm && other != bmm && m.dtype == y.meta.dtype &&
        (m.shape == Shape{n} || m.shape == Shape{1, n})) {
      *vec = other;
      return true;
    }
  }
  return false;
}

}  // namespace

int flatten_matmul(Graph& g) {
  const auto users = consumers(g);
  std::vector<Match> matches;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!is_op(n, known_ops().bmm) || attrs::Bmm::of(n.attrs).trans_a) continue;  // a transposed left operand stays a bmm
    const TensorMeta& a = g.nodes[n.inputs[0]].meta;
    const TensorMeta& b = g.nodes[n.inputs[1]].meta;
    if (a.shape.size() < 3 || b.shape.size() != 2 || a.dtype != b.dtype || a.numel() == 0) continue;
    if (a.dtype != DType::F32 && a.dtype != DType::BF16) continue;
    Match m{static_cast<int>(i)};
    if (users[i].size() == 1 && !is_graph_output(g, static_cast<int>(i)))
      if (int vec; is_bias_add(g, g.nodes[users[i][0]], m.bmm, &vec)) m.bias_add = users[i][0], m.bias = vec;
    matches.push_back(m);
  }
  std::map<int, int> flat_of;  // one reshape per activation that several bmms read (q, k, v)
  for (const Match& m : matches) {
    const Node bmm = g.nodes[m.bmm];  // a copy: add_op below may reallocate the node list
    const Shape& as = g.nodes[bmm.inputs[0]].meta.shape;
    const int64_t k = as.back(), rows = g.nodes[bmm.inputs[0]].meta.numel() / k;
    auto [it, fresh] = flat_of.try_emplace(bmm.inputs[0], -1);
    if (fresh) it->second = g.add_op(*known_ops().reshape, {bmm.inputs[0]}, Attrs{{rows, k}, {}});
    const int flat = it->second;
    std::vector<int> mm_in{flat, bmm.inputs[1]};
    if (m.bias >= 0) mm_in.push_back(m.bias);
    const attrs::Matmul mm_attrs{.trans_b = attrs::Bmm::of(bmm.attrs).trans_b};
    const int mm = g.add_op(*known_ops().matmul, mm_in, mm_attrs.pack());
    g.nodes[mm].fused = m.bias >= 0 ? std::vector<std::string>{"bmm", "add"} : std::vector<std::string>{"bmm"};
    // The last node of the match becomes the reshape back to the bmm's shape; the rest dies.
    Node& out = g.nodes[m.bias_add >= 0 ? m.bias_add : m.bmm];
    out.op = known_ops().reshape;
    out.inputs = {mm};
    out.attrs = Attrs{bmm.meta.shape, {}};
    out.fused.clear();
  }
  if (!matches.empty()) {
    topo_sort(g);
    eliminate_dead_code(g);
  }
  return static_cast<int>(matches.size());
}

}  // namespace hg::graphs
