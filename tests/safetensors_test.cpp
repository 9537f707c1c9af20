// Tests for models/safetensors: round trips, a Python-written reference file, the byte
// layout of what we write, one test per corruption the reader must reject, atomic writes.
#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/error.h"

#ifndef HG_SOURCE_DIR
#error "HG_SOURCE_DIR must be defined as the repository root (a string literal)"
#endif

namespace st = hg::safetensors;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <typename T>
std::vector<T> values_of(const st::Entry& e) {
  EXPECT_EQ(e.data.size() % sizeof(T), 0u) << e.name;
  std::vector<T> out(e.data.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), e.data.data(), e.data.size());
  return out;
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

uint64_t load_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A file image: 8-byte length, the header text as given (unpadded), `data_size` data bytes.
std::vector<uint8_t> image(const std::string& header, size_t data_size) {
  std::vector<uint8_t> b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_size; ++i) b.push_back(static_cast<uint8_t>(i));
  return b;
}

constexpr const char* kSource = "corrupt.safetensors";

// The message of the hg::FormatError that parsing `bytes` throws; fails the test otherwise.
std::string format_error(const std::vector<uint8_t>& bytes) {
  try {
    st::parse(bytes, kSource);
  } catch (const hg::FormatError& e) {
    EXPECT_EQ(e.code(), hg::ErrorCode::Format);
    EXPECT_THAT(e.what(), HasSubstr(kSource));
    return e.what();
  }
  ADD_FAILURE() << "parse accepted a corrupt file";
  return "";
}

std::string format_error(const std::string& header, size_t data_size) {
  return format_error(image(header, data_size));
}

std::string file_byte(const std::string& header, uint64_t data_offset) {
  return "file byte " + std::to_string(8 + header.size() + data_offset);
}

st::File sample_file() {
  st::File f;
  f.metadata = {{"format", "pt"}, {"note", "round trip"}};
  f.entries = {
      {"f32", "F32", {2, 3}, bytes_of<float>({1.5f, -2.f, 0.f, 3.25f, 1e-7f, -1e7f})},
      {"f16", "F16", {3}, bytes_of<uint16_t>({0x3C00, 0xB800, 0x7BFF})},
      {"bf16", "BF16", {2}, bytes_of<uint16_t>({0x3F80, 0xC040})},
      {"f64", "F64", {2, 1}, bytes_of<double>({3.141592653589793, -1e300})},
      {"i64", "I64", {2}, bytes_of<int64_t>({INT64_MIN, INT64_MAX})},
      {"i32", "I32", {3}, bytes_of<int32_t>({INT32_MIN, 0, INT32_MAX})},
      {"i16", "I16", {2}, bytes_of<int16_t>({-32768, 32767})},
      {"i8", "I8", {1, 1, 2}, bytes_of<int8_t>({-128, 127})},
      {"u8", "U8", {4}, {0, 1, 128, 255}},
      {"bool", "BOOL", {3}, {1, 0, 1}},
      {"scalar", "F32", {}, bytes_of<float>({42.f})},
      {"empty", "F32", {0, 4}, {}},
  };
  return f;
}

void expect_same(const st::File& a, const st::File& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    EXPECT_EQ(a.entries[i].name, b.entries[i].name);
    EXPECT_EQ(a.entries[i].dtype, b.entries[i].dtype) << a.entries[i].name;
    EXPECT_EQ(a.entries[i].shape, b.entries[i].shape) << a.entries[i].name;
    EXPECT_EQ(a.entries[i].data, b.entries[i].data) << a.entries[i].name;
  }
}

class SafetensorsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("hg_safetensors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

}  // namespace

TEST(Safetensors, DtypeSizes) {
  EXPECT_EQ(st::dtype_size("F64"), 8u);
  EXPECT_EQ(st::dtype_size("I64"), 8u);
  EXPECT_EQ(st::dtype_size("F32"), 4u);
  EXPECT_EQ(st::dtype_size("I32"), 4u);
  EXPECT_EQ(st::dtype_size("F16"), 2u);
  EXPECT_EQ(st::dtype_size("BF16"), 2u);
  EXPECT_EQ(st::dtype_size("I16"), 2u);
  EXPECT_EQ(st::dtype_size("I8"), 1u);
  EXPECT_EQ(st::dtype_size("U8"), 1u);
  EXPECT_EQ(st::dtype_size("BOOL"), 1u);
  EXPECT_THROW(st::dtype_size("F8"), hg::DTypeError);
  EXPECT_THROW(st::dtype_size("f32"), hg::DTypeError);
}

