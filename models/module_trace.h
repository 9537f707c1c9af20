// Export of any module by tracing: runs its forward once on example inputs while recording the
// engine ops it calls (graphs/op_recorder.h), and turns them into the package's "ops" graph
// (models/op_graph.h: ONNX-semantics nodes) with the module's parameters and buffers as its
// constants. The result is what a model package or model.onnx holds (training/export.h writes
// both; models/onnx_export.h writes the ONNX file).
//
//   hg::models::TracedModel t = hg::models::trace_module(net, {x},   // x: a host tensor [4, 16]
//       {.input_names = {"tokens"}, .output_names = {"logits"},
//        .dynamic_axes = {{"tokens", {{0, "batch"}, {1, "seq"}}}}});
//   t.spec.inputs[0].shape;                       // {-1, -1}
//   hg::models::OpGraphModule g(hg::models::op_graph_from_json(t.spec.graph, "traced", names), t.constants);
//   g.forward_all({other_batch});                 // any batch size and sequence length
//
// Dynamic dimensions: forward runs (recorded, never computed) twice, at the example's sizes
// and with every dynamic axis resized; a shape an op reads that changes with them (a reshape
// target, an expand, a slice's end) is expressed in the graph: a dimension copied from its input
// (Reshape's 0, Expand's 1), the one inferred dimension (-1), or a value computed from the
// inputs' shapes (Shape -> Gather [-> Mul/Div] -> Concat), so other sizes run correctly. The
// module runs in eval mode while traced (its training flag is restored) and without autograd.
//
// Errors (hg::InvalidArgument) name what cannot be exported: an engine op with no ONNX form
// ("op 'argmax' (node 7)"), forward reading a value on the host, ops or attributes that change
// with the dynamic sizes in a way the graph cannot express, a tensor made inside forward whose
// shape or values depend on them, a dimension 0 that is not the batch when it was declared so.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "models/module.h"
#include "models/package.h"

namespace hg::models {

struct TraceOptions {
  // Default: "input" (one input) or "input_0", "input_1", ...; "output" / "output_0", ...
  std::vector<std::string> input_names = {};
  std::vector<std::string> output_names = {};
  // Per input name: axis -> its symbol. An input not listed has axis 0 "batch". Axes with the
  // same symbol are the same size. Dimension 0 of every input being "batch" makes the package
  // batched (PackageSpec::batched); every output's dimension 0 must then follow the batch.
  std::map<std::string, std::map<int64_t, std::string>> dynamic_axes = {};
  // Runs the traced graph and the module on the example inputs and on them repeated (or cut)
  // along the dynamic axes to other sizes, and throws naming the output and element where they
  // differ by more than 1e-4 relative (a tracing problem the exporter did not detect).
  bool check = true;
};

struct TracedModel {
  PackageSpec spec;     // inputs and outputs (-1 = dynamic), graph {"type": "ops", ...}, batched
  StateDict constants;  // the module's state_dict entries the graph reads, then constants made by the trace
  // Per input/output name: per axis its symbol ("batch", "seq", ...; "" = static).
  std::map<std::string, std::vector<std::string>> dim_names;
};

// example_inputs: host (or any device's) tensors, moved to the module's device for tracing.
TracedModel trace_module(Module& m, const std::vector<Tensor>& example_inputs, const TraceOptions& opt = {});

}  // namespace hg::models
