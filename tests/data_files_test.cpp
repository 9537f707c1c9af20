// Data sets from files (training/data_files.h): IDX, CSV / .npy / .npz tables and text corpora,
// read back from fixtures NumPy wrote (scripts/golden_data_files.py -> tests/data/tables), and
// every kind of damage answered with an error naming the file, the record and the byte offset.
// Fashion-MNIST (Debian's dataset-fashion-mnist, installed by scripts/setup.sh) is read in full.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/error.h"
#include "tests/errors.h"
#include "tests/test_env.h"
#include "models/deflate.h"
#include "training/data_files.h"

using namespace hg;
using namespace hg::training;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

const fs::path kTables = fs::path(HG_SOURCE_DIR) / "tests/data/tables";

nlohmann::json expected() {
  std::ifstream in(kTables / "expected.json");
  return nlohmann::json::parse(in);
}

// A scratch directory, removed at the end of the test.
struct TempDir {
  fs::path path = test::temp_dir(std::string("DataFiles_") +
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ~TempDir() { fs::remove_all(path); }
  fs::path write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return path / name;
  }
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void expect_table(const Table& t, const nlohmann::json& want) {
  const auto& x = want.at("x");
  ASSERT_EQ(t.x.shape(), (Shape{static_cast<int64_t>(x.size()), static_cast<int64_t>(x[0].size())}));
  const float* xd = t.x.data<float>();
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = 0; j < x[i].size(); ++j) {
      const double v = xd[i * x[i].size() + j];
      ASSERT_TRUE(std::isfinite(v));
      EXPECT_NEAR(v, x[i][j].get<double>(), 1e-6 * (1 + std::fabs(x[i][j].get<double>()))) << i << "," << j;
    }
  ASSERT_EQ(t.y.shape(), (Shape{static_cast<int64_t>(x.size())}));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(t.y.data<int64_t>()[i], want.at("y")[i].get<int64_t>()) << i;
}

}  // namespace

TEST(DataFiles, IdxArraysReadAsNumPyWroteThem) {
  const auto want = expected().at("idx");
  const Tensor im = read_idx(kTables / "tiny-idx3.gz");  // gzip
  ASSERT_EQ(im.dtype(), DType::U8);
  ASSERT_EQ(im.shape(), (Shape{3, 2, 2}));
  for (int i = 0; i < 3; ++i)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c) EXPECT_EQ(im.data<uint8_t>()[(i * 2 + r) * 2 + c], want["images"][i][r][c].get<int>());
  const Tensor fl = read_idx(kTables / "floats-idx2");
  ASSERT_EQ(fl.dtype(), DType::F32);
  ASSERT_EQ(fl.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(fl.data<float>()[i], want["floats"][i / 3][i % 3].get<float>());
  const Tensor sh = read_idx(kTables / "shorts-idx1");
  ASSERT_EQ(sh.dtype(), DType::I32);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sh.data<int32_t>()[i], want["shorts"][i].get<int>());
}

TEST(DataFiles, IdxImagesBecomeAClassificationSet) {
  const auto want = expected().at("idx");
  auto d = load_idx(kTables / "tiny-idx3.gz", kTables / "tiny-idx1");
  ASSERT_EQ(d->size(), 3);
  auto ex = d->get(2);
  ASSERT_EQ(ex[0].shape(), (Shape{1, 2, 2}));
  EXPECT_FLOAT_EQ(ex[0].data<float>()[1], want["images"][2][0][1].get<float>() / 255.0f);
  EXPECT_EQ(ex[1].data<int64_t>()[0], 3);
  // Padded to 4x4 around the centre, and flattened.
  auto padded = load_idx(kTables / "tiny-idx3.gz", kTables / "tiny-idx1", {.image_size = 4, .flatten = true});
  auto p = padded->get(0)[0];
  ASSERT_EQ(p.shape(), (Shape{16}));
  EXPECT_EQ(p.data<float>()[0], 0.0f);
  EXPECT_FLOAT_EQ(p.data<float>()[1 * 4 + 1], want["images"][0][0][0].get<float>() / 255.0f);
  EXPECT_FLOAT_EQ(p.data<float>()[2 * 4 + 2], want["images"][0][1][1].get<float>() / 255.0f);
  EXPECT_THAT(test::error_of<InvalidArgument>([] { load_idx(kTables / "tiny-idx3.gz", kTables / "tiny-idx1", {.image_size = 1}); }),
              HasSubstr("smaller than the 2x2 images"));
  EXPECT_THAT(test::error_of<FormatError>([] { load_idx(kTables / "tiny-idx3.gz", kTables / "shorts-idx1"); }),
              HasSubstr("expected ubyte labels [N], found I32 [3]"));
}

