#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "training/crc32c.h"
#include "training/loggers.h"

namespace hg::training {
namespace {

// Protocol buffers wire format, just what Event / Summary need.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out += char(uint8_t(v) | 0x80), v >>= 7;
  out += char(v);
}
void tag(std::string& out, int field, int wire_type) { varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }
void bytes_field(std::string& out, int field, const std::string& bytes) {
  tag(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}
template <class T>
void fixed_field(std::string& out, int field, T v) {  // little-endian, as x86 stores it
  tag(out, field, sizeof(T) == 8 ? 1 : 5);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

// Event{wall_time = 1, step = 2, file_version = 3 | summary = 5}.
std::string event(int64_t step, const std::string* file_version, const std::string* summary) {
  std::string e;
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  fixed_field(e, 1, now);
  if (step != 0) tag(e, 2, 0), varint(e, uint64_t(step));
  if (file_version) bytes_field(e, 3, *file_version);
  if (summary) bytes_field(e, 5, *summary);
  return e;
}

// Summary{value = 1: Value{tag = 1, simple_value = 2}}.
std::string scalar_summary(const std::string& name, float value) {
  std::string v;
  bytes_field(v, 1, name);
  fixed_field(v, 2, value);
  std::string s;
  bytes_field(s, 1, v);
  return s;
}

// Summary{value: Value{tag = 1, metadata = 9: {plugin_data = 1: {plugin_name = 1: "text"}},
// tensor = 8: TensorProto{dtype = 1: DT_STRING (7), tensor_shape = 2: {}, string_val = 8}}}.
std::string text_summary(const std::string& name, const std::string& text) {
  std::string plugin, metadata, tensor, v, s;
  bytes_field(plugin, 1, "text");
  bytes_field(metadata, 1, plugin);
  tag(tensor, 1, 0), varint(tensor, 7);
  bytes_field(tensor, 2, "");
  bytes_field(tensor, 8, text);
  bytes_field(v, 1, name);
  bytes_field(v, 9, metadata);
  bytes_field(v, 8, tensor);
  bytes_field(s, 1, v);
  return s;
}

std::atomic<int> g_file_counter{0};  // TensorBoard's per-process event file uid

}  // namespace

TensorBoardLogger::TensorBoardLogger(std::filesystem::path save_dir, std::string name, LoggerVersion version,
                                     std::string prefix)
    : save_dir_(std::move(save_dir)), name_(std::move(name)), prefix_(std::move(prefix)), version_(std::move(version)) {}

TensorBoardLogger::~TensorBoardLogger() {
  if (file_) std::fclose(file_);
}

void TensorBoardLogger::resolve() const { versioned_log_dir(save_dir_, name_, version_); }

std::string TensorBoardLogger::version() const {
  resolve();
  return version_.name.empty() ? std::to_string(version_.number) : version_.name;
}

std::filesystem::path TensorBoardLogger::log_dir() const { return versioned_log_dir(save_dir_, name_, version_); }

void TensorBoardLogger::open() {
  std::filesystem::path dir = log_dir();
  std::filesystem::create_directories(dir);
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  long long now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  char file[512];
  std::snprintf(file, sizeof file, "events.out.tfevents.%010lld.%s.%d.%d", now, host, int(getpid()), g_file_counter++);
  event_path_ = dir / file;
  file_ = std::fopen(event_path_.c_str(), "wb");
  if (!file_) throw IoError(event_path_.string() + ": cannot create the event file");
  std::string version = "brain.Event:2";
  write_event(event(0, &version, nullptr));
}

// One TFRecord: uint64 length, masked CRC32C of those 8 bytes, the data, masked CRC32C of it.
void TensorBoardLogger::write_event(const std::string& data) {
  uint64_t len = data.size();
  uint8_t header[12];
  std::memcpy(header, &len, 8);
  uint32_t len_crc = masked_crc32c({header, 8});
  std::memcpy(header + 8, &len_crc, 4);
  uint32_t data_crc = masked_crc32c(as_bytes(data));
  bool ok = std::fwrite(header, 1, 12, file_) == 12 && std::fwrite(data.data(), 1, data.size(), file_) == data.size() &&
            std::fwrite(&data_crc, 1, 4, file_) == 4;
  if (!ok) throw IoError(event_path_.string() + ": write failed");
}

void TensorBoardLogger::log_hyperparams(const nlohmann::json& hparams) {
  if (!hparams.is_object()) throw InvalidArgument("TensorBoardLogger::log_hyperparams: hparams must be a JSON object");
  hparams_.update(hparams);
  hparams_dirty_ = true;
  if (!file_) open();
  std::string summary = text_summary("hparams", "```\n" + hparams_to_yaml(hparams_) + "```");
  write_event(event(0, nullptr, &summary));
}

void TensorBoardLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  if (!file_) open();
  for (const auto& [k, v] : metrics) {
    std::string summary = scalar_summary(prefix_.empty() ? k : prefix_ + "-" + k, static_cast<float>(v));
    write_event(event(step, nullptr, &summary));
  }
}

void TensorBoardLogger::save() {
  if (file_ && std::fflush(file_) != 0) throw IoError(event_path_.string() + ": flush failed");
  if (hparams_dirty_) {
    std::filesystem::create_directories(log_dir());
    write_file_atomic(log_dir() / "hparams.yaml", {as_bytes(hparams_to_yaml(hparams_))});
    hparams_dirty_ = false;
  }
}

void TensorBoardLogger::finalize(const std::string& status) {
  (void)status;
  save();
  if (file_) {
    int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) throw IoError(event_path_.string() + ": close failed");
  }
}

}  // namespace hg::training
