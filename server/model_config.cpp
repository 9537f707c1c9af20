#include "server/model_config.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "engine/error.h"
#include "models/buckets.h"
#include "server/wire.h"

namespace hg::server {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxBatchSize = int64_t{1} << 16;
constexpr int64_t kMaxInstances = 64;
constexpr size_t kMaxConfigBuckets = 64;  // graphs captured per model version (each holds an arena)
constexpr int64_t kMaxSignatures = 4096;  // input signatures kept per model version (each with its buckets)
constexpr int64_t kMaxPriorityLevels = 255;
constexpr int64_t kMaxMicroseconds = int64_t{1} << 40;  // about 12.7 days
constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr size_t kMaxRank = 16;

// Reads the fields of one JSON object and names `file` and the field's full path in every error.
class Fields {
 public:
  Fields(const json& j, const std::string& file, std::string path) : j_(j), file_(file), path_(std::move(path)) {
    if (!j_.is_object()) fail("", "must be a JSON object, got " + brief(j_));
  }

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    const std::string n = name(field);
    throw FormatError(file_ + ": " + (n.empty() ? "" : n + " ") + why);
  }
  std::string name(const std::string& field) const {
    if (path_.empty()) return field;
    return field.empty() ? path_ : path_ + "." + field;
  }
  const json* find(const std::string& field) const {
    auto it = j_.find(field);
    return it == j_.end() ? nullptr : &*it;
  }
  // Every key must be one of `known`.
  void only(std::initializer_list<const char*> known, const std::map<std::string, std::string>& unsupported = {}) const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (std::any_of(known.begin(), known.end(), [&](const char* k) { return it.key() == k; })) continue;
      auto u = unsupported.find(it.key());
      if (u != unsupported.end()) fail(it.key(), "is not supported: " + u->second);
      std::string list;
      for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
      fail(it.key(), "is not a known field (known: " + list + ")");
    }
  }
  // An integer in [lo, hi]; Triton's JSON (protobuf's mapping) spells 64-bit integers as
  // strings, so "100" is read as 100.
  int64_t integer(const json& v, const std::string& field, int64_t lo, int64_t hi) const {
    std::optional<int64_t> got;
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX) : true) got = v.get<int64_t>();
    } else if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      int64_t x = 0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
      if (!s.empty() && ec == std::errc() && end == s.data() + s.size()) got = x;
    }
    if (!got || *got < lo) {
      const std::string what = lo == 0   ? "a non-negative integer"
                               : lo == 1 ? "a positive integer"
                                         : "an integer >= " + std::to_string(lo);
      fail(field, "must be " + what + ", got " + brief(v));
    }
    if (*got > hi) fail(field, "must be at most " + std::to_string(hi) + ", got " + brief(v));
    return *got;
  }
  std::optional<int64_t> integer(const std::string& field, int64_t lo, int64_t hi) const {
    const json* v = find(field);
    return v ? std::optional(integer(*v, field, lo, hi)) : std::nullopt;
  }
  // A number in [lo, hi].
  std::optional<double> number(const std::string& field, double lo, double hi) const {
    const json* v = find(field);
    if (!v) return std::nullopt;
    if (!v->is_number() || !(v->get<double>() >= lo && v->get<double>() <= hi))
      fail(field, "must be a number in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + brief(*v));
    return v->get<double>();
  }
  std::optional<bool> boolean(const std::string& field) const {
    const json* v = find(field);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) fail(field, "must be true or false, got " + brief(*v));
    return v->get<bool>();
  }
  std::optional<std::string> string(const std::string& field) const {
    const json* v = find(field);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(field, "must be a string, got " + brief(*v));
    return v->get<std::string>();
  }
  const json* array(const std::string& field) const {
    const json* v = find(field);
    if (v && !v->is_array()) fail(field, "must be an array, got " + brief(*v));
    return v;
  }
  Fields object(const std::string& field) const { return Fields(j_.at(field), file_, name(field)); }
  Fields element(const json& e, const std::string& field, size_t i) const {
    return Fields(e, file_, name(field) + "[" + std::to_string(i) + "]");
  }

  static std::string brief(const json& v) { return json_excerpt(v, 60); }
  const json& value() const { return j_; }

 private:
  const json& j_;
  const std::string& file_;
  std::string path_;
};

