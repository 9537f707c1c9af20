#include "graphs/executable.h"

#include <cstring>

#include "engine/error.h"

namespace hg::graphs {

std::shared_ptr<const Executable> Executable::compile(Graph g, const CompileOptions& opt,
                                                     std::vector<const void*> frozen_data) {
  (void)frozen_data;  // TODO(executable helper): evaluate constant nodes once, pre-pack frozen weights
  if (opt.optimize) run_passes(g, opt.passes);
  auto exe = std::shared_ptr<Executable>(new Executable());
  const int n = static_cast<int>(g.nodes.size());
  exe->input_metas_.resize(g.num_inputs);
  for (const auto& node : g.nodes)
    if (node.kind == Node::Kind::Input) exe->input_metas_[node.input_index] = node.meta;
  for (int o : g.outputs) exe->output_metas_.push_back(g.nodes[o].meta);

  // Where each node's value lives: an input slot, its first output slot, or the arena.
  std::vector<Loc> loc(n, Loc{Where::Arena, 0});
  std::vector<int> first_output(n, -1);
  for (size_t k = 0; k < g.outputs.size(); ++k)
    if (first_output[g.outputs[k]] < 0) first_output[g.outputs[k]] = static_cast<int>(k);
  // Step number of each op node and the last step that reads it.
  std::vector<int> step_of(n, -1), last_read(n, -1);
  int steps = 0;
  for (int i = 0; i < n; ++i)
    if (g.nodes[i].kind == Node::Kind::Op) step_of[i] = steps++;
  for (int i = 0; i < n; ++i)
    for (int in : g.nodes[i].inputs) last_read[in] = std::max(last_read[in], step_of[i]);

  std::vector<BufferRequest> reqs;
  std::vector<int> req_node;
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    if (node.kind == Node::Kind::Input) loc[i] = {Where::Input, static_cast<size_t>(node.input_index)};
    else if (first_output[i] >= 0) loc[i] = {Where::Output, static_cast<size_t>(first_output[i])};
    else {
      reqs.push_back({std::max<size_t>(node.meta.bytes(), 1), step_of[i], std::max(last_read[i], step_of[i])});
      req_node.push_back(i);
    }
  }
  exe->plan_ = plan_memory(reqs);
  for (size_t r = 0; r < reqs.size(); ++r) loc[req_node[r]] = {Where::Arena, exe->plan_.offsets[r]};

  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    if (node.kind != Node::Kind::Op) continue;
    if (node.inputs.size() > kMaxOpInputs)
      throw InternalError("graph node %" + std::to_string(i) + " (" + node.op->name + ") has more than " +
                          std::to_string(kMaxOpInputs) + " inputs");
    Step s;
    std::vector<TensorMeta> metas;
    for (int in : node.inputs) {
      s.ins.push_back(loc[in]);
      metas.push_back(g.nodes[in].meta);
    }
    s.out = loc[i];
    s.kernel = node.op->prepare(metas, node.meta, node.attrs);
    exe->steps_.push_back(std::move(s));
  }
  // Outputs that are inputs, or that repeat an earlier output, are filled by copies.
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const int node = g.outputs[k];
    if (first_output[node] == static_cast<int>(k) && g.nodes[node].kind == Node::Kind::Op) continue;
    exe->steps_.push_back(Step{nullptr, {loc[node]}, Loc{Where::Output, k}, g.nodes[node].meta.bytes()});
  }
  exe->graph_ = std::move(g);
  return exe;
}

void Executable::run(void* arena, const void* const* inputs, void* const* outputs) const noexcept {
  char* base = static_cast<char*>(arena);
  auto resolve = [&](const Loc& l) -> void* {
    switch (l.where) {
      case Where::Arena: return base + l.index;
      case Where::Input: return const_cast<void*>(inputs[l.index]);
      case Where::Output: return outputs[l.index];
    }
    return nullptr;
  };
  const void* ptrs[kMaxOpInputs];
  for (const Step& s : steps_) {
    for (size_t k = 0; k < s.ins.size(); ++k) ptrs[k] = resolve(s.ins[k]);
    if (s.kernel) s.kernel(ptrs, resolve(s.out));
    else if (s.bytes) std::memcpy(resolve(s.out), ptrs[0], s.bytes);
  }
}

}  // namespace hg::graphs
