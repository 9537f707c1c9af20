// The generate request parser and the GPT text generator (a pool of graph decoders on their
// own threads behind a bounded queue). serve_generate is in generate_http.cpp.
#include "server/generate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <oneapi/tbb/concurrent_queue.h>
#include <thread>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/json_reader.h"
#include "models/gpt.h"
#include "models/gpt_graphs.h"
#include "models/module.h"
#include "models/tokenizer.h"
#include "server/generate_text.h"
#include "server/http_error.h"
#include "server/request_fields.h"

namespace hg::server {

namespace {

using json = nlohmann::json;

// A generate request nests 3 deep (parameters.stop[i]) and holds a prompt and a few parameters.
constexpr JsonLimits kGenerateJsonLimits{.max_depth = 8, .max_values = 4096, .max_bytes = size_t{1} << 20};
constexpr size_t kMaxStopStrings = 16;

const RequestFields kFields("generate request");

void parse_parameters(const json& p, GenerateRequest& r) {
  if (!p.is_object()) kFields.fail("parameters", "must be an object, got " + RequestFields::shown(p));
  bool sampled = false, greedy_temperature = false, seeded = false;
  for (const auto& [key, v] : p.items()) {
    const std::string field = "parameters." + key;
    if (key == "max_tokens") {
      r.max_tokens = kFields.integer(v, field, 1);
    } else if (key == "temperature") {
      r.sampling.temperature = kFields.number(v, field);
      if (r.sampling.temperature < 0) kFields.fail(field, "must be >= 0 (0: greedy), got " + RequestFields::shown(v));
      greedy_temperature = r.sampling.temperature == 0;
      sampled = true;
    } else if (key == "top_k") {
      r.sampling.top_k = kFields.integer(v, field, 0);
      sampled = true;
    } else if (key == "top_p") {
      r.sampling.top_p = kFields.number(v, field);
      if (!(r.sampling.top_p > 0 && r.sampling.top_p <= 1))
        kFields.fail(field, "must be in (0, 1], got " + RequestFields::shown(v));
      sampled = true;
    } else if (key == "seed") {
      if (!v.is_number_unsigned()) kFields.fail(field, "must be an integer >= 0, got " + RequestFields::shown(v));
      r.sampling.seed = v.get<uint64_t>();
      seeded = true;
    } else if (key == "stop") {
      r.stop = kFields.strings(v, field, kMaxStopStrings, SIZE_MAX);
    } else if (key == "timeout") {
      if (!v.is_number_unsigned())
        kFields.fail(field, "must be an integer >= 0 (microseconds), got " + RequestFields::shown(v));
      r.timeout_us = v.get<uint64_t>();
    } else if (key == "stream") {
      kFields.boolean(v, field);
    } else {
      kFields.fail(field,
                   "is not a generate parameter (max_tokens, temperature, top_k, top_p, seed, stop, timeout, stream)");
    }
  }
  r.sampling.greedy = !sampled || greedy_temperature;
  if (greedy_temperature) r.sampling.temperature = 1.0;
  if (!r.sampling.greedy && !seeded) r.sampling.seed = models::random_seed();
}

class GptGenerator final : public TextGenerator {
 public:
  GptGenerator(std::unique_ptr<models::GPT> gpt, const ModelConfig& config)
      : gpt_(std::move(gpt)),
        name_(config.name),
        max_queue_(config.max_queue_size),
        default_timeout_us_(config.default_timeout_us),
        allow_timeout_override_(config.allow_timeout_override) {
    for (int i = 0; i < std::max(1, config.instance_count); ++i) {
      decoders_.push_back(std::make_unique<models::GPTGraphDecoder>(*gpt_, 1));
      decoders_.back()->warmup();
    }
    if (max_queue_) queue_.set_capacity(static_cast<std::ptrdiff_t>(max_queue_));
    for (auto& d : decoders_) workers_.emplace_back([this, dec = d.get()] { work(*dec); });
  }

