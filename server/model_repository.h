// A Triton-style model repository: DIR/<model>/config.json (server/model_config.h) and
// DIR/<model>/<version>/ holding a model package (model.json) or model.onnx. Which versions
// are served follows the config's version policy; which models are loaded follows the control
// mode: none (everything at start, no load/unload), poll (rescan every poll interval) or
// explicit (the startup list, then load/unload requests).
//
//   RepositoryOptions o;  o.dir = "models/repository";  o.mode = ControlMode::Explicit;
//   o.startup_models = {"digits_mlp"};  o.log = &std::cerr;
//   ModelRepository repo(o);                              // loads before returning
//   std::shared_ptr<const ModelVersion> v = repo.resolve("digits_mlp", std::nullopt);  // highest served
//   v->batcher->submit(job);                              // v stays valid while held
//   repo.load("bert", std::nullopt, [](int status, std::string msg) { ... });   // on the loader thread
//   repo.unload("bert", [](int status, std::string msg) { ... });
//   for (const IndexEntry& e : repo.index()) ...          // every model folder, loaded or not
//
// resolve(): 400 (InvalidArgument) for a bad name, 404 (NotFoundError) for a model that is not
// in the repository or not loaded (never, or unloaded) or a version not served, 503
// (HttpError) while the model is LOADING, UNLOADING or failed (UNAVAILABLE with the reason).
// A reload keeps the old versions serving until the new ones are READY; the old ones are
// drained once no request holds them (or after 30 s). A failed reload keeps them serving and the index
// shows the failure as the reason of their READY entries. Poll mode reloads a model when
// its config.json or any file of its version folders changes (path, size, mtime).
// Loads run on the repository's loader thread, never on the caller's. A load builds every
// served version completely (load, warm up every bucket, start its batcher) before it swaps
// them in under the lock: requests holding the old versions finish on them, new requests go
// to the new ones, none fails. A failed load keeps what was serving and records the reason.
// Each load runs on a thread of its own within RepositoryOptions::load_timeout; the destructor
// waits for a load that ran past it to end.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/predictor.h"
#include "server/batcher.h"
#include "server/generate.h"
#include "server/memory_budget.h"
#include "server/model_config.h"
#include "server/served_model.h"

namespace hg::server {

enum class ModelState { Loading, Ready, Unavailable, Unloading };
const char* model_state_name(ModelState s);  // "LOADING", "READY", "UNAVAILABLE", "UNLOADING"

// One loaded, served version. Immutable once published; shared by the requests using it.
struct ModelVersion {
  std::string name;
  int64_t version = 0;
  ModelConfig config;
  std::shared_ptr<ServedModel> model;
  std::shared_ptr<DynamicBatcher> batcher;   // runs every inference of this version
  std::shared_ptr<TextGenerator> generator;  // set for text generation models
  std::vector<models::BucketInfo> buckets;   // warmup report
  models::PrecisionReport precision;         // reduced precision: its agreement with FP32 at load
  double load_ms = 0;
  // What it holds of the server's model memory (RepositoryOptions::model_memory), given back
  // when the version is gone.
  std::shared_ptr<MemoryBudget::Lease> memory;
};

struct IndexEntry {
  std::string name;
  std::string version;  // empty when nothing was loaded
  ModelState state = ModelState::Unavailable;
  std::string reason;   // why it is unavailable (or why its last reload failed)
};

enum class ControlMode { None, Poll, Explicit };
// "none", "poll", "explicit"; throws InvalidArgument otherwise.
ControlMode parse_control_mode(std::string_view s);

struct RepositoryOptions {
  std::filesystem::path dir;
  models::PredictorOptions predictor;  // device; batch buckets when a config names none
  ControlMode mode = ControlMode::None;
  size_t max_pending_tasks = 16;  // load/unload requests waiting for the loader; more get 503
  // A load that runs longer is reported (503 to its caller, the reason in the index) and left to
  // finish on its own thread, where what it builds is discarded; later loads and unloads go on.
  // 0: no bound (the load runs on the loader thread).
  std::chrono::milliseconds load_timeout{std::chrono::minutes(10)};
  // Bytes every loaded version together may hold (server/memory_budget.h): a load charges its
  // files, its KV cache and its captured graphs before allocating them, and fails naming what did
  // not fit; batch buckets past what is left are left out. 0: no limit.
  size_t model_memory = 0;
  std::chrono::milliseconds poll_interval{std::chrono::seconds(15)};
  std::vector<std::string> startup_models;  // explicit mode: loaded at start ("*": all)
  std::ostream* log = nullptr;
  // Installed as every batcher's BatcherConfig::on_batch (metrics): model, version, the run's
  // batch size and compute time.
  std::function<void(const std::string& model, int64_t version, int64_t batch, Clock::duration compute)> on_batch;
  // Text generation models: each generated token (first: time to first token, else the time
  // since the previous one). Their steps go to on_batch (batch: the step's sequences).
  std::function<void(const std::string& model, int64_t version, bool first, Clock::duration latency)> on_token;
  // Every batcher's BatcherConfig::inline_max_us: a cheap model's request that finds it idle runs
  // on the I/O thread that decoded it (0: never).
  uint64_t inline_max_us = 0;
  // Builds the ServedModel of one version instead of the built-in backends (Predictor with
  // warmup, or identity): tests use it to serve hand-written models from a repository of
  // empty version folders. An exception fails that load with its message.
  std::function<std::shared_ptr<ServedModel>(const std::string& model, int64_t version,
                                             const std::filesystem::path& version_dir, const ModelConfig& config)>
      factory;
};

// Model names are one path segment of the repository: 1-255 characters, not "." or "..", no
// '/', '\\' or NUL, not starting with '.'. Throws InvalidArgument naming the problem.
void check_model_name(std::string_view name);

class ModelRepository {
 public:
  // Throws NotFoundError when opt.dir is not a directory. Loads (per mode) before returning;
  // a model that fails to load is UNAVAILABLE with its reason, never an exception.
  explicit ModelRepository(RepositoryOptions opt);
  ~ModelRepository();  // stops polling and the loader, drains every batcher

  // The served version (highest when none is given). Throws NotFoundError naming the unknown
  // model or version, or HttpError(503) when the model exists but is not ready (naming its state and reason).
  std::shared_ptr<const ModelVersion> resolve(std::string_view name, std::optional<std::string_view> version) const;

  // Every model folder in the repository and every loaded model, sorted by name; ready_only
  // filters to READY ones (the index request's {"ready": true}).
  std::vector<IndexEntry> index(bool ready_only = false) const;

  using Done = std::function<void(int status, std::string message)>;  // 200, or 400/404/500 + reason
  // Loads or reloads `name` on the loader thread and calls done when it is READY or failed.
  // config_json: a config that replaces config.json for this load (the load request's
  // parameters.config). Mode none: done(400, ...) at once.
  void load(std::string name, std::optional<std::string> config_json, Done done);
  // Unpublishes `name` (UNLOADING: new requests get 503), drains its batchers once the requests
  // holding its versions finish (at most 30 s), then marks it unloaded (404) and calls done.
  void unload(std::string name, Done done);

  // Strict readiness: every model the repository is meant to serve is READY.
  bool all_ready() const { return not_ready_reason().empty(); }
  // Why all_ready() is false ("model 'm' is UNAVAILABLE: <reason>", "the repository is shut
  // down"); empty when it is true.
  std::string not_ready_reason() const;
  // Drains every batcher (in-flight requests finish); afterwards resolve() fails with 503.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hg::server
