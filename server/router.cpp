#include "server/router.h"

#include <vector>

namespace hg::server {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> seg;
  size_t pos = 1;
  while (true) {
    size_t next = path.find('/', pos);
    seg.push_back(percent_decode(path.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos)));
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return seg;
}

// /v2/models/{m}[/versions/{v}]/<action>, seg[2] is the model.
Route model_route(const std::vector<std::string>& seg) {
  Route r;
  r.model = seg[2];
  size_t i = 3;
  if (seg.size() >= 5 && seg[3] == "versions") {
    r.version = seg[4];
    i = 5;
  }
  const size_t rest = seg.size() - i;
  if (rest == 0) {
    r.endpoint = Endpoint::ModelMetadata;
  } else if (rest == 1) {
    const std::string& a = seg[i];
    if (a == "ready") r.endpoint = Endpoint::ModelReady;
    else if (a == "infer") r.endpoint = Endpoint::Infer;
    else if (a == "generate") r.endpoint = Endpoint::Generate;
    else if (a == "generate_stream") r.endpoint = Endpoint::GenerateStream;
    else if (a == "config") r.endpoint = Endpoint::ModelConfig;
    else if (a == "stats") r.endpoint = Endpoint::Stats;
  }
  return r;
}

}  // namespace

std::string_view target_path(std::string_view target) {
  size_t q = target.find_first_of("?#");
  return q == std::string_view::npos ? target : target.substr(0, q);
}

Route parse_route(std::string_view target) {
  std::string_view path = target_path(target);
  if (path.size() > 1 && path.back() == '/') path.remove_suffix(1);  // "/v2/" is "/v2"
  Route r;
  if (path.empty() || path[0] != '/') return r;
  if (path == "/metrics") {
    r.endpoint = Endpoint::Metrics;
    return r;
  }
  const std::vector<std::string> seg = split_path(path);
  if (seg[0] == "v1") {
    if (seg.size() == 2 && seg[1] == "completions") r.endpoint = Endpoint::Completions;
    if (seg.size() == 3 && seg[1] == "chat" && seg[2] == "completions") r.endpoint = Endpoint::ChatCompletions;
    if (seg.size() == 2 && seg[1] == "models") r.endpoint = Endpoint::OpenAiModels;
    return r;
  }
  if (seg[0] != "v2") return r;
  if (seg.size() == 1) {
    r.endpoint = Endpoint::ServerMetadata;
  } else if (seg.size() == 3 && seg[1] == "health") {
    if (seg[2] == "live") r.endpoint = Endpoint::Live;
    if (seg[2] == "ready") r.endpoint = Endpoint::Ready;
  } else if (seg.size() == 3 && seg[1] == "models" && seg[2] == "stats") {
    r.endpoint = Endpoint::Stats;
  } else if (seg.size() >= 3 && seg[1] == "models" && !seg[2].empty()) {
    r = model_route(seg);
  } else if (seg.size() == 3 && seg[1] == "repository" && seg[2] == "index") {
    r.endpoint = Endpoint::RepositoryIndex;
  } else if (seg.size() == 5 && seg[1] == "repository" && seg[2] == "models" && !seg[3].empty()) {
    r.model = seg[3];
    if (seg[4] == "load") r.endpoint = Endpoint::RepositoryLoad;
    if (seg[4] == "unload") r.endpoint = Endpoint::RepositoryUnload;
  }
  if (r.endpoint == Endpoint::Unknown) r.model.clear(), r.version.reset();
  return r;
}

const char* allowed_methods(Endpoint e) {
  switch (e) {
    case Endpoint::Infer:
    case Endpoint::Generate:
    case Endpoint::GenerateStream:
    case Endpoint::Completions:
    case Endpoint::ChatCompletions:
    case Endpoint::RepositoryIndex:
    case Endpoint::RepositoryLoad:
    case Endpoint::RepositoryUnload: return "POST";
    case Endpoint::Unknown: return "";
    default: return "GET";
  }
}

bool is_management(Endpoint e) { return e == Endpoint::RepositoryLoad || e == Endpoint::RepositoryUnload; }

bool is_openai(Endpoint e) {
  return e == Endpoint::Completions || e == Endpoint::ChatCompletions || e == Endpoint::OpenAiModels;
}

}  // namespace hg::server
