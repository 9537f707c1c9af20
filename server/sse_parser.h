// Incremental parser of a text/event-stream body (server-sent events, WHATWG HTML §9.2):
// feed it the bytes as they arrive, in chunks cut anywhere, and it hands over each event
// once its terminating blank line has been read.
//
//   hg::server::SseParser p;
//   p.feed("data: {\"text_output\":\"He\"}\n\nda", on_event);   // one event
//   p.feed("ta: {\"text_output\":\"llo\"}\n\n", on_event);       // the second
//   p.finish(on_event);                                          // end of body
//
// Lines end in LF, CRLF or CR. `data:` lines of one event are joined with "\n"; a single
// space after the colon is dropped; lines starting with ':' are comments; `event:` and `id:`
// are kept; an event with no data is not dispatched. finish() dispatches a last event that
// the body ended without a blank line after (the standard drops it; we are lenient).
#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace hg::server {

struct SseEvent {
  std::string event;  // `event:` field; empty for the default "message"
  std::string data;
  std::string id;     // last `id:` seen
};

class SseParser {
 public:
  // Returns false to stop: no further events are dispatched from this call.
  using OnEvent = std::function<bool(SseEvent&&)>;
  // False once on_event returned false.
  bool feed(std::string_view bytes, const OnEvent& on_event);
  bool finish(const OnEvent& on_event);

 private:
  bool line(std::string_view text, const OnEvent& on_event);
  bool dispatch(const OnEvent& on_event);

  std::string partial_;          // an unterminated line
  bool after_cr_ = false;        // the last byte was CR: a following LF belongs to it
  bool has_data_ = false;
  std::string event_, data_, id_;
};

}  // namespace hg::server
