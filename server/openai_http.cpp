// serve_openai: the HTTP side of the OpenAI-compatible endpoints (server/openai.h): n
// generations of one request, gathered into one JSON response or sent as server-sent events.
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <utility>

#include "models/tokenizer.h"
#include "server/compression.h"
#include "server/event_stream.h"
#include "server/http_error.h"
#include "server/openai.h"
#include "server/request_fields.h"

namespace hg::server {

namespace {

using json = nlohmann::ordered_json;  // fields in OpenAI's order

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng(models::random_seed());
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

// JSON has no -inf: OpenAI-compatible servers write a token that cannot occur as -9999.0.
double logprob_value(double lp) { return std::isfinite(lp) ? lp : -9999.0; }

std::string error_event(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return sse_data(openai_error(e).body);
  }
}

HttpResponse error_response(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    HttpResponse r = openai_error(e);
    if (r.status == 503) r.headers.emplace_back("Retry-After", "1");
    return r;
  }
}

struct Choice {
  std::string text;                           // all of it (a JSON response)
  std::vector<models::TokenLogprobs> tokens;  // logprobs not yet written
  int64_t text_offset = 0;                    // completions: byte offset of the next token
  bool role_sent = false;                     // chat stream: the first delta went out
  int64_t completion_tokens = 0;
  std::string finish_reason;
};

// One OpenAI request's n generations. Each choice's callbacks run on the generator thread
// running it; several may run at once, so everything goes through mu_.
class OpenAiGeneration : public std::enable_shared_from_this<OpenAiGeneration> {
 public:
  OpenAiGeneration(OpenAiRequest req, HttpRequest& http, Reply reply)
      : req_(std::move(req)),
        id_(random_id(req_.chat ? "chatcmpl-" : "cmpl-")),
        created_(unix_seconds()),
        cancelled_(http.cancelled),
        coding_(negotiate_encoding(http.header("Accept-Encoding"))),
        reply_(std::move(reply)),
        choices_(static_cast<size_t>(req_.n)),
        remaining_(choices_.size()) {
    if (req_.stream) events_ = std::make_shared<EventStream>(std::exchange(reply_, nullptr), error_response);
  }

  // The n choices go into the queue together or not at all (n sequences against its bound).
  void start(TextGenerator& gen) {
    auto self = shared_from_this();
    std::vector<Submission> group;
    for (size_t i = 0; i < choices_.size(); ++i) {
      GenerateRequest g;
      g.text_input = req_.prompt;
      g.max_tokens = *req_.max_tokens;
      g.sampling = req_.sampling;
      g.sampling.seed += i;  // n different samples, reproducible from one seed
      g.stop = req_.stop;
      g.cancelled = cancelled_;
      if (events_) g.ready = [events = events_] { return events->ready(); };
      if (req_.chat) g.stop.push_back("\nUser:");  // the model would go on with the user's next turn
      if (req_.logprobs) {
        g.top_logprobs = *req_.logprobs;
        g.on_token = [self, i](const models::TokenLogprobs& t) { self->token(i, t); };
      }
      group.push_back({std::move(g), [self, i](std::string_view piece) { return self->piece(i, piece); },
                       [self, i](std::exception_ptr error, GenerateResult r) { self->done(i, error, std::move(r)); }});
    }
    try {
      gen.submit_group(std::move(group));
    } catch (...) {  // 400 or 503 from submit: nothing was queued
      std::unique_lock lk(mu_);
      fail(std::current_exception());
      remaining_ = 0;
      finish(lk);
    }
  }

 private:
  void token(size_t i, const models::TokenLogprobs& t) {
    std::lock_guard lk(mu_);
    choices_[i].tokens.push_back(t);
  }

