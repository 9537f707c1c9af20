// Time per op of compiled-graph replays: while a profile is on, every Executable::run times each
// of its steps and adds the time to a process-wide table, one row per (op, fused ops, dtype,
// output shape). It is how a latency is explained: which ops the time goes to.
//
//   hg::graphs::StepProfile::start();                  // clears the table, turns timing on
//   for (int i = 0; i < 100; ++i) predictor->run(...);  // any replays, any threads
//   std::vector<hg::graphs::ProfileRow> rows = hg::graphs::StepProfile::stop();  // by total time
//   std::cout << hg::graphs::StepProfile::table(rows, 20);  // per op kind, then the top 20 rows
// Off, run pays one relaxed atomic load; on, two clock reads per step and one locked merge per run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hg::graphs {

class Executable;

struct ProfileRow {
  std::string op;     // the step's op, with what was fused into it as the dump lists it ("linear[linear+gelu]")
  std::string dtype;  // of the step's output
  std::string shape;  // of the step's output
  uint64_t calls = 0;
  double seconds = 0;  // total over the calls
};

class StepProfile {
 public:
  static void start();
  static std::vector<ProfileRow> stop();  // sorted by seconds, largest first
  static bool on();
  // Adds one run of `exe`: seconds[k] is step k's time.
  static void add(const Executable& exe, const std::vector<double>& seconds);
  // Text: total, then time per op kind (op + dtype) with its share, then the `top` largest rows.
  static std::string table(const std::vector<ProfileRow>& rows, size_t top);
};

}  // namespace hg::graphs
