// Layout propagation (ONNX Runtime's NCHWc transformer, done on our graph): convolutions with
// constant weights whose oneDNN kernel prefers a channel-blocked output (engine/ops_layout.h,
// kernels::nn::conv_layout) produce it, and the ops after them keep it while they can:
//   - element-wise ops (relu, silu, sigmoid, tanh, gelu, clamp, scale, binary, fused_elementwise) whose
//     other operands are scalars or per-channel values [1|N, C, 1|H, 1|W] (reordered once, e.g.
//     squeeze-and-excitation's channel weights);
//   - residual inputs of later blocked convolutions; slices along N, H or W;
//   - pools: max_pool2d and avg_pool2d in the layout, a global average pool (adaptive_avg_pool2d
//     to 1x1) as a mean over H and W; squeeze_excite blocks (their x).
// Each plain value becomes a blocked twin; a reader that needs NCHW (a reshape, a concat, a conv
// that prefers NCHW, a graph output) reads one from_blocked of it, and a blocked conv whose input
// has no twin reads one to_blocked of it. The replaced nodes die (DCE). A graph where no blocked
// value reaches another blocked op (a lone convolution) is left as it was. Padding channels
// (C not a multiple of the block) stay finite: ops that could make them Inf or NaN (a division,
// sqrt, exp, pow, erf) keep NCHW there.
#include <map>
#include <utility>

#include "engine/fused_ops.h"
#include "engine/kernels_nn.h"
#include "engine/kernels_shape.h"
#include "engine/op_attrs.h"
#include "engine/ops_layout.h"
#include "graphs/passes.h"
#include "graphs/rewrite.h"

namespace hg::graphs {

namespace {

bool is_conv(const Node& n) {
  const KnownOps& k = known_ops();
  return is_op(n, k.conv2d) || is_op(n, k.conv2d_nobias);
}

bool is_image(const TensorMeta& m) {
  return m.shape.size() == 4 && (m.dtype == DType::F32 || m.dtype == DType::BF16);
}

// Finite for finite inputs: padding channels holding garbage stay harmless (weights are zero there).
bool finite_program(const Attrs& a) {
  for (size_t i = 0; i + 3 < a.ints.size(); i += 4) {
    switch (a.ints[i]) {
      case ew::Add:
      case ew::Sub:
      case ew::Mul:
      case ew::Scale:
      case ew::Relu:
      case ew::GeluErf:
      case ew::GeluTanh:
      case ew::Silu:
      case ew::Sigmoid:
      case ew::Tanh: continue;
      default: return false;
    }
  }
  return true;
}

class Propagation {
 public:
  explicit Propagation(Graph& g) : g_(g), n0_(g.nodes.size()), twin_(n0_, -1), block_(n0_, 0) {}

  int run() {
    int convs = 0;
    for (size_t i = 0; i < n0_; ++i) {
      if (g_.nodes[i].kind != Node::Kind::Op) continue;
      if (is_conv(g_.nodes[i])) convs += conv(static_cast<int>(i));
      else if (!any_twin_input(static_cast<int>(i))) continue;
      else if (is_op(g_.nodes[i], known_ops().adaptive_avg_pool2d)) global_pool(static_cast<int>(i));
      else if (is_op(g_.nodes[i], known_ops().max_pool2d) || is_op(g_.nodes[i], known_ops().avg_pool2d))
        window_pool(static_cast<int>(i));
      else if (is_op(g_.nodes[i], known_ops().slice)) spatial_slice(static_cast<int>(i));
      else if (is_op(g_.nodes[i], known_ops().squeeze_excite)) squeeze_excite(static_cast<int>(i));
      else elementwise(static_cast<int>(i));
    }
    if (convs == 0 || !chained()) {  // nothing gained: drop what was appended, as it was
      g_.nodes.resize(n0_);
      return 0;
    }
    rewire();
    topo_sort(g_);
    eliminate_dead_code(g_);
    return convs;
  }

