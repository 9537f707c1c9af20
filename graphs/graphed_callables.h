// make_graphed_callables: a forward and a backward HPU graph for a training region, behind a
// callable whose outputs take part in autograd like the eager ones (PyTorch's
// torch.cuda.make_graphed_callables, Habana's htcore.hpu.make_graphed_callables).
//
//   std::vector<hg::Tensor> params;                       // the parameters the callable reads
//   for (auto& [name, p] : net->named_parameters()) params.push_back(*p);
//   auto step = hg::graphs::make_graphed_callables(
//       [&](const std::vector<hg::Tensor>& in) { return std::vector<hg::Tensor>{net->forward(in[0])}; },
//       {sample_batch}, params);                          // captures both graphs now
//   for (auto& batch : loader) {
//     auto out = (*step)({batch.x});                      // copies the input in, replays forward
//     hg::ops::cross_entropy(out[0], batch.y).backward(); // replays backward: p.grad() += d loss / d p
//     opt.step();                                         // in-place updates: the graphs see them
//   }
//
// The backward graph computes the gradients of the inputs (those sample inputs that require
// grad) and of `params` for a static grad_output; it reads the activations the forward graph
// saved, so each call's backward must run before the next call's forward (an error says so
// otherwise). A multi-output callable replays the backward graph once per output that receives
// a gradient (with zeros for the others). Under NoGradGuard a call replays only the forward.
// Outputs are copies: they stay valid across calls.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "engine/tensor.h"
#include "graphs/hpu_graph.h"

namespace hg::graphs {

using TensorFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct GraphedCallableOptions {
  // An input or parameter that requires grad but gets none: an error unless set (then it gets
  // no gradient).
  bool allow_unused_input = false;
};

class GraphedCallable {
 public:
  struct State;
  explicit GraphedCallable(std::shared_ptr<State> s);
  ~GraphedCallable();
  GraphedCallable(const GraphedCallable&) = delete;
  GraphedCallable& operator=(const GraphedCallable&) = delete;

  // inputs must match the sample inputs' metas and device (InvalidArgument naming the input).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);

  const HPUGraph& forward_graph() const;
  const HPUGraph& backward_graph() const;  // not captured when nothing requires grad

 private:
  std::shared_ptr<State> state_;
};

// Captures the graphs right away (running each once). All sample inputs and params must be on
// one HPU; the params' existing gradients are left untouched by the capture.
std::unique_ptr<GraphedCallable> make_graphed_callables(const TensorFn& fn, const std::vector<Tensor>& sample_inputs,
                                                        const std::vector<Tensor>& params,
                                                        const GraphedCallableOptions& opt = {});

}  // namespace hg::graphs