TEST_F(SafetensorsFiles, RoundTripsAllDtypesAndMetadata) {
  const st::File f = sample_file();
  const fs::path p = dir_ / "all.safetensors";
  st::write(p, f);
  st::File back = st::read(p);
  expect_same(f, back);
  expect_same(f, st::parse(read_bytes(p), "all"));
  ASSERT_NE(back.find("i64"), nullptr);
  EXPECT_EQ(values_of<int64_t>(*back.find("i64")), (std::vector<int64_t>{INT64_MIN, INT64_MAX}));
  EXPECT_EQ(back.find("missing"), nullptr);
}

TEST_F(SafetensorsFiles, RoundTripsEmptyFile) {
  st::write(dir_ / "empty.safetensors", st::File{});
  const st::File back = st::read(dir_ / "empty.safetensors");
  EXPECT_TRUE(back.entries.empty());
  EXPECT_TRUE(back.metadata.empty());
}

TEST(Safetensors, ReadsPythonWrittenReference) {
  // Written by scripts/write_safetensors_ref.py with struct + json + numpy only.
  const st::File f = st::read(fs::path(HG_SOURCE_DIR) / "tests/data/reference.safetensors");
  std::vector<std::string> names;
  for (const auto& e : f.entries) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"counts_i32", "empty_f32", "half_f16", "ids_i64",
                                             "mask_bool", "matrix_f64", "pixels_u8", "scalar_f32",
                                             "weight_f32"}));
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{
                            {"format", "pt"},
                            {"producer", "write_safetensors_ref.py"},
                            {"note", "\xc3\xbc" "nic\xc3\xb8" "de \xe2\x9c\x93"}}));

  const st::Entry* w = f.find("weight_f32");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, "F32");
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values_of<float>(*w), (std::vector<float>{0.5f, -1.25f, 2.0f, 3.75f, -0.0625f, 1.0e6f}));

  const st::Entry* ids = f.find("ids_i64");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, "I64");
  EXPECT_EQ(ids->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(values_of<int64_t>(*ids),
            (std::vector<int64_t>{0, -1, int64_t{1} << 40, -(int64_t{1} << 62)}));

  const st::Entry* px = f.find("pixels_u8");
  ASSERT_NE(px, nullptr);
  EXPECT_EQ(px->dtype, "U8");
  EXPECT_EQ(px->shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(px->data, (std::vector<uint8_t>{0, 1, 127, 128, 255}));

  const st::Entry* m = f.find("matrix_f64");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->dtype, "F64");
  EXPECT_EQ(m->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values_of<double>(*m), (std::vector<double>{3.141592653589793, -2.5, 1e-300, 1e300}));

  const st::Entry* c = f.find("counts_i32");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, "I32");
  EXPECT_EQ(values_of<int32_t>(*c), (std::vector<int32_t>{INT32_MIN, 7, INT32_MAX}));

  const st::Entry* h = f.find("half_f16");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->dtype, "F16");
  EXPECT_EQ(values_of<uint16_t>(*h), (std::vector<uint16_t>{0x3C00, 0xB800, 0x7BFF}));  // 1, -0.5, 65504

  const st::Entry* b = f.find("mask_bool");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, "BOOL");
  EXPECT_EQ(b->data, (std::vector<uint8_t>{1, 0, 1}));

  const st::Entry* s = f.find("scalar_f32");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(values_of<float>(*s), (std::vector<float>{42.0f}));

  const st::Entry* e = f.find("empty_f32");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(e->data.empty());
}

TEST(Safetensors, ReadsShippedDigits) {
  const st::File f = st::read(fs::path(HG_SOURCE_DIR) / "models/data/digits.safetensors");
  const st::Entry* images = f.find("images");
  const st::Entry* labels = f.find("labels");
  ASSERT_NE(images, nullptr);
  ASSERT_NE(labels, nullptr);
  EXPECT_EQ(images->dtype, "U8");
  EXPECT_EQ(images->shape, (std::vector<int64_t>{1797, 64}));
  EXPECT_EQ(labels->shape, (std::vector<int64_t>{1797}));
  EXPECT_EQ(*std::max_element(images->data.begin(), images->data.end()), 16);
  EXPECT_EQ(*std::max_element(labels->data.begin(), labels->data.end()), 9);
  EXPECT_EQ(f.metadata.at("license"), "BSD-3-Clause");
}

