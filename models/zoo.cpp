#include "models/zoo.h"

#include <map>

#include "engine/error.h"
#include "models/config_fields.h"

namespace hg::models::zoo {

std::unique_ptr<Sequential> mlp(const std::vector<int64_t>& sizes, uint64_t seed) {
  if (sizes.size() < 2) throw InvalidArgument("zoo::mlp needs at least an input and an output size");
  auto net = std::make_unique<Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (sizes[i] <= 0 || sizes[i + 1] <= 0) throw InvalidArgument("zoo::mlp: layer sizes must be positive");
    net->add(std::make_shared<Linear>(sizes[i], sizes[i + 1], seed + i));
    if (i + 2 < sizes.size()) net->add(std::make_shared<ReLU>());
  }
  return net;
}

namespace {

using Json = nlohmann::json;

// One input and one output; the output is [-1, classes] FP32.
void expect_io(const PackageSpec& s, const std::string& file, int64_t classes) {
  if (s.inputs.size() != 1) bad_field(file, "inputs", "must have one entry for this zoo model");
  if (s.outputs.size() != 1) bad_field(file, "outputs", "must have one entry for this zoo model");
  if (s.outputs[0].shape != Shape{-1, classes})
    bad_field(file, "outputs[0].shape", "is " + shape_str(s.outputs[0].shape) + ", the model produces [-1, " +
                                      std::to_string(classes) + "]");
  if (s.outputs[0].datatype != "FP32") bad_field(file, "outputs[0].datatype", "must be FP32");
}

void expect_image_input(const IOSpec& in, const std::string& file, int64_t channels, int64_t min_side, int64_t max_side) {
  const Shape& sh = in.shape;
  if (sh.size() != 4 || sh[1] != channels || sh[2] < min_side || sh[3] < min_side || sh[2] > max_side || sh[3] > max_side)
    bad_field(file, "inputs[0].shape",
        "is " + shape_str(sh) + ", the model takes [-1, " + std::to_string(channels) + ", H, W] with " +
            (min_side == max_side ? "H = W = " + std::to_string(min_side)
                                  : std::to_string(min_side) + " <= H, W <= " + std::to_string(max_side)));
  if (in.datatype != "FP32") bad_field(file, "inputs[0].datatype", "must be FP32");
}

}  // namespace

std::unique_ptr<Module> build(const PackageSpec& spec, const std::string& file, int64_t weight_elements) {
  const Json& g = spec.graph;
  if (!g.contains("model") || !g["model"].is_string()) bad_field(file, "graph.model", "is missing or not a string");
  const std::string model = g["model"].get<std::string>();
  if (model == "lenet5") {
    auto c = read_config(g, file, {{"classes", 10}});
    expect_io(spec, file, c["classes"]);
    expect_image_input(spec.inputs[0], file, 1, 32, 32);
    return lenet5(c["classes"]);
  }
  if (model == "resnet18") {
    auto c = read_config(g, file, {{"num_classes", 1000}});
    expect_io(spec, file, c["num_classes"]);
    expect_image_input(spec.inputs[0], file, 3, 32, 4096);
    return resnet18(c["num_classes"]);
  }
  if (model == "bert_classifier") {
    const BertConfig d;
    auto c = read_config(g, file,
                         {{"vocab", d.vocab}, {"d_model", d.d_model}, {"nhead", d.nhead}, {"layers", d.layers},
                          {"ff", d.ff}, {"max_len", d.max_len}, {"classes", d.classes}});
    if (c["d_model"] % c["nhead"])
      bad_field(file, "graph.config.nhead", "(" + std::to_string(c["nhead"]) + ") must divide d_model (" +
                                          std::to_string(c["d_model"]) + ")");
    expect_io(spec, file, c["classes"]);
    const Shape& sh = spec.inputs[0].shape;
    if (sh.size() != 2 || sh[1] > c["max_len"])
      bad_field(file, "inputs[0].shape", "is " + shape_str(sh) + ", the model takes token ids [-1, S] with S <= max_len (" +
                                       std::to_string(c["max_len"]) + ")");
    if (spec.inputs[0].datatype != "INT64" && spec.inputs[0].datatype != "INT32")
      bad_field(file, "inputs[0].datatype", "is " + spec.inputs[0].datatype + ", token ids are INT64 or INT32");
    const int64_t dm = c["d_model"], ff = c["ff"];
    // Embeddings, per encoder layer (in/out projections, two linears, two norms), norm, head.
    check_parameter_count(file,
                          parameter_count(file, {{c["vocab"] + c["max_len"], dm},
                                                 {c["layers"], 4 * dm * dm + 2 * dm * ff + 9 * dm + ff},
                                                 {2 * dm},
                                                 {dm + 1, c["classes"]}}),
                          weight_elements);
    return bert_classifier({.vocab = c["vocab"], .d_model = c["d_model"], .nhead = c["nhead"], .layers = c["layers"],
                            .ff = c["ff"], .max_len = c["max_len"], .classes = c["classes"]});
  }
  if (model == "gpt") return build_gpt(spec, file, weight_elements);
  bad_field(file, "graph.model", "names an unknown zoo model '" + model + "' (lenet5, resnet18, bert_classifier, gpt)");
}

}  // namespace hg::models::zoo
