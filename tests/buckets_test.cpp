// Batch buckets: the lists, padding and stripping in Predictor, the unpadded path above the
// largest bucket, memory budgets, the disk cache across Predictors, and hgraph-capture.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "engine/autograd.h"
#include "engine/error.h"
#include "golden.h"
#include "test_env.h"
#include "wait.h"
#include "graphs/disk_cache.h"
#include "graphs/graph_cache.h"
#include "models/buckets.h"
#include "models/module.h"
#include "models/package.h"
#include "models/predictor.h"

#ifndef HG_CAPTURE_BIN
#error "HG_CAPTURE_BIN must be defined as the path of hgraph-capture"
#endif

using namespace hg;
using namespace hg::models;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

namespace {

const fs::path kDigits = fs::path(HG_SOURCE_DIR) / "models/repository/digits_mlp/1";

using hg::test::LogCapture;
using hg::test::temp_dir;

std::vector<float> digits_input(int64_t batch) {
  std::vector<float> x(static_cast<size_t>(batch * 64));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 29) % 17) / 16.0f;
  return x;
}

// The package's module run eagerly on the cpu at exactly `batch`: the unpadded reference.
std::vector<float> digits_reference(const std::vector<float>& x, int64_t batch) {
  std::unique_ptr<Module> net;
  load_package(kDigits, &net);
  net->eval();
  NoGradGuard no_grad;
  return net->forward(Tensor::from_vector(x, {batch, 64})).to_vector();
}

std::vector<float> predict(Predictor& p, int64_t batch) {
  const auto x = digits_input(batch);
  std::vector<float> out(static_cast<size_t>(batch * 10), -1.0f);
  p.run({x.data()}, batch, {out.data()});
  return out;
}

