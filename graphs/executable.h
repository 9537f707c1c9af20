// An immutable compiled graph: kernels prepared once and bound to arena offsets.
//
//   auto exe = hg::graphs::Executable::compile(graph);        // passes + memory plan + kernels
//   auto exe2 = hg::graphs::Executable::compile(graph, {}, {nullptr, w.data_ptr()});  // input 1 frozen
//   std::vector<std::byte> arena(exe->arena_bytes());         // or any 64-byte aligned block
//   exe->run(arena.data(), input_ptrs, output_ptrs);          // no allocation, no throwing
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "graphs/ir.h"
#include "graphs/memory_plan.h"
#include "graphs/passes.h"

namespace hg::graphs {

struct CompileOptions {
  PassOptions passes = default_pass_options();
  bool optimize = true;  // false: `g` already went through the passes (e.g. read from the disk cache)
};

class Executable {
 public:
  // frozen_data[i]: the data of graph input i when that input is frozen (Node::frozen), else null;
  // it must stay valid and unchanged for the executable's life (passes may fold or pre-pack it).
  static std::shared_ptr<const Executable> compile(Graph g, const CompileOptions& opt = {},
                                                   std::vector<const void*> frozen_data = {});

  size_t arena_bytes() const { return plan_.arena_bytes; }
  const MemoryPlan& plan() const { return plan_; }
  const Graph& graph() const { return graph_; }  // after passes
  const std::vector<TensorMeta>& input_metas() const { return input_metas_; }
  const std::vector<TensorMeta>& output_metas() const { return output_metas_; }
  size_t num_steps() const { return steps_.size(); }

  // inputs[i] / outputs[i] point at contiguous buffers of the metas above.
  void run(void* arena, const void* const* inputs, void* const* outputs) const noexcept;

 private:
  static constexpr size_t kMaxOpInputs = 16;
  enum class Where : uint8_t { Arena, Input, Output };
  struct Loc {
    Where where;
    size_t index;  // arena offset, input number or output number
  };
  struct Step {
    Kernel kernel;  // null: a copy of `bytes` from ins[0] to out
    std::vector<Loc> ins;
    Loc out;
    size_t bytes = 0;
  };
  Graph graph_;
  MemoryPlan plan_;
  std::vector<Step> steps_;
  std::vector<TensorMeta> input_metas_, output_metas_;
};

}  // namespace hg::graphs
