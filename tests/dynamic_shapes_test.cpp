// Dynamic dimensions besides the batch, end to end: the Predictor captures one set of batch
// buckets per input signature (LRU-bounded, counted), the dynamic batcher runs only jobs of one
// signature together, and hgraph-serve answers a BERT classifier exported with a dynamic
// sequence (scripts/testdata_onnx.py's bert_seq_op17) as PyTorch does at every length, with 400s
// naming the dimension and the signature families in /metrics and the statistics; sequence
// buckets pad a masked tagger's requests and strip its answers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/predictor.h"
#include "models/safetensors.h"
#include "server/batcher.h"
#include "server/client.h"
#include "tests/errors.h"
#include "tests/golden.h"
#include "tests/server_process.h"
#include "tests/wait.h"

#ifndef HG_TESTDATA_DIR
#error "HG_TESTDATA_DIR must be defined (tests/CMakeLists.txt)"
#endif

namespace hg {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using json = nlohmann::json;
using namespace std::chrono_literals;

fs::path data_dir() { return fs::path(HG_TESTDATA_DIR) / "onnx"; }

// PyTorch's ids and logits for one batch of the dynamic-sequence BERT classifier.
struct Sample {
  Shape shape;  // [batch, seq]
  std::vector<int64_t> ids;
  std::vector<float> logits;
};

std::vector<Sample> references() {
  const auto f = safetensors::read(data_dir() / "bert_seq_op17.safetensors");
  std::vector<Sample> r;
  for (const auto& [in, out] : {std::pair{"input", "output"}, std::pair{"input_short", "output_short"}}) {
    const auto& x = *f.find(in);
    const auto& y = *f.find(out);
    Sample s{x.shape, std::vector<int64_t>(x.data.size() / 8), std::vector<float>(y.data.size() / 4)};
    std::memcpy(s.ids.data(), x.data.data(), x.data.size());
    std::memcpy(s.logits.data(), y.data.data(), y.data.size());
    r.push_back(std::move(s));
  }
  return r;
}

// A repository holding the export as <name>/1/model.onnx, with `config` as its config.json.
fs::path repository(const std::string& name, const json& config) {
  const fs::path repo = fs::temp_directory_path() / ("hg_dynamic_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(repo);
  fs::create_directories(repo / name / "1");
  fs::copy_file(data_dir() / "bert_seq_op17.onnx", repo / name / "1" / "model.onnx");
  std::ofstream(repo / name / "config.json") << config.dump();
  return repo;
}

TEST(DynamicShapes, PredictorCapturesPerSignatureWithinItsLimit) {
  const fs::path repo = repository("bert", json::object());
  auto p = models::Predictor::load(repo / "bert" / "1", {.batch_buckets = {1, 4}, .max_signatures = 1});
  EXPECT_EQ(p->input_size(0), -1);
  EXPECT_TRUE(p->capture_all().empty()) << "a dynamic model captures per signature, on first use";
  const std::vector<Sample> refs = references();
  for (int round = 0; round < 2; ++round)
    for (const Sample& s : refs) {
      const Shape sample{s.shape[1]};
      ASSERT_EQ(p->output_shapes({sample}), (std::vector<Shape>{{2}}));
      std::vector<float> out(s.logits.size());
      p->run({s.ids.data()}, s.shape[0], {out.data()}, {sample});
      test::expect_close(out, s.logits, 1e-4, "sequence " + std::to_string(s.shape[1]), 1e-5);
    }
  const models::SignatureStats st = p->signature_stats();
  EXPECT_EQ(st.live, 1u);
  EXPECT_EQ(st.seen, 4u) << "max_signatures 1: the two lengths evict each other";
  EXPECT_EQ(st.evictions, 3u);
  EXPECT_GE(st.captures, 4u);
  EXPECT_GT(st.bytes, 0u);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { p->output_shapes({{0}}); }),
              HasSubstr("input 'input': dimension 1 is 0; the model takes 1 or more"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { p->output_shapes({{4, 4}}); }),
              HasSubstr("input 'input': a sample has 2 dimensions, the model takes 1"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { p->output_shapes({}); }), HasSubstr("give the sample shape"));
  fs::remove_all(repo);
}

// A stand-in with a dynamic dimension: y = 2x per element, whatever the sample shape.
class Doubler : public server::ServedModel {
 public:
  Doubler() {
    spec_.name = "doubler";
    spec_.inputs = {{"x", "FP32", {-1, -1}}};
    spec_.outputs = {{"y", "FP32", {-1, -1}}};
  }
  const models::PackageSpec& spec() const override { return spec_; }
  int64_t input_size(size_t) const override { return -1; }
  int64_t output_size(size_t) const override { return -1; }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) override { return in; }
  std::vector<int64_t> buckets() const override { return {8}; }
  void run(const std::vector<const void*>& in, int64_t batch, const std::vector<void*>& out,
           const std::vector<Shape>& shapes) override {
    {
      std::lock_guard lk(mu);
      runs.push_back({batch, shapes.at(0).at(0)});
    }
    const int64_t n = batch * shapes.at(0).at(0);
    for (int64_t k = 0; k < n; ++k) static_cast<float*>(out[0])[k] = 2 * static_cast<const float*>(in[0])[k];
  }
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> runs;  // (batch, length)

 private:
  models::PackageSpec spec_;
};

