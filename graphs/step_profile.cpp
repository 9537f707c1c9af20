#include "graphs/step_profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "graphs/executable.h"

namespace hg::graphs {
namespace {

std::atomic<bool> g_on{false};
std::mutex g_mu;
using Key = std::tuple<std::string, std::string, std::string>;  // op, dtype, shape
std::map<Key, ProfileRow>& table_rows() {
  static std::map<Key, ProfileRow> rows;
  return rows;
}

// The op, with what fusion passes merged into it as the graph dump lists it: "linear[linear+relu]".
std::string op_label(const Node& node) {
  std::string s = node.op ? node.op->name : "copy";
  for (size_t k = 0; k < node.fused.size(); ++k) s += (k ? "+" : "[") + node.fused[k];
  return node.fused.empty() ? s : s + "]";
}

std::string fmt(const char* f, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

void StepProfile::start() {
  std::lock_guard lock(g_mu);
  table_rows().clear();
  g_on.store(true, std::memory_order_relaxed);
}

bool StepProfile::on() { return g_on.load(std::memory_order_relaxed); }

std::vector<ProfileRow> StepProfile::stop() {
  g_on.store(false, std::memory_order_relaxed);
  std::lock_guard lock(g_mu);
  std::vector<ProfileRow> rows;
  for (auto& [key, row] : table_rows()) rows.push_back(row);
  table_rows().clear();
  std::sort(rows.begin(), rows.end(), [](const ProfileRow& a, const ProfileRow& b) { return a.seconds > b.seconds; });
  return rows;
}

void StepProfile::add(const Executable& exe, const std::vector<double>& seconds) {
  const Graph& g = exe.graph();
  std::lock_guard lock(g_mu);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const int k = exe.step_of(i);
    if (k < 0 || static_cast<size_t>(k) >= seconds.size()) continue;
    const Node& node = g.nodes[i];
    Key key{op_label(node), dtype_name(node.meta.dtype), shape_str(node.meta.shape)};
    ProfileRow& row = table_rows()[key];
    if (row.calls == 0) std::tie(row.op, row.dtype, row.shape) = key;
    row.calls += 1;
    row.seconds += seconds[k];
  }
}

std::string StepProfile::table(const std::vector<ProfileRow>& rows, size_t top) {
  double total = 0;
  std::map<std::string, double> by_kind;
  for (const ProfileRow& r : rows) {
    total += r.seconds;
    by_kind[r.op + " " + r.dtype] += r.seconds;
  }
  std::vector<std::pair<double, std::string>> kinds;
  for (auto& [k, s] : by_kind) kinds.emplace_back(s, k);
  std::sort(kinds.rbegin(), kinds.rend());
  const double pct = total > 0 ? 100 / total : 0;
  std::string s = "total " + fmt("%.3f", total * 1e3) + " ms over all runs\nby op:\n";
  for (auto& [sec, k] : kinds) s += fmt("%6.1f%%  ", sec * pct) + k + "\n";
  s += "largest:\n";
  for (size_t i = 0; i < std::min(top, rows.size()); ++i) {
    const ProfileRow& r = rows[i];
    s += fmt("%6.1f%%  ", r.seconds * pct) + fmt("%9.2f us  ", r.seconds / r.calls * 1e6) + r.op + " " + r.dtype + " " +
         r.shape + " x" + std::to_string(r.calls) + "\n";
  }
  return s;
}

}  // namespace hg::graphs
