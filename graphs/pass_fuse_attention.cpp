// fuse_attention: the chain ops::scaled_dot_product_attention, models/attention.cpp and ONNX
// imports leave in a graph,
//   bmm([scale](q), [scale](k), 0, 1 | 0) -> [scale] -> [causal_fill] -> [where(mask, ., fill) |
//   masked_fill | add mask] -> [causal_fill] -> softmax(last dim) -> bmm(., v, 0, 0),
// becomes one sdpa node (engine/fused_ops.h) when every value inside the chain has no other
// reader and is not a graph output. bmm(q, k, 0, 0) is k given transposed (ONNX: MatMul after
// a Transpose).
#include "engine/fused_ops.h"
#include "engine/op_attrs.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

struct Match {
  int q = -1, k = -1, v = -1, mask = -1, fill = -1;
  bool k_transposed = false;
  int64_t kind = sdpa::kNoMask, causal = sdpa::kNotCausal;
  double scale = 1.0, causal_value = 0.0, fill_value = 0.0;
  std::vector<std::string> fused;  // op names, first to last
};

// Walks back from the final bmm at `out`; every intermediate must have exactly one reader.
bool match(const Graph& g, const std::vector<int>& uses, int out, Match& m) {
  const KnownOps& op = known_ops();
  auto op_is = [&](int id, const OpSchema* o) { return is_op(g.nodes[id], o); };
  const Node& pv = g.nodes[out];
  if (!op_is(out, op.bmm) || pv.meta.dtype != DType::F32) return false;
  if (const auto t = attrs::Bmm::of(pv.attrs); t.trans_a || t.trans_b) return false;
  int cur = pv.inputs[0];
  auto single = [&](int id) { return g.nodes[id].kind == Node::Kind::Op && uses[id] == 1; };
  std::vector<std::string> chain = {"bmm"};
  if (!op_is(cur, op.softmax) || !single(cur)) return false;
  const Node& sm = g.nodes[cur];
  const auto softmax = attrs::Softmax::of(sm.attrs);
  if (softmax.dim != static_cast<int64_t>(sm.meta.shape.size()) - 1 || softmax.log) return false;
  const Shape scores = sm.meta.shape;
  chain.push_back("softmax");
  cur = sm.inputs[0];
  auto take_causal = [&](int64_t mode) {
    if (m.causal != sdpa::kNotCausal || !op_is(cur, op.causal_fill) || !single(cur)) return;
    m.causal = mode;
    m.causal_value = attrs::CausalFill::of(g.nodes[cur].attrs).value;
    chain.push_back("causal_fill");
    cur = g.nodes[cur].inputs[0];
  };
  take_causal(sdpa::kCausalAfterMask);
  if (single(cur)) {
    const Node& n = g.nodes[cur];
    if (n.op == op.where && g.nodes[n.inputs[0]].meta.dtype == DType::BOOL && n.meta.shape == scores &&
        g.nodes[n.inputs[2]].meta.numel() == 1 && g.nodes[n.inputs[2]].meta.dtype == DType::F32) {
      m.kind = sdpa::kWhere, m.mask = n.inputs[0], m.fill = n.inputs[2];
      chain.push_back("where");
      cur = n.inputs[1];
    } else if (n.op == op.masked_fill && g.nodes[n.inputs[1]].meta.dtype == DType::BOOL && n.meta.shape == scores) {
      m.kind = sdpa::kMaskedFill, m.mask = n.inputs[1], m.fill_value = attrs::MaskedFill::of(n.attrs).value;
      chain.push_back("masked_fill");
      cur = n.inputs[0];
    } else if (n.op == op.binary && attrs::Binary::of(n.attrs).op == kernels::BinaryOp::Add &&
               n.meta.shape == scores) {
      // Either operand may be the scores: the one whose producer chain goes on to a bmm.
      const int a = n.inputs[0], b = n.inputs[1];
      const bool a_scores = g.nodes[a].meta.shape == scores && g.nodes[a].kind == Node::Kind::Op &&
                            (op_is(a, op.scale) || op_is(a, op.bmm) || op_is(a, op.causal_fill));
      m.kind = sdpa::kAdd, m.mask = a_scores ? b : a;
      if (g.nodes[m.mask].meta.dtype != DType::F32) return false;
      chain.push_back("add");
      cur = a_scores ? a : b;
    }
  }
  if (m.causal == sdpa::kNotCausal && m.kind != sdpa::kNoMask) take_causal(sdpa::kCausalBeforeMask);
  if (op_is(cur, op.scale) && single(cur)) {
    m.scale = attrs::Scale::of(g.nodes[cur].attrs).factor;
    chain.push_back("scale");
    cur = g.nodes[cur].inputs[0];
  }
  if (!op_is(cur, op.bmm) || !single(cur) || attrs::Bmm::of(g.nodes[cur].attrs).trans_a) return false;
  const Node& qk = g.nodes[cur];
  if (qk.meta.shape != scores) return false;
  chain.push_back("bmm");
  m.q = qk.inputs[0], m.k = qk.inputs[1], m.v = pv.inputs[1];
  for (int* side : {&m.q, &m.k})  // q / sqrt(d) before the product (PyTorch's exports): the same scale
    if (op_is(*side, op.scale) && single(*side)) {
      m.scale *= attrs::Scale::of(g.nodes[*side].attrs).factor;
      chain.push_back("scale");
      *side = g.nodes[*side].inputs[0];
    }
  m.k_transposed = !attrs::Bmm::of(qk.attrs).trans_b;
  // The kernel takes q, k and v with equal batch dims (no broadcasting), all F32.
  const Shape &sq = g.nodes[m.q].meta.shape, &sk = g.nodes[m.k].meta.shape, &sv = g.nodes[m.v].meta.shape;
  if (sq.size() < 3 || sk.size() != sq.size() || sv.size() != sq.size()) return false;
  for (size_t d = 0; d + 2 < sq.size(); ++d)
    if (sk[d] != sq[d] || sv[d] != sq[d]) return false;
  for (int id : {m.q, m.k, m.v})
    if (g.nodes[id].meta.dtype != DType::F32) return false;
  m.fused.assign(chain.rbegin(), chain.rend());
  return true;
}

}  // namespace

int fuse_attention(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  const OpSchema* sdpa_op = known_ops().sdpa;
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Match m;
    if (!match(g, uses, static_cast<int>(i), m)) continue;
    Node& n = g.nodes[i];
    std::vector<int> inputs = {m.q, m.k, m.v};
    if (m.kind != sdpa::kNoMask) inputs.push_back(m.mask);
    if (m.kind == sdpa::kWhere) inputs.push_back(m.fill);
    n.op = sdpa_op;
    n.inputs = std::move(inputs);
    n.attrs = attrs::Sdpa{m.kind, m.causal, m.k_transposed, m.scale, m.causal_value, m.fill_value}.pack();
    n.fused = std::move(m.fused);
    ++fused;
  }
  if (fused) eliminate_dead_code(g);
  return fused;
}

}  // namespace hg::graphs
