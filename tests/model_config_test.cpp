// ModelConfig: every field of config.json (Triton's spelling, also its string-encoded 64-bit
// integers), every error naming the file and the field, the to_json round trip, loading from a
// model folder, version policies and the buckets a config captures.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "server/model_config.h"
#include "test_env.h"

namespace {

using hg::server::ModelConfig;
using hg::server::VersionPolicy;
using json = nlohmann::json;
using ::testing::HasSubstr;

ModelConfig parse(const std::string& text, const std::string& name = "m") {
  return ModelConfig::parse(json::parse(text), "config.json", name);
}

std::string error_of(const std::string& text) {
  return hg::test::error_of<hg::FormatError>([&] { parse(text); });
}

TEST(ModelConfigTest, DefaultsForAnEmptyObject) {
  ModelConfig c = parse("{}");
  EXPECT_EQ(c.name, "m");
  EXPECT_EQ(c.platform, "hgraph");
  EXPECT_EQ(c.max_batch_size, 32);
  EXPECT_TRUE(c.batch_buckets.empty());
  EXPECT_FALSE(c.dynamic_batching);
  EXPECT_EQ(c.max_queue_delay_us, 0u);
  EXPECT_EQ(c.priority_levels, 1);
  EXPECT_EQ(c.max_queue_size, 0u);
  EXPECT_EQ(c.default_timeout_us, 0u);
  EXPECT_EQ(c.instance_count, 1);
  EXPECT_EQ(c.version_policy.kind, VersionPolicy::Kind::Latest);
  EXPECT_EQ(c.version_policy.num_versions, 1);
  EXPECT_TRUE(c.warmup);
  EXPECT_TRUE(c.inputs.empty());
}

TEST(ModelConfigTest, EveryField) {
  ModelConfig c = parse(R"({
    "name": "m", "platform": "hgraph", "max_batch_size": 16, "batch_buckets": "exp:1:16",
    "dynamic_batching": {"max_queue_delay_microseconds": 200, "preserve_ordering": true,
                         "priority_levels": 3, "default_priority_level": 2,
                         "default_queue_policy": {"max_queue_size": 256, "default_timeout_microseconds": 50000,
                                                  "allow_timeout_override": false, "timeout_action": "REJECT"}},
    "instance_group": [{"name": "a", "count": 2, "kind": "KIND_CPU"}, {"kind": "KIND_AUTO"}],
    "version_policy": {"specific": {"versions": [3, 1, 3]}},
    "model_warmup": false,
    "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [64]}],
    "output": [{"name": "y", "datatype": "FP32", "shape": [-1, 10]}]})");
  EXPECT_EQ(c.max_batch_size, 16);
  EXPECT_EQ(c.batch_buckets, (std::vector<int64_t>{1, 2, 4, 8, 16}));
  EXPECT_TRUE(c.dynamic_batching);
  EXPECT_EQ(c.max_queue_delay_us, 200u);
  EXPECT_TRUE(c.preserve_ordering);
  EXPECT_EQ(c.priority_levels, 3);
  EXPECT_EQ(c.default_priority_level, 2);
  EXPECT_EQ(c.max_queue_size, 256u);
  EXPECT_EQ(c.default_timeout_us, 50000u);
  EXPECT_FALSE(c.allow_timeout_override);
  EXPECT_EQ(c.instance_count, 3);
  EXPECT_EQ(c.version_policy.kind, VersionPolicy::Kind::Specific);
  EXPECT_EQ(c.version_policy.versions, (std::vector<int64_t>{3, 1}));
  EXPECT_FALSE(c.warmup);
  ASSERT_EQ(c.inputs.size(), 1u);
  EXPECT_EQ(c.inputs[0].name, "x");
  EXPECT_EQ(c.inputs[0].datatype, "FP32");
  EXPECT_EQ(c.inputs[0].shape, (hg::Shape{-1, 64}));  // dims leave the batch dimension out
  ASSERT_EQ(c.outputs.size(), 1u);
  EXPECT_EQ(c.outputs[0].shape, (hg::Shape{-1, 10}));  // shape keeps it
}

