// ModelRepository while it serves: reloads under continuous inference with no failed request,
// load/unload requests serialized by the loader, a load past its timeout that holds up
// nothing, LOADING visible during a load, held requests finishing across unload and shutdown,
// destruction in the middle of a load.
#include "tests/model_repository_util.h"

namespace {

using namespace hg::test::repo;

TEST(ModelRepositoryTest, ReloadUnderLoadFailsNoRequest) {
  TempRepo r("RepoSwapUnderLoad");
  r.add_model("mlp", {1}, R"({"batch_buckets": [1, 2, 4], "dynamic_batching": {"max_queue_delay_microseconds": 100}})");
  ModelRepository repo(options(r, ControlMode::Explicit));
  ASSERT_EQ(load(repo, "mlp").status, 200);
  const std::vector<float> x = sample(5);
  const std::vector<float> want = infer(*repo.resolve("mlp", std::nullopt), x).second;
  ASSERT_EQ(want.size(), 10u);

  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::mutex fail_mu;
  std::string first_failure;
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&] {
      while (!stop) {
        try {
          auto [status, got] = infer(*repo.resolve("mlp", std::nullopt), x);
          if (status == 200 && got == want) {
            ++ok;
            continue;
          }
          std::lock_guard lk(fail_mu);
          first_failure = "status " + std::to_string(status);
        } catch (const std::exception& e) {
          std::lock_guard lk(fail_mu);
          first_failure = e.what();
        }
        ++failed;
      }
    });
  std::vector<std::shared_ptr<const ModelVersion>> seen;  // held, so no address is reused
  for (int i = 0; i < 5; ++i) {
    const int before = ok;
    EXPECT_TRUE(eventually([&] { return ok > before + 20; }, "20 more answered requests before reload " + std::to_string(i)));
    Answer a = load(repo, "mlp");
    EXPECT_EQ(a.status, 200) << a.message;
    seen.push_back(repo.resolve("mlp", std::nullopt));
  }
  const int before = ok;
  EXPECT_TRUE(eventually([&] { return ok > before + 20; }, "20 more answered requests after the last reload"));
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_EQ(failed, 0) << first_failure;
  EXPECT_GT(ok, 100);
  std::set<const ModelVersion*> distinct;
  for (auto& v : seen) distinct.insert(v.get());
  EXPECT_EQ(distinct.size(), 5u);  // five new versions were swapped in
}

TEST(ModelRepositoryTest, ConcurrentLoadAndUnloadRequestsAreSerialized) {
  TempRepo r("RepoSerialized");
  r.add_model("a", {1});
  r.add_model("b", {1});
  std::atomic<int> building{0}, most{0};
  std::mutex ids_mu;
  std::set<std::thread::id> builders;
  RepositoryOptions o = options(r, ControlMode::Explicit);
  o.factory = [&](const std::string&, int64_t, const fs::path& dir, const hg::server::ModelConfig& config) {
    const int now = ++building;
    most = std::max(most.load(), now);
    {
      std::lock_guard lk(ids_mu);
      builders.insert(std::this_thread::get_id());
    }
    hg::models::PredictorOptions popt;
    popt.batch_buckets = config.buckets({1});
    auto m = hg::server::make_served_model(hg::models::Predictor::load(dir, popt));
    std::this_thread::sleep_for(2ms);
    --building;
    return m;
  };
  ModelRepository repo(o);
  std::atomic<int> answered{0}, unexpected{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; i < 6; ++i) {
        const std::string name = (t + i) % 2 ? "a" : "b";
        Answer ans = i % 3 == 2 ? unload(repo, name) : load(repo, name);
        ++answered;
        if (ans.status != 200 && !(ans.status == 404 && i % 3 == 2)) ++unexpected;
      }
    });
  std::vector<std::thread::id> caller_ids;
  for (auto& c : callers) caller_ids.push_back(c.get_id());
  for (auto& c : callers) c.join();
  EXPECT_EQ(answered, 24);
  EXPECT_EQ(unexpected, 0);
  EXPECT_EQ(most, 1);  // one build at a time, each on a load thread, none on a caller's
  for (const auto& id : caller_ids) EXPECT_EQ(builders.count(id), 0u);
  EXPECT_EQ(builders.count(std::this_thread::get_id()), 0u);
  EXPECT_EQ(load(repo, "a").status, 200);
  EXPECT_EQ(repo.resolve("a", std::nullopt)->version, 1);
}

// While a load runs, the caller goes on: the model is LOADING (503, not
// ready, listed in the index), and a reload keeps answering with the old version.

