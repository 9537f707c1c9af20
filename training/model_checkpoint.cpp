// ModelCheckpoint as Lightning's (pytorch-lightning callbacks/model_checkpoint.py): the same
// triggers, top-k bookkeeping, file names, version counter and state.
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "engine/error.h"
#include "training/callbacks.h"
#include "training/py_format.h"
#include "training/trainer.h"

namespace hg::training {
namespace {

namespace fs = std::filesystem;

// Scores may be +-inf (a NaN score is stored as the worst value); JSON has no such numbers.
nlohmann::json score_json(std::optional<double> v) {
  if (!v) return nullptr;
  if (std::isfinite(*v)) return *v;
  return std::isnan(*v) ? "nan" : *v > 0 ? "inf" : "-inf";
}

std::optional<double> score_from(const nlohmann::json& j, const char* key) {
  if (j.is_null()) return std::nullopt;
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  throw InvalidArgument(std::string("ModelCheckpoint state: '") + key + "' is not a score: " + j.dump());
}

bool whole_epoch(const Limit& l) { return l.batches < 0 && l.fraction == 1.0; }

// Lightning's reduce_boolean_decision: every rank (all) or any rank must agree.
bool agree(Trainer& t, bool decision, bool all) {
  if (t.strategy().world_size() <= 1) return decision;
  return t.strategy().reduce(decision ? 1.0 : 0.0, all ? ReduceOp::Min : ReduceOp::Max) > 0.5;
}

// Rank 0's value on every rank (one broadcast when distributed): names and scores come from
// rank-local metrics, which differ between ranks unless they were logged with sync_dist.
std::string rank0_string(Trainer& t, std::string s) {
  if (t.strategy().world_size() > 1) t.strategy().broadcast(s);
  return s;
}

double rank0_score(Trainer& t, double v) {
  if (t.strategy().world_size() <= 1) return v;
  std::string b(sizeof v, '\0');
  std::memcpy(b.data(), &v, sizeof v);
  t.strategy().broadcast(b);
  if (b.size() != sizeof v)
    throw InvalidArgument("ModelCheckpoint: rank 0's score arrived as " + std::to_string(b.size()) + " bytes, not 8");
  std::memcpy(&v, b.data(), sizeof v);
  return v;
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions opt) : opt_(std::move(opt)) {
  if (opt_.mode != "min" && opt_.mode != "max")
    throw InvalidArgument("ModelCheckpoint: mode must be 'min' or 'max', got '" + opt_.mode + "'");
  if (opt_.save_top_k < -1)
    throw InvalidArgument("ModelCheckpoint: save_top_k must be >= -1, got " + std::to_string(opt_.save_top_k));
  if (opt_.monitor.empty() && opt_.save_top_k > 1)
    throw InvalidArgument("ModelCheckpoint: save_top_k=" + std::to_string(opt_.save_top_k) +
                          " needs a monitor to rank checkpoints (without one: -1, 0 or 1)");
  if (opt_.every_n_train_steps.value_or(0) < 0 || opt_.every_n_epochs.value_or(0) < 0)
    throw InvalidArgument("ModelCheckpoint: every_n_train_steps and every_n_epochs must be >= 0");
  if (!opt_.every_n_train_steps && !opt_.every_n_epochs) {
    every_n_epochs_ = 1, every_n_train_steps_ = 0;
  } else {
    every_n_epochs_ = opt_.every_n_epochs.value_or(0);
    every_n_train_steps_ = opt_.every_n_train_steps.value_or(0);
    if (every_n_epochs_ > 0 && every_n_train_steps_ > 0)
      throw InvalidArgument("ModelCheckpoint: every_n_train_steps=" + std::to_string(every_n_train_steps_) +
                            " and every_n_epochs=" + std::to_string(every_n_epochs_) + " are mutually exclusive");
  }
  dirpath_ = opt_.dirpath;
}

std::string ModelCheckpoint::state_key() const {
  std::string monitor = opt_.monitor.empty() ? "None" : "'" + opt_.monitor + "'";
  return "ModelCheckpoint{'monitor': " + monitor + ", 'mode': '" + opt_.mode +
         "', 'every_n_train_steps': " + std::to_string(every_n_train_steps_) +
         ", 'every_n_epochs': " + std::to_string(every_n_epochs_) + ", 'train_time_interval': None}";
}

std::string ModelCheckpoint::format_checkpoint_name(const std::map<std::string, double>& metrics,
                                                    const std::string& filename, int version) const {
  std::string pattern = !filename.empty() ? filename : !opt_.filename.empty() ? opt_.filename : "{epoch}-{step}";
  std::string name;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern[i] != '{') {
      name += pattern[i++];
      continue;
    }
    size_t close = pattern.find('}', i);
    if (close == std::string::npos) throw InvalidArgument("ModelCheckpoint filename '" + pattern + "': unclosed '{'");
    std::string field = pattern.substr(i + 1, close - i - 1);
    size_t colon = field.find(':');
    std::string key = field.substr(0, colon), spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    auto it = metrics.find(key);
    bool is_int = it == metrics.end() || key == "epoch" || key == "step";  // missing keys format as 0
    double value = it == metrics.end() ? 0.0 : it->second;
    if (opt_.auto_insert_metric_name) name += key + "=";
    name += py_format(is_int ? std::trunc(value) : value, spec, is_int);
    i = close + 1;
  }
  if (version >= 0) name += "-v" + std::to_string(version);
  name += ".ckpt";
  return dirpath_.empty() ? name : (dirpath_ / name).string();
}

