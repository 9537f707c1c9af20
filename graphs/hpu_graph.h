// HPU graphs: capture the ops of a region once, replay them over the same static buffers.
//
//   auto in = hg::Tensor::zeros({8, 64}, hg::DType::F32, hg::Device::hpu(0));   // static input
//   hg::graphs::HPUGraph g(hg::Device::hpu(0));
//   g.capture_begin();
//   hg::Tensor out = model.forward(in);      // recorded, not run
//   g.capture_end();                         // compiled, memory-planned, run once; `out` is static
//   in.copy_from(next_batch);
//   g.replay();                              // no dispatch, no allocation; `out` holds the result
//
// One capture per device at a time. Reading a tensor's value during capture is an error.
// Random ops (dropout) captured in the graph get a fresh seed from the device generator at
// every replay, as Gaudi keeps RNG state per graph.
#pragma once
#include <memory>
#include <vector>

#include "engine/tensor.h"
#include "graphs/executable.h"

namespace hg::graphs {

class HPUGraph {
 public:
  explicit HPUGraph(Device d = Device::hpu(0));
  ~HPUGraph();
  HPUGraph(const HPUGraph&) = delete;
  HPUGraph& operator=(const HPUGraph&) = delete;

  void capture_begin();
  void capture_end();
  void replay(bool asynchronous = false);
  void reset();  // frees the graph and its arena

  bool captured() const { return exe_ != nullptr; }
  const Executable& executable() const { return *exe_; }
  size_t arena_bytes() const { return exe_ ? exe_->arena_bytes() : 0; }
  const std::vector<Tensor>& static_inputs() const { return inputs_; }
  const std::vector<Tensor>& static_outputs() const { return outputs_; }

 private:
  Device device_;
  bool capturing_ = false;
  std::shared_ptr<const Executable> exe_;
  std::vector<Tensor> inputs_, outputs_;
  std::shared_ptr<Storage> arena_;
  std::vector<const void*> in_ptrs_;
  std::vector<size_t> rng_inputs_;  // static inputs that are RNG seeds
  std::vector<void*> out_ptrs_;
};

}  // namespace hg::graphs
