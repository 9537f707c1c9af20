#include "models/init.h"

#include <cmath>

namespace hg::models::init {

Tensor uniform(std::mt19937_64& rng, const Shape& shape, float bound) {
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (auto& x : v) x = u(rng);
  return Tensor::from_vector(v, shape);
}

Tensor normal(std::mt19937_64& rng, const Shape& shape, float stddev) {
  std::normal_distribution<float> n(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (auto& x : v) x = n(rng);
  return Tensor::from_vector(v, shape);
}

float fan_in_bound(int64_t fan_in) { return fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f; }

}  // namespace hg::models::init