TEST(ModelRepositoryTest, LoadingIsVisibleAndReloadKeepsServing) {
  TempRepo r("RepoLoading");
  r.add_model("slow", {1});
  std::atomic<int> started{0}, released{0};  // build n waits until released >= n
  RepositoryOptions o = options(r, ControlMode::Explicit);
  o.factory = [&](const std::string&, int64_t, const fs::path& dir, const hg::server::ModelConfig&) {
    const int me = ++started;
    (void)eventually([&] { return released >= me; }, "the test to release build " + std::to_string(me));
    hg::models::PredictorOptions popt;
    popt.batch_buckets = {1};
    return hg::server::make_served_model(hg::models::Predictor::load(dir, popt));
  };
  ModelRepository repo(o);
  auto load_async = [&](std::shared_ptr<std::promise<Answer>> p) {
    repo.load("slow", std::nullopt, [p](int status, std::string m) { p->set_value({status, std::move(m)}); });
    return p->get_future();
  };
  auto first = load_async(std::make_shared<std::promise<Answer>>());
  ASSERT_TRUE(eventually([&] { return started == 1; }, "the first build to start"));
  std::vector<IndexEntry> idx = repo.index();
  ASSERT_EQ(idx.size(), 1u);
  EXPECT_EQ(idx[0].state, ModelState::Loading);
  EXPECT_FALSE(repo.all_ready());
  EXPECT_THAT(hg::test::error_of<hg::server::HttpError>([&] { repo.resolve("slow", std::nullopt); }),
              HasSubstr("model 'slow' is LOADING"));
  released = 1;
  ASSERT_TRUE(hg::test::ready_within(first, hg::test::kWaitLimit, "the answer to the first load"));
  EXPECT_EQ(first.get().status, 200);
  EXPECT_TRUE(repo.all_ready());
  auto v1 = repo.resolve("slow", std::nullopt);

  // While a reload builds, the old version answers.
  auto second = load_async(std::make_shared<std::promise<Answer>>());
  ASSERT_TRUE(eventually([&] { return started == 2; }, "the reload's build to start"));
  EXPECT_EQ(repo.resolve("slow", std::nullopt).get(), v1.get());
  EXPECT_EQ(infer(*repo.resolve("slow", std::nullopt), sample(7)).first, 200);
  EXPECT_TRUE(repo.all_ready());
  EXPECT_EQ(repo.index()[0].state, ModelState::Ready);
  released = 2;
  ASSERT_TRUE(hg::test::ready_within(second, hg::test::kWaitLimit, "the answer to the reload"));
  EXPECT_EQ(second.get().status, 200);
  EXPECT_NE(repo.resolve("slow", std::nullopt).get(), v1.get());
}

// A GPT package is served for inference and gets a text generator.

TEST(ModelRepositoryTest, UnloadLetsHeldRequestsFinish) {
  TempRepo r("RepoUnloadHeld");
  r.add_model("mlp", {1});
  RepositoryOptions o = options(r, ControlMode::Explicit);
  o.startup_models = {"mlp"};
  ModelRepository repo(o);
  auto held = repo.resolve("mlp", std::nullopt);
  auto answer = std::make_shared<std::promise<Answer>>();
  auto answered = answer->get_future();
  repo.unload("mlp", [answer](int status, std::string m) { answer->set_value({status, std::move(m)}); });
  ASSERT_TRUE(eventually([&] { return repo.index()[0].state == ModelState::Unloading; }, "the model to be UNLOADING"));
  EXPECT_THAT(hg::test::error_of<hg::server::HttpError>([&] { repo.resolve("mlp", std::nullopt); }),
              HasSubstr("model 'mlp' is UNLOADING"));
  EXPECT_EQ(answered.wait_for(50ms), std::future_status::timeout);
  EXPECT_EQ(infer(*held, sample(8)).first, 200);  // the holder's request still runs
  held.reset();
  ASSERT_TRUE(hg::test::ready_within(answered, hg::test::kWaitLimit, "the unload's answer after the holder let go"));
  EXPECT_EQ(answered.get().status, 200);
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { repo.resolve("mlp", std::nullopt); }),
              HasSubstr("model 'mlp' is not loaded (unloaded)"));
  EXPECT_TRUE(repo.all_ready());
  // Loaded again right after an unload.
  EXPECT_EQ(load(repo, "mlp").status, 200);
  EXPECT_EQ(repo.resolve("mlp", std::nullopt)->version, 1);
}

TEST(ModelRepositoryTest, ShutdownStopsServing) {
  TempRepo r("RepoShutdown");
  r.add_model("mlp", {1});
  ModelRepository repo(options(r, ControlMode::Explicit));
  ASSERT_EQ(load(repo, "mlp").status, 200);
  auto held = repo.resolve("mlp", std::nullopt);
  EXPECT_TRUE(repo.all_ready());
  repo.shutdown();
  EXPECT_FALSE(repo.all_ready());
  EXPECT_THAT(hg::test::error_of<hg::server::HttpError>([&] { repo.resolve("mlp", std::nullopt); }),
              HasSubstr("the server is shutting down"));
  EXPECT_EQ(infer(*held, sample(6)).first, 503);  // its batcher is drained
  EXPECT_EQ(load(repo, "mlp").status, 503);
}