std::string triton_datatype(const std::string& kserve) { return kserve == "BYTES" ? "TYPE_STRING" : "TYPE_" + kserve; }

// {"name", "data_type": "TYPE_FP32" | "datatype": "FP32", "dims": [...] (no batch dimension) |
//  "shape": [...] (with it)}
models::IOSpec parse_tensor(const Fields& f, int64_t max_batch_size) {
  f.only({"name", "data_type", "datatype", "dims", "shape"});
  models::IOSpec io;
  io.name = f.string("name").value_or("");
  if (io.name.empty()) f.fail("name", "must be a non-empty string");
  auto triton = f.string("data_type");
  auto kserve = f.string("datatype");
  if (triton.has_value() == kserve.has_value()) f.fail("data_type", "or datatype must be given, exactly one of them");
  std::string type = kserve ? *kserve : triton->rfind("TYPE_", 0) == 0 ? triton->substr(5) : "";
  if (type == "STRING") type = "BYTES";
  if (!wire_type_from_name(type))
    f.fail(kserve ? "datatype" : "data_type", "names an unknown datatype '" + (kserve ? *kserve : *triton) +
                                                  (kserve ? "' (FP32, INT64, BYTES, ...)" : "' (TYPE_FP32, TYPE_INT64, TYPE_STRING, ...)"));
  io.datatype = type;
  const json* dims = f.array("dims");
  const json* shape = f.array("shape");
  if ((dims != nullptr) == (shape != nullptr)) f.fail("dims", "or shape must be given, exactly one of them");
  const std::string field = dims ? "dims" : "shape";
  const json& list = dims ? *dims : *shape;
  if (list.size() > kMaxRank) f.fail(field, "has more than " + std::to_string(kMaxRank) + " dimensions");
  if (dims && max_batch_size > 0) io.shape.push_back(-1);
  for (size_t i = 0; i < list.size(); ++i) {
    int64_t d = f.integer(list[i], field + "[" + std::to_string(i) + "]", -1, kMaxDim);
    if (d == 0) f.fail(field + "[" + std::to_string(i) + "]", "must be -1 (variable) or positive, got 0");
    io.shape.push_back(d);
  }
  if (shape && max_batch_size > 0 && (io.shape.empty() || io.shape[0] != -1))
    f.fail("shape", "must start with -1 (the batch dimension) when max_batch_size > 0");
  return io;
}

json tensor_json(const models::IOSpec& io, int64_t max_batch_size) {
  std::vector<int64_t> dims = io.shape;
  if (max_batch_size > 0 && !dims.empty()) dims.erase(dims.begin());
  return {{"name", io.name}, {"data_type", triton_datatype(io.datatype)}, {"dims", dims}};
}

std::vector<models::IOSpec> parse_tensors(const Fields& f, const std::string& key, const std::string& alias,
                                          int64_t max_batch_size) {
  if (f.find(key) && f.find(alias)) f.fail(key, "and " + alias + " are the same list; give one of them");
  const std::string field = f.find(alias) ? alias : key;
  const json* list = f.array(field);
  std::vector<models::IOSpec> out;
  if (!list) return out;
  std::set<std::string> names;
  for (size_t i = 0; i < list->size(); ++i) {
    out.push_back(parse_tensor(f.element((*list)[i], field, i), max_batch_size));
    if (!names.insert(out.back().name).second)
      f.fail(field + "[" + std::to_string(i) + "].name", "repeats the name '" + out.back().name + "'");
  }
  return out;
}

