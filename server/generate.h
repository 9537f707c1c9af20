// Text generation for the generate extension: POST /v2/models/{m}[/versions/{v}]/generate
// and /generate_stream (server-sent events), served by the GPT zoo model decoding through
// captured HPU graphs (one per attention-length bucket) with its KV cache.
//
//   auto gen = make_gpt_generator(version_dir, config, predictor_options);   // warms up every bucket
//   GenerateRequest r = parse_generate_request(body);   // {"text_input": "hi", "parameters": {"max_tokens": 16}}
//   std::string text = gen->generate(r, [](std::string_view piece) { return true; });
//   serve_generate(gen, "gpt", "1", std::move(http_req), reply, /*stream=*/true);   // from the router
//
// Request: {"id"?, "text_input": str, "parameters"?: {"max_tokens", "temperature", "top_k",
// "top_p", "seed", "stop": [str]}}; greedy unless temperature/top_k/top_p is given.
// Response: {"id"?, "model_name", "model_version", "text_output"}. Stream: one
// `data: {"id"?, "model_name", "model_version", "text_output": piece}` event per piece, then
// the final one with "finish_reason"; a failure after the first event is an {"error"} event.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/package.h"
#include "models/predictor.h"
#include "models/sampling.h"
#include "server/http_server.h"
#include "server/model_config.h"

namespace hg::server {

struct GenerateRequest {
  std::optional<std::string> id;
  std::string text_input;
  int64_t max_tokens = 16;
  models::SamplingOptions sampling;
  std::vector<std::string> stop;
};

// Throws hg::InvalidArgument naming the field.
GenerateRequest parse_generate_request(std::string_view body);

class TextGenerator {
 public:
  virtual ~TextGenerator() = default;
  // Thread-safe; at most config.instance_count generations run at once, others wait (bounded
  // by config.max_queue_size: beyond it HttpError(503), server/http_error.h). on_piece gets each
  // new piece of text (whole UTF-8 characters) and returns false to stop early (client gone).
  // Returns the whole generated text; throws hg::InvalidArgument for a bad request.
  virtual std::string generate(const GenerateRequest& req, const std::function<bool(std::string_view)>& on_piece) = 0;
};

// True for packages the generate endpoints serve (the GPT zoo model).
bool is_text_generation_model(const models::PackageSpec& spec);
// Loads the package in `version_dir` and captures its decode graphs before returning.
std::shared_ptr<TextGenerator> make_gpt_generator(const std::filesystem::path& version_dir, const ModelConfig& config,
                                                  const models::PredictorOptions& opt);

// Answers a generate (stream = false) or generate_stream request for a loaded generator: runs
// it off the calling thread and replies (a plain JSON response, or text/event-stream).
void serve_generate(std::shared_ptr<TextGenerator> gen, const std::string& model, const std::string& version,
                    HttpRequest&& req, Reply reply, bool stream);

}  // namespace hg::server
