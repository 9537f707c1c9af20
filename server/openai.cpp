// The OpenAI request parsers, the chat template, token texts, error bodies and the model list.
// serve_openai is in openai_http.cpp.
#include "server/openai.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "engine/json_reader.h"
#include "server/http_error.h"
#include "server/request_fields.h"

namespace hg::server {

namespace {

using json = nlohmann::json;

// messages[i].content nests 3 deep; a request holds a prompt or some messages and a few fields.
constexpr JsonLimits kOpenAiJsonLimits{.max_depth = 8, .max_values = 4096, .max_bytes = size_t{1} << 20};

constexpr std::string_view kCompletionFields[] = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stop", "seed", "logprobs", "stream",
    "stream_options", "echo", "presence_penalty", "frequency_penalty", "user"};
constexpr std::string_view kChatFields[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop", "seed",
    "logprobs", "top_logprobs", "stream", "stream_options", "presence_penalty", "frequency_penalty", "user"};

json object_body(std::string_view body, const char* what) {
  const json j = read_json(body, kOpenAiJsonLimits, what);
  if (!j.is_object())
    throw InvalidArgument(std::string(what) + " must be a JSON object, got " + RequestFields::shown(j));
  return j;
}

// A field that is not in `known`: refused, naming the known ones. A known one that is null
// counts as absent (OpenAI's clients send null for unset fields).
template <size_t N>
bool absent(const std::string& key, const json& v, const std::string_view (&known)[N], const RequestFields& fields,
            const char* request) {
  if (std::find(std::begin(known), std::end(known), key) == std::end(known)) {
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    fields.fail(key, std::string("is not a ") + request + " field (" + list + ")");
  }
  return v.is_null();
}

// Reads the fields both endpoints share; false for a key that is not one of them.
bool common_field(const std::string& key, const json& v, const RequestFields& fields, OpenAiRequest& r,
                  bool& seeded, bool& has_model) {
  if (key == "model") {
    r.model = fields.string(v, key);
    has_model = true;
  } else if (key == "temperature") {
    const double t = fields.number(v, key);
    if (t < 0 || t > 2) fields.fail(key, "must be in [0, 2] (0: greedy), got " + RequestFields::shown(v));
    r.sampling.greedy = t == 0;
    if (t > 0) r.sampling.temperature = t;
  } else if (key == "top_p") {
    r.sampling.top_p = fields.number(v, key);
    if (!(r.sampling.top_p > 0 && r.sampling.top_p <= 1))
      fields.fail(key, "must be in (0, 1], got " + RequestFields::shown(v));
  } else if (key == "seed") {
    if (!v.is_number_integer()) fields.fail(key, "must be an integer, got " + RequestFields::shown(v));
    r.sampling.seed = v.get<uint64_t>();  // a negative seed is a seed too
    seeded = true;
  } else if (key == "stop") {
    r.stop = fields.strings(v, key, kMaxStops, kMaxStopBytes);
  } else if (key == "n") {
    r.n = fields.integer(v, key, 1);
    if (r.n > kMaxChoices) fields.fail(key, "is " + std::to_string(r.n) + ", at most " + std::to_string(kMaxChoices));
  } else if (key == "stream") {
    r.stream = fields.boolean(v, key);
  } else if (key == "stream_options") {
    if (!v.is_object()) fields.fail(key, "must be an object, got " + RequestFields::shown(v));
    for (const auto& [k, x] : v.items()) {
      if (k != "include_usage") fields.fail(key + "." + k, "is not a stream option (include_usage)");
      r.include_usage = fields.boolean(x, key + "." + k);
    }
  } else if (key == "presence_penalty" || key == "frequency_penalty") {
    if (fields.number(v, key) != 0) fields.fail(key, "is not supported (only 0)");
  } else if (key == "user") {
    fields.string(v, key);  // an end-user id for abuse monitoring: nothing to do with it here
  } else {
    return false;
  }
  return true;
}

// What every request must have, once all fields are read.
void finish(OpenAiRequest& r, const RequestFields& fields, bool seeded, bool has_model, const json& j) {
  if (!has_model) fields.fail("model", "is missing");
  if (j.contains("stream_options") && !j["stream_options"].is_null() && !r.stream)
    fields.fail("stream_options", "is only allowed with stream: true");
  if (!r.sampling.greedy && !seeded)
    r.sampling.seed = models::random_seed();
}

}  // namespace

