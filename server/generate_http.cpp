// serve_generate: the HTTP side of the generate extension (server/generate.h): one JSON
// response, or server-sent events whose status the first event fixes.
#include <nlohmann/json.hpp>

#include "server/compression.h"
#include "server/event_stream.h"
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

std::string sse_event(const json& j) { return sse_data(j.dump()); }

}  // namespace

void serve_generate(std::shared_ptr<TextGenerator> gen, const std::string& model, const std::string& version,
                    HttpRequest&& req, Reply reply, bool stream) {
  try {
    GenerateRequest r = parse_generate_request(req.body);
    r.cancelled = req.cancelled;  // a client that leaves is dropped from the queue or between steps
    json head = json::object();
    if (r.id) head["id"] = *r.id;
    head["model_name"] = model;
    head["model_version"] = version;
    if (!stream) {  // compressed when asked; a stream never is (each event must reach the client at once)
      const ContentCoding coding = negotiate_encoding(req.header("Accept-Encoding"));
      gen->submit(std::move(r), [](std::string_view) { return true; },
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
    auto events = std::make_shared<EventStream>(reply, [](std::exception_ptr e) { return error_response(e); });
    r.ready = [events] { return events->ready(); };  // a reader that does not read holds its sequence back
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
