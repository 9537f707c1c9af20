#include "graphs/executable.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>

#include "engine/error.h"
#include "engine/kernels.h"
#include "engine/prepare_kernel.h"
#include "graphs/graph_dump.h"
#include "graphs/graph_serialize.h"
#include "graphs/step_profile.h"

namespace hg::graphs {

namespace {

constexpr std::align_val_t kBufferAlignment{kArenaAlignment};

std::string node_name(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  return "%" + std::to_string(i) + " (" + (n.kind == Node::Kind::Input ? "input #" + std::to_string(n.input_index) : n.op->name) +
         ")";
}

std::string bytes_str(size_t b) {
  std::string s = std::to_string(b) + " B";
  if (b >= (size_t{1} << 20)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " (%.2f MiB)", static_cast<double>(b) / (1 << 20));
    s += buf;
  }
  return s;
}

}  // namespace

void Executable::AlignedFree::operator()(std::byte* p) const { ::operator delete[](p, kBufferAlignment); }

std::shared_ptr<const Executable> Executable::compile(Graph g, const CompileOptions& opt,
                                                     std::vector<const void*> frozen_data) {
  auto exe = std::shared_ptr<Executable>(new Executable());
  exe->signature_hash_ = hash64(g.signature());
  exe->optimized_ = opt.optimize;
  if (opt.optimize) exe->report_ = run_passes(g, opt.passes);
  const int n = static_cast<int>(g.nodes.size());
  exe->input_metas_.resize(g.num_inputs);
  for (const auto& node : g.nodes)
    if (node.kind == Node::Kind::Input) exe->input_metas_[node.input_index] = node.meta;
  for (int o : g.outputs) exe->output_metas_.push_back(g.nodes[o].meta);
  for (int i = 0; i < n; ++i)
    if (g.nodes[i].kind == Node::Kind::Op && g.nodes[i].inputs.size() > kMaxOpInputs)
      throw InternalError("graph node " + node_name(g, i) + " has more than " + std::to_string(kMaxOpInputs) + " inputs");

  std::vector<Loc> loc(n, Loc{Where::Arena, 0});
  std::vector<int> inplace_of(n, -1), node_step(n, -1);
  std::vector<char> prepacked(n, 0);
  std::vector<std::string> choices(n);
  auto pointers_and_metas = [&](const Node& node, std::vector<const void*>& ptrs, std::vector<TensorMeta>& metas) {
    ptrs.clear();
    metas.clear();
    for (int in : node.inputs) {
      ptrs.push_back(loc[in].where == Where::Constant ? exe->constants_[loc[in].index] : nullptr);
      metas.push_back(g.nodes[in].meta);
    }
  };

  // Frozen inputs read the caller's data; constant nodes are computed now, once. A constant
  // that no step and no output reads (an intermediate of a folded chain) is freed as soon as
  // the last constant reading it has been computed; one nothing reads is not computed.
  auto is_step = [&](int i) { return g.nodes[i].kind == Node::Kind::Op && !g.nodes[i].constant; };
  std::vector<char> kept(n, 0);
  std::vector<int> constant_readers(n, 0);
  for (int i = 0; i < n; ++i)
    for (int in : g.nodes[i].inputs) {
      if (is_step(i)) kept[in] = 1;
      else ++constant_readers[in];
    }
  for (int o : g.outputs) kept[o] = 1;
  // Stored constants: checked, then only the constants some missing one reads are computed.
  std::vector<char> needed(n, 0);
  auto release_if_unread = [&](int in) {
    const size_t c = loc[in].index;
    if (--constant_readers[in] == 0 && !kept[in] && exe->owned_[c]) {
      exe->owned_[c].reset();
      exe->constants_[c] = nullptr;
    }
  };
  if (opt.constants)
    for (const auto& [i, bytes] : *opt.constants) {
      if (i < 0 || i >= n || g.nodes[i].kind != Node::Kind::Op || !g.nodes[i].constant || !kept[i])
        throw FormatError("stored constant for node %" + std::to_string(i) + ": not a constant node that runs read");
      if (bytes.size() != g.nodes[i].meta.bytes())
        throw FormatError("stored constant for node " + node_name(g, i) + ": " + std::to_string(bytes.size()) +
                          " bytes, its " + meta_str(g.nodes[i].meta) + " has " + std::to_string(g.nodes[i].meta.bytes()));
    }
  for (int i = n - 1; i >= 0; --i) {
    if (g.nodes[i].kind != Node::Kind::Op || !g.nodes[i].constant) continue;
    const bool stored = opt.constants && opt.constants->count(i);
    if (!stored && (kept[i] || needed[i]))
      for (int in : g.nodes[i].inputs) needed[in] = 1;
    if (!stored && kept[i]) needed[i] = 1;
  }
  std::vector<const void*> ptrs;
  std::vector<TensorMeta> metas;
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    if (node.kind == Node::Kind::Input) {
      const auto k = static_cast<size_t>(node.input_index);
      if (!node.frozen) {
        loc[i] = {Where::Input, k};
        continue;
      }
      const void* data = k < frozen_data.size() ? frozen_data[k] : nullptr;
      if (!data)
        throw InvalidArgument("graph input #" + std::to_string(k) + " (%" + std::to_string(i) + ", " +
                              meta_str(node.meta) + ") is frozen but no data was given for it (frozen_data[" +
                              std::to_string(k) + "] is null)");
      loc[i] = {Where::Constant, exe->constants_.size()};
      exe->constants_.push_back(data);
      exe->owned_.emplace_back();
      continue;
    }
    if (!node.constant) continue;
    loc[i] = {Where::Constant, exe->constants_.size()};
    exe->constants_.push_back(nullptr);
    exe->owned_.emplace_back();
    if (!needed[i] && !(opt.constants && opt.constants->count(i))) {
      for (int in : node.inputs) release_if_unread(in);
      continue;
    }
    if (!needed[i]) {
      const auto& stored = opt.constants->at(i);
      if (opt.constants_owner && reinterpret_cast<uintptr_t>(stored.data()) % kArenaAlignment == 0) {
        exe->constants_[loc[i].index] = stored.data();
        exe->borrowed_ = opt.constants_owner;
      } else {
        Buffer copy(static_cast<std::byte*>(::operator new[](std::max<size_t>(stored.size(), 1), kBufferAlignment)));
        std::memcpy(copy.get(), stored.data(), stored.size());
        exe->constants_[loc[i].index] = copy.get();
        exe->owned_[loc[i].index] = std::move(copy);
      }
      for (int in : node.inputs) release_if_unread(in);
      continue;
    }
    const size_t bytes = node.meta.bytes();
    Buffer buf(static_cast<std::byte*>(::operator new[](std::max<size_t>(bytes, 1), kBufferAlignment)));
    pointers_and_metas(node, ptrs, metas);
    for (size_t k = 0; k < node.inputs.size(); ++k)
      if (!ptrs[k])
        throw InternalError("graph node " + node_name(g, i) + " is marked constant but its input " + std::to_string(k) +
                            ", " + node_name(g, node.inputs[k]) + ", is neither frozen nor constant");
    const Kernel kernel = prepare_kernel(*node.op, metas, node.meta, node.attrs, ptrs);
    kernels::take_prepacked_bytes();  // this kernel only computes a constant, once: it is not kept
    kernel(ptrs.data(), buf.get());
    exe->constants_[loc[i].index] = buf.get();
    exe->owned_[loc[i].index] = std::move(buf);
    for (int in : node.inputs) release_if_unread(in);
  }
  for (int i = 0; i < n; ++i)
    if (g.nodes[i].kind == Node::Kind::Op && g.nodes[i].constant && kept[i]) exe->constant_bytes_ += g.nodes[i].meta.bytes();

  // Every other op is a step; the last step that reads each node bounds its lifetime.
  std::vector<int> last_read(n, -1);
  int steps = 0;
  for (int i = 0; i < n; ++i)
    if (is_step(i)) node_step[i] = steps++;
  for (int i = 0; i < n; ++i)
    if (is_step(i))
      for (int in : g.nodes[i].inputs) last_read[in] = std::max(last_read[in], node_step[i]);

  // A step's value lives in its first output slot or in the arena. An in-place op takes over
  // input 0's arena buffer when it reads that buffer last, reads it once, and the sizes agree.
  std::vector<int> first_output(n, -1);
  for (size_t k = 0; k < g.outputs.size(); ++k)
    if (first_output[g.outputs[k]] < 0) first_output[g.outputs[k]] = static_cast<int>(k);
  std::vector<BufferRequest> reqs;
  std::vector<int> req_node, req_of(n, -1);
  for (int i = 0; i < n; ++i) {
    if (!is_step(i)) continue;
    const Node& node = g.nodes[i];
    if (first_output[i] >= 0) {
      loc[i] = {Where::Output, static_cast<size_t>(first_output[i])};
      continue;
    }
    BufferRequest r{std::max<size_t>(node.meta.bytes(), 1), node_step[i], std::max(last_read[i], node_step[i])};
    if (node.op->inplace && !node.inputs.empty()) {
      const int src = node.inputs[0];
      const bool read_once = std::count(node.inputs.begin(), node.inputs.end(), src) == 1;
      if (req_of[src] >= 0 && read_once && last_read[src] == node_step[i] &&
          g.nodes[src].meta.bytes() == node.meta.bytes()) {
        r.alias_of = req_of[src];
        inplace_of[i] = src;
      }
    }
    req_of[i] = static_cast<int>(reqs.size());
    reqs.push_back(r);
    req_node.push_back(i);
  }
  exe->plan_ = plan_memory(reqs);
  for (size_t r = 0; r < reqs.size(); ++r) loc[req_node[r]] = {Where::Arena, exe->plan_.offsets[r]};

  // Kernels: pre-packed when an input is frozen or constant and the op knows how.
  for (int i = 0; i < n; ++i) {
    if (!is_step(i)) continue;
    const Node& node = g.nodes[i];
    pointers_and_metas(node, ptrs, metas);
    Step s;
    for (int in : node.inputs) s.ins.push_back(loc[in]);
    s.out = loc[i];
    const bool any_constant = std::any_of(ptrs.begin(), ptrs.end(), [](const void* p) { return p != nullptr; });
    kernels::take_kernel_choice();  // nothing noted before this node's kernel counts for it
    if (any_constant && node.op->prepack) {
      kernels::take_prepacked_bytes();
      s.kernel = prepare_kernel(*node.op, metas, node.meta, node.attrs, ptrs);
      exe->constant_bytes_ += kernels::take_prepacked_bytes();  // its copy of the weights is kept for runs
      prepacked[i] = 1;
    } else {
      s.kernel = prepare_kernel(*node.op, metas, node.meta, node.attrs);
    }
    choices[i] = kernels::take_kernel_choice();
    exe->steps_.push_back(std::move(s));
  }
  // Outputs that are inputs or constants, or that repeat an earlier output, are filled by copies.
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const int node = g.outputs[k];
    if (first_output[node] == static_cast<int>(k) && is_step(node)) continue;
    exe->steps_.push_back(Step{nullptr, {loc[node]}, Loc{Where::Output, k}, g.nodes[node].meta.bytes()});
  }
  exe->node_loc_ = std::move(loc);
  exe->inplace_of_ = std::move(inplace_of);
  exe->prepacked_ = std::move(prepacked);
  exe->kernel_choice_ = std::move(choices);
  exe->node_step_ = std::move(node_step);
  exe->graph_ = std::move(g);
  append_graph_dump(*exe);
  return exe;
}