  bool piece(size_t i, std::string_view text) {
    std::lock_guard lk(mu_);
    if (aborted_ || (cancelled_ && cancelled_->load())) return false;
    Choice& c = choices_[i];
    if (!req_.stream) {
      c.text += text;
      return true;
    }
    json choice = {{"index", i}};
    if (req_.chat) {
      send_role(i);
      choice["delta"] = {{"content", text}};
    } else {
      choice["text"] = text;
    }
    choice["logprobs"] = logprobs(c);
    choice["finish_reason"] = nullptr;
    if (!send_chunk(std::move(choice))) aborted_ = true;  // the client is gone: every choice stops
    return !aborted_;
  }

  void done(size_t i, std::exception_ptr error, GenerateResult r) {
    std::unique_lock lk(mu_);
    Choice& c = choices_[i];
    if (error) {
      fail(error);
    } else {
      c.finish_reason = r.finish_reason;
      c.completion_tokens = static_cast<int64_t>(r.tokens.size());
      prompt_tokens_ = r.prompt_tokens;
      if (req_.stream && !aborted_ && c.finish_reason != "cancelled") {
        json choice = {{"index", i}};
        if (req_.chat) {
          send_role(i);
          choice["delta"] = json::object();
        } else {
          choice["text"] = "";
        }
        choice["logprobs"] = logprobs(c);
        choice["finish_reason"] = c.finish_reason;
        if (!send_chunk(std::move(choice))) aborted_ = true;
      }
    }
    if (--remaining_ == 0) finish(lk);
  }

  void fail(std::exception_ptr error) {
    if (!error_) error_ = error;
    aborted_ = true;
  }

  // Every choice has ended: the response, or the stream's last events.
  void finish(std::unique_lock<std::mutex>& lk) {
    bool gone = false;
    for (const Choice& c : choices_) gone = gone || c.finish_reason == "cancelled";
    if (req_.stream) {
      std::exception_ptr error = error_;
      if (error && events_->started()) {
        events_->send(error_event(error));
        events_->send(sse_data("[DONE]"));
        error = nullptr;
      } else if (!error && !gone) {
        if (req_.include_usage) {
          json j = chunk_head();
          j["choices"] = json::array();
          j["usage"] = usage();
          events_->send(sse_data(j.dump()));
        }
        events_->send(sse_data("[DONE]"));
      }
      auto events = events_;
      lk.unlock();
      events->end(error);
      return;
    }
    HttpResponse out;
    if (error_) {
      out = error_response(error_);
    } else if (gone) {
      out = openai_error(HttpError(499, "the client closed the connection; generation stopped"));
    } else {
      json head = chunk_head();
      head["object"] = req_.chat ? "chat.completion" : "text_completion";
      json list = json::array();
      for (size_t i = 0; i < choices_.size(); ++i) {
        Choice& c = choices_[i];
        json choice = {{"index", i}};
        if (req_.chat) choice["message"] = {{"role", "assistant"}, {"content", std::move(c.text)}};
        else choice["text"] = std::move(c.text);
        choice["logprobs"] = logprobs(c);
        choice["finish_reason"] = c.finish_reason;
        list.push_back(std::move(choice));
      }
      head["choices"] = std::move(list);
      head["usage"] = usage();
      out.body = head.dump(-1, ' ', false, json::error_handler_t::replace);
      encode_response(out, coding_);
    }
    Reply reply = std::move(reply_);
    lk.unlock();
    reply(std::move(out));
  }

