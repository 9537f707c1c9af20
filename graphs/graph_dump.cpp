#include "graphs/graph_dump.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "engine/error.h"
#include "graphs/executable.h"

namespace hg::graphs {

namespace {

struct DumpTarget {
  std::mutex mu;
  std::string path;
  bool from_env = true;  // until set_graph_dump is called, HG_DUMP_GRAPH decides
};

DumpTarget& target() {
  static DumpTarget t;
  return t;
}

std::string current_path(DumpTarget& t) {
  if (t.from_env) {
    const char* v = std::getenv("HG_DUMP_GRAPH");
    return v ? v : "";
  }
  return t.path;
}

}  // namespace

void set_graph_dump(const std::string& path) {
  DumpTarget& t = target();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!path.empty() && path != "-") {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) throw IoError("graph dump file '" + path + "': cannot open for writing: " + std::strerror(errno));
    std::fclose(f);
  }
  t.path = path;
  t.from_env = false;
}

std::string graph_dump_path() {
  DumpTarget& t = target();
  std::lock_guard<std::mutex> lock(t.mu);
  return current_path(t);
}

void append_graph_dump(const Executable& exe) {
  DumpTarget& t = target();
  std::string path;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    path = current_path(t);
  }
  if (path.empty()) return;
  const std::string text = "=== graph " + hex64(exe.signature_hash()) + ": " +
                           std::to_string(exe.graph().nodes.size()) + " nodes, " + std::to_string(exe.num_steps()) +
                           " steps ===\n" + exe.dump() + "\n";
  std::lock_guard<std::mutex> lock(t.mu);
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
    return;
  }
  std::FILE* f = std::fopen(path.c_str(), "a");
  const bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (f && std::fclose(f) != 0 && ok) {
    std::fprintf(stderr, "hgraph: graph dump file '%s': write failed: %s\n", path.c_str(), std::strerror(errno));
    return;
  }
  if (!ok) std::fprintf(stderr, "hgraph: graph dump file '%s': cannot append: %s\n", path.c_str(), std::strerror(err));
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace hg::graphs
