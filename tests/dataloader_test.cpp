// Datasets, samplers and the DataLoader (training/dataloader.h): batching, seeded shuffles,
// DistributedSampler against torch (tests/golden/sampler.json, scripts/golden_sampler.py),
// worker threads (same batches, early destruction with the queue full, two epochs at once, errors)
// and the digits' validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "models/safetensors.h"
#include "tests/errors.h"
#include "tests/golden.h"
#include "tests/test_env.h"
#include "tests/wait.h"
#include "training/dataloader.h"

namespace hg::training {
namespace {

using ::testing::HasSubstr;

// Row i of x is {10i, 10i+1, 10i+2}; y[i] = i.
std::shared_ptr<TensorDataset> rows(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) x.push_back(static_cast<float>(10 * i + j));
    y.push_back(i);
  }
  return std::make_shared<TensorDataset>(std::vector<Tensor>{Tensor::from_vector(x, {n, 3}), Tensor::from_indices(y, {n})});
}

std::vector<std::vector<int64_t>> labels_of(const DataLoader& loader, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  auto it = loader.epoch(epoch);
  while (auto b = it.next()) out.push_back((*b)[1].to_indices());
  return out;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& v) {
  std::vector<int64_t> r;
  for (const auto& b : v) r.insert(r.end(), b.begin(), b.end());
  return r;
}

// Examples {F32 [2] = {i, -i}}; get() throws for `bad` and sleeps `delay` per example.
class SlowDataset : public Dataset {
 public:
  SlowDataset(int64_t n, int64_t bad, std::chrono::microseconds delay) : n_(n), bad_(bad), delay_(delay) {}
  int64_t size() const override { return n_; }
  std::vector<Tensor> get(int64_t i) const override {
    ++calls;
    std::this_thread::sleep_for(delay_);
    if (i == bad_) throw InvalidArgument("SlowDataset: example " + std::to_string(i) + " is broken");
    return {Tensor::from_vector({static_cast<float>(i), static_cast<float>(-i)}, {2})};
  }
  mutable std::atomic<int> calls{0};

 private:
  int64_t n_, bad_;
  std::chrono::microseconds delay_;
};

TEST(DataLoaderTest, BatchesInOrderWithTheLastOneShort) {
  DataLoader loader(rows(10), {.batch_size = 4});
  EXPECT_EQ(loader.num_batches(), 3);
  auto it = loader.epoch(0);
  std::vector<Batch> got;
  while (auto b = it.next()) got.push_back(*b);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0][0].shape(), (Shape{4, 3}));
  EXPECT_EQ(got[2][0].shape(), (Shape{2, 3}));
  EXPECT_EQ(got[2][1].shape(), (Shape{2}));
  EXPECT_EQ(got[0][1].dtype(), DType::I64);
  EXPECT_EQ(got[2][0].to_vector(), (std::vector<float>{80, 81, 82, 90, 91, 92}));
  EXPECT_EQ(got[1][1].to_indices(), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_FALSE(it.next().has_value());
}