TEST(ModelConfigTest, TritonStringIntegersAndSpellings) {
  ModelConfig c = parse(R"({"max_batch_size": "8", "backend": "onnxruntime",
    "dynamic_batching": {"max_queue_delay_microseconds": "100"},
    "version_policy": {"latest": {"num_versions": "2"}},
    "input": [{"name": "s", "data_type": "TYPE_STRING", "dims": ["4"]}]})");
  EXPECT_EQ(c.max_batch_size, 8);
  EXPECT_EQ(c.platform, "hgraph");
  EXPECT_EQ(c.max_queue_delay_us, 100u);
  EXPECT_EQ(c.version_policy.num_versions, 2);
  EXPECT_EQ(c.inputs[0].datatype, "BYTES");
  EXPECT_EQ(c.inputs[0].shape, (hg::Shape{-1, 4}));
  EXPECT_EQ(parse(R"({"platform": "onnxruntime_onnx"})").platform, "hgraph");
  EXPECT_EQ(parse(R"({"version_policy": {"all": {}}})").version_policy.kind, VersionPolicy::Kind::All);
}

TEST(ModelConfigTest, BucketsAndMaxBatchSize) {
  EXPECT_EQ(parse(R"({"batch_buckets": [8, 1, 4, 4]})").batch_buckets, (std::vector<int64_t>{1, 4, 8}));
  EXPECT_EQ(parse(R"({"batch_buckets": "linear:8:32:8"})").batch_buckets, (std::vector<int64_t>{8, 16, 24, 32}));
  EXPECT_EQ(parse(R"({"batch_buckets": "1,2,3"})").batch_buckets, (std::vector<int64_t>{1, 2, 3}));
  // Without max_batch_size, the largest bucket is the largest batch.
  EXPECT_EQ(parse(R"({"batch_buckets": [1, 64]})").max_batch_size, 64);
  EXPECT_EQ(parse(R"({"max_batch_size": 0, "batch_buckets": [1]})").max_batch_size, 0);
  // A spec string is held to the array form's limit (the fuzzer found a linear spec whose
  // buckets the config accepted and its to_json() then refused).
  EXPECT_THAT(error_of(R"({"batch_buckets": "linear:7:333333333:881887881"})"),
              HasSubstr("batch_buckets holds bucket 333333333, above the limit 65536"));
  EXPECT_THAT(error_of(R"({"batch_buckets": [1, 65537]})"), HasSubstr("must be at most 65536"));

  // buckets(): the config's, else the server's fallback up to max_batch_size.
  const std::vector<int64_t> fallback = {1, 2, 4, 8, 16, 32};
  EXPECT_EQ(parse(R"({"batch_buckets": [3]})").buckets(fallback), (std::vector<int64_t>{3}));
  EXPECT_EQ(parse(R"({"max_batch_size": 8})").buckets(fallback), (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(parse(R"({"max_batch_size": 0})").buckets(fallback), (std::vector<int64_t>{1}));
  EXPECT_EQ(parse(R"({"max_batch_size": 4})").buckets({16}), (std::vector<int64_t>{4}));
  EXPECT_EQ(parse("{}").buckets({1, 4}), (std::vector<int64_t>{1, 4}));
}

TEST(ModelConfigTest, IdentityPlatform) {
  ModelConfig c = parse(R"({"platform": "identity", "max_batch_size": 8,
    "input": [{"name": "I0", "data_type": "TYPE_INT32", "dims": [16]}],
    "output": [{"name": "O0", "data_type": "TYPE_INT32", "dims": [16]}]})");
  EXPECT_EQ(c.platform, "identity");
  EXPECT_EQ(c.inputs[0].datatype, "INT32");
  EXPECT_EQ(c.outputs[0].shape, (hg::Shape{-1, 16}));
  EXPECT_THAT(error_of(R"({"platform": "identity"})"), HasSubstr("config.json: input must list the identity model's tensors"));
  EXPECT_THAT(error_of(R"({"platform": "identity", "input": [{"name": "a", "datatype": "FP32", "dims": [1]}]})"),
              HasSubstr("config.json: output must list one output per input"));
}

// Every error names the file and the field.
TEST(ModelConfigTest, EveryErrorNamesFileAndField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[]", "config.json: must be a JSON object, got []"},
      {R"({"nmae": "m"})", "config.json: nmae is not a known field (known: name, platform"},
      {R"({"sequence_batching": {}})", "config.json: sequence_batching is not supported"},
      {R"({"ensemble_scheduling": {}})", "config.json: ensemble_scheduling is not supported"},
      {R"({"name": "other"})", "config.json: name is \"other\" but the model's folder is \"m\""},
      {R"({"name": 3})", "config.json: name must be a string, got 3"},
      {R"({"platform": "tensorrt_plan"})", "config.json: platform must be \"hgraph\""},
      {R"({"backend": "python"})", "config.json: backend must be \"hgraph\", \"onnxruntime\" or \"identity\""},
      {R"({"platform": "identity", "backend": "hgraph"})", "config.json: backend \"hgraph\" contradicts platform"},
      {R"({"max_batch_size": -1})", "config.json: max_batch_size must be a non-negative integer, got -1"},
      {R"({"max_batch_size": 1.5})", "config.json: max_batch_size must be a non-negative integer, got 1.5"},
      {R"({"max_batch_size": "x"})", "config.json: max_batch_size must be a non-negative integer, got \"x\""},
      {R"({"max_batch_size": 18446744073709551615})", "config.json: max_batch_size must be a non-negative integer"},
      {R"({"max_batch_size": 65537})", "config.json: max_batch_size must be at most 65536, got 65537"},
      {R"({"batch_buckets": "exp:4:1"})", "config.json: batch_buckets is invalid:"},
      {R"({"batch_buckets": "sqrt:1:4"})", "config.json: batch_buckets is invalid:"},
      {R"({"batch_buckets": "exp:1:9223372036854775807"})",
       "config.json: batch_buckets holds bucket 9223372036854775807, above the limit 65536"},
      {R"({"batch_buckets": "exp:4611686018427387905:9223372036854775807"})",
       "config.json: batch_buckets holds bucket 9223372036854775807, above the limit 65536"},
      {R"({"batch_buckets": "linear:1:9223372036854775807"})", "config.json: batch_buckets is invalid:"},
      {R"({"batch_buckets": []})", "config.json: batch_buckets is invalid:"},
      {R"({"batch_buckets": [1, 0]})", "config.json: batch_buckets[1] must be a positive integer, got 0"},
      {R"({"batch_buckets": {}})", "config.json: batch_buckets must be a string"},
      {R"({"max_batch_size": 8, "batch_buckets": [1, 16]})", "config.json: batch_buckets holds bucket 16, above max_batch_size 8"},
      {R"({"max_batch_size": 0, "batch_buckets": [1, 2]})", "config.json: batch_buckets must be [1] or absent when max_batch_size is 0"},
      {R"({"dynamic_batching": []})", "config.json: dynamic_batching must be a JSON object, got []"},
      {R"({"dynamic_batching": {"max_queue_delay_microseconds": -5}})",
       "config.json: dynamic_batching.max_queue_delay_microseconds must be a non-negative integer, got -5"},
      {R"({"dynamic_batching": {"preserve_ordering": 1}})", "config.json: dynamic_batching.preserve_ordering must be true or false, got 1"},
      {R"({"dynamic_batching": {"preferred_batch_size": [4]}})",
       "config.json: dynamic_batching.preferred_batch_size is not supported: hgraph batches up to the largest of batch_buckets"},
      {R"({"dynamic_batching": {"priority_queue_policy": {}}})", "config.json: dynamic_batching.priority_queue_policy is not supported"},
      {R"({"dynamic_batching": {"priority_levels": 256}})", "config.json: dynamic_batching.priority_levels must be at most 255, got 256"},
      {R"({"dynamic_batching": {"priority_levels": 2, "default_priority_level": 3}})",
       "config.json: dynamic_batching.default_priority_level must be in [1, priority_levels = 2], got 3"},
      {R"({"dynamic_batching": {"delay": 1}})", "config.json: dynamic_batching.delay is not a known field"},
      {R"({"dynamic_batching": {"default_queue_policy": {"max_queue_size": -1}}})",
       "config.json: dynamic_batching.default_queue_policy.max_queue_size must be a non-negative integer, got -1"},
      {R"({"dynamic_batching": {"default_queue_policy": {"default_timeout_microseconds": true}}})",
       "config.json: dynamic_batching.default_queue_policy.default_timeout_microseconds must be a non-negative integer, got true"},
      {R"({"dynamic_batching": {"default_queue_policy": {"allow_timeout_override": "yes"}}})",
       "config.json: dynamic_batching.default_queue_policy.allow_timeout_override must be true or false"},
      {R"({"dynamic_batching": {"default_queue_policy": {"timeout_action": "DELAY"}}})",
       "config.json: dynamic_batching.default_queue_policy.timeout_action must be \"REJECT\""},
      {R"({"instance_group": {}})", "config.json: instance_group must be an array, got {}"},
      {R"({"instance_group": []})", "config.json: instance_group must not be empty"},
      {R"({"instance_group": [{"count": 0}]})", "config.json: instance_group[0].count must be a positive integer, got 0"},
      {R"({"instance_group": [{"count": 1}, {"kind": "KIND_GPU"}]})", "config.json: instance_group[1].kind must be KIND_CPU"},
      {R"({"instance_group": [{"gpus": [0]}]})", "config.json: instance_group[0].gpus is not supported"},
      {R"({"instance_group": [{"count": 40}, {"count": 40}]})", "config.json: instance_group asks for 80 instances, more than 64"},
      {R"({"version_policy": {}})", "config.json: version_policy must hold exactly one of latest, all, specific"},
      {R"({"version_policy": {"all": {}, "latest": {}}})", "config.json: version_policy must hold exactly one of"},
      {R"({"version_policy": {"newest": {}}})", "config.json: version_policy.newest is not a known field"},
      {R"({"version_policy": {"latest": {"num_versions": 0}}})", "config.json: version_policy.latest.num_versions must be a positive integer, got 0"},
      {R"({"version_policy": {"all": {"x": 1}}})", "config.json: version_policy.all.x is not a known field"},
      {R"({"version_policy": {"specific": {"versions": []}}})", "config.json: version_policy.specific.versions must list at least one version"},
      {R"({"version_policy": {"specific": {"versions": [1, -2]}}})", "config.json: version_policy.specific.versions[1] must be a positive integer, got -2"},
      {R"({"model_warmup": [{"name": "w"}]})", "config.json: model_warmup must be true or false"},
      {R"({"input": {}})", "config.json: input must be an array, got {}"},
      {R"({"input": [], "inputs": []})", "config.json: input and inputs are the same list"},
      {R"({"input": [3]})", "config.json: input[0] must be a JSON object, got 3"},
      {R"({"input": [{"data_type": "TYPE_FP32", "dims": [1]}]})", "config.json: input[0].name must be a non-empty string"},
      {R"({"input": [{"name": "a", "dims": [1]}]})", "config.json: input[0].data_type or datatype must be given, exactly one of them"},
      {R"({"input": [{"name": "a", "data_type": "TYPE_FP128", "dims": [1]}]})",
       "config.json: input[0].data_type names an unknown datatype 'TYPE_FP128'"},
      {R"({"input": [{"name": "a", "datatype": "float", "dims": [1]}]})", "config.json: input[0].datatype names an unknown datatype 'float'"},
      {R"({"input": [{"name": "a", "datatype": "FP32"}]})", "config.json: input[0].dims or shape must be given, exactly one of them"},
      {R"({"input": [{"name": "a", "datatype": "FP32", "dims": [0]}]})", "config.json: input[0].dims[0] must be -1 (variable) or positive, got 0"},
      {R"({"input": [{"name": "a", "datatype": "FP32", "dims": [-2]}]})", "config.json: input[0].dims[0] must be an integer >= -1, got -2"},
      {R"({"input": [{"name": "a", "datatype": "FP32", "shape": [4]}]})", "config.json: input[0].shape must start with -1 (the batch dimension)"},
      {R"({"input": [{"name": "a", "datatype": "FP32", "dims": [1], "format": "NCHW"}]})", "config.json: input[0].format is not a known field"},
      {R"({"output": [{"name": "a", "datatype": "FP32", "dims": [1]}, {"name": "a", "datatype": "FP32", "dims": [1]}]})",
       "config.json: output[1].name repeats the name 'a'"},
  };
  for (const auto& [text, want] : cases) EXPECT_THAT(error_of(text), HasSubstr(want)) << text;
}

