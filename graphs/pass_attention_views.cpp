// Attention in place: the slices, reshapes and permutes that cut q, k and v out of a QKV
// projection and split the heads (PyTorch's MultiheadAttention export: [S, B, 3E] -> slice ->
// [S, B*H, D] -> [B*H, S, D]), and those that put the heads back together after it, are copies in
// a compiled graph: seven per layer of a BERT encoder. The sdpa node reads q, k and v in place
// from the buffers those chains start from, and writes its output in the layout of the chain's
// end, when the chains are views (graphs/strided_view.h) with a contiguous last dimension and a
// batch of at most two strides (b, h). The chain nodes then have no reader and go away.
#include <algorithm>

#include "engine/error.h"
#include "engine/fused_ops.h"
#include "engine/op_attrs.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"
#include "graphs/strided_view.h"

namespace hg::graphs {

namespace {

using Factor = StridedView::Factor;

bool is_view_op(const Node& n) {
  const KnownOps& k = known_ops();
  return n.kind == Node::Kind::Op && !n.constant && (n.op == k.reshape || n.op == k.permute || n.op == k.slice || n.op == k.contiguous);
}

int64_t norm(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

// Applies view op `n` (whose input has view `v`) to v.
bool apply(const Node& n, const Graph& g, StridedView& v) {
  const KnownOps& k = known_ops();
  const size_t rank = g.nodes[n.inputs[0]].meta.shape.size();
  if (n.op == k.contiguous) return true;
  if (n.op == k.reshape) return v.reshape(n.meta.shape);
  if (n.op == k.permute) {
    std::vector<int64_t> perm;
    for (int64_t p : n.attrs.ints) perm.push_back(norm(p, rank));
    return v.permute(perm);
  }
  return v.slice(norm(n.attrs.i(0), rank), n.attrs.i(1), n.attrs.i(2), n.attrs.i(3));
}

// The view of value `id` over the buffer its chain of view ops starts from (`base`): the
// longest part of the chain that composes into a view (none of it: `id` itself, contiguous).
StridedView input_view(const Graph& g, int id, int& base) {
  std::vector<int> chain{id};  // chain[i + 1] is the input of chain[i]
  while (is_view_op(g.nodes[chain.back()])) chain.push_back(g.nodes[chain.back()].inputs[0]);
  for (size_t start = chain.size() - 1; start > 0; --start) {
    StridedView v = StridedView::contiguous(g.nodes[chain[start]].meta.shape);
    bool ok = true;
    for (size_t c = start; ok && c-- > 0;) ok = apply(g.nodes[chain[c]], g, v);
    if (ok) {
      base = chain[start];
      return v;
    }
  }
  base = id;
  return StridedView::contiguous(g.nodes[id].meta.shape);
}

// sdpa's output read by a chain of view ops, each with one reader: the view of the output inside
// the chain's last value (`end`), built by undoing the chain from that value's contiguous layout.
StridedView output_view(const Graph& g, const std::vector<std::vector<int>>& users, int sdpa, int& end) {
  const KnownOps& k = known_ops();
  std::vector<int> chain;
  int cur = sdpa;
  while (users[cur].size() == 1 && !is_graph_output(g, cur)) {
    const Node& n = g.nodes[users[cur][0]];
    if (!(n.op == k.reshape || n.op == k.permute || n.op == k.contiguous) || n.constant) break;
    cur = users[cur][0];
    chain.push_back(cur);
  }
  end = sdpa;
  for (size_t keep = chain.size(); keep > 0; --keep) {
    StridedView w = StridedView::contiguous(g.nodes[chain[keep - 1]].meta.shape);
    bool ok = true;
    for (size_t c = keep; ok && c-- > 0;) {
      const Node& n = g.nodes[chain[c]];
      const Shape& before = g.nodes[n.inputs[0]].meta.shape;
      if (n.op == k.permute) {
        std::vector<int64_t> inv(before.size());
        for (size_t i = 0; i < n.attrs.ints.size(); ++i) inv[norm(n.attrs.ints[i], before.size())] = static_cast<int64_t>(i);
        ok = w.permute(inv);
      } else if (n.op == k.reshape) {
        ok = w.reshape(before);
      }
    }
    if (ok) {
      end = chain[keep - 1];
      return w;
    }
  }
  return StridedView::contiguous(g.nodes[sdpa].meta.shape);
}

// A view of [batch..., rows, cols] as (b, h) batch factors, one row stride, contiguous cols.
struct Split {
  std::vector<Factor> batch;  // outer first, 1 or 2 factors (or none: a batch of 1)
  int64_t rows = 0, srow = 0, cols = 0, offset = 0;
};

bool split(const StridedView& v, bool transposed, Split& s) {
  const size_t r = v.dims.size();
  if (r < 2) return false;
  auto last = StridedView::merged(v.dims[r - 1]), prev = StridedView::merged(v.dims[r - 2]);
  if (transposed) std::swap(last, prev);  // k given as [.., D, S]
  const Shape shape = v.shape();
  s.cols = shape[transposed ? r - 2 : r - 1];
  s.rows = shape[transposed ? r - 1 : r - 2];
  if (s.cols > 1 && (last.size() != 1 || last[0].stride != 1)) return false;
  if (s.rows > 1 && prev.size() != 1) return false;
  s.srow = s.rows > 1 ? prev[0].stride : 0;
  std::vector<Factor> batch;
  for (size_t d = 0; d + 2 < r; ++d)
    for (const Factor& f : v.dims[d]) batch.push_back(f);
  s.batch = StridedView::merged(batch);
  s.offset = v.offset;
  return s.batch.size() <= 2;
}

// The (B, H) strides of `s` for a batch split as b x h (h = the inner size).
bool strides_for(const Split& s, int64_t b, int64_t h, int64_t& sb, int64_t& sh) {
  if (s.batch.empty()) return b * h == 1 ? (sb = sh = 0, true) : false;
  if (s.batch.size() == 2) {
    if (s.batch[0].size != b || s.batch[1].size != h) return false;
    sb = s.batch[0].stride, sh = s.batch[1].stride;
    return true;
  }
  const Factor f = s.batch[0];
  if (f.size != b * h) return false;
  sh = f.stride, sb = f.stride * h;
  return true;
}

}  // namespace

int fuse_attention_views(Graph& g) {
  const KnownOps& k = known_ops();
  int rewrites = 0;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    Node& n = g.nodes[id];
    if (!is_op(n, k.sdpa) || (n.attrs.ints.size() > 3 && n.attrs.i(3) == 1)) continue;
    const attrs::Sdpa a = attrs::Sdpa::of(n.attrs);
    bool batched_mask = false;
    for (size_t i = 3; i < n.inputs.size(); ++i) {
      const Shape& m = g.nodes[n.inputs[i]].meta.shape;
      batched_mask |= m.size() > 2 && numel(Shape(m.begin(), m.end() - 2)) != 1;
    }
    if (batched_mask) continue;
    const auto users = consumers(g);
    int base[3], end = 0;
    Split sp[4];
    bool ok = true;
    for (int t = 0; t < 3 && ok; ++t)
      ok = split(input_view(g, n.inputs[t], base[t]), t == 1 && a.k_transposed, sp[t]);
    ok = ok && split(output_view(g, users, static_cast<int>(id), end), false, sp[3]);
    if (!ok) continue;
    bool changed = end != static_cast<int>(id);
    for (int t = 0; t < 3; ++t) changed |= base[t] != n.inputs[t];
    if (!changed) continue;
    // The (B, H) split: the two-factor batch any of them has, else all of the batch as H.
    int64_t bsz = 1, hsz = 1;
    for (const Split& s : sp)
      if (s.batch.size() == 2) bsz = s.batch[0].size, hsz = s.batch[1].size;
    if (bsz * hsz == 1 && !sp[0].batch.empty()) hsz = sp[0].batch[0].size;
    std::vector<int64_t> ints{a.mask, a.causal, 0, 1, bsz, hsz, sp[0].rows, sp[1].rows, sp[0].cols, sp[2].cols};
    for (const Split& s : sp) {
      int64_t sb = 0, sh = 0;
      ok = ok && strides_for(s, bsz, hsz, sb, sh);
      ints.insert(ints.end(), {s.offset, sb, sh, s.srow});
    }
    if (!ok || sp[0].rows != sp[3].rows || sp[1].rows != sp[2].rows || sp[0].cols != sp[1].cols || sp[2].cols != sp[3].cols)
      continue;
    const Shape& out_shape = g.nodes[end].meta.shape;
    ints.push_back(static_cast<int64_t>(out_shape.size()));
    ints.insert(ints.end(), out_shape.begin(), out_shape.end());
    std::vector<int> inputs{base[0], base[1], base[2]};
    inputs.insert(inputs.end(), n.inputs.begin() + 3, n.inputs.end());
    std::vector<TensorMeta> metas;
    for (int in : inputs) metas.push_back(g.nodes[in].meta);
    const Attrs attrs{ints, n.attrs.floats};
    TensorMeta meta;
    try {
      meta = n.op->infer(*n.op, metas, attrs);
    } catch (const Error&) {
      continue;
    }
    if (meta != g.nodes[end].meta) continue;
    n.inputs = std::move(inputs);
    n.attrs = attrs;
    n.meta = meta;
    if (end != static_cast<int>(id)) replace_uses(g, end, static_cast<int>(id));
    ++rewrites;
  }
  if (rewrites) eliminate_dead_code(g);
  return rewrites;
}

}  // namespace hg::graphs
