#include "server/model_repository.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <ostream>
#include <sstream>
#include <system_error>
#include <thread>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "server/http_error.h"
#include "server/model_version.h"

namespace hg::server {
namespace fs = std::filesystem;

namespace {

// Version folders are positive integers without leading zeros: "1", "12".
std::optional<int64_t> parse_version(std::string_view s) {
  if (s.empty() || s.size() > 18 || s[0] < '1' || s[0] > '9') return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// Why `name` is not a model name, or nullptr.
const char* model_name_problem(std::string_view name) {
  if (name.empty()) return "it is empty";
  if (name.size() > 255) return "it is longer than 255 characters";
  if (name == "." || name == "..") return "it is not a folder name of the repository";
  if (name[0] == '.') return "it starts with '.'";
  if (name.find('/') != std::string_view::npos || name.find('\\') != std::string_view::npos)
    return "it contains a path separator";
  if (name.find('\0') != std::string_view::npos) return "it contains a NUL character";
  for (char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "it contains a control character";
  return nullptr;
}

std::string versions_text(const std::vector<int64_t>& versions) {
  std::string s;
  for (int64_t v : versions) s += (s.empty() ? "" : ", ") + std::to_string(v);
  return s.empty() ? "none" : s;
}

// What a load of the model folder reads: config.json and every file under its version
// folders, each by path, size and modification time. A change in any of them is a change of
// the model (poll mode).
std::string fingerprint(const fs::path& model_dir) {
  std::vector<std::string> items;
  std::error_code ec;
  auto add = [&](const fs::path& p) {
    std::error_code e;
    const auto st = fs::status(p, e);
    std::ostringstream line;
    line << fs::relative(p, model_dir, e).string() << '|';
    if (fs::is_regular_file(st))
      line << fs::file_size(p, e) << '|' << fs::last_write_time(p, e).time_since_epoch().count();
    items.push_back(line.str());
  };
  add(model_dir / "config.json");
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    if (!entry.is_directory(ec) || !parse_version(entry.path().filename().string())) continue;
    add(entry.path());
    for (auto it = fs::recursive_directory_iterator(entry.path(), ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      add(it->path());
  }
  std::sort(items.begin(), items.end());
  std::string out;
  for (const auto& i : items) out += i + '\n';
  return out;
}

struct Record {
  ModelState state = ModelState::Unavailable;
  std::string reason;
  std::vector<std::shared_ptr<const ModelVersion>> versions;  // served, highest first
  std::vector<int64_t> selected;  // the versions the last load meant to serve
  bool wanted = false;            // meant to be served: all_ready() waits for it
  std::string fingerprint;        // of the folder at the last load
};

// An unload whose versions are still draining: `done` is answered when the last one is.
struct Unloading {
  std::string name;
  size_t left = 0;
  bool forget = false;  // erase the record (its folder is gone) instead of marking it unloaded
  ModelRepository::Done done;
};

// A version taken out of service, drained once no request holds it (or after kHoldLimit).
struct Retiree {
  std::shared_ptr<const ModelVersion> version;
  std::chrono::steady_clock::time_point since;
  std::shared_ptr<Unloading> unload;  // set for an unload's versions
};
constexpr auto kHoldLimit = std::chrono::seconds(30);

// A load on a thread of its own (under Impl::mu): publishing once it swaps its versions in,
// abandoned once it ran past the load timeout (then it changes nothing).
struct LoadRun {
  bool publishing = false, abandoned = false;
};

struct Task {
  enum class Kind { Startup, Load, Unload } kind;
  std::string name;
  std::optional<std::string> config_json;
  ModelRepository::Done done;
};

struct Outcome {
  int status;
  std::string message;
};

}  // namespace

const char* model_state_name(ModelState s) {
  switch (s) {
    case ModelState::Loading: return "LOADING";
    case ModelState::Ready: return "READY";
    case ModelState::Unavailable: return "UNAVAILABLE";
    case ModelState::Unloading: return "UNLOADING";
  }
  return "UNAVAILABLE";
}

ControlMode parse_control_mode(std::string_view s) {
  if (s == "none") return ControlMode::None;
  if (s == "poll") return ControlMode::Poll;
  if (s == "explicit") return ControlMode::Explicit;
  throw InvalidArgument("unknown model control mode '" + std::string(s) + "' (none, poll, explicit)");
}

void check_model_name(std::string_view name) {
  const char* why = model_name_problem(name);
  if (!why) return;
  throw InvalidArgument("invalid model name '" + printable(name, 64) + "': " + why);
}

struct ModelRepository::Impl {
  RepositoryOptions opt;
  std::shared_ptr<MemoryBudget> memory;  // of opt.model_memory

  mutable std::mutex mu;  // records, stopped
  std::map<std::string, Record, std::less<>> records;
  bool stopped = false;

  std::mutex queue_mu;  // queue, quit
  std::condition_variable queue_cv;
  std::deque<Task> queue;
  bool quit = false;

  // Swapped-out and unloaded versions waiting to be drained (loader thread only).
  std::vector<Retiree> retiring;
  // Loads abandoned past the load timeout, still running (loader thread only).
  struct Runaway {
    std::string name;
    std::chrono::steady_clock::time_point since;
    std::thread worker;
    std::future<Outcome> result;
  };
  std::vector<Runaway> runaways;
  std::mutex log_mu;
  std::thread loader;

  void log(const std::string& line) {
    if (!opt.log) return;
    std::lock_guard lk(log_mu);
    *opt.log << "hgraph-serve: " << printable(line, 4096) << std::endl;
  }

  static void finish(const Done& done, const Outcome& o) {
    if (done) done(o.status, o.message);
  }

  std::vector<std::string> folder_names() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(opt.dir, ec)) {
      std::string name = d.path().filename().string();
      if (!model_name_problem(name) && d.is_directory(ec)) names.push_back(std::move(name));
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // ---- load / unload (loader thread; each load on a thread of its own) -----------------

  // run: set for a load on a thread of its own (load_within_bound); once abandoned (under mu) it
  // changes no record and publishes nothing.
  Outcome load_model(const std::string& name, const std::optional<std::string>& config_json, bool startup,
                     LoadRun* run = nullptr) {
    const fs::path model_dir = opt.dir / name;
    std::error_code ec;
    if (!fs::is_directory(model_dir, ec)) {
      const std::string msg = "model '" + name + "': no folder " + model_dir.string() + " in the repository";
      log(msg);
      std::lock_guard lk(mu);
      if (startup) {  // a startup model that is missing keeps the server not ready
        Record& r = records[name];
        r.wanted = true;
        r.state = ModelState::Unavailable;
        r.reason = msg;
      }
      return {404, msg};
    }
    const std::string fp = fingerprint(model_dir);
    {
      std::lock_guard lk(mu);
      if (stopped) return {503, "model '" + name + "': the server is shutting down"};
      Record& r = records[name];
      r.wanted = true;
      if (r.versions.empty()) {
        r.state = ModelState::Loading;
        r.reason.clear();
      }
    }
    log("model '" + name + "': loading from " + model_dir.string());
    std::vector<int64_t> selected;
    std::vector<std::shared_ptr<const ModelVersion>> built;
    try {
      ModelConfig config;
      if (config_json) {
        nlohmann::json j;
        try {
          j = read_json(*config_json, kConfigJsonLimits, "load request parameters.config");
        } catch (const InvalidArgument& e) {
          throw FormatError(e.what());
        }
        config = ModelConfig::parse(j, "load request parameters.config", name);
      } else {
        config = ModelConfig::load(model_dir);
      }
      std::vector<int64_t> available;
      for (const auto& d : fs::directory_iterator(model_dir, ec))
        if (auto v = parse_version(d.path().filename().string()); v && d.is_directory(ec)) available.push_back(*v);
      selected = config.version_policy.select(available);
      if (selected.empty())
        throw NotFoundError(available.empty() ? "no version folder (a positive integer) in " + model_dir.string()
                                              : "the version policy selects none of the versions in " + model_dir.string() +
                                                    " (" + versions_text(available) + ")");
      for (int64_t v : config.version_policy.versions)
        if (std::find(available.begin(), available.end(), v) == available.end())
          log("model '" + name + "' version " + std::to_string(v) + ": named by version_policy.specific but " +
              (model_dir / std::to_string(v)).string() + " does not exist");
      for (int64_t v : selected) {
        const fs::path dir = model_dir / std::to_string(v);
        try {
          built.push_back(build_model_version(opt, *memory, name, v, dir, config, [this](const std::string& l) { log(l); }));
        } catch (const std::exception& e) {
          throw HttpError(http_status(e), "version " + std::to_string(v) + " (" + dir.string() + "): " + e.what());
        }
      }
    } catch (const std::exception& e) {
      const int status = http_status(e);
      std::string kept;
      {
        std::lock_guard lk(mu);
        if (run && run->abandoned) return {status, "model '" + name + "': failed to load: " + e.what()};
        Record& r = records[name];
        r.fingerprint = fp;
        r.selected = selected.empty() ? r.selected : selected;
        if (r.versions.empty()) {
          r.state = ModelState::Unavailable;
          r.reason = e.what();
        } else {
          std::vector<int64_t> serving;
          for (auto& v : r.versions) serving.push_back(v->version);
          kept = versions_text(serving);
          r.reason = std::string("reload failed: ") + e.what();
        }
      }
      const std::string msg = "model '" + name + "': failed to load: " + e.what() +
                              (kept.empty() ? "" : " (still serving version " + kept + ")");
      log(msg + (kept.empty() ? "; UNAVAILABLE" : ""));
      return {status, msg};
    }
    std::vector<std::shared_ptr<const ModelVersion>> old;
    {
      std::lock_guard lk(mu);
      if (stopped || (run && run->abandoned)) {
        for (auto& v : built) v->batcher->drain();
        return {503, "model '" + name + "': " + (stopped ? "the server is shutting down" : "discarded (past the load timeout)")};
      }
      if (run) run->publishing = true;
      Record& r = records[name];
      old = std::exchange(r.versions, built);
      r.state = ModelState::Ready;
      r.reason.clear();
      r.selected = selected;
      r.fingerprint = fp;
    }
    for (auto& v : built) log(ready_line(*v, model_dir / std::to_string(v->version)));
    for (auto& v : old) retiring.push_back({std::move(v), std::chrono::steady_clock::now(), nullptr});
    return {200, "model '" + name + "' loaded: version " + versions_text(selected) + " READY"};
  }

  // Unpublishes `name` (UNLOADING: new requests get 503); its versions drain once the requests
  // holding them finish, then the model is forgotten or marked unloaded and `done` answered.
  // Returns the answer when there is nothing to wait for.
  std::optional<Outcome> unload_model(const std::string& name, bool forget, Done done) {
    auto u = std::make_shared<Unloading>(Unloading{name, 0, forget, std::move(done)});
    std::vector<std::shared_ptr<const ModelVersion>> old;
    {
      std::lock_guard lk(mu);
      auto it = records.find(name);
      if (it == records.end() || (!it->second.wanted && it->second.versions.empty()))
        return Outcome{404, "model '" + name + "' is not loaded"};
      old = std::exchange(it->second.versions, {});
      it->second.wanted = false;
      it->second.state = ModelState::Unloading;
      it->second.reason.clear();
    }
    if (old.empty()) return complete_unload(*u);
    u->left = old.size();
    log("model '" + name + "': UNLOADING " + std::to_string(old.size()) + " version(s)");
    for (auto& v : old) retiring.push_back({std::move(v), std::chrono::steady_clock::now(), u});
    return std::nullopt;
  }

  Outcome complete_unload(const Unloading& u) {
    {
      std::lock_guard lk(mu);
      auto it = records.find(u.name);
      // A load that ran meanwhile owns the record now.
      if (it != records.end() && it->second.state == ModelState::Unloading && it->second.versions.empty()) {
        if (u.forget) {
          records.erase(it);
        } else {
          it->second.state = ModelState::Unavailable;
          it->second.reason = "unloaded";
        }
      }
    }
    log("model '" + u.name + "': unloaded");
    return {200, "model '" + u.name + "' unloaded"};
  }

  // Loads every folder that is new or changed since its last load, unloads vanished ones.
  void scan() {
    const std::vector<std::string> names = folder_names();
    for (const auto& name : names) {
      const std::string fp = fingerprint(opt.dir / name);
      {
        std::lock_guard lk(mu);
        auto it = records.find(name);
        if (it != records.end() && it->second.fingerprint == fp) continue;
      }
      load_within_bound(name, std::nullopt, false);
    }
    std::vector<std::string> gone;
    {
      std::lock_guard lk(mu);
      for (const auto& [name, r] : records)
        if (!std::binary_search(names.begin(), names.end(), name)) gone.push_back(name);
    }
    for (const auto& name : gone) {
      log("model '" + name + "': its folder is gone from " + opt.dir.string());
      unload_model(name, true, nullptr);
    }
  }

  void startup() {
    if (opt.mode != ControlMode::Explicit) return scan();
    for (const auto& name : opt.startup_models) {
      if (name == "*") {
        for (const auto& n : folder_names()) load_within_bound(n, std::nullopt, true);
      } else {
        load_within_bound(name, std::nullopt, true);
      }
    }
  }

  // Drains the retired versions no request holds any more, those held longer than kHoldLimit,
  // or all of them (`all`), and answers the unloads whose last version that was.
  void retire(bool all) {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = retiring.begin(); it != retiring.end();) {
      const bool held = it->version.use_count() > 1;
      if (!all && held && now - it->since < kHoldLimit) {
        ++it;
        continue;
      }
      it->version->batcher->drain();
      log("model '" + it->version->name + "' version " + std::to_string(it->version->version) + ": drained" +
          (held ? " while requests still hold it" : ""));
      std::shared_ptr<Unloading> u = std::move(it->unload);
      it = retiring.erase(it);
      if (u && --u->left == 0) finish(u->done, complete_unload(*u));
    }
  }

  // load_model on a thread of its own, waited for up to opt.load_timeout. A load that runs past
  // it is reported (its record says so, its caller gets 503) and left to finish in the background,
  // where what it builds is discarded: the loader goes on with the next task.
  Outcome load_within_bound(const std::string& name, const std::optional<std::string>& config_json, bool startup) {
    if (opt.load_timeout.count() <= 0) return load_model(name, config_json, startup);
    auto run = std::make_shared<LoadRun>();
    std::packaged_task<Outcome()> work(
        [this, name, config_json, startup, run] { return load_model(name, config_json, startup, run.get()); });
    std::future<Outcome> result = work.get_future();
    std::thread worker(std::move(work));
    if (result.wait_for(opt.load_timeout) == std::future_status::ready) {
      worker.join();
      return result.get();
    }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", static_cast<double>(opt.load_timeout.count()) / 1000);
    const std::string why = "the load has run for " + std::string(secs) +
                            " s, past the load timeout (--load-timeout-secs); it goes on in the background and what "
                            "it builds is discarded";
    bool abandoned = false;
    {
      std::lock_guard lk(mu);
      if (!run->publishing) {  // else it is swapping its versions in: that ends at once
        run->abandoned = abandoned = true;
        Record& r = records[name];
        if (r.versions.empty()) {
          r.state = ModelState::Unavailable;
          r.reason = why;
        } else {
          r.reason = "reload failed: " + why;
        }
      }
    }
    if (!abandoned) {
      worker.join();
      return result.get();
    }
    log("model '" + name + "': " + why);
    runaways.push_back({name, std::chrono::steady_clock::now(), std::move(worker), std::move(result)});
    return {503, "model '" + name + "': " + why};
  }

  // Joins the abandoned loads that have ended (all of them with `all`: at exit, however long).
  void reap_runaways(bool all) {
    for (auto it = runaways.begin(); it != runaways.end();) {
      if (!all && it->result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ++it;
        continue;
      }
      if (all && it->result.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        log("model '" + it->name + "': waiting for its load that ran past the load timeout to end");
      it->worker.join();
      log("model '" + it->name + "': the load that ran past the load timeout ended " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - it->since).count()) +
          " s after it; what it built was discarded");
      it = runaways.erase(it);
    }
  }

  void run(Task& t) {
    std::optional<Outcome> o = Outcome{200, ""};
    try {
      switch (t.kind) {
        case Task::Kind::Startup: startup(); break;
        case Task::Kind::Load: o = load_within_bound(t.name, t.config_json, false); break;
        case Task::Kind::Unload: o = unload_model(t.name, false, t.done); break;
      }
    } catch (const std::exception& e) {  // the file system failed under us
      o = Outcome{http_status(e), "model '" + t.name + "': " + e.what()};
      log(o->message);
    }
    if (o) finish(t.done, *o);
  }

  void loader_main() {
    auto next_poll = std::chrono::steady_clock::now() + opt.poll_interval;
    while (true) {
      std::optional<Task> task;
      {
        std::unique_lock lk(queue_mu);
        auto ready = [&] { return quit || !queue.empty(); };
        if (!retiring.empty()) {
          queue_cv.wait_for(lk, std::chrono::milliseconds(5), ready);
        } else if (opt.mode == ControlMode::Poll) {
          queue_cv.wait_until(lk, next_poll, ready);
        } else {
          queue_cv.wait(lk, ready);
        }
        if (quit) break;
        if (!queue.empty()) {
          task = std::move(queue.front());
          queue.pop_front();
        }
      }
      if (task) run(*task);
      const bool stopping = [&] {
        std::lock_guard lk(mu);
        return stopped;
      }();
      if (opt.mode == ControlMode::Poll && !stopping && std::chrono::steady_clock::now() >= next_poll) {
        try {
          scan();
        } catch (const std::exception& e) {
          log(std::string("repository poll of ") + opt.dir.string() + " failed: " + e.what());
        }
        next_poll = std::chrono::steady_clock::now() + opt.poll_interval;
      }
      retire(stopping);
      reap_runaways(false);
    }
    std::deque<Task> left;
    {
      std::lock_guard lk(queue_mu);
      left.swap(queue);
    }
    for (auto& t : left) finish(t.done, {503, "model '" + t.name + "': the server is shutting down"});
    retire(true);
    reap_runaways(true);
  }

  void enqueue(Task t) {
    {
      std::lock_guard lk(queue_mu);
      if (!quit && queue.size() < opt.max_pending_tasks) {
        queue.push_back(std::move(t));
        queue_cv.notify_all();
        return;
      }
      if (!quit) {
        finish(t.done, {503, "model '" + t.name + "': " + std::to_string(queue.size()) +
                                 " load and unload requests are already waiting for the loader; retry later"});
        return;
      }
    }
    finish(t.done, {503, "model '" + t.name + "': the server is shutting down"});
  }

  // Load and unload requests: refused at once in modes none and poll and for bad names.
  bool accept(const std::string& name, const char* what, const Done& done) {
    if (opt.mode != ControlMode::Explicit) {
      finish(done, {400, std::string("cannot ") + what + " model '" + name + "': the model control mode is " +
                             (opt.mode == ControlMode::None ? "none" : "poll") +
                             " (start the server with --model-control-mode=explicit)"});
      return false;
    }
    try {
      check_model_name(name);
    } catch (const InvalidArgument& e) {
      finish(done, {400, std::string("cannot ") + what + " model: " + e.what()});
      return false;
    }
    return true;
  }
};

ModelRepository::ModelRepository(RepositoryOptions opt) : impl_(std::make_unique<Impl>()) {
  std::error_code ec;
  if (!fs::is_directory(opt.dir, ec))
    throw NotFoundError("model repository '" + opt.dir.string() + "' is not a directory");
  for (const auto& name : opt.startup_models)
    if (name != "*") check_model_name(name);
  if (opt.poll_interval <= std::chrono::milliseconds(0))
    throw InvalidArgument("the repository poll interval must be positive");
  impl_->opt = std::move(opt);
  impl_->memory = MemoryBudget::make(impl_->opt.model_memory);
  impl_->loader = std::thread([impl = impl_.get()] { impl->loader_main(); });
  std::promise<void> started;
  impl_->enqueue({Task::Kind::Startup, "", std::nullopt, [&started](int, std::string) { started.set_value(); }});
  started.get_future().wait();
  std::lock_guard lk(impl_->mu);
  if (impl_->records.empty()) impl_->log("no models loaded from " + impl_->opt.dir.string());
}

ModelRepository::~ModelRepository() {
  shutdown();
  {
    std::lock_guard lk(impl_->queue_mu);
    impl_->quit = true;
  }
  impl_->queue_cv.notify_all();
  impl_->loader.join();
}

std::shared_ptr<const ModelVersion> ModelRepository::resolve(std::string_view name,
                                                             std::optional<std::string_view> version) const {
  check_model_name(name);
  std::lock_guard lk(impl_->mu);
  if (impl_->stopped) throw HttpError(503, "model '" + std::string(name) + "' is not served: the server is shutting down");
  auto it = impl_->records.find(name);
  if (it == impl_->records.end()) throw NotFoundError("unknown model '" + std::string(name) + "'");
  const Record& r = it->second;
  const std::optional<int64_t> v = version ? parse_version(*version) : std::nullopt;
  if (!r.versions.empty()) {
    if (!version) return r.versions.front();
    for (const auto& mv : r.versions)
      if (v && mv->version == *v) return mv;
    std::vector<int64_t> served;
    for (const auto& mv : r.versions) served.push_back(mv->version);
    throw NotFoundError("unknown version '" + std::string(*version) + "' of model '" + std::string(name) +
                        "' (served versions: " + versions_text(served) + ")");
  }
  if (!r.wanted && r.state != ModelState::Unloading)
    throw NotFoundError("model '" + std::string(name) + "' is not loaded" + (r.reason.empty() ? "" : " (" + r.reason + ")"));
  if (version && (!v || std::find(r.selected.begin(), r.selected.end(), *v) == r.selected.end()))
    throw NotFoundError("unknown version '" + std::string(*version) + "' of model '" + std::string(name) + "'");
  throw HttpError(503, "model '" + std::string(name) + "' is " + model_state_name(r.state) + (r.reason.empty() ? "" : ": " + r.reason));
}

std::vector<IndexEntry> ModelRepository::index(bool ready_only) const {
  std::vector<std::string> names = impl_->folder_names();
  std::vector<IndexEntry> out;
  std::lock_guard lk(impl_->mu);
  for (const auto& [name, r] : impl_->records) names.push_back(name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (const auto& name : names) {
    auto it = impl_->records.find(name);
    if (it == impl_->records.end()) {
      out.push_back({name, "", ModelState::Unavailable, "not loaded"});
    } else if (!it->second.versions.empty()) {
      for (const auto& v : it->second.versions) out.push_back({name, std::to_string(v->version), ModelState::Ready, it->second.reason});
    } else {
      out.push_back({name, "", it->second.state, it->second.reason});
    }
  }
  if (ready_only)
    out.erase(std::remove_if(out.begin(), out.end(), [](const IndexEntry& e) { return e.state != ModelState::Ready; }),
              out.end());
  return out;
}

void ModelRepository::load(std::string name, std::optional<std::string> config_json, Done done) {
  if (!impl_->accept(name, "load", done)) return;
  impl_->enqueue({Task::Kind::Load, std::move(name), std::move(config_json), std::move(done)});
}

void ModelRepository::unload(std::string name, Done done) {
  if (!impl_->accept(name, "unload", done)) return;
  impl_->enqueue({Task::Kind::Unload, std::move(name), std::nullopt, std::move(done)});
}

std::string ModelRepository::not_ready_reason() const {
  std::lock_guard lk(impl_->mu);
  if (impl_->stopped) return "the repository is shut down";
  for (const auto& [name, r] : impl_->records)
    if (r.wanted && r.versions.empty())
      return "model '" + name + "' is " + model_state_name(r.state) + (r.reason.empty() ? "" : ": " + r.reason);
  return {};
}

void ModelRepository::shutdown() {
  std::vector<std::shared_ptr<const ModelVersion>> served;
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    for (auto& [name, r] : impl_->records) {
      served.insert(served.end(), r.versions.begin(), r.versions.end());
      r.versions.clear();
      r.state = ModelState::Unavailable;
      r.reason = "the server is shutting down";
    }
  }
  for (auto& v : served) v->batcher->drain();
  impl_->queue_cv.notify_all();
}

}  // namespace hg::server
