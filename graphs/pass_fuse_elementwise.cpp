// fuse_elementwise: groups of F32 element-wise ops (binary add/sub/mul/div with broadcasting,
// scale, relu, gelu, silu, sigmoid, tanh, unary_math, where, masked_fill) become one
// fused_elementwise node (engine/fused_ops.h) whose program runs in one pass over the output.
// A group grows from its last op backwards through producers that are element-wise, of the
// output's size, read by that group alone (one reader, not a graph output); values read more
// than once (the x of x * Phi(x)) stay inputs of the group. An activation right after a single-reader linear,
// matmul or conv2d (through reshapes) is left alone: fuse_postops runs it inside the oneDNN
// primitive.
#include <algorithm>
#include <optional>

#include "engine/fused_ops.h"
#include "engine/op_attrs.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

struct Instr {
  int64_t op;
  double k = 0;
};

bool is_activation(const OpSchema* op) {
  const KnownOps& k = known_ops();
  return op == k.relu || op == k.gelu || op == k.silu || op == k.sigmoid || op == k.tanh;
}

// The activation at `id` is the post-op of a linear, matmul or conv2d with no other reader.
bool post_op_candidate(const Graph& g, const std::vector<int>& uses, int id) {
  const KnownOps& k = known_ops();
  int src = g.nodes[id].inputs[0];
  while (is_op(g.nodes[src], k.reshape) && uses[src] == 1) src = g.nodes[src].inputs[0];
  const Node& p = g.nodes[src];
  if (p.kind != Node::Kind::Op || uses[src] != 1) return false;
  return p.op == k.linear || p.op == k.matmul || p.op == k.conv2d || p.op == k.conv2d_nobias;
}

// The instruction node `id` computes, if it is a fusable element-wise op.
std::optional<Instr> instruction(const Graph& g, const std::vector<int>& uses, int id) {
  const Node& n = g.nodes[id];
  if (n.kind != Node::Kind::Op || n.meta.dtype != DType::F32) return std::nullopt;
  const KnownOps& k = known_ops();
  const OpSchema* op = n.op;
  auto dtype = [&](size_t i) { return g.nodes[n.inputs[i]].meta.dtype; };
  if (op == k.binary && dtype(0) == DType::F32) {  // add, sub, mul, div: the opcodes' order
    const auto b = static_cast<int64_t>(attrs::Binary::of(n.attrs).op);
    if (b >= 0 && b <= 3) return Instr{ew::Add + b};
  }
  if (op == k.where && dtype(0) == DType::BOOL) return Instr{ew::Where};
  if (op == k.masked_fill && dtype(1) == DType::BOOL) return Instr{ew::MaskedFill, attrs::MaskedFill::of(n.attrs).value};
  if (op == k.scale) return Instr{ew::Scale, attrs::Scale::of(n.attrs).factor};
  if (op == k.unary_math) {  // sqrt, erf, exp, pow: the opcodes' order
    const auto m = attrs::UnaryMath::of(n.attrs);
    const auto fn = static_cast<int64_t>(m.fn);
    if (fn >= 0 && fn <= 3) return Instr{ew::Sqrt + fn, m.exponent};
  }
  if (!is_activation(op) || post_op_candidate(g, uses, id)) return std::nullopt;
  if (op == k.relu) return Instr{ew::Relu};
  if (op == k.gelu) return Instr{attrs::Gelu::of(n.attrs).tanh ? ew::GeluTanh : ew::GeluErf};
  if (op == k.silu) return Instr{ew::Silu};
  if (op == k.sigmoid) return Instr{ew::Sigmoid};
  return Instr{ew::Tanh};
}

}  // namespace

int fuse_elementwise(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  const int n = static_cast<int>(g.nodes.size());
  std::vector<std::optional<Instr>> instr(n);
  for (int i = 0; i < n; ++i) instr[i] = instruction(g, uses, i);
  const OpSchema& fused_op = *known_ops().fused_elementwise;
  std::vector<char> taken(n, 0);
  int groups = 0;
  for (int root = n - 1; root >= 0; --root) {
    if (!instr[root] || taken[root]) continue;
    // Grow the group breadth-first from the root while the inputs and instructions fit.
    std::vector<int> members = {root}, ext;
    auto is_member = [&](int id) { return std::find(members.begin(), members.end(), id) != members.end(); };
    auto add_ext = [&](int id) {
      if (!is_member(id) && std::find(ext.begin(), ext.end(), id) == ext.end()) ext.push_back(id);
    };
    for (int in : g.nodes[root].inputs) add_ext(in);
    for (size_t at = 0; at < members.size(); ++at) {
      for (int p : g.nodes[members[at]].inputs) {
        if (!instr[p] || taken[p] || uses[p] != 1 || is_member(p)) continue;
        if (g.nodes[p].constant && !g.nodes[root].constant) continue;  // computed once at compile: keep it so
        // A smaller value broadcast into the group (sqrt(var + eps) of [N, 1] in LayerNorm) is
        // cheaper computed at its own size: it heads a group of its own.
        if (g.nodes[p].meta.numel() != g.nodes[root].meta.numel()) continue;
        if (members.size() >= static_cast<size_t>(ew::kMaxInstructions)) break;
        std::vector<int> grown = ext;
        grown.erase(std::find(grown.begin(), grown.end(), p));
        for (int q : g.nodes[p].inputs)
          if (!is_member(q) && std::find(grown.begin(), grown.end(), q) == grown.end()) grown.push_back(q);
        if (grown.size() > static_cast<size_t>(ew::kMaxInputs)) continue;
        members.push_back(p);
        ext = std::move(grown);
      }
    }
    if (ext.size() > static_cast<size_t>(ew::kMaxInputs)) continue;  // the root alone reads too many
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end());  // topological: the program's order
    // Input 0 has the output's meta when one does, preferably an op's value (an arena buffer
    // the node may then overwrite in place).
    auto rank = [&](int id) {
      const Node& e = g.nodes[id];
      return e.meta != g.nodes[root].meta ? 2 : e.kind == Node::Kind::Op ? 0 : 1;
    };
    std::stable_sort(ext.begin(), ext.end(), [&](int a, int b) { return rank(a) < rank(b); });
    std::vector<int64_t> reg(n, -1);
    for (size_t j = 0; j < ext.size(); ++j) reg[ext[j]] = static_cast<int64_t>(j);
    Attrs prog;
    std::vector<std::string> names;
    for (size_t k = 0; k < members.size(); ++k) {
      const Node& m = g.nodes[members[k]];
      int64_t ops[3] = {0, 0, 0};
      for (size_t j = 0; j < m.inputs.size() && j < 3; ++j) ops[j] = reg[m.inputs[j]];
      prog.ints.insert(prog.ints.end(), {instr[members[k]]->op, ops[0], ops[1], ops[2]});
      prog.floats.push_back(instr[members[k]]->k);
      reg[members[k]] = static_cast<int64_t>(ext.size() + k);
      names.push_back(ew::opcode_name(instr[members[k]]->op));
      taken[members[k]] = 1;
    }
    Node& r = g.nodes[root];
    r.op = &fused_op;
    r.inputs = ext;
    r.attrs = std::move(prog);
    r.fused = std::move(names);
    ++groups;
  }
  if (groups) eliminate_dead_code(g);
  return groups;
}

}  // namespace hg::graphs
