// ModelRepository over temporary repositories holding copies of the bundled digits_mlp package:
// version policies, the control modes none / explicit / poll, a failed reload that keeps the
// old version serving, reloads under continuous inference with no failed request, model
// names that would leave the repository, and load/unload requests serialized on the loader
// thread.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "errors.h"
#include "models/package.h"
#include "models/zoo.h"
#include "server/http_error.h"
#include "server/model_repository.h"
#include "test_env.h"

#ifndef HG_SOURCE_DIR
#error "HG_SOURCE_DIR must be defined as the repository root"
#endif

namespace {

namespace fs = std::filesystem;
using hg::server::BatchJob;
using hg::server::ControlMode;
using hg::server::DynamicBatcher;
using hg::server::IndexEntry;
using hg::server::ModelRepository;
using hg::server::ModelState;
using hg::server::ModelVersion;
using hg::server::RepositoryOptions;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

const fs::path kPackage = fs::path(HG_SOURCE_DIR) / "models" / "repository" / "digits_mlp" / "1";
constexpr const char* kSmallBuckets = R"({"batch_buckets": [1, 2]})";

// A repository folder with model folders made of copies of digits_mlp.
class TempRepo {
 public:
  explicit TempRepo(const std::string& test) : dir_(hg::test::temp_dir(test)) {}
  ~TempRepo() { fs::remove_all(dir_); }
  const fs::path& dir() const { return dir_; }
  // Copies the package into <model>/<version>, atomically (a rename), so a poll never sees half of it.
  void add_version(const std::string& model, int64_t version) const {
    const fs::path tmp = dir_ / model / (".incoming" + std::to_string(version));
    fs::create_directories(tmp);
    fs::copy(kPackage, tmp, fs::copy_options::recursive);
    fs::rename(tmp, dir_ / model / std::to_string(version));
  }
  void add_model(const std::string& model, std::vector<int64_t> versions, const std::string& config = kSmallBuckets) const {
    fs::create_directories(dir_ / model);
    write_config(model, config);
    for (int64_t v : versions) add_version(model, v);
  }
  void write_config(const std::string& model, const std::string& config) const {
    const fs::path tmp = dir_ / model / ".config.json";
    std::ofstream(tmp) << config;
    fs::rename(tmp, dir_ / model / "config.json");
  }
  void corrupt_weights(const std::string& model, int64_t version) const {
    fs::resize_file(dir_ / model / std::to_string(version) / "weights.safetensors", 100);
  }

 private:
  fs::path dir_;
};

RepositoryOptions options(const TempRepo& r, ControlMode mode = ControlMode::None) {
  RepositoryOptions o;
  o.dir = r.dir();
  o.mode = mode;
  return o;
}

struct Answer {
  int status = 0;
  std::string message;
};

// Waits (bounded) for a load or unload request's answer.
template <class Request>
Answer await(Request&& request) {
  auto p = std::make_shared<std::promise<Answer>>();
  auto f = p->get_future();
  request([p](int status, std::string message) { p->set_value({status, std::move(message)}); });
  if (f.wait_for(120s) != std::future_status::ready) return {0, "no answer within 120 s"};
  return f.get();
}

Answer load(ModelRepository& repo, const std::string& name, std::optional<std::string> config = std::nullopt) {
  return await([&](ModelRepository::Done done) { repo.load(name, config, std::move(done)); });
}
Answer unload(ModelRepository& repo, const std::string& name) {
  return await([&](ModelRepository::Done done) { repo.unload(name, std::move(done)); });
}

std::vector<int64_t> served_versions(const ModelRepository& repo, const std::string& name) {
  std::vector<int64_t> out;
  for (const IndexEntry& e : repo.index())
    if (e.name == name && e.state == ModelState::Ready) out.push_back(std::stoll(e.version));
  return out;
}

std::vector<float> sample(int seed) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((seed * 7 + static_cast<int>(i) * 3) % 17) / 16.0f;
  return x;
}

