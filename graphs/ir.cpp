#include "graphs/ir.h"

#include <bit>
#include <charconv>
#include <type_traits>

#include "engine/error.h"

namespace hg::graphs {

int Graph::add_input(const TensorMeta& meta) {
  Node n;
  n.kind = Node::Kind::Input;
  n.meta = meta;
  n.input_index = num_inputs++;
  nodes.push_back(std::move(n));
  return static_cast<int>(nodes.size()) - 1;
}

int Graph::add_op(const OpSchema& op, std::vector<int> inputs, const Attrs& attrs) {
  std::vector<TensorMeta> metas;
  for (int i : inputs) metas.push_back(nodes.at(i).meta);
  return add_op(op, std::move(inputs), attrs, op.infer(op, metas, attrs));
}

int Graph::add_op(const OpSchema& op, std::vector<int> inputs, const Attrs& attrs, const TensorMeta& meta) {
  for (int i : inputs)
    if (i < 0 || i >= static_cast<int>(nodes.size()))
      throw InternalError("graph: op '" + op.name + "' refers to node " + std::to_string(i) + " that does not exist yet");
  Node n;
  n.op = &op;
  n.inputs = std::move(inputs);
  n.attrs = attrs;
  n.meta = meta;
  nodes.push_back(std::move(n));
  return static_cast<int>(nodes.size()) - 1;
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> uses(nodes.size(), 0);
  for (const auto& n : nodes)
    for (int i : n.inputs) uses[i]++;
  for (int o : outputs) uses[o]++;
  return uses;
}

std::string Graph::signature() const {
  std::string s;
  s.reserve(nodes.size() * 32);
  for (const auto& n : nodes) {
    s += n.kind == Node::Kind::Input ? (n.frozen ? "frozen" : "in") : n.op->name;
    s += ':' + meta_str(n.meta) + '(';
    for (int i : n.inputs) s += std::to_string(i) + ',';
    s += ')';
    append_attrs_key(s, n.attrs);
    s += ';';
  }
  s += "->";
  for (int o : outputs) s += std::to_string(o) + ',';
  return s;
}

namespace {

void mix(uint64_t& h, uint64_t v) {
  h = (h ^ v) * 0xff51afd7ed558ccdull;
  h ^= h >> 29;
}

template <class T>
void mix_all(uint64_t& h, const std::vector<T>& v) {
  mix(h, v.size());
  for (const T& x : v) mix(h, std::bit_cast<uint64_t>(static_cast<std::conditional_t<sizeof(T) == 8, T, int64_t>>(x)));
}

// The fields signature() writes: kind or op, frozen mark, meta, inputs, attributes (floats by bit pattern).
bool same_node(const Node& a, const Node& b) {
  auto same_bits = [](const std::vector<double>& x, const std::vector<double>& y) {
    if (x.size() != y.size()) return false;
    for (size_t k = 0; k < x.size(); ++k)
      if (std::bit_cast<uint64_t>(x[k]) != std::bit_cast<uint64_t>(y[k])) return false;
    return true;
  };
  if (a.kind != b.kind) return false;
  if (a.kind == Node::Kind::Input ? a.frozen != b.frozen : a.op != b.op) return false;
  return a.meta == b.meta && a.inputs == b.inputs && a.attrs.ints == b.attrs.ints &&
         same_bits(a.attrs.floats, b.attrs.floats);
}

}  // namespace

uint64_t Graph::structural_hash() const {
  uint64_t h = 0x6a09e667f3bcc909ull;
  mix(h, nodes.size());
  for (const Node& n : nodes) {
    mix(h, n.kind == Node::Kind::Input ? (n.frozen ? 1 : 2) : reinterpret_cast<uintptr_t>(n.op));
    mix(h, static_cast<uint64_t>(n.meta.dtype));
    mix_all(h, n.meta.shape);
    mix_all(h, n.inputs);
    mix_all(h, n.attrs.ints);
    mix_all(h, n.attrs.floats);
  }
  mix_all(h, outputs);
  return h;
}

bool Graph::same_structure(const Graph& other) const {
  if (nodes.size() != other.nodes.size() || outputs != other.outputs) return false;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!same_node(nodes[i], other.nodes[i])) return false;
  return true;
}

namespace {

std::string attrs_str(const Attrs& a) {
  std::string s;
  if (!a.ints.empty()) {
    s += " ints=[";
    for (size_t k = 0; k < a.ints.size(); ++k) s += (k ? ", " : "") + std::to_string(a.ints[k]);
    s += "]";
  }
  if (!a.floats.empty()) {
    s += " floats=[";
    for (size_t k = 0; k < a.floats.size(); ++k) {
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, a.floats[k]);  // shortest exact form
      s += (k ? ", " : "") + std::string(buf, r.ptr);
    }
    s += "]";
  }
  return s;
}

}  // namespace

std::string Graph::dump(const std::vector<std::string>& notes) const {
  std::string s;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    s += "%" + std::to_string(i) + " = ";
    if (n.kind == Node::Kind::Input) {
      s += (n.frozen ? "frozen input #" : "input #") + std::to_string(n.input_index);
    } else {
      if (n.constant) s += "constant ";
      s += n.op->name + "(";
      for (size_t k = 0; k < n.inputs.size(); ++k) s += (k ? ", %" : "%") + std::to_string(n.inputs[k]);
      s += ")" + attrs_str(n.attrs);
    }
    s += " : " + meta_str(n.meta);
    if (n.block) s += n.meta.shape.size() == 5 && n.meta.shape[1] == 1 ? " nhwc" : " nChw" + std::to_string(n.block) + "c";
    if (!n.fused.empty()) {
      s += "  fused: ";
      for (size_t k = 0; k < n.fused.size(); ++k) s += (k ? "+" : "") + n.fused[k];
    }
    if (i < notes.size() && !notes[i].empty()) s += "  @ " + notes[i];
    s += "\n";
  }
  s += "outputs:";
  for (int o : outputs) s += " %" + std::to_string(o);
  return s + "\n";
}

}  // namespace hg::graphs
