// Residual + LayerNorm as transformers end each sublayer (post-norm encoders: BERT, PyTorch's
// TransformerEncoderLayer by default): layer_norm(binary add(a, b), w, bias) becomes
// layer_norm(a, w, bias, b), which adds the residual while it reads the row (engine
// kernels_norm.cpp) instead of an add writing a tensor that only the norm reads. The add must
// have both operands in the output's shape and dtype (no broadcast), no other reader, and not be
// a graph output (pre-norm blocks keep the sum for the next residual: those stay as they are).
#include "engine/op_attrs.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

int fuse_residual_norm(Graph& g) {
  const KnownOps& k = known_ops();
  const auto users = consumers(g);
  int rewrites = 0;
  for (Node& n : g.nodes) {
    if (!is_op(n, k.layer_norm) || n.inputs.size() != 3 || n.meta.dtype != DType::F32) continue;
    const int s = n.inputs[0];
    const Node& add = g.nodes[s];
    if (!is_op(add, k.binary) || attrs::Binary::of(add.attrs).op != kernels::BinaryOp::Add) continue;
    if (users[s].size() != 1 || is_graph_output(g, s)) continue;
    const Node& a = g.nodes[add.inputs[0]];
    const Node& b = g.nodes[add.inputs[1]];
    if (a.meta != n.meta || b.meta != n.meta) continue;
    n.inputs = {add.inputs[0], n.inputs[1], n.inputs[2], add.inputs[1]};
    n.fused.insert(n.fused.begin(), "add");
    ++rewrites;
  }
  return rewrites;
}

}  // namespace hg::graphs
