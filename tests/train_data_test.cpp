// hgraph-train on data from files (training/train_data.h): Fashion-MNIST with an MLP and LeNet-5
// (short runs; the full recipes are benchmarks), a CSV table whose normalisation is folded into
// the exported model, the byte-level GPT on a text corpus exported for the generate endpoints,
// the seeded augmentation, and configs whose data and model do not fit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "engine/ops.h"
#include "models/gpt.h"
#include "models/onnx_import.h"
#include "models/package.h"
#include "tests/errors.h"
#include "tests/test_env.h"
#include "training/augment.h"
#include "training/language_model_module.h"
#include "training/train_config.h"
#include "training/train_data.h"

namespace hg::training {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

const fs::path kFashion = "/usr/share/datasets/fashion-mnist";

json quiet_trainer(const fs::path& dir) {
  return {{"logger", false}, {"enable_checkpointing", false}, {"enable_progress_bar", false},
          {"num_sanity_val_steps", 0}, {"default_root_dir", dir.string()}};
}

TrainResult train(const json& config, std::string* log = nullptr) {
  std::ostringstream out;
  auto r = run_training(parse_train_config(config), out);
  if (log) *log = out.str();
  return r;
}

TEST(TrainDataTest, FashionMnistMlpAndLeNetTrainOnTheRealFiles) {
  if (!fs::exists(kFashion / "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << kFashion << " is not installed (scripts/setup.sh installs dataset-fashion-mnist)";
  const auto dir = test::temp_dir("TrainDataFashion");
  json c = {{"data", {{"dataset", "fashion_mnist"}, {"batch_size", 64}, {"num_workers", 1}}},
            {"model", {{"name", "mlp"}, {"config", {{"sizes", {784, 128, 10}}}}}},
            {"optimizer", {{"name", "adam"}, {"lr", 2e-3}}},
            {"trainer", quiet_trainer(dir)}};
  c["trainer"]["max_epochs"] = 1;
  c["trainer"]["limit_train_batches"] = 60;
  c["trainer"]["limit_val_batches"] = 0;
  c["trainer"]["limit_test_batches"] = 20;
  std::string log;
  const auto mlp = train(c, &log);
  EXPECT_THAT(log, HasSubstr("54000 train / 6000 validation / 10000 test examples"));
  std::cout << "Fashion-MNIST MLP after 60 batches: test_acc " << mlp.test.at("test_acc") << "\n";
  // 60 steps of Adam reach about 75%; chance is 10%.
  EXPECT_GE(mlp.test.at("test_acc"), 0.6);
  // LeNet-5 on the images zero-padded to 32x32, with random crops and flips.
  c["model"] = {{"name", "lenet5"}};
  c["data"]["crop_padding"] = 2;
  c["data"]["hflip"] = true;
  c["trainer"]["limit_train_batches"] = 40;
  const auto lenet = train(c, &log);
  std::cout << "Fashion-MNIST LeNet-5 after 40 batches: test_acc " << lenet.test.at("test_acc") << "\n";
  EXPECT_GE(lenet.test.at("test_acc"), 0.5);
  // The MLP's width must match the flattened images: the error names both shapes.
  c["model"] = {{"name", "mlp"}, {"config", {{"sizes", {64, 10}}}}};
  c["data"].erase("crop_padding");
  c["data"].erase("hflip");
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { train(c); }),
              HasSubstr("fashion_mnist gives examples F32 [784], the model takes FP32 [-1, 64]"));
  fs::remove_all(dir);
}

// Three well separated classes in four features of very different scales (x1000 on feature 1):
// without normalisation an MLP with a small lr barely moves; with it, it is exact.
std::string blobs_csv(int rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, 0.3);
  std::ostringstream s;
  s << "a,b,c,d,kind\n";
  const char* names[] = {"circle", "square", "triangle"};
  for (int i = 0; i < rows; ++i) {
    const int k = i % 3;
    s << (k + noise(rng)) << "," << 1000 * (2 - k + noise(rng)) << "," << 0.01 * noise(rng) << "," << (k == 1) + noise(rng)
      << "," << names[k] << "\n";
  }
  return s.str();
}