void parse_dynamic_batching(const Fields& d, ModelConfig& c) {
  d.only({"max_queue_delay_microseconds", "preserve_ordering", "priority_levels", "default_priority_level",
          "default_queue_policy"},
         {{"preferred_batch_size", "hgraph batches up to the largest of batch_buckets; list the sizes there"},
          {"priority_queue_policy", "one default_queue_policy applies to every level"}});
  c.dynamic_batching = true;
  c.max_queue_delay_us = d.integer("max_queue_delay_microseconds", 0, kMaxMicroseconds).value_or(0);
  c.preserve_ordering = d.boolean("preserve_ordering").value_or(false);
  c.priority_levels = static_cast<int>(std::max<int64_t>(1, d.integer("priority_levels", 0, kMaxPriorityLevels).value_or(1)));
  c.default_priority_level = static_cast<int>(d.integer("default_priority_level", 0, kMaxPriorityLevels).value_or(c.priority_levels));
  if (c.default_priority_level == 0) c.default_priority_level = c.priority_levels;
  if (c.default_priority_level > c.priority_levels)
    d.fail("default_priority_level", "must be in [1, priority_levels = " + std::to_string(c.priority_levels) + "], got " +
                                          std::to_string(c.default_priority_level));
  if (!d.find("default_queue_policy")) return;
  Fields q = d.object("default_queue_policy");
  q.only({"max_queue_size", "default_timeout_microseconds", "allow_timeout_override", "timeout_action"});
  c.max_queue_size = static_cast<size_t>(q.integer("max_queue_size", 0, int64_t{1} << 30).value_or(0));
  c.default_timeout_us = static_cast<uint64_t>(q.integer("default_timeout_microseconds", 0, kMaxMicroseconds).value_or(0));
  c.allow_timeout_override = q.boolean("allow_timeout_override").value_or(true);
  if (auto action = q.string("timeout_action"); action && *action != "REJECT")
    q.fail("timeout_action", "must be \"REJECT\" (an expired request is never run), got \"" + *action + "\"");
}

int parse_instance_group(const Fields& f) {
  const json* groups = f.array("instance_group");
  if (!groups) return 1;
  if (groups->empty()) f.fail("instance_group", "must not be empty");
  int64_t total = 0;
  for (size_t i = 0; i < groups->size(); ++i) {
    Fields g = f.element((*groups)[i], "instance_group", i);
    g.only({"name", "count", "kind"}, {{"gpus", "hgraph runs on its hpu device, not on GPUs"}});
    g.string("name");
    total += g.integer("count", 1, kMaxInstances).value_or(1);
    if (auto kind = g.string("kind"); kind && *kind != "KIND_CPU" && *kind != "KIND_AUTO" && *kind != "KIND_MODEL")
      g.fail("kind", "must be KIND_CPU, KIND_AUTO or KIND_MODEL (hgraph runs on its hpu device), got \"" + *kind + "\"");
  }
  if (total > kMaxInstances)
    f.fail("instance_group", "asks for " + std::to_string(total) + " instances, more than " + std::to_string(kMaxInstances));
  return static_cast<int>(total);
}

VersionPolicy parse_version_policy(const Fields& f) {
  VersionPolicy p;
  if (!f.find("version_policy")) return p;
  Fields v = f.object("version_policy");
  v.only({"latest", "all", "specific"});
  if (!v.find("latest") + !v.find("all") + !v.find("specific") != 2)
    v.fail("", "must hold exactly one of latest, all, specific");
  if (v.find("latest")) {
    Fields l = v.object("latest");
    l.only({"num_versions"});
    p.kind = VersionPolicy::Kind::Latest;
    p.num_versions = l.integer("num_versions", 1, 1 << 20).value_or(1);
  } else if (v.find("all")) {
    v.object("all").only({});
    p.kind = VersionPolicy::Kind::All;
  } else {
    Fields s = v.object("specific");
    s.only({"versions"});
    const json* list = s.array("versions");
    if (!list || list->empty()) s.fail("versions", "must list at least one version");
    p.kind = VersionPolicy::Kind::Specific;
    for (size_t i = 0; i < list->size(); ++i)
      p.versions.push_back(s.integer((*list)[i], "versions[" + std::to_string(i) + "]", 1, INT64_MAX));
    std::sort(p.versions.begin(), p.versions.end(), std::greater<>());
    p.versions.erase(std::unique(p.versions.begin(), p.versions.end()), p.versions.end());
  }
  return p;
}

