// An immutable compiled graph: constants computed once, kernels prepared (weights pre-packed)
// once and bound to arena offsets.
//
//   auto exe = hg::graphs::Executable::compile(graph);        // passes + memory plan + kernels
//   auto exe2 = hg::graphs::Executable::compile(graph, {}, {nullptr, w.data_ptr()});  // input 1 frozen
//   std::vector<std::byte> arena(exe->arena_bytes());         // or any 64-byte aligned block
//   exe->run(arena.data(), input_ptrs, output_ptrs);          // no allocation, no throwing
//   std::printf("%zu of %zu bytes\n", exe->arena_bytes(), exe->buffer_bytes());
//   std::puts(exe->dump().c_str());                           // graph + memory plan + pass report
//
// Set HG_DUMP_GRAPH=FILE (or call set_graph_dump, graphs/graph_dump.h) to have every compile
// append its dump to FILE.
#pragma once
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "graphs/ir.h"
#include "graphs/memory_plan.h"
#include "graphs/passes.h"

namespace hg::graphs {

// Values of constant nodes computed by an earlier compile of the same optimized graph with the
// same frozen data (the disk cache's constants entry): node index -> bytes.
using StoredConstants = std::map<int, std::span<const uint8_t>>;

struct CompileOptions {
  PassOptions passes = default_pass_options();
  bool optimize = true;  // false: `g` already went through the passes (e.g. read from the disk cache)
  // With optimize false: constant nodes found here are copied instead of computed, and the
  // constants only they read are not computed at all. Every entry must name a constant node
  // that a step or an output reads and have its byte size, else compile throws FormatError.
  const StoredConstants* constants = nullptr;
  // Keeps the stored constants' memory alive: when set, 64-byte aligned ones are used in place
  // (the executable holds this) instead of copied.
  std::shared_ptr<const void> constants_owner = nullptr;
};

class Executable {
 public:
  // frozen_data[i]: the data of graph input i when that input is frozen (Node::frozen), else null
  // (entries of inputs that are not frozen are not read). It must stay valid and unchanged for
  // the executable's life: frozen inputs are read from there (run ignores inputs[i] for them)
  // and kernels may pre-pack it. Nodes marked `constant` are computed here, once, into buffers
  // the executable owns. Throws InvalidArgument when a frozen input has no data.
  static std::shared_ptr<const Executable> compile(Graph g, const CompileOptions& opt = {},
                                                   std::vector<const void*> frozen_data = {});

  size_t arena_bytes() const { return plan_.arena_bytes; }
  size_t buffer_bytes() const { return plan_.total_bytes; }  // sum of the arena's buffers (no reuse)
  // Constant buffers kept for runs: constant nodes' values and the weights prepacked kernels keep.
  size_t constant_bytes() const { return constant_bytes_; }
  const MemoryPlan& plan() const { return plan_; }
  const PassReport& pass_report() const { return report_; }
  const Graph& graph() const { return graph_; }  // after passes
  const std::vector<TensorMeta>& input_metas() const { return input_metas_; }
  const std::vector<TensorMeta>& output_metas() const { return output_metas_; }
  size_t num_steps() const { return steps_.size(); }
  // Where node `i` of graph() lives: an arena offset, an input or output slot, or a constant
  // (frozen input data or a buffer computed at compile).
  enum class Where : uint8_t { Arena, Input, Output, Constant };
  struct Loc {
    Where where;
    size_t index;  // arena offset, input number, output number or constant number
  };
  Loc location(int i) const { return node_loc_[i]; }
  int inplace_of(int i) const { return inplace_of_[i]; }  // node whose arena buffer i took over, or -1
  bool prepacked(int i) const { return prepacked_[i] != 0; }
  // The constant nodes computed at compile that runs read (node index -> bytes): what the
  // disk cache stores so that a later compile can take them as CompileOptions::constants.
  StoredConstants computed_constants() const;
  int step_of(int i) const { return node_step_[i]; }  // -1: an input or a constant (no step)
  // FNV-1a of the signature of the graph given to compile (before passes): names the dump.
  uint64_t signature_hash() const { return signature_hash_; }
  // The graph with each node's memory location, then arena vs buffer bytes and the pass report.
  std::string dump() const;

  // The most inputs one op node may have (compile refuses more: run keeps them on the stack).
  static constexpr size_t kMaxOpInputs = 16;

  // inputs[i] / outputs[i] point at contiguous buffers of the metas above.
  void run(void* arena, const void* const* inputs, void* const* outputs) const noexcept;

 private:
  struct Step {
    Kernel kernel;  // null: a copy of `bytes` from ins[0] to out
    std::vector<Loc> ins;
    Loc out;
    size_t bytes = 0;
  };
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };
  using Buffer = std::unique_ptr<std::byte[], AlignedFree>;

  Graph graph_;
  MemoryPlan plan_;
  PassReport report_;
  bool optimized_ = true;
  uint64_t signature_hash_ = 0;
  std::vector<Step> steps_;
  std::vector<TensorMeta> input_metas_, output_metas_;
  // Frozen input data and constant buffers (null: an intermediate freed after compile);
  // owned_[k] holds constants_[k] when the executable owns it.
  std::vector<const void*> constants_;
  std::vector<Buffer> owned_;
  std::shared_ptr<const void> borrowed_;  // CompileOptions::constants_owner, when constants point into it
  size_t constant_bytes_ = 0;
  // Per node of graph_: see location(), inplace_of(), prepacked(), step_of().
  std::vector<Loc> node_loc_;
  std::vector<int> inplace_of_;
  std::vector<char> prepacked_;
  std::vector<std::string> kernel_choice_;  // per node: a kernel choice to show in the dump (kernels::take_kernel_choice)
  std::vector<int> node_step_;
};

}  // namespace hg::graphs