TEST(TrainDataTest, CsvTableNormalisesAndTheExportTakesRawFeatures) {
  const auto dir = test::temp_dir("TrainDataTable");
  std::ofstream(dir / "train.csv") << blobs_csv(300, 1);
  std::ofstream(dir / "test.csv") << blobs_csv(90, 2);
  json c = {{"data", {{"dataset", "table"}, {"path", (dir / "train.csv").string()}, {"test_path", (dir / "test.csv").string()},
                      {"label", "kind"}, {"batch_size", 16}}},
            {"model", {{"name", "mlp"}, {"config", {{"sizes", {4, 16, 3}}}}}},
            {"optimizer", {{"name", "adam"}, {"lr", 1e-2}}},
            {"trainer", quiet_trainer(dir)},
            {"export", {{"dir", (dir / "repo").string()}, {"name", "blobs"}}}};
  c["trainer"]["max_epochs"] = 5;
  std::string log;
  const auto r = train(c, &log);
  EXPECT_THAT(log, HasSubstr("300 rows, 4 features, 3 classes"));
  EXPECT_GE(r.test.at("test_acc"), 0.95);
  // The package takes the raw features: its predictions on test.csv are the test accuracy.
  const auto pkg = models::load_package(r.export_dir);
  EXPECT_EQ(pkg.spec.metadata["classes"], json({"circle", "square", "triangle"}));
  ASSERT_TRUE(pkg.spec.metadata.contains("normalization"));
  EXPECT_EQ(pkg.spec.metadata["normalization"]["mean"].size(), 4u);
  EXPECT_GT(pkg.spec.metadata["normalization"]["std"][1].get<double>(), 100.0);
  auto net = models::build_module(pkg);
  net->eval();
  Table raw = read_table(dir / "test.csv", {.label = "kind"});
  const Tensor logits = net->forward(raw.x);
  const auto pred = ops::argmax(logits, 1).to(DType::F32).to(Device::cpu()).to_vector();
  int hits = 0;
  for (int64_t i = 0; i < raw.y.numel(); ++i) hits += static_cast<int64_t>(pred[static_cast<size_t>(i)]) == raw.y.data<int64_t>()[i];
  EXPECT_NEAR(hits / 90.0, r.test.at("test_acc"), 1e-6) << "the folded model on raw features == the trained model on normalised ones";
  // A test label the training split does not have is named.
  std::ofstream(dir / "odd.csv") << "a,b,c,d,kind\n1,2,3,4,hexagon\n";
  c["data"]["test_path"] = (dir / "odd.csv").string();
  EXPECT_THAT(test::error_of<FormatError>([&] { train(c); }), HasSubstr("label 'hexagon' is not a class of the training split"));
  fs::remove_all(dir);
}

TEST(TrainDataTest, FoldedNormaliserGivesTheSameLogits) {
  auto module = std::make_shared<ClassifierModule>(ClassifierSpec{.model = "mlp", .model_config = {{"sizes", {3, 5, 2}}}});
  const Tensor x = Tensor::from_vector({1, 200, -3, 0.5, 190, 2, -1, 230, 0}, {3, 3});
  const Normalizer z = Normalizer::fit(x);
  module->module().eval();
  const auto want = module->module().forward(z.apply(x)).to_vector();
  fold_normalizer(module->module(), z);
  const auto got = module->module().forward(x).to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i]));
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])));
  }
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { fold_normalizer(module->module(), Normalizer{{0, 0}, {1, 1}}); }),
              HasSubstr("the data has 2 features"));
}

