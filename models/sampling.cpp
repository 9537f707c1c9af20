#include "models/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "engine/error.h"

namespace hg::models {

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
  const double top = best / o.temperature;
  double total = 0;
  for (size_t r = 0; r < keep; ++r) total += p[order[r]] = std::exp(logits[order[r]] / o.temperature - top);
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
