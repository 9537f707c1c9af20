#include "training/trainer.h"

#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "graphs/lazy.h"
#include "models/package.h"
#include "models/safetensors.h"

namespace hg::training {

namespace {

int64_t correct(const Tensor& logits, const Tensor& y) {
  const std::vector<float> l = logits.to_vector();
  const std::vector<int64_t> t = y.to_indices();
  const int64_t c = logits.dim(1);
  int64_t ok = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const float* row = l.data() + i * c;
    ok += std::max_element(row, row + c) - row == t[i];
  }
  return ok;
}

void progress(std::ostream& o, int epoch, int64_t done, int64_t total, double loss) {
  const int width = 30, fill = static_cast<int>(width * done / total);
  o << "\rEpoch " << epoch << " [" << std::string(fill, '=') << std::string(width - fill, ' ') << "] " << done << "/"
    << total << " loss " << std::fixed << std::setprecision(4) << loss << std::flush;
}

std::vector<float> tensor_floats(const safetensors::Entry& e) {
  std::vector<float> v(e.data.size() / 4);
  std::memcpy(v.data(), e.data.data(), e.data.size());
  return v;
}

safetensors::Entry float_entry(const std::string& name, const Shape& shape, const float* p) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return {name, "F32", shape, std::vector<uint8_t>(b, b + numel(shape) * 4)};
}

}  // namespace

nlohmann::json FitResult::metadata() const {
  nlohmann::json j = {{"trained_by", "hgraph-train"}, {"epochs", epochs.size()}, {"global_step", global_step}};
  if (!epochs.empty()) {
    j["val_accuracy"] = epochs.back().val_acc;
    j["val_loss"] = epochs.back().val_loss;
    j["train_loss"] = epochs.back().train_loss;
  }
  return j;
}

Trainer::Trainer(TrainerOptions opt) : opt_(std::move(opt)) {
  if (opt_.accelerator == "auto" || opt_.accelerator == "hpu") device_ = Device::hpu(0);
  else if (opt_.accelerator == "cpu") device_ = Device::cpu();
  else throw InvalidArgument("Trainer: accelerator '" + opt_.accelerator + "' is not one of auto, hpu, cpu");
  if (opt_.devices != 1)
    throw InvalidArgument("Trainer: devices=" + std::to_string(opt_.devices) +
                          " needs a data-parallel strategy, which this build does not have yet; use devices=1");
  if (opt_.strategy != "auto" && opt_.strategy != "hpu_single")
    throw InvalidArgument("Trainer: strategy '" + opt_.strategy + "' is not available; use auto or hpu_single");
  if (opt_.max_epochs < 0) throw InvalidArgument("Trainer: max_epochs must be >= 0");
  if (device_.is_hpu()) graphs::init_lazy_mode_from_env();
}

std::ostream& Trainer::out() const { return opt_.log ? *opt_.log : std::cout; }

FitResult Trainer::fit(models::Module& model, SGD& opt, const DataLoader& train, const DataLoader* val) {
  model.to(device_);
  FitResult r;
  for (; epoch_ < opt_.max_epochs; ++epoch_) {
    const auto t0 = std::chrono::steady_clock::now();
    model.train();
    double loss_sum = 0;
    int64_t ok = 0, seen = 0, done = 0;
    const auto batches = train.epoch(epoch_);
    for (const Batch& b : batches) {
      Tensor x = b.x.to(device_), y = b.y.to(device_);
      Tensor logits = model.forward(x);
      Tensor loss = ops::cross_entropy(logits, y);
      loss.backward();
      opt.step();  // runs the traced step graph
      opt.zero_grad();
      const int64_t n = b.y.numel();
      loss_sum += loss.item() * static_cast<double>(n);
      ok += correct(logits, b.y);
      seen += n;
      ++step_;
      if (opt_.enable_progress_bar) progress(out(), epoch_, ++done, static_cast<int64_t>(batches.size()), loss_sum / seen);
    }
    if (opt_.enable_progress_bar) out() << "\n";
    EpochStats s{epoch_, loss_sum / static_cast<double>(seen), static_cast<double>(ok) / static_cast<double>(seen), NAN,
                 NAN, 0};
    if (val) {
      const EvalResult e = validate(model, *val);
      s.val_loss = e.loss;
      s.val_acc = e.accuracy;
    }
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out() << "epoch " << epoch_ << ": train_loss " << std::fixed << std::setprecision(4) << s.train_loss << " train_acc "
          << s.train_acc;
    if (val) out() << " val_loss " << s.val_loss << " val_acc " << s.val_acc;
    out() << " (" << std::setprecision(2) << s.seconds << " s)\n";
    r.epochs.push_back(s);
  }
  r.global_step = step_;
  return r;
}

