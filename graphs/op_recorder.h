// Records the engine ops a function issues on one device, without running them: the graph that
// model export (training/export.h) turns into a portable "ops" graph and ONNX.
//
//   hg::graphs::RecordedOps r = hg::graphs::record_ops(hg::Device::cpu(), [&] {
//     return std::vector<hg::Tensor>{net.forward(x)};
//   });
//   r.graph.nodes;    // Input nodes (in order of first use) and the ops, in call order
//   r.graph.outputs;  // the nodes of the returned tensors, in order
//   r.inputs[k];      // the tensor behind Input node k: x, the parameters, constants made in fn
//
// The device may be the host (cpu) or an hpu. Only the calling thread's ops on `d` are
// recorded; nothing runs, so every value fn produces is a placeholder: reading one on the host
// inside fn throws (naming its op), and after record_ops they are unusable (reading one names
// "an op recording" as the reason). An op that cannot be captured (data-dependent shapes)
// throws naming it. Nests in nothing: the thread must not be capturing an HPU graph.
#pragma once
#include <functional>
#include <vector>

#include "engine/tensor.h"
#include "graphs/ir.h"

namespace hg::graphs {

struct RecordedOps {
  Graph graph;
  std::vector<Tensor> inputs;  // per Input node, by input_index
};

RecordedOps record_ops(Device d, const std::function<std::vector<Tensor>()>& fn);

}  // namespace hg::graphs