void ModelCheckpoint::setup(Trainer& t, LightningModule&, const std::string& stage) {
  if (opt_.dirpath.empty()) {
    std::string dir = (t.log_dir() / "checkpoints").string();
    t.strategy().broadcast(dir);  // rank 0's logger decides the version directory
    dirpath_ = dir;
  }
  if (pending_state_) {
    nlohmann::json s = std::move(*pending_state_);
    pending_state_.reset();
    apply_state(s);
  }
  if (stage == "fit" && t.is_global_zero() && fs::is_directory(dirpath_) && !fs::is_empty(dirpath_))
    spdlog::warn("ModelCheckpoint: checkpoint directory {} exists and is not empty", dirpath_.string());
  validation_in_fit_ = false;
}

void ModelCheckpoint::on_fit_start(Trainer& t, LightningModule&) {
  // After a resume, global_step is the restored one: that step is already in a checkpoint (with
  // accumulate_grad_batches, the micro-batches that follow a mid-epoch resume keep the step).
  last_global_step_saved_ = t.global_step();
}

std::map<std::string, double> ModelCheckpoint::monitor_candidates(Trainer& t) const {
  std::map<std::string, double> c = t.callback_metrics();
  c.try_emplace("epoch", t.current_epoch());
  c.try_emplace("step", static_cast<double>(t.global_step()));
  return c;
}

bool ModelCheckpoint::skip_saving(Trainer& t) const {
  return t.options().fast_dev_run > 0 || t.stage() != "fit" || t.sanity_checking() ||
         last_global_step_saved_ == t.global_step();
}

bool ModelCheckpoint::save_at_train_epoch_end(Trainer& t) const {
  if (opt_.save_on_train_epoch_end) return *opt_.save_on_train_epoch_end;
  // Lightning's rule, except that a fit without validation saves at epoch end whatever
  // check_val_every_n_epoch says (Lightning would then never save).
  if (t.num_val_batches() == 0) return true;
  const TrainerOptions& o = t.options();
  return o.check_val_every_n_epoch == 1 && whole_epoch(o.val_check_interval);
}

void ModelCheckpoint::on_train_batch_end(Trainer& t, LightningModule&, const Batch&, int64_t) {
  if (skip_saving(t) || every_n_train_steps_ < 1 || t.global_step() % every_n_train_steps_ != 0) return;
  auto c = monitor_candidates(t);
  save_topk(t, c);
  save_last(t, c);
}

void ModelCheckpoint::on_train_epoch_end(Trainer& t, LightningModule&) {
  if (skip_saving(t) || !save_at_train_epoch_end(t)) return;
  auto c = monitor_candidates(t);
  if (every_n_epochs_ >= 1 && (t.current_epoch() + 1) % every_n_epochs_ == 0) save_topk(t, c);
  save_last(t, c);
}

