#include "server/generate_scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/autograd.h"
#include "engine/error.h"
#include "models/sampling.h"
#include "models/tokenizer.h"
#include "server/generate_text.h"
#include "server/http_error.h"
#include "server/request_fields.h"

namespace hg::server {

struct GenerateScheduler::Sequence {
  Sequence(GenerateRequest r, PieceCallback piece, GenerateDone d, Clock::time_point now, Clock::time_point until)
      : req(std::move(r)), on_piece(std::move(piece)), done(std::move(d)), enqueued(now), deadline(until),
        tokens(models::encode_bytes(req.text_input)), sampler(req.sampling), text(req.stop) {
    result.prompt_tokens = static_cast<int64_t>(tokens.size());
  }
  GenerateRequest req;
  PieceCallback on_piece;
  GenerateDone done;
  Clock::time_point enqueued, deadline;
  std::vector<int64_t> tokens;  // the prompt, then every generated token
  int64_t computed = 0;         // positions whose keys and values are in the pool
  std::vector<int32_t> blocks;
  models::Sampler sampler;
  GeneratedText text;
  GenerateResult result;
  std::exception_ptr error;
  uint64_t order = 0;  // admission number
  Clock::time_point last_token;  // when the previous token was generated (metrics)
};

namespace {

std::vector<int64_t> powers_of_two_up_to(int64_t max) {
  std::vector<int64_t> b;
  for (int64_t n = 1; n < max; n *= 2) b.push_back(n);
  b.push_back(max);
  return b;
}

const RequestFields kFields("generate request");

}  // namespace

GenerateScheduler::GenerateScheduler(std::shared_ptr<models::GPT> gpt, const SchedulerOptions& opt)
    : gpt_(std::move(gpt)), opt_(opt) {
  const int64_t max_len = gpt_->config().max_len;
  if (opt_.max_batch < 1 || opt_.block_size < 1 || opt_.max_batch_total_tokens < 0 || opt_.max_step_tokens < 0)
    throw InvalidArgument("model '" + opt_.name + "': max_batch and block_size must be >= 1");
  // Every running sequence's token fits a step; a step holds at most max_len tokens.
  // 128 by default: with 256, the steps that carry 256 prompt tokens made the inter-token p99 3.4x
  // its p50 at 32 sequences (bench/RESULTS.md); 128 keeps it at 2.1x for 3% less throughput.
  opt_.max_step_tokens =
      std::clamp(opt_.max_step_tokens ? opt_.max_step_tokens : 128, opt_.max_batch, std::max(max_len, opt_.max_batch));
  const int64_t tokens = std::max(opt_.max_batch_total_tokens ? opt_.max_batch_total_tokens : opt_.max_batch * max_len, max_len);
  const models::KVBlockOptions kv =
      gpt_->kv_options(opt_.block_size, (tokens + opt_.block_size - 1) / opt_.block_size, opt_.kv_dtype);
  size_t graph_memory = opt_.graph_memory;
  if (opt_.memory) {
    const double bytes = std::min(models::kv_pool_bytes(kv), static_cast<double>(SIZE_MAX / 2));
    opt_.memory->charge("generation.max_batch_total_tokens (a KV cache of " + std::to_string(tokens) + " tokens in " +
                            dtype_name(opt_.kv_dtype) + ")",
                        static_cast<size_t>(bytes));
    const size_t left = opt_.memory->left();
    if (left != SIZE_MAX) graph_memory = graph_memory ? std::min(graph_memory, left) : std::max<size_t>(left, 1);
  }
  pool_ = std::make_unique<models::KVBlockPool>(kv);
  decoder_ = std::make_unique<models::PagedDecoder>(
      *gpt_, *pool_,
      models::PagedDecoderOptions{.batch_buckets = powers_of_two_up_to(opt_.max_batch),
                                  .max_step_tokens = opt_.max_step_tokens,
                                  .memory_budget = graph_memory});
  decoder_->warmup();
  if (opt_.memory) opt_.memory->charge("generation's step graphs", decoder_->graph_bytes());
  opt_.max_batch = static_cast<int64_t>(decoder_->max_batch());  // what the memory budget left
  opt_.max_step_tokens = decoder_->max_step_tokens();
  stats_.kv_blocks_total = pool_->total_blocks();
  stats_.captured_graphs = decoder_->captured_graphs();
  stats_.graph_bytes = decoder_->graph_bytes();
  for (const models::StepGraphInfo& g : decoder_->grid()) stats_.graphs_from_cache += g.from_cache;
  stats_.max_batch = opt_.max_batch;
  stats_.max_step_tokens = opt_.max_step_tokens;
  if (opt_.max_queue == 0) opt_.max_queue = 8 * static_cast<size_t>(opt_.max_batch);
  thread_ = std::thread([this] { loop(); });
}

GenerateScheduler::~GenerateScheduler() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GenerateScheduler::check(const GenerateRequest& r) const {
  const int64_t max_len = gpt_->config().max_len, p = static_cast<int64_t>(r.text_input.size());
  if (p == 0) kFields.fail("text_input", "is empty (the model needs at least one token)");
  if (p >= max_len)
    kFields.fail("text_input", "is " + std::to_string(p) + " tokens (bytes); model '" + opt_.name + "' takes at most " +
                                std::to_string(max_len - 1) + " (max_len " + std::to_string(max_len) + " with one new token)");
  if (r.max_tokens < 1) kFields.fail("parameters.max_tokens", "must be >= 1, got " + std::to_string(r.max_tokens));
  if (r.max_tokens > max_len - p)
    kFields.fail("parameters.max_tokens", "is " + std::to_string(r.max_tokens) + ": the prompt's " + std::to_string(p) +
                                           " tokens + max_tokens exceed model '" + opt_.name + "''s max_len " +
                                           std::to_string(max_len) + " (at most " + std::to_string(max_len - p) + ")");
  if (r.top_logprobs < 0) kFields.fail("top_logprobs", "must be >= 0, got " + std::to_string(r.top_logprobs));
  models::validate(r.sampling);
}

void GenerateScheduler::submit_group(std::vector<Submission> group) {
  for (const Submission& g : group) check(g.req);
  const auto now = Clock::now();
  std::vector<SeqPtr> seqs;
  for (Submission& g : group) {
    // A request's timeout may only lower the model's default (0: none).
    uint64_t timeout_us = opt_.default_timeout_us;
    if (g.req.timeout_us > 0 && opt_.allow_timeout_override)
      timeout_us = timeout_us == 0 ? g.req.timeout_us : std::min(timeout_us, g.req.timeout_us);
    constexpr uint64_t kLongest = uint64_t{1} << 50;  // about 35 years: the deadline cannot overflow
    const auto deadline =
        timeout_us > 0 ? now + std::chrono::microseconds(std::min(timeout_us, kLongest)) : Clock::time_point::max();
    seqs.push_back(std::make_unique<Sequence>(std::move(g.req), std::move(g.on_piece), std::move(g.done), now, deadline));
  }
  {
    std::lock_guard lk(mu_);
    if (stopping_) throw HttpError(503, "model '" + opt_.name + "' is shutting down");
    if (waiting_.size() + seqs.size() > opt_.max_queue)
      throw HttpError(503, "model '" + opt_.name + "': the generate queue is full (" + std::to_string(waiting_.size()) +
                               " sequences waiting, " + std::to_string(seqs.size()) + " more asked, max_queue_size " +
                               std::to_string(opt_.max_queue) + ")");
    for (SeqPtr& s : seqs) waiting_.push_back(std::move(s));
  }
  cv_.notify_one();
}

size_t GenerateScheduler::queue_depth() const {
  std::lock_guard lk(mu_);
  return waiting_.size();
}

GenerationStats GenerateScheduler::stats() const {
  std::lock_guard lk(mu_);
  GenerationStats s = stats_;
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.kv_blocks_free = pool_->free_blocks();
  return s;
}

void GenerateScheduler::loop() {
  NoGradGuard no_grad;
  for (;;) {
    std::deque<SeqPtr> refused;
    bool stop = false;
    {
      std::unique_lock lk(mu_);
      stats_.running = static_cast<int64_t>(running_.size());
      cv_.wait(lk, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      stop = stopping_;
      if (stop) refused.swap(waiting_);  // the server has stopped serving: answer, do not make them wait
    }
    for (SeqPtr& s : refused)
      retire(std::move(s), std::make_exception_ptr(HttpError(503, "model '" + opt_.name + "' is shutting down")));
    if (stop && running_.empty()) return;
    drop_departed();
    step();
  }
}

// Deadlines at token granularity: a running request past its deadline ends before the step; one
// whose client left ends without its next token.
void GenerateScheduler::drop_departed() {
  const auto now = Clock::now();
  std::vector<SeqPtr> kept;
  for (SeqPtr& s : running_) {
    const bool late = now > s->deadline, gone = s->req.is_cancelled();
    if (!late && !gone) {
      kept.push_back(std::move(s));
      continue;
    }
    if (gone) {
      s->result.finish_reason = "cancelled";
      retire(std::move(s), nullptr);
      continue;
    }
    const std::string why = "model '" + opt_.name + "': the request's deadline passed after " +
                            std::to_string(s->result.tokens.size()) + " generated tokens";
    retire(std::move(s), std::make_exception_ptr(HttpError(504, why)));
  }
  running_ = std::move(kept);
}

void GenerateScheduler::expire_waiting() {
  std::vector<SeqPtr> expired, gone;
  {
    std::lock_guard lk(mu_);
    const auto now = Clock::now();
    std::deque<SeqPtr> kept;  // one pass: a burst of departures costs linear time
    for (SeqPtr& s : waiting_) {
      if (s->req.is_cancelled()) gone.push_back(std::move(s));  // the client left: never run (or run again)
      else if (now > s->deadline && s->order == 0) expired.push_back(std::move(s));  // never started: 504
      else kept.push_back(std::move(s));
    }
    waiting_.swap(kept);
  }
  for (SeqPtr& s : gone) {
    s->result.finish_reason = "cancelled";
    retire(std::move(s), nullptr);
  }
  for (SeqPtr& s : expired) {
    const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - s->enqueued).count();
    retire(std::move(s), std::make_exception_ptr(HttpError(504, "model '" + opt_.name + "': request timeout expired after " +
                                                                    std::to_string(waited) + " us in the generate queue")));
  }
}

// One step: every decoding sequence's next token, then chunks of the prompts being prefilled
// (the running ones first, then waiting ones admitted in arrival order), up to max_step_tokens.
void GenerateScheduler::step() {
  expire_waiting();
  // Decoding sequences need the slot of their next position; out of blocks, the newest go back.
  for (size_t i = 0; i < running_.size();) {
    Sequence& s = *running_[i];
    const bool decoding = static_cast<int64_t>(s.tokens.size()) - s.computed == 1;
    if (!decoding || static_cast<int64_t>(s.blocks.size()) >= pool_->blocks_for(s.computed + 1) ||
        pool_->allocate(1, s.blocks)) {
      ++i;
      continue;
    }
    preempt_newest();
    i = 0;  // the vector changed; the pool holds one max_len sequence, so this ends
  }
  // A sequence whose client has not read what it was sent sits this step out.
  std::vector<bool> held(running_.size());
  bool any_held = false;
  for (size_t i = 0; i < running_.size(); ++i) any_held |= held[i] = running_[i]->req.is_held_back();
  int64_t budget = opt_.max_step_tokens;
  std::vector<int64_t> take(running_.size(), 0);
  for (size_t i = 0; i < running_.size(); ++i)
    if (!held[i] && static_cast<int64_t>(running_[i]->tokens.size()) - running_[i]->computed == 1) take[i] = 1, --budget;
  // A chunk of a prompt: as much as the budget and the free blocks allow (0: it waits a step).
  auto chunk = [&](Sequence& s) -> int64_t {
    int64_t n = std::min(static_cast<int64_t>(s.tokens.size()) - s.computed, budget);
    if (n <= 0) return 0;
    const int64_t have = static_cast<int64_t>(s.blocks.size()), need = pool_->blocks_for(s.computed + n);
    if (need > have && !pool_->allocate(need - have, s.blocks)) {
      n = std::min(n, (have + pool_->free_blocks()) * opt_.block_size - s.computed);
      if (n <= 0 || !pool_->allocate(pool_->blocks_for(s.computed + n) - have, s.blocks)) return 0;
    }
    budget -= n;
    return n;
  };
  for (size_t i = 0; i < running_.size(); ++i)
    if (take[i] == 0 && !held[i]) take[i] = chunk(*running_[i]);
  {
    std::lock_guard lk(mu_);
    while (budget > 0 && !waiting_.empty() && static_cast<int64_t>(running_.size()) < opt_.max_batch) {
      Sequence& s = *waiting_.front();
      const int64_t n = chunk(s);
      if (n == 0) break;  // first come, first served: later requests wait behind it
      s.order = ++admitted_;
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      take.push_back(n);
    }
  }
  std::vector<models::PagedRow> rows;
  std::vector<size_t> in_step;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (take[i] == 0) continue;
    const Sequence& s = *running_[i];
    rows.push_back({.tokens = {s.tokens.begin() + s.computed, s.tokens.begin() + s.computed + take[i]},
                    .start = s.computed,
                    .blocks = &s.blocks});
    in_step.push_back(i);
  }
  if (rows.empty()) {
    if (any_held) {  // every runnable sequence waits for its reader: look again shortly (or on a submit)
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(2));
      return;
    }
    // Prompts waiting for blocks that only they hold: the newest gives its own back.
    if (!running_.empty()) preempt_newest();
    return;
  }
  std::vector<float> logits;
  const auto t0 = Clock::now();
  try {
    logits = decoder_->step(rows);
  } catch (...) {
    std::vector<SeqPtr> all = std::move(running_);
    running_.clear();
    return fail_step(all, std::current_exception());
  }
  if (opt_.hooks.on_step) opt_.hooks.on_step(static_cast<int64_t>(rows.size()), Clock::now() - t0);
  {
    std::lock_guard lk(mu_);
    ++stats_.steps;
    stats_.step_rows += rows.size();
    for (const auto& r : rows) stats_.step_tokens += r.tokens.size();
  }
  const int64_t vocab = gpt_->config().vocab;
  std::vector<bool> done(running_.size(), false);
  for (size_t k = 0; k < in_step.size(); ++k) {
    Sequence& s = *running_[in_step[k]];
    s.computed += take[in_step[k]];
    if (s.computed < static_cast<int64_t>(s.tokens.size())) continue;  // a prompt's chunk: no token yet
    done[in_step[k]] = !accept(s, logits.data() + static_cast<int64_t>(k) * vocab);
  }
  std::vector<SeqPtr> still;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (done[i]) retire(std::move(running_[i]), nullptr);
    else still.push_back(std::move(running_[i]));
  }
  running_ = std::move(still);
}