// Text generation's settings: each field, the defaults, the round trip and the errors.
TEST(ModelConfigTest, Generation) {
  const ModelConfig c = parse(R"({"generation": {"max_batch": 8, "max_step_tokens": 128, "block_size": 32,
                                                 "max_batch_total_tokens": 4096, "graph_memory_mb": 64,
                                                 "kv_cache_dtype": "bfloat16"}})");
  EXPECT_EQ(c.generation.max_batch, 8);
  EXPECT_EQ(c.generation.max_step_tokens, 128);
  EXPECT_EQ(c.generation.block_size, 32);
  EXPECT_EQ(c.generation.max_batch_total_tokens, 4096);
  EXPECT_EQ(c.generation.graph_memory_mb, 64);
  EXPECT_EQ(c.generation.kv_cache_dtype, "bfloat16");
  EXPECT_EQ(ModelConfig::parse(c.to_json(), "config.json", "m").to_json(), c.to_json());
  const ModelConfig d = parse("{}");
  EXPECT_EQ(d.generation.max_batch, 0);
  EXPECT_EQ(d.generation.block_size, 16);
  EXPECT_EQ(d.generation.graph_memory_mb, 0);
  EXPECT_EQ(d.generation.kv_cache_dtype, "float32");
  EXPECT_THAT(error_of(R"({"generation": {"kv_cache_dtype": "fp8"}})"),
              HasSubstr("generation.kv_cache_dtype must be \"float32\" or \"bfloat16\", got \"fp8\""));
  EXPECT_THAT(error_of(R"({"generation": {"graph_memory_mb": -1}})"), HasSubstr("generation.graph_memory_mb"));
  EXPECT_THAT(error_of(R"({"generation": {"block_size": 0}})"), HasSubstr("generation.block_size"));
  EXPECT_THAT(error_of(R"({"generation": {"max_prefill_batch": 4}})"), HasSubstr("max_prefill_batch"));
}

