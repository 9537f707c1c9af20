// The model zoo: module trees with the PyTorch definitions' state_dict keys (scripts/torch_zoo.py,
// torchvision's resnet18), so their weights load with load_state_dict.
//
//   auto net = hg::models::zoo::mlp({64, 128, 10}, /*seed=*/0);   // Linear-ReLU-Linear
//   auto lenet = hg::models::zoo::lenet5();                        // [N, 1, 32, 32] -> [N, 10]
//   auto resnet = hg::models::zoo::resnet18(1000);                 // [N, 3, H, W] -> [N, 1000]
//   resnet->load_state_dict(weights);                              // torchvision's keys and buffers
//   auto bert = hg::models::zoo::bert_classifier({.vocab = 1000, .classes = 2});
//   hg::Tensor logits = bert->forward(ids);                        // ids I64 [N, S], S <= max_len
//   bert->spec();  // {"type": "zoo", "model": "bert_classifier", "config": {"vocab": 1000, ...}}
//
// The zoo models' spec() is a model.json graph of type "zoo"; build() turns one back into a
// module (models/package.cpp's build_module calls it).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/attention.h"
#include "models/gpt.h"
#include "models/module.h"
#include "models/package.h"

namespace hg::models::zoo {

// Linear layers of the given sizes with ReLU between them (none after the last).
std::unique_ptr<Sequential> mlp(const std::vector<int64_t>& sizes, uint64_t seed = 0);

// conv1 Conv2d(1, 6, 5) - relu - max_pool 2 - conv2 Conv2d(6, 16, 5) - relu - max_pool 2 -
// flatten - fc1 Linear(400, 120) - relu - fc2 Linear(120, 84) - relu - fc3 Linear(84, classes).
class LeNet5 : public Module {
 public:
  explicit LeNet5(int64_t classes = 10, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;  // x [N, 1, 32, 32]
  nlohmann::json spec() const override;      // config {"classes"}

 private:
  int64_t classes_;
  std::shared_ptr<Module> conv1_, conv2_, fc1_, fc2_, fc3_;
};

// torchvision.models.resnet18: conv1, bn1, relu, maxpool, layer1..layer4 (two BasicBlocks
// each: conv1, bn1, relu, conv2, bn2[, downsample.0 (1x1 conv), downsample.1 (bn)]), avgpool,
// fc. Initialised as torchvision does (convolutions kaiming-normal with fan_out, BatchNorm 1
// and 0, fc the Linear default), from our generator.
class ResNet18 : public Module {
 public:
  explicit ResNet18(int64_t num_classes = 1000, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;  // x [N, 3, H, W], H and W >= 32
  nlohmann::json spec() const override;      // config {"num_classes"}

 private:
  int64_t classes_;
  std::vector<std::shared_ptr<Module>> stages_;  // conv1 ... avgpool, in order
  std::shared_ptr<Module> fc_;
};

struct BertConfig {
  int64_t vocab = 1000, d_model = 128, nhead = 4, layers = 2, ff = 512, max_len = 128, classes = 2;
};

// tok_emb, pos_emb (Embeddings), encoder (TransformerEncoder: post-norm, GELU, dropout 0.1),
// norm (LayerNorm), head (Linear d_model -> classes):
// logits = head(mean over S of norm(encoder(tok_emb(ids) + pos_emb(0..S-1)))).
class BertClassifier : public Module {
 public:
  explicit BertClassifier(const BertConfig& c = {}, uint64_t seed = 0);
  Tensor forward(const Tensor& ids) override;  // ids I64 or I32 [N, S], 1 <= S <= max_len -> [N, classes]
  nlohmann::json spec() const override;

 private:
  BertConfig c_;
  std::shared_ptr<Embedding> tok_emb_, pos_emb_;
  std::shared_ptr<Module> encoder_, norm_, head_;
};

std::unique_ptr<LeNet5> lenet5(int64_t classes = 10, uint64_t seed = 0);
std::unique_ptr<ResNet18> resnet18(int64_t num_classes = 1000, uint64_t seed = 0);
std::unique_ptr<BertClassifier> bert_classifier(const BertConfig& c = {}, uint64_t seed = 0);

// The module of a package whose graph is {"type": "zoo", "model": "lenet5" | "resnet18" |
// "bert_classifier", "config": {...}}. Config keys may be left out (the defaults above); unknown
// keys, non-positive values and inputs/outputs that do not fit the model raise hg::FormatError
// naming `file` and the field. The config's parameter count is checked (overflow-safe) before
// the module is built: at most 2^32, and equal to `weight_elements` (the total elements of the
// package's safetensors entries) when that is >= 0.
std::unique_ptr<Module> build(const PackageSpec& spec, const std::string& file, int64_t weight_elements = -1);

// GPT (models/gpt.h; defined in models/gpt.cpp). build_gpt: graph {"type": "zoo", "model": "gpt", "config":
// GPTConfig fields}, input INT64 [-1, S] (S <= max_len), output FP32 [-1, S, vocab]; FormatError naming file and field.
std::unique_ptr<GPT> gpt(const GPTConfig& c = {}, uint64_t seed = 0);
std::unique_ptr<GPT> build_gpt(const PackageSpec& spec, const std::string& file, int64_t weight_elements = -1);

}  // namespace hg::models::zoo