 private:
  Graph& g_;
  size_t n0_;
  std::vector<int> twin_;         // twin_[i]: the blocked node computing plain node i's value
  std::vector<int64_t> block_;    // its channel block
  std::map<std::pair<int, int64_t>, int> to_blocked_;  // (plain node, block) -> its reorder

  // Some blocked value flows into another blocked op: without that, each conv would only trade
  // its own reorders for graph nodes doing the same.
  bool chained() const {
    for (size_t i = 0; i < n0_; ++i)
      if (twin_[i] >= 0 && any_twin_input(static_cast<int>(i))) return true;
    return false;
  }

  bool any_twin_input(int i) const {
    for (int in : g_.nodes[i].inputs)
      if (in < static_cast<int>(n0_) && twin_[in] >= 0) return true;
    return false;
  }

  int blocked(int plain, int64_t b) {
    if (plain < static_cast<int>(n0_) && twin_[plain] >= 0 && block_[plain] == b) return twin_[plain];
    auto [it, fresh] = to_blocked_.try_emplace({plain, b}, -1);
    if (fresh) {
      it->second = g_.add_op(*known_ops().to_blocked, {plain}, Attrs{{b}, {}});
      g_.nodes[it->second].block = b;
    }
    return it->second;
  }

  void set_twin(int i, int t, int64_t b) {
    g_.nodes[t].fused = g_.nodes[i].fused;
    g_.nodes[t].block = b;
    twin_[i] = t;
    block_[i] = b;
  }

  int conv(int i) {
    const Node n = g_.nodes[i];
    if (!is_image(n.meta) || !is_image(g_.nodes[n.inputs[0]].meta) || !is_constant_value(g_, n.inputs[1])) return 0;
    attrs::Conv c = attrs::Conv::of(n.attrs);
    if (c.src_block || c.dst_block) return 0;
    std::vector<TensorMeta> in;
    for (int x : n.inputs) in.push_back(g_.nodes[x].meta);
    const kernels::nn::ConvLayout l = kernels::nn::conv_layout(in, n.meta, n.attrs);
    if (!l.dst_block) return 0;
    const size_t plain_inputs = is_op(n, known_ops().conv2d) ? 3 : 2;
    std::vector<int> inputs = n.inputs;
    if (l.src_block) inputs[0] = blocked(inputs[0], l.src_block);
    if (inputs.size() > plain_inputs) inputs.back() = blocked(inputs.back(), l.dst_block);  // the residual
    c.src_block = l.src_block;
    c.dst_block = l.dst_block;
    set_twin(i, g_.add_op(*n.op, inputs, c.pack()), l.dst_block);
    return 1;
  }

  // mean over H and W of the blocked input: [N, C/b, 1, 1, b].
  void global_pool(int i) {
    const Node n = g_.nodes[i];
    const int x = n.inputs[0];
    if (twin_[x] < 0 || n.meta.shape.size() != 4 || n.meta.shape[2] != 1 || n.meta.shape[3] != 1) return;
    const Attrs mean{{static_cast<int64_t>(kernels::ReduceKind::Mean), 1, 2, 3}, {}};
    set_twin(i, g_.add_op(*known_ops().reduce, {twin_[x]}, mean), block_[x]);
  }

  // max_pool2d / avg_pool2d on the blocked input (oneDNN pools any layout), when no block is
  // padded (the pool would need the true channel count).
  void window_pool(int i) {
    const Node n = g_.nodes[i];
    const int x = n.inputs[0];
    if (twin_[x] < 0 || n.meta.shape.size() != 4 || n.meta.shape[1] % block_[x]) return;
    Attrs a = n.attrs;
    const int64_t count_include_pad = a.i(6, 1);  // absent: avg_pool2d's default
    a.ints.resize(8, 0);
    a.ints[6] = count_include_pad;
    a.ints[7] = block_[x];
    set_twin(i, g_.add_op(*n.op, {twin_[x]}, a), block_[x]);
  }

