#include "training/sgd.h"

#include "engine/error.h"

namespace hg::training {

SGD::SGD(std::vector<std::pair<std::string, Tensor*>> params, SGDOptions opt) : params_(std::move(params)), opt_(opt) {
  if (opt.lr <= 0 || opt.momentum < 0 || opt.weight_decay < 0)
    throw InvalidArgument("SGD: lr must be positive, momentum and weight_decay non-negative");
  for (auto& [name, p] : params_) bufs_.emplace_back(name, std::vector<float>());
}

void SGD::step() {
  const float lr = static_cast<float>(opt_.lr), mom = static_cast<float>(opt_.momentum),
              wd = static_cast<float>(opt_.weight_decay);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = *params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.shape() != p.shape())
      throw ShapeError("SGD: gradient of '" + params_[i].first + "' has shape " + shape_str(g.shape()) +
                       ", parameter " + shape_str(p.shape()));
    const float* gd = g.contiguous().data<float>();  // materializes and waits for the device
    float* pd = p.data<float>();
    auto& buf = bufs_[i].second;
    const int64_t n = p.numel();
    const bool first = buf.empty();
    if (mom != 0 && first) buf.resize(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      float d = gd[k] + wd * pd[k];
      if (mom != 0) {
        buf[k] = first ? d : mom * buf[k] + d;
        d = buf[k];
      }
      pd[k] -= lr * d;
    }
  }
}

void SGD::zero_grad() {
  for (auto& [name, p] : params_) p->zero_grad();
}

}  // namespace hg::training
