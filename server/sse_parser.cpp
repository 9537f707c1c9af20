#include "server/sse_parser.h"

#include <utility>

namespace hg::server {

bool SseParser::feed(std::string_view bytes, const OnEvent& on_event) {
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') {
      after_cr_ = false;
      continue;
    }
    const bool lf_after_cr = c == '\n' && after_cr_ && i == start && partial_.empty();
    after_cr_ = c == '\r';
    if (lf_after_cr) {  // the LF of a CRLF whose CR ended the previous line
      start = i + 1;
      continue;
    }
    std::string_view text = bytes.substr(start, i - start);
    start = i + 1;
    bool go;
    if (partial_.empty()) {
      go = line(text, on_event);
    } else {
      partial_.append(text);
      std::string whole = std::exchange(partial_, {});
      go = line(whole, on_event);
    }
    if (!go) return false;
  }
  partial_.append(bytes.substr(start));
  return true;
}

bool SseParser::finish(const OnEvent& on_event) {
  if (!partial_.empty()) {
    std::string last = std::exchange(partial_, {});
    if (!line(last, on_event)) return false;
  }
  return dispatch(on_event);
}

bool SseParser::line(std::string_view text, const OnEvent& on_event) {
  if (text.empty()) return dispatch(on_event);
  if (text.front() == ':') return true;  // comment (keep-alive)
  const size_t colon = text.find(':');
  std::string_view field = text.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = text.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  } else if (field == "id") {
    id_.assign(value);
  }
  return true;  // `retry` and unknown fields are ignored
}

bool SseParser::dispatch(const OnEvent& on_event) {
  if (!has_data_) {
    event_.clear();
    return true;
  }
  SseEvent e{std::exchange(event_, {}), std::exchange(data_, {}), id_};
  has_data_ = false;
  return on_event(std::move(e));
}

}  // namespace hg::server