  json chunk_head() const {
    return {{"id", id_},
            {"object", req_.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", req_.model}};
  }

  // A chat choice's stream opens with a delta naming the role.
  void send_role(size_t i) {
    if (choices_[i].role_sent) return;
    choices_[i].role_sent = true;
    send_chunk({{"index", i},
                {"delta", {{"role", "assistant"}, {"content", ""}}},
                {"logprobs", nullptr},
                {"finish_reason", nullptr}});
  }

  bool send_chunk(json choice) {
    json j = chunk_head();
    j["choices"] = json::array({std::move(choice)});
    return events_->send(sse_data(j.dump(-1, ' ', false, json::error_handler_t::replace)));
  }

  // The logprobs of the choice's tokens not yet written (null when not asked for); clears them.
  json logprobs(Choice& c) const {
    if (!req_.logprobs) return nullptr;
    json out;
    if (req_.chat) {
      auto entry = [](const models::TokenLogprob& t) {
        return json{{"token", token_text(t.token)},
                    {"logprob", logprob_value(t.logprob)},
                    {"bytes", json::array({t.token})}};
      };
      json content = json::array();
      for (const models::TokenLogprobs& t : c.tokens) {
        json e = entry(t.chosen);
        json top = json::array();
        for (const models::TokenLogprob& a : t.top) top.push_back(entry(a));
        e["top_logprobs"] = std::move(top);
        content.push_back(std::move(e));
      }
      out = {{"content", std::move(content)}};
    } else {
      json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array();
      json offsets = json::array();
      for (const models::TokenLogprobs& t : c.tokens) {
        tokens.push_back(token_text(t.chosen.token));
        token_logprobs.push_back(logprob_value(t.chosen.logprob));
        json top = json::object();  // the top alternatives and, as OpenAI gives, the chosen token
        for (const models::TokenLogprob& a : t.top) top[token_text(a.token)] = logprob_value(a.logprob);
        top[token_text(t.chosen.token)] = logprob_value(t.chosen.logprob);
        top_logprobs.push_back(std::move(top));
        offsets.push_back(c.text_offset++);
      }
      out = {{"tokens", std::move(tokens)},
             {"token_logprobs", std::move(token_logprobs)},
             {"top_logprobs", std::move(top_logprobs)},
             {"text_offset", std::move(offsets)}};
    }
    c.tokens.clear();
    return out;
  }

  json usage() const {
    int64_t completion = 0;
    for (const Choice& c : choices_) completion += c.completion_tokens;
    return {{"prompt_tokens", prompt_tokens_},
            {"completion_tokens", completion},
            {"total_tokens", prompt_tokens_ + completion}};
  }

  const OpenAiRequest req_;
  const std::string id_;
  const int64_t created_;
  const std::shared_ptr<const std::atomic<bool>> cancelled_;
  const ContentCoding coding_;
  std::mutex mu_;
  Reply reply_;                          // a JSON response's; a stream answers through events_
  std::shared_ptr<EventStream> events_;
  std::vector<Choice> choices_;
  size_t remaining_;
  bool aborted_ = false;
  std::exception_ptr error_;
  int64_t prompt_tokens_ = 0;
};

// The model's limits, with the request's own field names (the generator's check names the
// generate extension's).
void check_context(OpenAiRequest& r, const TextGenerator& gen) {
  const RequestFields fields(r.chat ? "chat completions request" : "completions request");
  const char* prompt_field = r.chat ? "messages" : "prompt";
  const int64_t context = gen.context_length();
  const auto p = static_cast<int64_t>(models::encode_bytes(r.prompt).size());
  if (p == 0) fields.fail(prompt_field, "is empty (the model needs at least one token)");
  if (p >= context)
    fields.fail(prompt_field, "is " + std::to_string(p) + " tokens; model '" + r.model + "' has a context of " +
                                  std::to_string(context) + " tokens, at least one of them for the completion");
  if (!r.max_tokens) r.max_tokens = context - p;
  if (*r.max_tokens > context - p)
    fields.fail("max_tokens", "is " + std::to_string(*r.max_tokens) + ": the prompt's " + std::to_string(p) +
                                  " tokens + max_tokens exceed model '" + r.model + "''s context of " +
                                  std::to_string(context) + " tokens (at most " + std::to_string(context - p) + ")");
}

}  // namespace

void serve_openai(std::shared_ptr<TextGenerator> gen, OpenAiRequest req, HttpRequest&& http, Reply reply) {
  check_context(req, *gen);
  std::make_shared<OpenAiGeneration>(std::move(req), http, std::move(reply))->start(*gen);
}

}  // namespace hg::server
