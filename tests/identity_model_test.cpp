// The identity backend: every fixed-size datatype goes through the dynamic batcher unchanged,
// and specs it cannot echo are refused with errors that name the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <random>

#include "server/batcher.h"
#include "server/identity_model.h"
#include "tests/errors.h"
#include "tests/wait.h"

namespace hg::server {
namespace {

using ::testing::HasSubstr;

const char* const kFixedTypes[] = {"BOOL",  "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
                                   "INT32", "INT64", "FP16",   "FP32",   "FP64",   "BF16"};
const size_t kFixedSizes[] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 2};

models::PackageSpec every_type_spec() {
  models::PackageSpec spec;
  spec.name = "echo";
  for (size_t i = 0; i < std::size(kFixedTypes); ++i) {
    Shape shape = {-1, static_cast<int64_t>(i % 3 + 1), 2};
    spec.inputs.push_back({"IN_" + std::string(kFixedTypes[i]), kFixedTypes[i], shape});
    spec.outputs.push_back({"OUT_" + std::string(kFixedTypes[i]), kFixedTypes[i], shape});
  }
  return spec;
}

TEST(IdentityModel, EveryFixedSizeDatatypeComesBackUnchangedThroughTheBatcher) {
  auto model = make_identity_model(every_type_spec());
  EXPECT_TRUE(model->buckets().empty());
  EXPECT_EQ(model->input_size(2), 6);
  EXPECT_EQ(model->output_size(2), 6);
  BatcherConfig cfg;
  cfg.max_batch_size = 8;
  cfg.max_queue_delay_us = 3'000'000'000;  // the four jobs below fill exactly one run of 8
  DynamicBatcher batcher(model, cfg);

  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::mt19937 rng(5);
  std::vector<std::shared_ptr<BatchJob>> jobs;
  for (int64_t batch : {1, 2, 3, 2}) {
    auto job = std::make_shared<BatchJob>();
    job->batch = batch;
    for (size_t i = 0; i < std::size(kFixedTypes); ++i) {
      std::string bytes(static_cast<size_t>(batch) * model->input_size(i) * kFixedSizes[i], '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      job->inputs.push_back(std::move(bytes));
    }
    job->done = [&](BatchJob&) {
      std::lock_guard lk(mu);
      ++done;
      cv.notify_all();
    };
    jobs.push_back(job);
    ASSERT_EQ(batcher.submit(job), DynamicBatcher::Submit::Queued);
  }
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(hg::test::wait_for(cv, lk, hg::test::kWaitLimit, "the 4 jobs' done() calls", [&] { return done == 4; }));
  }
  for (auto& job : jobs) {
    EXPECT_EQ(job->status, 200) << job->error;
    EXPECT_EQ(job->executed_batch, 8);
    EXPECT_EQ(job->outputs, job->inputs);
  }
}

TEST(IdentityModel, WithoutABatchDimensionTheWholeShapeIsOneSample) {
  models::PackageSpec spec;
  spec.name = "fixed";
  spec.inputs = {{"a", "INT16", {2, 3}}, {"s", "FP64", {}}};
  spec.outputs = {{"x", "INT16", {2, 3}}, {"t", "FP64", {}}};
  auto model = make_identity_model(spec);
  EXPECT_EQ(model->input_size(0), 6);
  EXPECT_EQ(model->output_size(1), 1);
  int16_t a[6] = {1, -2, 3, -4, 5, -6}, x[6] = {};
  double s = 2.5, t = 0;
  model->run({a, &s}, 1, {x, &t});
  EXPECT_TRUE(std::equal(a, a + 6, x));
  EXPECT_EQ(t, 2.5);
}

TEST(IdentityModel, RunChecksItsArguments) {
  auto model = make_identity_model(every_type_spec());
  std::vector<const void*> in(std::size(kFixedTypes), nullptr);
  std::vector<void*> out(std::size(kFixedTypes), nullptr);
  model->run(in, 0, out);  // nothing to copy
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { model->run(in, -1, out); }), HasSubstr("negative batch -1"));
  out.pop_back();
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { model->run(in, 1, out); }), HasSubstr("expects 13 inputs and outputs"));
}

TEST(IdentityModel, RefusesSpecsItCannotEcho) {
  auto error = [](auto edit) {
    models::PackageSpec spec;
    spec.name = "echo";
    spec.inputs = {{"a", "FP32", {-1, 4}}, {"b", "INT64", {-1}}};
    spec.outputs = {{"x", "FP32", {-1, 4}}, {"y", "INT64", {-1}}};
    edit(spec);
    return test::error_of<InvalidArgument>([&] { make_identity_model(spec); });
  };
  using S = models::PackageSpec;
  EXPECT_THAT(error([](S& s) { s.outputs.pop_back(); }), HasSubstr("identity model 'echo': 2 inputs but 1 outputs"));
  EXPECT_THAT(error([](S& s) { s.inputs.clear(), s.outputs.clear(); }), HasSubstr("needs at least one input"));
  EXPECT_THAT(error([](S& s) { s.outputs[1].datatype = "INT32"; }), HasSubstr("output 'y' is INT32 but input 'b' is INT64"));
  EXPECT_THAT(error([](S& s) { s.outputs[0].shape = {-1, 5}; }), HasSubstr("output 'x' shape [-1, 5] differs"));
  EXPECT_THAT(error([](S& s) { s.inputs[1].datatype = s.outputs[1].datatype = "BYTES"; }),
              HasSubstr("input 'b' is BYTES"));
  EXPECT_THAT(error([](S& s) { s.inputs[0].datatype = s.outputs[0].datatype = "FLOAT"; }),
              HasSubstr("input 'a' has unknown datatype 'FLOAT'"));
  EXPECT_THAT(error([](S& s) { s.inputs[1].shape = s.outputs[1].shape = {4}; }),
              HasSubstr("input 'b' shape [4] must start with -1 (the batch dimension) like input 'a'"));
  EXPECT_THAT(error([](S& s) { s.inputs[0].shape = {4}; }),
              HasSubstr("output 'x' shape [-1, 4] must not have a batch dimension, like input 'a'"));
  EXPECT_THAT(error([](S& s) { s.inputs[0].shape = s.outputs[0].shape = {-1, -1}; }),
              HasSubstr("dim 1 is -1 (only the batch dimension may vary)"));
  EXPECT_THAT(error([](S& s) { s.outputs[1].name = "a"; }), HasSubstr("tensor name 'a' is used twice"));
  EXPECT_THAT(error([](S& s) { s.inputs[0].name.clear(); }), HasSubstr("input 0 has no name"));
  EXPECT_THAT(error([](S& s) { s.inputs[0].shape = s.outputs[0].shape = {-1, int64_t{1} << 40, 1 << 20}; }),
              HasSubstr("absurdly large"));
}

}  // namespace
}  // namespace hg::server
