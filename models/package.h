// Model package v1: a directory with `model.json` and `weights.safetensors`.
//
//   hg::models::ModelPackage p = hg::models::load_package("models/repository/digits_mlp/1");
//   p.inputs[0].name;       // "input"; p.inputs[0].shape == {-1, 64} (-1 = batch)
//   auto net = hg::models::build_module(p);      // a Sequential with the weights loaded
//   hg::models::save_package(dir, *net, spec);   // atomic writes
//
// model.json: {"format": "hgraph-model", "format_version": 1, "name": str, "platform": "hgraph_v1",
//   "inputs": [{"name", "datatype": "FP32", "shape": [-1, 64]}], "outputs": [...],
//   "graph": {"type": "sequential", "layers": [{"op": "linear", "name": "0", "in_features": 64,
//             "out_features": 32}, {"op": "relu", "name": "1"}, ...]},
//   "metadata": {...free-form object...}, "batched": false (optional; see PackageSpec::batched)}
//   or "graph": {"type": "zoo", "model": "lenet5" | "resnet18" | "bert_classifier", "config": {...}}
//   (models/zoo.h).
// Weights: the module's state_dict (PyTorch names "0.weight", "0.bias", ...; buffers too, in
// their dtypes).
#pragma once
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/json_reader.h"
#include "models/safetensors.h"

namespace hg::models {

class Module;

inline constexpr int kPackageFormatVersion = 1;

// KServe datatype spellings of the engine's dtypes: F32 <-> "FP32", I64 <-> "INT64", BOOL,
// UINT8, INT32, FP64, FP16, BF16. Both throw hg::DTypeError for anything else.
std::string kserve_datatype(DType t);
DType dtype_from_kserve(const std::string& datatype);

struct IOSpec {
  std::string name;
  std::string datatype;  // KServe spelling: "FP32", "INT64", ...
  Shape shape;           // -1: the batch (dimension 0 of a batched spec) or a dynamic dimension
};

struct PackageSpec {
  std::string name;
  std::vector<IOSpec> inputs, outputs;
  nlohmann::json graph;     // {"type": "sequential", "layers": [...]}
  nlohmann::json metadata = nlohmann::json::object();
  // true: dimension 0 of every input and output is the batch (-1), and requests are batched
  // along it. false: the shapes are whole tensors, any -1 is a dynamic dimension and every run
  // is one request (an ONNX export whose batch is another dimension, or has no dynamic batch).
  bool batched = true;
};

// The shape of one sample of `io`: its dimensions after the batch when `spec` is batched.
Shape sample_shape(const PackageSpec& spec, const IOSpec& io);

struct ModelPackage {
  std::filesystem::path dir;
  int format_version = kPackageFormatVersion;
  PackageSpec spec;
  safetensors::File weights;  // validated on load
};

// Reads and validates model.json and weights.safetensors; errors name the file and field.
// Validation builds the module; pass `module` to keep it instead of building it again.
// Limits for reading a model.json: an imported graph lists every op and shape of the model.
inline constexpr JsonLimits kModelJsonLimits{.max_depth = 32, .max_values = size_t{1} << 24, .max_bytes = size_t{256} << 20};

// module (optional) receives the built module with its weights on `device` (no copy to move them).
ModelPackage load_package(const std::filesystem::path& dir, std::unique_ptr<Module>* module = nullptr, Device device = {});
// The same from model.json's content and the weights already in memory; `dir` names the files
// in errors. Validates everything load_package does.
ModelPackage package_from(const nlohmann::json& model_json, safetensors::File weights, const std::filesystem::path& dir,
                          std::unique_ptr<Module>* module = nullptr, Device device = {});
// model.json's content for `spec` (spec.graph as the graph).
nlohmann::json package_json(const PackageSpec& spec);
// Builds the module the graph describes and loads its weights (validated against it).
std::unique_ptr<Module> build_module(const ModelPackage& p, Device device = {});
void save_package(const std::filesystem::path& dir, const Module& m, const PackageSpec& spec);

}  // namespace hg::models