TEST(TrainDataTest, ByteGptLearnsATextAndExportsForGeneration) {
  const auto dir = test::temp_dir("TrainDataText");
  // Four sentences in a random order: what follows a sentence's first words is certain, which
  // sentence comes next is not.
  const char* sentences[] = {"the cat sat on the mat. ", "a dog ran far. ", "birds sing at dawn. ", "we like tea. "};
  std::string corpus;
  std::mt19937 rng(3);
  for (int i = 0; i < 600; ++i) corpus += sentences[rng() % 4];
  std::ofstream(dir / "corpus.txt") << corpus;
  json c = {{"data", {{"dataset", "text"}, {"path", (dir / "corpus.txt").string()}, {"batch_size", 8}}},
            {"model", {{"name", "gpt"}, {"config", {{"d_model", 32}, {"nhead", 2}, {"layers", 1}, {"ff", 64}, {"max_len", 24}}}}},
            {"optimizer", {{"name", "adamw"}, {"lr", 1e-2}}},
            {"trainer", quiet_trainer(dir)},
            {"export", {{"dir", (dir / "repo").string()}}}};
  c["trainer"]["max_steps"] = 200;
  std::string log;
  const auto r = train(c, &log);
  EXPECT_THAT(log, HasSubstr("blocks of 24"));
  // ln 256 = 5.55 nats for a uniform guess; the next sentence's first byte (1.4 nats, about one
  // byte in 17) is all that is left to guess once the sentences are learnt: 0.2 after 200 steps.
  std::cout << "byte GPT on four sentences, 200 steps: test_loss " << r.test.at("test_loss") << "\n";
  EXPECT_LT(r.test.at("test_loss"), 0.5);
  EXPECT_NEAR(r.test.at("test_bpb"), r.test.at("test_loss") / std::log(2.0), 1e-4);
  EXPECT_EQ(r.export_dir, dir / "repo" / "text_gpt" / "1");
  const auto pkg = models::load_package(r.export_dir);
  EXPECT_EQ(pkg.spec.graph["model"], "gpt");
  EXPECT_EQ(pkg.spec.inputs[0].shape, (Shape{-1, 24}));
  // The exported package generates the corpus: greedy decoding continues the sentence.
  auto net = models::build_module(pkg);
  auto& gpt = dynamic_cast<models::GPT&>(*net);
  const auto text = gpt.generate("dawn. a dog ran", 9, {.greedy = true});
  EXPECT_EQ(text.text.substr(0, 6), " far. ") << "'" << text.text << "'";
  // As ONNX: the traced forward at another batch and length gives the module's logits.
  c["export"]["format"] = "onnx";
  c["export"]["name"] = "text_gpt_onnx";
  c["trainer"]["max_steps"] = 2;
  const auto o = train(c);
  ASSERT_TRUE(fs::exists(o.export_dir / "model.onnx"));
  std::unique_ptr<models::Module> onnx;
  models::import_onnx(o.export_dir / "model.onnx", &onnx);
  auto& lm = dynamic_cast<LanguageModelModule&>(*o.module);
  lm.gpt().eval();
  Tensor ids = Tensor::empty({3, 10}, DType::I64);
  for (int64_t i = 0; i < 30; ++i) ids.data<int64_t>()[i] = "the cat sat on the mat. a dog ran"[i];
  const auto want = lm.gpt().forward(ids.to(lm.gpt().device())).to(Device::cpu()).to_vector();
  const auto got = onnx->forward(ids).to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i += 97) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
  fs::remove_all(dir);
}

TEST(TrainDataTest, ModelsAndDataThatDoNotFitAreNamed) {
  auto error = [](const json& j) { return test::error_of<InvalidArgument>([&] { parse_train_config(j); }); };
  EXPECT_THAT(error({{"model", {{"name", "gpt"}}}}), HasSubstr("gpt trains on data.dataset \"text\", not 'digits'"));
  EXPECT_THAT(error({{"data", {{"dataset", "text"}, {"path", "/tmp"}}}}), HasSubstr("data.dataset \"text\" trains \"gpt\", not 'mlp'"));
  EXPECT_THAT(error({{"data", {{"dataset", "table"}}}}), HasSubstr("data.path: is required"));
  EXPECT_THAT(error({{"data", {{"dataset", "digits"}, {"stride", 4}}}}), HasSubstr("data.stride: unknown key"));
  EXPECT_THAT(error({{"data", {{"dataset", "idx"}, {"path", "/tmp"}, {"crop_padding", -1}}}}), HasSubstr("data.crop_padding: must be >= 0"));
  EXPECT_THAT(error({{"data", {{"dataset", "text"}, {"path", "/tmp"}}}, {"model", {{"name", "gpt"}, {"config", {{"nhead", 3}}}}}}),
              HasSubstr("model.config: "));
  EXPECT_THAT(error({{"data", {{"dataset", "text"}, {"path", "/tmp"}}}, {"model", {{"name", "gpt"}, {"config", {{"layer", 3}}}}}}),
              HasSubstr("model.config.layer: unknown key"));
  const auto c = parse_train_config({{"data", {{"dataset", "fashion_mnist"}}}, {"model", {{"name", "lenet5"}}}, {"export", {{"dir", "/tmp/r"}}}});
  EXPECT_EQ(c.data.path, kFashion);
  EXPECT_EQ(c.data.image_size, 32);
  EXPECT_DOUBLE_EQ(c.data.holdout_fraction, 0.1);
  EXPECT_EQ(c.export_options->name, "fashion_mnist_lenet5");
  for (const char* name : {"fashion_mlp.json", "fashion_lenet.json", "fashion_cnn.json", "fortunes_gpt.json"})
    EXPECT_NO_THROW(parse_train_config(read_config_file(std::string(HG_SOURCE_DIR "/training/configs/") + name))) << name;
}