TEST(DataLoaderTest, DropLastDropsTheShortBatch) {
  DataLoader loader(rows(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.num_batches(), 2);
  EXPECT_EQ(labels_of(loader, 0), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  DataLoader exact(rows(8), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(exact.num_batches(), 2);
}

TEST(DataLoaderTest, SeededShuffleIsReproducibleAndNewEachEpoch) {
  DataLoader loader(rows(50), {.batch_size = 7, .shuffle = true, .seed = 3});
  const auto e0 = labels_of(loader, 0), e1 = labels_of(loader, 1);
  EXPECT_EQ(e0, labels_of(loader, 0));
  EXPECT_EQ(e0, labels_of(DataLoader(rows(50), {.batch_size = 7, .shuffle = true, .seed = 3}), 0));
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, labels_of(DataLoader(rows(50), {.batch_size = 7, .shuffle = true, .seed = 4}), 0));
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(flat(e0), identity);
  for (int64_t e = 0; e < 5; ++e) {  // every index exactly once per epoch
    auto all = flat(labels_of(loader, e));
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, identity) << "epoch " << e;
  }
}

TEST(DataLoaderTest, WorkersDeliverTheSameBatchesInOrder) {
  const auto data = rows(103);
  DataLoader serial(data, {.batch_size = 5, .shuffle = true, .seed = 11});
  for (int workers : {1, 2, 3, 4}) {
    for (int prefetch : {1, 3}) {
      DataLoader threaded(data, {.batch_size = 5, .shuffle = true, .seed = 11, .num_workers = workers,
                                 .prefetch_factor = prefetch});
      for (int64_t e = 0; e < 2; ++e) {
        auto a = serial.epoch(e), b = threaded.epoch(e);
        int n = 0;
        for (;;) {
          auto x = a.next(), y = b.next();
          ASSERT_EQ(x.has_value(), y.has_value());
          if (!x) break;
          EXPECT_EQ((*x)[0].to_vector(), (*y)[0].to_vector()) << workers << " workers, batch " << n;
          EXPECT_EQ((*x)[1].to_indices(), (*y)[1].to_indices()) << workers << " workers, batch " << n;
          ++n;
        }
        EXPECT_EQ(n, 21);
      }
    }
  }
}

TEST(DataLoaderTest, WorkersPrefetchAtMostTheirQuota) {
  auto data = std::make_shared<SlowDataset>(100, -1, std::chrono::microseconds(0));
  DataLoader loader(data, {.batch_size = 1, .num_workers = 2, .prefetch_factor = 2});
  auto it = loader.epoch(0);
  ASSERT_TRUE(it.next().has_value());
  // One batch taken and 2 * 2 made ahead of the consumer, and no more.
  ASSERT_TRUE(test::wait_until([&] { return data->calls.load() == 5; }, test::kWaitLimit,
                               "the workers to make 4 batches ahead"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(data->calls.load(), 5);
}

TEST(DataLoaderTest, DestroyingAnEpochMidwayJoinsItsWorkers) {
  auto data = std::make_shared<SlowDataset>(400, -1, std::chrono::microseconds(200));
  DataLoader loader(data, {.batch_size = 4, .num_workers = 3, .prefetch_factor = 2});
  for (int round = 0; round < 5; ++round) {
    auto it = loader.epoch(round);
    ASSERT_TRUE(it.next().has_value());
  }
  { auto untouched = loader.epoch(9); }
  const int calls = data->calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(data->calls.load(), calls);  // nothing runs after the epochs are gone
}

// The consumer takes one batch and stops: the workers make their quota ahead and stop, and
// destroying the epoch returns instead of waiting for a consumer that never comes.
TEST(DataLoaderTest, StoppingWithTheQuotaMadeReturnsPromptly) {
  for (int workers : {1, 2, 3, 4}) {
    auto data = std::make_shared<SlowDataset>(1000, -1, std::chrono::microseconds(0));
    DataLoader loader(data, {.batch_size = 1, .num_workers = workers, .prefetch_factor = 1});
    auto it = std::make_unique<DataLoader::Epoch>(loader.epoch(0));
    ASSERT_TRUE(it->next().has_value());
    // The one taken and `workers` (workers * prefetch_factor) made ahead.
    ASSERT_TRUE(test::wait_until([&] { return data->calls.load() == workers + 1; }, test::kWaitLimit,
                                 "the workers to make their quota"));
    test::call_within(test::kWaitLimit, "destroying an epoch whose workers wait for room", [&] { it.reset(); });
    EXPECT_EQ(data->calls.load(), workers + 1) << workers << " workers";
  }
}

// A training epoch whose consumer has paused with its quota made (the Trainer validating
// mid-epoch) does not hold up another loader's workers.
TEST(DataLoaderTest, AnEpochWaitingForRoomDoesNotStallAnother) {
  auto data = std::make_shared<SlowDataset>(1000, -1, std::chrono::microseconds(0));
  DataLoader train(data, {.batch_size = 1, .num_workers = 2, .prefetch_factor = 1});
  auto waiting = train.epoch(0);
  ASSERT_TRUE(waiting.next().has_value());
  ASSERT_TRUE(test::wait_until([&] { return data->calls.load() == 3; }, test::kWaitLimit, "the quota to be made"));
  DataLoader val(rows(50), {.batch_size = 4, .num_workers = 2});
  const auto labels = test::call_within(test::kWaitLimit, "a second loader's epoch", [&] { return flat(labels_of(val, 0)); });
  EXPECT_EQ(labels.size(), 50u);
  EXPECT_TRUE(std::is_sorted(labels.begin(), labels.end()));
}

TEST(DataLoaderTest, AWorkersErrorIsRethrownForItsBatch) {
  for (int workers : {0, 2}) {
    auto data = std::make_shared<SlowDataset>(20, 9, std::chrono::microseconds(0));
    DataLoader loader(data, {.batch_size = 4, .num_workers = workers});
    auto it = loader.epoch(0);
    EXPECT_TRUE(it.next().has_value());
    EXPECT_EQ(it.next()->at(0).to_vector(), (std::vector<float>{4, -4, 5, -5, 6, -6, 7, -7}));
    EXPECT_THAT(test::error_of<InvalidArgument>([&] { it.next(); }), HasSubstr("example 9 is broken"))
        << workers << " workers";
  }
}

TEST(DataLoaderTest, RejectsBadOptions) {
  EXPECT_THAT(test::error_of<InvalidArgument>([] { DataLoader(rows(3), {.batch_size = 0}); }),
              HasSubstr("batch_size"));
  EXPECT_THAT(test::error_of<InvalidArgument>([] { DataLoader(rows(3), {.num_workers = -1}); }),
              HasSubstr("num_workers"));
  EXPECT_THAT(test::error_of<InvalidArgument>([] { DataLoader(rows(3), {.prefetch_factor = 0}); }),
              HasSubstr("prefetch_factor"));
}

TEST(DataLoaderTest, EmptyDatasetHasNoBatches) {
  DataLoader loader(rows(0), {.batch_size = 2, .shuffle = true, .num_workers = 2});
  EXPECT_EQ(loader.num_batches(), 0);
  EXPECT_FALSE(loader.epoch(0).next().has_value());
}

TEST(DataSetTest, DefaultGetBatchStacksExamples) {
  SlowDataset d(5, -1, std::chrono::microseconds(0));
  auto b = d.get_batch({3, 1});
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(b[0].to_vector(), (std::vector<float>{3, -3, 1, -1}));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { d.get_batch({}); }), HasSubstr("no indices"));
}

TEST(DataSetTest, TensorDatasetAndSubsetCheckTheirRows) {
  auto d = rows(6);
  EXPECT_EQ(d->get(2)[0].to_vector(), (std::vector<float>{20, 21, 22}));
  EXPECT_EQ(d->get(2)[1].shape(), Shape{});
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { d->get(6); }), HasSubstr("index 6 out of range"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { d->get_batch({0, -1}); }), HasSubstr("index -1"));
  EXPECT_THAT(test::error_of<InvalidArgument>([] {
                TensorDataset({Tensor::zeros({3, 2}), Tensor::zeros({4})});
              }),
              HasSubstr("tensor 1 has 4 rows, tensor 0 has 3"));
  Subset s(d, {5, 0, 3});
  EXPECT_EQ(s.size(), 3);
  EXPECT_EQ(s.get_batch({2, 0})[1].to_indices(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(s.get(1)[1].to_indices(), (std::vector<int64_t>{0}));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { s.get_batch({3}); }), HasSubstr("index 3"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { Subset(d, {6}); }), HasSubstr("index 6"));
}

