// OpenAI-compatible text generation over a TextGenerator: POST /v1/completions,
// POST /v1/chat/completions (JSON or server-sent events) and GET /v1/models.
//
//   OpenAiRequest r = parse_completion_request(R"({"model": "gpt", "prompt": "Once", "max_tokens": 8})");
//   OpenAiRequest c = parse_chat_request(R"({"model": "gpt", "messages": [{"role": "user", "content": "Hi"}]})");
//   serve_openai(generator_of(r.model), std::move(r), std::move(http_req), reply);   // from the router
//   reply(openai_error(e));   // {"error": {"message", "type", "param", "code"}} with e's status
//
// Requests: the fields OpenAI documents that the byte-level GPT can honour; any other field is
// refused (400 naming it), and so are values it cannot honour (echo: true, non-zero penalties,
// token-id prompts). `null` is the same as an absent field. Sampling follows OpenAI: temperature
// 1 by default, 0 is greedy; top_p in (0, 1]; n independent generations (at most kMaxChoices),
// choice i sampled with seed + i (a random seed when none is given); stop: at most 4 strings.
// Chat: messages [{role: system|user|assistant, content: string}] become one prompt through
// chat_prompt(), and generation also stops at "\nUser:"; max_tokens (or max_completion_tokens)
// defaults to what the model's context leaves.
// Logprobs: the model's own (log_softmax of its logits). The tokens are bytes: a token's text is
// its byte when ASCII, otherwise "bytes:\xNN" (the byte in hex; chat also gives "bytes": [n]).
// Every generated token is reported, a stop string's too (as usage.completion_tokens counts
// them); a logprob of -inf is written -9999.0. Completions' text_offset counts bytes.
// Streaming (stream: true): `data: {chunk}\n\n` per piece of whole UTF-8 characters, the tokens'
// logprobs on the chunk that completes them; a chunk with finish_reason ends each choice; with
// stream_options.include_usage a last chunk with "choices": [] and the usage; then
// `data: [DONE]\n\n`. An error before the first chunk answers with its status; after it, a
// `data: {"error": {...}}` event, then [DONE]. A client that leaves stops every choice at its
// next token.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/sampling.h"
#include "server/generate.h"
#include "server/http_server.h"

namespace hg::server {

inline constexpr int64_t kMaxChoices = 8;        // n
inline constexpr int64_t kMaxLogprobs = 5;       // logprobs (completions), top_logprobs (chat)
inline constexpr size_t kMaxStops = 4;           // stop strings per request
inline constexpr size_t kMaxStopBytes = 256;     // bytes per stop string
inline constexpr size_t kMaxChatMessages = 256;  // messages per chat request

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct OpenAiRequest {
  bool chat = false;
  std::string model;
  std::string prompt;                 // chat: chat_prompt(messages)
  std::optional<int64_t> max_tokens;  // unset: 16 for completions, the rest of the context for chat
  models::SamplingOptions sampling;   // seed: choice 0's
  std::vector<std::string> stop;
  int64_t n = 1;
  std::optional<int64_t> logprobs;    // alternatives per token; unset: no logprobs
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
};

// Throw hg::InvalidArgument naming the field (its `param` in the error body).
OpenAiRequest parse_completion_request(std::string_view body);
OpenAiRequest parse_chat_request(std::string_view body);

// "System: ...\nUser: ...\nAssistant: ...\n" one line per message (role capitalised, content
// as given), then "Assistant:" for the reply to follow.
std::string chat_prompt(const std::vector<ChatMessage>& messages);

// A byte token's text: the character when ASCII, "bytes:\xNN" otherwise.
std::string token_text(int64_t token);

// The OpenAI error body for any error, with the status http_status() gives it ("param" is the
// field a request error names; "code" is "model_not_found" for 404).
HttpResponse openai_error(const std::exception& e);

// Seconds since the Unix epoch: the "created" of responses and of listed models.
int64_t unix_seconds();

// One served text generation model for GET /v1/models.
struct OpenAiModel {
  std::string id;
  int64_t context_length = 0;
};
// {"object": "list", "data": [{"id", "object": "model", "created", "owned_by": "hgraph", "max_model_len"}]}
nlohmann::json openai_model_list(const std::vector<OpenAiModel>& models);

// Checks the request against the model (400: prompt or max_tokens beyond its context), submits
// its n generations and returns; the reply is sent from a generator thread.
void serve_openai(std::shared_ptr<TextGenerator> gen, OpenAiRequest req, HttpRequest&& http, Reply reply);

}  // namespace hg::server
