// Continuous (iteration-level) batching for the generate endpoints: one scheduler thread per
// model runs step after step; each step holds every running sequence's next token plus chunks of
// prompts being prefilled, as one flat list of tokens (vLLM's flattened step: a prompt never
// stops the others decoding), up to max_step_tokens; requests are admitted into the running batch
// between steps, and finished, cancelled and expired sequences leave at once. Over a paged KV
// cache (models/kv_blocks.h) and captured graphs (models/gpt_paged.h).
//
//   auto gen = std::make_shared<GenerateScheduler>(gpt, SchedulerOptions{.max_batch = 32});   // shared_ptr<GPT> on an HPU
//   gen->submit(request, on_piece, done);        // as any TextGenerator (server/generate.h)
//   GenerationStats s = gen->stats();            // steps, rows, tokens, blocks, preemptions, ...
//
// Admission is first come, first served: the oldest waiting request enters when a running slot
// (max_batch), room in the step's token budget and the blocks for its first chunk are free
// (later ones wait behind it); a long prompt is prefilled over several steps. A running sequence
// gets a new block when it crosses a block boundary; when none is free, the most recently
// admitted running sequence is preempted: its blocks are freed and it goes back to the front of
// the queue, to be prefilled again from its prompt and the tokens it has generated (recompute),
// its sampler and text state kept, so its client sees one uninterrupted stream. A request that
// fits the limits never fails for lack of blocks: the pool always holds one sequence of max_len.
// A request whose client left (GenerateRequest::cancelled) is dropped before admission and
// between steps, so departed clients cost no step tokens.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "models/gpt.h"
#include "models/gpt_paged.h"
#include "models/kv_blocks.h"
#include "server/generate.h"
#include "server/memory_budget.h"

namespace hg::server {

struct SchedulerOptions {
  std::string name = "gpt";         // the model, in errors
  int64_t max_batch = 32;           // sequences decoding in one step (a power-of-two bucket grid up to it)
  // Tokens one step runs (vLLM's max_num_batched_tokens): every decoding sequence's next token,
  // then chunks of prompts; 0: 128. At least max_batch, at most max_len.
  int64_t max_step_tokens = 0;
  int64_t block_size = 16;          // positions per KV block
  // The KV cache's capacity in tokens (rounded up to blocks); 0: max_batch * max_len. At least max_len.
  int64_t max_batch_total_tokens = 0;
  DType kv_dtype = DType::F32;      // keys and values stored as F32 or BF16 (models/kv_blocks.h)
  // Bytes the captured step graphs may take (arenas and constants; 0: no limit): the grid's larger
  // token buckets are left out past it, which lowers max_step_tokens (and max_batch with it).
  size_t graph_memory = 0;
  // The load's share of the server's model memory: the KV cache is charged before it is made, the
  // step graphs are captured within what is left and charged after. Null: no budget.
  std::shared_ptr<MemoryBudget::Lease> memory;
  size_t max_queue = 0;             // waiting sequences; 0: 8 x max_batch; beyond: 503
  uint64_t default_timeout_us = 0;  // 0: none
  bool allow_timeout_override = true;
  GenerationHooks hooks;
};

class GenerateScheduler final : public TextGenerator {
 public:
  // The model (on its HPU, in eval mode, its weights unchanged while the scheduler lives: they are
  // frozen into its graphs); builds the pool and captures the whole grid before returning.
  GenerateScheduler(std::shared_ptr<models::GPT> gpt, const SchedulerOptions& opt);
  // Waiting requests are answered 503; running ones finish.
  ~GenerateScheduler() override;

  void submit_group(std::vector<Submission> group) override;
  size_t queue_depth() const override;
  GenerationStats stats() const override;
  int64_t context_length() const override { return gpt_->config().max_len; }
  std::vector<models::StepGraphInfo> grid() const { return decoder_->grid(); }  // what warm-up captured

 private:
  using Clock = std::chrono::steady_clock;
  struct Sequence;
  using SeqPtr = std::unique_ptr<Sequence>;

  void check(const GenerateRequest& r) const;
  void loop();
  void expire_waiting();  // drops waiting requests past their deadline (504) or whose client left
  void drop_departed();   // running sequences whose client left or whose deadline passed
  void step();
  bool grow(Sequence& s);  // a block for the next position; preempts others when none is free
  void preempt_newest();
  // The token sampled for `s` from `logits`; false when `s` is done (then retired).
  bool accept(Sequence& s, const float* logits);
  void retire(SeqPtr s, std::exception_ptr error);
  void fail_step(std::vector<SeqPtr>& seqs, std::exception_ptr error);

  std::shared_ptr<models::GPT> gpt_;
  SchedulerOptions opt_;
  std::unique_ptr<models::KVBlockPool> pool_;
  std::unique_ptr<models::PagedDecoder> decoder_;
  std::vector<SeqPtr> running_;  // the scheduler thread's only
  uint64_t admitted_ = 0;        // admission counter (preemption picks the newest)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SeqPtr> waiting_;
  bool stopping_ = false;
  GenerationStats stats_;  // under mu_
  std::thread thread_;
};

}  // namespace hg::server