  // Runs once nobody can submit (submitters hold the generator). Queued generations are answered
  // 503, running ones finish: each worker ends at its end-of-work job, queued after all others.
  ~GptGenerator() override {
    stopping_ = true;
    for (size_t i = 0; i < workers_.size(); ++i) queue_.push(Job{});  // waits for room, as the workers take jobs
    for (auto& t : workers_) t.join();
  }

  void submit(GenerateRequest req, PieceCallback on_piece, GenerateDone done) override {
    check(req);
    // A request's timeout may only lower the model's default (0: none).
    uint64_t timeout_us = default_timeout_us_;
    if (req.timeout_us > 0 && allow_timeout_override_)
      timeout_us = timeout_us == 0 ? req.timeout_us : std::min(timeout_us, req.timeout_us);
    const auto now = Clock::now();
    constexpr uint64_t kLongest = uint64_t{1} << 50;  // about 35 years: the deadline cannot overflow
    const auto deadline = timeout_us > 0 ? now + std::chrono::microseconds(std::min(timeout_us, kLongest))
                                         : Clock::time_point::max();
    if (!queue_.try_push({std::move(req), std::move(on_piece), std::move(done), now, deadline}))
      throw HttpError(503, "model '" + name_ + "': the generate queue is full (max_queue_size " +
                               std::to_string(max_queue_) + ")");
  }

  size_t queue_depth() const override {
    return static_cast<size_t>(std::max<std::ptrdiff_t>(0, queue_.size()));  // negative while workers wait
  }

  int64_t context_length() const override { return gpt_->config().max_len; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Job {
    GenerateRequest req;
    PieceCallback on_piece;
    GenerateDone done;  // empty: the end of work (the destructor's)
    Clock::time_point enqueued, deadline;
  };

  void check(const GenerateRequest& r) const {
    const int64_t max_len = gpt_->config().max_len, p = static_cast<int64_t>(r.text_input.size());
    if (p == 0) kFields.fail("text_input", "is empty (the model needs at least one token)");
    if (p >= max_len)
      kFields.fail("text_input", "is " + std::to_string(p) + " tokens (bytes); model '" + name_ + "' takes at most " +
                                     std::to_string(max_len - 1) + " (max_len " + std::to_string(max_len) +
                                     " with one new token)");
    if (r.max_tokens < 1) kFields.fail("parameters.max_tokens", "must be >= 1, got " + std::to_string(r.max_tokens));
    if (r.max_tokens > max_len - p)
      kFields.fail("parameters.max_tokens", "is " + std::to_string(r.max_tokens) + ": the prompt's " +
                                                std::to_string(p) + " tokens + max_tokens exceed model '" + name_ +
                                                "''s max_len " + std::to_string(max_len) + " (at most " +
                                                std::to_string(max_len - p) + ")");
    if (r.top_logprobs < 0) kFields.fail("top_logprobs", "must be >= 0, got " + std::to_string(r.top_logprobs));
    models::validate(r.sampling);
  }

  void work(models::GPTGraphDecoder& dec) {
    for (;;) {
      Job job;
      queue_.pop(job);
      if (!job.done) return;
      std::exception_ptr error;
      GenerateResult result;
      try {
        // The server has stopped serving (its HTTP drain is over): whoever waits is answered, not
        // made to wait for up to max_len tokens.
        if (stopping_) throw HttpError(503, "model '" + name_ + "' is shutting down");
        if (const auto now = Clock::now(); now > job.deadline)
          throw HttpError(504, "model '" + name_ + "': request timeout expired after " +
                                   std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(now - job.enqueued).count()) +
                                   " us in the generate queue");
        result = run(dec, job.req, job.on_piece);
      } catch (...) {
        error = std::current_exception();
      }
      try {
        job.done(error, std::move(result));
      } catch (const std::exception& e) {
        spdlog::error("model '{}': a generate completion callback threw: {}", name_, e.what());
      }
    }
  }