  // A slice along N, H or W (dims 0, 2, 3 in both layouts) keeps the layout: a crop, or the
  // importer's one-element constants (sliced down to [N, C, 1, 1] before the channels).
  void spatial_slice(int i) {
    const Node n = g_.nodes[i];
    const int x = n.inputs[0];
    if (twin_[x] < 0 || n.meta.shape.size() != 4) return;
    const int64_t d = n.attrs.i(0) < 0 ? n.attrs.i(0) + 4 : n.attrs.i(0);
    if (d != 0 && d != 2 && d != 3) return;
    Attrs a = n.attrs;
    a.ints[0] = d;
    set_twin(i, g_.add_op(*n.op, {twin_[x]}, a), block_[x]);
  }

  // squeeze_excite scales x per channel: it runs on x's blocked twin (its layers stay as they are).
  void squeeze_excite(int i) {
    const Node n = g_.nodes[i];
    const int x = n.inputs[0];
    if (twin_[x] < 0 || n.meta.shape.size() != 4) return;
    std::vector<int> inputs = n.inputs;
    inputs[0] = twin_[x];
    Attrs a = n.attrs;
    a.ints[2] = block_[x];
    set_twin(i, g_.add_op(*n.op, inputs, a), block_[x]);
  }

  void elementwise(int i) {
    const Node n = g_.nodes[i];
    const KnownOps& k = known_ops();
    const bool unary = is_op(n, k.relu) || is_op(n, k.silu) || is_op(n, k.sigmoid) || is_op(n, k.tanh) ||
                       is_op(n, k.gelu) || is_op(n, k.scale) || is_op(n, k.clamp);
    const bool binary = is_op(n, k.binary) && attrs::Binary::of(n.attrs).op != kernels::BinaryOp::Div;
    const bool program = is_op(n, k.fused_elementwise);
    if (!(unary || binary || program) || !is_image(n.meta)) return;
    const Shape& out = n.meta.shape;
    int64_t b = 0;
    for (int x : n.inputs)
      if (x < static_cast<int>(n0_) && twin_[x] >= 0) b = block_[x];
    if (out[1] % b && program && !finite_program(n.attrs)) return;
    std::vector<int> inputs;
    for (int x : n.inputs) {
      const TensorMeta& m = g_.nodes[x].meta;
      if (x < static_cast<int>(n0_) && twin_[x] >= 0 && block_[x] == b && m.shape[1] == out[1]) {
        inputs.push_back(twin_[x]);
      } else if (m.numel() == 1 && m.shape.size() <= 4) {
        inputs.push_back(x);  // a scalar broadcasts over any layout
      } else if (is_image(m) && m.shape[1] == out[1]) {
        inputs.push_back(blocked(x, b));  // per-channel values, or a full plain operand
      } else {
        return;  // a broadcast along the channels: stays NCHW
      }
    }
    const int t = g_.add_op(*n.op, inputs, n.attrs);
    if (g_.nodes[t].meta.shape == blocked_shape(out, b)) set_twin(i, t, b);
  }

  // Readers that need NCHW (every reader that is not itself replaced by a twin, graph outputs)
  // read one from_blocked of the twin.
  void rewire() {
    const auto users = consumers(g_);
    for (size_t i = 0; i < n0_; ++i) {
      if (twin_[i] < 0) continue;
      int plain = -1;
      auto plain_of = [&] {
        if (plain < 0)
          plain = g_.add_op(*known_ops().from_blocked, {twin_[i]}, Attrs{{g_.nodes[i].meta.shape[1]}, {}});
        return plain;
      };
      for (int u : users[i]) {
        if (u < static_cast<int>(n0_) && twin_[u] >= 0) continue;  // replaced: dies
        if (is_op(g_.nodes[u], known_ops().to_blocked)) continue;  // never made for a twinned value
        const int p = plain_of();  // before taking a reference into g_.nodes: it may grow
        for (int& in : g_.nodes[u].inputs)
          if (in == static_cast<int>(i)) in = p;
      }
      for (size_t o = 0; o < g_.outputs.size(); ++o)
        if (g_.outputs[o] == static_cast<int>(i)) g_.outputs[o] = plain_of();
    }
  }
};

}  // namespace

int propagate_layouts(Graph& g) { return Propagation(g).run(); }

}  // namespace hg::graphs
