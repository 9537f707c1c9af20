// hgraph-train's config: reading, overrides, validation and the run (training/train_config.h).
#include "training/train_config.h"

#include <chrono>
#include <fstream>
#include <ostream>
#include <sstream>

#include "engine/bundled_data.h"
#include "engine/error.h"
#include "engine/json_reader.h"
#include "training/callbacks.h"
#include "training/config_reader.h"
#include "training/language_model_module.h"
#include "training/loggers.h"
#include "training/py_format.h"
#include "training/train_data.h"

namespace hg::training {

namespace {

using nlohmann::json;

Limit read_limit(ConfigReader& r, const std::string& key) {
  const json& v = r.raw(key);
  if (v.is_null()) return Limit();
  if (v.is_number_integer()) {
    if (v.get<int64_t>() < 0) r.fail(key, "must be >= 0, got " + v.dump());
    return Limit(v.get<int>());
  }
  if (v.is_number()) {
    if (v.get<double>() < 0 || v.get<double>() > 1) r.fail(key, "a fraction must be in [0, 1], got " + v.dump());
    return Limit(v.get<double>());
  }
  r.fail(key, "expected a batch count (integer) or a fraction (number with a point), got " + v.dump());
}

std::shared_ptr<Callback> read_callback(ConfigReader& r) {
  const auto name = r.required<std::string>("name");
  if (name == "ModelCheckpoint") {
    ModelCheckpointOptions o;
    o.dirpath = r.get("dirpath", std::string());
    o.filename = r.get("filename", o.filename);
    o.monitor = r.get("monitor", o.monitor);
    o.mode = r.get("mode", o.mode);
    o.save_top_k = r.get("save_top_k", o.save_top_k);
    o.save_last = r.get("save_last", o.save_last);
    o.save_weights_only = r.get("save_weights_only", o.save_weights_only);
    o.every_n_train_steps = r.optional<int64_t>("every_n_train_steps");
    o.every_n_epochs = r.optional<int>("every_n_epochs");
    o.save_on_train_epoch_end = r.optional<bool>("save_on_train_epoch_end");
    o.auto_insert_metric_name = r.get("auto_insert_metric_name", o.auto_insert_metric_name);
    o.enable_version_counter = r.get("enable_version_counter", o.enable_version_counter);
    return std::make_shared<ModelCheckpoint>(o);
  }
  if (name == "EarlyStopping") {
    EarlyStoppingOptions o;
    o.monitor = r.required<std::string>("monitor");
    o.min_delta = r.get("min_delta", o.min_delta);
    o.patience = r.get("patience", o.patience);
    o.mode = r.get("mode", o.mode);
    o.strict = r.get("strict", o.strict);
    o.check_finite = r.get("check_finite", o.check_finite);
    o.stopping_threshold = r.optional<double>("stopping_threshold");
    o.divergence_threshold = r.optional<double>("divergence_threshold");
    o.check_on_train_epoch_end = r.optional<bool>("check_on_train_epoch_end");
    o.verbose = r.get("verbose", o.verbose);
    return std::make_shared<EarlyStopping>(o);
  }
  if (name == "LearningRateMonitor") {
    LearningRateMonitorOptions o;
    o.logging_interval = r.get("logging_interval", o.logging_interval);
    o.log_momentum = r.get("log_momentum", o.log_momentum);
    o.log_weight_decay = r.get("log_weight_decay", o.log_weight_decay);
    return std::make_shared<LearningRateMonitor>(o);
  }
  if (name == "DeviceStatsMonitor") return std::make_shared<DeviceStatsMonitor>(r.optional<bool>("cpu_stats"));
  r.fail("name", "unknown callback '" + name + "' (ModelCheckpoint, EarlyStopping, LearningRateMonitor, DeviceStatsMonitor)");
}

// logger: true (CSV), false (none), "csv", "tensorboard", or a list of those names.
std::optional<std::vector<std::shared_ptr<Logger>>> read_loggers(ConfigReader& r, const std::filesystem::path& root) {
  const json& v = r.raw("logger");
  if (v.is_null() || (v.is_boolean() && v.get<bool>())) return std::nullopt;  // the Trainer's CSVLogger
  std::vector<std::shared_ptr<Logger>> out;
  if (v.is_boolean()) return out;
  const json names = v.is_array() ? v : json::array({v});
  const auto save_dir = root.empty() ? std::filesystem::current_path() : root;
  for (const auto& n : names) {
    if (n == "csv") out.push_back(std::make_shared<CSVLogger>(save_dir));
    else if (n == "tensorboard") out.push_back(std::make_shared<TensorBoardLogger>(save_dir));
    else r.fail("logger", "expected true, false, \"csv\", \"tensorboard\" or a list of those, got " + v.dump());
  }
  return out;
}

TrainerOptions read_trainer(ConfigReader& r) {
  TrainerOptions o;
  o.accelerator = r.get("accelerator", o.accelerator);
  const json& devices = r.raw("devices");
  if (devices.is_string()) o.devices = Devices(devices.get<std::string>());
  else if (devices.is_number_integer()) o.devices = Devices(devices.get<int>());
  else if (!devices.is_null()) r.fail("devices", "expected a count or \"auto\", got " + devices.dump());
  o.strategy = r.get("strategy", o.strategy);
  o.num_nodes = r.get("num_nodes", o.num_nodes);
  const json& precision = r.raw("precision");
  if (precision.is_number_integer()) o.precision = std::to_string(precision.get<int>());
  else if (precision.is_string()) o.precision = precision.get<std::string>();
  else if (!precision.is_null()) r.fail("precision", "expected \"32\", \"32-true\" or \"bf16-mixed\", got " + precision.dump());
  o.max_epochs = r.optional<int>("max_epochs");
  o.min_epochs = r.get("min_epochs", o.min_epochs);
  o.max_steps = r.get("max_steps", o.max_steps);
  o.min_steps = r.get("min_steps", o.min_steps);
  if (o.min_steps < 0) r.fail("min_steps", "must be >= 0, got " + std::to_string(o.min_steps));
  const json& max_time = r.raw("max_time");
  if (max_time.is_string()) {
    try {
      o.max_time = parse_max_time(max_time.get<std::string>());
    } catch (const InvalidArgument& e) {
      r.fail("max_time", e.what());
    }
  } else if (max_time.is_number()) {
    if (!(max_time.get<double>() > 0)) r.fail("max_time", "must be > 0 seconds, got " + max_time.dump());
    o.max_time = std::chrono::milliseconds(static_cast<int64_t>(max_time.get<double>() * 1000));
  } else if (!max_time.is_null()) {
    r.fail("max_time", "expected \"DD:HH:MM:SS\" or seconds, got " + max_time.dump());
  }
  o.limit_train_batches = read_limit(r, "limit_train_batches");
  o.limit_val_batches = read_limit(r, "limit_val_batches");
  o.limit_test_batches = read_limit(r, "limit_test_batches");
  o.limit_predict_batches = read_limit(r, "limit_predict_batches");
  if (r.has("val_check_interval")) {
    const json& v = r.raw("val_check_interval");
    if (v.is_number_integer()) o.val_check_interval = Limit(v.get<int>());
    else if (v.is_number()) o.val_check_interval = Limit(v.get<double>());
    else r.fail("val_check_interval", "expected a batch count or a fraction of an epoch, got " + v.dump());
  }
  if (r.contains("check_val_every_n_epoch") && !r.has("check_val_every_n_epoch")) {
    r.raw("check_val_every_n_epoch");
    o.check_val_every_n_epoch = std::nullopt;  // explicit null: validation by val_check_interval only
  } else {
    o.check_val_every_n_epoch = r.get("check_val_every_n_epoch", 1);
  }
  o.num_sanity_val_steps = r.get("num_sanity_val_steps", o.num_sanity_val_steps);
  o.log_every_n_steps = r.get("log_every_n_steps", o.log_every_n_steps);
  o.accumulate_grad_batches = r.get("accumulate_grad_batches", o.accumulate_grad_batches);
  o.gradient_clip_val = r.optional<double>("gradient_clip_val");
  o.gradient_clip_algorithm = r.get("gradient_clip_algorithm", o.gradient_clip_algorithm);
  o.deterministic = r.get("deterministic", o.deterministic);
  o.seed = r.get("seed", o.seed);
  o.default_root_dir = r.get("default_root_dir", std::string());
  const json& callbacks = r.raw("callbacks");
  if (!callbacks.is_null() && !callbacks.is_array()) r.fail("callbacks", "expected a list, got " + callbacks.dump());
  for (size_t i = 0; callbacks.is_array() && i < callbacks.size(); ++i) {
    ConfigReader c(callbacks[i], r.path_of("callbacks") + "[" + std::to_string(i) + "]");
    o.callbacks.push_back(read_callback(c));
    c.finish();
  }
  o.logger = read_loggers(r, o.default_root_dir);
  o.enable_checkpointing = r.get("enable_checkpointing", o.enable_checkpointing);
  o.enable_progress_bar = r.get("enable_progress_bar", o.enable_progress_bar);
  o.replay_steps = r.get("replay_steps", o.replay_steps);
  const json& fdr = r.raw("fast_dev_run");
  if (fdr.is_boolean()) o.fast_dev_run = fdr.get<bool>() ? 1 : 0;
  else if (fdr.is_number_integer() && fdr.get<int>() >= 0) o.fast_dev_run = fdr.get<int>();
  else if (!fdr.is_null()) r.fail("fast_dev_run", "expected true, false or a batch count, got " + fdr.dump());
  if (r.has("dist_timeout")) {
    const double s = r.get("dist_timeout", 0.0);
    if (s <= 0) r.fail("dist_timeout", "must be > 0 seconds");
    o.dist_timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  return o;
}

}  // namespace

json read_config_file(const std::filesystem::path& file) {
  try {
    return read_json_file(file, {.max_depth = 32, .max_values = size_t{1} << 20, .max_bytes = size_t{16} << 20});
  } catch (const FormatError& e) {
    throw InvalidArgument(e.what());
  }
}

void apply_override(json& config, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InvalidArgument("--set " + assignment + ": expected key.path=value");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value;
  try {
    value = read_json(text, {.max_depth = 32}, "--set " + path);
  } catch (const InvalidArgument&) {  // not JSON: the text itself is the value
    value = text;
  }
  json* node = &config;
  std::stringstream parts(path);
  std::string part, walked;
  std::vector<std::string> keys;
  while (std::getline(parts, part, '.')) keys.push_back(part);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty()) throw InvalidArgument("--set " + assignment + ": empty key in '" + path + "'");
    walked += (i ? "." : "") + keys[i];
    if (node->is_null()) *node = json::object();
    if (!node->is_object()) throw InvalidArgument("--set " + assignment + ": '" + walked + "' is inside a non-object");
    node = &(*node)[keys[i]];
  }
  *node = value;
}

