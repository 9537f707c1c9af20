// ModelRepository over temporary repositories holding copies of the bundled digits_mlp package:
// version policies, the control modes none / explicit / poll, a failed reload that keeps the
// old version serving, models that never load, the identity platform, GPT generators, names
// that would leave the repository, the batcher hook.
#include "tests/model_repository_util.h"

namespace {

using namespace hg::test::repo;

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
  EXPECT_THAT(a.message, HasSubstr("malformed JSON in load request parameters.config"));
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
  EXPECT_TRUE(eventually([&] { return repo.resolve("mlp", std::nullopt)->version == 2; }, "a poll to serve version 2"));
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { repo.resolve("mlp", "1"); }), HasSubstr("unknown version '1'"));

  r.write_config("mlp", R"({"batch_buckets": [1], "version_policy": {"all": {}}})");  // a changed config.json
  EXPECT_TRUE(eventually([&] { return served_versions(repo, "mlp") == std::vector<int64_t>{2, 1}; },
                         "a poll to serve versions 2 and 1 after the config changed"));

  r.add_model("second", {4});  // a new model
  EXPECT_TRUE(eventually([&] { return served_versions(repo, "second") == std::vector<int64_t>{4}; },
                         "a poll to serve the new model 'second'"));

  fs::remove_all(r.dir() / "second");  // a removed model
  EXPECT_TRUE(eventually(
      [&] {
        for (const IndexEntry& e : repo.index())
          if (e.name == "second") return false;
        return true;
      },
      "a poll to drop the removed model 'second'"));
  EXPECT_THAT(hg::test::error_of<hg::NotFoundError>([&] { repo.resolve("second", std::nullopt); }),
              HasSubstr("unknown model 'second'"));

  r.corrupt_weights("mlp", 2);  // a broken change keeps the old versions serving
  EXPECT_TRUE(eventually(
      [&] {
        auto idx = repo.index();
        return !idx.empty() && idx[0].reason.find("reload failed") != std::string::npos;
      },
      "a poll to report the failed reload of the corrupted version 2"));
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
  ASSERT_TRUE(eventually(
      [&] {
        std::lock_guard lk(mu);
        return !runs.empty();
      },
      "on_batch to hear the run"));
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

// The model memory budget: a load is charged its files before it reads them and its captured
// buckets before they count (buckets past what is left are left out); a load that does not fit
// fails naming what and how much, and what a version held comes back when it is unloaded.
TEST(ModelRepositoryTest, LoadsAreChargedToTheModelMemoryBudget) {
  TempRepo r("RepoMemoryBudget");
  r.add_model("a", {1});
  r.add_model("b", {1});
  size_t files = 0;
  for (const auto& f : fs::recursive_directory_iterator(r.dir() / "a" / "1"))
    if (f.is_regular_file()) files += f.file_size();
  RepositoryOptions o = options(r, ControlMode::Explicit);
  o.model_memory = files + files / 2;  // one model's files, and not two
  ModelRepository repo(o);
  Answer a = load(repo, "a");
  ASSERT_EQ(a.status, 200) << a.message;
  auto va = repo.resolve("a", std::nullopt);
  ASSERT_TRUE(va->memory);
  EXPECT_GE(va->memory->held(), files);
  EXPECT_LE(va->memory->held(), o.model_memory);
  // What is left holds fewer captured buckets than asked for, or none: those are left out.
  size_t captured = 0;
  for (const auto& b : va->buckets) captured += b.captured;
  EXPECT_LT(captured, va->buckets.size()) << "every bucket fitted in what the files left";
  EXPECT_EQ(infer(*va, sample(1)).first, 200);  // served all the same (uncaptured batches run eagerly)
  va.reset();

  a = load(repo, "b");
  EXPECT_EQ(a.status, 503) << a.message;
  EXPECT_THAT(a.message, HasSubstr("model 'b' version 1: its files in"));
  EXPECT_THAT(a.message, HasSubstr("MiB left"));
  EXPECT_THAT(a.message, HasSubstr("held by loaded models"));
  EXPECT_EQ(unload(repo, "a").status, 200);
  a = load(repo, "b");  // what 'a' held is back once it is drained
  EXPECT_EQ(a.status, 200) << a.message;
}
