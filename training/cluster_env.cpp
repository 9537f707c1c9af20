#include "training/cluster_env.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "engine/error.h"

namespace hg::training {
namespace {

// A decimal integer in [lo, hi], surrounding blanks allowed (as Python's int() does).
int parse_int(const char* name, const char* value, int lo, int hi, const std::string& expected) {
  std::string_view s(value);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
    throw InvalidArgument(std::string(name) + "='" + value + "' is not " + expected);
  return static_cast<int>(v);
}

}  // namespace

ClusterEnv ClusterEnv::from_environment() {
  ClusterEnv e;
  if (const char* a = std::getenv("MASTER_ADDR")) {
    if (std::string_view(a).find_first_not_of(" \t") == std::string_view::npos)
      throw InvalidArgument("MASTER_ADDR is set but empty (unset it for 127.0.0.1, or give node 0's address)");
    e.master_addr = a;
  }
  if (const char* p = std::getenv("MASTER_PORT")) e.master_port = parse_int("MASTER_PORT", p, 1, 65535, "a TCP port (1-65535)");
  const char* node = std::getenv("NODE_RANK");
  const char* node_var = "NODE_RANK";
  if (!node) {
    node = std::getenv("GROUP_RANK");
    node_var = "GROUP_RANK";
  }
  if (node) e.node_rank = parse_int(node_var, node, 0, 1 << 20, "a node rank (an integer >= 0)");
  if (const char* l = std::getenv("LOCAL_RANK")) {
    e.local_rank = parse_int("LOCAL_RANK", l, 0, 1 << 20, "a local rank (an integer >= 0)");
    e.creates_processes_externally = true;
  }
  return e;
}

}  // namespace hg::training
