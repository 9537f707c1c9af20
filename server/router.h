// The URL space of the KServe v2 REST protocol and its extensions, and of the OpenAI-compatible
// endpoints: a request target to an
// endpoint with its model and version, and the method each endpoint allows.
//
//   Route r = parse_route("/v2/models/bert/versions/2/infer?x=1");
//   r.endpoint == Endpoint::Infer;  r.model == "bert";  *r.version == "2";
//   allowed_methods(Endpoint::Stats);   // "GET"
//
// Path segments are percent-decoded; the query and fragment are ignored.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace hg::server {

enum class Endpoint {
  ServerMetadata,   // GET  /v2
  Live,             // GET  /v2/health/live
  Ready,            // GET  /v2/health/ready
  ModelMetadata,    // GET  /v2/models/{m}[/versions/{v}]
  ModelReady,       // GET  /v2/models/{m}[/versions/{v}]/ready
  Infer,            // POST /v2/models/{m}[/versions/{v}]/infer
  Generate,         // POST /v2/models/{m}[/versions/{v}]/generate
  GenerateStream,   // POST /v2/models/{m}[/versions/{v}]/generate_stream
  ModelConfig,      // GET  /v2/models/{m}[/versions/{v}]/config
  Stats,            // GET  /v2/models[/{m}[/versions/{v}]]/stats
  RepositoryIndex,  // POST /v2/repository/index
  RepositoryLoad,   // POST /v2/repository/models/{m}/load
  RepositoryUnload, // POST /v2/repository/models/{m}/unload
  Metrics,          // GET  /metrics
  Completions,      // POST /v1/completions       (OpenAI; the model is named in the body)
  ChatCompletions,  // POST /v1/chat/completions  (OpenAI)
  OpenAiModels,     // GET  /v1/models            (OpenAI: the text generation models)
  Unknown,
};

struct Route {
  Endpoint endpoint = Endpoint::Unknown;
  std::string model;                   // empty for server-level endpoints (and all-model stats)
  std::optional<std::string> version;  // as written in the path
};

Route parse_route(std::string_view target);
// "GET" or "POST" (the one method an endpoint answers; "" for Unknown).
const char* allowed_methods(Endpoint e);
// The path of a target without its query or fragment.
std::string_view target_path(std::string_view target);
// True for endpoints that change the server (repository load and unload).
bool is_management(Endpoint e);
// True for the OpenAI-compatible endpoints (/v1/...), whose errors take OpenAI's shape.
bool is_openai(Endpoint e);

}  // namespace hg::server
