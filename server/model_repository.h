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

namespace hg::server {

// What the server needs from a loaded model. Implemented over models::Predictor; tests may
// provide their own.
class ServedModel {
 public:
  virtual ~ServedModel() = default;
  virtual const models::PackageSpec& spec() const = 0;
  // Elements of one sample of input/output i (the shape without the batch dimension).
  virtual int64_t input_size(size_t i) const = 0;
  virtual int64_t output_size(size_t i) const = 0;
  // Thread-safe. inputs[i] holds batch * input_size(i) elements of the datatype spec() declares
  // (FP32: float, INT64: int64_t); outputs[j] receives batch * output_size(j). Throws hg::Error on failure.
  virtual void run(const std::vector<const void*>& inputs, int64_t batch,
                   const std::vector<void*>& outputs) = 0;
};

// "1,2,4,8" -> {1, 2, 4, 8}; throws hg::InvalidArgument naming a bad entry.
std::vector<int64_t> parse_batch_sizes(std::string_view text);

// Wraps a loaded, warmed-up Predictor.
std::shared_ptr<ServedModel> make_served_model(std::unique_ptr<models::Predictor> predictor);

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
