// The graph IR: a list of nodes in topological order. Inputs are nodes of kind Input
// (numbered in order of appearance); every Op node has exactly one output value.
//
//   hg::graphs::Graph g;
//   int x = g.add_input({{8, 64}, hg::DType::F32});
//   int w = g.add_input(...), b = g.add_input(...);
//   int y = g.add_op(hg::op_schema("linear"), {x, w, b}, hg::Attrs{{0}, {}});
//   g.outputs = {g.add_op(hg::op_schema("relu"), {y}, {})};
//   std::string key = g.signature();   // structure + attributes + input signature
//   uint64_t h = g.structural_hash();  // the same, hashed without building text
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/op.h"

namespace hg::graphs {

struct Node {
  enum class Kind { Input, Op } kind = Kind::Op;
  const OpSchema* op = nullptr;
  std::vector<int> inputs;
  Attrs attrs;
  TensorMeta meta;
  int input_index = -1;  // for Input nodes
  bool frozen = false;    // Input: its value is fixed for the life of the compiled graph (weights)
  bool constant = false;  // Op: depends only on frozen inputs; computed once at compile, not per run
  std::vector<std::string> fused;  // ops a fusion pass merged into this node, for the dump
  int64_t block = 0;  // > 0: the layout pass made this value channel-blocked (engine/ops_layout.h), for the dump
};

struct Graph {
  std::vector<Node> nodes;
  std::vector<int> outputs;
  int num_inputs = 0;

  int add_input(const TensorMeta& meta);
  int add_op(const OpSchema& op, std::vector<int> inputs, const Attrs& attrs);  // infers meta
  int add_op(const OpSchema& op, std::vector<int> inputs, const Attrs& attrs, const TensorMeta& meta);
  std::vector<int> use_counts() const;  // consumers per node (outputs count as uses)
  std::string signature() const;        // canonical text: the disk cache's key
  // What signature() says, without building text: a 64-bit hash (the memory cache's key) and the
  // comparison that confirms a hash match. Ops are told apart by schema (process-local).
  uint64_t structural_hash() const;
  bool same_structure(const Graph& other) const;
  // Readable listing: ids, op, inputs, attrs, meta, frozen/constant marks, fused groups;
  // notes[i] (when given) is appended to node i's line.
  std::string dump(const std::vector<std::string>& notes = {}) const;
};

}  // namespace hg::graphs
