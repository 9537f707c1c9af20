// Graph passes: small named rewrites run before compilation.
//
//   hg::graphs::PassOptions opt;               // opt.fusion = false to bisect a fusion bug
//   hg::graphs::run_passes(graph, opt);        // DCE, then linear+relu fusion
// Env HG_DISABLE_FUSION=1 turns every fusion off.
#pragma once
#include "graphs/ir.h"

namespace hg::graphs {

struct PassOptions {
  bool fusion = true;
};
PassOptions default_pass_options();  // honours HG_DISABLE_FUSION

// Removes op nodes that no output depends on (inputs stay: their numbering is the interface).
void eliminate_dead_code(Graph& g);
// linear -> relu with no other consumer becomes one linear with a fused ReLU post-op.
int fuse_linear_relu(Graph& g);
void run_passes(Graph& g, const PassOptions& opt);

}  // namespace hg::graphs