StoredConstants Executable::computed_constants() const {
  StoredConstants r;
  for (int i = 0; i < static_cast<int>(graph_.nodes.size()); ++i) {
    const Node& node = graph_.nodes[i];
    if (node.kind != Node::Kind::Op || !node.constant || node_loc_[i].where != Where::Constant) continue;
    if (const void* p = constants_[node_loc_[i].index])
      r.emplace(i, std::span<const uint8_t>(static_cast<const uint8_t*>(p), node.meta.bytes()));
  }
  return r;
}

std::string Executable::dump() const {
  const int n = static_cast<int>(graph_.nodes.size());
  std::vector<std::string> notes(n);
  for (int i = 0; i < n; ++i) {
    const Node& node = graph_.nodes[i];
    const Loc& l = node_loc_[i];
    std::string& s = notes[i];
    switch (l.where) {
      case Where::Input: s = "input #" + std::to_string(l.index); break;
      case Where::Output: s = "output #" + std::to_string(l.index); break;
      case Where::Constant:
        if (node.kind == Node::Kind::Input) s = "frozen data";
        else if (constants_[l.index]) s = "constant " + std::to_string(node.meta.bytes()) + " B";
        else s = "constant, freed after compile";
        break;
      case Where::Arena:
        s = "arena " + std::to_string(l.index) + "+" + std::to_string(node.meta.bytes());
        if (inplace_of_[i] >= 0) s += " in-place of %" + std::to_string(inplace_of_[i]);
        break;
    }
    if (prepacked_[i]) s += ", prepacked";
    if (!kernel_choice_[i].empty()) s += ", " + kernel_choice_[i];
  }
  std::string s = graph_.dump(notes);
  const size_t buffers = plan_.offsets.size();
  s += "memory: arena " + bytes_str(plan_.arena_bytes) + ", sum of buffers " + bytes_str(plan_.total_bytes) + " (" +
       std::to_string(buffers) + (buffers == 1 ? " buffer, " : " buffers, ") + std::to_string(plan_.inplace) +
       " in place), constants " + bytes_str(constant_bytes_) + ", " + std::to_string(steps_.size()) + " steps\n";
  if (!optimized_) return s + "passes: not run (the graph was optimized before)\n";
  s += "passes:";
  for (size_t k = 0; k < report_.applied.size(); ++k)
    s += (k ? ", " : " ") + report_.applied[k].first + " " + std::to_string(report_.applied[k].second);
  return s + " (" + std::to_string(report_.rounds) + (report_.rounds == 1 ? " round)\n" : " rounds)\n");
}

