// The access log of hgraph-serve: one JSON line per response, written as it starts going out.
//
//   hg::server::AccessLog log("/var/log/hgraph/access.log");   // appends; "-" is stderr
//   hopt.on_response = [&](const hg::server::ResponseRecord& r) { log.write(r); };
//   // {"time":"2026-11-25T19:02:03.123456Z","method":"POST","path":"/v2/models/m/infer",
//   //  "status":200,"request_bytes":312,"response_bytes":95,"duration_us":41,"model":"m","id":"r1"}
//
// Request-derived strings are JSON-escaped (no raw control characters reach the file) and cut
// to a bounded length. Thread-safe; a failed write is dropped, never thrown.
#pragma once
#include <fstream>
#include <mutex>
#include <string>

#include "server/http_server.h"

namespace hg::server {

class AccessLog {
 public:
  explicit AccessLog(const std::string& path);  // throws hg::IoError when it cannot be opened
  void write(const ResponseRecord& r);
  // The line write() appends for r at `unix_us` (microseconds since the epoch), without "\n".
  static std::string line(const ResponseRecord& r, int64_t unix_us);

 private:
  std::mutex mu_;
  std::ofstream file_;
  std::ostream* out_;
};

}  // namespace hg::server
