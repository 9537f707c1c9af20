// A model's serving configuration: `<repo>/<model>/config.json`, with Triton's field names
// (model_config.proto in JSON form) plus hgraph's `batch_buckets`. Every field is optional.
//
//   {"max_batch_size": 32,
//    "batch_buckets": "exp:1:32",                       // or [1, 2, 4, 8] or "linear:8:64:8"
//    "dynamic_batching": {"max_queue_delay_microseconds": 200, "preserve_ordering": true,
//                         "priority_levels": 2, "default_priority_level": 2,
//                         "default_queue_policy": {"max_queue_size": 256,
//                                                  "default_timeout_microseconds": 50000,
//                                                  "allow_timeout_override": true}},
//    "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
//    "version_policy": {"latest": {"num_versions": 1}},   // or {"all": {}}, {"specific": {"versions": [1, 3]}}
//    "model_warmup": true,
//    "padding": {...},                                     // see Padding
//    "max_signatures": 16, "max_signature_bytes": 0,      // dynamic dimensions: signatures kept
//    "precision": "bf16",                                 // or "fp32" (the default)
//    "precision_check": {"samples": 64, "seed": 0, "min_top1_agreement": 0.99, "max_relative_error": 0.05,
//                        "inputs": "samples.safetensors"},            // optional: the inputs to check on
//    "calibration": {"inputs": "calibration.safetensors", "samples": 512},  // int8: static ranges
//    "generation": {"max_batch": 32, "max_step_tokens": 128, "block_size": 16,   // text generation models:
//                   "max_batch_total_tokens": 8192},                            // see Generation
//    "platform": "hgraph"}                                // or "identity" (with "input"/"output" lists)
//
//   ModelConfig c = ModelConfig::parse(json, "repo/m/config.json", "m");   // throws FormatError naming the field
//   nlohmann::json j = c.to_json();                                         // GET .../config
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/json_reader.h"
#include "models/package.h"
#include "models/predictor.h"
#include "server/batcher.h"

