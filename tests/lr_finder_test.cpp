// The learning-rate finder: the sweep, the smoothed losses, the divergence stop, Lightning's
// suggestion (against torch.gradient), and that the module, its optimizer and the generators are
// left bit for bit as they were.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/error.h"
#include "engine/generator.h"
#include "graphs/lazy.h"
#include "tests/errors.h"
#include "tests/test_env.h"
#include "tests/trainer_test_util.h"
#include "training/lr_finder.h"
#include "training/schedulers.h"

namespace hg::training {
namespace {

using test::blobs;
using test::error_of;
using test::quiet_options;
using test::TinyClassifier;
using test::weights_of;
using ::testing::HasSubstr;

class LRFinderTest : public ::testing::Test {
 protected:
  void TearDown() override { graphs::enable_lazy_mode(false); }
  std::filesystem::path dir = test::temp_dir(std::string("lrfind_") +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

// The bits of an optimizer's state: its JSON and every tensor's bytes.
std::pair<std::string, std::vector<std::vector<float>>> bits(const Optimizer& opt) {
  const StateBlob s = opt.state_dict();
  std::vector<std::vector<float>> t;
  for (const auto& [name, tensor] : s.tensors) t.push_back(tensor.to_vector());
  return {s.json.dump(), t};
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// A module whose optimizer outlives configure_optimizers (with momentum buffers from earlier
// steps) and comes with a scheduler the finder replaces.
struct Persistent {
  TinyClassifier m;
  std::shared_ptr<SGD> opt;
  explicit Persistent(double momentum = 0.9) {
    opt = std::make_shared<SGD>(m.net->named_parameters(), SGDOptions{.lr = 0.05, .momentum = momentum});
    m.make_optimizers = [this](TinyClassifier&) {
      return std::vector<OptimizerConfig>{{.optimizer = opt, .scheduler = std::make_shared<StepLR>(*opt, 3)}};
    };
  }
};

TEST_F(LRFinderTest, SweepsSuggestsInRangeAndRestoresEverything) {
  Persistent p;
  const DataLoader data(blobs(64, 1), {.batch_size = 8, .shuffle = true, .seed = 3});
  Trainer warm(quiet_options(dir, {.max_steps = 5, .enable_checkpointing = false}));
  warm.fit(p.m, data);  // momentum buffers, a moved lr
  manual_seed(Device::cpu(), 77);
  (void)default_generator(Device::cpu()).next();
  const auto weights = weights_of(p.m.module());
  const auto opt_bits = bits(*p.opt);
  const uint64_t seed = default_generator(Device::cpu()).seed(), offset = default_generator(Device::cpu()).offset();

  Trainer trainer(quiet_options(dir, {.max_epochs = 3}));
  const LRFinderResult r = lr_find(trainer, p.m, data, {.min_lr = 1e-4, .max_lr = 1.0, .num_training = 40});
  ASSERT_EQ(r.lrs.size(), r.losses.size());
  EXPECT_FALSE(r.diverged);
  ASSERT_EQ(r.lrs.size(), 40u);
  for (size_t k = 0; k < r.lrs.size(); ++k)  // the exponential sweep, as Lightning's _ExponentialLR
    EXPECT_NEAR(r.lrs[k], 1e-4 * std::pow(1.0 / 1e-4, static_cast<double>(k) / 40.0), 1e-12 * r.lrs[k]) << k;
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));
  const auto s = r.suggestion();
  ASSERT_TRUE(s.has_value());
  EXPECT_GE(*s, 1e-4);
  EXPECT_LE(*s, 1.0);
  EXPECT_THAT(r.table(), HasSubstr("<- suggestion"));

  // Bit for bit as before: weights, the optimizer's state (lr, momentum buffers, no initial_lr
  // left behind by the sweep), the generator.
  EXPECT_EQ(weights_of(p.m.module()), weights);
  const auto after = bits(*p.opt);
  EXPECT_EQ(after.first, opt_bits.first);
  EXPECT_TRUE(same_bits(after.second, opt_bits.second));
  EXPECT_EQ(default_generator(Device::cpu()).seed(), seed);
  EXPECT_EQ(default_generator(Device::cpu()).offset(), offset);
  EXPECT_TRUE(p.m.module().training());

  // The same sweep again gives the same curve: nothing of the first run stayed behind.
  const LRFinderResult again = lr_find(trainer, p.m, data, {.min_lr = 1e-4, .max_lr = 1.0, .num_training = 40});
  EXPECT_EQ(again.losses, r.losses);
}

TEST_F(LRFinderTest, LazyHpuSweepRestoresTheCpuModule) {
  graphs::enable_lazy_mode(true);
  Persistent p;
  const DataLoader data(blobs(32, 1), {.batch_size = 8});
  (void)p.m.configure_optimizers();  // its StepLR records initial_lr: the state the finder restores to
  const auto weights = weights_of(p.m.module());
  const auto opt_bits = bits(*p.opt);
  Trainer trainer(quiet_options(dir, {.accelerator = "hpu"}));
  const LRFinderResult r = lr_find(trainer, p.m, data, {.min_lr = 1e-4, .max_lr = 1.0, .num_training = 12});
  graphs::enable_lazy_mode(false);
  EXPECT_EQ(r.losses.size(), 12u);
  EXPECT_EQ(p.m.module().named_parameters()[0].second->device(), Device::cpu());  // moved back
  EXPECT_EQ(weights_of(p.m.module()), weights);
  const auto after = bits(*p.opt);
  EXPECT_EQ(after.first, opt_bits.first);
  EXPECT_TRUE(same_bits(after.second, opt_bits.second));
}

TEST_F(LRFinderTest, LinearModeAndSmoothing) {
  TinyClassifier m;
  const DataLoader data(blobs(32, 1), {.batch_size = 8});
  Trainer trainer(quiet_options(dir));
  const LRFinderResult r =
      lr_find(trainer, m, data, {.min_lr = 0.01, .max_lr = 0.11, .num_training = 10, .mode = "linear"});
  ASSERT_EQ(r.lrs.size(), 10u);
  for (size_t k = 0; k < 10; ++k) EXPECT_NEAR(r.lrs[k], 0.01 + 0.01 * static_cast<double>(k), 1e-12);
  // The first smoothed loss is Lightning's: (1 - beta) * loss / (1 - beta^(1 + 1)), beta 0.98,
  // with the loss of the first batch under the initial (restored) weights.
  const Batch first = *data.epoch(0).next();
  const double loss = ops::cross_entropy(m.net->forward(first[0]), first[1]).item();
  EXPECT_NEAR(r.losses[0], 0.02 * loss / (1 - 0.98 * 0.98), 1e-6 * loss);
}

// Least squares on the blobs' features (a linear layer): gradient descent on it diverges once
// the lr passes 2 / (the largest curvature), so the loss grows without bound.
class Regression : public TinyClassifier {
 public:
  Regression() { net = models::zoo::mlp({8, 1}, 0); }
  Tensor training_step(const Batch& b, int64_t) override {
    const Tensor d = ops::sub(net->forward(b[0]), Tensor::full({b[0].dim(0), 1}, 1.0f, b[0].device()));
    return ops::mean(ops::mul(d, d));
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {{.optimizer = std::make_shared<SGD>(net->named_parameters(), SGDOptions{.lr = 0.1})}};
  }
};

TEST_F(LRFinderTest, StopsWhenTheLossDiverges) {
  Regression m;
  const DataLoader data(blobs(64, 1), {.batch_size = 8});
  Trainer trainer(quiet_options(dir));
  const auto weights = weights_of(m.module());
  const LRFinderResult r = lr_find(trainer, m, data, {.min_lr = 1e-3, .max_lr = 1e3, .num_training = 100});
  EXPECT_TRUE(r.diverged);
  EXPECT_LT(r.losses.size(), 100u);
  // Stopped at the first smoothed loss above 4x the best before it (from step 2 on).
  double best = r.losses[0];
  for (size_t k = 1; k + 1 < r.losses.size(); ++k) {
    EXPECT_LE(r.losses[k], 4 * best) << k;
    best = std::min(best, r.losses[k]);
  }
  EXPECT_GT(r.losses.back(), 4 * best);
  EXPECT_EQ(weights_of(m.module()), weights);
  // Without a threshold it runs every step.
  const LRFinderResult all =
      lr_find(trainer, m, data, {.min_lr = 1e-3, .max_lr = 1e3, .num_training = 30, .early_stop_threshold = {}});
  EXPECT_FALSE(all.diverged);
  EXPECT_EQ(all.lrs.size(), 30u);
}
TEST_F(LRFinderTest, SuggestionIsTheSteepestDescentAsLightnings) {
  LRFinderResult r;
  for (int i = 0; i < 16; ++i) r.lrs.push_back(1e-3 * std::pow(2.0, i));
  r.losses = {2.0, 1.99, 1.97, 1.9, 1.8, 1.6, 1.3, 1.2, 1.15, 0.9, 0.85, 0.84, 0.9, 1.5, 3.0, 9.0};
  // torch.gradient(losses[skip_begin:-skip_end], spacing=[lrs[...]]).argmin(), from torch:
  EXPECT_EQ(r.suggestion_index(), 10u);
  EXPECT_EQ(r.suggestion_index(2, 1), 2u);
  EXPECT_EQ(r.suggestion(2, 1), r.lrs[2]);
  r.losses[3] = NAN;  // non-finite losses are left out
  EXPECT_EQ(r.suggestion_index(2, 1), 2u);
  EXPECT_FALSE(r.suggestion(14, 1).has_value());  // one point left
  EXPECT_FALSE(LRFinderResult{}.suggestion().has_value());
  EXPECT_THAT(error_of<InvalidArgument>([&] { (void)r.suggestion(-1, 1); }), HasSubstr("skip_begin -1"));
}

TEST_F(LRFinderTest, BadOptionsAndModulesAreNamed) {
  TinyClassifier m;
  const DataLoader data(blobs(16, 1), {.batch_size = 8});
  Trainer trainer(quiet_options(dir));
  auto err = [&](LRFinderOptions o) { return error_of<InvalidArgument>([&] { lr_find(trainer, m, data, o); }); };
  EXPECT_THAT(err({.min_lr = 0}), HasSubstr("lr_find: min_lr 0.0 must be > 0"));
  EXPECT_THAT(err({.min_lr = 0.1, .max_lr = 0.1}), HasSubstr("lr_find: max_lr 0.1 must be > min_lr 0.1"));
  EXPECT_THAT(err({.num_training = 0}), HasSubstr("lr_find: num_training 0 must be >= 1"));
  EXPECT_THAT(err({.mode = "cyclic"}), HasSubstr("lr_find: mode 'cyclic' is not exponential or linear"));
  EXPECT_THAT(err({.early_stop_threshold = -1.0}), HasSubstr("lr_find: early_stop_threshold -1.0 must be > 0"));
  Trainer ddp(quiet_options(dir, {.devices = 2}));
  EXPECT_THAT(error_of<InvalidArgument>([&] { lr_find(ddp, m, data); }),
              HasSubstr("lr_find: runs in one process; the trainer has devices x num_nodes = 2"));

  // Two optimizers: refused, and the module is left as it was.
  const auto weights = weights_of(m.module());
  m.make_optimizers = [](TinyClassifier& t) {
    auto params = t.net->named_parameters();
    NamedParams first(params.begin(), params.begin() + 1), rest(params.begin() + 1, params.end());
    return std::vector<OptimizerConfig>{{.optimizer = std::make_shared<SGD>(first, SGDOptions{})},
                                        {.optimizer = std::make_shared<SGD>(rest, SGDOptions{})}};
  };
  EXPECT_THAT(error_of<InvalidArgument>([&] { lr_find(trainer, m, data); }),
              HasSubstr("lr_find: configure_optimizers() returned 2 optimizers; the finder sweeps exactly one"));
  EXPECT_EQ(weights_of(m.module()), weights);
}

}  // namespace
}  // namespace hg::training
