// Attention and transformer encoder modules in PyTorch's layout (batch_first = True), so
// nn.MultiheadAttention / nn.TransformerEncoderLayer / nn.TransformerEncoder state_dicts load.
//
//   using namespace hg::models;
//   TransformerOptions o{.d_model = 128, .nhead = 4, .dim_feedforward = 512, .activation = "gelu"};
//   TransformerEncoder enc(o, /*num_layers=*/2, /*seed=*/1);    // keys layers.0.self_attn.in_proj_weight, ...
//   Tensor h = enc.forward(x);                                   // x [N, S, 128]
//   MultiheadAttention mha(128, 4);
//   Tensor y = mha.attend(q, kv, kv, /*attn_mask=*/{}, /*causal=*/true);
#pragma once
#include "models/module.h"

namespace hg::models {

// in_proj_weight [3E, E] (xavier uniform), in_proj_bias [3E] (0), out_proj Linear(E, E) (bias 0).
// Inputs are [N, L, E]. In training mode attention weights get dropout p; otherwise (and when
// p = 0) the fused ops::scaled_dot_product_attention runs.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;  // self-attention, no mask
  // query [N, L, E], key and value [N, S, E]; attn_mask broadcasts to [N, heads, L, S]: BOOL
  // (true = may attend) or F32 added to the scores. causal: position i attends to j <= i.
  Tensor attend(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask = {},
                bool causal = false);
  nlohmann::json spec() const override;

 private:
  Tensor heads(const Tensor& x) const;  // [N, L, E] -> [N, H, L, D]
  int64_t e_, h_;
  double dropout_;
  Tensor *in_proj_weight_, *in_proj_bias_;
  std::shared_ptr<Module> out_proj_;
};

struct TransformerOptions {
  int64_t d_model = 512, nhead = 8, dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // or "gelu" (the erf form)
  bool norm_first = false;          // false: post-norm, x = norm1(x + sa(x)); true: x = x + sa(norm1(x))
  double layer_norm_eps = 1e-5;
};

// nn.TransformerEncoderLayer(batch_first=True): children self_attn, linear1, dropout, linear2,
// norm1, norm2, dropout1, dropout2.
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerOptions& opt, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override { return forward(x, {}, false); }
  Tensor forward(const Tensor& x, const Tensor& attn_mask, bool causal);
  nlohmann::json spec() const override;

 private:
  Tensor self_attention_block(const Tensor& x, const Tensor& attn_mask, bool causal);
  Tensor feed_forward_block(const Tensor& x);
  TransformerOptions opt_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Module> linear1_, dropout_, linear2_, norm1_, norm2_, dropout1_, dropout2_;
};

// nn.TransformerEncoder(layer, num_layers) without a final norm: child "layers" holds
// "0", "1", ... (each a TransformerEncoderLayer with its own seed).
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerOptions& opt, int64_t num_layers, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override { return forward(x, {}, false); }
  Tensor forward(const Tensor& x, const Tensor& attn_mask, bool causal);
  nlohmann::json spec() const override;

 private:
  TransformerOptions opt_;
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers_;
};

}  // namespace hg::models
