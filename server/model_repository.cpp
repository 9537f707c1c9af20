#include "server/model_repository.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <ostream>
#include <system_error>

#include "engine/error.h"

namespace hg::server {
namespace fs = std::filesystem;

namespace {

class PredictorModel final : public ServedModel {
 public:
  explicit PredictorModel(std::unique_ptr<models::Predictor> p) : p_(std::move(p)) {}
  const models::PackageSpec& spec() const override { return p_->package().spec; }
  int64_t input_size(size_t i) const override { return p_->input_size(i); }
  int64_t output_size(size_t i) const override { return p_->output_size(i); }
  void run(const std::vector<const void*>& inputs, int64_t batch,
           const std::vector<void*>& outputs) override {
    p_->run(inputs, batch, outputs);
  }

 private:
  std::unique_ptr<models::Predictor> p_;
};

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

// The server speaks FP32 and INT64 with at most one variable (batch) dimension per tensor.
void check_servable(const models::PackageSpec& spec) {
  if (spec.inputs.empty() || spec.outputs.empty())
    throw InvalidArgument("model declares no inputs or no outputs");
  auto check = [](const models::IOSpec& io, const char* kind) {
    if (io.datatype != "FP32" && io.datatype != "INT64")
      throw InvalidArgument(std::string(kind) + " '" + io.name + "' has datatype " + io.datatype +
                            "; only FP32 and INT64 are served");
    if (std::count(io.shape.begin(), io.shape.end(), int64_t{-1}) > 1)
      throw InvalidArgument(std::string(kind) + " '" + io.name +
                            "' has more than one variable dimension");
  };
  for (auto& io : spec.inputs) check(io, "input");
  for (auto& io : spec.outputs) check(io, "output");
}

ModelEntry load_model(const fs::path& model_dir, const models::PredictorOptions& opt,
                      std::ostream* log) {
  ModelEntry e;
  e.name = model_dir.filename().string();
  std::error_code ec;
  for (const auto& sub : fs::directory_iterator(model_dir, ec)) {
    if (!sub.is_directory(ec)) continue;
    if (auto v = parse_version(sub.path().filename().string())) e.version = std::max(e.version, *v);
  }
  if (e.version == 0) {
    e.reason = "no version directory (a positive integer) in " + model_dir.string();
    if (log) *log << "hgraph-serve: model '" << e.name << "' UNAVAILABLE: " << e.reason << "\n";
    return e;
  }
  const fs::path dir = model_dir / std::to_string(e.version);
  auto t0 = std::chrono::steady_clock::now();
  try {
    auto p = models::Predictor::load(dir, opt);
    check_servable(p->package().spec);
    e.buckets = p->capture_all();
    e.model = make_served_model(std::move(p));
    e.state = ModelState::Ready;
  } catch (const std::exception& ex) {
    e.reason = ex.what();
    e.state = ModelState::Unavailable;
  }
  e.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (log) {
    if (e.ready()) {
      const auto cached = std::count_if(e.buckets.begin(), e.buckets.end(), [](auto& b) { return b.disk_hit; });
      *log << "hgraph-serve: model '" << e.name << "' version " << e.version << " READY (" << e.load_ms
           << " ms, " << e.buckets.size() << " buckets captured, " << cached << " from the graph cache)\n";
    } else {
      *log << "hgraph-serve: model '" << e.name << "' version " << e.version
           << " UNAVAILABLE: failed to load " << dir.string() << ": " << e.reason << "\n";
    }
    log->flush();
  }
  return e;
}

}  // namespace

std::vector<int64_t> parse_batch_sizes(std::string_view text) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = std::min(text.find(',', pos), text.size());
    std::string_view item = text.substr(pos, comma - pos);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < 1)
      throw InvalidArgument("bad batch size '" + std::string(item) + "' in '" + std::string(text) +
                            "' (expected positive integers separated by commas)");
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

std::shared_ptr<ServedModel> make_served_model(std::unique_ptr<models::Predictor> predictor) {
  return std::make_shared<PredictorModel>(std::move(predictor));
}

const char* model_state_name(ModelState s) {
  return s == ModelState::Ready ? "READY" : "UNAVAILABLE";
}

ModelRepository ModelRepository::load(const fs::path& dir, const models::PredictorOptions& opt,
                                      std::ostream* log) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw NotFoundError("model repository '" + dir.string() + "' is not a directory");
  std::vector<fs::path> model_dirs;
  for (const auto& d : fs::directory_iterator(dir, ec)) {
    const std::string name = d.path().filename().string();
    if (name.empty() || name[0] == '.' || !d.is_directory(ec)) continue;
    model_dirs.push_back(d.path());
  }
  if (ec) throw IoError("cannot list model repository '" + dir.string() + "': " + ec.message());
  std::sort(model_dirs.begin(), model_dirs.end());
  ModelRepository repo;
  for (const auto& md : model_dirs) repo.add(load_model(md, opt, log));
  if (log && repo.size() == 0) *log << "hgraph-serve: no models in " << dir.string() << "\n";
  return repo;
}

void ModelRepository::add(ModelEntry e) {
  std::string key = e.name;
  models_.insert_or_assign(std::move(key), std::move(e));
}

const ModelEntry* ModelRepository::find(std::string_view name) const {
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : &it->second;
}

const ModelEntry& ModelRepository::resolve(std::string_view name,
                                           std::optional<std::string_view> version) const {
  const ModelEntry* e = find(name);
  if (!e) throw NotFoundError("unknown model '" + std::string(name) + "'");
  if (version) {
    auto v = parse_version(*version);
    if (!v || *v != e->version)
      throw NotFoundError("unknown version '" + std::string(*version) + "' of model '" +
                          std::string(name) + "' (loaded version: " + std::to_string(e->version) + ")");
  }
  return *e;
}

bool ModelRepository::all_ready() const {
  return std::all_of(models_.begin(), models_.end(), [](const auto& kv) { return kv.second.ready(); });
}

std::vector<const ModelEntry*> ModelRepository::entries() const {
  std::vector<const ModelEntry*> out;
  out.reserve(models_.size());
  for (const auto& kv : models_) out.push_back(&kv.second);
  return out;
}

}  // namespace hg::server
