// Shared utilities of the graph passes: rewire uses, insert nodes in topological order,
// find consumers, and tell constant and random values apart.
//
//   using namespace hg::graphs;
//   // y = scale(x, 1.0) is x: every reader of y, and a graph output slot holding y, now reads x.
//   replace_uses(g, y, x);
//   eliminate_dead_code(g);                          // y has no reader left (graphs/passes.h)
//
//   // A new node that must run before node `conv` (its inputs all come before `conv`):
//   const int w2 = insert_op_before(g, conv, hg::op_schema("scale"), {w}, hg::Attrs{{}, {2.0}});
//   conv += 1;                                       // ids >= the insertion point moved up by one
//   g.nodes[conv].inputs[1] = w2;
//
//   // Or append several nodes, rewire, and restore the order once at the end of the pass:
//   const int s = g.add_op(hg::op_schema("scale"), {w}, hg::Attrs{{}, {2.0}});
//   g.nodes[conv].inputs[1] = s;                     // conv now reads a later node
//   topo_sort(g);                                    // ids change: re-read them after this
//
//   const auto users = consumers(g);                 // users[i]: nodes reading node i
//   if (users[conv].size() == 1 && !is_graph_output(g, conv)) ...
#pragma once
#include <vector>

#include "graphs/ir.h"

namespace hg::graphs {

// Makes every op input and every graph output slot that refers to node `from` refer to node
// `to` instead; returns how many references changed. `to` must compute the same value (same
// meta) as `from`; if `to` comes after a reader of `from`, call topo_sort before compiling.
int replace_uses(Graph& g, int from, int to);

// Inserts an op node at position `before` (its inputs must all be < before) and returns its
// id (== before). Every node id >= before, in op inputs and graph outputs, moves up by one.
int insert_op_before(Graph& g, int before, const OpSchema& op, std::vector<int> inputs, const Attrs& attrs);

// Restores topological order after rewiring (stable: nodes already in order keep their relative
// order). Renumbers nodes, inputs and outputs; Input nodes keep their input_index. Throws
// InternalError naming a node on a cycle.
void topo_sort(Graph& g);

// consumers(g)[i]: the op nodes that read node i, in node order, each listed once.
std::vector<std::vector<int>> consumers(const Graph& g);
bool is_graph_output(const Graph& g, int id);

// The ops the passes match, looked up once. Schemas are interned (op_schema returns one object per
// name for the life of the process), so passes compare schema pointers, never names:
//   const KnownOps& op = known_ops();
//   if (is_op(n, op.reshape)) ...
struct KnownOps {
  const OpSchema *adaptive_avg_pool2d, *avg_pool2d, *batch_norm_eval, *binary, *bmm, *cast, *causal_fill, *clamp,
      *concat, *contiguous, *conv2d, *conv2d_nobias, *dropout, *embedding, *expand, *from_blocked, *fused_elementwise,
      *gelu, *layer_norm, *linear, *masked_fill, *matmul, *max_pool2d, *permute, *reduce, *relu, *reshape, *scale, *sdpa, *sigmoid,
      *silu, *slice, *softmax, *squeeze_excite, *sum_to, *tanh, *to_blocked, *unary_math, *where;
};
const KnownOps& known_ops();
inline bool is_op(const Node& n, const OpSchema* op) { return n.kind == Node::Kind::Op && n.op == op; }
// A frozen Input or an Op marked constant: its value is fixed for the life of the compiled graph.
bool is_constant_value(const Graph& g, int id);

// random_ops(g)[i]: node i draws random numbers, so two such nodes are never one value and none
// is ever constant. Random ops take their RNG seed as an input (engine/generator.h): dropout
// (input 1) is one; any op reading a dropout's seed value counts too.
std::vector<char> random_ops(const Graph& g);

}  // namespace hg::graphs