TrainConfig parse_train_config(const json& config) {
  ConfigReader top(config, "");
  TrainConfig c;
  ConfigReader m = top.child("model").value_or(ConfigReader(json::object(), "model"));
  c.model.model = m.get("name", c.model.model);
  c.model.model_config = m.get("config", json::object());
  c.model.seed = m.get("seed", c.model.seed);
  m.finish();

  ConfigReader d = top.child("data").value_or(ConfigReader(json::object(), "data"));
  c.data.dataset = d.get("dataset", c.data.dataset);
  const std::string& ds = c.data.dataset;
  if (ds != "digits" && ds != "idx" && ds != "fashion_mnist" && ds != "table" && ds != "text")
    d.fail("dataset", "unknown dataset '" + ds + "' (digits, idx, fashion_mnist, table, text)");
  if (ds == "digits") c.data.path = d.get("path", hg::bundled_data("data/digits.safetensors", HG_DEFAULT_DIGITS).string());
  else if (ds == "fashion_mnist") c.data.path = d.get("path", std::string("/usr/share/datasets/fashion-mnist"));
  else c.data.path = d.required<std::string>("path");
  if (ds == "table") {
    c.data.test_path = d.get("test_path", std::string());
    const json& label = d.raw("label");
    if (label.is_number_integer()) c.data.label = std::to_string(label.get<int64_t>());
    else if (label.is_string()) c.data.label = label.get<std::string>();
    else if (!label.is_null()) d.fail("label", "expected a column name or index, got " + label.dump());
    c.data.features_key = d.get("features_key", c.data.features_key);
    c.data.labels_key = d.get("labels_key", c.data.labels_key);
    c.data.normalize = d.get("normalize", c.data.normalize);
  }
  if (ds == "text") {
    c.data.stride = d.get("stride", c.data.stride);
    if (c.data.stride < 0) d.fail("stride", "must be >= 0");
  }
  if (ds == "digits") {
    c.data.image_size = d.get("image_size", int64_t{c.model.model == "lenet5" ? 32 : 8});
    if (c.data.image_size != 8 && c.data.image_size != 32) d.fail("image_size", "must be 8 or 32");
  } else if (ds == "idx" || ds == "fashion_mnist") {
    c.data.image_size = d.get("image_size", int64_t{c.model.model == "lenet5" ? 32 : 0});
    if (c.data.image_size < 0) d.fail("image_size", "must be >= 0");
  }
  if (ds == "digits" || ds == "idx" || ds == "fashion_mnist") {
    c.data.crop_padding = d.get("crop_padding", c.data.crop_padding);
    if (c.data.crop_padding < 0) d.fail("crop_padding", "must be >= 0");
    c.data.hflip = d.get("hflip", c.data.hflip);
  }
  c.data.batch_size = d.get("batch_size", c.data.batch_size);
  c.data.val_batch_size = d.get("val_batch_size", c.data.val_batch_size);
  if (c.data.batch_size < 1) d.fail("batch_size", "must be >= 1");
  if (c.data.val_batch_size < 1) d.fail("val_batch_size", "must be >= 1");
  c.data.holdout_fraction = d.get("holdout_fraction", ds == "idx" || ds == "fashion_mnist" || ds == "text" ? 0.1 : 0.2);
  if (!(c.data.holdout_fraction >= 0 && c.data.holdout_fraction < 1)) d.fail("holdout_fraction", "must be in [0, 1)");
  c.data.seed = d.get("seed", c.data.seed);
  c.data.num_workers = d.get("num_workers", c.data.num_workers);
  if (c.data.num_workers < 0) d.fail("num_workers", "must be >= 0");
  c.data.prefetch_factor = d.get("prefetch_factor", c.data.prefetch_factor);
  if (c.data.prefetch_factor < 1) d.fail("prefetch_factor", "must be >= 1");
  d.finish();

  if (top.contains("optimizer")) c.model.optimizer = top.raw("optimizer");
  ConfigReader t = top.child("trainer").value_or(ConfigReader(json::object(), "trainer"));
  c.trainer = read_trainer(t);
  t.finish();

  if (auto tu = top.child("tuner")) {
    LRFinderOptions& f = c.tuner.lr_finder;
    c.tuner.lr_find = tu->get("lr_find", c.tuner.lr_find);
    f.min_lr = tu->get("min_lr", f.min_lr);
    f.max_lr = tu->get("max_lr", f.max_lr);
    f.num_training = tu->get("num_training", f.num_training);
    f.mode = tu->get("mode", f.mode);
    if (tu->contains("early_stop_threshold")) f.early_stop_threshold = tu->optional<double>("early_stop_threshold");
    tu->finish();
    try {
      check_lr_finder_options(f);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("tuner: ") + e.what());
    }
    const int world = (c.trainer.devices.count == -1 ? 1 : c.trainer.devices.count) * c.trainer.num_nodes;
    if (c.tuner.lr_find && world > 1)
      tu->fail("lr_find", "runs in one process, but trainer.devices x trainer.num_nodes = " + std::to_string(world));
  }
  c.ckpt_path = top.get("ckpt_path", c.ckpt_path);
  if (auto e = top.child("export")) {
    ExportOptions x;
    x.dir = e->get("dir", std::string());
    x.name = e->get("name", c.data.dataset + "_" + c.model.model);
    x.version = e->get("version", x.version);
    x.serving_config = e->raw("config");
    x.format = e->get("format", x.format);
    if (x.format != "package" && x.format != "onnx") e->fail("format", "must be \"package\" or \"onnx\", got \"" + x.format + "\"");
    e->finish();
    if (!x.dir.empty()) c.export_options = x;
    else if (e->contains("dir")) e->fail("dir", "must not be empty");
  }
  top.finish();
  // Builds the module once: a bad model or optimizer config fails here, before any data loads.
  const auto check = make_module(c);
  if (c.data.dataset == "digits") {
    const auto& cm = dynamic_cast<const ClassifierModule&>(*check);
    const auto want = cm.input_spec().shape;
    const Shape digits = c.data.image_size == 8 ? Shape{-1, 64} : Shape{-1, 1, 32, 32};
    if (cm.input_spec().datatype != "FP32" || want != digits)
      throw InvalidArgument("model: " + c.model.model + " takes " + cm.input_spec().datatype + " " + shape_str(want) +
                            ", the digits with data.image_size " + std::to_string(c.data.image_size) + " are FP32 " +
                            shape_str(digits));
    if (cm.num_classes() != 10)
      throw InvalidArgument("model.config: " + std::to_string(cm.num_classes()) + " classes, the digits have 10");
  }
  return c;
}

