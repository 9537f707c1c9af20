// The data sets of hgraph-train's configs (training/train_data.h).
#include "training/train_data.h"

#include <map>

#include "engine/error.h"
#include "training/augment.h"
#include "training/train_config.h"

namespace hg::training {

namespace {

// The model's input as one example's shape (the batch dimension dropped).
Shape model_sample(const models::IOSpec& input) { return Shape(input.shape.begin() + 1, input.shape.end()); }

void check_fits(const Dataset& d, const models::IOSpec& input, const std::string& what) {
  const Tensor x = d.get(0).at(0);
  const std::string want = input.datatype == "INT64" ? "I64" : input.datatype == "FP32" ? "F32" : input.datatype;
  if (x.shape() != model_sample(input) || dtype_name(x.dtype()) != want)
    throw InvalidArgument("data: " + what + " gives examples " + dtype_name(x.dtype()) + " " + shape_str(x.shape()) +
                          ", the model takes " + input.datatype + " " + shape_str(input.shape) +
                          " (check model.config, or data.image_size)");
}

int64_t max_label(const Dataset& d) {
  int64_t top = -1;
  const int64_t n = d.size();
  for (int64_t start = 0; start < n; start += 4096) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < std::min(n, start + 4096); ++i) idx.push_back(i);
    const Tensor y = d.get_batch(idx).at(1);
    for (int64_t i = 0; i < y.numel(); ++i) top = std::max(top, y.data<int64_t>()[i]);
  }
  return top;
}

void check_classes(const Dataset& d, int64_t classes, const std::string& what) {
  const int64_t top = max_label(d);
  if (top >= classes)
    throw InvalidArgument("data: " + what + " has label " + std::to_string(top) + ", the model has " +
                          std::to_string(classes) + " classes (model.config)");
}

}  // namespace