void ModelCheckpoint::on_validation_epoch_start(Trainer& t, LightningModule&) {
  if (t.stage() == "fit" && !t.sanity_checking()) validation_in_fit_ = true;
}

void ModelCheckpoint::on_validation_end(Trainer& t, LightningModule&) {
  if (skip_saving(t) || save_at_train_epoch_end(t)) return;
  auto c = monitor_candidates(t);
  if (every_n_epochs_ >= 1 && (t.current_epoch() + 1) % every_n_epochs_ == 0) save_topk(t, c);
  save_last(t, c);
}

void ModelCheckpoint::save_topk(Trainer& t, const std::map<std::string, double>& c) {
  if (opt_.save_top_k == 0) return;
  if (opt_.monitor.empty()) {  // the latest checkpoint (save_top_k 1: only it)
    std::string path = unused_filepath(t, c, "", best_model_path_);
    std::string previous = best_model_path_;
    best_model_path_ = path;
    save(t, path);
    if (opt_.save_top_k == 1 && !previous.empty()) remove(t, previous, path);
    return;
  }
  auto it = c.find(opt_.monitor);
  // Every rank takes the same branch: the ones below make collectives.
  if (!agree(t, it != c.end(), true)) {
    std::string keys;
    for (const auto& kv : c) keys += (keys.empty() ? "" : ", ") + kv.first;
    std::string m = it != c.end()
        ? "ModelCheckpoint(monitor='" + opt_.monitor + "'): another rank did not log it"
        : "ModelCheckpoint(monitor='" + opt_.monitor + "') could not find the monitored key in the logged "
          "metrics: [" + keys + "]. Did you call log('" + opt_.monitor + "', value) in the LightningModule?";
    if (validation_in_fit_) throw InvalidArgument(m);
    spdlog::warn("{}", m);
    return;
  }
  double current = it->second;
  bool better = opt_.save_top_k == -1 || static_cast<int>(best_k_models_.size()) < opt_.save_top_k;
  if (!better) {
    double kth = best_k_models_.at(kth_best_model_path_);
    better = agree(t, opt_.mode == "min" ? current < kth : current > kth, true);
  }
  if (better) update_best_and_save(t, current, c);
}

void ModelCheckpoint::update_best_and_save(Trainer& t, double current, const std::map<std::string, double>& c) {
  current = rank0_score(t, current);  // every rank keeps rank 0's ranking (and file names)
  size_t k = opt_.save_top_k == -1 ? best_k_models_.size() + 1 : size_t(opt_.save_top_k);
  std::string del;
  if (best_k_models_.size() == k && k > 0) {
    del = kth_best_model_path_;
    best_k_models_.erase(del);
  }
  if (std::isnan(current))
    current = opt_.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  std::string path = unused_filepath(t, c, "", del);
  current_score_ = current;
  best_k_models_[path] = current;
  bool min = opt_.mode == "min";
  auto better_first = [&](const auto& a, const auto& b) { return min ? a.second < b.second : a.second > b.second; };
  if (best_k_models_.size() == k) {  // the k-th best: the one to drop next
    auto kth = std::max_element(best_k_models_.begin(), best_k_models_.end(), better_first);
    kth_best_model_path_ = kth->first, kth_value_ = kth->second;
  }
  auto best = std::min_element(best_k_models_.begin(), best_k_models_.end(), better_first);
  best_model_path_ = best->first, best_model_score_ = best->second;
  save(t, path);
  if (!del.empty()) remove(t, del, path);
}

void ModelCheckpoint::save_last(Trainer& t, const std::map<std::string, double>& c) {
  if (!opt_.save_last) return;
  std::string path = unused_filepath(t, c, "last", last_model_path_);
  std::string previous = last_model_path_;
  last_model_path_ = path;
  save(t, path);
  if (!previous.empty()) remove(t, previous, path);
}

// The formatted name, with "-v<n>" while that file exists, unless it is `keep` (the file this
// save replaces). Rank 0 decides, with its metrics and its disk, and every rank gets its answer
// by one broadcast, so all ranks keep the same paths and make the same collectives.
std::string ModelCheckpoint::unused_filepath(Trainer& t, const std::map<std::string, double>& c,
                                             const std::string& filename, const std::string& keep) const {
  std::string path = format_checkpoint_name(c, filename);
  if (opt_.enable_version_counter && t.is_global_zero())
    for (int v = 1; fs::exists(path) && path != keep; ++v) path = format_checkpoint_name(c, filename, v);
  return rank0_string(t, path);
}

