// Test helpers for the ModelRepository tests: temporary repositories made of copies of the
// bundled digits_mlp package, and an inference through a version's batcher.
#pragma once
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
#include "wait.h"

#ifndef HG_SOURCE_DIR
#error "HG_SOURCE_DIR must be defined as the repository root"
#endif

namespace hg::test::repo {

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

inline const fs::path kPackage = fs::path(HG_SOURCE_DIR) / "models" / "repository" / "digits_mlp" / "1";
inline constexpr const char* kSmallBuckets = R"({"batch_buckets": [1, 2]})";

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

inline RepositoryOptions options(const TempRepo& r, ControlMode mode = ControlMode::None) {
  RepositoryOptions o;
  o.dir = r.dir();
  o.mode = mode;
  return o;
}

struct Answer {
  int status = 0;
  std::string message;
};

// Waits (bounded) for a load or unload request's answer; on timeout a test failure naming
// `what` and status 0.
template <class Request>
Answer await(Request&& request, const std::string& what) {
  auto p = std::make_shared<std::promise<Answer>>();
  auto f = p->get_future();
  request([p](int status, std::string message) { p->set_value({status, std::move(message)}); });
  if (!hg::test::ready_within(f, hg::test::kWaitLimit, what)) return {0, "no " + what};
  return f.get();
}

inline Answer load(ModelRepository& repo, const std::string& name, std::optional<std::string> config = std::nullopt) {
  return await([&](ModelRepository::Done done) { repo.load(name, config, std::move(done)); },
               "the answer to load('" + name + "')");
}
inline Answer unload(ModelRepository& repo, const std::string& name) {
  return await([&](ModelRepository::Done done) { repo.unload(name, std::move(done)); },
               "the answer to unload('" + name + "')");
}

inline std::vector<int64_t> served_versions(const ModelRepository& repo, const std::string& name) {
  std::vector<int64_t> out;
  for (const IndexEntry& e : repo.index())
    if (e.name == name && e.state == ModelState::Ready) out.push_back(std::stoll(e.version));
  return out;
}

inline std::vector<float> sample(int seed) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((seed * 7 + static_cast<int>(i) * 3) % 17) / 16.0f;
  return x;
}

// One inference of batch 1 through the version's batcher: (status, logits).
inline std::pair<int, std::vector<float>> infer(const ModelVersion& v, const std::vector<float>& x) {
  auto job = std::make_shared<BatchJob>();
  job->inputs = {std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float))};
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  job->done = [done](BatchJob&) { done->set_value(); };
  if (v.batcher->submit(job) != DynamicBatcher::Submit::Queued) return {503, {}};
  if (!hg::test::ready_within(finished, hg::test::kWaitLimit, "an inference through the batcher of version " +
                                                                 std::to_string(v.version)))
    return {0, {}};
  std::vector<float> out;
  if (job->status == 200) {
    out.resize(job->outputs[0].size() / sizeof(float));
    std::memcpy(out.data(), job->outputs[0].data(), job->outputs[0].size());
  }
  return {job->status, out};
}

// Polls `pred` until it holds; false and a test failure naming `what` after `limit`.
template <class Pred>
bool eventually(Pred pred, std::string_view what, std::chrono::milliseconds limit = hg::test::kWaitLimit) {
  return hg::test::wait_until(pred, limit, what);
}


}  // namespace hg::test::repo