// Jobs of lengths 3, 5, 3, 5 queued within one delay: two runs, each of one length (Triton's
// rule), every job answered with its own data; a job without shapes is refused.
TEST(DynamicShapes, BatcherRunsOnlyJobsOfOneSignatureTogether) {
  auto model = std::make_shared<Doubler>();
  server::BatcherConfig cfg;
  cfg.max_batch_size = 8;
  cfg.max_queue_delay_us = 200'000;
  server::DynamicBatcher b(model, cfg);
  std::mutex mu;
  int answered = 0;
  std::vector<std::shared_ptr<server::BatchJob>> jobs;
  for (int64_t len : {3, 5, 3, 5}) {
    auto j = std::make_shared<server::BatchJob>();
    std::vector<float> x(static_cast<size_t>(len));
    for (int64_t k = 0; k < len; ++k) x[k] = static_cast<float>(len * 10 + k);
    j->inputs = {std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4)};
    j->shapes = {{len}};
    j->done = [&mu, &answered](server::BatchJob&) {
      std::lock_guard lk(mu);
      ++answered;
    };
    jobs.push_back(j);
    ASSERT_EQ(b.submit(j), server::DynamicBatcher::Submit::Queued);
  }
  ASSERT_TRUE(test::wait_until([&] {
    std::lock_guard lk(mu);
    return answered == 4;
  }, test::kWaitLimit, "four dynamic-shape jobs to be answered"));
  {
    std::lock_guard lk(model->mu);
    using Run = std::pair<int64_t, int64_t>;
    EXPECT_THAT(model->runs, ::testing::UnorderedElementsAre(Run{2, 3}, Run{2, 5}));
  }
  for (const auto& j : jobs) {
    ASSERT_EQ(j->status, 200) << j->error;
    const int64_t len = j->shapes[0][0];
    EXPECT_EQ(j->output_shapes, (std::vector<Shape>{{len}}));
    std::vector<float> y(static_cast<size_t>(len));
    ASSERT_EQ(j->outputs[0].size(), y.size() * 4);
    std::memcpy(y.data(), j->outputs[0].data(), j->outputs[0].size());
    for (int64_t k = 0; k < len; ++k) EXPECT_EQ(y[k], 2.0f * static_cast<float>(len * 10 + k));
  }
  auto bad = std::make_shared<server::BatchJob>();
  bad->inputs = {std::string(12, '\0')};
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { b.submit(bad); }), HasSubstr("must give the sample shape"));
  bad->shapes = {{4}};
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { b.submit(bad); }), HasSubstr("12 bytes for batch 1, expected 16"));
}

// hgraph-serve: metadata says -1 for the sequence, requests of two lengths (and one with both
// lengths mixed in a burst) match PyTorch, a length of 0 is a 400 naming the dimension, and the
// signatures show in /metrics and the statistics.
TEST(DynamicShapes, ServerAnswersEverySequenceLength) {
  const fs::path repo = repository("bert_seq", {{"max_batch_size", 4}, {"batch_buckets", {1, 4}}, {"max_signatures", 4}});
  const std::vector<Sample> refs = references();
  {
    test::ServerProcess server({"--model-repository", repo.string()});
    server::Client c(server.url(), 30s);
    const json meta = c.model_metadata("bert_seq");
    EXPECT_EQ(meta["inputs"][0]["shape"], json::parse("[-1,-1]"));
    EXPECT_EQ(meta["outputs"][0]["shape"], json::parse("[-1,2]"));
    for (const Sample& s : refs) {
      const json body = {{"inputs", {{{"name", "input"}, {"datatype", "INT64"}, {"shape", s.shape}, {"data", s.ids}}}}};
      server::RawResponse r = c.request("POST", "/v2/models/bert_seq/infer", body.dump());
      ASSERT_EQ(r.status, 200) << r.body;
      const json out = json::parse(r.body)["outputs"][0];
      EXPECT_EQ(out["shape"], json::array({s.shape[0], 2}));
      test::expect_close(out["data"].get<std::vector<float>>(), s.logits, 1e-4,
                         "sequence " + std::to_string(s.shape[1]) + " over HTTP", 1e-5);
    }
    const json empty = {{"inputs", {{{"name", "input"}, {"datatype", "INT64"}, {"shape", {1, 0}}, {"data", json::array()}}}}};
    server::RawResponse r = c.request("POST", "/v2/models/bert_seq/infer", empty.dump());
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_THAT(r.body, HasSubstr("dimension 1 must be 1 or more"));
    const std::string metrics = c.request("GET", "/metrics", "").body;
    EXPECT_THAT(metrics, HasSubstr("hg_model_signatures{model=\"bert_seq\",version=\"1\"} 2"));
    EXPECT_THAT(metrics, HasSubstr("hg_model_signatures_seen_total{model=\"bert_seq\",version=\"1\"} 2"));
    EXPECT_THAT(metrics, HasSubstr("hg_model_signature_evictions_total{model=\"bert_seq\",version=\"1\"} 0"));
    const json stats = json::parse(c.request("GET", "/v2/models/bert_seq/stats", "").body);
    EXPECT_EQ(stats["model_stats"][0]["signature_stats"]["live"], 2);
    EXPECT_GE(stats["model_stats"][0]["signature_stats"]["captures"].get<int>(), 2);
    EXPECT_EQ(server.terminate(20s), 0);
  }
  fs::remove_all(repo);
}