std::shared_ptr<LightningModule> make_module(const TrainConfig& c) {
  const bool text = c.data.dataset == "text";
  if ((c.model.model == "gpt") != text)
    throw InvalidArgument(text ? "model.name: data.dataset \"text\" trains \"gpt\", not '" + c.model.model + "'"
                               : "model.name: gpt trains on data.dataset \"text\", not '" + c.data.dataset + "'");
  if (!text) return std::make_shared<ClassifierModule>(c.model);
  ConfigReader r(c.model.model_config, "model.config");
  LanguageModelSpec s{.config = {}, .optimizer = c.model.optimizer, .seed = c.model.seed};
  models::GPTConfig& g = s.config;
  for (auto [key, field] : {std::pair<const char*, int64_t*>{"vocab", &g.vocab}, {"d_model", &g.d_model},
                            {"nhead", &g.nhead}, {"layers", &g.layers}, {"ff", &g.ff}, {"max_len", &g.max_len}}) {
    *field = r.get(key, *field);
    if (*field < 1) r.fail(key, "must be >= 1, got " + std::to_string(*field));
  }
  r.finish();
  try {
    g.validate();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("model.config: ") + e.what());
  }
  return std::make_shared<LanguageModelModule>(s);
}

namespace {

// The input the module of `m` takes (batch first) and its class count (0: a language model).
std::pair<models::IOSpec, int64_t> module_input(LightningModule& m) {
  if (auto* classifier = dynamic_cast<ClassifierModule*>(&m)) return {classifier->input_spec(), classifier->num_classes()};
  auto& lm = dynamic_cast<LanguageModelModule&>(m);
  return {models::IOSpec{"ids", "INT64", {-1, lm.spec().config.max_len}}, 0};
}

DataLoader training_loader(const TrainConfig& c, const TrainData& data) {
  return DataLoader(data.train, {.batch_size = c.data.batch_size, .shuffle = true, .seed = c.data.seed,
                                 .num_workers = c.data.num_workers, .prefetch_factor = c.data.prefetch_factor,
                                 .transform = data.train_transform});
}

LRFinderResult find_lr(const TrainConfig& c, const TrainData& data, std::ostream& out) {
  const auto module = make_module(c);
  const LRFinderResult r = lr_find(c.trainer, *module, training_loader(c, data), c.tuner.lr_finder);
  out << r.table();
  if (const auto lr = r.suggestion())
    out << "lr_find: suggested lr " << py_repr(*lr) << (r.diverged ? " (stopped early: the loss diverged)" : "") << "\n";
  else
    out << "lr_find: no suggestion (fewer than 2 points after skipping the first 10 and the last; raise "
           "tuner.num_training)\n";
  return r;
}

}  // namespace

