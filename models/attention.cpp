#include "models/attention.h"

#include <cmath>
#include <limits>

#include "engine/error.h"
#include "engine/ops.h"
#include "models/init.h"

namespace hg::models {

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, double dropout, uint64_t seed)
    : e_(e), h_(h), dropout_(dropout) {
  if (e <= 0 || h <= 0 || e % h)
    throw InvalidArgument("MultiheadAttention: embed_dim " + std::to_string(e) + " must be a positive multiple of num_heads " +
                          std::to_string(h));
  if (!(dropout >= 0.0 && dropout <= 1.0)) throw InvalidArgument("MultiheadAttention: dropout must be in [0, 1]");
  std::mt19937_64 rng(seed);
  in_proj_weight_ = &register_parameter("in_proj_weight", init::uniform(rng, {3 * e, e}, std::sqrt(6.0f / (4 * e))));
  in_proj_bias_ = &register_parameter("in_proj_bias", Tensor::zeros({3 * e}));
  auto out = register_module("out_proj", std::make_shared<Linear>(e, e, rng()));
  out->named_parameters()[1].second->copy_from(Tensor::zeros({e}));
  out_proj_ = out;
}

Tensor MultiheadAttention::heads(const Tensor& x) const {
  return ops::permute(ops::reshape(x, {x.dim(0), x.dim(1), h_, e_ / h_}), {0, 2, 1, 3});
}

Tensor MultiheadAttention::forward(const Tensor& x) { return attend(x, x, x); }

Tensor MultiheadAttention::attend(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask,
                                  bool causal) {
  for (const Tensor* t : {&query, &key, &value})
    if (t->ndim() != 3 || t->dim(2) != e_)
      throw ShapeError("MultiheadAttention: inputs must be [N, L, " + std::to_string(e_) + "], got " + shape_str(t->shape()));
  Tensor q, k, v;
  if (query.impl() == key.impl() && key.impl() == value.impl()) {  // self-attention: one projection
    auto qkv = ops::split(linear_last_dim(query, *in_proj_weight_, *in_proj_bias_), e_, 2);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    auto w = ops::split(*in_proj_weight_, e_, 0);
    auto b = ops::split(*in_proj_bias_, e_, 0);
    q = linear_last_dim(query, w[0], b[0]);
    k = linear_last_dim(key, w[1], b[1]);
    v = linear_last_dim(value, w[2], b[2]);
  }
  q = heads(q), k = heads(k), v = heads(v);
  Tensor o;
  if (training() && dropout_ > 0) {  // softmax(q k^T / sqrt(D) + mask), dropout, @ v
    const double neg_inf = -std::numeric_limits<double>::infinity();
    Tensor s = ops::scale(ops::bmm(q, k, false, true), 1.0 / std::sqrt(static_cast<double>(e_ / h_)));
    if (causal) s = ops::causal_fill(s, neg_inf);
    if (attn_mask.defined())
      s = attn_mask.dtype() == DType::BOOL
              ? ops::where(attn_mask, s, Tensor::full({}, static_cast<float>(neg_inf), s.device()))
              : ops::add(s, attn_mask);
    o = ops::bmm(ops::dropout(ops::softmax(s, -1), dropout_, true), v);
  } else {
    o = ops::scaled_dot_product_attention(q, k, v, attn_mask, causal);
  }
  o = ops::reshape(ops::permute(o, {0, 2, 1, 3}), {query.dim(0), query.dim(1), e_});
  return out_proj_->forward(o);
}

nlohmann::json MultiheadAttention::spec() const {
  return {{"op", "multihead_attention"}, {"embed_dim", e_}, {"num_heads", h_}, {"dropout", dropout_}};
}

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerOptions& o, uint64_t seed) : opt_(o) {
  if (o.activation != "relu" && o.activation != "gelu")
    throw InvalidArgument("TransformerEncoderLayer: activation '" + o.activation + "' is not \"relu\" or \"gelu\"");
  if (o.dim_feedforward <= 0) throw InvalidArgument("TransformerEncoderLayer: dim_feedforward must be positive");
  std::mt19937_64 rng(seed);
  self_attn_ = register_module("self_attn", std::make_shared<MultiheadAttention>(o.d_model, o.nhead, o.dropout, rng()));
  linear1_ = register_module("linear1", std::make_shared<Linear>(o.d_model, o.dim_feedforward, rng()));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(o.dropout));
  linear2_ = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, o.d_model, rng()));
  norm1_ = register_module("norm1", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps));
  norm2_ = register_module("norm2", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const Tensor& attn_mask, bool causal) {
  return dropout1_->forward(self_attn_->attend(x, x, x, attn_mask, causal));
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  Tensor h = linear1_->forward(x);
  h = opt_.activation == "gelu" ? ops::gelu(h) : ops::relu(h);
  return dropout2_->forward(linear2_->forward(dropout_->forward(h)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& attn_mask, bool causal) {
  if (opt_.norm_first) {
    Tensor h = ops::add(x, self_attention_block(norm1_->forward(x), attn_mask, causal));
    return ops::add(h, feed_forward_block(norm2_->forward(h)));
  }
  Tensor h = norm1_->forward(ops::add(x, self_attention_block(x, attn_mask, causal)));
  return norm2_->forward(ops::add(h, feed_forward_block(h)));
}

nlohmann::json TransformerEncoderLayer::spec() const {
  return {{"op", "transformer_encoder_layer"}, {"d_model", opt_.d_model},
          {"nhead", opt_.nhead},               {"dim_feedforward", opt_.dim_feedforward},
          {"dropout", opt_.dropout},           {"activation", opt_.activation},
          {"norm_first", opt_.norm_first},     {"layer_norm_eps", opt_.layer_norm_eps}};
}

TransformerEncoder::TransformerEncoder(const TransformerOptions& o, int64_t num_layers, uint64_t seed) : opt_(o) {
  if (num_layers <= 0) throw InvalidArgument("TransformerEncoder: num_layers must be positive");
  auto list = register_module("layers", std::make_shared<Sequential>());
  for (int64_t i = 0; i < num_layers; ++i) {
    layers_.push_back(std::make_shared<TransformerEncoderLayer>(o, seed + static_cast<uint64_t>(i)));
    list->add(layers_.back());
  }
}

Tensor TransformerEncoder::forward(const Tensor& x, const Tensor& attn_mask, bool causal) {
  Tensor h = x;
  for (auto& l : layers_) h = l->forward(h, attn_mask, causal);
  return h;
}

nlohmann::json TransformerEncoder::spec() const {
  nlohmann::json j = layers_.front()->spec();
  j["op"] = "transformer_encoder";
  j["num_layers"] = layers_.size();
  return j;
}

}  // namespace hg::models