// Sequence buckets: requests of lengths 7, 11 and 16 are padded to the buckets 8 and 16 (ids
// with pad_value, the attention mask with zeros), their per-token logits cut back to their own
// length, and each answer equals PyTorch's unpadded one within 1e-5; one signature per bucket.
// A length above the largest bucket, or inputs that disagree on it, is a 400 naming them.
TEST(DynamicShapes, SequenceBucketsPadMaskAndStrip) {
  namespace fs = std::filesystem;
  const fs::path repo = fs::temp_directory_path() / ("hg_dynamic_tagger_" + std::to_string(getpid()));
  fs::remove_all(repo);
  fs::create_directories(repo / "tagger" / "1");
  fs::copy_file(data_dir() / "masked_tagger_op17.onnx", repo / "tagger" / "1" / "model.onnx");
  const json padding = {{"dims", {{"input_ids", 1}, {"attention_mask", 1}}}, {"buckets", {8, 16}},
                        {"pad_value", 0}, {"mask", "attention_mask"}, {"strip", {{"logits", 1}}}};
  std::ofstream(repo / "tagger" / "config.json") << json{{"max_batch_size", 4}, {"batch_buckets", {1, 4}},
                                                         {"padding", padding}}.dump();
  const auto f = safetensors::read(data_dir() / "masked_tagger_op17.safetensors");
  {
    test::ServerProcess server({"--model-repository", repo.string()});
    server::Client c(server.url(), 30s);
    EXPECT_EQ(c.model_metadata("tagger")["inputs"][0]["shape"], json::parse("[-1,-1]"));
    EXPECT_EQ(json::parse(c.request("GET", "/v2/models/tagger/config", "").body)["padding"]["buckets"], json::parse("[8,16]"));
    auto request = [&](const Shape& shape, const std::vector<int64_t>& ids, const Shape& mask_shape) {
      const std::vector<int64_t> mask(static_cast<size_t>(mask_shape[0] * mask_shape[1]), 1);
      const json body = {{"inputs", {{{"name", "input_ids"}, {"datatype", "INT64"}, {"shape", shape}, {"data", ids}},
                                     {{"name", "attention_mask"}, {"datatype", "INT64"}, {"shape", mask_shape}, {"data", mask}}}}};
      return c.request("POST", "/v2/models/tagger/infer", body.dump());
    };
    for (const char* key : {"a", "b", "c"}) {
      const auto& ids = *f.find(std::string("ids_") + key);
      const auto& logits = *f.find(std::string("logits_") + key);
      std::vector<int64_t> id_values(ids.data.size() / 8);
      std::memcpy(id_values.data(), ids.data.data(), ids.data.size());
      std::vector<float> want(logits.data.size() / 4);
      std::memcpy(want.data(), logits.data.data(), logits.data.size());
      server::RawResponse r = request(ids.shape, id_values, ids.shape);
      ASSERT_EQ(r.status, 200) << r.body;
      const json out = json::parse(r.body)["outputs"][0];
      EXPECT_EQ(out["shape"], json::array({ids.shape[0], ids.shape[1], 5})) << key;
      test::expect_close(out["data"].get<std::vector<float>>(), want, 1e-5, std::string("length ") +
                         std::to_string(ids.shape[1]) + " padded", 1e-6);
    }
    server::RawResponse r = request({1, 17}, std::vector<int64_t>(17, 1), {1, 17});
    EXPECT_EQ(r.status, 400);
    EXPECT_THAT(r.body, HasSubstr("dimension 1 is 17; the model takes 1 to 16"));
    r = request({1, 5}, std::vector<int64_t>(5, 1), {1, 6});
    EXPECT_EQ(r.status, 400);
    EXPECT_THAT(r.body, HasSubstr("the padded inputs must agree"));
    const json stats = json::parse(c.request("GET", "/v2/models/tagger/stats", "").body);
    // Warm-up captured both sequence buckets at both batch buckets; the requests added nothing.
    EXPECT_EQ(stats["model_stats"][0]["signature_stats"]["seen"], 2) << "lengths 7 and 11 .. 16 share two buckets";
    EXPECT_EQ(stats["model_stats"][0]["signature_stats"]["captures"], 4);
    EXPECT_EQ(server.terminate(20s), 0);
  }
  fs::remove_all(repo);
}

}  // namespace
}  // namespace hg
