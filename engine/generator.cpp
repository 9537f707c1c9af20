#include "engine/generator.h"

#include <map>
#include <memory>

namespace hg {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lk(mu_);
  seed_ = seed;
  counter_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard lk(mu_);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard lk(mu_);
  return counter_;
}

void Generator::set_offset(uint64_t offset) {
  std::lock_guard lk(mu_);
  counter_ = offset;
}

uint64_t Generator::next() {
  std::lock_guard lk(mu_);
  return mix64(seed_ + ++counter_ * kGoldenGamma);
}

Generator& default_generator(Device d) {
  device_backend(d);  // validates the device
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::unique_ptr<Generator>> gens;
  std::lock_guard lk(mu);
  auto& g = gens[{static_cast<int>(d.kind), d.index}];
  if (!g) g = std::make_unique<Generator>();
  return *g;
}

void manual_seed(Device d, uint64_t seed) { default_generator(d).manual_seed(seed); }

}  // namespace hg