TEST_F(SafetensorsFiles, WrittenLayoutIsWhatSafetensorsExpects) {
  const st::File f = sample_file();
  const fs::path p = dir_ / "layout.safetensors";
  st::write(p, f);
  const std::vector<uint8_t> b = read_bytes(p);
  EXPECT_EQ(b, st::serialize(f));

  ASSERT_GE(b.size(), 8u);
  const uint64_t n = load_u64_le(b.data());
  ASSERT_LE(8 + n, b.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-byte aligned";
  const std::string text(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(text.front(), '{');
  const size_t close = text.find_last_of('}');
  ASSERT_NE(close, std::string::npos);
  EXPECT_EQ(text.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces";
  EXPECT_LT(text.size() - close - 1, 8u);

  const auto header = nlohmann::json::parse(text);
  EXPECT_EQ(header.at("__metadata__"), (nlohmann::json{{"format", "pt"}, {"note", "round trip"}}));
  uint64_t offset = 0;  // entries laid out contiguously in the order given
  for (const st::Entry& e : f.entries) {
    const auto& j = header.at(e.name);
    EXPECT_EQ(j.at("dtype"), e.dtype);
    EXPECT_EQ(j.at("shape").get<std::vector<int64_t>>(), e.shape);
    EXPECT_EQ(j.at("data_offsets"), (nlohmann::json{offset, offset + e.data.size()})) << e.name;
    EXPECT_TRUE(std::equal(e.data.begin(), e.data.end(), b.begin() + 8 + n + offset)) << e.name;
    offset += e.data.size();
  }
  EXPECT_EQ(b.size(), 8 + n + offset);
}

TEST(Safetensors, WriterRejectsInconsistentEntries) {
  st::File bad_size;
  bad_size.entries = {{"w", "F32", {2, 2}, std::vector<uint8_t>(12)}};
  EXPECT_THROW(st::serialize(bad_size), hg::ShapeError);
  st::File bad_dtype;
  bad_dtype.entries = {{"w", "F8", {1}, {0}}};
  EXPECT_THROW(st::serialize(bad_dtype), hg::DTypeError);
  st::File dup;
  dup.entries = {{"w", "U8", {1}, {0}}, {"w", "U8", {1}, {1}}};
  EXPECT_THROW(st::serialize(dup), hg::InvalidArgument);
  st::File reserved;
  reserved.entries = {{"__metadata__", "U8", {1}, {0}}};
  EXPECT_THROW(st::serialize(reserved), hg::InvalidArgument);
}

// ---- corruption cases: each must throw hg::FormatError naming the field / byte offset ----

TEST(SafetensorsCorrupt, FileShorterThanLengthField) {
  const std::string msg = format_error(std::vector<uint8_t>{1, 2, 3});
  EXPECT_THAT(msg, HasSubstr("file is 3 bytes long"));
  EXPECT_THAT(msg, HasSubstr("8-byte header length"));
}

TEST(SafetensorsCorrupt, HeaderLengthBeyondFile) {
  std::vector<uint8_t> b = image("{}", 4);
  b[0] = 0xE8;  // header length 1000
  b[1] = 0x03;
  const std::string msg = format_error(b);
  EXPECT_THAT(msg, HasSubstr("header length 1000 (file bytes [0, 8))"));
  EXPECT_THAT(msg, HasSubstr("14-byte file"));
}

TEST(SafetensorsCorrupt, HugeHeaderLengthDoesNotOverflow) {
  std::vector<uint8_t> b = image("{}", 0);
  std::fill(b.begin(), b.begin() + 8, 0xFF);
  EXPECT_THAT(format_error(b), HasSubstr("header length 18446744073709551615"));
}

TEST(SafetensorsCorrupt, HeaderNotJson) {
  EXPECT_THAT(format_error("{\"a\": ", 0), HasSubstr("header (which starts at file byte 8): unexpected end of input"));
  EXPECT_THAT(format_error("{\"a\" 1}", 0), HasSubstr("header (which starts at file byte 8): expected ':' at byte offset 5"));
}

TEST(SafetensorsCorrupt, HeaderNotObject) {
  EXPECT_THAT(format_error("[1, 2]", 0), HasSubstr("header must be a JSON object, got array"));
}

TEST(SafetensorsCorrupt, DuplicateKey) {
  const std::string h = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                        R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  EXPECT_THAT(format_error(h, 2), HasSubstr("duplicate key \"a\""));
}

TEST(SafetensorsCorrupt, EntryNotObject) {
  EXPECT_THAT(format_error(R"({"w": [1]})", 0), HasSubstr("tensor 'w': entry must be a JSON object"));
}

TEST(SafetensorsCorrupt, MissingDtype) {
  EXPECT_THAT(format_error(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': missing field 'dtype'"));
}

TEST(SafetensorsCorrupt, MissingShape) {
  EXPECT_THAT(format_error(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': missing field 'shape'"));
}

TEST(SafetensorsCorrupt, MissingDataOffsets) {
  EXPECT_THAT(format_error(R"({"w":{"dtype":"F32","shape":[1]}})", 4),
              HasSubstr("tensor 'w': missing field 'data_offsets'"));
}

TEST(SafetensorsCorrupt, DtypeNotString) {
  EXPECT_THAT(format_error(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': field 'dtype' must be a string, got number"));
}

TEST(SafetensorsCorrupt, ShapeNotArray) {
  EXPECT_THAT(format_error(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': field 'shape' must be an array, got string"));
}

TEST(SafetensorsCorrupt, ShapeDimNotInteger) {
  EXPECT_THAT(format_error(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': field 'shape'[0] must be an integer"));
}

TEST(SafetensorsCorrupt, DataOffsetsWrongType) {
  EXPECT_THAT(format_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
              HasSubstr("tensor 'w': field 'data_offsets' must be an array of two integers"));
  EXPECT_THAT(format_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", 4),
              HasSubstr("tensor 'w': field 'data_offsets'[1] must be a non-negative integer"));
  EXPECT_THAT(format_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4),
              HasSubstr("tensor 'w': field 'data_offsets'[0] must be a non-negative integer"));
}

TEST(SafetensorsCorrupt, UnknownDtype) {
  EXPECT_THAT(format_error(R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': field 'dtype' has unknown dtype \"F12\""));
}

TEST(SafetensorsCorrupt, NegativeDim) {
  EXPECT_THAT(format_error(R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': field 'shape'[1] is negative (-3)"));
}

TEST(SafetensorsCorrupt, BeginAfterEnd) {
  EXPECT_THAT(format_error(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", 8),
              HasSubstr("tensor 'w': field 'data_offsets' begin 8 > end 4"));
}

TEST(SafetensorsCorrupt, EndBeyondDataSection) {
  const std::string h = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  const std::string msg = format_error(h, 8);
  EXPECT_THAT(msg, HasSubstr("tensor 'w': field 'data_offsets' end 16 (" + file_byte(h, 16) + ")"));
  EXPECT_THAT(msg, HasSubstr("beyond the data section of 8 bytes"));
}

TEST(SafetensorsCorrupt, ByteCountDoesNotMatchShape) {
  const std::string h = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  const std::string msg = format_error(h, 8);
  EXPECT_THAT(msg, HasSubstr("tensor 'w': field 'data_offsets' [0, 8) holds 8 bytes at " + file_byte(h, 0)));
  EXPECT_THAT(msg, HasSubstr("shape [3] of F32 needs 12"));
}

TEST(SafetensorsCorrupt, ShapeProductOverflows) {
  const std::string h =
      R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})";
  EXPECT_THAT(format_error(h, 8), HasSubstr("tensor 'w': field 'shape' [4294967296,4294967296] is too large"));
}

TEST(SafetensorsCorrupt, OverlappingRanges) {
  const std::string h = R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                        R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})";
  const std::string msg = format_error(h, 8);
  EXPECT_THAT(msg, HasSubstr("tensors 'a' and 'b' overlap: data_offsets [0, 6) and [4, 8)"));
  EXPECT_THAT(msg, HasSubstr(file_byte(h, 4)));
}

TEST(SafetensorsCorrupt, GapNotCoveredByAnyTensor) {
  const std::string h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})";
  const std::string msg = format_error(h, 12);
  const uint64_t base = 8 + h.size();
  EXPECT_THAT(msg, HasSubstr("data section bytes [4, 8) (file bytes [" + std::to_string(base + 4) +
                             ", " + std::to_string(base + 8) + ")) are not covered by any tensor"));
}

TEST(SafetensorsCorrupt, TrailingBytesNotCoveredByAnyTensor) {
  const std::string h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  EXPECT_THAT(format_error(h, 6), HasSubstr("data section bytes [4, 6)"));
  EXPECT_THAT(format_error("{}", 3), HasSubstr("data section bytes [0, 3)"));
}

TEST(SafetensorsCorrupt, MetadataValueNotString) {
  EXPECT_THAT(format_error(R"({"__metadata__":{"epoch":3}})", 0),
              HasSubstr("field '__metadata__' value for key \"epoch\" must be a string, got number"));
  EXPECT_THAT(format_error(R"({"__metadata__":["x"]})", 0),
              HasSubstr("field '__metadata__' must be an object, got array"));
}

TEST(SafetensorsCorrupt, AcceptsPaddingAndEmptyTensors) {
  // The valid neighbours of the cases above: trailing spaces, zero-sized tensors anywhere.
  const std::string h = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                        R"("z":{"dtype":"F32","shape":[0],"data_offsets":[1,1]}}     )";
  const st::File f = st::parse(image(h, 2), "ok");
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.entries[0].data, (std::vector<uint8_t>{0, 1}));
  EXPECT_TRUE(f.entries[1].data.empty());
}

TEST_F(SafetensorsFiles, ReadNamesThePathOfACorruptFile) {
  const fs::path p = dir_ / "truncated.safetensors";
  std::vector<uint8_t> b = st::serialize(sample_file());
  b.resize(b.size() - 3);
  write_bytes(p, b);
  try {
    st::read(p);
    FAIL() << "read accepted a truncated file";
  } catch (const hg::FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr(p.string()));
    EXPECT_THAT(e.what(), HasSubstr("tensor 'scalar'"));  // the last non-empty tensor now runs past the end
  }
  write_bytes(p, {0, 0});
  EXPECT_THROW(st::read(p), hg::FormatError);
}

TEST_F(SafetensorsFiles, ReadMissingFileIsIoError) {
  try {
    st::read(dir_ / "absent.safetensors");
    FAIL() << "read of a missing file succeeded";
  } catch (const hg::IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("absent.safetensors"));
  }
}

// ---- atomic write ----

TEST_F(SafetensorsFiles, WriteLeavesNoTemporaryFiles) {
  st::write(dir_ / "a.safetensors", sample_file());
  st::write(dir_ / "a.safetensors", sample_file());  // replace
  EXPECT_EQ(listing(), (std::vector<std::string>{"a.safetensors"}));
  struct stat s {};
  ASSERT_EQ(::stat((dir_ / "a.safetensors").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0644u);
}

TEST_F(SafetensorsFiles, ReplacesExistingFileOnlyWhenComplete) {
  const fs::path p = dir_ / "model.safetensors";
  st::File old_file;
  old_file.entries = {{"w", "U8", {3}, {7, 8, 9}}};
  st::write(p, old_file);
  const std::vector<uint8_t> old_bytes = read_bytes(p);

  // A reader holding the old file open keeps seeing the complete old file: the new one is
  // renamed over it, never written in place.
  const int fd = ::open(p.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  st::write(p, sample_file());
  std::vector<uint8_t> seen(old_bytes.size() + 16);
  const ssize_t n = ::pread(fd, seen.data(), seen.size(), 0);
  ::close(fd);
  ASSERT_EQ(n, static_cast<ssize_t>(old_bytes.size()));
  seen.resize(static_cast<size_t>(n));
  EXPECT_EQ(seen, old_bytes);
  expect_same(st::read(p), sample_file());

  // A write that fails validation leaves the existing file untouched.
  st::File bad;
  bad.entries = {{"w", "F32", {2}, {1, 2, 3}}};
  const std::vector<uint8_t> current = read_bytes(p);
  EXPECT_THROW(st::write(p, bad), hg::ShapeError);
  EXPECT_EQ(read_bytes(p), current);
  EXPECT_EQ(listing(), (std::vector<std::string>{"model.safetensors"}));
}

TEST_F(SafetensorsFiles, FailedRenameRemovesTemporaryFile) {
  // The target is a non-empty directory, so the final rename fails after the data was written.
  fs::create_directories(dir_ / "busy" / "inside");
  EXPECT_THROW(st::write(dir_ / "busy", sample_file()), hg::IoError);
  EXPECT_EQ(listing(), (std::vector<std::string>{"busy"}));
  EXPECT_THROW(st::write(dir_ / "no_such_dir" / "x.safetensors", sample_file()), hg::IoError);
  EXPECT_EQ(listing(), (std::vector<std::string>{"busy"}));
}