void ModelCheckpoint::save(Trainer& t, const std::string& path) {
  if (t.is_global_zero()) fs::create_directories(fs::path(path).parent_path());
  t.save_checkpoint(path, opt_.save_weights_only);
  last_global_step_saved_ = t.global_step();
}

// Rank 0 deletes a file that left the top k, unless it is the new file, outside dirpath, or the
// checkpoint this run resumed from (Lightning keeps that one).
void ModelCheckpoint::remove(Trainer& t, const std::string& previous, const std::string& current) const {
  if (previous == current || !t.is_global_zero()) return;
  fs::path prev = fs::absolute(previous).lexically_normal(), dir = fs::absolute(dirpath_).lexically_normal();
  auto rel = prev.lexically_relative(dir);
  if (rel.empty() || *rel.begin() == "..") return;
  if (!t.ckpt_path().empty() && fs::absolute(t.ckpt_path()).lexically_normal() == prev) return;  // resumed from it
  std::error_code ec;
  fs::remove(prev, ec);
  if (ec) spdlog::warn("ModelCheckpoint: cannot remove {}: {}", prev.string(), ec.message());
}

nlohmann::json ModelCheckpoint::state_dict() const {
  nlohmann::json k = nlohmann::json::object();
  for (const auto& [p, s] : best_k_models_) k[p] = score_json(s);
  return {{"monitor", opt_.monitor.empty() ? nlohmann::json(nullptr) : nlohmann::json(opt_.monitor)},
          {"best_model_score", score_json(best_model_score_)},
          {"best_model_path", best_model_path_},
          {"current_score", score_json(current_score_)},
          {"dirpath", dirpath_.string()},
          {"best_k_models", k},
          {"kth_best_model_path", kth_best_model_path_},
          {"kth_value", score_json(kth_value_)},
          {"last_model_path", last_model_path_}};
}

void ModelCheckpoint::load_state_dict(const nlohmann::json& state) {
  if (!state.is_object() || !state.contains("best_model_path") || !state["best_model_path"].is_string())
    throw InvalidArgument("ModelCheckpoint state: an object with a string 'best_model_path' expected, got " +
                          state.dump().substr(0, 200));
  if (dirpath_.empty()) pending_state_ = state;  // compared with dirpath once setup resolved it
  else apply_state(state);
}

void ModelCheckpoint::apply_state(const nlohmann::json& s) {
  auto str = [&](const char* key, const std::string& fallback) {
    if (!s.contains(key)) return fallback;
    if (!s[key].is_string()) throw InvalidArgument(std::string("ModelCheckpoint state: '") + key + "' is not a string");
    return s[key].get<std::string>();
  };
  std::string dir = str("dirpath", dirpath_.string());
  if (dir == dirpath_.string()) {
    std::map<std::string, double> k;
    if (s.contains("best_k_models")) {
      if (!s["best_k_models"].is_object()) throw InvalidArgument("ModelCheckpoint state: 'best_k_models' is not an object");
      for (const auto& [p, v] : s["best_k_models"].items()) {
        auto score = score_from(v, "best_k_models");
        if (!score) throw InvalidArgument("ModelCheckpoint state: best_k_models['" + p + "'] has no score");
        k[p] = *score;
      }
    }
    best_model_score_ = score_from(s.value("best_model_score", nlohmann::json()), "best_model_score");
    kth_best_model_path_ = str("kth_best_model_path", kth_best_model_path_);
    kth_value_ = s.contains("kth_value") ? score_from(s["kth_value"], "kth_value") : kth_value_;
    best_k_models_ = std::move(k);
    last_model_path_ = str("last_model_path", last_model_path_);
  } else {
    spdlog::warn("ModelCheckpoint: the dirpath has changed from '{}' to '{}': best_model_score, kth_best_model_path, "
                 "kth_value, last_model_path and best_k_models are not reloaded, only best_model_path",
                 dir, dirpath_.string());
  }
  best_model_path_ = s["best_model_path"].get<std::string>();
}

}  // namespace hg::training
