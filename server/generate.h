// Text generation for the generate extension: POST /v2/models/{m}[/versions/{v}]/generate
// and /generate_stream (server-sent events), served by the GPT zoo model decoding through
// captured HPU graphs (one per attention-length bucket) with its KV cache.
//
//   auto gen = make_gpt_generator(version_dir, config, predictor_options);   // warms up every bucket
//   GenerateRequest r = parse_generate_request(body);   // {"text_input": "hi", "parameters": {"max_tokens": 16}}
//   r.on_token = [](const models::TokenLogprobs& t) {};  // optional: each token's logprobs (top_logprobs of them)
//   GenerateResult res = gen->generate(r, [](std::string_view piece) { return true; });   // blocks
//   serve_generate(gen, "gpt", "1", std::move(http_req), reply, /*stream=*/true);   // from the router
//
// Request: {"id"?: str, "text_input": str, "parameters"?: {"max_tokens": int >= 1 (16),
// "temperature": number >= 0, "top_k": int >= 0, "top_p": number in (0, 1], "seed": int >= 0,
// "stop": str or [str], "timeout": microseconds >= 0, "stream": bool (ignored: the endpoint
// decides)}}. A request still queued when its timeout (the model's default_timeout_us, which
// a request's timeout may only lower) expires is never run: 504. Greedy unless
// temperature > 0, top_k or top_p is given (temperature 0 is greedy); sampling without a seed
// draws a random one. Generation ends after max_tokens tokens ("length") or when the text
// contains a stop string ("stop"; the stop string is not part of the output).
// Response: {"id"?, "model_name", "model_version", "text_output", "finish_reason"}. Stream
// (text/event-stream): `data: {"id"?, "model_name", "model_version", "text_output": piece}\n\n`
// per piece of whole UTF-8 characters, then a last one with "text_output": "" and
// "finish_reason"; the pieces concatenate to /generate's text_output. Errors before the first
// event answer with their status ({"error"} JSON: 400 naming the field, 503 queue full with
// Retry-After, 504 timed out in the queue, 500); a failure after it is a last
// `data: {"error": ...}` event.
#pragma once
#include <cstdint>
#include <exception>
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

// Gets each generated token with its logprob and top alternatives (models::token_logprobs), before
// the piece of text it completes (if any) goes to the PieceCallback.
using TokenCallback = std::function<void(const models::TokenLogprobs&)>;

struct GenerateRequest {
  std::optional<std::string> id;
  std::string text_input;
  int64_t max_tokens = 16;
  models::SamplingOptions sampling;
  std::vector<std::string> stop;
  uint64_t timeout_us = 0;  // parameters.timeout; 0: none
  // Not from the generate request's JSON: set by callers that report per-token logprobs (the
  // OpenAI endpoints). Every generated token is reported, a stop string's included.
  TokenCallback on_token;
  int64_t top_logprobs = 0;  // alternatives given to on_token per token
};

// Throws hg::InvalidArgument naming the field (JSON syntax, unknown fields, types, ranges).
// Limits that depend on the model (prompt + max_tokens <= max_len) are the generator's.
GenerateRequest parse_generate_request(std::string_view body);

struct GenerateResult {
  std::string text;               // whole UTF-8 characters (ill-formed bytes replaced by U+FFFD)
  std::string finish_reason;      // "length", "stop", or "cancelled" (on_piece returned false)
  std::vector<int64_t> tokens;    // every token generated (a stop string's too)
  int64_t prompt_tokens = 0;
};

// Gets each new piece of text (whole UTF-8 characters, never empty); returns false to stop
// generating (the client is gone).
using PieceCallback = std::function<bool(std::string_view)>;
// Called once when a generation ends: error set (then result is empty) or the result.
using GenerateDone = std::function<void(std::exception_ptr error, GenerateResult result)>;

class TextGenerator {
 public:
  virtual ~TextGenerator() = default;
  // Thread-safe. Checks the request against the model (hg::InvalidArgument naming the field)
  // and queues it; at most instance_count generations run at once, on the generator's own
  // threads, and up to max_queue_size wait (0: unbounded); beyond that HttpError(503). Both
  // errors are thrown here, before anything is queued. on_piece and done run on a generator thread.
  virtual void submit(GenerateRequest req, PieceCallback on_piece, GenerateDone done) = 0;
  // Requests waiting for a free instance (for the pending-requests gauge).
  virtual size_t queue_depth() const = 0;
  // The most tokens a generation holds: its prompt's plus max_tokens (the model's max_len).
  virtual int64_t context_length() const = 0;
  // submit() and wait: the result, or the generation's error rethrown.
  GenerateResult generate(const GenerateRequest& req, const PieceCallback& on_piece);
};

// True for packages the generate endpoints serve (the GPT zoo model: graph {"type": "zoo", "model": "gpt"}).
bool is_text_generation_model(const models::PackageSpec& spec);
// Loads the package in `version_dir` onto opt.device and builds config.instance_count decoders
// (batch 1, each with its own KV cache), capturing every attention bucket of each before
// returning (always, whatever config.warmup says: serving never captures). Throws
// InvalidArgument when the package is not a GPT, or the loader's errors.
std::shared_ptr<TextGenerator> make_gpt_generator(const std::filesystem::path& version_dir, const ModelConfig& config,
                                                  const models::PredictorOptions& opt);

// Answers a generate (stream = false) or generate_stream request for a loaded generator:
// parses the body, submits it and returns at once; the reply is sent from a generator thread
// (a plain JSON response, or text/event-stream).
void serve_generate(std::shared_ptr<TextGenerator> gen, const std::string& model, const std::string& version,
                    HttpRequest&& req, Reply reply, bool stream);

}  // namespace hg::server
