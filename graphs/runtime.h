// A Runtime binds a Program (an immutable compiled graph, graphs/executable.h) to memory on one
// device and runs it: every captured graph, replayed training step and lazy step runs through one.
//
//   std::shared_ptr<const hg::graphs::Executable> program = hg::graphs::compile_cached(graph);
//   hg::graphs::Runtime rt(program, hg::Device::hpu(0), {.depth = 2});  // the arena, allocated once
//   rt.setup({x.data()}, {y.data()});  // the next invoke's buffers (waits only when `depth` are queued)
//   rt.invoke();                       // queued on this thread's stream of the device; never throws
//   rt.wait();                         // this Runtime's invokes have run (not the whole device)
//   rt.setup({x.data()}, {y.data()});
//   rt.run();                          // invoke + wait for it: inline when the stream is idle
//
// Bindings: each of the `depth` bindings holds one pointer per program input and output; setup
// reuses them in turn, so after the first `depth` invokes nothing is allocated. A binding is
// rewritten only once the invoke that last used it has run, so the host may run `depth` invokes
// ahead of the device. Inputs named in `seeds` are random seeds (dropout): each setup draws them
// from the device's generator, in that order, into memory the Runtime owns. Completion is tracked
// by the queue events of the Runtime's own invokes: waiting never synchronizes the whole device.
// Invokes from different streams of the device (a LoadStreamGuard) share the arena, so an invoke
// on another stream than the previous one waits for that one first.
// A Runtime is used by one thread at a time; the Program may be shared by any number of them.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "engine/device.h"
#include "engine/tensor.h"
#include "graphs/executable.h"

namespace hg::graphs {

struct RuntimeOptions {
  size_t depth = 1;                // bindings: how many invokes may be queued at once
  std::vector<size_t> seeds = {};  // program inputs that are random seeds
};

struct RuntimeStats {
  uint64_t invokes = 0;
  uint64_t inline_runs = 0;  // run() calls that ran on the calling thread (the stream was idle)
  double wait_s = 0;         // time setup() and wait() blocked on this Runtime's queued invokes
};

class Runtime {
 public:
  Runtime(std::shared_ptr<const Executable> program, Device d, RuntimeOptions opt = {});
  ~Runtime();  // waits for its queued invokes
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const Executable& program() const { return *program_; }
  Device device() const { return device_; }

  // Starts the next binding: waits for the invoke that used it last, draws the seeds, and binds
  // every input and output to the pointers given (inputs.size() must be the program's input
  // count, outputs.size() its output count: InvalidArgument otherwise). Seed inputs are bound to
  // the Runtime's seed memory whatever `inputs` says. Returns the binding's index.
  size_t setup(std::span<const void* const> inputs, std::span<void* const> outputs);
  // The same, keeping the pointers the binding had (null at first): bind them below.
  size_t setup();
  // Changes one pointer of the binding the last setup started.
  void bind_input(size_t i, const void* p) { cur_->in[i] = p; }
  void bind_output(size_t j, void* p) { cur_->out[j] = p; }
  // Keeps `s` alive until the invoke of the binding the last setup started has run.
  void keep(std::shared_ptr<Storage> s) { cur_->keep.push_back(std::move(s)); }
  // Queues the program over the binding the last setup started, on the calling thread's stream
  // of the device (its load stream under a LoadStreamGuard). No allocation once warm, no throw.
  void invoke() noexcept;
  void wait();                // every invoke of this Runtime has run
  // invoke + wait for it; on the calling thread when its stream has nothing queued (else it
  // waits for this invoke alone, and rethrows an error of an earlier queued task as
  // synchronize does).
  void run();

  size_t arena_bytes() const { return program_->arena_bytes(); }
  const RuntimeStats& stats() const { return stats_; }

 private:
  struct Binding {
    std::vector<const void*> in;
    std::vector<void*> out;
    std::vector<std::shared_ptr<Storage>> keep;  // released by the invoke once it has run
    ExecQueue* queue = nullptr;                  // where it was last invoked, and its event
    uint64_t event = 0;
  };
  void execute(Binding& b) const noexcept;
  // The calling thread's stream of the device (null for the cpu), after the previous invoke when
  // that one went to another stream (they share the arena).
  ExecQueue* stream_after_last();
  void wait_for(Binding& b);

  std::shared_ptr<const Executable> program_;
  Device device_;
  std::vector<size_t> seeds_;
  std::shared_ptr<Storage> arena_, seed_store_;
  std::vector<Binding> bindings_;
  size_t next_ = 0;
  Binding* cur_ = nullptr;
  Binding* last_ = nullptr;  // the last invoked: an invoke on another stream waits for it
  RuntimeStats stats_;
};

}  // namespace hg::graphs
