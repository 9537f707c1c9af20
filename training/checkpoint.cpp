#include "training/checkpoint.h"

#include <map>
#include <set>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "engine/json_reader.h"
#include "engine/version.h"
#include "models/safetensors.h"
#include "models/state_dict.h"

namespace hg::training {

namespace {

using nlohmann::json;

constexpr const char* kStatePrefix = "state_dict/";

std::string optimizer_prefix(size_t i) { return "optimizer_states/" + std::to_string(i) + "/"; }

void append(safetensors::File& f, const models::StateDict& tensors, const std::string& prefix) {
  safetensors::File part = models::to_safetensors(tensors);
  for (auto& e : part.entries) {
    e.name = prefix + e.name;
    f.entries.push_back(std::move(e));
  }
}

json names_of(const models::StateDict& tensors) {
  json a = json::array();
  for (const auto& [name, t] : tensors) a.push_back(name);
  return a;
}

// Reads checkpoint JSON fields with errors naming the file and the key path.
class Fields {
 public:
  explicit Fields(std::string source) : source_(std::move(source)) {}
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw FormatError(source_ + ": checkpoint key '" + key + "' " + what);
  }
  const json& get(const json& obj, const std::string& path, const std::string& key) const {
    const std::string full = path.empty() ? key : path + "." + key;
    auto it = obj.find(key);
    if (it == obj.end()) fail(full, "is missing");
    return *it;
  }
  int64_t integer(const json& obj, const std::string& path, const std::string& key) const {
    const json& v = get(obj, path, key);
    if (!v.is_number_integer()) fail(path.empty() ? key : path + "." + key, "must be an integer");
    return v.get<int64_t>();
  }
  std::string string(const json& obj, const std::string& path, const std::string& key) const {
    const json& v = get(obj, path, key);
    if (!v.is_string()) fail(path.empty() ? key : path + "." + key, "must be a string");
    return v.get<std::string>();
  }
  const json& typed(const json& obj, const std::string& path, const std::string& key, json::value_t type,
                    const char* type_name) const {
    const json& v = get(obj, path, key);
    if (v.type() != type) fail(path.empty() ? key : path + "." + key, std::string("must be ") + type_name);
    return v;
  }
  std::vector<std::string> names(const json& obj, const std::string& path, const std::string& key) const {
    const json& a = typed(obj, path, key, json::value_t::array, "an array");
    std::vector<std::string> out;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].is_string()) fail(path + "." + key + "[" + std::to_string(i) + "]", "must be a string");
      out.push_back(a[i].get<std::string>());
    }
    return out;
  }

 private:
  std::string source_;
};

}  // namespace

std::string hgraph_version() { return hg::version(); }

std::vector<uint8_t> serialize_checkpoint(const Checkpoint& c) {
  safetensors::File f;
  append(f, c.state_dict, kStatePrefix);
  json opts = json::array();
  for (size_t i = 0; i < c.optimizer_states.size(); ++i) {
    const StateBlob& b = c.optimizer_states[i];
    append(f, b.tensors, optimizer_prefix(i));
    opts.push_back({{"json", b.json}, {"tensors", names_of(b.tensors)}});
  }
  json meta = {{"epoch", c.epoch},
               {"global_step", c.global_step},
               {"loops", c.loops},
               {"weights_only", c.weights_only},
               {"state_dict", names_of(c.state_dict)},
               {"optimizer_states", opts},
               {"lr_schedulers", c.lr_schedulers},
               {"callbacks", c.callbacks},
               {"hyper_parameters", c.hyper_parameters},
               {"precision", c.precision},
               {"module", c.module},
               {"rng", c.rng},
               {"hgraph_version", hgraph_version()}};
  f.metadata = {{"format", "hgraph-checkpoint"}, {"format_version", kCheckpointFormatVersion}, {"checkpoint", meta.dump()}};
  return safetensors::serialize(f);
}

void write_checkpoint(const std::filesystem::path& file, const Checkpoint& c) {
  const std::vector<uint8_t> bytes = serialize_checkpoint(c);
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  write_file_atomic(file, {ByteSpan(bytes)});
}

