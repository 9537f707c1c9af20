// Choosing the next token from a language model's logits: greedy, or sampling with
// temperature, top-k and top-p (nucleus) filtering from a seeded, reproducible stream.
//
//   hg::models::SamplingOptions o;
//   o.greedy = false; o.temperature = 0.8; o.top_k = 40; o.top_p = 0.95; o.seed = 7;
//   hg::models::Sampler sampler(o);                 // throws hg::InvalidArgument for bad options
//   int64_t token = sampler.next(logits);           // logits: std::vector<float> over the vocabulary
//   auto p = hg::models::sampling_distribution(logits, o);   // what next() draws from
//   auto lp = hg::models::token_logprobs(logits, token, 5);  // token's logprob and the 5 likeliest
#pragma once
#include <cstdint>
#include <vector>

#include "engine/generator.h"

namespace hg::models {

struct SamplingOptions {
  bool greedy = true;        // argmax (the first of tied maxima); the fields below are ignored
  double temperature = 1.0;  // logits are divided by it; > 0
  int64_t top_k = 0;         // keep the k most likely tokens; 0 keeps all
  double top_p = 1.0;        // then keep the smallest set of most likely tokens whose probability
                             // adds up to >= top_p (in (0, 1]; sums within 1e-9 of it count)
  uint64_t seed = 0;         // the stream of random draws
};

// A seed from std::random_device, for sampled requests that give none.
uint64_t random_seed();

// Throws hg::InvalidArgument naming the field when the options are out of range.
void validate(const SamplingOptions& o);

// The first index of the largest logit. Throws hg::InvalidArgument for empty logits or a NaN.
int64_t argmax_token(const std::vector<float>& logits);

// Probabilities over the vocabulary that sampling draws from: softmax(logits / temperature)
// restricted to the top-k tokens, then to the top-p set, renormalised; other tokens get 0.
// Ties in probability are ordered by token index (lower first). With greedy set: one-hot on
// argmax_token. Non-finite logits: NaN throws hg::InvalidArgument; +inf is certain (the +inf
// tokens among the top-k share the probability equally, top_p and temperature do not apply);
// -inf has probability 0, and all -inf throws InvalidArgument.
std::vector<double> sampling_distribution(const std::vector<float>& logits, const SamplingOptions& o);

struct TokenLogprob {
  int64_t token = 0;
  double logprob = 0;  // natural log; -inf for a probability of 0
};

struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // the most likely tokens, most likely first (ties: lower index first)
};

// The model's own log-probabilities (log_softmax of the logits: no temperature, top-k or top-p,
// whatever chose the token) of `token` and of the `top` most likely tokens, so that for greedy
// decoding top[0] is the chosen token. Non-finite logits as in sampling_distribution. Throws
// hg::InvalidArgument for a token outside the logits or top < 0.
TokenLogprobs token_logprobs(const std::vector<float>& logits, int64_t token, int64_t top);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& o);
  int64_t next(const std::vector<float>& logits);  // one draw (greedy: argmax, no draw)
  const SamplingOptions& options() const { return o_; }

 private:
  SamplingOptions o_;
  Generator gen_;
};

}  // namespace hg::models
