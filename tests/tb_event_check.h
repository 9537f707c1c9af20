// Runs tests/tb_event_check.py (the independent Python reader of TensorBoard event files) on a
// file: its exit code and its output (the decoded JSON, or the error it printed).
//
//   auto [rc, out] = hg::test::tb_event_check(file);                    // decode only
//   auto [rc2, out2] = hg::test::tb_event_check(file, {{"scalars", ...}});  // rc 1: differs
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace hg::test {

inline std::pair<int, std::string> tb_event_check(const std::filesystem::path& events,
                                                  const nlohmann::json& expected = nullptr) {
  std::string cmd = "/usr/bin/python3 " + std::string(HG_SOURCE_DIR) + "/tests/tb_event_check.py '" + events.string() + "'";
  if (!expected.is_null()) {
    std::filesystem::path exp = events.string() + ".expected.json";
    std::ofstream(exp) << expected.dump();
    cmd += " '" + exp.string() + "'";
  }
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace hg::test