TEST(ModelConfigTest, ToJsonRoundTrips) {
  for (const char* text : {
           "{}",
           R"({"max_batch_size": 0})",
           R"({"version_policy": {"all": {}}, "instance_group": [{"count": 3}], "model_warmup": false})",
           R"({"max_batch_size": 16, "batch_buckets": [2, 16],
               "dynamic_batching": {"max_queue_delay_microseconds": 200, "preserve_ordering": true, "priority_levels": 2,
                                    "default_queue_policy": {"max_queue_size": 4, "default_timeout_microseconds": 9}},
               "version_policy": {"specific": {"versions": [1, 3]}},
               "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [8, -1]}],
               "output": [{"name": "y", "datatype": "BYTES", "shape": [-1]}]})",
           R"({"platform": "identity", "max_batch_size": 0,
               "input": [{"name": "a", "datatype": "BOOL", "shape": [3]}],
               "output": [{"name": "b", "datatype": "BOOL", "shape": [3]}]})",
       }) {
    const ModelConfig a = parse(text);
    const json j = a.to_json();
    const ModelConfig b = ModelConfig::parse(j, "config.json", "m");
    EXPECT_EQ(b.to_json(), j) << text;
    EXPECT_EQ(b.max_batch_size, a.max_batch_size);
    EXPECT_EQ(b.batch_buckets, a.batch_buckets);
    EXPECT_EQ(b.default_priority_level, a.default_priority_level);
    ASSERT_EQ(b.inputs.size(), a.inputs.size());
    for (size_t i = 0; i < a.inputs.size(); ++i) EXPECT_EQ(b.inputs[i].shape, a.inputs[i].shape) << text;
  }
  const json j = parse(R"({"input": [{"name": "x", "data_type": "TYPE_INT64", "dims": [16]}]})").to_json();
  EXPECT_EQ(j["name"], "m");
  EXPECT_EQ(j["input"][0], json::parse(R"({"name": "x", "data_type": "TYPE_INT64", "dims": [16]})"));
}