Checkpoint parse_checkpoint(std::span<const uint8_t> bytes, const std::string& source) {
  const safetensors::File f = safetensors::parse(bytes, source);
  auto meta = [&](const char* key) -> const std::string& {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end())
      throw FormatError(source + ": not an hgraph checkpoint (safetensors metadata '" + key + "' is missing)");
    return it->second;
  };
  if (meta("format") != "hgraph-checkpoint")
    throw FormatError(source + ": metadata 'format' is '" + meta("format") + "', expected 'hgraph-checkpoint'");
  if (meta("format_version") != kCheckpointFormatVersion)
    throw FormatError(source + ": checkpoint format_version '" + meta("format_version") + "' is not supported (this build reads " +
                      kCheckpointFormatVersion + ")");
  const std::string& text = meta("checkpoint");
  json j;
  try {
    j = read_json(text, {.max_depth = 64, .max_values = text.size(), .max_bytes = text.size()},
                  source + " metadata 'checkpoint'");
  } catch (const InvalidArgument& e) {
    throw FormatError(e.what());
  }
  const Fields F(source);
  if (!j.is_object()) F.fail("checkpoint", "must be a JSON object");
  Checkpoint c;
  c.epoch = F.integer(j, "", "epoch");
  c.global_step = F.integer(j, "", "global_step");
  if (c.epoch < 0) F.fail("epoch", "is negative");
  if (c.global_step < 0) F.fail("global_step", "is negative");
  c.loops = F.typed(j, "", "loops", json::value_t::object, "an object");
  c.weights_only = F.typed(j, "", "weights_only", json::value_t::boolean, "a boolean").get<bool>();
  c.lr_schedulers = F.typed(j, "", "lr_schedulers", json::value_t::array, "an array");
  c.callbacks = F.typed(j, "", "callbacks", json::value_t::object, "an object");
  c.hyper_parameters = F.typed(j, "", "hyper_parameters", json::value_t::object, "an object");
  c.precision = F.string(j, "", "precision");
  c.module = F.typed(j, "", "module", json::value_t::object, "an object");
  c.rng = F.typed(j, "", "rng", json::value_t::object, "an object");
  c.hgraph_version = F.string(j, "", "hgraph_version");
  if (!c.weights_only) {
    for (const char* k : {"next_epoch", "next_batch", "total_batch_idx"})
      if (F.integer(c.loops, "loops", k) < 0) F.fail(std::string("loops.") + k, "is negative");
  }

  const std::map<std::string, Tensor> tensors = models::tensors_from(f, source);
  std::set<std::string> used;
  auto take = [&](const std::string& name, const std::string& key) {
    auto it = tensors.find(name);
    if (it == tensors.end()) F.fail(key, "lists tensor '" + name + "', which the file does not hold");
    if (!used.insert(name).second) F.fail(key, "lists tensor '" + name + "' twice");
    return it->second;
  };
  for (const std::string& k : F.names(j, "", "state_dict")) c.state_dict.emplace_back(k, take(kStatePrefix + k, "state_dict"));
  const json& opts = F.typed(j, "", "optimizer_states", json::value_t::array, "an array");
  for (size_t i = 0; i < opts.size(); ++i) {
    const std::string path = "optimizer_states[" + std::to_string(i) + "]";
    if (!opts[i].is_object()) F.fail(path, "must be an object");
    StateBlob b;
    b.json = F.get(opts[i], path, "json");
    for (const std::string& n : F.names(opts[i], path, "tensors"))
      b.tensors.emplace_back(n, take(optimizer_prefix(i) + n, path + ".tensors"));
    c.optimizer_states.push_back(std::move(b));
  }
  for (const auto& [name, t] : tensors)
    if (!used.count(name)) throw FormatError(source + ": tensor '" + name + "' is not listed in the checkpoint metadata");
  return c;
}

Checkpoint read_checkpoint(const std::filesystem::path& file) {
  if (!std::filesystem::is_regular_file(file)) throw NotFoundError("checkpoint '" + file.string() + "' does not exist");
  const std::vector<uint8_t> bytes = read_file(file);
  return parse_checkpoint(bytes, file.string());
}

}  // namespace hg::training