EvalResult Trainer::validate(models::Module& model, const DataLoader& data) {
  model.to(device_);
  model.eval();
  NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t ok = 0, seen = 0;
  for (const Batch& b : data.epoch(0)) {
    Tensor logits = model.forward(b.x.to(device_));
    Tensor loss = ops::cross_entropy(logits, b.y.to(device_));
    loss_sum += loss.item() * static_cast<double>(b.y.numel());
    ok += correct(logits, b.y);
    seen += b.y.numel();
  }
  model.train();
  return {loss_sum / static_cast<double>(seen), static_cast<double>(ok) / static_cast<double>(seen)};
}

void Trainer::save_checkpoint(const std::filesystem::path& file, const models::Module& model, SGD& opt) const {
  safetensors::File f;
  for (const auto& [name, t] : model.named_parameters()) {
    Tensor c = t->contiguous();
    f.entries.push_back(float_entry("model." + name, c.shape(), c.data<float>()));
  }
  for (const auto& [name, buf] : opt.momentum_buffers())
    if (!buf.empty()) f.entries.push_back(float_entry("optimizer." + name + ".momentum_buffer", {int64_t(buf.size())}, buf.data()));
  f.metadata = {{"format", "hgraph-checkpoint"}, {"format_version", "1"}, {"epoch", std::to_string(epoch_)},
                {"global_step", std::to_string(step_)}, {"lr", std::to_string(opt.options().lr)},
                {"momentum", std::to_string(opt.options().momentum)}};
  safetensors::write(file, f);
}

void Trainer::load_checkpoint(const std::filesystem::path& file, models::Module& model, SGD& opt) {
  const auto f = safetensors::read(file);
  const std::string src = file.string();
  auto meta = [&](const char* k) -> std::string {
    auto it = f.metadata.find(k);
    if (it == f.metadata.end()) throw FormatError(src + ": metadata field '" + k + "' is missing");
    return it->second;
  };
  if (meta("format") != "hgraph-checkpoint" || meta("format_version") != "1")
    throw FormatError(src + ": not an hgraph checkpoint of format version 1");
  int epoch = 0, step = 0;
  try {
    epoch = std::stoi(meta("epoch"));
    step = std::stoi(meta("global_step"));
  } catch (const std::logic_error&) {
    throw FormatError(src + ": metadata 'epoch'/'global_step' are not integers");
  }
  // Validate everything before changing anything.
  std::vector<std::pair<Tensor*, const safetensors::Entry*>> params;
  for (auto& [name, t] : model.named_parameters()) {
    const auto* e = f.find("model." + name);
    if (!e) throw FormatError(src + ": tensor 'model." + name + "' is missing");
    if (e->dtype != "F32" || e->shape != t->shape())
      throw FormatError(src + ": tensor 'model." + name + "' is " + e->dtype + shape_str(e->shape) + ", expected F32" +
                        shape_str(t->shape()));
    params.emplace_back(t, e);
  }
  std::vector<std::pair<std::vector<float>*, const safetensors::Entry*>> bufs;
  for (size_t i = 0; i < opt.momentum_buffers().size(); ++i) {
    auto& [name, buf] = opt.momentum_buffers()[i];
    const auto* e = f.find("optimizer." + name + ".momentum_buffer");
    if (!e) continue;
    if (e->dtype != "F32" || e->shape != Shape{opt.params()[i].second->numel()})
      throw FormatError(src + ": tensor 'optimizer." + name + ".momentum_buffer' has the wrong dtype or shape");
    bufs.emplace_back(&buf, e);
  }
  for (auto& [t, e] : params) std::memcpy(t->data<float>(), e->data.data(), e->data.size());
  for (auto& [b, e] : bufs) *b = tensor_floats(*e);
  epoch_ = epoch;
  step_ = step;
}

void export_classifier(const models::Module& model, const std::filesystem::path& dir, const std::string& name,
                       int64_t in_features, int64_t num_classes, const nlohmann::json& metadata) {
  models::PackageSpec spec;
  spec.name = name;
  spec.inputs = {{"input", "FP32", {-1, in_features}}};
  spec.outputs = {{"logits", "FP32", {-1, num_classes}}};
  spec.metadata = metadata;
  models::save_package(dir, model, spec);
}

}  // namespace hg::training
