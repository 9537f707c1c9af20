// DeviceStatsMonitor as Lightning's (pytorch-lightning callbacks/device_stats_monitor.py) with
// lightning-habana's HPU statistics (utils/resources.py get_device_stats).
#include <fstream>
#include <sstream>

#include "engine/device.h"
#include "engine/error.h"
#include "training/callbacks.h"
#include "training/trainer.h"

namespace hg::training {
namespace {

// psutil's virtual_memory().percent and swap_memory().percent from /proc/meminfo.
void memory_percents(std::map<std::string, double>& out) {
  std::ifstream in("/proc/meminfo");
  std::map<std::string, double> kb;
  std::string key;
  double value;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (!key.empty() && key.back() == ':') key.pop_back();
    kb[key] = value;
  }
  double total = kb["MemTotal"], avail = kb.count("MemAvailable") ? kb["MemAvailable"] : kb["MemFree"];
  out["cpu_vm_percent"] = total > 0 ? 100.0 * (total - avail) / total : 0.0;
  double swap = kb["SwapTotal"];
  out["cpu_swap_percent"] = swap > 0 ? 100.0 * (swap - kb["SwapFree"]) / swap : 0.0;
}

bool read_cpu_times(uint64_t& busy, uint64_t& total) {
  std::ifstream in("/proc/stat");
  std::string cpu;
  if (!(in >> cpu) || cpu != "cpu") return false;
  uint64_t v[10] = {}, sum = 0;
  for (int i = 0; i < 10 && in >> v[i]; ++i) sum += v[i];
  busy = sum - v[3] - v[4];  // without idle and iowait
  total = sum;
  return total > 0;
}

bool should_update_logs(Trainer& t, int64_t step) {
  int n = t.options().log_every_n_steps;
  return (n > 0 && (step + 1) % n == 0) || t.should_stop;
}

}  // namespace

std::map<std::string, double> DeviceStatsMonitor::device_stats(Device device) {
  std::map<std::string, double> s;
  bool cpu = !device.is_hpu();
  if (!cpu) {
    MemoryStats m = memory_stats(device);
    s = {{"Limit", double(m.limit)},           {"InUse", double(m.in_use)},
         {"MaxInUse", double(m.max_in_use)},   {"NumAllocs", double(m.num_allocs)},
         {"NumFrees", double(m.num_frees)},    {"ActiveAllocs", double(m.active_allocs)},
         {"MaxAllocSize", double(m.max_alloc_size)}};
  }
  if (cpu ? cpu_stats_.value_or(true) : cpu_stats_.value_or(false)) {
    memory_percents(s);
    uint64_t busy = 0, total = 0;
    if (read_cpu_times(busy, total)) {  // psutil.cpu_percent(): busy share since the previous call
      double db = double(busy - last_cpu_busy_), dt = double(total - last_cpu_total_);
      s["cpu_percent"] = dt > 0 ? 100.0 * db / dt : 0.0;
      last_cpu_busy_ = busy, last_cpu_total_ = total;
    }
  }
  return s;
}

void DeviceStatsMonitor::setup(Trainer& t, LightningModule&, const std::string& stage) {
  if (stage == "fit" && t.loggers().empty() && t.options().fast_dev_run == 0)  // every rank
    throw InvalidArgument("DeviceStatsMonitor needs a logger: the Trainer has none");
}

void DeviceStatsMonitor::log_stats(Trainer& t, const std::string& hook, int64_t step) {
  if (!should_update_logs(t, step) || !t.is_global_zero() || t.loggers().empty()) return;
  if (!t.device().is_hpu() && cpu_stats_ == false) return;
  std::map<std::string, double> prefixed;
  for (const auto& [k, v] : device_stats(t.device())) prefixed["DeviceStatsMonitor." + hook + "/" + k] = v;
  for (const auto& logger : t.loggers()) logger->log_metrics(prefixed, step);
}

void DeviceStatsMonitor::on_train_batch_start(Trainer& t, LightningModule&, const Batch&, int64_t) {
  batch_start_step_ = t.global_step();
  log_stats(t, "on_train_batch_start", batch_start_step_);
}

void DeviceStatsMonitor::on_train_batch_end(Trainer& t, LightningModule&, const Batch&, int64_t) {
  log_stats(t, "on_train_batch_end", batch_start_step_);  // Lightning's step count before this batch's step
}

void DeviceStatsMonitor::on_validation_batch_end(Trainer& t, LightningModule&, const Batch&, int64_t) {
  if (!t.sanity_checking()) log_stats(t, "on_validation_batch_end", t.global_step());
}

}  // namespace hg::training