TEST(DataFiles, DamagedIdxFilesAreNamedWithTheOffset) {
  TempDir dir;
  const std::string good = read_bytes(kTables / "tiny-idx1");  // 00 00 08 01, 00 00 00 03, 3 bytes
  EXPECT_THAT(test::error_of<FormatError>([&] { read_idx(dir.write("short", good.substr(0, good.size() - 1))); }),
              HasSubstr("the header declares [3] = 3 elements of 1 bytes (11 bytes with the header), the file has 10 bytes"));
  EXPECT_THAT(test::error_of<FormatError>([&] { read_idx(dir.write("long", good + "x")); }), HasSubstr("the file has 12 bytes"));
  std::string magic = good;
  magic[0] = 'P';
  EXPECT_THAT(test::error_of<FormatError>([&] { read_idx(dir.write("magic", magic)); }),
              HasSubstr("byte offset 0: not an IDX file"));
  std::string type = good;
  type[2] = 0x0A;
  EXPECT_THAT(test::error_of<FormatError>([&] { read_idx(dir.write("type", type)); }),
              HasSubstr("byte offset 2: unknown IDX element type 0x0a"));
  std::string rank = good;
  rank[3] = 9;
  EXPECT_THAT(test::error_of<FormatError>([&] { read_idx(dir.write("rank", rank)); }), HasSubstr("byte offset 3: rank 9"));
  // Dimensions whose product passes what the file holds stop before any allocation.
  const std::string huge("\0\0\x08\x03\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 16);
  EXPECT_THAT(test::error_of<FormatError>([&] { read_idx(dir.write("huge", huge)); }),
              HasSubstr("byte offset 4: dimension 0 (4294967295) makes more elements than the file has bytes"));
  // A corrupt gzip stream: the byte offset in the compressed file.
  std::string gz = read_bytes(kTables / "tiny-idx3.gz");
  gz.resize(gz.size() - 12);
  const std::string m = test::error_of<FormatError>([&] { read_idx(dir.write("cut.gz", gz)); });
  EXPECT_THAT(m, HasSubstr("cut.gz (gzip) is truncated"));
  EXPECT_THAT(m, HasSubstr("byte offset"));
  // A decompression bomb stops at the limit.
  const std::string bomb = deflate_compress(std::string(1 << 20, '\0'), Deflated::Gzip);
  EXPECT_THAT(test::error_of<TooLargeError>([&] { read_idx(dir.write("bomb.gz", bomb), 4096); }),
              HasSubstr("exceeds the limit of 4096 bytes"));
  EXPECT_THROW(read_idx(dir.path / "absent"), IoError);
}

TEST(DataFiles, FashionMnistFromTheDebianPackage) {
  const fs::path dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir / "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << dir << " is not installed (scripts/setup.sh installs dataset-fashion-mnist)";
  auto s = load_idx_dir(dir);
  ASSERT_EQ(s.train->size(), 60000);
  ASSERT_EQ(s.test->size(), 10000);
  EXPECT_EQ(s.train->tensors()[0].shape(), (Shape{60000, 1, 28, 28}));
  // The published class balance: 6,000 training and 1,000 test images per class.
  std::vector<int> train_count(10), test_count(10);
  for (int64_t i = 0; i < 60000; ++i) ++train_count.at(static_cast<size_t>(s.train->tensors()[1].data<int64_t>()[i]));
  for (int64_t i = 0; i < 10000; ++i) ++test_count.at(static_cast<size_t>(s.test->tensors()[1].data<int64_t>()[i]));
  EXPECT_EQ(train_count, std::vector<int>(10, 6000));
  EXPECT_EQ(test_count, std::vector<int>(10, 1000));
  EXPECT_EQ(s.test->tensors()[1].data<int64_t>()[0], 9);  // the first test image is an ankle boot
  const float* x = s.train->tensors()[0].data<float>();
  const auto [lo, hi] = std::minmax_element(x, x + 60000 * 784);
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  EXPECT_THAT(test::error_of<NotFoundError>([] { load_idx_dir(kTables); }), HasSubstr("tables: no train-images-idx3-ubyte or train-images-idx3-ubyte.gz (the MNIST layout"));
}

TEST(DataFiles, TablesReadAsNumPyWroteThem) {
  const auto want = expected();
  expect_table(read_table(kTables / "rows.npy"), want["rows"]);
  expect_table(read_table(kTables / "rows_f.npy"), want["rows"]);  // Fortran order, big-endian float32
  expect_table(read_table(kTables / "xy.npz"), want["xy"]);         // stored members
  expect_table(read_table(kTables / "xy_deflate.npz"), want["xy_deflate"]);  // deflated members
  const Table iris = read_table(kTables / "iris_head.csv");
  expect_table(iris, want["iris_head"]);
  EXPECT_EQ(iris.classes, want["iris_head"]["classes"].get<std::vector<std::string>>());
  EXPECT_EQ(iris.feature_names, want["iris_head"]["features"].get<std::vector<std::string>>());
  // The label named, or by index, reads the same; another label column makes "species" a
  // feature, whose text is refused. Integer labels keep their values.
  expect_table(read_table(kTables / "iris_head.csv", {.label = "species"}), want["iris_head"]);
  expect_table(read_table(kTables / "iris_head.csv", {.label = "3"}), want["iris_head"]);
  EXPECT_THAT(test::error_of<FormatError>([] { read_table(kTables / "iris_head.csv", {.label = "sepal_width"}); }),
              HasSubstr("row 2 (byte offset 50), column 3 'species': 'setosa' is not a finite number"));
  const Table xy = read_table(kTables / "xy.npz");
  EXPECT_EQ(xy.classes, (std::vector<std::string>{"0", "1", "2", "3"}));
}

TEST(DataFiles, DamagedTablesAreNamedWithRowAndOffset) {
  TempDir dir;
  std::string m = test::error_of<FormatError>([&] { read_table(dir.write("a.csv", "a,b,label\n1,2,0\n3,x,1\n")); });
  EXPECT_THAT(m, HasSubstr("a.csv: row 3 (byte offset 16), column 1 'b': 'x' is not a finite number"));
  m = test::error_of<FormatError>([&] { read_table(dir.write("b.csv", "1,2,0\n3,4\n")); });
  EXPECT_THAT(m, HasSubstr("byte offset 6: 2 fields, the first row has 3"));
  m = test::error_of<FormatError>([&] { read_table(dir.write("c.csv", "1,2,0\n\"3,4,1\n")); });
  EXPECT_THAT(m, HasSubstr("byte offset 6: unterminated quoted field"));
  m = test::error_of<FormatError>([&] { read_table(dir.write("d.csv", "1,nan,0\n")); });
  EXPECT_THAT(m, HasSubstr("'nan' is not a finite number"));
  m = test::error_of<FormatError>([&] { read_table(dir.write("e.csv", "1,2,-1\n")); });
  EXPECT_THAT(m, HasSubstr("row 1: label -1 is negative"));
  m = test::error_of<InvalidArgument>([&] { read_table(kTables / "iris_head.csv", {.label = "kind"}); });
  EXPECT_THAT(m, HasSubstr("no column named 'kind'"));
  m = test::error_of<TooLargeError>([&] { read_table(dir.write("wide.csv", std::string(100, ',') + "\n"), {.max_columns = 10}); });
  EXPECT_THAT(m, HasSubstr("more than 10 columns"));
  m = test::error_of<FormatError>([] { read_table(kTables / "xy.npz", {.features_key = "features"}); });
  EXPECT_THAT(m, HasSubstr("no array 'features' (arrays: x, y)"));
  // A flipped byte inside a stored member fails its CRC-32; a cut archive has no directory.
  std::string npz = read_bytes(kTables / "xy.npz");
  const size_t at = npz.find("NUMPY") + 80;
  npz[at] ^= 0x40;
  m = test::error_of<FormatError>([&] { read_table(dir.write("crc.npz", npz)); });
  EXPECT_THAT(m, HasSubstr("CRC-32 mismatch"));
  m = test::error_of<FormatError>([&] { read_table(dir.write("cut.npz", npz.substr(0, npz.size() / 2))); });
  EXPECT_THAT(m, HasSubstr("not a zip archive"));
  std::string npy = read_bytes(kTables / "rows.npy");
  m = test::error_of<FormatError>([&] { read_table(dir.write("cut.npy", npy.substr(0, npy.size() - 8))); });
  EXPECT_THAT(m, HasSubstr("the file has 152"));
  std::string descr = npy;
  descr.replace(descr.find("<f8"), 3, "<c8");
  m = test::error_of<FormatError>([&] { read_table(dir.write("complex.npy", descr)); });
  EXPECT_THAT(m, HasSubstr(".npy dtype '<c8' is not supported"));
  // A label past what int64 (and a double, exactly) holds is refused, not converted.
  std::string big = "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), }";
  big.resize(128 - 10 - 1, ' ');
  big = std::string("\x93NUMPY\x01\x00", 8) + char(big.size() + 1) + '\0' + big + '\n';
  for (double v : {0.5, 1e300}) big.append(reinterpret_cast<const char*>(&v), sizeof v);
  m = test::error_of<FormatError>([&] { read_table(dir.write("big_label.npy", big)); });
  EXPECT_THAT(m, HasSubstr("row 0: label 1000000"));
  EXPECT_THAT(m, HasSubstr("is not an integer of at most 2^53 in magnitude"));
  EXPECT_THROW(read_table(dir.write("t.parquet", "x")), InvalidArgument);
}

TEST(DataFiles, NormalizerMatchesNumPyAndRoundTrips) {
  const auto want = expected().at("xy");
  const Table t = read_table(kTables / "xy.npz");
  const Normalizer z = Normalizer::fit(t.x);
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_NEAR(z.mean[c], want["mean"][c].get<double>(), 1e-6);
    EXPECT_NEAR(z.std[c], want["std"][c].get<double>(), 1e-6);
  }
  const Tensor n = z.apply(t.x);
  for (int64_t i = 0; i < n.numel(); ++i) {
    const size_t c = static_cast<size_t>(i % 3);
    EXPECT_NEAR(n.data<float>()[i], (want["x"][i / 3][c].get<double>() - want["mean"][c].get<double>()) / want["std"][c].get<double>(),
                1e-5);
  }
  const Normalizer back = Normalizer::from_json(z.to_json());
  EXPECT_EQ(back.mean, z.mean);
  EXPECT_EQ(back.std, z.std);
  // A constant feature keeps std 1; bad saved statistics are refused.
  const Normalizer c = Normalizer::fit(Tensor::from_vector({2, 5, 2, 7}, {2, 2}));
  EXPECT_EQ(c.std[0], 1.0f);
  EXPECT_THAT(test::error_of<FormatError>([] { Normalizer::from_json({{"mean", {0.0}}, {"std", {0.0}}}); }),
              HasSubstr("feature 0 has mean"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { z.apply(Tensor::zeros({2, 4})); }), HasSubstr("expected F32 [N, 3]"));
}