OpenAiRequest parse_completion_request(std::string_view body) {
  const RequestFields fields("completions request");
  const json j = object_body(body, "the completions request body");
  OpenAiRequest r;
  r.sampling.greedy = false;  // OpenAI samples at temperature 1 unless told otherwise
  bool seeded = false, has_model = false, has_prompt = false;
  for (const auto& [key, v] : j.items()) {
    if (absent(key, v, kCompletionFields, fields, "completions request") ||
        common_field(key, v, fields, r, seeded, has_model))
      continue;
    if (key == "prompt") {
      const json* p = &v;
      if (v.is_array() && v.size() == 1 && v[0].is_string()) p = &v[0];
      if (!p->is_string())
        fields.fail(key, "must be a string (or an array of one string); token ids and several prompts are not "
                         "supported, got " + RequestFields::shown(v));
      r.prompt = p->get<std::string>();
      has_prompt = true;
    } else if (key == "max_tokens") {
      r.max_tokens = fields.integer(v, key, 1);
    } else if (key == "logprobs") {
      r.logprobs = fields.integer(v, key, 0);
      if (*r.logprobs > kMaxLogprobs)
        fields.fail(key, "is " + std::to_string(*r.logprobs) + ", at most " + std::to_string(kMaxLogprobs));
    } else if (key == "echo" && fields.boolean(v, key)) {
      fields.fail(key, "true is not supported");
    }
  }
  if (!has_prompt) fields.fail("prompt", "is missing");
  if (!r.max_tokens) r.max_tokens = 16;
  finish(r, fields, seeded, has_model, j);
  return r;
}

OpenAiRequest parse_chat_request(std::string_view body) {
  const RequestFields fields("chat completions request");
  const json j = object_body(body, "the chat completions request body");
  OpenAiRequest r;
  r.chat = true;
  r.sampling.greedy = false;
  bool seeded = false, has_model = false, has_messages = false, logprobs = false;
  std::optional<int64_t> top_logprobs;
  std::vector<ChatMessage> messages;
  for (const auto& [key, v] : j.items()) {
    if (absent(key, v, kChatFields, fields, "chat completions request") ||
        common_field(key, v, fields, r, seeded, has_model))
      continue;
    if (key == "messages") {
      if (!v.is_array() || v.empty())
        fields.fail(key, "must be a non-empty array of messages, got " + RequestFields::shown(v));
      if (v.size() > kMaxChatMessages)
        fields.fail(key, "has " + std::to_string(v.size()) + " messages, at most " + std::to_string(kMaxChatMessages));
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string at = "messages[" + std::to_string(i) + "]";
        if (!v[i].is_object()) fields.fail(at, "must be an object {role, content}, got " + RequestFields::shown(v[i]));
        ChatMessage m;
        bool has_role = false, has_content = false;
        for (const auto& [k, x] : v[i].items()) {
          if (k == "role") {
            m.role = fields.string(x, at + ".role");
            if (m.role != "system" && m.role != "user" && m.role != "assistant")
              fields.fail(at + ".role", "must be system, user or assistant, got " + RequestFields::shown(x));
            has_role = true;
          } else if (k == "content") {
            m.content = fields.string(x, at + ".content");
            has_content = true;
          } else {
            fields.fail(at + "." + k, "is not a message field (role, content)");
          }
        }
        if (!has_role) fields.fail(at + ".role", "is missing");
        if (!has_content) fields.fail(at + ".content", "is missing");
        messages.push_back(std::move(m));
      }
      has_messages = true;
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      r.max_tokens = fields.integer(v, key, 1);
    } else if (key == "logprobs") {
      logprobs = fields.boolean(v, key);
    } else if (key == "top_logprobs") {
      top_logprobs = fields.integer(v, key, 0);
      if (*top_logprobs > kMaxLogprobs)
        fields.fail(key, "is " + std::to_string(*top_logprobs) + ", at most " + std::to_string(kMaxLogprobs));
    }
  }
  if (!has_messages) fields.fail("messages", "is missing");
  if (top_logprobs && !logprobs) fields.fail("top_logprobs", "needs logprobs: true");
  if (logprobs) r.logprobs = top_logprobs.value_or(0);
  r.prompt = chat_prompt(messages);
  finish(r, fields, seeded, has_model, j);
  return r;
}

std::string chat_prompt(const std::vector<ChatMessage>& messages) {
  std::string p;
  for (const ChatMessage& m : messages) {
    p += m.role == "system" ? "System: " : m.role == "user" ? "User: " : "Assistant: ";
    p += m.content;
    p += '\n';
  }
  return p + "Assistant:";
}

std::string token_text(int64_t token) {
  if (token >= 0 && token < 0x80) return std::string(1, static_cast<char>(token));
  char buf[16];
  std::snprintf(buf, sizeof buf, "bytes:\\x%02x", static_cast<unsigned>(token & 0xFF));
  return buf;
}

HttpResponse openai_error(const std::exception& e) {
  const int status = http_status(e);
  json err = {{"message", e.what()},
              {"type", status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error"},
              {"param", nullptr},
              {"code", nullptr}};
  if (auto* f = dynamic_cast<const FieldError*>(&e)) err["param"] = f->field();
  if (status == 404) err["code"] = "model_not_found";
  HttpResponse r;
  r.status = status;
  r.body = json{{"error", std::move(err)}}.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json openai_model_list(const std::vector<OpenAiModel>& models) {
  const int64_t now = unix_seconds();
  json data = json::array();
  for (const OpenAiModel& m : models)
    data.push_back({{"id", m.id},
                    {"object", "model"},
                    {"created", now},
                    {"owned_by", "hgraph"},
                    {"max_model_len", m.context_length}});
  return {{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace hg::server