  // The prompt runs through the decode graphs one token at a time (no eager op: serving never
  // records into a capture another thread may have open), then one step per new token.
  static GenerateResult run(models::GPTGraphDecoder& dec, const GenerateRequest& req, const PieceCallback& on_piece) {
    NoGradGuard no_grad;
    GenerateResult r;
    const std::vector<int64_t> prompt = models::encode_bytes(req.text_input);
    r.prompt_tokens = static_cast<int64_t>(prompt.size());
    dec.reset();
    Tensor logits;
    for (int64_t t : prompt) logits = dec.step(Tensor::from_indices({t}, {1}));
    models::Sampler sampler(req.sampling);
    GeneratedText text(req.stop);
    auto emit = [&](std::string piece) {
      if (piece.empty()) return true;
      r.text += piece;
      return on_piece(piece);
    };
    for (int64_t i = 0; i < req.max_tokens && !text.stopped(); ++i) {
      const std::vector<float> last = logits.to_vector();
      r.tokens.push_back(sampler.next(last));
      if (req.on_token) req.on_token(models::token_logprobs(last, r.tokens.back(), req.top_logprobs));
      if (!emit(text.push(static_cast<char>(r.tokens.back())))) {
        r.finish_reason = "cancelled";
        return r;
      }
      if (i + 1 < req.max_tokens && !text.stopped()) logits = dec.step(Tensor::from_indices({r.tokens.back()}, {1}));
    }
    const bool cancelled = !emit(text.finish());
    r.finish_reason = cancelled ? "cancelled" : text.stopped() ? "stop" : "length";
    return r;
  }

  std::unique_ptr<models::GPT> gpt_;
  std::string name_;
  size_t max_queue_;
  uint64_t default_timeout_us_;
  bool allow_timeout_override_;
  std::vector<std::unique_ptr<models::GPTGraphDecoder>> decoders_;
  tbb::concurrent_bounded_queue<Job> queue_;  // waiting generations, at most max_queue_ (0: unbounded)
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
};

}  // namespace

GenerateRequest parse_generate_request(std::string_view body) {
  const json j = read_json(body, kGenerateJsonLimits, "the generate request body");
  if (!j.is_object())
    throw InvalidArgument("generate request: the body must be a JSON object, got " + RequestFields::shown(j));
  GenerateRequest r;
  bool has_text = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "id") {
      r.id = kFields.string(v, "id");
    } else if (key == "text_input") {
      r.text_input = kFields.string(v, "text_input");
      has_text = true;
    } else if (key == "parameters") {
      parse_parameters(v, r);
    } else {
      kFields.fail(key, "is not a generate request field (id, text_input, parameters)");
    }
  }
  if (!has_text) kFields.fail("text_input", "is missing");
  if (r.text_input.empty()) kFields.fail("text_input", "is empty (the model needs at least one token)");
  return r;
}

GenerateResult TextGenerator::generate(const GenerateRequest& req, const PieceCallback& on_piece) {
  std::promise<GenerateResult> promise;
  std::future<GenerateResult> result = promise.get_future();
  submit(req, on_piece, [&promise](std::exception_ptr error, GenerateResult r) {
    if (error) promise.set_exception(error);
    else promise.set_value(std::move(r));
  });
  return result.get();
}

bool is_text_generation_model(const models::PackageSpec& spec) {
  return spec.graph.is_object() && spec.graph.value("type", "") == "zoo" && spec.graph.value("model", "") == "gpt";
}

std::shared_ptr<TextGenerator> make_gpt_generator(const std::filesystem::path& version_dir, const ModelConfig& config,
                                                  const models::PredictorOptions& opt) {
  std::unique_ptr<models::Module> module;
  const models::ModelPackage p = models::load_package(version_dir, &module);
  auto* gpt = dynamic_cast<models::GPT*>(module.get());
  if (!is_text_generation_model(p.spec) || !gpt)
    throw InvalidArgument((version_dir / "model.json").string() +
                          ": not a text generation model (the generate endpoints serve the GPT zoo model, graph "
                          "{\"type\": \"zoo\", \"model\": \"gpt\"})");
  module.release();
  std::unique_ptr<models::GPT> owned(gpt);
  owned->to(opt.device);
  owned->eval();
  return std::make_shared<GptGenerator>(std::move(owned), config);
}

}  // namespace hg::server