void Executable::run(void* arena, const void* const* inputs, void* const* outputs) const noexcept {
  char* base = static_cast<char*>(arena);
  auto resolve = [&](const Loc& l) -> void* {
    switch (l.where) {
      case Where::Arena: return base + l.index;
      case Where::Input: return const_cast<void*>(inputs[l.index]);
      case Where::Output: return outputs[l.index];
      case Where::Constant: return const_cast<void*>(constants_[l.index]);
    }
    return nullptr;
  };
  const void* ptrs[kMaxOpInputs];
  auto step = [&](const Step& s) {
    for (size_t k = 0; k < s.ins.size(); ++k) ptrs[k] = resolve(s.ins[k]);
    if (s.kernel) s.kernel(ptrs, resolve(s.out));
    else if (s.bytes) std::memcpy(resolve(s.out), ptrs[0], s.bytes);
  };
  if (!StepProfile::on()) {
    for (const Step& s : steps_) step(s);
    return;
  }
  try {
    std::vector<double> seconds(steps_.size());
    for (size_t k = 0; k < steps_.size(); ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      step(steps_[k]);
      seconds[k] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    StepProfile::add(*this, seconds);
  } catch (...) {  // out of memory for the profile's table: this run goes unrecorded
  }
}

}  // namespace hg::graphs