TEST(DataSetTest, RandomSplitPartitionsTheRows) {
  auto [train, held] = random_split(rows(100), 0.25, 7);
  EXPECT_EQ(train->size(), 75);
  EXPECT_EQ(held->size(), 25);
  std::set<int64_t> seen;
  for (auto* part : {train.get(), held.get()})
    for (int64_t i = 0; i < part->size(); ++i) seen.insert(part->get(i)[1].to_indices()[0]);
  EXPECT_EQ(seen.size(), 100u);
  auto [train2, held2] = random_split(rows(100), 0.25, 7);
  EXPECT_EQ(held2->get(0)[1].to_indices(), held->get(0)[1].to_indices());
  EXPECT_THAT(test::error_of<InvalidArgument>([] { random_split(rows(4), 1.0, 0); }), HasSubstr("holdout_fraction"));
}

// DistributedSampler(shuffle=False) against torch: padding, trimming, striding and batching.
TEST(DataSamplerTest, DistributedSamplerMatchesTorch) {
  for (const auto& c : test::load_json("sampler.json")) {
    const int64_t n = c["n"];
    const int w = c["num_replicas"];
    const bool drop_last = c["drop_last"];
    const std::string name = "n=" + std::to_string(n) + " W=" + std::to_string(w) + (drop_last ? " drop_last" : "");
    for (int r = 0; r < w; ++r) {
      auto s = std::make_shared<DistributedSampler>(n, w, r, DistributedSamplerOptions{.shuffle = false, .drop_last = drop_last});
      const auto want = c["ranks"][r].get<std::vector<int64_t>>();
      EXPECT_EQ(s->indices(0), want) << name << " rank " << r;
      EXPECT_EQ(s->size(), static_cast<int64_t>(want.size())) << name;
      for (bool dl : {false, true}) {
        DataLoader loader(rows(n), {.batch_size = c["batch_size"], .drop_last = dl});
        auto sharded = loader.with_sampler(s);
        const auto batches = c[dl ? "batches_drop_last" : "batches"][r].get<std::vector<std::vector<int64_t>>>();
        EXPECT_EQ(labels_of(sharded, 0), batches) << name << " rank " << r << (dl ? " loader drop_last" : "");
        EXPECT_EQ(sharded.num_batches(), static_cast<int64_t>(batches.size())) << name;
      }
    }
  }
}

