#include "graphs/passes.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>

#include "engine/error.h"
#include "engine/hash.h"

namespace hg::graphs {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Bf16: return "bf16";
    case Precision::Int8: return "int8";
    case Precision::Fp32: break;
  }
  return "fp32";
}

Precision parse_precision(const std::string& s) {
  for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::Int8})
    if (s == precision_name(p)) return p;
  throw InvalidArgument("precision must be \"fp32\", \"bf16\" or \"int8\", got \"" + s + "\"");
}

PassOptions default_pass_options() {
  PassOptions o;
  const char* v = std::getenv("HG_DISABLE_FUSION");
  if (v && std::strcmp(v, "1") == 0) o.fusion = false;
  return o;
}

int eliminate_dead_code(Graph& g) {
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
  const int removed = static_cast<int>(g.nodes.size() - kept.size());
  g.nodes = std::move(kept);
  for (int& o : g.outputs) o = remap[o];
  return removed;
}

const std::vector<Pass>& all_passes() {
  static const std::vector<Pass> passes = {
      {"dce", false, eliminate_dead_code},
      {"cse", false, eliminate_common_subexpressions},
      {"constant_fold", false, fold_constants},
      {"algebra", false, simplify_algebra},
      {"bn_fold", true, fold_batch_norm},
      {"flatten_matmul", true, flatten_matmul},
      {"fuse_silu", true, fuse_silu},
      {"fuse_post_ops", true, fuse_post_ops},
      {"merge_projections", true, merge_projections},
      {"fuse_attention", true, fuse_attention},
      {"attention_views", true, fuse_attention_views},
      {"fuse_residual_norm", true, fuse_residual_norm},
      {"squeeze_excite", true, fuse_squeeze_excite},
      {"fuse_elementwise", true, fuse_elementwise},
      {"layout", true, propagate_layouts},
  };
  return passes;
}

namespace {

// Runs passes[0, end) in rounds until none rewrites.
void run_to_fixed_point(Graph& g, const PassOptions& opt, size_t end, PassReport& r) {
  constexpr int kMaxRounds = 32;  // every pass shrinks or simplifies the graph; this is a guard
  const auto& passes = all_passes();
  bool changed = true;
  for (int rounds = 0; changed && rounds < kMaxRounds; ++rounds, ++r.rounds) {
    changed = false;
    for (size_t k = 0; k < end; ++k) {
      if (passes[k].fusion && !opt.fusion) continue;
      const int n = passes[k].run(g);
      r.applied[k].second += n;
      changed |= n > 0;
    }
  }
  if (changed)  // a pass that keeps rewriting is a bug; the graph is still valid, so go on
    spdlog::warn("graph passes: no fixed point after {} rounds ({} nodes); a pass keeps rewriting", kMaxRounds,
                 g.nodes.size());
}

}  // namespace

uint64_t Int8Ranges::digest() const {
  return hash64(std::span(reinterpret_cast<const uint8_t*>(ranges.data()), ranges.size() * sizeof(ranges[0])));
}

PassReport run_passes(Graph& g, const PassOptions& opt) {
  const auto& passes = all_passes();
  PassReport r;
  for (const Pass& p : passes) r.applied.emplace_back(p.name, 0);
  // The layout pass sees the graph once every fusion has run: a fusion that needs a later round
  // (an activation the post-op pass takes once DCE has dropped a dead reader) must not meet the
  // blocked twins of its nodes instead.
  size_t layout = 0;
  while (layout < passes.size() && std::strcmp(passes[layout].name, "layout") != 0) ++layout;
  run_to_fixed_point(g, opt, layout, r);
  if (opt.precision != Precision::Fp32)
    r.applied.emplace_back("precision", lower_precision(g, opt.precision, opt.int8_ranges.get(), opt.int8_calibration_tag));
  run_to_fixed_point(g, opt, passes.size(), r);
  return r;
}

}  // namespace hg::graphs
