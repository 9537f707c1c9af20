// Common-subexpression elimination: two op nodes with the same op, the same inputs (in order,
// or in either order for binary add and mul), the same attributes (floats compared by bit pattern) and the same fused list compute the same
// value; readers of the later one read the earlier one. Random ops (random_ops) are never merged:
// two dropouts of one tensor draw two masks.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "engine/kernels.h"
#include "engine/op_attrs.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

// binary add and mul are commutative, bit for bit (IEEE a + b == b + a); sub and div are not.
bool commutative(const Node& n) {
  if (n.op != known_ops().binary) return false;
  const kernels::BinaryOp op = attrs::Binary::of(n.attrs).op;
  return op == kernels::BinaryOp::Add || op == kernels::BinaryOp::Mul;
}

std::string node_key(const Node& n) {
  std::vector<int> ins = n.inputs;
  if (commutative(n)) std::sort(ins.begin(), ins.end());
  std::string k = n.op->name;
  k += '(';
  for (int in : ins) k += std::to_string(in) + ',';
  k += ')';
  append_attrs_key(k, n.attrs);
  for (const auto& f : n.fused) k += '+' + f;
  k += ':' + meta_str(n.meta);
  return k;
}

}  // namespace

int eliminate_common_subexpressions(Graph& g) {
  const std::vector<char> random = random_ops(g);
  std::unordered_map<std::string, int> first;
  int merged = 0;
  // One forward sweep: a node's inputs are already canonical when it is reached, so chains of
  // duplicates (a + b, then relu of each copy) collapse in the same sweep.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != Node::Kind::Op || random[i]) continue;
    const auto [it, fresh] = first.emplace(node_key(n), static_cast<int>(i));
    if (fresh) continue;
    replace_uses(g, static_cast<int>(i), it->second);
    ++merged;
  }
  if (merged) eliminate_dead_code(g);
  return merged;
}

}  // namespace hg::graphs