// One inference of batch 1 through the version's batcher: (status, logits).
std::pair<int, std::vector<float>> infer(const ModelVersion& v, const std::vector<float>& x) {
  auto job = std::make_shared<BatchJob>();
  job->inputs = {std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float))};
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  job->done = [done](BatchJob&) { done->set_value(); };
  if (v.batcher->submit(job) != DynamicBatcher::Submit::Queued) return {503, {}};
  if (finished.wait_for(60s) != std::future_status::ready) return {0, {}};
  std::vector<float> out;
  if (job->status == 200) {
    out.resize(job->outputs[0].size() / sizeof(float));
    std::memcpy(out.data(), job->outputs[0].data(), job->outputs[0].size());
  }
  return {job->status, out};
}

// Polls `pred` every 10 ms for at most `limit`.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 60s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

TEST(ModelRepositoryTest, VersionPolicies) {
  TempRepo r("RepoVersionPolicies");
  r.add_model("latest", {1, 2, 3});
  r.add_model("latest2", {1, 2, 3}, R"({"batch_buckets": [1], "version_policy": {"latest": {"num_versions": 2}}})");
  r.add_model("all", {1, 2, 3}, R"({"batch_buckets": [1], "version_policy": {"all": {}}})");
  r.add_model("specific", {1, 2, 3}, R"({"batch_buckets": [1], "version_policy": {"specific": {"versions": [1, 3, 4]}}})");
  ModelRepository repo(options(r));
  EXPECT_TRUE(repo.all_ready());
  EXPECT_EQ(served_versions(repo, "latest"), (std::vector<int64_t>{3}));
  EXPECT_EQ(served_versions(repo, "latest2"), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(served_versions(repo, "all"), (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(served_versions(repo, "specific"), (std::vector<int64_t>{3, 1}));

  EXPECT_EQ(repo.resolve("latest", std::nullopt)->version, 3);
  EXPECT_EQ(repo.resolve("all", "2")->version, 2);
  EXPECT_EQ(repo.resolve("specific", "1")->version, 1);
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { repo.resolve("specific", "2"); }),
              HasSubstr("unknown version '2' of model 'specific' (served versions: 3, 1)"));
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { repo.resolve("latest", "01"); }), HasSubstr("unknown version '01'"));
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { repo.resolve("nope", std::nullopt); }), HasSubstr("unknown model 'nope'"));

  // Each served version runs through its own batcher, with the config's buckets and the
  // package's tensors filled into the served config.
  auto v = repo.resolve("latest", std::nullopt);
  EXPECT_EQ(v->model->buckets(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(v->buckets.size(), 2u);  // warmed up
  ASSERT_EQ(v->config.inputs.size(), 1u);
  EXPECT_EQ(v->config.inputs[0].name, "input");
  auto [status, logits] = infer(*v, sample(1));
  ASSERT_EQ(status, 200);
  std::vector<float> want(10);
  const std::vector<float> x = sample(1);
  v->model->run({x.data()}, 1, {want.data()});
  EXPECT_EQ(logits, want);
}

// config.json reaches each version's batcher and Predictor.
TEST(ModelRepositoryTest, ConfigReachesTheBatcher) {
  TempRepo r("RepoConfigBatcher");
  r.add_model("tuned", {1}, R"({"max_batch_size": 4, "batch_buckets": [1, 4],
    "dynamic_batching": {"max_queue_delay_microseconds": 300, "preserve_ordering": true, "priority_levels": 3,
                         "default_priority_level": 2, "default_queue_policy": {"max_queue_size": 7}},
    "instance_group": [{"count": 2}]})");
  r.add_model("unbatched", {1}, R"({"max_batch_size": 0})");
  ModelRepository repo(options(r));
  auto v = repo.resolve("tuned", std::nullopt);
  const hg::server::BatcherConfig& b = v->batcher->config();
  EXPECT_EQ(b.max_batch_size, 4);
  EXPECT_EQ(b.max_queue_delay_us, 300u);
  EXPECT_TRUE(b.preserve_ordering);
  EXPECT_EQ(b.priority_levels, 3);
  EXPECT_EQ(b.default_priority_level, 2);
  EXPECT_EQ(b.max_queue_size, 7u);
  EXPECT_EQ(b.instances, 2);
  EXPECT_EQ(v->model->buckets(), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(v->batcher->target_batch(), 4);
  // max_batch_size 0 (Triton: no batching): one request per run, bucket 1 only.
  auto u = repo.resolve("unbatched", std::nullopt);
  EXPECT_EQ(u->batcher->target_batch(), 1);
  EXPECT_EQ(u->model->buckets(), (std::vector<int64_t>{1}));
}

TEST(ModelRepositoryTest, ModeNoneRefusesLoadAndUnload) {
  TempRepo r("RepoModeNone");
  r.add_model("mlp", {1});
  ModelRepository repo(options(r));
  Answer a = load(repo, "mlp");
  EXPECT_EQ(a.status, 400);
  EXPECT_THAT(a.message, HasSubstr("model control mode is none"));
  EXPECT_EQ(unload(repo, "mlp").status, 400);
  EXPECT_EQ(repo.resolve("mlp", std::nullopt)->version, 1);
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([] { hg::server::parse_control_mode("manual"); }),
              HasSubstr("unknown model control mode 'manual' (none, poll, explicit)"));
  EXPECT_EQ(hg::server::parse_control_mode("poll"), ControlMode::Poll);
}

