// The model zoo.
//
//   auto net = hg::models::zoo::mlp({64, 128, 10}, /*seed=*/0);   // Linear-ReLU-Linear
#pragma once
#include <memory>
#include <vector>

#include "models/module.h"

namespace hg::models::zoo {

// Linear layers of the given sizes with ReLU between them (none after the last).
std::unique_ptr<Sequential> mlp(const std::vector<int64_t>& sizes, uint64_t seed = 0);

}  // namespace hg::models::zoo
