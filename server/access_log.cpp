#include "server/access_log.h"

#include <chrono>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "server/router.h"

namespace hg::server {

namespace {
constexpr size_t kMaxField = 512;  // bytes of a request-derived string kept in a line

std::string utc_time(int64_t unix_us) {
  const std::time_t secs = static_cast<std::time_t>(unix_us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lldZ", static_cast<long long>(unix_us % 1000000));
  return buf;
}
}  // namespace

AccessLog::AccessLog(const std::string& path) : out_(&std::cerr) {
  if (path == "-") return;
  file_.open(path, std::ios::app);
  if (!file_) throw IoError("--access-log: cannot open '" + path + "' for appending");
  out_ = &file_;
}

std::string AccessLog::line(const ResponseRecord& r, int64_t unix_us) {
  using json = nlohmann::ordered_json;
  const std::string_view path = target_path(r.target);
  json j = {{"time", utc_time(unix_us)},
            {"method", std::string(r.method.substr(0, 16))},
            {"path", std::string(path.substr(0, kMaxField))},
            {"status", r.status},
            {"request_bytes", r.request_bytes},
            {"response_bytes", r.response_bytes},
            {"duration_us", r.duration.count()}};
  const Route route = parse_route(r.target);
  if (!route.model.empty()) j["model"] = route.model.substr(0, kMaxField);
  if (!r.request_id.empty()) j["id"] = std::string(r.request_id.substr(0, kMaxField));
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void AccessLog::write(const ResponseRecord& r) {
  try {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    std::string s = line(r, std::chrono::duration_cast<std::chrono::microseconds>(now).count());
    s += '\n';
    std::lock_guard lk(mu_);
    out_->write(s.data(), static_cast<std::streamsize>(s.size()));
    out_->flush();
  } catch (const std::exception&) {  // a log line is not worth a failed response
  }
}

}  // namespace hg::server