// Images whose pixels say where they are: value = 1 + row * 16 + column (0 is the padding).
Batch positional_images(int64_t n, int64_t h, int64_t w) {
  Tensor x = Tensor::empty({n, 1, h, w});
  for (int64_t i = 0; i < n * h * w; ++i) x.data<float>()[i] = static_cast<float>(1 + (i % (h * w)) / w * 16 + i % w);
  return {x, Tensor::zeros({n}, DType::I64)};
}

TEST(TrainDataTest, AugmentationIsASeededShiftAndFlip) {
  const ImageAugment aug{.crop_padding = 2, .hflip = true, .seed = 5};
  constexpr int64_t n = 400, h = 6, w = 7;
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  Batch a = positional_images(n, h, w);
  aug(a, idx, /*epoch=*/3);
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  for (int64_t i = 0; i < n; ++i) {
    const float* img = a[0].data<float>() + i * h * w;
    // Exactly one (dy, dx, flip) explains the image: output (r, c) = input (r + dy, c' + dx).
    int matches = 0;
    for (int64_t dy = -2; dy <= 2; ++dy)
      for (int64_t dx = -2; dx <= 2; ++dx)
        for (bool flip : {false, true}) {
          bool ok = true;
          for (int64_t r = 0; r < h && ok; ++r)
            for (int64_t col = 0; col < w && ok; ++col) {
              const int64_t sr = r + dy, sc = (flip ? w - 1 - col : col) + dx;
              const float want = sr >= 0 && sr < h && sc >= 0 && sc < w ? static_cast<float>(1 + sr * 16 + sc) : 0.0f;
              ok = img[r * w + col] == want;
            }
          if (ok) ++matches, seen.insert({dy, dx, flip});
        }
    ASSERT_EQ(matches, 1) << "image " << i;
  }
  EXPECT_EQ(seen.size(), 50u) << "every shift in [-2, 2]^2, flipped and not, appears in 400 draws";
  // The same (seed, epoch, example) gives the same image in any batch; another epoch differs.
  Batch b = positional_images(3, h, w);
  aug(b, {7, 399, 0}, 3);
  for (int64_t k = 0; k < h * w; ++k) {
    EXPECT_EQ(b[0].data<float>()[k], a[0].data<float>()[7 * h * w + k]);
    EXPECT_EQ(b[0].data<float>()[2 * h * w + k], a[0].data<float>()[k]);
  }
  Batch other = positional_images(n, h, w);
  aug(other, idx, 4);
  int same = 0;
  for (int64_t i = 0; i < n; ++i)
    same += std::equal(other[0].data<float>() + i * h * w, other[0].data<float>() + (i + 1) * h * w, a[0].data<float>() + i * h * w);
  EXPECT_LT(same, n / 5);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] {
                Batch flat{Tensor::zeros({2, 5}), Tensor::zeros({2}, DType::I64)};
                aug(flat, {0, 1}, 0);
              }),
              HasSubstr("expected contiguous F32 images"));
}

TEST(TrainDataTest, AugmentedLoaderIsTheSameWithAndWithoutWorkers) {
  Batch all = positional_images(64, 8, 8);
  auto data = std::make_shared<TensorDataset>(std::vector<Tensor>{all[0], all[1]});
  const ImageAugment aug{.crop_padding = 3, .hflip = true, .seed = 1};
  std::vector<std::vector<float>> runs;
  for (int workers : {0, 2}) {
    DataLoader loader(data, {.batch_size = 10, .shuffle = true, .seed = 9, .num_workers = workers, .transform = aug});
    auto it = loader.epoch(2);
    std::vector<float> seen;
    while (auto b = it.next()) {
      const auto v = (*b)[0].to_vector();
      seen.insert(seen.end(), v.begin(), v.end());
    }
    runs.push_back(seen);
  }
  ASSERT_EQ(runs[0].size(), 64u * 64u);
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_NE(runs[0], all[0].to_vector()) << "the loader applied the transform";
}

}  // namespace
}  // namespace hg::training