TEST(DataFiles, TestSplitLabelsFollowTheTrainingClasses) {
  TempDir dir;
  Table test = read_table(dir.write("test.csv", "1,virginica\n2,setosa\n"));
  align_classes(test, {"setosa", "versicolor", "virginica"}, dir.path / "test.csv");
  EXPECT_EQ(test.y.data<int64_t>()[0], 2);
  EXPECT_EQ(test.y.data<int64_t>()[1], 0);
  Table odd = read_table(dir.write("odd.csv", "1,daisy\n"));
  EXPECT_THAT(test::error_of<FormatError>([&] { align_classes(odd, {"setosa"}, dir.path / "odd.csv"); }),
              HasSubstr("row 0: label 'daisy' is not a class of the training split"));
}

TEST(DataFiles, TextCorporaAreUtf8CheckedAndSplitIntoBlocks) {
  TempDir dir;
  fs::create_directories(dir.path / "sub");
  dir.write("b.txt", "second file, no newline");
  dir.write("a.txt", "caf\xc3\xa9 \xe2\x82\xac\n");
  dir.write("a.dat", std::string("\0\x01\x02\x03", 4));   // a binary index: skipped
  dir.write("sub/c", "deep\n");
  fs::create_symlink(dir.path / "a.txt", dir.path / "a.u8");  // a link to a file read already
  const TextCorpus c = read_text_corpus(dir.path);
  EXPECT_EQ(c.bytes, "caf\xc3\xa9 \xe2\x82\xac\nsecond file, no newline\ndeep\n");
  EXPECT_EQ(c.files.size(), 3u);
  ASSERT_EQ(c.skipped.size(), 1u);
  EXPECT_EQ(c.skipped[0].filename(), "a.dat");
  // One file that is not UTF-8: the offset of the first bad sequence.
  for (const auto& [bytes, offset] : std::vector<std::pair<std::string, int>>{
           {"ok \xc0\xaf", 3},             // overlong '/'
           {"ab\xed\xa0\x80", 2},          // a surrogate
           {"abcd\xe2\x82", 4},            // cut short
           {"\xf4\x90\x80\x80", 0},        // past U+10FFFF
           {std::string("x\0y", 3), 1}}) { // NUL
    const std::string m = test::error_of<FormatError>([&] { read_text_corpus(dir.write("bad.txt", bytes)); });
    EXPECT_THAT(m, HasSubstr("byte offset " + std::to_string(offset) + ": not UTF-8 text")) << m;
  }
  EXPECT_THROW(read_text_corpus(dir.path / "absent"), NotFoundError);
  const auto [train, held] = split_text(std::string(100, 'a') + std::string(10, 'b'), 0.1);
  EXPECT_EQ(train, std::string(99, 'a'));
  EXPECT_EQ(held, std::string(1, 'a') + std::string(10, 'b'));
  TextBlocks blocks("abcdefghij", 4);  // blocks at 0 and 4; 8 would need 5 bytes
  ASSERT_EQ(blocks.size(), 2);
  auto b = blocks.get_batch({1, 0});
  ASSERT_EQ(b[0].shape(), (Shape{2, 4}));
  EXPECT_EQ(b[0].data<int64_t>()[0], 'e');
  EXPECT_EQ(b[1].data<int64_t>()[3], 'i');  // the target of 'h'
  EXPECT_EQ(b[0].data<int64_t>()[4], 'a');
  TextBlocks sliding("abcdefghij", 4, 1);
  EXPECT_EQ(sliding.size(), 6);
  EXPECT_EQ(sliding.get(5)[1].data<int64_t>()[3], 'j');
  EXPECT_THROW(TextBlocks("abc", 3), InvalidArgument);
  EXPECT_THROW(blocks.get(2), InvalidArgument);
}
