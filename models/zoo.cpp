#include "models/zoo.h"

#include "engine/error.h"

namespace hg::models::zoo {

std::unique_ptr<Sequential> mlp(const std::vector<int64_t>& sizes, uint64_t seed) {
  if (sizes.size() < 2) throw InvalidArgument("zoo::mlp needs at least an input and an output size");
  auto net = std::make_unique<Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (sizes[i] <= 0 || sizes[i + 1] <= 0) throw InvalidArgument("zoo::mlp: layer sizes must be positive");
    net->add(std::make_shared<Linear>(sizes[i], sizes[i + 1], seed + i));
    if (i + 2 < sizes.size()) net->add(std::make_shared<ReLU>());
  }
  return net;
}

}  // namespace hg::models::zoo
