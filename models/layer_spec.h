// Sequential stacks built from their JSON layer list: the form Sequential::spec() writes, read
// back by model.json's "sequential" graph and written by hand in hgraph-train's "sequential"
// model. Every layer's fields and the shape each layer receives are checked, and the parameter
// count is known, before anything is allocated.
//
//   nlohmann::json layers = {{{"op", "conv2d"}, {"in_channels", 1}, {"out_channels", 8}, {"kernel", {3, 3}}},
//                            {{"op", "relu"}}, {{"op", "flatten"}}, {{"op", "linear"}, {"in_features", 5408},
//                            {"out_features", 10}}};
//   hg::models::SequentialPlan p = hg::models::plan_sequential(layers, {1, 28, 28}, "model.config.layers");
//   p.output;       // {10}: one example's output shape
//   p.parameters;   // 8*9 + 8 + 5408*10 + 10
//   std::unique_ptr<hg::models::Sequential> net = hg::models::build_sequential(p, /*seed=*/0);
//
// Layers ("op" and its fields; absent fields take PyTorch's defaults):
//   linear {in_features, out_features, bias: true}          last dim in_features -> out_features
//   conv2d {in_channels, out_channels, kernel: [h, w] | k, stride 1, padding 0, dilation 1,
//           groups 1, bias: true}                            [C, H, W]
//   max_pool2d / avg_pool2d {kernel, stride: kernel (0 too), padding 0}    [C, H, W]
//   adaptive_avg_pool2d {output_size: [h, w] | s}            [C, H, W] -> [C, h, w]
//   batch_norm2d {num_features, eps 1e-5, momentum 0.1}      [C, H, W]
//   layer_norm {dim, eps 1e-5}                               last dim
//   embedding {num_embeddings, dim}                           first layer only: INT64 ids [S] -> [S, dim]
//   transformer_encoder_layer {d_model, nhead, dim_feedforward 2048, dropout 0.1, activation
//           "relu" | "gelu", norm_first false, layer_norm_eps 1e-5}    [S, d_model]
//   flatten {start_dim 1, end_dim -1} (dims count the batch), relu, gelu {approximate "none" |
//           "tanh"}, silu, tanh, sigmoid, dropout {p 0.5}
// Errors are hg::InvalidArgument "<where>[i].<field>: <why>" ("model.config.layers[2].in_features:
// is 784, the layer receives [1, 28, 28] (last dim 28)").
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/module.h"

namespace hg::models {

struct SequentialPlan {
  nlohmann::json layers;        // normalised: every field present, "name" "0", "1", ...
  Shape input, output;          // one example's shapes (no batch dimension)
  std::string input_datatype;   // "FP32", or "INT64" when the first layer is an embedding
  int64_t parameters = 0;       // parameter and buffer elements
};

SequentialPlan plan_sequential(const nlohmann::json& layers, const Shape& input, const std::string& where);
// Layer i is initialised from seed + i.
std::unique_ptr<Sequential> build_sequential(const SequentialPlan& plan, uint64_t seed);

}  // namespace hg::models
