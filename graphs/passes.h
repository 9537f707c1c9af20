// Graph passes: small named rewrites, run in order and repeated until none applies (a fixed
// point). Each pass returns how many rewrites it made.
//
//   hg::graphs::PassOptions opt;               // opt.fusion = false to bisect a fusion bug
//   hg::graphs::PassReport r = hg::graphs::run_passes(graph, opt);
//   for (auto& [name, n] : r.applied) printf("%s: %d\n", name.c_str(), n);
// Env HG_DISABLE_FUSION=1 turns every fusion pass off (bn_fold and the fuse_* passes); dce, cse,
// constant_fold and algebra are exact and always run. Passes share the rewrite utilities of
// graphs/rewrite.h (replace_uses, insert_op_before, topo_sort, consumers, random_ops).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graphs/ir.h"

namespace hg::graphs {

// The arithmetic a compiled graph runs its matmuls and convolutions in (config.json "precision").
enum class Precision : uint8_t { Fp32, Bf16, Int8 };
const char* precision_name(Precision p);  // "fp32", "bf16", "int8"
// "fp32", "bf16" or "int8"; throws InvalidArgument naming the accepted spellings.
Precision parse_precision(const std::string& s);

// Static INT8: the activation range (min, max) of each INT8 convolution's input, by its number
// among the convolutions lower_precision lowers (node order), as a calibration run measured them
// (engine/int8_quant.h Int8Calibration).
struct Int8Ranges {
  std::vector<std::pair<float, float>> ranges;
  uint64_t digest() const;  // hash64 of the values: part of the compile cache keys
};

struct PassOptions {
  bool fusion = true;
  // Bf16, Int8: once the FP32 passes reach their fixed point, lower_precision lowers the graph's
  // matmuls and convolutions, then the passes run again.
  Precision precision = Precision::Fp32;
  // Int8: convolutions with a range here run with it (static quantization); the others, and all
  // of them without ranges, measure their input with every call (dynamic).
  std::shared_ptr<const Int8Ranges> int8_ranges = nullptr;
  // Int8, > 0: the dynamic INT8 convolutions get calibration ids (this tag << 20 | their number)
  // so that a running Int8Calibration session of the tag records their input ranges.
  int64_t int8_calibration_tag = 0;
};
PassOptions default_pass_options();  // honours HG_DISABLE_FUSION

struct Pass {
  const char* name;
  bool fusion;            // skipped when PassOptions::fusion is false
  int (*run)(Graph& g);   // number of rewrites made
};
// Every pass in the order run_passes applies them. The passes before "layout" first run to their
// fixed point (in FP32), then, with PassOptions::precision set, "precision" lowers the graph, then
// every pass runs again to its fixed point, "layout" included.
const std::vector<Pass>& all_passes();

struct PassReport {
  std::vector<std::pair<std::string, int>> applied;  // total rewrites per pass, in pass order
  int rounds = 0;
};
PassReport run_passes(Graph& g, const PassOptions& opt);

// Removes op nodes that no output depends on (inputs stay: their numbering is the interface).
int eliminate_dead_code(Graph& g);
// Merges op nodes with the same op, inputs and attributes (never random ops; graphs/pass_cse.cpp).
int eliminate_common_subexpressions(Graph& g);
// Marks op nodes whose inputs are all frozen or constant as `constant` (graphs/pass_fold.cpp).
int fold_constants(Graph& g);
// Exact identities: scale by 1, same-shape reshape, reshape and permute chains, contiguous,
// same-dtype cast (graphs/pass_algebra.cpp).
int simplify_algebra(Graph& g);
// conv2d (or linear) -> batch_norm_eval with constant parameters becomes one conv2d (linear)
// with constant folded weight and bias (graphs/pass_bn_fold.cpp).
int fold_batch_norm(Graph& g);
// bmm of [.., M, K] activations by one shared [K, N] matrix (+ a bias add) becomes one 2-D
// matmul between reshapes (graphs/pass_flatten_matmul.cpp).
int flatten_matmul(Graph& g);
// mul(x, sigmoid(x)) becomes silu(x) (graphs/pass_fuse_silu.cpp).
int fuse_silu(Graph& g);
// linear / matmul / conv2d followed by a bias add, a residual add (conv) or an activation
// become one node with oneDNN post-ops (graphs/pass_fuse_postops.cpp).
int fuse_post_ops(Graph& g);
// Linears / 2-D matmuls reading the same activations with constant weights (separate q, k and v
// projections) become one with the weights concatenated, the old nodes slices of its output
// (graphs/pass_merge_projections.cpp).
int merge_projections(Graph& g);
// bmm -> scale -> mask -> softmax -> bmm becomes one sdpa node (graphs/pass_fuse_attention.cpp).
int fuse_attention(Graph& g);
// sdpa reads q, k, v in place from the buffer their slice/reshape/permute chains start from and
// writes its output in the layout of the view chain after it (graphs/pass_attention_views.cpp).
int fuse_attention_views(Graph& g);
// layer_norm(a + b) becomes layer_norm with b as its residual input: one pass over the rows
// (graphs/pass_residual_norm.cpp).
int fuse_residual_norm(Graph& g);
// Squeeze-and-excitation blocks (global mean -> 1x1 conv + act -> 1x1 conv + sigmoid -> mul by
// x) become one squeeze_excite node (graphs/pass_squeeze_excite.cpp, engine/fused_ops.h).
int fuse_squeeze_excite(Graph& g);
// Chains of element-wise ops become one fused_elementwise node; after fuse_post_ops, which
// takes the activations of linear/matmul/conv2d first (graphs/pass_fuse_elementwise.cpp).
int fuse_elementwise(Graph& g);
// Bf16: runs the matmuls and convolutions in BF16, with the values between them where every reader
// takes it; softmax, norms, reductions and the outputs stay FP32. Int8: linears and matmuls by a
// constant weight become matmul_int8, dense convolutions by constant weights run in INT8 (dynamic
// quantization; static where int8_ranges give their input's range); the rest stays FP32.
// (graphs/pass_precision.cpp). Fp32: nothing to do. Returns the nodes changed.
int lower_precision(Graph& g, Precision p, const Int8Ranges* int8_ranges = nullptr, int64_t int8_calibration_tag = 0);
// Convolutions that run best on channel-blocked activations produce them, and the element-wise
// ops, residual adds and global pools after them keep them; reorders only where a reader needs
// NCHW (graphs/pass_layout.cpp, engine/ops_layout.h).
int propagate_layouts(Graph& g);

}  // namespace hg::graphs
