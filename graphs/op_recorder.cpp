#include "graphs/op_recorder.h"

#include "engine/error.h"
#include "engine/lazy.h"
#include "graphs/lazy.h"
#include "graphs/trace.h"

namespace hg::graphs {

RecordedOps record_ops(Device d, const std::function<std::vector<Tensor>()>& fn) {
  if (!lazy_backend()) enable_lazy_mode(false);  // the tracer must be installed to record
  auto rec = begin_recording(d);
  const uint64_t generation = rec->trace.generation;
  std::vector<Tensor> outs;
  try {
    outs = fn();
  } catch (...) {
    abort_values(end_recording(*rec), "an op recording that threw");
    throw;
  }
  ClosedTrace c = end_recording(*rec);
  RecordedOps r;
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& o = outs[k];
    if (!o.defined()) throw InvalidArgument("record_ops: output " + std::to_string(k) + " is undefined");
    auto* tv = dynamic_cast<TracedValue*>(o.impl()->lazy.get());
    int node = -1;
    if (tv && tv->generation == generation) {
      node = tv->node;
    } else {  // returned unchanged from outside: an input of the graph
      for (const Node& n : c.graph.nodes)
        if (n.kind == Node::Kind::Input && c.inputs[n.input_index].impl() == o.impl()) node = static_cast<int>(&n - c.graph.nodes.data());
      if (node < 0) {
        node = c.graph.add_input(o.meta());
        c.inputs.push_back(o);
      }
    }
    r.graph.outputs.push_back(node);
  }
  abort_values(c, "an op recording (graphs::record_ops), which runs nothing");
  r.graph.nodes = std::move(c.graph.nodes);
  r.graph.num_inputs = c.graph.num_inputs;
  r.inputs = std::move(c.inputs);
  return r;
}

}  // namespace hg::graphs