void GenerateScheduler::preempt_newest() {
  const auto newest = std::max_element(running_.begin(), running_.end(),
                                       [](const SeqPtr& a, const SeqPtr& b) { return a->order < b->order; });
  SeqPtr s = std::move(*newest);
  running_.erase(newest);
  pool_->release(s->blocks);
  s->computed = 0;  // recomputed from its tokens when admitted again
  std::lock_guard lk(mu_);
  ++stats_.preemptions;
  waiting_.push_front(std::move(s));
}

bool GenerateScheduler::accept(Sequence& s, const float* logits) {
  int64_t token = 0;
  const std::vector<float> row(logits, logits + gpt_->config().vocab);
  try {
    token = s.sampler.next(row);
    if (s.req.on_token) s.req.on_token(models::token_logprobs(row, token, s.req.top_logprobs));  // before its text
  } catch (...) {
    s.error = std::current_exception();
    return false;
  }
  s.tokens.push_back(token);
  s.result.tokens.push_back(token);
  const auto now = Clock::now();
  if (opt_.hooks.on_token) opt_.hooks.on_token(s.result.tokens.size() == 1, now - (s.result.tokens.size() == 1 ? s.enqueued : s.last_token));
  s.last_token = now;
  {
    std::lock_guard lk(mu_);
    ++stats_.tokens;
  }
  auto emit = [&](std::string piece) {
    if (piece.empty()) return true;
    s.result.text += piece;
    try {
      return s.on_piece(piece);
    } catch (const std::exception& e) {
      spdlog::error("model '{}': a generate piece callback threw: {}", opt_.name, e.what());
      return false;
    }
  };
  if (!emit(s.text.push(static_cast<char>(token)))) {
    s.result.finish_reason = "cancelled";
    return false;
  }
  if (!s.text.stopped() && static_cast<int64_t>(s.result.tokens.size()) < s.req.max_tokens) return true;
  s.result.finish_reason = !emit(s.text.finish()) ? "cancelled" : s.text.stopped() ? "stop" : "length";
  return false;
}

void GenerateScheduler::retire(SeqPtr s, std::exception_ptr error) {
  pool_->release(s->blocks);
  if (!error) error = s->error;
  {
    std::lock_guard lk(mu_);
    if (error) ++stats_.failed;
    else if (s->result.finish_reason == "cancelled") ++stats_.cancelled;
    else ++stats_.finished;
  }
  try {
    s->done(error, error ? GenerateResult{} : std::move(s->result));
  } catch (const std::exception& e) {
    spdlog::error("model '{}': a generate completion callback threw: {}", opt_.name, e.what());
  }
}

void GenerateScheduler::fail_step(std::vector<SeqPtr>& seqs, std::exception_ptr error) {
  for (SeqPtr& s : seqs)
    if (s) retire(std::move(s), error);
}

}  // namespace hg::server