TEST(ModelConfigTest, LoadFromFolder) {
  namespace fs = std::filesystem;
  const fs::path dir = hg::test::temp_dir("ModelConfigLoad") / "mlp";
  fs::create_directories(dir);
  EXPECT_EQ(ModelConfig::load(dir).name, "mlp");  // no config.json: the defaults
  std::ofstream(dir / "config.json") << R"({"max_batch_size": 4})";
  EXPECT_EQ(ModelConfig::load(dir).max_batch_size, 4);
  std::ofstream(dir / "config.json") << R"({"max_batch_size": 4,})";
  const std::string bad = hg::test::error_of<hg::FormatError>([&] { ModelConfig::load(dir); });
  EXPECT_THAT(bad, HasSubstr("malformed JSON in " + (dir / "config.json").string() + ": expected a string key"));
  std::ofstream(dir / "config.json") << R"({"max_batch_size": -4})";
  EXPECT_THAT(hg::test::error_of<hg::FormatError>([&] { ModelConfig::load(dir); }),
              HasSubstr((dir / "config.json").string() + ": max_batch_size must be"));
  fs::remove_all(dir.parent_path());
}

TEST(VersionPolicyTest, Select) {
  VersionPolicy latest;
  EXPECT_EQ(latest.select({1, 3, 2}), (std::vector<int64_t>{3}));
  EXPECT_TRUE(latest.select({}).empty());
  latest.num_versions = 2;
  EXPECT_EQ(latest.select({1, 3, 2, 3}), (std::vector<int64_t>{3, 2}));
  latest.num_versions = 5;
  EXPECT_EQ(latest.select({2, 1}), (std::vector<int64_t>{2, 1}));
  VersionPolicy all;
  all.kind = VersionPolicy::Kind::All;
  EXPECT_EQ(all.select({5, 1, 9}), (std::vector<int64_t>{9, 5, 1}));
  VersionPolicy specific;
  specific.kind = VersionPolicy::Kind::Specific;
  specific.versions = {1, 3, 7};
  EXPECT_EQ(specific.select({1, 2, 3}), (std::vector<int64_t>{3, 1}));
  EXPECT_TRUE(specific.select({2}).empty());
}

}  // namespace
