// Text generation for the generate extension: POST /v2/models/{m}[/versions/{v}]/generate
// and /generate_stream (server-sent events), served by the GPT zoo model: concurrent requests
// share decode steps (continuous batching over a paged KV cache, captured graphs per bucket).
//
//   auto gen = make_gpt_generator(predictor->module(), config);   // warms up every bucket
//   GenerateRequest r = parse_generate_request(body);   // {"text_input": "hi", "parameters": {"max_tokens": 16}}
//   r.on_token = [](const models::TokenLogprobs& t) {};  // optional: each token's logprobs (top_logprobs of them)
//   GenerateResult res = gen->generate(r, [](std::string_view piece) { return true; });   // blocks
//   serve_generate(gen, "gpt", "1", std::move(http_req), reply, /*stream=*/true);   // from the router
//
// Request: {"id"?: str of at most 256 bytes, "text_input": str, "parameters"?: {"max_tokens": int >= 1 (16),
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
#include <atomic>
#include <chrono>
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
#include "server/memory_budget.h"
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
  // Set when the client left (HttpRequest::cancelled): a waiting request is dropped before it is
  // admitted, a running one between steps (finish_reason "cancelled", no piece needed to notice).
  std::shared_ptr<const std::atomic<bool>> cancelled;
  bool is_cancelled() const { return cancelled && cancelled->load(std::memory_order_relaxed); }
  // Set by streaming callers (EventStream::ready): false while the client has not read what was
  // sent; the sequence then sits out steps, keeping its place and blocks, until it reads (the HTTP
  // layer cuts a connection whose answer is not written within its request timeout).
  std::function<bool()> ready;
  bool is_held_back() const { return ready && !ready(); }
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

// What a generator reports (metrics at scrape time): step and token counters since it started
// and its state now.
struct GenerationStats {
  uint64_t steps = 0;
  uint64_t step_rows = 0, step_tokens = 0;  // sequences and tokens summed over the steps (means: / steps)
  uint64_t tokens = 0;                         // generated
  uint64_t preemptions = 0;
  uint64_t finished = 0, cancelled = 0, failed = 0;  // failed: errors, timeouts (504) and shutdown (503) included
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_free = 0;
  // The step graphs captured at warm-up, how many came from the graph cache, their arenas and constants.
  size_t captured_graphs = 0, graphs_from_cache = 0, graph_bytes = 0;
  int64_t max_batch = 0, max_step_tokens = 0;   // the largest step (what the graph memory budget left)
};

// "33 step graphs (33 from the graph cache), 4.7 MB, steps of up to 128 tokens and 32 sequences":
// what a generator captured at warm-up (the server's READY line).
std::string step_graphs_summary(const GenerationStats& s);

// Metrics hooks of a generator (must not throw): each step (its sequences and compute time), and
// each generated token (time to first token from submit, or the time since the request's last one).
struct GenerationHooks {
  std::function<void(int64_t rows, std::chrono::steady_clock::duration compute)> on_step;
  std::function<void(bool first, std::chrono::steady_clock::duration latency)> on_token;
};

// Gets each new piece of text (whole UTF-8 characters, never empty); returns false to stop
// generating (the client is gone).
using PieceCallback = std::function<bool(std::string_view)>;
// Called once when a generation ends: error set (then result is empty) or the result.
using GenerateDone = std::function<void(std::exception_ptr error, GenerateResult result)>;

// One sequence to generate: the request and its callbacks.
struct Submission {
  GenerateRequest req;
  PieceCallback on_piece;
  GenerateDone done;
};

class TextGenerator {
 public:
  virtual ~TextGenerator() = default;
  // Thread-safe. Checks every request against the model (hg::InvalidArgument naming the field)
  // and queues them all or none (OpenAI's n choices are n sequences): the waiting sequences are
  // bounded (max_queue_size; 0: 8 per sequence of max_batch), and a group that does not fit is
  // refused whole with HttpError(503). Both errors are thrown here, before anything is queued.
  // on_piece, on_token and done run on the generator's thread.
  virtual void submit_group(std::vector<Submission> group) = 0;
  // A group of one.
  void submit(GenerateRequest req, PieceCallback on_piece, GenerateDone done);
  // Requests waiting to be admitted (for the pending-requests gauge).
  virtual size_t queue_depth() const = 0;
  virtual GenerationStats stats() const = 0;
  // The most tokens a generation holds: its prompt's plus max_tokens (the model's max_len).
  virtual int64_t context_length() const = 0;
  // submit() and wait: the result, or the generation's error rethrown.
  GenerateResult generate(const GenerateRequest& req, const PieceCallback& on_piece);
};

// True for packages the generate endpoints serve (the GPT zoo model: graph {"type": "zoo", "model": "gpt"}).
bool is_text_generation_model(const models::PackageSpec& spec);
// Starts the scheduler of a loaded GPT (the module /infer serves, models::Predictor::module():
// one load, one set of weights) on its device: continuous batching of up to
// config.generation.max_batch sequences over a paged KV cache (server/generate_scheduler.h),
// every (batch, length) bucket captured before returning (always, whatever config.warmup says:
// serving never captures). Throws InvalidArgument when the module is not a GPT. memory: the
// load's share of the server's model memory (SchedulerOptions::memory); null: none.
std::shared_ptr<TextGenerator> make_gpt_generator(std::shared_ptr<models::Module> module, const ModelConfig& config,
                                                  GenerationHooks hooks = {},
                                                  std::shared_ptr<MemoryBudget::Lease> memory = nullptr);

// Answers a generate (stream = false) or generate_stream request for a loaded generator:
// parses the body, submits it and returns at once; the reply is sent from a generator thread
// (a plain JSON response, or text/event-stream).
void serve_generate(std::shared_ptr<TextGenerator> gen, const std::string& model, const std::string& version,
                    HttpRequest&& req, Reply reply, bool stream);

}  // namespace hg::server