// A bucket list (field `key`: a spec string or an array), each bucket in 1..max.
std::vector<int64_t> parse_buckets(const Fields& f, const std::string& key, int64_t max) {
  const json* b = f.find(key);
  if (!b) return {};
  try {
    if (b->is_string()) {
      std::vector<int64_t> v = models::parse_buckets(b->get<std::string>());
      if (v.back() > max)  // as for the array form: a spec may name any size
        f.fail(key, "holds bucket " + std::to_string(v.back()) + ", above the limit " + std::to_string(max));
      return v;
    }
    if (!b->is_array()) f.fail(key, "must be a string (\"exp:1:32\", \"linear:8:64:8\", \"1,2,4\") or an array of "
                                    "positive integers, got " + Fields::brief(*b));
    if (b->size() > models::kMaxBuckets)
      f.fail(key, "has more than " + std::to_string(models::kMaxBuckets) + " entries");
    std::vector<int64_t> v;
    for (size_t i = 0; i < b->size(); ++i) v.push_back(f.integer((*b)[i], key + "[" + std::to_string(i) + "]", 1, max));
    return models::normalize_buckets(std::move(v));
  } catch (const InvalidArgument& e) {
    f.fail(key, std::string("is invalid: ") + e.what());
  }
}

// {"name": dimension, ...} with dimensions >= 1 (the batch is not padded).
std::map<std::string, int64_t> parse_dims(const Fields& p, const std::string& key) {
  const Fields d = p.object(key);
  std::map<std::string, int64_t> out;
  for (const auto& [name, v] : d.value().items()) out[name] = d.integer(v, name, 1, static_cast<int64_t>(kMaxRank) - 1);
  return out;
}

Padding parse_padding(const Fields& p) {
  p.only({"dims", "buckets", "pad_value", "mask", "strip"});
  Padding pad;
  if (!p.find("dims")) p.fail("dims", "must name the padded inputs and their dimension ({\"input_ids\": 1, ...})");
  pad.dims = parse_dims(p, "dims");
  if (pad.dims.empty()) p.fail("dims", "must name at least one input");
  pad.buckets = parse_buckets(p, "buckets", kMaxDim);
  if (pad.buckets.empty()) p.fail("buckets", "must list the padded lengths (\"exp:16:512\", [32, 64, 128], ...)");
  if (const json* v = p.find("pad_value")) {
    if (!v->is_number()) p.fail("pad_value", "must be a number, got " + Fields::brief(*v));
    pad.pad_value = v->get<double>();
  }
  pad.mask = p.string("mask").value_or("");
  if (pad.mask.empty())
    p.fail("mask", "must name the input whose zeros mask the padding (hgraph pads only where the model is told)");
  if (!pad.dims.count(pad.mask)) p.fail("mask", "names '" + pad.mask + "', which dims does not pad");
  if (p.find("strip")) pad.strip = parse_dims(p, "strip");
  return pad;
}

// A file inside the model's folder: a relative path without "..".
std::string model_file(const Fields& p, const char* field) {
  const std::string f = p.string(field).value_or("");
  const std::filesystem::path path(f);
  if (f.empty() || path.is_absolute() || std::any_of(path.begin(), path.end(), [](const auto& part) { return part == ".."; }))
    p.fail(field, "must name a file inside the model's folder (a relative path without \"..\"), got \"" + f + "\"");
  return f;
}