namespace hg::server {

// A config.json (a file or a load request's parameters.config) is small: these bound it.
inline constexpr JsonLimits kConfigJsonLimits{.max_depth = 16, .max_values = 65536, .max_bytes = size_t{1} << 20};

// Padding a dynamic dimension up to buckets, so that requests of different lengths share one
// signature (and its captured graphs): the listed dimension of each listed input (all of one
// length L in a request) is padded to the smallest bucket >= L, with pad_value (the mask input
// with 0), and the listed dimension of each listed output is cut back to L in the answer.
//   "padding": {"dims": {"input_ids": 1, "attention_mask": 1}, "buckets": "exp:16:512",
//               "pad_value": 0, "mask": "attention_mask", "strip": {"logits": 1}}
struct Padding {
  std::map<std::string, int64_t> dims;   // input -> the dimension padded (in the request's shape, >= 1)
  std::vector<int64_t> buckets;          // ascending
  double pad_value = 0;
  std::string mask;                      // the input whose zeros mask the padding (one of dims)
  std::map<std::string, int64_t> strip;  // output -> the dimension cut back to L
};

// A model served in reduced precision is compared with FP32 at load (models/precision.h) on
// `samples` fixed inputs; below min_top1_agreement, or above max_relative_error when set, the load
// fails naming both figures. samples 0: no check.
struct PrecisionCheck {
  int64_t samples = 64;
  uint64_t seed = 0;
  // A safetensors file in the model's folder with the inputs to check on (one tensor per model
  // input, [N, sample shape]: models/precision.h); empty: `samples` seeded random inputs.
  std::string inputs;
  double min_top1_agreement = 0;
  std::optional<double> max_relative_error;
};
inline constexpr int64_t kMaxPrecisionSamples = 4096;

// "precision": "int8" with static quantization: the convolutions' input ranges come from running
// a calibration set through the model at load (models::Predictor::calibrate_int8) instead of
// being measured with every request. `inputs`: a safetensors file in the model's folder in
// precision_check.inputs' format (one tensor per model input, [N, sample shape]); at most
// `samples` of its N are used.
struct Calibration {
  std::string inputs;
  int64_t samples = kMaxPrecisionSamples;
};

// Text generation (the GPT zoo model): continuous batching over a paged KV cache
// (server/generate_scheduler.h). max_batch: sequences decoding together (default: max_batch_size,
// at least 1); max_step_tokens: tokens one step runs (decoding tokens, then prompt chunks; 0:
// 128); block_size: positions per KV
// block; max_batch_total_tokens: the KV cache's capacity in tokens (0: max_batch * max_len);
// graph_memory_mb: MB the step graphs captured at load may take (0: no limit); kv_cache_dtype:
// "float32" or "bfloat16", how keys and values are stored.
struct Generation {
  int64_t max_batch = 0;  // 0: max_batch_size
  int64_t max_step_tokens = 0;
  int64_t block_size = 16;
  int64_t max_batch_total_tokens = 0;
  int64_t graph_memory_mb = 0;
  std::string kv_cache_dtype = "float32";
};

struct VersionPolicy {
  enum class Kind { Latest, All, Specific } kind = Kind::Latest;
  int64_t num_versions = 1;       // Latest
  std::vector<int64_t> versions;  // Specific
  // The versions to serve out of those available (any order in, descending out).
  std::vector<int64_t> select(std::vector<int64_t> available) const;
};

struct ModelConfig {
  std::string name;
  std::string platform = "hgraph";  // "hgraph" (package or model.onnx) or "identity"
  // 0: no batching (one request per run, its tensors whole: no batch dimension); default: the
  // largest bucket given, or 0 for a model without a batch dimension.
  int64_t max_batch_size = 32;
  bool max_batch_size_given = false;  // config.json sets max_batch_size
  std::vector<int64_t> batch_buckets;  // captured batch sizes; empty: see buckets()
  bool dynamic_batching = false;       // the "dynamic_batching" object is present
  uint64_t max_queue_delay_us = 0;
  bool preserve_ordering = false;
  int priority_levels = 1;
  int default_priority_level = 1;      // parsed default: the lowest level (= priority_levels)
  size_t max_queue_size = 0;           // 0: unbounded (text generation: 8 x generation.max_batch)
  uint64_t default_timeout_us = 0;     // 0: none
  bool allow_timeout_override = true;  // a request's `timeout` may only lower the default
  int instance_count = 1;
  VersionPolicy version_policy;
  bool warmup = true;                  // capture every bucket before READY
  // Models with dynamic dimensions besides the batch: the input signatures kept with their
  // captured graphs (LRU; 0: unbounded), and the bytes their graphs may take (0: unbounded).
  size_t max_signatures = 16;
  size_t max_signature_bytes = 0;
  std::optional<Padding> padding;
  graphs::Precision precision = graphs::Precision::Fp32;  // the arithmetic of the captured graphs
  PrecisionCheck precision_check;
  std::optional<Calibration> calibration;  // int8 only
  Generation generation;
  // The tensors, with -1 for the batch dimension when max_batch_size > 0: required for the identity
  // platform (output i echoes input i); for hgraph models they must match the package.
  std::vector<models::IOSpec> inputs, outputs;

  // `name` is the model's folder name; a "name" field in the JSON must equal it. Unknown fields
  // are errors; 64-bit integers may be JSON strings ("100"), as Triton writes them.
  static ModelConfig parse(const nlohmann::json& j, const std::string& file, const std::string& name);
  // config.json of a model folder; the defaults when the file does not exist. Throws FormatError.
  static ModelConfig load(const std::filesystem::path& model_dir);
  // The buckets to capture: batch_buckets when given, else those of `fallback` (the server's
  // --batch-sizes) up to max_batch_size (max_batch_size itself when none is); {1} for 0.
  std::vector<int64_t> buckets(const std::vector<int64_t>& fallback) const;
  // The Predictor's options this config sets (signature limits; max_batch_size 0: whole tensors).
  void apply(models::PredictorOptions& opt) const;
  // The dynamic batcher's settings (max_batch_size 0: one request per run).
  BatcherConfig batcher_config() const;
  // Triton's spelling (input/output with data_type "TYPE_FP32" and dims without the batch
  // dimension); parse(to_json()) gives the same config back.
  nlohmann::json to_json() const;
};

}  // namespace hg::server