// Interleaving the ranks' indices gives back one padded (or trimmed) permutation: the same on
// every rank, RandomSampler's for (seed, epoch), new each epoch.
TEST(DataSamplerTest, DistributedShuffleIsOnePermutationSharedByAllRanks) {
  for (bool drop_last : {false, true}) {
    const int64_t n = 23;
    const int w = 4;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<std::vector<int64_t>> per_rank;
      for (int r = 0; r < w; ++r)
        per_rank.push_back(DistributedSampler(n, w, r, {.shuffle = true, .seed = 42, .drop_last = drop_last}).indices(epoch));
      const size_t per = drop_last ? 5 : 6;
      std::vector<int64_t> joined;
      for (size_t k = 0; k < per; ++k)
        for (int r = 0; r < w; ++r) {
          ASSERT_EQ(per_rank[r].size(), per);
          joined.push_back(per_rank[r][k]);
        }
      const auto perm = RandomSampler(n, 42).indices(epoch);
      if (drop_last) {
        EXPECT_EQ(joined, std::vector<int64_t>(perm.begin(), perm.begin() + 20));
      } else {
        EXPECT_EQ(std::vector<int64_t>(joined.begin(), joined.begin() + n), perm);
        EXPECT_EQ(std::vector<int64_t>(joined.begin() + n, joined.end()), std::vector<int64_t>(perm.begin(), perm.begin() + 1));
        std::set<int64_t> all(joined.begin(), joined.end());
        EXPECT_EQ(all.size(), static_cast<size_t>(n));  // the union over ranks covers the dataset
      }
    }
  }
  EXPECT_NE(DistributedSampler(23, 4, 1, {.seed = 42}).indices(0), DistributedSampler(23, 4, 1, {.seed = 42}).indices(1));
  EXPECT_THAT(test::error_of<InvalidArgument>([] { DistributedSampler(5, 2, 2); }), HasSubstr("rank 2"));
  EXPECT_THAT(test::error_of<InvalidArgument>([] { DistributedSampler(5, 0, 0); }), HasSubstr("num_replicas"));
}

// --- the digits -------------------------------------------------------------------------------

const std::string kDigits = HG_SOURCE_DIR "/models/data/digits.safetensors";

TEST(DataDigitsTest, LoadsScaledImagesAndLabels) {
  auto d = load_digits(kDigits);
  ASSERT_EQ(d->size(), 1797);
  const auto& x = d->tensors()[0];
  const auto& y = d->tensors()[1];
  EXPECT_EQ(x.shape(), (Shape{1797, 64}));
  EXPECT_EQ(y.dtype(), DType::I64);
  const auto xv = x.to_vector();
  EXPECT_EQ(*std::min_element(xv.begin(), xv.end()), 0.0f);
  EXPECT_EQ(*std::max_element(xv.begin(), xv.end()), 1.0f);
  const auto yv = y.to_indices();
  EXPECT_EQ(std::set<int64_t>(yv.begin(), yv.end()).size(), 10u);
  const auto raw = safetensors::read(kDigits);
  EXPECT_EQ(xv[64 * 5 + 10], raw.find("images")->data[64 * 5 + 10] / 16.0f);
  EXPECT_EQ(yv[5], raw.find("labels")->data[5]);
}