LRFinderResult run_lr_find(const TrainConfig& c, std::ostream& out) {
  const auto [input, classes] = module_input(*make_module(c));
  return find_lr(c, load_train_data(c.data, input, classes), out);
}

TrainResult run_training(const TrainConfig& config, std::ostream& out) {
  TrainConfig c = config;
  TrainResult r;
  r.module = make_module(c);
  const auto [input, classes] = module_input(*r.module);
  const TrainData data = load_train_data(c.data, input, classes);
  if (c.tuner.lr_find)  // Lightning's Tuner with update_attr: fit with the suggestion
    if (const auto lr = find_lr(c, data, out).suggestion()) {
      c.model.optimizer["lr"] = *lr;
      r.module = make_module(c);
    }
  auto* classifier = dynamic_cast<ClassifierModule*>(r.module.get());
  auto* lm = dynamic_cast<LanguageModelModule*>(r.module.get());
  DataLoader train_loader = training_loader(c, data);
  const DataLoaderOptions held_options{.batch_size = c.data.val_batch_size, .num_workers = c.data.num_workers,
                                       .prefetch_factor = c.data.prefetch_factor};
  std::optional<DataLoader> val_loader, test_loader;
  if (data.val) val_loader.emplace(data.val, held_options);
  if (data.test) test_loader.emplace(data.test, held_options);
  Trainer trainer(c.trainer);
  const auto fit_start = std::chrono::steady_clock::now();
  trainer.fit(*r.module, train_loader, val_loader ? &*val_loader : nullptr, c.ckpt_path);  // ranks known from here on
  r.fit_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - fit_start).count();
  if (trainer.is_global_zero())
    out << "hgraph-train: " << c.model.model << " on " << data.description << ": " << data.train->size() << " train / "
        << (data.val ? data.val->size() : 0) << " validation / " << (data.test ? data.test->size() : 0)
        << " test examples, " << trainer.current_epoch() << " epochs, " << trainer.global_step() << " steps, fit "
        << r.fit_seconds << " s\n";
  r.metrics = trainer.callback_metrics();
  r.epochs = trainer.current_epoch();
  r.global_step = trainer.global_step();
  if (test_loader) {
    const auto t = trainer.test(*r.module, *test_loader);
    if (!t.empty()) r.test = t[0];
  }
  // A table's model takes raw features from here on: the statistics go into its first layer.
  if (data.normalizer) fold_normalizer(r.module->module(), *data.normalizer);
  if (trainer.is_global_zero()) {
    for (const auto& [k, v] : r.test) out << "held-out " << k << " " << v << "\n";
    if (c.export_options) {
      ExportOptions x = *c.export_options;
      json meta = data.metadata;
      meta["epochs"] = r.epochs;
      meta["global_step"] = r.global_step;
      if (data.normalizer) meta["normalization_folded_into"] = "0.weight, 0.bias";
      for (const auto& [k, v] : r.test) meta[k] = v;
      if (r.metrics.count("train_loss")) meta["train_loss"] = r.metrics.at("train_loss");
      for (const auto& [k, v] : x.metadata.items()) meta[k] = v;
      x.metadata = meta;
      r.export_dir = classifier ? export_classifier(*classifier, x) : export_language_model(*lm, x);
      out << "exported to " << r.export_dir.string() << "\n";
    }
  }
  return r;
}

}  // namespace hg::training