TEST(ModelRepositoryTest, ExplicitModeLoadUnloadReload) {
  TempRepo r("RepoExplicit");
  r.add_model("a", {1});
  r.add_model("b", {1, 2});
  RepositoryOptions o = options(r, ControlMode::Explicit);
  o.startup_models = {"a"};
  ModelRepository repo(o);
  EXPECT_TRUE(repo.all_ready());
  EXPECT_EQ(repo.resolve("a", std::nullopt)->version, 1);
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { repo.resolve("b", std::nullopt); }), HasSubstr("unknown model 'b'"));
  std::vector<IndexEntry> idx = repo.index();
  ASSERT_EQ(idx.size(), 2u);
  EXPECT_EQ(idx[1].name, "b");
  EXPECT_EQ(idx[1].state, ModelState::Unavailable);
  EXPECT_EQ(idx[1].reason, "not loaded");
  EXPECT_EQ(repo.index(true).size(), 1u);

  Answer a = load(repo, "b");
  EXPECT_EQ(a.status, 200) << a.message;
  auto b2 = repo.resolve("b", std::nullopt);
  EXPECT_EQ(b2->version, 2);
  // A reload builds a new version object; the one a request still holds keeps working.
  EXPECT_EQ(load(repo, "b").status, 200);
  auto b2_new = repo.resolve("b", std::nullopt);
  EXPECT_NE(b2_new.get(), b2.get());
  EXPECT_EQ(infer(*b2, sample(2)).first, 200);
  EXPECT_EQ(infer(*b2_new, sample(2)), infer(*b2, sample(2)));

  // parameters.config replaces config.json for that load.
  a = load(repo, "b", R"({"batch_buckets": [1], "version_policy": {"all": {}}})");
  EXPECT_EQ(a.status, 200) << a.message;
  EXPECT_EQ(served_versions(repo, "b"), (std::vector<int64_t>{2, 1}));
  a = load(repo, "b", R"({"max_batch_size": -1})");
  EXPECT_EQ(a.status, 400);
  EXPECT_THAT(a.message, HasSubstr("load request parameters.config: max_batch_size must be a non-negative integer, got -1"));
  a = load(repo, "b", "{not json");
  EXPECT_EQ(a.status, 400);
  EXPECT_THAT(a.message, HasSubstr("parameters.config: is not valid JSON"));
  EXPECT_EQ(served_versions(repo, "b"), (std::vector<int64_t>{2, 1}));  // still serving

  a = unload(repo, "a");
  EXPECT_EQ(a.status, 200) << a.message;
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { repo.resolve("a", std::nullopt); }),
              HasSubstr("model 'a' is not loaded (unloaded)"));
  EXPECT_EQ(unload(repo, "a").status, 404);
  EXPECT_TRUE(repo.all_ready());  // an unloaded model is not waited for

  a = load(repo, "missing");
  EXPECT_EQ(a.status, 404);
  EXPECT_THAT(a.message, HasSubstr("model 'missing': no folder"));
  EXPECT_TRUE(repo.all_ready());
}

