#include "graphs/rewrite.h"

#include <algorithm>
#include <string>
#include <utility>

#include "engine/error.h"

namespace hg::graphs {

namespace {

void check_node(const Graph& g, int id, const char* what) {
  if (id < 0 || id >= static_cast<int>(g.nodes.size()))
    throw InternalError(std::string(what) + ": node %" + std::to_string(id) + " does not exist (graph has " +
                        std::to_string(g.nodes.size()) + " nodes)");
}

}  // namespace

int replace_uses(Graph& g, int from, int to) {
  check_node(g, from, "replace_uses");
  check_node(g, to, "replace_uses");
  if (from == to) return 0;
  int changed = 0;
  for (auto& n : g.nodes)
    for (int& in : n.inputs)
      if (in == from) in = to, ++changed;
  for (int& o : g.outputs)
    if (o == from) o = to, ++changed;
  return changed;
}

int insert_op_before(Graph& g, int before, const OpSchema& op, std::vector<int> inputs, const Attrs& attrs) {
  if (before < 0 || before > static_cast<int>(g.nodes.size()))
    throw InternalError("insert_op_before: position " + std::to_string(before) + " is outside the graph");
  std::vector<TensorMeta> metas;
  for (int in : inputs) {
    if (in < 0 || in >= before)
      throw InternalError("insert_op_before: op '" + op.name + "' at %" + std::to_string(before) + " reads %" +
                          std::to_string(in) + ", which does not come before it");
    metas.push_back(g.nodes[in].meta);
  }
  Node n;
  n.op = &op;
  n.meta = op.infer(op, metas, attrs);
  n.inputs = std::move(inputs);
  n.attrs = attrs;
  for (auto& m : g.nodes)
    for (int& in : m.inputs)
      if (in >= before) ++in;
  for (int& o : g.outputs)
    if (o >= before) ++o;
  g.nodes.insert(g.nodes.begin() + before, std::move(n));
  return before;
}

void topo_sort(Graph& g) {
  const int n = static_cast<int>(g.nodes.size());
  for (int i = 0; i < n; ++i)
    for (int in : g.nodes[i].inputs) check_node(g, in, "topo_sort");
  // Iterative post-order DFS in node order: a graph already in order comes out unchanged.
  enum : char { New, Open, Done };
  std::vector<char> state(n, New);
  std::vector<int> order;
  order.reserve(n);
  std::vector<std::pair<int, size_t>> stack;  // node, next input to visit
  for (int root = 0; root < n; ++root) {
    if (state[root] != New) continue;
    stack.emplace_back(root, 0);
    state[root] = Open;
    while (!stack.empty()) {
      auto& [id, next] = stack.back();
      const auto& ins = g.nodes[id].inputs;
      if (next < ins.size()) {
        const int in = ins[next++];
        if (state[in] == Open)
          throw InternalError("topo_sort: node %" + std::to_string(in) + " (" +
                              (g.nodes[in].op ? g.nodes[in].op->name : std::string("input")) + ") is on a cycle");
        if (state[in] == New) {
          state[in] = Open;
          stack.emplace_back(in, 0);
        }
        continue;
      }
      state[id] = Done;
      order.push_back(id);
      stack.pop_back();
    }
  }
  std::vector<int> remap(n);
  for (int k = 0; k < n; ++k) remap[order[k]] = k;
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (int id : order) {
    Node m = std::move(g.nodes[id]);
    for (int& in : m.inputs) in = remap[in];
    sorted.push_back(std::move(m));
  }
  g.nodes = std::move(sorted);
  for (int& o : g.outputs) o = remap[o];
}

std::vector<std::vector<int>> consumers(const Graph& g) {
  std::vector<std::vector<int>> users(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs)
      if (users[in].empty() || users[in].back() != static_cast<int>(i)) users[in].push_back(static_cast<int>(i));
  return users;
}

bool is_graph_output(const Graph& g, int id) { return std::find(g.outputs.begin(), g.outputs.end(), id) != g.outputs.end(); }

const KnownOps& known_ops() {
  static const KnownOps ops = [] {
    auto s = [](const char* name) { return &op_schema(name); };
    return KnownOps{s("adaptive_avg_pool2d"), s("avg_pool2d"), s("batch_norm_eval"), s("binary"), s("bmm"), s("cast"),
                    s("causal_fill"), s("clamp"), s("concat"), s("contiguous"), s("conv2d"), s("conv2d_nobias"),
                    s("dropout"), s("embedding"), s("expand"), s("from_blocked"), s("fused_elementwise"), s("gelu"),
                    s("layer_norm"), s("linear"), s("masked_fill"), s("matmul"), s("max_pool2d"), s("permute"), s("reduce"), s("relu"),
                    s("reshape"), s("scale"), s("sdpa"), s("sigmoid"), s("silu"), s("slice"), s("softmax"), s("squeeze_excite"), s("sum_to"),
                    s("tanh"), s("to_blocked"), s("unary_math"), s("where")};
  }();
  return ops;
}

bool is_constant_value(const Graph& g, int id) {
  const Node& n = g.nodes[id];
  return n.kind == Node::Kind::Input ? n.frozen : n.constant;
}

std::vector<char> random_ops(const Graph& g) {
  std::vector<char> seed(g.nodes.size(), 0), random(g.nodes.size(), 0);
  for (const auto& n : g.nodes)
    if (is_op(n, known_ops().dropout) && n.inputs.size() > 1) seed[n.inputs[1]] = 1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != Node::Kind::Op) continue;
    random[i] = is_op(n, known_ops().dropout) || std::any_of(n.inputs.begin(), n.inputs.end(), [&](int in) { return seed[in]; });
  }
  return random;
}

}  // namespace hg::graphs
