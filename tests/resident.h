// The resident memory (RSS) of a process, for tests that bound memory:
//
//   const size_t before = hg::test::resident_bytes();          // this process
//   const size_t server = hg::test::resident_bytes(child_pid);  // another one; 0 if it is gone
#pragma once
#include <unistd.h>

#include <cstddef>
#include <fstream>
#include <string>

namespace hg::test {

inline size_t resident_bytes(pid_t pid = getpid()) {
  std::ifstream statm("/proc/" + std::to_string(pid) + "/statm");
  size_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace hg::test