// Destroying the repository while a load builds: that load is not published, the queued one
// is refused, and each request is answered exactly once.

TEST(ModelRepositoryTest, DestroyedWhileLoadingAnswersEveryRequest) {
  TempRepo r("RepoDestroyLoading");
  r.add_model("mlp", {1});
  std::atomic<int> started{0};
  // The build holds until the repository's destruction has begun: its destructor calls
  // shutdown() first, after which resolve() answers "shutting down" (the loader thread the
  // build runs on is joined later in the destructor, so the object is still whole).
  std::atomic<ModelRepository*> self{nullptr};
  auto shutting_down = [&] {
    try {
      self.load()->resolve("mlp", std::nullopt);
    } catch (const hg::server::HttpError& e) {
      return std::string(e.what()).find("shutting down") != std::string::npos;
    } catch (const std::exception&) {
    }
    return false;
  };
  RepositoryOptions o = options(r, ControlMode::Explicit);
  o.factory = [&](const std::string&, int64_t, const fs::path& dir, const hg::server::ModelConfig&) {
    ++started;
    (void)eventually(shutting_down, "the repository's destruction to begin");
    hg::models::PredictorOptions popt;
    popt.batch_buckets = {1};
    return hg::server::make_served_model(hg::models::Predictor::load(dir, popt));
  };
  std::mutex mu;
  std::vector<int> statuses;
  auto record = [&](int status, std::string) {
    std::lock_guard lk(mu);
    statuses.push_back(status);
  };
  auto repo = std::make_unique<ModelRepository>(o);
  self = repo.get();
  repo->load("mlp", std::nullopt, record);
  repo->load("mlp", std::nullopt, record);
  ASSERT_TRUE(eventually([&] { return started == 1; }, "the first load's build to start"));
  repo.reset();
  EXPECT_EQ(started, 1);
  EXPECT_EQ(statuses, (std::vector<int>{503, 503}));
}

// RepositoryOptions::on_batch hears every run of every version, with the model and version.

}  // namespace

namespace {

// A load that runs past the load timeout is answered 503 and reported in the index; the loads
// and unloads after it go on while it runs, and what it builds when it ends is discarded.
TEST(ModelRepositoryTest, ALoadPastItsTimeoutDoesNotHoldUpTheOthers) {
  TempRepo r("RepoLoadTimeout");
  r.add_model("stuck", {1});
  r.add_model("fast", {1});
  std::atomic<bool> release{false}, built_stuck{false};
  RepositoryOptions o = options(r, ControlMode::Explicit);
  o.load_timeout = 300ms;
  o.factory = [&](const std::string& name, int64_t, const fs::path& dir, const hg::server::ModelConfig&) {
    if (name == "stuck") {
      (void)eventually([&] { return release.load(); }, "the test to release the stuck load");
      built_stuck = true;
    }
    hg::models::PredictorOptions popt;
    popt.batch_buckets = {1};
    return hg::server::make_served_model(hg::models::Predictor::load(dir, popt));
  };
  ModelRepository repo(o);
  Answer a = load(repo, "stuck");
  EXPECT_EQ(a.status, 503);
  EXPECT_THAT(a.message, HasSubstr("model 'stuck': the load has run for 0.3 s, past the load timeout"));
  std::vector<IndexEntry> idx = repo.index();
  ASSERT_EQ(idx.size(), 2u);
  EXPECT_EQ(idx[1].name, "stuck");
  EXPECT_EQ(idx[1].state, ModelState::Unavailable);
  EXPECT_THAT(idx[1].reason, HasSubstr("past the load timeout"));
  // The loader is free: another model loads and unloads while the stuck load still runs.
  a = load(repo, "fast");
  EXPECT_EQ(a.status, 200) << a.message;
  EXPECT_EQ(infer(*repo.resolve("fast", std::nullopt), sample(3)).first, 200);
  EXPECT_EQ(unload(repo, "fast").status, 200);
  EXPECT_FALSE(built_stuck.load());
  release = true;
  ASSERT_TRUE(eventually([&] { return built_stuck.load(); }, "the stuck load to end"));
  // Its result is discarded: the model stays unavailable until loaded again.
  std::this_thread::sleep_for(100ms);
  EXPECT_THAT(hg::test::error_of<hg::server::HttpError>([&] { repo.resolve("stuck", std::nullopt); }),
              HasSubstr("past the load timeout"));
  a = load(repo, "stuck");
  EXPECT_EQ(a.status, 200) << a.message;
}

}  // namespace
