// Constant folding: an op node whose inputs are all frozen inputs or constant nodes is marked
// `constant`; the executable computes it once at compile instead of on every run. This covers
// the pure shape ops (reshape, permute, expand, slice, concat, contiguous, cast) of weights as
// well as arithmetic on them. Random ops are never constant, whatever their inputs.
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

int fold_constants(Graph& g) {
  const std::vector<char> random = random_ops(g);
  int marked = 0;
  // Node order is topological, so one forward sweep reaches the fixed point.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.kind != Node::Kind::Op || n.constant || random[i]) continue;
    bool all_constant = true;
    for (int in : n.inputs) all_constant = all_constant && is_constant_value(g, in);
    if (!all_constant) continue;
    n.constant = true;
    ++marked;
  }
  return marked;
}

}  // namespace hg::graphs
