// serve_generate: the HTTP side of the generate extension (server/generate.h): one JSON
// response, or server-sent events whose status the first event fixes.
#include <mutex>
#include <nlohmann/json.hpp>

#include "server/compression.h"
#include "server/generate.h"
#include "server/http_error.h"

namespace hg::server {

namespace {

using json = nlohmann::ordered_json;  // fields in the documented order

HttpResponse error_response(const std::exception& e) {
  HttpResponse r = json_error(http_status(e), e.what());
  if (r.status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpResponse error_response(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return error_response(e);
  } catch (...) {
    return json_error(500, "generate: unknown error");
  }
}

std::string error_message(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "generate: unknown error";
  }
}

std::string sse_event(const json& j) { return "data: " + j.dump() + "\n\n"; }

// One generate_stream response. The worker thread sends events; the first one starts the
// response (status 200, the event as its first chunk), later ones wait in `pending` until the
// HTTP layer hands over the sink, then go to it in order.
class EventStream : public std::enable_shared_from_this<EventStream> {
 public:
  explicit EventStream(Reply reply) : reply_(std::move(reply)) {}

  // False once the client is gone.
  bool send(std::string event) {
    std::unique_lock lk(mu_);
    if (gone_) return false;
    if (!started_) {
      started_ = true;
      Reply reply = std::move(reply_);  // the response holds us (its stream callback): no cycle back
      lk.unlock();
      HttpResponse r;
      r.content_type = "text/event-stream; charset=utf-8";
      r.headers.emplace_back("Cache-Control", "no-cache");
      r.body = std::move(event);
      r.stream = [self = shared_from_this()](std::shared_ptr<ResponseStream> sink) { self->attach(std::move(sink)); };
      reply(std::move(r));
      return true;
    }
    if (!sink_) {
      pending_.push_back(std::move(event));
      return true;
    }
    if (!sink_->write(std::move(event))) gone_ = true;
    return !gone_;
  }

  // After the last event. An error before any event answers with its own status instead.
  void end(std::exception_ptr error) {
    std::unique_lock lk(mu_);
    if (!started_) {
      started_ = true;
      Reply reply = std::move(reply_);
      lk.unlock();
      reply(error ? error_response(error) : json_error(500, "generate: the generation ended without an event"));
      return;
    }
    ended_ = true;
    if (sink_) close_sink();
  }

  bool started() {
    std::lock_guard lk(mu_);
    return started_;
  }

 private:
  void attach(std::shared_ptr<ResponseStream> sink) {
    std::lock_guard lk(mu_);
    sink_ = std::move(sink);
    for (auto& e : pending_)
      if (!gone_ && !sink_->write(std::move(e))) gone_ = true;
    pending_.clear();
    if (ended_ || gone_) close_sink();
  }

  // The last use of the sink: dropping it keeps no reference cycle through the HTTP layer's
  // hold on our stream callback.
  void close_sink() {
    sink_->close();
    sink_.reset();
  }

  std::mutex mu_;
  Reply reply_;
  bool started_ = false, ended_ = false, gone_ = false;
  std::shared_ptr<ResponseStream> sink_;
  std::vector<std::string> pending_;
};

}  // namespace

void serve_generate(std::shared_ptr<TextGenerator> gen, const std::string& model, const std::string& version,
                    HttpRequest&& req, Reply reply, bool stream) {
  try {
    GenerateRequest r = parse_generate_request(req.body);
    json head = json::object();
    if (r.id) head["id"] = *r.id;
    head["model_name"] = model;
    head["model_version"] = version;
    if (!stream) {  // compressed when asked; a stream never is (each event must reach the client at once)
      const ContentCoding coding = negotiate_encoding(req.header("Accept-Encoding"));
      // A client that left stops the generation at its next token.
      gen->submit(std::move(r), [cancelled = req.cancelled](std::string_view) { return !(cancelled && cancelled->load()); },
                  [reply, head, coding](std::exception_ptr error, GenerateResult res) {
                    if (error) return reply(error_response(error));
                    if (res.finish_reason == "cancelled")
                      return reply(json_error(499, "the client closed the connection; generation stopped"));
                    json j = head;
                    j["text_output"] = std::move(res.text);
                    j["finish_reason"] = res.finish_reason;
                    HttpResponse ok;
                    ok.body = j.dump();
                    encode_response(ok, coding);
                    reply(std::move(ok));
                  });
      return;
    }
    auto events = std::make_shared<EventStream>(reply);
    gen->submit(
        std::move(r),
        [events, head](std::string_view piece) {
          json j = head;
          j["text_output"] = piece;
          return events->send(sse_event(j));
        },
        [events, head](std::exception_ptr error, GenerateResult res) {
          if (error && events->started()) {
            events->send(sse_event({{"error", error_message(error)}}));
            error = nullptr;
          } else if (!error && res.finish_reason != "cancelled") {
            json j = head;
            j["text_output"] = "";
            j["finish_reason"] = res.finish_reason;
            events->send(sse_event(j));
          }
          events->end(error);
        });
  } catch (const std::exception& e) {
    reply(error_response(e));
  }
}

}  // namespace hg::server
