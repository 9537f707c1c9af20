// The GPT generator (server/generate_scheduler.h): decoding through captured graphs (== the
// eager model and PyTorch's greedy tokens, data from scripts/testdata_gpt.py), shared steps,
// prompt chunks, preemption, its queue, deadlines and clients that leave. Request bodies are in
// generate_request_test.cpp, the text assembly in generate_text_test.cpp, the endpoints'
// responses in generate_serve_test.cpp.
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
#include "gpt_generator_fixture.h"
#include "test_env.h"
#include "wait.h"

using namespace hg;
using namespace hg::server;
using namespace hg::test;
using ::testing::HasSubstr;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {


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


TEST(GptGenerator, WarmupCapturesTheGridBeforeServing) {
  auto gen = std::dynamic_pointer_cast<GenerateScheduler>(generator());
  ASSERT_TRUE(gen);
  // (tokens, sequences): tokens 1, 2, 4, ..., 128 with sequences 1, 2, 4, ..., 32 up to the tokens
  EXPECT_EQ(gen->stats().captured_graphs, 1u + 2u + 3u + 4u + 5u + 3u * 6u);
  EXPECT_EQ(generate_within(*gen, request("Hello", 40)).tokens, fixture().eager_ids("Hello", 40));
  EXPECT_EQ(gen->stats().captured_graphs, 33u) << "serving only replays";
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

// Keys and values stored as bfloat16 (generation.kv_cache_dtype): greedy decoding through the
// scheduler still gives the eager model's tokens for this prompt (the logits move by about 1e-2,
// see GPT.PagedAttentionAnyHeadAndBlockSize), and every block comes back.
TEST(GptGenerator, BFloat16KvCacheGivesTheEagerTokens) {
  ModelConfig c;
  c.name = "gpt";
  c.generation.kv_cache_dtype = "bfloat16";
  auto gen = std::dynamic_pointer_cast<GenerateScheduler>(make_gpt_generator(loaded_gpt(), c));
  ASSERT_TRUE(gen);
  EXPECT_EQ(generate_within(*gen, request("Hello", 40)).tokens, fixture().eager_ids("Hello", 40));
  EXPECT_EQ(gen->stats().kv_blocks_free, gen->stats().kv_blocks_total);
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
  EXPECT_THAT(e.what(), HasSubstr("model 'gpt': the generate queue is full (1 sequences waiting, 1 more asked, "
                                  "max_queue_size 1)"));
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

// A client that left costs nothing: a request whose client is gone while it waits is never
// admitted (no step token of it), and a running one ends between steps, without waiting for a
// piece of text to notice.
TEST(GptGenerator, DepartedClientsAreDroppedBeforeAdmissionAndBetweenSteps) {
  auto gen = generator();
  const GenerationStats before = gen->stats();
  auto gone = std::make_shared<std::atomic<bool>>(false);
  {
    HeldGeneration held(*gen, "held", 4);
    ASSERT_TRUE(held.wait_started()) << "the held generation failed: " << held.error();
    GenerateRequest r = request(std::string(100, 'q'), 50);
    r.cancelled = gone;
    auto promise = std::make_shared<std::promise<GenerateResult>>();
    auto result = promise->get_future();
    gen->submit(r, any_piece(), [promise](std::exception_ptr e, GenerateResult res) {
      if (e) promise->set_exception(e);
      else promise->set_value(std::move(res));
    });
    EXPECT_EQ(gen->queue_depth(), 1u);
    gone->store(true);  // the client leaves while it waits behind the held step
    held.release();
    const GenerateResult dropped = get_within(result, kWaitLimit, "the departed request's completion");
    EXPECT_EQ(dropped.finish_reason, "cancelled");
    EXPECT_TRUE(dropped.tokens.empty());
    EXPECT_EQ(held.result().tokens.size(), 4u);
  }
  GenerationStats after = gen->stats();
  EXPECT_EQ(after.cancelled - before.cancelled, 1u);
  EXPECT_LT(after.step_tokens - before.step_tokens, 100u) << "the departed prompt's 100 tokens were never prefilled";

  // Running: the flag goes up on a token that completes no piece (a multi-byte character's first
  // byte would not be seen by a piece callback); the next step never comes for it.
  GenerateRequest r = request("Hello", 100);
  auto flag = std::make_shared<std::atomic<bool>>(false);
  r.cancelled = flag;
  size_t tokens_when_gone = 0;
  r.on_token = [&, n = size_t{0}](const models::TokenLogprobs&) mutable {
    if (++n == 3) tokens_when_gone = n, flag->store(true);
  };
  const GenerateResult cut = generate_within(*gen, r, any_piece(), "a generation whose client leaves");
  EXPECT_EQ(cut.finish_reason, "cancelled");
  EXPECT_EQ(tokens_when_gone, 3u);
  EXPECT_EQ(cut.tokens.size(), 3u) << "no token after the step in which the client left";
  EXPECT_EQ(gen->stats().cancelled - before.cancelled, 2u);
  EXPECT_EQ(gen->stats().kv_blocks_free, gen->stats().kv_blocks_total);
}

// A group (OpenAI's n) is n sequences against the queue bound, queued whole or refused whole.
TEST(GptGenerator, AGroupCountsEachSequenceAgainstTheQueueBound) {
  auto gen = generator(4);
  HeldGeneration held(*gen, "held", 4);
  ASSERT_TRUE(held.wait_started()) << "the held generation failed: " << held.error();
  auto group = [&](size_t n, std::vector<std::future<GenerateResult>>& out) {
    std::vector<Submission> g;
    for (size_t i = 0; i < n; ++i) {
      auto p = std::make_shared<std::promise<GenerateResult>>();
      out.push_back(p->get_future());
      g.push_back({request("group", 2), any_piece(), [p](std::exception_ptr e, GenerateResult r) {
                     if (e) p->set_exception(e);
                     else p->set_value(std::move(r));
                   }});
    }
    gen->submit_group(std::move(g));
  };
  std::vector<std::future<GenerateResult>> refused, queued;
  try {
    group(5, refused);
    ADD_FAILURE() << "a group of 5 fit a queue of 4";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_THAT(e.what(), HasSubstr("(0 sequences waiting, 5 more asked, max_queue_size 4)"));
  }
  EXPECT_EQ(gen->queue_depth(), 0u) << "a refused group queues none of its sequences";
  group(4, queued);
  EXPECT_EQ(gen->queue_depth(), 4u);
  held.release();
  for (auto& f : queued) EXPECT_EQ(get_within(f, kWaitLimit, "a queued group's sequence").tokens.size(), 2u);
}

}  // namespace

// The KV cache is charged to the load's share of the model memory before it is made: one past
// the budget is refused naming the field and its bytes; one that fits is charged with the step
// graphs (captured within what is left), and both come back with the generator.
TEST(GptGenerator, TheKvCacheAndStepGraphsAreChargedToTheMemoryBudget) {
  auto budget = MemoryBudget::make(size_t{256} << 20);
  ModelConfig c;
  c.name = "gpt";
  c.generation.max_batch_total_tokens = int64_t{1} << 24;
  try {
    make_gpt_generator(loaded_gpt(), c, {}, budget->lease("model 'gpt'"));
    FAIL() << "a KV cache of 2^24 tokens fitted in 256 MiB";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model 'gpt': generation.max_batch_total_tokens (a KV cache of 16777216 tokens in F32) needs"));
    EXPECT_THAT(e.what(), HasSubstr("(--model-memory-mb 256)"));
  }
  EXPECT_EQ(budget->used(), 0u);
  c.generation.max_batch_total_tokens = 0;
  {
    auto lease = budget->lease("model 'gpt'");
    auto gen = make_gpt_generator(loaded_gpt(), c, {}, lease);
    EXPECT_GT(lease->held(), 0u);
    EXPECT_EQ(budget->used(), lease->held());
    EXPECT_GT(gen->stats().captured_graphs, 0u);
    EXPECT_FALSE(generate_within(*gen, request("Hello", 4)).text.empty());
  }
  EXPECT_EQ(budget->used(), 0u);
}