TEST(Buckets, LinearLists) {
  EXPECT_EQ(linear_buckets(1, 8, 1), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(linear_buckets(8, 32, 8), (std::vector<int64_t>{8, 16, 24, 32}));
  EXPECT_EQ(linear_buckets(4, 30, 8), (std::vector<int64_t>{4, 12, 20, 28, 30}));  // max kept
  EXPECT_EQ(linear_buckets(5, 5, 3), (std::vector<int64_t>{5}));
  EXPECT_THROW(linear_buckets(0, 8, 1), InvalidArgument);
  EXPECT_THROW(linear_buckets(9, 8, 1), InvalidArgument);
  EXPECT_THROW(linear_buckets(1, 8, 0), InvalidArgument);
  EXPECT_THROW(linear_buckets(1, 1 << 20, 1), InvalidArgument);  // more than kMaxBuckets graphs
  EXPECT_EQ(linear_buckets(1, INT64_MAX, INT64_MAX / 2).back(), INT64_MAX);  // no overflow at the top
}

TEST(Buckets, ExponentialLists) {
  EXPECT_EQ(exponential_buckets(1, 64), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(exponential_buckets(3, 20), (std::vector<int64_t>{3, 4, 8, 16, 20}));
  EXPECT_EQ(exponential_buckets(4, 4), (std::vector<int64_t>{4}));
  EXPECT_EQ(exponential_buckets(1, 100).size(), 8u);  // 1..64, then 100
  EXPECT_THROW(exponential_buckets(0, 4), InvalidArgument);
  EXPECT_THROW(exponential_buckets(8, 4), InvalidArgument);
  // Near 2^63 nothing overflows or spins: the powers of two stop below max.
  const std::vector<int64_t> all = exponential_buckets(1, INT64_MAX);
  EXPECT_EQ(all.size(), 64u);  // 1, 2, ..., 2^62, then INT64_MAX
  EXPECT_EQ(all[62], int64_t{1} << 62);
  EXPECT_EQ(all.back(), INT64_MAX);
  EXPECT_EQ(exponential_buckets(4611686018427387905, INT64_MAX),
            (std::vector<int64_t>{4611686018427387905, INT64_MAX}));
  EXPECT_EQ(exponential_buckets(INT64_MAX, INT64_MAX), (std::vector<int64_t>{INT64_MAX}));
  EXPECT_EQ(parse_buckets("exp:1:9223372036854775807"), all);
}

TEST(Buckets, ParsesSpecs) {
  EXPECT_EQ(parse_buckets("8,1,4,2,4"), (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(parse_buckets("linear:1:8:1"), linear_buckets(1, 8, 1));
  EXPECT_EQ(parse_buckets("linear:2:10:4"), (std::vector<int64_t>{2, 6, 10}));
  EXPECT_EQ(parse_buckets("linear:1:3"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(parse_buckets("exp:1:64"), exponential_buckets(1, 64));
  const std::pair<const char*, const char*> bad[] = {
      {"", "batch size ''"},         {"1,,2", "batch size ''"},        {"1,x", "batch size 'x'"},
      {"0,1", "batch size '0'"},     {"linear:1", "linear:START:MAX"}, {"linear:1:8:0", "STEP '0'"},
      {"exp:1", "exp:MIN:MAX"},      {"exp:a:4", "MIN 'a'"},           {"pow:1:4", "expected a list"},
      {"exp:8:4", "need 1 <= min"},  {"-3", "batch size '-3'"},
  };
  for (auto [spec, message] : bad) {
    SCOPED_TRACE(spec);
    try {
      parse_buckets(spec);
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(message));
    }
  }
}

TEST(Buckets, PicksTheSmallestBucketThatFits) {
  const std::vector<int64_t> b{1, 2, 4, 8};
  EXPECT_EQ(pick_bucket(b, 1), 1);
  EXPECT_EQ(pick_bucket(b, 3), 4);
  EXPECT_EQ(pick_bucket(b, 8), 8);
  EXPECT_EQ(pick_bucket(b, 9), std::nullopt);
  EXPECT_EQ(normalize_buckets({4, 1, 4}), (std::vector<int64_t>{1, 4}));
  EXPECT_THROW(normalize_buckets({}), InvalidArgument);
  EXPECT_THROW(normalize_buckets({2, 0}), InvalidArgument);
}

TEST(BucketsPredictor, PadsToTheBucketAndStripsThePadding) {
  graphs::set_disk_cache(std::nullopt);
  auto p = Predictor::load(kDigits, {.device = Device::hpu(0), .batch_buckets = {2, 8, 4}});
  EXPECT_EQ(p->buckets(), (std::vector<int64_t>{2, 4, 8}));
  const auto info = p->capture_all();
  ASSERT_EQ(info.size(), 3u);
  for (const auto& b : info) {
    EXPECT_TRUE(b.captured);
    EXPECT_FALSE(b.disk_hit);
    EXPECT_GT(b.arena_bytes + b.constant_bytes, 0u);
    EXPECT_GE(b.buffer_bytes, b.arena_bytes);
  }
  for (int64_t batch : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE(batch);
    const auto out = predict(*p, batch);  // exactly batch * 10 values written, padding dropped
    test::expect_close(out, digits_reference(digits_input(batch), batch), 1e-5, "padded replay == eager");
  }
}

TEST(BucketsPredictor, AboveTheLargestBucketRunsUnpaddedWithOneWarningPerSize) {
  graphs::set_disk_cache(std::nullopt);
  auto p = Predictor::load(kDigits, {.device = Device::hpu(0), .batch_buckets = {1, 2}});
  p->capture_all();
  LogCapture log;
  for (int64_t batch : {5, 5, 7}) {
    SCOPED_TRACE(batch);
    test::expect_close(predict(*p, batch), digits_reference(digits_input(batch), batch), 1e-5, "unpadded == eager");
  }
  const std::string text = log.text();
  EXPECT_THAT(text, HasSubstr("batch 5 is above the largest bucket 2"));
  EXPECT_THAT(text, HasSubstr("batch 7 is above the largest bucket 2"));
  EXPECT_EQ(text.find("batch 5"), text.rfind("batch 5")) << "warned twice:\n" << text;
  test::expect_close(predict(*p, 2), digits_reference(digits_input(2), 2), 1e-5, "bucket after unpadded");
}

TEST(BucketsPredictor, MemoryBudgetLeavesOutTheLargerBuckets) {
  graphs::set_disk_cache(std::nullopt);
  // The second predictor's buckets cost what the budgeted one's will: both share the first one's
  // packed weight copies (engine/packed_weights.h).
  auto first = Predictor::load(kDigits, {.device = Device::hpu(0), .batch_buckets = {1, 2, 4, 8}});
  auto full = Predictor::load(kDigits, {.device = Device::hpu(0), .batch_buckets = {1, 2, 4, 8}});
  first->capture_all();
  const auto all = full->capture_all();
  const size_t two = all[0].arena_bytes + all[0].constant_bytes + all[1].arena_bytes + all[1].constant_bytes;
  auto p = Predictor::load(kDigits, {.device = Device::hpu(0), .batch_buckets = {1, 2, 4, 8}});
  std::vector<int64_t> seen;
  const auto info = p->capture_all({.memory_budget = two, .progress = [&](size_t, size_t, int64_t b) {
                                      if (b) seen.push_back(b);
                                    }, .signatures = {}});
  ASSERT_EQ(info.size(), 4u);
  EXPECT_TRUE(info[0].captured && info[1].captured);
  EXPECT_FALSE(info[2].captured || info[3].captured);
  // 4 is predicted from 2 (its arena twice 2's) to go over: never captured, it stops the warmup.
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(p->buckets(), (std::vector<int64_t>{1, 2}));
  LogCapture log;
  test::expect_close(predict(*p, 3), digits_reference(digits_input(3), 3), 1e-5, "left-out bucket runs unpadded");
  EXPECT_THAT(log.text(), HasSubstr("batch 3 is above the largest bucket 2"));
}

TEST(BucketsPredictor, SecondPredictorCapturesFromTheDiskCache) {
  const fs::path dir = temp_dir("predictor_cache");
  graphs::set_disk_cache(graphs::DiskCacheConfig{dir, 16 << 20});
  std::vector<std::vector<float>> outs;
  for (int k = 0; k < 2; ++k) {
    auto p = Predictor::load(kDigits, {.device = Device::hpu(0), .batch_buckets = {1, 4}});
    for (const auto& b : p->capture_all()) EXPECT_EQ(b.disk_hit, k == 1) << "bucket " << b.batch;
    outs.push_back(predict(*p, 3));
  }
  test::expect_close(outs[1], outs[0], 0, "warm == cold", 0);
  graphs::set_disk_cache(std::nullopt);
  fs::remove_all(dir);
}

// hgraph-capture's stdout; *status its exit code (-1 when killed or timed out: a test failure).
std::string run_command(const std::string& cmd, int* status) {
  const test::CommandRun r = test::run_command(cmd, std::chrono::seconds(300), "hgraph-capture");
  *status = r.exit_code;
  return r.output;
}

TEST(BucketsCaptureTool, CapturesEveryBucketWritesTheCacheAndStartsWarm) {
  const fs::path dir = temp_dir("capture_tool");
  const fs::path cache = dir / "cache", dump = dir / "graphs.txt", err = dir / "stderr.txt";
  const std::string base = std::string(HG_CAPTURE_BIN) + " --model " + kDigits.string() + " --cache " +
                           cache.string() + ",16";
  int status = -1;
  const std::string cold = run_command(base + " --buckets exp:1:8 --dump-graph " + dump.string() + " 2>" + err.string(), &status);
  ASSERT_EQ(status, 0) << cold;
  EXPECT_THAT(cold, HasSubstr("bucket"));
  EXPECT_THAT(cold, HasSubstr("compile ms"));
  EXPECT_THAT(cold, HasSubstr("arena MB"));
  EXPECT_THAT(cold, HasSubstr("sum MB"));
  EXPECT_THAT(cold, HasSubstr("captured 4/4 buckets"));
  for (const char* row : {R"(\n +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +no\n)", R"(\n +8 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +no\n)"})
    EXPECT_TRUE(std::regex_search(cold, std::regex(row))) << row << "\n" << cold;
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(cache)) entries += e.path().extension() == ".hgg" ? 1 : 0;
  EXPECT_EQ(entries, 4u);
  EXPECT_GT(fs::file_size(dump), 0u);
  std::ifstream e(err);
  const std::string progress((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  EXPECT_THAT(progress, HasSubstr("capturing"));

  const std::string warm = run_command(base + " --batch-sizes 1,2,4,8 --no-progress --profile 5", &status);
  ASSERT_EQ(status, 0) << warm;
  EXPECT_THAT(warm, HasSubstr("captured 4/4 buckets"));
  // The profile of the largest bucket: the MLP's linears (with their fused ReLU), per op and per shape.
  EXPECT_THAT(warm, HasSubstr("profile: bucket 8, 5 runs"));
  EXPECT_TRUE(std::regex_search(warm, std::regex(R"(\n +[0-9.]+%  linear\[linear\+relu\] F32\n)"))) << warm;
  EXPECT_TRUE(std::regex_search(warm, std::regex(R"(\n +[0-9.]+% +[0-9.]+ us  linear\[linear\+relu\] F32 \[8, 64\] x5\n)")))
      << warm;
  EXPECT_TRUE(std::regex_search(warm, std::regex(R"(\n +8 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +yes\n)"))) << warm;
  EXPECT_THAT(warm, HasSubstr("4 hits, 0 written"));

  fs::path victim;
  for (const auto& e : fs::directory_iterator(cache)) victim = e.path();
  fs::resize_file(victim, fs::file_size(victim) / 2);  // a truncated entry: warned on stderr, rebuilt
  const std::string rebuilt = run_command(base + " --buckets exp:1:8 --no-progress 2>" + err.string(), &status);
  ASSERT_EQ(status, 0) << rebuilt;
  EXPECT_THAT(rebuilt, HasSubstr("3 hits, 1 written, 1 invalid removed"));
  EXPECT_THAT(rebuilt, Not(HasSubstr("warning")));
  std::ifstream e2(err);
  const std::string warning((std::istreambuf_iterator<char>(e2)), std::istreambuf_iterator<char>());
  EXPECT_THAT(warning, HasSubstr("removing invalid entry " + victim.string()));

  const std::string budget = run_command(base + " --buckets linear:1:4 --memory-budget 0.000001 --no-progress", &status);
  ASSERT_EQ(status, 0) << budget;
  EXPECT_THAT(budget, HasSubstr("captured 0/4 buckets"));
  EXPECT_THAT(budget, HasSubstr("left out (memory budget"));
  EXPECT_THAT(budget, HasSubstr(": 1 2 3 4"));

  // hgraph-serve with the same cache starts hot (its default buckets are 1..32).
  ASSERT_EQ((run_command(base + " --buckets exp:1:32 --no-progress", &status), status), 0);
  const std::string serve = run_command("HG_GRAPH_CACHE=" + cache.string() + " timeout -s TERM 5 " + HG_SERVE_BIN +
                                            " --model-repository " + kDigits.parent_path().parent_path().string() +
                                            " --host 127.0.0.1 --port 0 2>&1",
                                        &status);
  EXPECT_THAT(serve, HasSubstr("6 buckets captured (6 from the graph cache)")) << serve;

  const std::string bad = run_command(base + " --buckets exp:0:4 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_THAT(bad, HasSubstr("MIN '0'"));
  fs::remove_all(dir);
}

// A model with a dynamic sequence and sequence buckets in its config.json: the tool captures the
// grid (every sequence bucket x every batch bucket), the signatures beyond max_signatures are
// reported left out, and without "padding" it says there is nothing to capture ahead.
TEST(BucketsCaptureTool, CapturesTheSequenceGridOfItsConfig) {
  const fs::path dir = temp_dir("capture_grid");
  fs::create_directories(dir / "tagger" / "1");
  fs::copy_file(fs::path(HG_TESTDATA_DIR) / "onnx" / "masked_tagger_op17.onnx", dir / "tagger" / "1" / "model.onnx");
  const std::string cmd = std::string(HG_CAPTURE_BIN) + " --no-progress --buckets 1,4 --model " + (dir / "tagger" / "1").string();
  int status = -1;
  std::string out = run_command(cmd, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("nothing to capture ahead"));
  std::ofstream(dir / "tagger" / "config.json")
      << R"({"padding": {"dims": {"input_ids": 1, "attention_mask": 1}, "buckets": [8, 16, 32],)"
      << R"( "mask": "attention_mask", "strip": {"logits": 1}}, "max_signatures": 2})";
  out = run_command(cmd, &status);
  ASSERT_EQ(status, 0) << out;
  for (const char* row : {R"(\n +1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +no +\[8\] \[8\]\n)",
                          R"(\n +4 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +no +\[16\] \[16\]\n)"})
    EXPECT_TRUE(std::regex_search(out, std::regex(row))) << row << "\n" << out;
  EXPECT_THAT(out, HasSubstr("captured 4/6 buckets"));
  EXPECT_THAT(out, HasSubstr("max_signatures 2): [1 x [32] [32]] [4 x [32] [32]]"));
  fs::remove_all(dir);
}

// A reduced precision in config.json: the tool captures in it and prints the agreement with FP32
// (on generated token ids and masks at the first padded signature); below a minimum it fails.
TEST(BucketsCaptureTool, ChecksAReducedPrecisionAsTheServerWould) {
  const fs::path dir = temp_dir("capture_precision");
  fs::create_directories(dir / "tagger" / "1");
  fs::copy_file(fs::path(HG_TESTDATA_DIR) / "onnx" / "masked_tagger_op17.onnx", dir / "tagger" / "1" / "model.onnx");
  const std::string cmd = std::string(HG_CAPTURE_BIN) + " --no-progress --buckets 1,4 --model " + (dir / "tagger" / "1").string();
  const std::string padding =
      R"("padding": {"dims": {"input_ids": 1, "attention_mask": 1}, "buckets": [8, 16], "mask": "attention_mask"})";
  int status = -1;
  for (const char* precision : {"bf16", "int8"}) {
    std::ofstream(dir / "tagger" / "config.json")
        << "{" << padding << R"(, "precision": ")" << precision << R"(", "precision_check": {"samples": 8}})";
    const std::string out = run_command(cmd, &status);
    ASSERT_EQ(status, 0) << out;
    EXPECT_THAT(out, HasSubstr("model 'tagger': " + std::string(precision) + " against fp32 on 8 samples: top-1 agreement"));
  }
  std::ofstream(dir / "tagger" / "config.json")
      << "{" << padding << R"(, "precision": "bf16", "precision_check": {"samples": 8, "max_relative_error": 1e-9}})";
  const std::string out = run_command(cmd + " 2>&1", &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("above precision_check.max_relative_error"));
  fs::remove_all(dir);
}

}  // namespace
