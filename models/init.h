// Seeded parameter initialisers for the layers (PyTorch's distributions, our generator).
//
//   std::mt19937_64 rng(seed);
//   Tensor w = hg::models::init::uniform(rng, {out, in}, 1.0f / std::sqrt(float(in)));   // U(-b, b)
//   Tensor e = hg::models::init::normal(rng, {vocab, dim});                              // N(0, 1)
#pragma once
#include <random>

#include "engine/tensor.h"

namespace hg::models::init {

Tensor uniform(std::mt19937_64& rng, const Shape& shape, float bound);
Tensor normal(std::mt19937_64& rng, const Shape& shape, float stddev = 1.0f);
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the bound PyTorch's Linear and Conv2d use (0 if fan_in is 0).
float fan_in_bound(int64_t fan_in);

}  // namespace hg::models::init
