// Runs tests/tb_event_check.py (the independent Python reader of TensorBoard event files) on a
// file: its exit code and its output (the decoded JSON, or the error it printed).
//
//   auto [rc, out] = hg::test::tb_event_check(file);                    // decode only
//   auto [rc2, out2] = hg::test::tb_event_check(file, {{"scalars", ...}});  // rc 1: differs
#pragma once
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "tests/wait.h"

namespace hg::test {

inline std::pair<int, std::string> tb_event_check(const std::filesystem::path& events,
                                                  const nlohmann::json& expected = nullptr) {
  std::string cmd = "/usr/bin/python3 " + std::string(HG_SOURCE_DIR) + "/tests/tb_event_check.py '" + events.string() + "'";
  if (!expected.is_null()) {
    std::filesystem::path exp = events.string() + ".expected.json";
    std::ofstream(exp) << expected.dump();
    cmd += " '" + exp.string() + "'";
  }
  const CommandRun r = run_command(cmd + " 2>&1", std::chrono::seconds(300), "tb_event_check.py on " + events.string());
  return {r.exit_code, r.output};
}

}  // namespace hg::test