PrecisionCheck parse_precision_check(const Fields& p) {
  p.only({"samples", "seed", "min_top1_agreement", "max_relative_error", "inputs"});
  PrecisionCheck c;
  if (auto n = p.integer("samples", 0, kMaxPrecisionSamples)) c.samples = *n;
  if (auto n = p.integer("seed", 0, INT64_MAX)) c.seed = static_cast<uint64_t>(*n);
  if (auto a = p.number("min_top1_agreement", 0, 1)) c.min_top1_agreement = *a;
  if (auto e = p.number("max_relative_error", 0, 1e30)) c.max_relative_error = *e;
  if (p.find("inputs")) c.inputs = model_file(p, "inputs");
  return c;
}

Calibration parse_calibration(const Fields& p) {
  p.only({"inputs", "samples"});
  Calibration c;
  c.inputs = model_file(p, "inputs");
  if (auto n = p.integer("samples", 1, kMaxPrecisionSamples)) c.samples = *n;
  return c;
}

Generation parse_generation(const Fields& p) {
  p.only({"max_batch", "max_step_tokens", "block_size", "max_batch_total_tokens", "graph_memory_mb", "kv_cache_dtype"});
  Generation g;
  if (auto n = p.integer("max_batch", 0, 4096)) g.max_batch = *n;  // 0: max_batch_size
  if (auto n = p.integer("max_step_tokens", 0, 65536)) g.max_step_tokens = *n;
  if (auto n = p.integer("block_size", 1, 4096)) g.block_size = *n;
  if (auto n = p.integer("max_batch_total_tokens", 0, int64_t{1} << 30)) g.max_batch_total_tokens = *n;
  if (auto n = p.integer("graph_memory_mb", 0, int64_t{1} << 30)) g.graph_memory_mb = *n;
  if (auto t = p.string("kv_cache_dtype")) {
    if (*t != "float32" && *t != "bfloat16") p.fail("kv_cache_dtype", "must be \"float32\" or \"bfloat16\", got \"" + *t + "\"");
    g.kv_cache_dtype = *t;
  }
  return g;
}

json padding_json(const Padding& p) {
  return {{"dims", p.dims}, {"buckets", p.buckets}, {"pad_value", p.pad_value}, {"mask", p.mask}, {"strip", p.strip}};
}

}  // namespace

std::vector<int64_t> VersionPolicy::select(std::vector<int64_t> available) const {
  std::sort(available.begin(), available.end(), std::greater<>());
  available.erase(std::unique(available.begin(), available.end()), available.end());
  switch (kind) {
    case Kind::Latest:
      if (static_cast<int64_t>(available.size()) > num_versions) available.resize(static_cast<size_t>(num_versions));
      return available;
    case Kind::All: return available;
    case Kind::Specific: {
      std::vector<int64_t> out;
      for (int64_t v : available)
        if (std::find(versions.begin(), versions.end(), v) != versions.end()) out.push_back(v);
      return out;
    }
  }
  return available;
}

