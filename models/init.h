// Seeded parameter initialisers for the layers (PyTorch's distributions, our generator).
//
//   std::mt19937_64 rng(seed);
//   Tensor w = hg::models::init::uniform(rng, {out, in}, 1.0f / std::sqrt(float(in)));   // U(-b, b)
//   Tensor e = hg::models::init::normal(rng, {vocab, dim});                              // N(0, 1)
//   hg::models::init::normal_(w, rng, 0.02f);                                            // in place
//   {
//     hg::models::init::SkipInit skip;   // weights are loaded next: no values are drawn
//     auto net = hg::models::zoo::build(spec, file, elements);
//     net->load_state_dict(weights, true, hg::models::LoadMode::Adopt);
//   }
#pragma once
#include <random>

#include "engine/tensor.h"

namespace hg::models::init {

// While one is alive on this thread, uniform() and normal() return uninitialised tensors and
// normal_() does nothing: for modules whose every parameter is loaded right after construction
// (drawing ResNet-18's 11 M values twice took longer than the rest of its start).
class SkipInit {
 public:
  SkipInit();
  ~SkipInit();
  SkipInit(const SkipInit&) = delete;
  SkipInit& operator=(const SkipInit&) = delete;
};
bool skipping();

Tensor uniform(std::mt19937_64& rng, const Shape& shape, float bound);
Tensor normal(std::mt19937_64& rng, const Shape& shape, float stddev = 1.0f);
// Overwrites the F32 tensor `t` with N(0, stddev) draws.
void normal_(Tensor& t, std::mt19937_64& rng, float stddev);
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the bound PyTorch's Linear and Conv2d use (0 if fan_in is 0).
float fan_in_bound(int64_t fan_in);

}  // namespace hg::models::init