TEST(ModelRepositoryTest, ExplicitStartupAllAndMissing) {
  TempRepo r("RepoStartupAll");
  r.add_model("a", {1});
  r.add_model("b", {1});
  RepositoryOptions o = options(r, ControlMode::Explicit);
  o.startup_models = {"*"};
  {
    ModelRepository repo(o);
    EXPECT_EQ(repo.index(true).size(), 2u);
  }
  o.startup_models = {"a", "ghost"};
  ModelRepository repo(o);
  EXPECT_FALSE(repo.all_ready());  // a startup model that does not exist keeps the server not ready
  EXPECT_THAT(hg::test::error_of<hg::server::HttpError>([&] { repo.resolve("ghost", std::nullopt); }),
              HasSubstr("model 'ghost' is UNAVAILABLE: model 'ghost': no folder"));
  o.startup_models = {"../a"};
  EXPECT_THROW(ModelRepository bad(o), hg::InvalidArgument);
}

TEST(ModelRepositoryTest, PollModeFollowsTheFolder) {
  TempRepo r("RepoPoll");
  r.add_model("mlp", {1});
  RepositoryOptions o = options(r, ControlMode::Poll);
  o.poll_interval = 30ms;
  ModelRepository repo(o);
  EXPECT_EQ(repo.resolve("mlp", std::nullopt)->version, 1);
  EXPECT_EQ(load(repo, "mlp").status, 400);  // poll mode takes no load requests

  r.add_version("mlp", 2);  // a new version: served after a poll
  EXPECT_TRUE(eventually([&] { return repo.resolve("mlp", std::nullopt)->version == 2; }));
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { repo.resolve("mlp", "1"); }), HasSubstr("unknown version '1'"));

  r.write_config("mlp", R"({"batch_buckets": [1], "version_policy": {"all": {}}})");  // a changed config.json
  EXPECT_TRUE(eventually([&] { return served_versions(repo, "mlp") == std::vector<int64_t>{2, 1}; }));

  r.add_model("second", {4});  // a new model
  EXPECT_TRUE(eventually([&] { return served_versions(repo, "second") == std::vector<int64_t>{4}; }));

  fs::remove_all(r.dir() / "second");  // a removed model
  EXPECT_TRUE(eventually([&] {
    for (const IndexEntry& e : repo.index())
      if (e.name == "second") return false;
    return true;
  }));
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { repo.resolve("second", std::nullopt); }),
              HasSubstr("unknown model 'second'"));

  r.corrupt_weights("mlp", 2);  // a broken change keeps the old versions serving
  EXPECT_TRUE(eventually([&] {
    auto idx = repo.index();
    return !idx.empty() && idx[0].reason.find("reload failed") != std::string::npos;
  }));
  EXPECT_EQ(served_versions(repo, "mlp"), (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(repo.all_ready());
}

TEST(ModelRepositoryTest, FailedReloadKeepsTheOldVersionServing) {
  TempRepo r("RepoFailedReload");
  r.add_model("mlp", {1});
  ModelRepository repo(options(r, ControlMode::Explicit));
  ASSERT_EQ(load(repo, "mlp").status, 200);
  auto v1 = repo.resolve("mlp", std::nullopt);

  r.add_version("mlp", 2);
  r.corrupt_weights("mlp", 2);
  Answer a = load(repo, "mlp");
  EXPECT_EQ(a.status, 400) << a.message;
  const std::string where = (r.dir() / "mlp" / "2").string();
  EXPECT_THAT(a.message, HasSubstr("model 'mlp': failed to load: version 2 (" + where + "): "));
  EXPECT_THAT(a.message, HasSubstr("weights.safetensors"));
  EXPECT_THAT(a.message, HasSubstr("(still serving version 1)"));
  EXPECT_EQ(repo.resolve("mlp", std::nullopt).get(), v1.get());
  EXPECT_EQ(infer(*v1, sample(3)).first, 200);
  std::vector<IndexEntry> idx = repo.index();
  ASSERT_EQ(idx.size(), 1u);
  EXPECT_EQ(idx[0].version, "1");
  EXPECT_EQ(idx[0].state, ModelState::Ready);
  EXPECT_THAT(idx[0].reason, HasSubstr("reload failed: version 2"));
  EXPECT_TRUE(repo.all_ready());

  // Fixed: the next load serves version 2 and clears the reason.
  fs::copy_file(kPackage / "weights.safetensors", r.dir() / "mlp" / "2" / "weights.safetensors",
                fs::copy_options::overwrite_existing);
  EXPECT_EQ(load(repo, "mlp").status, 200);
  EXPECT_EQ(repo.resolve("mlp", std::nullopt)->version, 2);
  EXPECT_EQ(repo.index()[0].reason, "");
}

TEST(ModelRepositoryTest, ModelThatNeverLoadedIsUnavailable) {
  TempRepo r("RepoNeverLoaded");
  r.add_model("ok", {1});
  r.add_model("broken", {1});
  r.corrupt_weights("broken", 1);
  r.add_model("empty", {});
  r.add_model("badconfig", {1}, R"({"max_batch_size": "many"})");
  r.add_model("mismatch", {1}, R"({"batch_buckets": [1], "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": [65]}]})");
  ModelRepository repo(options(r));
  EXPECT_FALSE(repo.all_ready());
  EXPECT_EQ(repo.resolve("ok", std::nullopt)->version, 1);
  auto reason = [&](const std::string& name) {
    return hg::test::error_of<hg::server::HttpError>([&] { repo.resolve(name, std::nullopt); });
  };
  EXPECT_THAT(reason("broken"), HasSubstr("model 'broken' is UNAVAILABLE: version 1 (" + (r.dir() / "broken" / "1").string()));
  EXPECT_THAT(reason("empty"), HasSubstr("no version folder (a positive integer) in " + (r.dir() / "empty").string()));
  EXPECT_THAT(reason("badconfig"), HasSubstr((r.dir() / "badconfig" / "config.json").string() +
                                             ": max_batch_size must be a non-negative integer, got \"many\""));
  EXPECT_THAT(reason("mismatch"), HasSubstr("config.json: input[0] declares 'input' FP32 [-1,65], the model has 'input' FP32 [-1,64]"));
  // A version the failed load meant to serve answers 503, any other 404.
  EXPECT_THROW(repo.resolve("broken", "1"), hg::server::HttpError);
  EXPECT_THROW(repo.resolve("broken", "2"), hg::NotFoundError);
  for (const IndexEntry& e : repo.index()) {
    if (e.name != "ok") {
      EXPECT_EQ(e.state, ModelState::Unavailable) << e.name;
    }
  }
}

TEST(ModelRepositoryTest, IdentityPlatform) {
  TempRepo r("RepoIdentity");
  fs::create_directories(r.dir() / "echo" / "1");
  r.write_config("echo", R"({"platform": "identity", "max_batch_size": 8,
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [64]}],
    "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [64]}]})");
  ModelRepository repo(options(r));
  auto v = repo.resolve("echo", std::nullopt);
  EXPECT_EQ(v->model->spec().inputs[0].name, "IN");
  auto [status, out] = infer(*v, sample(4));
  EXPECT_EQ(status, 200);
  EXPECT_EQ(out, sample(4));
}

