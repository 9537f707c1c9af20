// A Triton-style model repository: DIR/<model>/<version>/model.json (or model.onnx, imported at
// load), highest version served.
//
//   hg::models::PredictorOptions popt;                       // device, batch buckets
//   auto repo = hg::server::ModelRepository::load("models/repository", popt, &std::cerr);
//   const hg::server::ModelEntry& e = repo.resolve("digits_mlp", std::nullopt);  // or "1"
//   if (e.ready()) e.model->run({in.data()}, 3, {out.data()});
//   bool ok = repo.all_ready();                              // strict readiness
//
// Loading never throws for a bad model: the model is kept as UNAVAILABLE with the reason
// (and logged); only a missing repository directory throws. Tests can build a repository
// by hand with add() and their own ServedModel.
#pragma once
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/package.h"
#include "models/predictor.h"
#include "server/served_model.h"

namespace hg::server {

// "1,2,4,8" -> {1, 2, 4, 8}; throws hg::InvalidArgument naming a bad entry.
std::vector<int64_t> parse_batch_sizes(std::string_view text);

enum class ModelState { Ready, Unavailable };
const char* model_state_name(ModelState s);  // "READY", "UNAVAILABLE"

struct ModelEntry {
  std::string name;
  int64_t version = 0;
  ModelState state = ModelState::Unavailable;
  std::string reason;                   // why it is unavailable
  std::shared_ptr<ServedModel> model;   // set when Ready
  std::vector<models::BucketInfo> buckets;  // warmup report
  double load_ms = 0;
  bool ready() const { return state == ModelState::Ready && model != nullptr; }
};

class ModelRepository {
 public:
  // Scans `dir`, loads the highest version of each model with Predictor::load and captures
  // every bucket. Progress and failures go to `log` (may be null). Throws hg::NotFoundError
  // when `dir` is not a directory.
  static ModelRepository load(const std::filesystem::path& dir, const models::PredictorOptions& opt,
                              std::ostream* log);

  // Adds or replaces the entry for e.name.
  void add(ModelEntry e);

  // nullptr when no model has that name.
  const ModelEntry* find(std::string_view name) const;
  // The served entry of `name`; with a version, it must be the one loaded. Throws
  // hg::NotFoundError naming the unknown model or version.
  const ModelEntry& resolve(std::string_view name, std::optional<std::string_view> version) const;

  // Strict readiness: every model is ready (true for an empty repository).
  bool all_ready() const;
  // Sorted by name.
  std::vector<const ModelEntry*> entries() const;
  size_t size() const { return models_.size(); }

 private:
  std::map<std::string, ModelEntry, std::less<>> models_;
};

}  // namespace hg::server