TrainData load_train_data(const DataConfig& c, const models::IOSpec& input, int64_t classes) {
  TrainData d;
  const bool lm = classes == 0;
  if (lm != (c.dataset == "text"))
    throw InvalidArgument(lm ? "data.dataset: gpt trains on text (data.dataset \"text\"), not '" + c.dataset + "'"
                             : "model.name: data.dataset \"text\" trains gpt, not a classifier");
  std::shared_ptr<const Dataset> all;  // split into train and held out
  if (c.dataset == "digits") {
    all = load_digits(c.path, c.image_size);
    d.description = "digits (image_size " + std::to_string(c.image_size) + ")";
  } else if (c.dataset == "idx" || c.dataset == "fashion_mnist") {
    const Shape want = model_sample(input);
    // The model's image size unless data.image_size says otherwise (28 -> 32 pads for LeNet-5).
    const int64_t size = c.image_size != 0 ? c.image_size : want.size() == 3 && want[1] == want[2] && want[1] > 28 ? want[1] : 0;
    IdxOptions o{.image_size = size, .flatten = want.size() == 1};
    auto s = load_idx_dir(c.path, o);
    all = s.train;
    d.test = s.test;
    d.description = c.dataset + " (" + c.path.string() + ")";
  } else if (c.dataset == "table") {
    const TableOptions o{.label = c.label, .features_key = c.features_key, .labels_key = c.labels_key};
    Table t = read_table(c.path, o);
    std::optional<Table> test;
    if (!c.test_path.empty()) {
      test = read_table(c.test_path, o);
      align_classes(*test, t.classes, c.test_path);
    }
    const auto n = t.x.dim(0);
    auto rows = std::make_shared<TensorDataset>(std::vector<Tensor>{t.x, t.y});
    // The statistics come from the training rows only (after the held-out split).
    auto [train_rows, held_rows] = random_split(rows, c.holdout_fraction, c.seed);
    if (c.normalize) {
      std::vector<int64_t> idx(static_cast<size_t>(train_rows->size()));
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
      d.normalizer = Normalizer::fit(train_rows->get_batch(idx).at(0));
      rows = std::make_shared<TensorDataset>(std::vector<Tensor>{d.normalizer->apply(t.x), t.y});
      if (test) test->x = d.normalizer->apply(test->x);
    }
    auto [train, held] = random_split(rows, c.holdout_fraction, c.seed);  // the same split again
    d.train = train;
    if (held->size() > 0) d.val = held;
    d.test = test ? std::make_shared<TensorDataset>(std::vector<Tensor>{test->x, test->y})
                  : std::shared_ptr<const Dataset>(d.val);
    d.description = "table " + c.path.string() + " (" + std::to_string(n) + " rows, " +
                    std::to_string(t.x.dim(1)) + " features, " + std::to_string(t.classes.size()) + " classes)";
    d.metadata["classes"] = t.classes;
    d.metadata["features"] = t.feature_names;
    if (d.normalizer) d.metadata["normalization"] = d.normalizer->to_json();
  } else if (c.dataset == "text") {
    const int64_t max_len = input.shape.at(1);
    TextCorpus corpus = read_text_corpus(c.path);
    auto [train, held] = split_text(corpus.bytes, c.holdout_fraction);
    d.train = std::make_shared<TextBlocks>(std::move(train), max_len, c.stride);
    if (static_cast<int64_t>(held.size()) > max_len) d.val = d.test = std::make_shared<TextBlocks>(std::move(held), max_len);
    d.description = "text " + c.path.string() + " (" + std::to_string(corpus.bytes.size()) + " bytes in " +
                    std::to_string(corpus.files.size()) + " files, " + std::to_string(corpus.skipped.size()) +
                    " skipped; blocks of " + std::to_string(max_len) + ")";
  } else {
    throw InvalidArgument("data.dataset: unknown dataset '" + c.dataset + "' (digits, idx, fashion_mnist, table, text)");
  }
  if (all) {
    auto [train, held] = random_split(all, c.holdout_fraction, c.seed);
    d.train = train;
    if (held->size() > 0) d.val = held;
    if (!d.test) d.test = d.val;
  }
  if (c.crop_padding > 0 || c.hflip) {
    if (lm || c.dataset == "table")
      throw InvalidArgument("data.crop_padding / data.hflip: augmentation is for images, not " + c.dataset);
    if (model_sample(input).size() != 3)
      throw InvalidArgument("data.crop_padding / data.hflip: the model takes " + shape_str(input.shape) +
                            ", augmentation needs images [C, H, W]");
    d.train_transform = ImageAugment{.crop_padding = c.crop_padding, .hflip = c.hflip, .seed = c.seed};
  }
  check_fits(*d.train, input, c.dataset);
  if (!lm) {
    for (const auto& [what, split] : {std::pair<const char*, const Dataset*>{"the training split", d.train.get()},
                                      {"the validation split", d.val.get()},
                                      {"the test split", d.test.get()}})
      if (split) check_classes(*split, classes, c.dataset + " " + what);
  }
  d.metadata["dataset"] = d.description;
  d.metadata["train_examples"] = d.train->size();
  d.metadata["val_examples"] = d.val ? d.val->size() : 0;
  d.metadata["test_examples"] = d.test ? d.test->size() : 0;
  d.metadata["seed"] = c.seed;
  return d;
}

void fold_normalizer(models::Module& m, const Normalizer& z) {
  std::map<std::string, Tensor> sd;
  for (const auto& [k, t] : m.state_dict()) sd[k] = t;
  if (!sd.count("0.weight") || !sd.count("0.bias"))
    throw InvalidArgument("fold_normalizer: the model has no first Linear layer (\"0.weight\", \"0.bias\")");
  const Tensor w = sd["0.weight"].to(Device::cpu()).contiguous(), b = sd["0.bias"].to(Device::cpu()).contiguous();
  const auto f = static_cast<int64_t>(z.mean.size());
  if (w.ndim() != 2 || w.dim(1) != f || b.ndim() != 1 || b.dim(0) != w.dim(0))
    throw InvalidArgument("fold_normalizer: the first layer is " + shape_str(w.shape()) + ", the data has " +
                          std::to_string(f) + " features");
  const int64_t o = w.dim(0);
  std::vector<float> wv = w.to_vector(), bv = b.to_vector();
  for (int64_t r = 0; r < o; ++r) {
    double shift = 0;
    for (int64_t c = 0; c < f; ++c) {
      float& x = wv[static_cast<size_t>(r * f + c)];
      x /= z.std[static_cast<size_t>(c)];
      shift += static_cast<double>(x) * z.mean[static_cast<size_t>(c)];
    }
    bv[static_cast<size_t>(r)] -= static_cast<float>(shift);
  }
  m.load_state_dict({{"0.weight", Tensor::from_vector(wv, {o, f})}, {"0.bias", Tensor::from_vector(bv, {o})}}, false);
}

}  // namespace hg::training