// Threads resolve the model and run inferences through its batcher without pause while the
// model reloads five times: every request succeeds with the right answer.
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
    EXPECT_TRUE(eventually([&] { return ok > before + 20; }));  // traffic flows between reloads
    Answer a = load(repo, "mlp");
    EXPECT_EQ(a.status, 200) << a.message;
    seen.push_back(repo.resolve("mlp", std::nullopt));
  }
  const int before = ok;
  EXPECT_TRUE(eventually([&] { return ok > before + 20; }));
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_EQ(failed, 0) << first_failure;
  EXPECT_GT(ok, 100);
  std::set<const ModelVersion*> distinct;
  for (auto& v : seen) distinct.insert(v.get());
  EXPECT_EQ(distinct.size(), 5u);  // five new versions were swapped in
}

TEST(ModelRepositoryTest, NamesThatLeaveTheRepositoryAreRefused) {
  const std::vector<std::string> bad = {"", ".", "..", "../digits_mlp", "a/b", "a\\b", std::string("a\0b", 3),
                                        ".hidden", std::string(256, 'x'), "/etc"};
  for (const auto& name : bad)
    EXPECT_THROW(hg::server::check_model_name(name), hg::InvalidArgument) << name;
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([] { hg::server::check_model_name("../x"); }),
              HasSubstr("invalid model name '../x': it starts with '.'"));
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>([] { hg::server::check_model_name("a/b"); }),
              HasSubstr("invalid model name 'a/b': it contains a path separator"));
  EXPECT_NO_THROW(hg::server::check_model_name("digits_mlp-v1.2"));
  EXPECT_NO_THROW(hg::server::check_model_name(std::string(255, 'x')));

  // A model folder next to the repository is not reachable through it.
  TempRepo outside("RepoOutside");
  outside.add_model("secret", {1});
  fs::create_directories(outside.dir() / "repo");
  RepositoryOptions o;
  o.dir = outside.dir() / "repo";
  o.mode = ControlMode::Explicit;
  ModelRepository repo(o);
  for (const auto& name : bad) {
    Answer a = load(repo, name);
    EXPECT_EQ(a.status, 400) << name;
    EXPECT_THAT(a.message, HasSubstr("invalid model name")) << name;
    EXPECT_EQ(unload(repo, name).status, 400) << name;
    EXPECT_THROW(repo.resolve(name, std::nullopt), hg::InvalidArgument) << name;
  }
  EXPECT_TRUE(repo.index().empty());
}

