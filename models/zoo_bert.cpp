#include "engine/error.h"
#include "engine/ops.h"
#include "models/zoo.h"

namespace hg::models::zoo {

BertClassifier::BertClassifier(const BertConfig& c, uint64_t seed) : c_(c) {
  for (int64_t v : {c.vocab, c.d_model, c.nhead, c.layers, c.ff, c.max_len, c.classes})
    if (v <= 0) throw InvalidArgument("BertClassifier: every config value must be positive");
  tok_emb_ = register_module("tok_emb", std::make_shared<Embedding>(c.vocab, c.d_model, seed));
  pos_emb_ = register_module("pos_emb", std::make_shared<Embedding>(c.max_len, c.d_model, seed + 1));
  const TransformerOptions o{.d_model = c.d_model, .nhead = c.nhead, .dim_feedforward = c.ff, .dropout = 0.1,
                             .activation = "gelu", .norm_first = false};
  encoder_ = register_module("encoder", std::make_shared<TransformerEncoder>(o, c.layers, seed + 2));
  norm_ = register_module("norm", std::make_shared<LayerNorm>(c.d_model));
  head_ = register_module("head", std::make_shared<Linear>(c.d_model, c.classes, seed + 3 + c.layers));
}

Tensor BertClassifier::forward(const Tensor& ids) {
  if (ids.ndim() != 2 || ids.dim(1) < 1 || ids.dim(1) > c_.max_len || (ids.dtype() != DType::I64 && ids.dtype() != DType::I32))
    throw ShapeError("BertClassifier: ids must be I64 or I32 [N, S] with 1 <= S <= " + std::to_string(c_.max_len) + ", got " +
                     meta_str(ids.meta()));
  // pos_emb(arange(S)) is the first S rows of its table.
  Tensor h = ops::add(tok_emb_->forward(ids), ops::slice(pos_emb_->weight(), 0, 0, ids.dim(1)));
  h = norm_->forward(encoder_->forward(h));
  return head_->forward(ops::mean(h, 1));
}

nlohmann::json BertClassifier::spec() const {
  return {{"type", "zoo"},
          {"model", "bert_classifier"},
          {"config",
           {{"vocab", c_.vocab}, {"d_model", c_.d_model}, {"nhead", c_.nhead}, {"layers", c_.layers},
            {"ff", c_.ff}, {"max_len", c_.max_len}, {"classes", c_.classes}}}};
}

std::unique_ptr<BertClassifier> bert_classifier(const BertConfig& c, uint64_t seed) {
  return std::make_unique<BertClassifier>(c, seed);
}

}  // namespace hg::models::zoo
