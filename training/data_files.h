// Data sets read from files: IDX (the MNIST family), tables (CSV, NumPy .npy / .npz) with
// normalisation statistics, and byte-level text corpora. Every byte is checked before it is
// used; errors are hg::FormatError naming the file, the record (row, array, element) and the
// byte offset, and hg::TooLargeError past the size limits.
//
//   using namespace hg::training;
//   auto fm = load_idx_dir("/usr/share/datasets/fashion-mnist", {.image_size = 32});  // gzip or raw
//   fm.train->size();                     // 60000: x F32 [1, 32, 32] in [0, 1], y I64
//   Tensor raw = read_idx("t10k-labels-idx1-ubyte.gz");                   // U8 [10000]
//
//   Table t = read_table("iris.csv", {.label = "species"});   // x F32 [N, F], y I64 [N], classes
//   Normalizer norm = Normalizer::fit(t.x);                     // per-feature mean / std
//   auto data = std::make_shared<TensorDataset>(std::vector<Tensor>{norm.apply(t.x), t.y});
//   nlohmann::json saved = norm.to_json();                      // {"mean": [...], "std": [...]}
//
//   TextCorpus c = read_text_corpus("/usr/share/games/fortunes");  // files that are UTF-8 text
//   auto [train, held] = split_text(c.bytes, /*holdout_fraction=*/0.1);
//   auto blocks = std::make_shared<TextBlocks>(train, /*max_len=*/128);  // x, y I64 [128]
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "training/dataloader.h"

namespace hg::training {

// What a data file may take in memory once decompressed (bytes), unless a caller says otherwise.
inline constexpr size_t kMaxDataFileBytes = size_t{4} << 30;

// ---- IDX --------------------------------------------------------------------------------------
// One IDX array (magic 0 0 type rank, big-endian u32 dims, big-endian elements), raw or gzip
// (recognised by its magic number): ubyte -> U8, sbyte / short / int -> I32, float -> F32,
// double -> F64. Rank 1 to 4; the size the header declares must match the file exactly.
Tensor read_idx(const std::filesystem::path& file, size_t max_bytes = kMaxDataFileBytes);

struct IdxOptions {
  int64_t image_size = 0;  // 0: as stored; larger: zero-padded around the centre (28 -> 32: LeNet-5)
  bool flatten = false;    // x [H * W] instead of [1, H, W]
};
// Images (ubyte [N, H, W], scaled to [0, 1]) and labels (ubyte [N], 0..255) as a classification
// data set {x F32 [1, S, S] or [S * S], y I64 []}; counts must agree.
std::shared_ptr<TensorDataset> load_idx(const std::filesystem::path& images, const std::filesystem::path& labels,
                                        const IdxOptions& opt = {});
// The MNIST layout in `dir`: {train,t10k}-{images-idx3,labels-idx1}-ubyte, each with or without
// ".gz" (Fashion-MNIST, MNIST, KMNIST). test is the t10k split.
struct IdxSplits {
  std::shared_ptr<TensorDataset> train, test;
};
IdxSplits load_idx_dir(const std::filesystem::path& dir, const IdxOptions& opt = {});

// ---- Tables -----------------------------------------------------------------------------------
struct TableOptions {
  // The label column: a CSV header name, or an index ("-1": the last column, the default).
  // For .npz, the array names of the features and the labels; a .npy holds one 2-D array whose
  // label column is `label`.
  std::string label = "-1";
  std::string features_key = "x", labels_key = "y";
  size_t max_bytes = kMaxDataFileBytes;
  int64_t max_columns = 1 << 16;
};
struct Table {
  Tensor x;                                 // F32 [N, F]
  Tensor y;                                 // I64 [N], 0..classes-1
  std::vector<std::string> feature_names;   // the CSV header's, or "f0", "f1", ...
  std::vector<std::string> classes;         // label text per class index ("0", "1", ... for numbers)
};
// .csv (comma separated; a header row when its fields are not all numbers; quoted fields;
// numeric features; labels integers or text), .npy (a 2-D numeric array) or .npz (stored or
// deflated members), chosen by extension. Text labels are numbered in sorted order; integer
// labels must be >= 0 and keep their values.
Table read_table(const std::filesystem::path& file, const TableOptions& opt = {});
// Labels of `t` renumbered to an existing class list (a test split read after its training
// split): a label the list lacks is an error naming the row.
void align_classes(Table& t, const std::vector<std::string>& classes, const std::filesystem::path& file);

// Per-feature standardisation, fitted on a training split and applied to every split, saved with
// the model: x' = (x - mean) / std (a feature with std 0 keeps std 1).
struct Normalizer {
  std::vector<float> mean, std;
  static Normalizer fit(const Tensor& x);       // F32 [N, F], N >= 1
  Tensor apply(const Tensor& x) const;          // F32 [N, F] -> new tensor
  nlohmann::json to_json() const;
  static Normalizer from_json(const nlohmann::json& j);  // checks sizes and finiteness
};

// ---- Text -------------------------------------------------------------------------------------
struct TextCorpus {
  std::string bytes;                        // the files' contents, in path order, each ending in '\n'
  std::vector<std::filesystem::path> files; // read
  std::vector<std::filesystem::path> skipped;  // in a directory: not UTF-8 text (indexes, binaries)
};
// A UTF-8 file (invalid UTF-8 is an error naming the byte offset), or every regular file under
// a directory, recursively in path order, links to files already read counted once and files
// that are not UTF-8 text skipped and listed.
TextCorpus read_text_corpus(const std::filesystem::path& path, size_t max_bytes = size_t{1} << 30);
// The corpus cut in two contiguous parts: {the first 1 - f, the last f} (no block straddles both).
std::pair<std::string, std::string> split_text(const std::string& bytes, double holdout_fraction);

// Byte-level language modelling: example i is {x I64 [max_len], y I64 [max_len]}, the bytes at
// [i * stride, i * stride + max_len) and the same shifted by one (next-byte targets).
class TextBlocks : public Dataset {
 public:
  TextBlocks(std::string bytes, int64_t max_len, int64_t stride = 0);  // stride 0: max_len
  int64_t size() const override;
  std::vector<Tensor> get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  int64_t max_len() const { return max_len_; }

 private:
  std::string bytes_;
  int64_t max_len_, stride_;
};

}  // namespace hg::training
