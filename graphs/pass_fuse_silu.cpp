// SiLU as models export it: binary mul(x, sigmoid(x)) (either operand order) becomes silu(x) when
// the sigmoid has no other reader and is not a graph output. ONNX has no SiLU op, so PyTorch
// exports nn.SiLU (EfficientNet, YOLO) as Sigmoid + Mul; as one silu it runs as a post-op of
// the convolution before it (fuse_post_ops) instead of two passes over the activations.
#include "engine/op_attrs.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

int fuse_silu(Graph& g) {
  const KnownOps& k = known_ops();
  const auto users = consumers(g);
  int rewrites = 0;
  for (Node& n : g.nodes) {
    if (!is_op(n, k.binary) || attrs::Binary::of(n.attrs).op != kernels::BinaryOp::Mul) continue;
    for (size_t side = 0; side < 2; ++side) {
      const int s = n.inputs[side], x = n.inputs[1 - side];
      const Node& sig = g.nodes[s];
      if (!is_op(sig, k.sigmoid) || sig.inputs[0] != x || users[s].size() != 1 || is_graph_output(g, s)) continue;
      if (sig.meta.shape != n.meta.shape || sig.meta.dtype != n.meta.dtype) continue;
      n.op = k.silu;
      n.inputs = {x};
      n.attrs = {};
      n.fused = {"sigmoid", "mul"};
      ++rewrites;
      break;
    }
  }
  return rewrites;
}

}  // namespace hg::graphs
