// The generate extension (server/generate.h; request bodies are in generate_request_test.cpp,
// the UTF-8 / stop-string text assembly in generate_text_test.cpp): the GPT generator decoding through captured graphs
// (== the eager model and PyTorch's greedy tokens, data from scripts/testdata_gpt.py), its
// instance pool and queue, and serve_generate's JSON and server-sent-event responses through an
// in-process Reply.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/autograd.h"
#include "errors.h"
#include "models/gpt.h"
#include "models/package.h"
#include "models/safetensors.h"
#include "models/state_dict.h"
#include "models/tokenizer.h"
#include "server/generate.h"
#include "server/generate_scheduler.h"
#include "server/http_error.h"
#include "server/openai.h"
#include "server/sse_parser.h"
#include "test_env.h"
#include "wait.h"

using namespace hg;
using namespace hg::server;
using ::testing::HasSubstr;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::filesystem::path gpt_data(const std::string& name) {
  const auto p = std::filesystem::path(HG_TESTDATA_DIR) / "gpt" / name;
  if (!std::filesystem::exists(p))
    throw std::runtime_error(p.string() + " is missing: run /usr/bin/python3 scripts/testdata_gpt.py " HG_TESTDATA_DIR "/gpt");
  return p;
}

std::map<std::string, Tensor> gpt_tensors(const std::string& name) {
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

GptFixture& fixture() {
  static GptFixture f;
  return f;
}

// The fixture's package loaded afresh on hpu:0 (what the model repository hands a generator).
std::shared_ptr<models::Module> loaded_gpt() {
  std::unique_ptr<models::Module> m;
  models::load_package(fixture().package, &m, Device::hpu(0));
  m->to(Device::hpu(0));
  m->eval();
  return m;
}

std::shared_ptr<TextGenerator> generator(size_t max_queue = 0, uint64_t default_timeout_us = 0) {
  ModelConfig c;
  c.name = "gpt";
  c.max_queue_size = max_queue;
  c.default_timeout_us = default_timeout_us;
  return make_gpt_generator(loaded_gpt(), c);
}

GenerateRequest request(const std::string& text, int64_t max_tokens, std::vector<std::string> stop = {}) {
  GenerateRequest r;
  r.text_input = text;
  r.max_tokens = max_tokens;
  r.stop = std::move(stop);
  return r;
}

PieceCallback any_piece() {
  return [](std::string_view) { return true; };
}

// gen.generate(req, on_piece) with a bound: the result, the generation's error rethrown, or a
// test::WaitTimeout naming `what`. Errors submit() throws (400, 503) are thrown at once.
GenerateResult generate_within(TextGenerator& gen, const GenerateRequest& req, PieceCallback on_piece = any_piece(),
                               std::string_view what = "a generation") {
  auto promise = std::make_shared<std::promise<GenerateResult>>();
  std::future<GenerateResult> result = promise->get_future();
  gen.submit(req, std::move(on_piece), [promise](std::exception_ptr error, GenerateResult r) {
    if (error) promise->set_exception(error);
    else promise->set_value(std::move(r));
  });
  return test::get_within(result, test::kWaitLimit, what);
}

// A generation that holds the generator's instance: its first piece's callback signals that it
// runs and then waits until release() (bounded). Declare it after the generator: its
// destructor releases it and waits (bounded) for it to end, so a test that fails early does not
// leave the generator's thread waiting. Its state is shared with the callbacks, which may
// outlive the object when a wait timed out.
class HeldGeneration {
 public:
  HeldGeneration(TextGenerator& gen, const std::string& prompt, int64_t max_tokens) : state_(std::make_shared<State>()) {
    gen.submit(
        request(prompt, max_tokens),
        [s = state_](std::string_view) {
          std::unique_lock lk(s->mu);
          if (!s->started) {
            s->started = true;
            s->cv.notify_all();
            (void)test::wait_for(s->cv, lk, test::kWaitLimit, "the test to release the held generation",
                                 [&] { return s->released; });
          }
          return true;
        },
        [s = state_](std::exception_ptr error, GenerateResult r) {
          std::lock_guard lk(s->mu);
          s->error = error;
          s->result = std::move(r);
          s->finished = true;
          s->cv.notify_all();
        });
  }
  ~HeldGeneration() {
    release();
    std::unique_lock lk(state_->mu);
    (void)test::wait_for(state_->cv, lk, test::kWaitLimit, "the held generation to end", [&] { return state_->finished; });
  }
  HeldGeneration(const HeldGeneration&) = delete;
  HeldGeneration& operator=(const HeldGeneration&) = delete;

  // Waits (bounded) until it runs (true), or until it ended without running (false: its
  // request expired in the queue, say; error() tells).
  bool wait_started() {
    std::unique_lock lk(state_->mu);
    const bool either = test::wait_for(state_->cv, lk, test::kWaitLimit, "the held generation to start",
                                       [&] { return state_->started || state_->finished; });
    return either && state_->started;
  }
  bool wait_ended() {
    std::unique_lock lk(state_->mu);
    return test::wait_for(state_->cv, lk, test::kWaitLimit, "the held generation to end", [&] { return state_->finished; });
  }
  void release() {
    std::lock_guard lk(state_->mu);
    state_->released = true;
    state_->cv.notify_all();
  }
  // Its result once it ended (bounded wait); a test failure naming the error if it failed.
  GenerateResult result() {
    std::unique_lock lk(state_->mu);
    if (!test::wait_for(state_->cv, lk, test::kWaitLimit, "the held generation's result", [&] { return state_->finished; }))
      return {};
    if (state_->error) ADD_FAILURE() << "the held generation failed: " << error_text(state_->error);
    return state_->result;
  }
  std::string error() {
    std::lock_guard lk(state_->mu);
    return state_->error ? error_text(state_->error) : "";
  }
  int error_status() {
    std::lock_guard lk(state_->mu);
    try {
      if (state_->error) std::rethrow_exception(state_->error);
    } catch (const HttpError& e) {
      return e.status();
    } catch (...) {
      return -1;
    }
    return 0;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool started = false, released = false, finished = false;
    std::exception_ptr error;
    GenerateResult result;
  };
  static std::string error_text(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return x.what();
    } catch (...) {
      return "an unknown exception";
    }
  }
  std::shared_ptr<State> state_;
};

