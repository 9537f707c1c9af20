#include "graphs/ir.h"

#include <charconv>

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
