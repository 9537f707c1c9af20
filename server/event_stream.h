// The server side of a text/event-stream response (server-sent events): the generate_stream
// and OpenAI streaming endpoints send their events through it from a generator thread.
//
//   auto events = std::make_shared<EventStream>(reply, [](std::exception_ptr e) { return my_error(e); });
//   if (!events->send(sse_data(R"({"text_output":"He"})"))) stop();   // false: the client is gone
//   events->end(nullptr);                                              // after the last event
//
// The first event starts the response (status 200, the event as its first chunk), so an error
// before it answers with its own status (the `error_response` given), and one after it can
// only be another event. Later events wait until the HTTP layer hands over the response's sink,
// then go to it in order. Thread-safe: events from several threads go out one at a time.
#pragma once
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_server.h"

namespace hg::server {

// One event carrying `payload` (one line of JSON): "data: <payload>\n\n".
std::string sse_data(std::string_view payload);

class EventStream : public std::enable_shared_from_this<EventStream> {
 public:
  using ErrorResponse = std::function<HttpResponse(std::exception_ptr)>;
  EventStream(Reply reply, ErrorResponse error_response);

  // False once the client is gone.
  bool send(std::string event);
  // False while the client has not read what was sent (ResponseStream::ready): a producer that
  // can wait should, then send again. True once the client is gone (send says so).
  bool ready();
  // After the last event. An error before any event answers with its own status instead.
  void end(std::exception_ptr error);
  bool started();

 private:
  void attach(std::shared_ptr<ResponseStream> sink);
  void close_sink();

  std::mutex mu_;
  Reply reply_;
  ErrorResponse error_response_;
  bool started_ = false, ended_ = false, gone_ = false;
  std::shared_ptr<ResponseStream> sink_;
  std::vector<std::string> pending_;
};

}  // namespace hg::server