// What serve_generate sent: the response, then (for a stream) each chunk and the close.
class RecordedReply : public ResponseStream {
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
  static Reply reply_to(std::shared_ptr<RecordedReply> self) {
    return [self](HttpResponse r) {
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
    std::function<void(std::shared_ptr<ResponseStream>)> s;
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
  HttpResponse response() {
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
  std::vector<json> events() {
    std::vector<json> out;
    SseParser p;
    auto on = [&](SseEvent&& e) {
      out.push_back(json::parse(e.data));
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
  HttpResponse response_;
  std::string body_;
  std::function<void(std::shared_ptr<ResponseStream>)> stream_;
};

std::shared_ptr<RecordedReply> serve(const std::shared_ptr<TextGenerator>& gen, const std::string& body, bool stream,
                                     std::shared_ptr<RecordedReply> rec = std::make_shared<RecordedReply>()) {
  HttpRequest req;
  req.method = "POST";
  req.target = stream ? "/v2/models/gpt/generate_stream" : "/v2/models/gpt/generate";
  req.body = body;
  serve_generate(gen, "gpt", "1", std::move(req), RecordedReply::reply_to(rec), stream);
  return rec;
}

TEST(GptGenerator, WarmupCapturesTheGridBeforeServing) {
  auto gen = std::dynamic_pointer_cast<GenerateScheduler>(generator());
  ASSERT_TRUE(gen);
  // (tokens, sequences): tokens 1, 2, 4, ..., 256 with sequences 1, 2, 4, ..., 32 up to the tokens
  EXPECT_EQ(gen->stats().captured_graphs, 1u + 2u + 3u + 4u + 5u + 4u * 6u);
  EXPECT_EQ(generate_within(*gen, request("Hello", 40)).tokens, fixture().eager_ids("Hello", 40));
  EXPECT_EQ(gen->stats().captured_graphs, 39u) << "serving only replays";
  EXPECT_EQ(gen->stats().kv_blocks_free, gen->stats().kv_blocks_total) << "a finished request frees its blocks";
}

// Greedy through the graphs gives PyTorch's tokens (scripts/testdata_gpt.py) and the eager
// model's, also over many buckets and when sampling with a seed.
TEST(GptGenerator, GreedyEqualsEagerAndPyTorch) {
  auto& f = fixture();
  auto gen = generator();
  const auto io = gpt_tensors("io.safetensors");
  const std::vector<int64_t> prompt = io.at("prompt").to_indices(), greedy = io.at("greedy").to_indices();
  const std::vector<int64_t> want(greedy.begin() + static_cast<std::ptrdiff_t>(prompt.size()), greedy.end());
  std::string streamed;
  GenerateResult r = generate_within(*gen, request(models::decode_bytes(prompt), static_cast<int64_t>(want.size())),
                                     [&](std::string_view p) {
                                       streamed += p;
                                       return true;
                                     });
  EXPECT_EQ(r.tokens, want);
  EXPECT_EQ(r.text, models::decode_utf8(models::decode_bytes(want)).text);
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(prompt.size()));

  r = generate_within(*gen, request("Once upon a time", 200));
  EXPECT_EQ(r.tokens, f.eager_ids("Once upon a time", 200));
  GenerateRequest sampled = request("Hello", 60);
  sampled.sampling = {.greedy = false, .temperature = 0.8, .top_k = 40, .top_p = 0.95, .seed = 9};
  // TextGenerator::generate itself (submit, then an unbounded wait): bounded from outside.
  EXPECT_EQ(test::call_within(test::kWaitLimit, "TextGenerator::generate of a sampled request",
                              [&] { return gen->generate(sampled, any_piece()); })
                .tokens,
            f.eager_ids("Hello", 60, sampled.sampling));
}

TEST(GptGenerator, ChecksTheRequestAgainstTheModel) {
  auto gen = generator();
  auto error = [&](const GenerateRequest& r) {
    return test::error_of<InvalidArgument>([&] {
      test::call_within(test::kWaitLimit, "TextGenerator::generate", [&] { return gen->generate(r, any_piece()); });
    });
  };
  EXPECT_THAT(error(request(std::string(250, 'a'), 7)),
              HasSubstr("field 'parameters.max_tokens' is 7: the prompt's 250 tokens + max_tokens exceed model 'gpt''s "
                        "max_len 256 (at most 6)"));
  EXPECT_THAT(error(request(std::string(256, 'a'), 1)), HasSubstr("field 'text_input' is 256 tokens (bytes); model 'gpt' takes at most 255"));
  EXPECT_THAT(error(request("", 1)), HasSubstr("field 'text_input' is empty"));
  EXPECT_THAT(error(request("a", 0)), HasSubstr("field 'parameters.max_tokens' must be >= 1"));
  GenerateRequest r = request("a", 3);
  r.sampling = {.greedy = false, .top_p = 2};
  EXPECT_THAT(error(r), HasSubstr("top_p must be in (0, 1]"));
  EXPECT_EQ(generate_within(*gen, request(std::string(250, 'a'), 6)).tokens.size(), 6u);
}

// Concurrent requests share decode steps (continuous batching) and each gets the tokens it
// would get alone.
TEST(GptGenerator, ConcurrentRequestsShareStepsAndEachGetTheirOwnTokens) {
  auto& f = fixture();
  auto gen = std::dynamic_pointer_cast<GenerateScheduler>(generator());
  const std::vector<std::string> prompts = {"The cat", "A dog ran", "hgraph", "0123456789", "zz", "Graphs!"};
  std::vector<std::vector<int64_t>> want;
  for (const auto& p : prompts) want.push_back(f.eager_ids(p, 24 + static_cast<int64_t>(p.size())));
  std::vector<std::future<GenerateResult>> got;
  for (const auto& p : prompts)
    got.push_back(std::async(std::launch::async, [&, p] {
      return generate_within(*gen, request(p, 24 + static_cast<int64_t>(p.size())), any_piece(), "the generation of '" + p + "'");
    }));
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(test::get_within(got[i], test::kWaitLimit, "the thread generating '" + prompts[i] + "'").tokens, want[i])
        << prompts[i];
  const GenerationStats st = gen->stats();
  EXPECT_GT(st.step_rows, st.steps) << "some steps ran several sequences";
  EXPECT_EQ(st.finished, prompts.size());
  EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total);
}

// Prompts longer than a step's token budget prefill over several steps, next to the sequences
// already decoding, and still give the tokens they would give alone.
TEST(GptGenerator, LongPromptsPrefillInChunksBesideDecoding) {
  auto& f = fixture();
  ModelConfig c;
  c.name = "gpt";
  c.generation = {.max_batch = 4, .max_step_tokens = 16};
  auto gen = std::dynamic_pointer_cast<GenerateScheduler>(make_gpt_generator(loaded_gpt(), c));
  ASSERT_TRUE(gen);
  const std::vector<std::string> prompts = {"short one", std::string(70, 'x') + " and then", "a third prompt of some length, longer than sixteen"};
  std::vector<std::future<GenerateResult>> got;
  for (const auto& p : prompts)
    got.push_back(std::async(std::launch::async, [&, p] {
      return generate_within(*gen, request(p, 30), any_piece(), "the generation of '" + p + "'");
    }));
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(test::get_within(got[i], test::kWaitLimit, "generation " + std::to_string(i)).tokens, f.eager_ids(prompts[i], 30))
        << prompts[i];
  const GenerationStats st = gen->stats();
  EXPECT_LE(st.step_tokens, 16 * st.steps) << "no step ran more than its budget";
  EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total);
}

// A KV cache too small for every request at once: sequences are preempted (their blocks freed,
// recomputed later) and still get exactly the tokens they would get alone; none fails.
TEST(GptGenerator, PreemptedSequencesResumeWithTheSameTokens) {
  auto& f = fixture();
  ModelConfig c;
  c.name = "gpt";
  c.generation = {.max_batch = 8, .max_step_tokens = 256, .block_size = 16, .max_batch_total_tokens = 256};
  auto gen = std::dynamic_pointer_cast<GenerateScheduler>(make_gpt_generator(loaded_gpt(), c));
  ASSERT_TRUE(gen);
  std::vector<std::string> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back("prompt number " + std::to_string(i) + " says");
  std::vector<std::shared_ptr<std::promise<GenerateResult>>> promises;
  std::vector<std::future<GenerateResult>> got;
  for (const auto& p : prompts) {  // submitted together: admitted in one prefill, then out of blocks
    promises.push_back(std::make_shared<std::promise<GenerateResult>>());
    got.push_back(promises.back()->get_future());
    gen->submit(request(p, 100), any_piece(), [pr = promises.back()](std::exception_ptr e, GenerateResult r) {
      if (e) pr->set_exception(e);
      else pr->set_value(std::move(r));
    });
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(test::get_within(got[i], test::kWaitLimit, "generation " + std::to_string(i)).tokens, f.eager_ids(prompts[i], 100))
        << prompts[i];
  const GenerationStats st = gen->stats();
  EXPECT_GT(st.preemptions, 0u) << "6 x 120 positions do not fit 256";
  EXPECT_EQ(st.failed, 0u);
  EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total);
}

// A queue of one: with a generation running (held in its callback, which holds the scheduler's
// step) and one waiting, the next is refused with 503 at once; the held ones then finish.
TEST(GptGenerator, FullQueueAnswers503) {
  auto gen = generator(1);
  HeldGeneration held(*gen, "held", 8);
  ASSERT_TRUE(held.wait_started()) << "the held generation failed: " << held.error();
  auto waiting = serve(gen, R"({"text_input": "queued", "parameters": {"max_tokens": 4}})", false);
  EXPECT_EQ(waiting->status(), 0) << "the second request waits in the queue";
  EXPECT_EQ(gen->queue_depth(), 1u);
  const HttpError e = [&] {
    try {
      generate_within(*gen, request("third", 4));
    } catch (const HttpError& e) {
      return e;
    }
    return HttpError(0, "no error");
  }();
  EXPECT_EQ(e.status(), 503);
  EXPECT_THAT(e.what(), HasSubstr("model 'gpt': the generate queue is full (max_queue_size 1)"));
  auto refused = serve(gen, R"({"text_input": "fourth"})", true);
  EXPECT_TRUE(refused->wait_closed());  // no ASSERT before the release: the held generation must end
  EXPECT_EQ(refused->status(), 503);
  EXPECT_EQ(refused->response().headers, (std::vector<std::pair<std::string, std::string>>{{"Retry-After", "1"}}));
  EXPECT_THAT(refused->body(), HasSubstr("generate queue is full"));
  held.release();
  EXPECT_EQ(held.result().tokens.size(), 8u);
  ASSERT_TRUE(waiting->wait_closed());
  EXPECT_EQ(waiting->status(), 200);
  EXPECT_EQ(gen->queue_depth(), 0u);
}

// A request whose timeout (its own, or the model's default it may only lower) expires while it
// waits is never run: 504. Without one it waits as long as it takes.
//
// The model's default applies to the generation that holds the only instance too: it must be
// running before its own timeout expires (with 2 ms, a loaded machine's scheduler let it expire
// in the queue; the test then waited forever for it to start). The default is long enough for
// that (and should the held request still expire, which is a correct 504, another is
// submitted); the queued requests are released only after their deadlines passed.
TEST(GptGenerator, QueuedPastItsTimeoutIs504) {
  for (uint64_t default_timeout_us : {uint64_t{0}, uint64_t{500'000}}) {
    SCOPED_TRACE("default_timeout_us " + std::to_string(default_timeout_us));
    auto gen = generator(0, default_timeout_us);
    std::unique_ptr<HeldGeneration> held;
    const auto give_up = std::chrono::steady_clock::now() + test::kWaitLimit;
    for (;;) {
      held = std::make_unique<HeldGeneration>(*gen, "held", 4);
      if (held->wait_started()) break;
      ASSERT_EQ(held->error_status(), 504) << "the held generation failed: " << held->error();
      ASSERT_NE(default_timeout_us, 0u) << "a request without a timeout expired";
      ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "no held generation started within its timeout";
    }
    auto expiring = serve(gen, R"({"text_input": "late", "parameters": {"max_tokens": 4, "timeout": 1000}})", true);
    auto longer = serve(gen, R"({"text_input": "later", "parameters": {"max_tokens": 4, "timeout": 50000000}})", false);
    // Both are queued (serve_generate submits before it returns); their deadlines were set then.
    const auto queued = std::chrono::steady_clock::now();
    EXPECT_EQ(gen->queue_depth(), 2u);
    // What is under test is a deadline passing in the queue: wait for the later of the two
    // (the default for `longer`, else expiring's 1 ms), then let the instance go.
    std::this_thread::sleep_until(queued + std::chrono::microseconds(std::max<uint64_t>(default_timeout_us, 1000)) + 5ms);
    held->release();
    if (default_timeout_us == 0) {
      EXPECT_EQ(held->result().tokens.size(), 4u);
    } else {  // the deadline passed while it ran: it ends at its next step
      ASSERT_TRUE(held->wait_ended());
      EXPECT_EQ(held->error_status(), 504);
      EXPECT_THAT(held->error(), HasSubstr("model 'gpt': the request's deadline passed after "));
    }
    ASSERT_TRUE(expiring->wait_closed());
    EXPECT_EQ(expiring->status(), 504);
    EXPECT_THAT(expiring->body(), HasSubstr("model 'gpt': request timeout expired after"));
    EXPECT_THAT(expiring->body(), HasSubstr("us in the generate queue"));
    ASSERT_TRUE(longer->wait_closed());
    EXPECT_EQ(longer->status(), default_timeout_us ? 504 : 200) << "a request's timeout never raises the default";
  }
}

TEST(GptGenerator, ClientGoneStopsEarly) {
  auto gen = generator();
  int pieces = 0;
  const GenerateResult r = generate_within(*gen, request("Hello", 200), [&](std::string_view) { return ++pieces < 1; });
  EXPECT_EQ(pieces, 1);
  EXPECT_EQ(r.finish_reason, "cancelled");
  EXPECT_LE(r.tokens.size(), 4u) << "the first piece comes within 4 bytes; nothing is generated after it";
  // Over HTTP: the stream's first write after the first event fails; nothing more is written.
  auto rec = serve(gen, R"({"text_input": "Hello", "parameters": {"max_tokens": 200}})", true,
                   std::make_shared<RecordedReply>(0));
  ASSERT_TRUE(rec->wait_closed());
  EXPECT_EQ(rec->status(), 200);
  EXPECT_EQ(rec->writes(), 1u);
  EXPECT_EQ(rec->events().size(), 1u);  // the first event, sent with the response
}

TEST(ServeGenerate, JsonResponse) {
  auto gen = generator();
  auto rec = serve(gen, R"({"id": "42", "text_input": "Once", "parameters": {"max_tokens": 30}})", false);
  ASSERT_TRUE(rec->wait_closed());
  EXPECT_EQ(rec->status(), 200);
  EXPECT_EQ(rec->response().content_type, "application/json");
  const json j = json::parse(rec->body());
  const std::string want = generate_within(*gen, request("Once", 30)).text;
  EXPECT_EQ(j, (json{{"id", "42"}, {"model_name", "gpt"}, {"model_version", "1"}, {"text_output", want}, {"finish_reason", "length"}}));
}

// The stream's pieces are whole characters and concatenate to /generate's text, with and
// without a stop string (taken from the greedy text itself), whether the sink comes at once
// or only after the generation ended.
TEST(ServeGenerate, StreamPiecesConcatenateToTheJsonText) {
  auto gen = generator();
  const std::string body = R"({"id": "s", "text_input": "Hello", "parameters": {"max_tokens": 60}})";
  auto whole = serve(gen, body, false);
  ASSERT_TRUE(whole->wait_closed());
  const std::string text = json::parse(whole->body())["text_output"];
  for (bool deferred : {false, true}) {
    auto rec = std::make_shared<RecordedReply>();
    if (deferred) rec->defer();
    serve(gen, body, true, rec);
    ASSERT_TRUE(rec->wait_response());
    if (deferred) {
      // The generator has one instance: a generation queued behind this one returns after it ended.
      generate_within(*gen, request("x", 1), any_piece(), "a generation queued behind the deferred one");
      rec->attach(rec);
    }
    ASSERT_TRUE(rec->wait_closed());
    EXPECT_EQ(rec->status(), 200);
    EXPECT_EQ(rec->response().content_type, "text/event-stream; charset=utf-8");
    const auto events = rec->events();
    ASSERT_GE(events.size(), 2u);
    std::string joined_text;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      EXPECT_EQ(events[i]["id"], "s");
      EXPECT_EQ(events[i]["model_name"], "gpt");
      EXPECT_FALSE(events[i].contains("finish_reason"));
      const std::string piece = events[i]["text_output"];
      EXPECT_FALSE(piece.empty());
      EXPECT_TRUE(models::decode_utf8(piece).invalid_offsets.empty()) << "a piece of whole characters";
      joined_text += piece;
    }
    EXPECT_EQ(joined_text, text);
    EXPECT_EQ(events.back(), (json{{"id", "s"}, {"model_name", "gpt"}, {"model_version", "1"}, {"text_output", ""},
                                   {"finish_reason", "length"}}));
  }
  // A stop string: two characters from the middle of the text.
  ASSERT_GT(text.size(), 12u);
  size_t from = 6;
  while ((static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  size_t to = from + 1;
  while (to < text.size() && (static_cast<unsigned char>(text[to]) & 0xC0) == 0x80) ++to;
  const std::string stop = text.substr(from, to - from);
  const std::string other = "\x01\x02";
  const json stop_body = {{"text_input", "Hello"}, {"parameters", {{"max_tokens", 60}, {"stop", {other, stop}}}}};
  auto stopped = serve(gen, stop_body.dump(), false);
  ASSERT_TRUE(stopped->wait_closed());
  const json j = json::parse(stopped->body());
  EXPECT_EQ(j["text_output"], text.substr(0, std::min(text.find(stop), text.find(other))));
  EXPECT_EQ(j["finish_reason"], "stop");
  auto stream = serve(gen, stop_body.dump(), true);
  ASSERT_TRUE(stream->wait_closed());
  std::string streamed;
  for (const auto& e : stream->events()) streamed += e["text_output"].get<std::string>();
  EXPECT_EQ(streamed, j["text_output"]);
  EXPECT_EQ(stream->events().back()["finish_reason"], "stop");
}

TEST(ServeGenerate, BadRequestsAnswer400NamingTheField) {
  auto gen = generator();
  for (bool stream : {false, true}) {
    auto rec = serve(gen, R"({"text_input": "Hi", "parameters": {"max_tokens": 255}})", stream);
    ASSERT_TRUE(rec->wait_closed());
    EXPECT_EQ(rec->status(), 400);
    EXPECT_EQ(rec->response().content_type, "application/json");
    EXPECT_THAT(json::parse(rec->body())["error"].get<std::string>(),
                HasSubstr("field 'parameters.max_tokens' is 255: the prompt's 2 tokens + max_tokens exceed"));
    rec = serve(gen, R"({"text_input": "Hi", "parameters": {"top_k": "many"}})", stream);
    ASSERT_TRUE(rec->wait_closed());
    EXPECT_EQ(rec->status(), 400);
    EXPECT_THAT(rec->body(), HasSubstr("field 'parameters.top_k' must be an integer"));
  }
}

// A generator that fails: before its first piece (the status is the error's) or after it
// (a 200 stream whose last event is {"error"}).
class FailingGenerator : public TextGenerator {
 public:
  explicit FailingGenerator(int pieces) : pieces_(pieces) {}
  void submit(GenerateRequest, PieceCallback on_piece, GenerateDone done) override {
    worker_ = std::thread([this, on_piece, done] {
      for (int i = 0; i < pieces_; ++i) on_piece("x");
      done(std::make_exception_ptr(OutOfMemoryError("hpu:0 is out of memory")), {});
    });
  }
  size_t queue_depth() const override { return 0; }
  GenerationStats stats() const override { return {}; }
  int64_t context_length() const override { return 256; }
  ~FailingGenerator() override { worker_.join(); }

 private:
  int pieces_;
  std::thread worker_;
};

TEST(ServeGenerate, ErrorsBeforeAndAfterTheFirstEvent) {
  auto before = serve(std::make_shared<FailingGenerator>(0), R"({"text_input": "a"})", true);
  ASSERT_TRUE(before->wait_closed());
  EXPECT_EQ(before->status(), 503);
  EXPECT_EQ(json::parse(before->body()), (json{{"error", "hpu:0 is out of memory"}}));
  auto after = serve(std::make_shared<FailingGenerator>(2), R"({"text_input": "a"})", true);
  ASSERT_TRUE(after->wait_closed());
  EXPECT_EQ(after->status(), 200);
  const auto events = after->events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1]["text_output"], "x");
  EXPECT_EQ(events[2], (json{{"error", "hpu:0 is out of memory"}}));
  auto plain = serve(std::make_shared<FailingGenerator>(1), R"({"text_input": "a"})", false);
  ASSERT_TRUE(plain->wait_closed());
  EXPECT_EQ(plain->status(), 503);
}

// The OpenAI stream over the same event stream: an error before the first chunk is a status with
// OpenAI's error body; after it, an error event and [DONE].
TEST(ServeOpenAi, ErrorsBeforeAndAfterTheFirstChunk) {
  auto serve_chat = [](std::shared_ptr<TextGenerator> gen) {
    auto rec = std::make_shared<RecordedReply>();
    HttpRequest req;
    req.method = "POST";
    req.target = "/v1/chat/completions";
    serve_openai(std::move(gen),
                 parse_chat_request(R"({"model": "gpt", "messages": [{"role": "user", "content": "a"}], "stream": true})"),
                 std::move(req), RecordedReply::reply_to(rec));
    return rec;
  };
  auto before = serve_chat(std::make_shared<FailingGenerator>(0));
  ASSERT_TRUE(before->wait_closed());
  EXPECT_EQ(before->status(), 503);
  EXPECT_EQ(json::parse(before->body())["error"]["type"], "server_error");
  EXPECT_EQ(json::parse(before->body())["error"]["message"], "hpu:0 is out of memory");
  auto after = serve_chat(std::make_shared<FailingGenerator>(2));
  ASSERT_TRUE(after->wait_closed());
  EXPECT_EQ(after->status(), 200);
  std::vector<std::string> data;
  SseParser p;
  auto on = [&](SseEvent&& e) {
    data.push_back(e.data);
    return true;
  };
  p.feed(after->body(), on);
  p.finish(on);
  ASSERT_EQ(data.size(), 5u) << after->body();  // the role, "x", "x", the error, [DONE]
  EXPECT_EQ(json::parse(data[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(data[2])["choices"][0]["delta"]["content"], "x");
  EXPECT_EQ(json::parse(data[3])["error"]["message"], "hpu:0 is out of memory");
  EXPECT_EQ(data[4], "[DONE]");
}

}  // namespace
