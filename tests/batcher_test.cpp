// DynamicBatcher: per-job outputs after concatenation and splitting, batch targets, the queue
// delay, priorities, deadlines, errors, preserve_ordering, drain and on_batch. Timing enters
// only as generous bounds or as lower bounds the steady clock guarantees; blocking is done with
// a gate inside the model, never with sleeps the outcome depends on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "server/batcher.h"
#include "server/http_error.h"
#include "tests/errors.h"
#include "tests/wait.h"

namespace hg::server {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr auto kWait = hg::test::kWaitLimit;  // bound on every wait: generous for ASan on a loaded machine

// Opens and closes around run(): a test holds the model inside a run to line up the queue.
class Gate {
 public:
  void pass() {
    std::unique_lock lk(mu_);
    ++entered_;
    cv_.notify_all();
    (void)hg::test::wait_for(cv_, lk, kWait, "the test to open the gate in the model's run", [&] { return open_; });
  }
  bool wait_entered(int n) {
    std::unique_lock lk(mu_);
    return hg::test::wait_for(cv_, lk, kWait, std::to_string(n) + " run(s) to enter the gate", [&] { return entered_ >= n; });
  }
  void open() {
    std::lock_guard lk(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool open_ = false;
};

// Declared after the batcher: opens the gate before the batcher drains, so a test that fails
// while the gate is closed ends instead of hanging.
struct OpenAtExit {
  Gate& gate;
  ~OpenAtExit() { gate.open(); }
};

// Inputs x FP32 [-1, 3] and tag INT64 [-1, 1]; outputs y = 2x + 1 (FP32 [-1, 3]) and
// t = [tag, 3 * tag] (INT64 [-1, 2]): each sample's answer is its own and checkable.
class TagModel : public ServedModel {
 public:
  explicit TagModel(std::vector<int64_t> buckets = {}) : buckets_(std::move(buckets)) {
    spec_.name = "tags";
    spec_.inputs = {{"x", "FP32", {-1, 3}}, {"tag", "INT64", {-1, 1}}};
    spec_.outputs = {{"y", "FP32", {-1, 3}}, {"t", "INT64", {-1, 2}}};
  }
  const models::PackageSpec& spec() const override { return spec_; }
  int64_t input_size(size_t i) const override { return i == 0 ? 3 : 1; }
  int64_t output_size(size_t j) const override { return j == 0 ? 3 : 2; }
  std::vector<int64_t> buckets() const override { return buckets_; }

  void run(const std::vector<const void*>& in, int64_t batch, const std::vector<void*>& out,
           const std::vector<Shape>&) override {
    const auto* tags = static_cast<const int64_t*>(in[1]);
    {
      std::lock_guard lk(mu_);
      runs_.push_back(batch);
      seen_.insert(seen_.end(), tags, tags + batch);
    }
    if (gate) gate->pass();
    if (hook) hook(std::vector<int64_t>(tags, tags + batch));
    const auto* x = static_cast<const float*>(in[0]);
    auto* y = static_cast<float*>(out[0]);
    auto* t = static_cast<int64_t*>(out[1]);
    for (int64_t s = 0; s < batch; ++s) {
      for (int k = 0; k < 3; ++k) y[s * 3 + k] = 2 * x[s * 3 + k] + 1;
      t[s * 2] = tags[s];
      t[s * 2 + 1] = 3 * tags[s];
    }
  }

  std::vector<int64_t> runs() const {
    std::lock_guard lk(mu_);
    return runs_;
  }
  std::vector<int64_t> seen() const {
    std::lock_guard lk(mu_);
    return seen_;
  }

  Gate* gate = nullptr;                                    // set before the batcher starts
  std::function<void(const std::vector<int64_t>&)> hook;  // may throw or sleep

 private:
  models::PackageSpec spec_;
  std::vector<int64_t> buckets_;
  mutable std::mutex mu_;
  std::vector<int64_t> runs_, seen_;
};

// A job of `batch` samples tagged first_tag, first_tag + 1, ...
std::shared_ptr<BatchJob> tagged_job(int64_t first_tag, int64_t batch) {
  auto job = std::make_shared<BatchJob>();
  job->batch = batch;
  std::vector<float> x;
  std::vector<int64_t> tags;
  for (int64_t s = 0; s < batch; ++s) {
    tags.push_back(first_tag + s);
    for (int k = 0; k < 3; ++k) x.push_back(static_cast<float>((first_tag + s) * 10 + k));
  }
  job->inputs = {std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float)),
                 std::string(reinterpret_cast<const char*>(tags.data()), tags.size() * sizeof(int64_t))};
  return job;
}

int64_t first_tag(const BatchJob& job) {
  int64_t tag;
  std::memcpy(&tag, job.inputs[1].data(), sizeof tag);
  return tag;
}

// Empty when the job's outputs are exactly what TagModel computes for its samples.
std::string wrong_outputs(const BatchJob& job) {
  if (job.status != 200) return "status " + std::to_string(job.status) + ": " + job.error;
  if (job.outputs.size() != 2) return "outputs: " + std::to_string(job.outputs.size());
  if (job.outputs[0].size() != static_cast<size_t>(job.batch) * 12 || job.outputs[1].size() != static_cast<size_t>(job.batch) * 16)
    return "output sizes";
  for (int64_t s = 0; s < job.batch; ++s) {
    int64_t tag = first_tag(job) + s;
    for (int k = 0; k < 3; ++k) {
      float y;
      std::memcpy(&y, job.outputs[0].data() + (s * 3 + k) * 4, 4);
      if (y != 2 * static_cast<float>(tag * 10 + k) + 1) return "y of tag " + std::to_string(tag);
    }
    int64_t t[2];
    std::memcpy(t, job.outputs[1].data() + s * 16, 16);
    if (t[0] != tag || t[1] != 3 * tag) return "t of tag " + std::to_string(tag);
  }
  return {};
}

// Collects done() calls: the jobs in completion order, and how often each was completed.
class Tracker {
 public:
  std::function<void(BatchJob&)> callback() {
    return [this](BatchJob& job) {
      std::lock_guard lk(mu_);
      order_.push_back(first_tag(job));
      ++calls_[first_tag(job)];
      cv_.notify_all();
    };
  }
  std::shared_ptr<BatchJob> job(int64_t first, int64_t batch = 1) {
    auto j = tagged_job(first, batch);
    j->done = callback();
    return j;
  }
  bool wait(size_t n) {
    std::unique_lock lk(mu_);
    return hg::test::wait_for(cv_, lk, kWait, std::to_string(n) + " done() call(s)", [&] { return order_.size() >= n; });
  }
  std::vector<int64_t> order() {
    std::lock_guard lk(mu_);
    return order_;
  }
  bool each_once() {
    std::lock_guard lk(mu_);
    return std::all_of(calls_.begin(), calls_.end(), [](auto& c) { return c.second == 1; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> order_;
  std::map<int64_t, int> calls_;
};

TEST(Batcher, TargetIsTheLargestBucketNotAboveMaxBatchSize) {
  auto target = [](std::vector<int64_t> buckets, int64_t max_batch) {
    BatcherConfig cfg;
    cfg.max_batch_size = max_batch;
    return DynamicBatcher(std::make_shared<TagModel>(buckets), cfg).target_batch();
  };
  EXPECT_EQ(target({1, 2, 4, 8}, 6), 4);
  EXPECT_EQ(target({1, 2, 4, 8}, 0), 8);
  EXPECT_EQ(target({1, 2, 4, 8}, 32), 8);
  EXPECT_EQ(target({}, 0), 1);
  EXPECT_EQ(target({}, 5), 5);
  EXPECT_EQ(target({8, 16}, 4), 4);
}

TEST(Batcher, ManyThreadsEachGetTheirOwnOutputs) {
  auto model = std::make_shared<TagModel>(std::vector<int64_t>{1, 2, 4, 8});
  std::mutex batches_mu;
  std::vector<int64_t> batches;
  BatcherConfig cfg;
  cfg.max_batch_size = 8;
  cfg.max_queue_delay_us = 500;
  cfg.instances = 2;
  cfg.on_batch = [&](int64_t b, Clock::duration compute) {
    EXPECT_GE(compute.count(), 0);
    std::lock_guard lk(batches_mu);
    batches.push_back(b);
  };
  DynamicBatcher batcher(model, cfg);
  constexpr int kThreads = 8, kJobs = 60;
  std::atomic<int> wrong{0}, completed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kThreads; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(c);
      for (int i = 0; i < kJobs; ++i) {
        auto tracker = std::make_shared<Tracker>();  // outlives the done() call that signals it
        auto job = tagged_job((c * kJobs + i) * 100, std::uniform_int_distribution<int64_t>(1, 5)(rng));
        job->done = [&wrong, tracker, record = tracker->callback()](BatchJob& j) {
          if (!wrong_outputs(j).empty() || j.executed_batch < j.batch || j.compute_end < j.compute_start ||
              j.compute_start < j.enqueued)
            ++wrong;
          record(j);
        };
        ASSERT_EQ(batcher.submit(job), DynamicBatcher::Submit::Queued);
        ASSERT_TRUE(tracker->wait(1));
        ++completed;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(completed, kThreads * kJobs);
  EXPECT_EQ(wrong, 0);
  batcher.drain();
  std::vector<int64_t> runs = model->runs();
  for (int64_t r : runs) EXPECT_LE(r, 8);
  std::vector<int64_t> seen = model->seen();
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "a sample ran twice";
  std::lock_guard lk(batches_mu);
  std::sort(runs.begin(), runs.end());
  std::sort(batches.begin(), batches.end());
  EXPECT_EQ(batches, runs) << "on_batch once per run, with the run's batch size";
}

// Runs gathered batches through run_staged with buffers of its own, as the Predictor does.
struct StagedTagModel : TagModel {
  bool run_staged(int64_t batch, const Fill& fill, const Take& take, const std::vector<Shape>&) override {
    std::vector<float> x(static_cast<size_t>(batch) * 3, NAN), y(static_cast<size_t>(batch) * 3);
    std::vector<int64_t> tags(static_cast<size_t>(batch), -1), t(static_cast<size_t>(batch) * 2);
    fill({x.data(), tags.data()});
    TagModel::run({x.data(), tags.data()}, batch, {y.data(), t.data()}, {});
    ++staged_runs;
    take({y.data(), t.data()});
    return true;
  }
  std::atomic<int> staged_runs{0};
};

// Also through run_staged: the gathered jobs' rows go straight into the model's own buffers.
TEST(Batcher, DelayGathersJobsIntoFewerRuns) {
  for (const bool staged : {false, true}) {
    SCOPED_TRACE(staged ? "run_staged" : "run");
    auto model = staged ? std::make_shared<StagedTagModel>() : std::make_shared<TagModel>();
    BatcherConfig cfg;
    cfg.max_batch_size = 16;
    cfg.max_queue_delay_us = 2'000'000;
    Tracker tracker;
    DynamicBatcher batcher(model, cfg);
    std::vector<std::shared_ptr<BatchJob>> jobs;
    for (int i = 0; i < 10; ++i) jobs.push_back(tracker.job(10 * i, 1 + i % 2));  // batches 1 and 2
    for (auto& j : jobs) ASSERT_EQ(batcher.submit(j), DynamicBatcher::Submit::Queued);
    ASSERT_TRUE(tracker.wait(10));
    EXPECT_LE(model->runs().size(), 2u) << "10 jobs submitted well within the 2 s delay";
    if (staged) {
      EXPECT_GE(static_cast<StagedTagModel&>(*model).staged_runs.load(), 1) << "gathered jobs went through run_staged";
    }
    for (auto& j : jobs) {
      EXPECT_EQ(wrong_outputs(*j), "") << "job " << first_tag(*j);
      // The first run cannot start before the oldest job waited the whole delay.
      if (j->executed_batch < 16) {
        EXPECT_GE(j->compute_start - jobs[0]->enqueued, 2s);
      }
    }
  }
}

TEST(Batcher, FullBatchRunsWithoutWaitingForTheDelay) {
  auto model = std::make_shared<TagModel>(std::vector<int64_t>{1, 2, 4});
  BatcherConfig cfg;
  cfg.max_queue_delay_us = 3'000'000'000;  // 50 minutes
  Tracker tracker;
  DynamicBatcher batcher(model, cfg);
  ASSERT_EQ(batcher.submit(tracker.job(0, 3)), DynamicBatcher::Submit::Queued);
  ASSERT_EQ(batcher.submit(tracker.job(10, 1)), DynamicBatcher::Submit::Queued);
  ASSERT_TRUE(tracker.wait(2));
  EXPECT_EQ(model->runs(), std::vector<int64_t>{4});
}

TEST(Batcher, DelayZeroRunsASingleJobAtOnce) {
  auto model = std::make_shared<TagModel>(std::vector<int64_t>{1, 8});
  Tracker tracker;
  DynamicBatcher batcher(model, BatcherConfig{});
  auto job = tracker.job(7, 2);
  ASSERT_EQ(batcher.submit(job), DynamicBatcher::Submit::Queued);
  ASSERT_TRUE(tracker.wait(1));
  EXPECT_EQ(wrong_outputs(*job), "");
  EXPECT_EQ(job->executed_batch, 2);
  EXPECT_EQ(model->runs(), std::vector<int64_t>{2});
}

TEST(Batcher, AJobLargerThanTheTargetRunsAlone) {
  auto model = std::make_shared<TagModel>(std::vector<int64_t>{1, 2, 4});
  Gate gate;
  model->gate = &gate;
  Tracker tracker;
  DynamicBatcher batcher(model, BatcherConfig{});
  OpenAtExit open_at_exit{gate};
  ASSERT_EQ(batcher.submit(tracker.job(0)), DynamicBatcher::Submit::Queued);
  ASSERT_TRUE(gate.wait_entered(1));
  auto big = tracker.job(100, 10);
  for (auto& j : {tracker.job(10), big, tracker.job(200, 2)}) ASSERT_EQ(batcher.submit(j), DynamicBatcher::Submit::Queued);
  gate.open();
  ASSERT_TRUE(tracker.wait(4));
  EXPECT_EQ(model->runs(), (std::vector<int64_t>{1, 1, 10, 2}));  // FIFO: the big one does not take the small ones
  EXPECT_EQ(wrong_outputs(*big), "");
}

TEST(Batcher, FullQueueRefusesAtOnce) {
  auto model = std::make_shared<TagModel>();
  Gate gate;
  model->gate = &gate;
  BatcherConfig cfg;
  cfg.max_queue_size = 2;
  Tracker tracker;
  DynamicBatcher batcher(model, cfg);
  OpenAtExit open_at_exit{gate};
  ASSERT_EQ(batcher.submit(tracker.job(0)), DynamicBatcher::Submit::Queued);
  ASSERT_TRUE(gate.wait_entered(1));  // the first job left the queue
  EXPECT_EQ(batcher.submit(tracker.job(1)), DynamicBatcher::Submit::Queued);
  EXPECT_EQ(batcher.submit(tracker.job(2)), DynamicBatcher::Submit::Queued);
  EXPECT_EQ(batcher.queue_depth(), 2u);
  EXPECT_EQ(batcher.submit(tracker.job(3)), DynamicBatcher::Submit::QueueFull);
  gate.open();
  ASSERT_TRUE(tracker.wait(3));
  batcher.drain();
  EXPECT_EQ(tracker.order(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(batcher.queue_depth(), 0u);
}

TEST(Batcher, HigherPriorityRunsFirstFifoWithinALevel) {
  auto model = std::make_shared<TagModel>();
  Gate gate;
  model->gate = &gate;
  BatcherConfig cfg;
  cfg.max_batch_size = 1;
  cfg.priority_levels = 3;
  cfg.default_priority_level = 2;
  Tracker tracker;
  DynamicBatcher batcher(model, cfg);
  OpenAtExit open_at_exit{gate};
  auto with_priority = [&](int64_t tag, int priority) {
    auto j = tracker.job(tag);
    j->priority = priority;
    return j;
  };
  ASSERT_EQ(batcher.submit(with_priority(0, 3)), DynamicBatcher::Submit::Queued);
  ASSERT_TRUE(gate.wait_entered(1));
  for (auto& j : {with_priority(1, 3), with_priority(2, 0), with_priority(3, 3), with_priority(4, 1), with_priority(5, 9),
                  with_priority(6, 1)})
    ASSERT_EQ(batcher.submit(j), DynamicBatcher::Submit::Queued);
  gate.open();
  ASSERT_TRUE(tracker.wait(7));
  // Level 1: 4, 6; level 2 (the default, also for 0 and out-of-range 9): 2, 5; level 3: 1, 3.
  EXPECT_EQ(model->seen(), (std::vector<int64_t>{0, 4, 6, 2, 5, 1, 3}));
}

TEST(Batcher, ExpiredJobsGet504AndNeverRun) {
  auto model = std::make_shared<TagModel>();
  Gate gate;
  model->gate = &gate;
  Tracker tracker;
  DynamicBatcher batcher(model, BatcherConfig{});
  OpenAtExit open_at_exit{gate};
  ASSERT_EQ(batcher.submit(tracker.job(0)), DynamicBatcher::Submit::Queued);
  ASSERT_TRUE(gate.wait_entered(1));
  auto soon = tracker.job(1), past = tracker.job(2), later = tracker.job(3);
  soon->deadline = Clock::now() + 20ms;
  past->deadline = Clock::now() - 1ms;
  later->deadline = Clock::now() + 1h;
  for (auto& j : {soon, past, later}) ASSERT_EQ(batcher.submit(j), DynamicBatcher::Submit::Queued);
  std::this_thread::sleep_until(soon->deadline + 10ms);
  gate.open();
  ASSERT_TRUE(tracker.wait(4));
  for (auto& j : {soon, past}) {
    EXPECT_EQ(j->status, 504);
    EXPECT_THAT(j->error, HasSubstr("request timeout expired after"));
    EXPECT_THAT(j->error, HasSubstr("us in the queue"));
    EXPECT_TRUE(j->outputs.empty());
  }
  EXPECT_EQ(wrong_outputs(*later), "");
  EXPECT_EQ(model->seen(), (std::vector<int64_t>{0, 3}));
}

TEST(Batcher, ARunsErrorGoesToEveryJobOfThatRun) {
  auto model = std::make_shared<TagModel>();
  model->hook = [](const std::vector<int64_t>& tags) {
    if (std::find(tags.begin(), tags.end(), 666) != tags.end()) throw InvalidArgument("tag 666 is not allowed");
    if (std::find(tags.begin(), tags.end(), 500) != tags.end()) throw std::runtime_error("backend fell over");
  };
  BatcherConfig cfg;
  cfg.max_batch_size = 4;
  cfg.max_queue_delay_us = 3'000'000'000;  // runs only when 4 samples are there
  Tracker tracker;
  DynamicBatcher batcher(model, cfg);
  std::vector<std::shared_ptr<BatchJob>> bad = {tracker.job(1), tracker.job(666), tracker.job(2, 2)};
  std::vector<std::shared_ptr<BatchJob>> crash = {tracker.job(500, 4)};
  std::vector<std::shared_ptr<BatchJob>> good = {tracker.job(10, 3), tracker.job(20)};
  for (auto* group : {&bad, &crash, &good})
    for (auto& j : *group) ASSERT_EQ(batcher.submit(j), DynamicBatcher::Submit::Queued);
  ASSERT_TRUE(tracker.wait(6));
  for (auto& j : bad) {
    EXPECT_EQ(j->status, 400);
    EXPECT_EQ(j->error, "tag 666 is not allowed");
    EXPECT_TRUE(j->outputs.empty());
    EXPECT_EQ(j->executed_batch, 4);
  }
  EXPECT_EQ(crash[0]->status, 500);
  EXPECT_EQ(crash[0]->error, "backend fell over");
  for (auto& j : good) EXPECT_EQ(wrong_outputs(*j), "") << "the batcher keeps serving after failed runs";
}

TEST(Batcher, PreserveOrderingAcrossInstances) {
  auto model = std::make_shared<TagModel>();
  model->hook = [](const std::vector<int64_t>& tags) {
    std::this_thread::sleep_for(std::chrono::microseconds((tags[0] * 7919) % 3000));  // run times differ
  };
  BatcherConfig cfg;
  cfg.max_batch_size = 3;
  cfg.instances = 4;
  cfg.preserve_ordering = true;
  Tracker tracker;
  DynamicBatcher batcher(model, cfg);
  std::vector<int64_t> expected;
  constexpr int kJobs = 200;
  for (int i = 0; i < kJobs; ++i) {
    auto j = tracker.job(i * 10, 1 + i % 2);
    if (i % 17 == 5) j->deadline = Clock::now();  // expired ones keep their place too
    expected.push_back(i * 10);
    ASSERT_EQ(batcher.submit(j), DynamicBatcher::Submit::Queued);
    if (i % 10 == 0) std::this_thread::sleep_for(1ms);  // let the instances interleave
  }
  ASSERT_TRUE(tracker.wait(kJobs));
  EXPECT_EQ(tracker.order(), expected);
  EXPECT_TRUE(tracker.each_once());
}

TEST(Batcher, DoneRunsOutsideTheBatchersLocksAndMaySubmitAgain) {
  for (bool ordered : {false, true}) {
    auto model = std::make_shared<TagModel>();
    BatcherConfig cfg;
    cfg.preserve_ordering = ordered;
    cfg.instances = 2;
    Tracker tracker;  // declared before the batcher: outlives every done()
    std::function<void(BatchJob&)> record = tracker.callback();
    std::function<void(int64_t)> submit_next;
    DynamicBatcher batcher(model, cfg);
    submit_next = [&](int64_t tag) {
      auto j = tagged_job(tag, 1);
      j->done = [&, tag](BatchJob& done) {
        (void)batcher.queue_depth();  // would deadlock under the queue lock
        if (tag < 20) submit_next(tag + 1);
        record(done);
      };
      ASSERT_EQ(batcher.submit(j), DynamicBatcher::Submit::Queued);
    };
    submit_next(1);
    ASSERT_TRUE(tracker.wait(20)) << "ordered " << ordered;
    batcher.drain();
    EXPECT_EQ(model->seen().size(), 20u);
  }
}

TEST(Batcher, DrainRunsEveryQueuedJobThenRefuses) {
  auto model = std::make_shared<TagModel>();
  Gate gate;
  model->gate = &gate;
  Tracker tracker;
  DynamicBatcher batcher(model, BatcherConfig{});
  std::vector<std::shared_ptr<BatchJob>> accepted;
  for (int i = 0; i < 4; ++i) {
    accepted.push_back(tracker.job(i));
    ASSERT_EQ(batcher.submit(accepted.back()), DynamicBatcher::Submit::Queued);
  }
  ASSERT_TRUE(gate.wait_entered(1));
  auto drained = std::async(std::launch::async, [&] { batcher.drain(); });
  OpenAtExit open_at_exit{gate};  // declared after `drained`, whose destructor waits for drain()
  // Probe until drain() has stopped intake; probes taken before that must complete as well.
  auto until = Clock::now() + kWait;
  for (int64_t tag = 100;; ++tag) {
    auto probe = tracker.job(tag);
    auto r = batcher.submit(probe);
    if (r == DynamicBatcher::Submit::Stopped) break;
    ASSERT_EQ(r, DynamicBatcher::Submit::Queued);
    accepted.push_back(probe);
    ASSERT_LT(Clock::now(), until) << "drain() did not stop intake within " << kWait.count() << " s";
    std::this_thread::sleep_for(1ms);
  }
  gate.open();
  hg::test::get_within(drained, kWait, "drain() to return");
  EXPECT_EQ(tracker.order().size(), accepted.size()) << "every accepted job was done before drain() returned";
  for (auto& j : accepted) EXPECT_EQ(wrong_outputs(*j), "");
  EXPECT_TRUE(tracker.each_once());
  EXPECT_EQ(batcher.submit(tracker.job(999)), DynamicBatcher::Submit::Stopped);
  batcher.drain();  // idempotent
}

// A model whose run records the thread it ran on.
struct ThreadTagModel : TagModel {
  void run(const std::vector<const void*>& in, int64_t batch, const std::vector<void*>& out,
           const std::vector<Shape>&) override {
    {
      std::lock_guard lk(threads_mu);
      threads.push_back(std::this_thread::get_id());
    }
    TagModel::run(in, batch, out, {});
  }
  std::vector<std::thread::id> ran_on() {
    std::lock_guard lk(threads_mu);
    return threads;
  }
  std::mutex threads_mu;
  std::vector<std::thread::id> threads;
};

TEST(Batcher, ACheapIdleModelRunsTheJobOnTheSubmittingThread) {
  auto model = std::make_shared<ThreadTagModel>();
  Tracker tracker;
  BatcherConfig cfg;
  cfg.inline_max_us = 60'000'000;  // any run counts as cheap
  DynamicBatcher batcher(model, cfg);
  auto first = tracker.job(1);
  ASSERT_EQ(batcher.submit(first), DynamicBatcher::Submit::Queued);
  ASSERT_TRUE(tracker.wait(1));  // no run time known yet: the instance thread ran it
  ASSERT_TRUE(hg::test::wait_until([&] { return batcher.queue_depth() == 0; }, kWait, "the instance to go idle"));
  // The instance lowers its busy count just after done(), and inline runs need the model idle
  // for a while: retry until one runs inline.
  std::shared_ptr<BatchJob> second;
  const auto until = Clock::now() + kWait;
  for (int64_t tag = 2; batcher.inline_runs() == 0; ++tag) {
    ASSERT_LT(Clock::now(), until) << "no job ran inline";
    std::this_thread::sleep_for(1ms);  // inline runs need the model idle for a while
    second = tracker.job(tag);
    ASSERT_EQ(batcher.submit(second), DynamicBatcher::Submit::Queued);
    ASSERT_TRUE(tracker.wait(static_cast<size_t>(tag)));
  }
  // The inline job was done before submit returned, on this thread, with the right outputs.
  EXPECT_EQ(second->status, 200);
  EXPECT_EQ(wrong_outputs(*second), "");
  EXPECT_NE(model->ran_on().front(), std::this_thread::get_id());
  EXPECT_EQ(model->ran_on().back(), std::this_thread::get_id());
  EXPECT_EQ(second->executed_batch, 1);
  EXPECT_TRUE(tracker.each_once());
}

TEST(Batcher, NoInlineRunWhenOffWithADelayOrForASlowModel) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    auto model = std::make_shared<ThreadTagModel>();
    if (variant == 2) model->hook = [](const std::vector<int64_t>&) { std::this_thread::sleep_for(2ms); };
    BatcherConfig cfg;
    cfg.inline_max_us = variant == 0 ? 0 : variant == 1 ? 60'000'000 : 500;  // the slow model takes >= 2000 us
    cfg.max_queue_delay_us = variant == 1 ? 100 : 0;
    Tracker tracker;
    DynamicBatcher batcher(model, cfg);
    for (int64_t tag = 1; tag <= 6; ++tag) {
      ASSERT_EQ(batcher.submit(tracker.job(tag)), DynamicBatcher::Submit::Queued);
      ASSERT_TRUE(tracker.wait(static_cast<size_t>(tag)));
    }
    EXPECT_EQ(batcher.inline_runs(), 0u);
    for (auto id : model->ran_on()) EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(Batcher, AnInlineRunHoldsTheInstanceSlotAndDrainWaitsForIt) {
  auto model = std::make_shared<ThreadTagModel>();
  Tracker tracker;
  BatcherConfig cfg;
  cfg.inline_max_us = 60'000'000;
  DynamicBatcher batcher(model, cfg);
  ASSERT_EQ(batcher.submit(tracker.job(1)), DynamicBatcher::Submit::Queued);
  ASSERT_TRUE(tracker.wait(1));
  Gate gate;
  hg::test::Event entered;
  std::atomic<std::thread::id> submitter{};
  model->hook = [&](const std::vector<int64_t>&) {  // holds the run made on the submitter's thread
    if (std::this_thread::get_id() != submitter.load()) return;
    entered.set();
    gate.pass();
  };
  // Submit from another thread until a job runs inline there (the instance may still be
  // finishing the first job): that run then waits in the model.
  auto inline_submitter = std::async(std::launch::async, [&] {
    submitter = std::this_thread::get_id();
    for (int64_t tag = 50; tag < 10050; ++tag) {
      std::this_thread::sleep_for(1ms);  // inline runs need the model idle for a while
      const uint64_t before = batcher.inline_runs();
      if (batcher.submit(tracker.job(tag)) != DynamicBatcher::Submit::Queued) return false;
      if (batcher.inline_runs() > before) return true;
      if (!tracker.wait(static_cast<size_t>(tag - 50 + 2))) return false;
    }
    return false;
  });
  OpenAtExit open_at_exit{gate};
  ASSERT_TRUE(entered.wait(kWait, "job 50 to enter the model"));
  // While it runs, a job from this thread queues (the one slot is taken) and does not run yet.
  auto queued = tracker.job(20000);
  ASSERT_EQ(batcher.submit(queued), DynamicBatcher::Submit::Queued);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(queued->status, 0) << "a job ran beside the inline run, over instances = 1";
  auto drained = std::async(std::launch::async, [&] { batcher.drain(); });
  EXPECT_EQ(drained.wait_for(20ms), std::future_status::timeout) << "drain() returned during an inline run";
  gate.open();
  hg::test::get_within(drained, kWait, "drain() to return");
  EXPECT_TRUE(hg::test::get_within(inline_submitter, kWait, "the inline submitter"));
  EXPECT_EQ(queued->status, 200);
  EXPECT_EQ(wrong_outputs(*queued), "");
  EXPECT_TRUE(tracker.each_once());
}

TEST(Batcher, DestructorDrainsWithoutWaitingForTheDelay) {
  auto model = std::make_shared<TagModel>();
  Tracker tracker;
  {
    BatcherConfig cfg;
    cfg.max_batch_size = 64;
    cfg.max_queue_delay_us = 3'000'000'000;
    DynamicBatcher batcher(model, cfg);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(batcher.submit(tracker.job(i)), DynamicBatcher::Submit::Queued);
  }
  EXPECT_EQ(tracker.order(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(model->runs(), std::vector<int64_t>{3});
}

TEST(Batcher, MalformedJobsAndConfigsAreRefused) {
  auto model = std::make_shared<TagModel>();
  DynamicBatcher batcher(model, BatcherConfig{});
  auto job = tagged_job(0, 2);
  job->batch = 3;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { batcher.submit(job); }), HasSubstr("input 'x': 24 bytes for batch 3"));
  job->batch = 0;
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { batcher.submit(job); }), HasSubstr("batch size must be >= 1"));
  job = tagged_job(0, 1);
  job->inputs.pop_back();
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { batcher.submit(job); }), HasSubstr("expects 2 inputs, got 1"));
  EXPECT_EQ(batcher.queue_depth(), 0u);

  auto config_error = [&](auto edit) {
    BatcherConfig cfg;
    edit(cfg);
    return test::error_of<InvalidArgument>([&] { DynamicBatcher b(model, cfg); });
  };
  EXPECT_THAT(config_error([](BatcherConfig& c) { c.instances = 0; }), HasSubstr("instances must be >= 1"));
  EXPECT_THAT(config_error([](BatcherConfig& c) { c.priority_levels = 0; }), HasSubstr("priority_levels"));
  EXPECT_THAT(config_error([](BatcherConfig& c) { c.default_priority_level = 2; }), HasSubstr("outside 1..1"));
  EXPECT_THAT(config_error([](BatcherConfig& c) { c.max_batch_size = -1; }), HasSubstr("max_batch_size"));
  EXPECT_THAT(config_error([](BatcherConfig& c) { c.max_queue_delay_us = UINT64_MAX; }), HasSubstr("above one hour"));
}

TEST(Batcher, RefusesAModelWithBytesTensors) {
  class BytesModel : public TagModel {
   public:
    BytesModel() { bytes_spec_.outputs[1] = {"t", "BYTES", {-1, 2}}; }
    const models::PackageSpec& spec() const override { return bytes_spec_; }

   private:
    models::PackageSpec bytes_spec_ = TagModel().spec();
  };
  EXPECT_THAT(test::error_of<InvalidArgument>([] { DynamicBatcher(std::make_shared<BytesModel>(), BatcherConfig{}); }),
              HasSubstr("output 't' is BYTES"));
}

}  // namespace
}  // namespace hg::server
