// The GPT that the generator tests share: PyTorch's weights (scripts/testdata_gpt.py) as an
// eager model on hpu:0 and as a saved package, a generator over a fresh load of that package,
// and a bounded generate call.
//
//   auto gen = hg::test::generator();
//   EXPECT_EQ(hg::test::generate_within(*gen, hg::test::request("Hello", 40)).tokens,
//             hg::test::fixture().eager_ids("Hello", 40));
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <mutex>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "models/gpt.h"
#include "models/package.h"
#include "models/safetensors.h"
#include "models/state_dict.h"
#include "models/tokenizer.h"
#include "server/generate.h"
#include "server/generate_scheduler.h"
#include "server/sse_parser.h"
#include "test_env.h"
#include "wait.h"

namespace hg::test {

inline std::filesystem::path gpt_data(const std::string& name) {
  const auto p = std::filesystem::path(HG_TESTDATA_DIR) / "gpt" / name;
  if (!std::filesystem::exists(p))
    throw std::runtime_error(p.string() + " is missing: run /usr/bin/python3 scripts/testdata_gpt.py " HG_TESTDATA_DIR "/gpt");
  return p;
}

inline std::map<std::string, Tensor> gpt_tensors(const std::string& name) {
  return models::tensors_from(safetensors::read(gpt_data(name)), name);
}

// PyTorch's GPT weights (scripts/torch_gpt.py) as an eager model on hpu:0, and as a package.
struct GptFixture {
  std::unique_ptr<models::GPT> eager;
  std::filesystem::path package;
  GptFixture() : eager(std::make_unique<models::GPT>()), package(test::temp_dir("generate") / "gpt" / "1") {
    eager->load_state_dict(gpt_tensors("weights.safetensors"));
    models::PackageSpec s;
    s.name = "gpt";
    s.inputs = {{"ids", "INT64", {-1, 16}}};
    s.outputs = {{"logits", "FP32", {-1, 16, 256}}};
    models::save_package(package, *eager, s);
    eager->to(Device::hpu(0));
    eager->eval();
  }
  std::vector<int64_t> eager_ids(const std::string& prompt, int64_t n, const models::SamplingOptions& o = {}) {
    NoGradGuard g;
    return eager->generate_ids(models::encode_bytes(prompt), n, o);
  }
};

inline GptFixture& fixture() {
  static GptFixture f;
  return f;
}

// The fixture's package loaded afresh on hpu:0 (what the model repository hands a generator).
inline std::shared_ptr<models::Module> loaded_gpt() {
  std::unique_ptr<models::Module> m;
  models::load_package(fixture().package, &m, Device::hpu(0));
  m->to(Device::hpu(0));
  m->eval();
  return m;
}

inline std::shared_ptr<server::TextGenerator> generator(size_t max_queue = 0, uint64_t default_timeout_us = 0) {
  server::ModelConfig c;
  c.name = "gpt";
  c.max_queue_size = max_queue;
  c.default_timeout_us = default_timeout_us;
  return server::make_gpt_generator(loaded_gpt(), c);
}

inline server::GenerateRequest request(const std::string& text, int64_t max_tokens, std::vector<std::string> stop = {}) {
  server::GenerateRequest r;
  r.text_input = text;
  r.max_tokens = max_tokens;
  r.stop = std::move(stop);
  return r;
}

inline server::PieceCallback any_piece() {
  return [](std::string_view) { return true; };
}

// gen.generate(req, on_piece) with a bound: the result, the generation's error rethrown, or a
// test::WaitTimeout naming `what`. Errors submit() throws (400, 503) are thrown at once.
inline server::GenerateResult generate_within(server::TextGenerator& gen, const server::GenerateRequest& req,
                                              server::PieceCallback on_piece = any_piece(),
                                              std::string_view what = "a generation") {
  auto promise = std::make_shared<std::promise<server::GenerateResult>>();
  std::future<server::GenerateResult> result = promise->get_future();
  gen.submit(req, std::move(on_piece), [promise](std::exception_ptr error, server::GenerateResult r) {
    if (error) promise->set_exception(error);
    else promise->set_value(std::move(r));
  });
  return test::get_within(result, test::kWaitLimit, what);
}

// What serve_generate sent: the response, then (for a stream) each chunk and the close.
class RecordedReply : public server::ResponseStream {
 public:
  // fail_after: writes after this many succeed return false (the client is gone).
  explicit RecordedReply(size_t fail_after = SIZE_MAX) : fail_after_(fail_after) {}
  bool write(std::string chunk) override {
    std::lock_guard lk(mu_);
    ++writes_;
    if (writes_ > fail_after_) return false;
    body_ += chunk;
    return true;
  }
  void close() override {
    std::lock_guard lk(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  // A Reply that records the response and, for a stream, attaches `self` (now or, with
  // `deferred`, when attach() is called).
  static server::Reply reply_to(std::shared_ptr<RecordedReply> self) {
    return [self](server::HttpResponse r) {
      std::unique_lock lk(self->mu_);
      auto stream = std::move(r.stream);
      self->status_ = r.status;
      self->response_ = r;
      self->body_ = r.body;
      if (!stream) self->closed_ = true;
      self->cv_.notify_all();
      if (stream && !self->deferred_) {
        lk.unlock();
        stream(self);
      } else {
        self->stream_ = std::move(stream);
      }
    };
  }
  void defer() { deferred_ = true; }
  void attach(std::shared_ptr<RecordedReply> self) {
    std::function<void(std::shared_ptr<server::ResponseStream>)> s;
    {
      std::lock_guard lk(mu_);
      s = std::move(stream_);
    }
    ASSERT_TRUE(s) << "no streamed response to attach to";
    s(std::move(self));
  }
  // Waits (bounded) until the response ended; false (and a test failure) on timeout.
  bool wait_closed() {
    std::unique_lock lk(mu_);
    return test::wait_for(cv_, lk, test::kWaitLimit, "the generate response to end", [&] { return closed_; });
  }
  bool wait_response() {
    std::unique_lock lk(mu_);
    return test::wait_for(cv_, lk, test::kWaitLimit, "the generate response's status", [&] { return status_ != 0; });
  }
  int status() {
    std::lock_guard lk(mu_);
    return status_;
  }
  server::HttpResponse response() {
    std::lock_guard lk(mu_);
    return response_;
  }
  std::string body() {
    std::lock_guard lk(mu_);
    return body_;
  }
  size_t writes() {
    std::lock_guard lk(mu_);
    return writes_;
  }
  std::vector<nlohmann::json> events() {
    std::vector<nlohmann::json> out;
    server::SseParser p;
    auto on = [&](server::SseEvent&& e) {
      out.push_back(nlohmann::json::parse(e.data));
      return true;
    };
    p.feed(body(), on);
    p.finish(on);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t fail_after_, writes_ = 0;
  int status_ = 0;
  bool closed_ = false, deferred_ = false;
  server::HttpResponse response_;
  std::string body_;
  std::function<void(std::shared_ptr<server::ResponseStream>)> stream_;
};

// The Triton generate (or, with `stream`, generate_stream) endpoint's answer to `body`.
inline std::shared_ptr<RecordedReply> serve(const std::shared_ptr<server::TextGenerator>& gen, const std::string& body,
                                            bool stream,
                                            std::shared_ptr<RecordedReply> rec = std::make_shared<RecordedReply>()) {
  server::HttpRequest req;
  req.method = "POST";
  req.target = stream ? "/v2/models/gpt/generate_stream" : "/v2/models/gpt/generate";
  req.body = body;
  server::serve_generate(gen, "gpt", "1", std::move(req), RecordedReply::reply_to(rec), stream);
  return rec;
}

}  // namespace hg::test
