// Algebraic simplification, exact rewrites only (the result is bit-identical):
//   scale(x, 1.0) -> x                   unary_math pow(x, 1.0) -> x
//   cast(x) to x's dtype -> x            contiguous(x) -> x   (every graph value is contiguous)
//   cast(cast(x, wider), x's dtype) -> x when the wider type holds every value (F32 via F64,
//   BF16/F16 via F32 or F64, I32 via I64 or F64, U8 and BOOL via any wider type)
//   reshape / expand / sum_to / slice / one-input concat whose output meta is x's -> x
//   reshape(reshape(x)) -> reshape(x)    permute(permute(x)) -> permute(x) with the composed dims
//   permute(x) with dims 0, 1, ..., n-1 -> x
// Not handled: x*1, x+0, x-0, x/1 through `binary` with a tensor operand: a pass sees shapes,
// not data, so it cannot know that a frozen tensor holds 1 or 0. Chains of scales are not
// merged either (x*a*b and x*(a*b) round differently).
#include <optional>

#include "engine/op_attrs.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

Shape normalized_dims(const Shape& dims) {
  const int64_t n = static_cast<int64_t>(dims.size());
  Shape out(dims);
  for (auto& d : out)
    if (d < 0) d += n;
  return out;
}

// Every value of `from` survives a cast to `via` and back unchanged.
bool round_trips(DType from, DType via) {
  switch (from) {
    case DType::BOOL: return true;
    case DType::U8: return via != DType::BOOL;  // 0..255: exact in every wider type, BF16 included
    case DType::I32: return via == DType::I64 || via == DType::F64;
    case DType::F16:
    case DType::BF16: return via == DType::F32 || via == DType::F64;
    case DType::F32: return via == DType::F64;
    default: return false;
  }
}

bool is_identity_permutation(const Shape& dims) {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// The node this op node always equals, if any.
std::optional<int> identity_source(const Graph& g, const Node& n) {
  const int x = n.inputs[0];
  const bool same_meta = g.nodes[x].meta.shape == n.meta.shape && g.nodes[x].meta.dtype == n.meta.dtype;
  const KnownOps& k = known_ops();
  const OpSchema* op = n.op;
  if (op == k.contiguous) return x;
  if (op == k.scale && attrs::Scale::of(n.attrs).factor == 1.0) return x;
  if (op == k.unary_math) {
    const auto m = attrs::UnaryMath::of(n.attrs);
    if (m.fn == attrs::MathFn::Pow && m.exponent == 1.0) return x;
  }
  if (op == k.permute && is_identity_permutation(normalized_dims(n.attrs.ints))) return x;
  if (op == k.cast && is_op(g.nodes[x], k.cast)) {  // cast(cast(y, via), y's dtype) with nothing lost
    const int y = g.nodes[x].inputs[0];
    if (g.nodes[y].meta.dtype == n.meta.dtype && round_trips(n.meta.dtype, g.nodes[x].meta.dtype)) return y;
  }
  if (same_meta && (op == k.cast || op == k.reshape || op == k.expand || op == k.sum_to || op == k.slice ||
                    (op == k.concat && n.inputs.size() == 1)))
    return x;
  return std::nullopt;
}

// Folds op(op(x)) into op(x) for reshape and permute; true if `n` changed.
bool merge_with_producer(const Graph& g, Node& n) {
  const Node& p = g.nodes[n.inputs[0]];
  if (p.kind != Node::Kind::Op || p.op != n.op) return false;
  if (n.op == known_ops().reshape) {
    n.inputs = {p.inputs[0]};
    return true;
  }
  if (n.op == known_ops().permute) {
    const Shape outer = normalized_dims(n.attrs.ints), inner = normalized_dims(p.attrs.ints);
    Shape dims(outer.size());
    for (size_t i = 0; i < outer.size(); ++i) dims[i] = inner[outer[i]];  // out[i] = x[inner[outer[i]]]
    n.attrs.ints = dims;
    n.inputs = {p.inputs[0]};
    return true;
  }
  return false;
}

}  // namespace

int simplify_algebra(Graph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.kind != Node::Kind::Op || n.inputs.empty()) continue;
    if (merge_with_producer(g, n)) ++rewrites;
    if (const auto src = identity_source(g, n)) {
      replace_uses(g, static_cast<int>(i), *src);
      ++rewrites;
    }
  }
  if (rewrites) eliminate_dead_code(g);
  return rewrites;
}

}  // namespace hg::graphs
