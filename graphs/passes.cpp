#include "graphs/passes.h"

#include <cstdlib>
#include <cstring>

namespace hg::graphs {

PassOptions default_pass_options() {
  PassOptions o;
  const char* v = std::getenv("HG_DISABLE_FUSION");
  if (v && std::strcmp(v, "1") == 0) o.fusion = false;
  return o;
}

void eliminate_dead_code(Graph& g) {
  std::vector<char> live(g.nodes.size(), 0);
  for (int o : g.outputs) live[o] = 1;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    if (g.nodes[i].kind == Node::Kind::Input) live[i] = 1;
    if (live[i])
      for (int in : g.nodes[i].inputs) live[in] = 1;
  }
  std::vector<int> remap(g.nodes.size(), -1);
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live[i]) continue;
    Node n = std::move(g.nodes[i]);
    for (int& in : n.inputs) in = remap[in];
    remap[i] = static_cast<int>(kept.size());
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  for (int& o : g.outputs) o = remap[o];
}

int fuse_linear_relu(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  int fused = 0;
  for (auto& n : g.nodes) {
    if (n.kind != Node::Kind::Op || n.op->name != "relu") continue;
    const int src = n.inputs[0];
    Node& lin = g.nodes[src];
    if (lin.kind != Node::Kind::Op || lin.op->name != "linear" || lin.attrs.i(0) != 0 || uses[src] != 1) continue;
    // The relu node takes over the linear: same inputs, ReLU fused; the linear becomes dead.
    n.op = lin.op;
    n.inputs = lin.inputs;
    n.attrs = Attrs{{1}, {}};
    ++fused;
  }
  if (fused) eliminate_dead_code(g);
  return fused;
}

void run_passes(Graph& g, const PassOptions& opt) {
  eliminate_dead_code(g);
  if (opt.fusion) fuse_linear_relu(g);
}

}  // namespace hg::graphs