ModelConfig ModelConfig::parse(const json& j, const std::string& file, const std::string& name) {
  Fields f(j, file, "");
  f.only({"name", "platform", "backend", "max_batch_size", "batch_buckets", "dynamic_batching", "instance_group",
          "version_policy", "model_warmup", "max_signatures", "max_signature_bytes", "padding", "precision",
          "precision_check", "calibration", "generation", "input", "inputs", "output", "outputs"},
         {{"sequence_batching", "hgraph serves stateless models"},
          {"ensemble_scheduling", "hgraph has no ensembles"},
          {"preferred_batch_size", "list the batch sizes in batch_buckets"}});
  ModelConfig c;
  c.name = name;
  if (auto n = f.string("name"); n && *n != name)
    f.fail("name", "is \"" + *n + "\" but the model's folder is \"" + name + "\"");
  auto platform = f.string("platform");
  auto backend = f.string("backend");
  if (platform) {
    if (*platform == "hgraph" || *platform == "hgraph_v1" || *platform == "onnxruntime_onnx") c.platform = "hgraph";
    else if (*platform == "identity") c.platform = "identity";
    else f.fail("platform", "must be \"hgraph\" (a model package or model.onnx, also spelt \"onnxruntime_onnx\") or "
                            "\"identity\", got \"" + *platform + "\"");
  }
  if (backend) {
    std::string b = *backend == "identity" ? "identity" : *backend == "hgraph" || *backend == "onnxruntime" ? "hgraph" : "";
    if (b.empty()) f.fail("backend", "must be \"hgraph\", \"onnxruntime\" or \"identity\", got \"" + *backend + "\"");
    if (platform && b != c.platform) f.fail("backend", "\"" + *backend + "\" contradicts platform \"" + *platform + "\"");
    c.platform = b;
  }
  c.batch_buckets = parse_buckets(f, "batch_buckets", kMaxBatchSize);
  if (c.batch_buckets.size() > kMaxConfigBuckets)
    f.fail("batch_buckets", "names " + std::to_string(c.batch_buckets.size()) + " buckets; a model captures at most " +
                                std::to_string(kMaxConfigBuckets) + " (one graph and arena each)");
  if (auto m = f.integer("max_batch_size", 0, kMaxBatchSize)) {
    c.max_batch_size = *m;
    c.max_batch_size_given = true;
  } else if (!c.batch_buckets.empty()) c.max_batch_size = c.batch_buckets.back();
  if (c.max_batch_size == 0 && !c.batch_buckets.empty() && c.batch_buckets != std::vector<int64_t>{1})
    f.fail("batch_buckets", "must be [1] or absent when max_batch_size is 0 (no batching)");
  if (c.max_batch_size > 0 && !c.batch_buckets.empty() && c.batch_buckets.back() > c.max_batch_size)
    f.fail("batch_buckets", "holds bucket " + std::to_string(c.batch_buckets.back()) + ", above max_batch_size " +
                                std::to_string(c.max_batch_size));
  if (f.find("dynamic_batching")) parse_dynamic_batching(f.object("dynamic_batching"), c);
  c.instance_count = parse_instance_group(f);
  c.version_policy = parse_version_policy(f);
  if (auto w = f.boolean("model_warmup")) c.warmup = *w;
  if (auto m = f.integer("max_signatures", 0, kMaxSignatures)) c.max_signatures = static_cast<size_t>(*m);
  if (auto m = f.integer("max_signature_bytes", 0, INT64_MAX)) c.max_signature_bytes = static_cast<size_t>(*m);
  if (f.find("padding")) c.padding = parse_padding(f.object("padding"));
  if (auto p = f.string("precision")) {
    try {
      c.precision = graphs::parse_precision(*p);
    } catch (const InvalidArgument&) {
      f.fail("precision", "must be \"fp32\", \"bf16\" or \"int8\", got " + Fields::brief(*f.find("precision")));
    }
  }
  if (f.find("precision_check")) c.precision_check = parse_precision_check(f.object("precision_check"));
  if (f.find("generation")) c.generation = parse_generation(f.object("generation"));
  if (f.find("calibration")) {
    c.calibration = parse_calibration(f.object("calibration"));
    if (c.precision != graphs::Precision::Int8)
      f.fail("calibration", "sets the ranges of INT8 convolutions: it needs \"precision\": \"int8\"");
  }
  c.inputs = parse_tensors(f, "input", "inputs", c.max_batch_size);
  c.outputs = parse_tensors(f, "output", "outputs", c.max_batch_size);
  if (c.platform == "identity") {
    if (c.inputs.empty()) f.fail("input", "must list the identity model's tensors");
    if (c.outputs.size() != c.inputs.size())
      f.fail("output", "must list one output per input for the identity model (output i echoes input i), got " +
                           std::to_string(c.outputs.size()) + " outputs for " + std::to_string(c.inputs.size()) + " inputs");
  }
  return c;
}

ModelConfig ModelConfig::load(const std::filesystem::path& model_dir) {
  const std::string name = model_dir.filename().string();
  const std::filesystem::path path = model_dir / "config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    ModelConfig c;
    c.name = name;
    return c;
  }
  return parse(read_json_file(path, kConfigJsonLimits), path.string(), name);
}

