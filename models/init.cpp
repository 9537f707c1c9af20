#include "models/init.h"

#include <cmath>

namespace hg::models::init {

namespace {
thread_local int t_skip_depth = 0;

template <class Dist>
Tensor draw(std::mt19937_64& rng, const Shape& shape, Dist d) {
  if (skipping()) return Tensor::empty(shape);
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (auto& x : v) x = d(rng);
  return Tensor::from_vector(v, shape);
}
}  // namespace

SkipInit::SkipInit() { ++t_skip_depth; }
SkipInit::~SkipInit() { --t_skip_depth; }
bool skipping() { return t_skip_depth > 0; }

Tensor uniform(std::mt19937_64& rng, const Shape& shape, float bound) {
  return draw(rng, shape, std::uniform_real_distribution<float>(-bound, bound));
}

Tensor normal(std::mt19937_64& rng, const Shape& shape, float stddev) {
  return draw(rng, shape, std::normal_distribution<float>(0.0f, stddev));
}

void normal_(Tensor& t, std::mt19937_64& rng, float stddev) {
  if (skipping()) return;
  t.copy_from(normal(rng, t.shape(), stddev));
}

float fan_in_bound(int64_t fan_in) { return fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f; }

}  // namespace hg::models::init