// Load and unload requests from many threads run one at a time, on one loader thread that is
// none of the callers'.
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
  for (auto& c : callers) c.join();
  EXPECT_EQ(answered, 24);
  EXPECT_EQ(unexpected, 0);
  EXPECT_EQ(most, 1);
  ASSERT_EQ(builders.size(), 1u);
  EXPECT_NE(*builders.begin(), std::this_thread::get_id());
  EXPECT_EQ(load(repo, "a").status, 200);
  EXPECT_EQ(repo.resolve("a", std::nullopt)->version, 1);
}

// While a load runs on the loader thread, the caller goes on: the model is LOADING (503, not
// ready, listed in the index), and a reload keeps answering with the old version.
TEST(ModelRepositoryTest, LoadingIsVisibleAndReloadKeepsServing) {
  TempRepo r("RepoLoading");
  r.add_model("slow", {1});
  std::atomic<int> started{0}, released{0};  // build n waits until released >= n
  RepositoryOptions o = options(r, ControlMode::Explicit);
  o.factory = [&](const std::string&, int64_t, const fs::path& dir, const hg::server::ModelConfig&) {
    const int me = ++started;
    eventually([&] { return released >= me; });
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
  ASSERT_TRUE(eventually([&] { return started == 1; }));
  std::vector<IndexEntry> idx = repo.index();
  ASSERT_EQ(idx.size(), 1u);
  EXPECT_EQ(idx[0].state, ModelState::Loading);
  EXPECT_FALSE(repo.all_ready());
  EXPECT_THAT(hg::test::error_of<hg::server::HttpError>([&] { repo.resolve("slow", std::nullopt); }),
              HasSubstr("model 'slow' is LOADING"));
  released = 1;
  ASSERT_EQ(first.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(first.get().status, 200);
  EXPECT_TRUE(repo.all_ready());
  auto v1 = repo.resolve("slow", std::nullopt);

  // While a reload builds, the old version answers.
  auto second = load_async(std::make_shared<std::promise<Answer>>());
  ASSERT_TRUE(eventually([&] { return started == 2; }));
  EXPECT_EQ(repo.resolve("slow", std::nullopt).get(), v1.get());
  EXPECT_EQ(infer(*repo.resolve("slow", std::nullopt), sample(7)).first, 200);
  EXPECT_TRUE(repo.all_ready());
  EXPECT_EQ(repo.index()[0].state, ModelState::Ready);
  released = 2;
  ASSERT_EQ(second.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(second.get().status, 200);
  EXPECT_NE(repo.resolve("slow", std::nullopt).get(), v1.get());
}

// A GPT package is served for inference and gets a text generator.
TEST(ModelRepositoryTest, GptPackageGetsAGenerator) {
  TempRepo r("RepoGpt");
  hg::models::GPTConfig gc;
  gc.d_model = 32;
  gc.ff = 64;
  gc.layers = 1;
  gc.max_len = 32;
  auto net = hg::models::zoo::gpt(gc, 1);
  hg::models::PackageSpec spec;
  spec.name = "gpt";
  spec.inputs = {{"ids", "INT64", {-1, 8}}};
  spec.outputs = {{"logits", "FP32", {-1, 8, gc.vocab}}};
  hg::models::save_package(r.dir() / "gpt" / "1", *net, spec);
  r.write_config("gpt", R"({"batch_buckets": [1]})");
  r.add_model("mlp", {1});
  ModelRepository repo(options(r));
  auto v = repo.resolve("gpt", std::nullopt);
  ASSERT_NE(v->generator, nullptr);
  EXPECT_EQ(repo.resolve("mlp", std::nullopt)->generator, nullptr);
  hg::server::GenerateRequest req;
  req.text_input = "hi";
  req.max_tokens = 3;
  hg::server::GenerateResult out = v->generator->generate(req, [](std::string_view) { return true; });
  EXPECT_EQ(out.tokens.size(), 3u);
  EXPECT_EQ(out.finish_reason, "length");
}

// An unload waits for the requests holding the model: they still run, new ones get 503
// (UNLOADING) and, once the holders are gone, 404.
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
  ASSERT_TRUE(eventually([&] { return repo.index()[0].state == ModelState::Unloading; }));
  EXPECT_THAT(hg::test::error_of<hg::server::HttpError>([&] { repo.resolve("mlp", std::nullopt); }),
              HasSubstr("model 'mlp' is UNLOADING"));
  EXPECT_EQ(answered.wait_for(50ms), std::future_status::timeout);
  EXPECT_EQ(infer(*held, sample(8)).first, 200);  // the holder's request still runs
  held.reset();
  ASSERT_EQ(answered.wait_for(60s), std::future_status::ready);
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
  std::atomic<bool> release{false};
  RepositoryOptions o = options(r, ControlMode::Explicit);
  o.factory = [&](const std::string&, int64_t, const fs::path& dir, const hg::server::ModelConfig&) {
    ++started;
    eventually([&] { return release.load(); });
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
  repo->load("mlp", std::nullopt, record);
  repo->load("mlp", std::nullopt, record);
  ASSERT_TRUE(eventually([&] { return started == 1; }));
  std::thread releaser([&] {
    std::this_thread::sleep_for(100ms);
    release = true;
  });
  repo.reset();
  releaser.join();
  EXPECT_EQ(started, 1);
  EXPECT_EQ(statuses, (std::vector<int>{503, 503}));
}

// RepositoryOptions::on_batch hears every run of every version, with the model and version.
TEST(ModelRepositoryTest, OnBatchNamesModelAndVersion) {
  TempRepo r("RepoOnBatch");
  r.add_model("mlp", {2});
  std::mutex mu;
  std::vector<std::tuple<std::string, int64_t, int64_t>> runs;
  RepositoryOptions o = options(r);
  o.on_batch = [&](const std::string& model, int64_t version, int64_t batch, hg::server::Clock::duration) {
    std::lock_guard lk(mu);
    runs.emplace_back(model, version, batch);
  };
  ModelRepository repo(o);
  EXPECT_EQ(infer(*repo.resolve("mlp", std::nullopt), sample(9)).first, 200);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lk(mu);
    return !runs.empty();
  }));
  std::lock_guard lk(mu);
  EXPECT_EQ(runs[0], std::make_tuple(std::string("mlp"), int64_t{2}, int64_t{1}));
}

TEST(ModelRepositoryTest, MissingRepositoryThrows) {
  RepositoryOptions o;
  o.dir = "/nonexistent/hgraph/repository";
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { ModelRepository repo(o); }),
              HasSubstr("model repository '/nonexistent/hgraph/repository' is not a directory"));
}

}  // namespace