TEST(DataDigitsTest, ImageSize32RepeatsEachPixel4x4) {
  auto small = load_digits(kDigits);
  auto big = load_digits(kDigits, 32);
  const auto ex = big->get(17);
  EXPECT_EQ(ex[0].shape(), (Shape{1, 32, 32}));
  const auto s = small->get(17)[0].to_vector(), b = ex[0].to_vector();
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 32; ++c) ASSERT_EQ(b[r * 32 + c], s[(r / 4) * 8 + c / 4]) << r << "," << c;
  EXPECT_EQ(ex[1].to_indices(), small->get(17)[1].to_indices());
  EXPECT_THAT(test::error_of<InvalidArgument>([] { load_digits(kDigits, 16); }), HasSubstr("image_size"));
}

TEST(DataDigitsTest, CorruptFilesAreRejectedNamingWhat) {
  const auto dir = test::temp_dir("DataDigits");
  const auto good = safetensors::read(kDigits);
  auto write_variant = [&](const std::string& name, auto&& edit) {
    safetensors::File f = good;
    edit(f);
    safetensors::write(dir / name, f);
    return (dir / name).string();
  };
  auto entry = [](safetensors::File& f, const std::string& n) -> safetensors::Entry& {
    return *std::find_if(f.entries.begin(), f.entries.end(), [&](const auto& e) { return e.name == n; });
  };
  const auto no_labels = write_variant("no_labels.safetensors", [&](safetensors::File& f) { entry(f, "labels").name = "targets"; });
  EXPECT_THAT(test::error_of<FormatError>([&] { load_digits(no_labels); }),
              testing::AllOf(HasSubstr("no_labels.safetensors"), HasSubstr("no tensor 'labels'")));
  const auto i16 = write_variant("i16.safetensors", [&](safetensors::File& f) {
    auto& e = entry(f, "labels");
    e.dtype = "I16";
    e.shape = {static_cast<int64_t>(e.data.size() / 2)};
    e.data.resize(static_cast<size_t>(e.shape[0]) * 2);
  });
  EXPECT_THAT(test::error_of<FormatError>([&] { load_digits(i16); }), HasSubstr("'labels' is I16, expected U8"));
  const auto wide = write_variant("wide.safetensors", [&](safetensors::File& f) { entry(f, "images").shape = {3594, 32}; });
  EXPECT_THAT(test::error_of<FormatError>([&] { load_digits(wide); }), HasSubstr("'images' has shape [3594, 32]"));
  const auto short_labels = write_variant("short.safetensors", [&](safetensors::File& f) {
    auto& e = entry(f, "labels");
    e.shape = {1796};
    e.data.pop_back();
  });
  EXPECT_THAT(test::error_of<FormatError>([&] { load_digits(short_labels); }), HasSubstr("'labels' has shape [1796]"));
  const auto bright = write_variant("bright.safetensors", [&](safetensors::File& f) { entry(f, "images").data[64 * 3 + 5] = 17; });
  EXPECT_THAT(test::error_of<FormatError>([&] { load_digits(bright); }),
              HasSubstr("'images' element [3, 5] is 17, expected 0..16"));
  const auto label = write_variant("label.safetensors", [&](safetensors::File& f) { entry(f, "labels").data[1000] = 10; });
  EXPECT_THAT(test::error_of<FormatError>([&] { load_digits(label); }), HasSubstr("'labels' element [1000] is 10"));
  std::filesystem::copy_file(kDigits, dir / "truncated.safetensors");
  std::filesystem::resize_file(dir / "truncated.safetensors", 5000);
  EXPECT_THAT(test::error_of<Error>([&] { load_digits(dir / "truncated.safetensors"); }), HasSubstr("truncated.safetensors"));
  EXPECT_THAT(test::error_of<Error>([&] { load_digits(dir / "missing.safetensors"); }), HasSubstr("missing.safetensors"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hg::training
