#include "models/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "engine/error.h"

namespace hg::models {

uint64_t random_seed() {
  std::random_device rd;
  return rd() | (uint64_t{rd()} << 32);
}

void validate(const SamplingOptions& o) {
  if (!(o.temperature > 0) || !std::isfinite(o.temperature))
    throw InvalidArgument("sampling: temperature must be a finite number > 0, got " + std::to_string(o.temperature));
  if (o.top_k < 0) throw InvalidArgument("sampling: top_k must be >= 0 (0 keeps all tokens), got " + std::to_string(o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw InvalidArgument("sampling: top_p must be in (0, 1], got " + std::to_string(o.top_p));
}

namespace {

void check_logits(const std::vector<float>& logits) {
  if (logits.empty()) throw InvalidArgument("sampling: empty logits");
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isnan(logits[i])) throw InvalidArgument("sampling: logit " + std::to_string(i) + " is NaN");
}

}  // namespace

int64_t argmax_token(const std::vector<float>& logits) {
  check_logits(logits);
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

std::vector<double> sampling_distribution(const std::vector<float>& logits, const SamplingOptions& o) {
  validate(o);
  std::vector<double> p(logits.size(), 0.0);
  if (o.greedy) {
    p[static_cast<size_t>(argmax_token(logits))] = 1.0;
    return p;
  }
  check_logits(logits);
  std::vector<size_t> order(logits.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  size_t keep = o.top_k > 0 ? std::min(order.size(), static_cast<size_t>(o.top_k)) : order.size();
  const float best = logits[order[0]];
  if (best == -INFINITY) throw InvalidArgument("sampling: every logit is -inf");
  if (best == INFINITY) {  // +inf is certain: the kept +inf tokens share the probability (exp would give NaN)
    size_t n = 0;
    while (n < keep && logits[order[n]] == INFINITY) ++n;
    for (size_t r = 0; r < n; ++r) p[order[r]] = 1.0 / static_cast<double>(n);
    return p;
  }
  // The maximum is subtracted before the temperature divides: each exponent is <= 0 and the best
  // token's is exactly 0, so a temperature that tends to 0 (1e-310 included) gives the greedy
  // token instead of inf - inf = NaN.
  double total = 0;
  for (size_t r = 0; r < keep; ++r)
    total += p[order[r]] = std::exp((double(logits[order[r]]) - double(best)) / o.temperature);
  double cum = 0;
  for (size_t r = 0; r < keep; ++r) {
    cum += p[order[r]] / total;
    if (cum >= o.top_p - 1e-9) {
      keep = r + 1;
      break;
    }
  }
  double kept = 0;
  for (size_t r = 0; r < order.size(); ++r)
    if (r < keep) kept += p[order[r]];
    else p[order[r]] = 0;
  for (double& v : p) v /= kept;
  return p;
}

TokenLogprobs token_logprobs(const std::vector<float>& logits, int64_t token, int64_t top) {
  check_logits(logits);
  const auto n = static_cast<int64_t>(logits.size());
  if (token < 0 || token >= n)
    throw InvalidArgument("token_logprobs: token " + std::to_string(token) + " is outside the vocabulary of " + std::to_string(n));
  if (top < 0) throw InvalidArgument("token_logprobs: top must be >= 0, got " + std::to_string(top));
  const float best = *std::max_element(logits.begin(), logits.end());
  if (best == -INFINITY) throw InvalidArgument("sampling: every logit is -inf");
  std::vector<double> lp(logits.size());
  if (best == INFINITY) {  // the +inf tokens share the probability, as in sampling_distribution
    const auto certain = static_cast<double>(std::count(logits.begin(), logits.end(), INFINITY));
    for (size_t i = 0; i < lp.size(); ++i) lp[i] = logits[i] == INFINITY ? -std::log(certain) : -INFINITY;
  } else {
    double total = 0;
    for (float l : logits) total += std::exp(double(l) - best);
    const double log_total = std::log(total);
    for (size_t i = 0; i < lp.size(); ++i) lp[i] = double(logits[i]) - best - log_total;
  }
  TokenLogprobs out{{token, lp[static_cast<size_t>(token)]}, {}};
  std::vector<size_t> order(logits.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto k = static_cast<size_t>(std::min(top, n));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](size_t a, size_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
  for (size_t r = 0; r < k; ++r) out.top.push_back({static_cast<int64_t>(order[r]), lp[order[r]]});
  return out;
}

Sampler::Sampler(const SamplingOptions& o) : o_(o), gen_(o.seed) { validate(o); }

int64_t Sampler::next(const std::vector<float>& logits) {
  if (o_.greedy) return argmax_token(logits);
  const std::vector<double> p = sampling_distribution(logits, o_);
  const double u = static_cast<double>(gen_.next() >> 11) * 0x1.0p-53;  // uniform in [0, 1)
  double cum = 0;
  int64_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    cum += p[i];
    last = static_cast<int64_t>(i);
    if (u < cum) return last;
  }
  return last;  // u beyond the rounded total: the last kept token
}

}  // namespace hg::models