std::vector<int64_t> ModelConfig::buckets(const std::vector<int64_t>& fallback) const {
  if (!batch_buckets.empty()) return batch_buckets;
  if (max_batch_size == 0) return {1};
  std::vector<int64_t> out;
  for (int64_t b : fallback)
    if (b <= max_batch_size) out.push_back(b);
  if (out.empty()) out.push_back(max_batch_size);
  return out;
}

BatcherConfig ModelConfig::batcher_config() const {
  BatcherConfig b;
  b.max_batch_size = max_batch_size == 0 ? 1 : max_batch_size;  // 0 in config.json: no batching
  b.max_queue_delay_us = max_queue_delay_us;
  b.max_queue_size = max_queue_size;
  b.preserve_ordering = preserve_ordering;
  b.priority_levels = priority_levels;
  b.default_priority_level = default_priority_level;
  b.instances = instance_count;
  return b;
}

void ModelConfig::apply(models::PredictorOptions& opt) const {
  opt.max_signatures = max_signatures;
  opt.max_signature_bytes = max_signature_bytes;
  opt.batched = !(max_batch_size_given && max_batch_size == 0);  // Triton's max_batch_size 0: whole tensors
  opt.precision = precision;
}

json ModelConfig::to_json() const {
  json j = {{"name", name}, {"platform", platform}, {"max_batch_size", max_batch_size}};
  if (!batch_buckets.empty()) j["batch_buckets"] = batch_buckets;
  if (dynamic_batching)
    j["dynamic_batching"] = {{"max_queue_delay_microseconds", max_queue_delay_us},
                             {"preserve_ordering", preserve_ordering},
                             {"priority_levels", priority_levels},
                             {"default_priority_level", default_priority_level},
                             {"default_queue_policy", {{"max_queue_size", max_queue_size},
                                                       {"default_timeout_microseconds", default_timeout_us},
                                                       {"allow_timeout_override", allow_timeout_override},
                                                       {"timeout_action", "REJECT"}}}};
  j["instance_group"] = json::array({{{"count", instance_count}, {"kind", "KIND_CPU"}}});
  switch (version_policy.kind) {
    case VersionPolicy::Kind::Latest: j["version_policy"] = {{"latest", {{"num_versions", version_policy.num_versions}}}}; break;
    case VersionPolicy::Kind::All: j["version_policy"] = {{"all", json::object()}}; break;
    case VersionPolicy::Kind::Specific: j["version_policy"] = {{"specific", {{"versions", version_policy.versions}}}}; break;
  }
  j["model_warmup"] = warmup;
  j["max_signatures"] = max_signatures;
  j["max_signature_bytes"] = max_signature_bytes;
  if (padding) j["padding"] = padding_json(*padding);
  j["precision"] = graphs::precision_name(precision);
  j["precision_check"] = {{"samples", precision_check.samples},
                          {"seed", precision_check.seed},
                          {"min_top1_agreement", precision_check.min_top1_agreement}};
  if (precision_check.max_relative_error) j["precision_check"]["max_relative_error"] = *precision_check.max_relative_error;
  if (!precision_check.inputs.empty()) j["precision_check"]["inputs"] = precision_check.inputs;
  if (calibration) j["calibration"] = {{"inputs", calibration->inputs}, {"samples", calibration->samples}};
  j["generation"] = {{"max_batch", generation.max_batch},
                     {"max_step_tokens", generation.max_step_tokens},
                     {"block_size", generation.block_size},
                     {"max_batch_total_tokens", generation.max_batch_total_tokens},
                     {"graph_memory_mb", generation.graph_memory_mb},
                     {"kv_cache_dtype", generation.kv_cache_dtype}};
  j["input"] = json::array();
  for (const auto& io : inputs) j["input"].push_back(tensor_json(io, max_batch_size));
  j["output"] = json::array();
  for (const auto& io : outputs) j["output"].push_back(tensor_json(io, max_batch_size));
  return j;
}

}  // namespace hg::server
