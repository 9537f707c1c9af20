#include "server/event_stream.h"

namespace hg::server {

namespace {
constexpr size_t kMaxPending = 64;  // events held before the HTTP layer hands over the sink
}  // namespace

std::string sse_data(std::string_view payload) {
  std::string s;
  s.reserve(payload.size() + 8);
  s += "data: ";
  s += payload;
  s += "\n\n";
  return s;
}

EventStream::EventStream(Reply reply, ErrorResponse error_response)
    : reply_(std::move(reply)), error_response_(std::move(error_response)) {}

bool EventStream::send(std::string event) {
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

void EventStream::end(std::exception_ptr error) {
  std::unique_lock lk(mu_);
  if (!started_) {
    started_ = true;
    Reply reply = std::move(reply_);
    lk.unlock();
    reply(error ? error_response_(error) : json_error(500, "the stream ended without an event"));
    return;
  }
  ended_ = true;
  if (sink_) close_sink();
}

bool EventStream::ready() {
  std::lock_guard lk(mu_);
  if (gone_ || ended_) return true;
  return sink_ ? sink_->ready() : pending_.size() < kMaxPending;
}

bool EventStream::started() {
  std::lock_guard lk(mu_);
  return started_;
}

void EventStream::attach(std::shared_ptr<ResponseStream> sink) {
  std::lock_guard lk(mu_);
  sink_ = std::move(sink);
  for (auto& e : pending_)
    if (!gone_ && !sink_->write(std::move(e))) gone_ = true;
  pending_.clear();
  if (ended_ || gone_) close_sink();
}

// The last use of the sink: dropping it keeps no reference cycle through the HTTP layer's
// hold on our stream callback.
void EventStream::close_sink() {
  sink_->close();
  sink_.reset();
}

}  // namespace hg::server
