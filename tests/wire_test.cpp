// KServe v2 datatypes on the wire (server/wire.h): names, JSON <-> bytes for every datatype,
// range and type errors, 16-bit float rounding, BYTES length prefixes, nesting and size limits.
#include "server/wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "tests/errors.h"

namespace {

using hg::server::WireLimits;
using hg::server::WireTensor;
using hg::server::WireType;
using hg::test::error_of;
using json = nlohmann::json;
using ::testing::HasSubstr;

WireTensor tensor(WireType t, std::vector<int64_t> shape, std::string name = "x") {
  WireTensor w;
  w.name = std::move(name);
  w.datatype = t;
  w.shape = std::move(shape);
  return w;
}

std::string to_bytes(WireType t, const json& data, std::vector<int64_t> shape, const WireLimits& limits = {}) {
  return hg::server::json_to_bytes(data, tensor(t, std::move(shape)), limits);
}

std::string json_text(WireType t, std::string bytes, std::vector<int64_t> shape) {
  WireTensor w = tensor(t, std::move(shape));
  w.data = std::move(bytes);
  std::string out;
  hg::server::append_json_data(out, w);
  return out;
}

uint16_t bits16(WireType t, double v) {
  const std::string b = to_bytes(t, json::array({v}), {1});
  uint16_t h;
  std::memcpy(&h, b.data(), 2);
  return h;
}

std::string half_text(WireType t, uint16_t bits) { return json_text(t, std::string(reinterpret_cast<char*>(&bits), 2), {1}); }

TEST(Wire, EveryDatatypeHasItsNameSizeAndEngineType) {
  const std::pair<const char*, size_t> expected[] = {{"BOOL", 1}, {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4},
                                                     {"UINT64", 8}, {"INT8", 1}, {"INT16", 2}, {"INT32", 4},
                                                     {"INT64", 8}, {"FP16", 2}, {"FP32", 4}, {"FP64", 8},
                                                     {"BF16", 2}, {"BYTES", 0}};
  ASSERT_EQ(std::size(hg::server::kAllWireTypes), std::size(expected));
  for (size_t i = 0; i < std::size(expected); ++i) {
    const WireType t = hg::server::kAllWireTypes[i];
    EXPECT_STREQ(hg::server::wire_type_name(t), expected[i].first);
    EXPECT_EQ(hg::server::wire_type_size(t), expected[i].second);
    EXPECT_EQ(hg::server::wire_type_from_name(expected[i].first), t);
  }
  EXPECT_FALSE(hg::server::wire_type_from_name("fp32"));
  EXPECT_FALSE(hg::server::wire_type_from_name("FLOAT"));
  EXPECT_EQ(hg::server::engine_dtype(WireType::FP32), hg::DType::F32);
  EXPECT_EQ(hg::server::engine_dtype(WireType::INT64), hg::DType::I64);
  EXPECT_EQ(hg::server::engine_dtype(WireType::BF16), hg::DType::BF16);
  EXPECT_FALSE(hg::server::engine_dtype(WireType::UINT16));
  EXPECT_FALSE(hg::server::engine_dtype(WireType::BYTES));
}

// Extreme values of every datatype, nested [2,2], survive JSON -> bytes -> JSON unchanged.
TEST(Wire, EveryDatatypeRoundTripsThroughJsonAndBinary) {
  const std::pair<WireType, const char*> cases[] = {
      {WireType::BOOL, "[true,false,false,true]"},
      {WireType::UINT8, "[0,255,1,128]"},
      {WireType::UINT16, "[0,65535,1,300]"},
      {WireType::UINT32, "[0,4294967295,1,70000]"},
      {WireType::UINT64, "[0,18446744073709551615,1,9223372036854775808]"},
      {WireType::INT8, "[-128,127,0,-1]"},
      {WireType::INT16, "[-32768,32767,0,-1]"},
      {WireType::INT32, "[-2147483648,2147483647,0,-1]"},
      {WireType::INT64, "[-9223372036854775808,9223372036854775807,0,-1]"},
      {WireType::FP16, "[1,-2.5,65504,5.9604645e-08]"},
      {WireType::FP32, "[0.1,-3.4028235e+38,1e-45,1.5]"},
      {WireType::FP64, "[0.1,1e+300,-5e-324,2]"},
      {WireType::BF16, "[1,-0.5,3.3895314e+38,1.0078125]"},
      {WireType::BYTES, R"(["abc","","h\u00e9","q\"\\\n"])"},
  };
  for (const auto& [type, text] : cases) {
    SCOPED_TRACE(hg::server::wire_type_name(type));
    const json flat = json::parse(text);
    const json nested = json::array({json::array({flat[0], flat[1]}), json::array({flat[2], flat[3]})});
    const std::string bytes = to_bytes(type, nested, {2, 2});
    if (hg::server::wire_type_size(type)) {
      EXPECT_EQ(bytes.size(), 4 * hg::server::wire_type_size(type));
    }
    EXPECT_EQ(bytes, to_bytes(type, flat, {2, 2}));  // flat and nested give the same bytes
    WireTensor w = tensor(type, {2, 2});
    EXPECT_NO_THROW(hg::server::check_binary(bytes, w));
    EXPECT_EQ(json::parse(json_text(type, bytes, {2, 2})), flat);
  }
}

TEST(Wire, BinaryLayoutIsLittleEndianRowMajor) {
  EXPECT_EQ(to_bytes(WireType::UINT32, json::parse("[[1,2],[3,256]]"), {2, 2}),
            std::string("\x01\0\0\0\x02\0\0\0\x03\0\0\0\x00\x01\0\0", 16));
  EXPECT_EQ(to_bytes(WireType::BOOL, json::parse("[true,false,true]"), {3}), std::string("\x01\x00\x01", 3));
  EXPECT_EQ(to_bytes(WireType::INT16, json::parse("[-2]"), {1}), std::string("\xfe\xff", 2));
  EXPECT_EQ(to_bytes(WireType::BYTES, json::parse(R"(["ab",""])"), {2}), std::string("\x02\0\0\0ab\0\0\0\0", 10));
  const float f = 1.5f;
  EXPECT_EQ(to_bytes(WireType::FP32, json::parse("[1.5]"), {1}), std::string(reinterpret_cast<const char*>(&f), 4));
}

TEST(Wire, OutOfRangeElementsNameTensorIndexAndValue) {
  const std::tuple<WireType, const char*, const char*> cases[] = {
      {WireType::UINT8, "256", "UINT8"},   {WireType::UINT8, "-1", "UINT8"},
      {WireType::UINT16, "65536", "UINT16"}, {WireType::UINT32, "4294967296", "UINT32"},
      {WireType::UINT64, "-1", "UINT64"},  {WireType::INT8, "128", "INT8"},
      {WireType::INT8, "-129", "INT8"},    {WireType::INT16, "32768", "INT16"},
      {WireType::INT32, "-2147483649", "INT32"}, {WireType::INT64, "9223372036854775808", "INT64"},
      {WireType::FP16, "65520", "FP16"},   {WireType::FP32, "1e+39", "FP32"},
      {WireType::BF16, "3.4e+38", "BF16"},
  };
  for (const auto& [type, value, name] : cases) {
    const json data = json::parse(std::string("[0,1,2,3,4,5,6,") + value + "]");
    EXPECT_EQ(error_of<hg::InvalidArgument>([&] { to_bytes(type, data, {8}); }),
              std::string("input 'x': data element 7 (") + value + ") is out of range for " + name);
  }
  // the largest finite values are fine
  EXPECT_NO_THROW(to_bytes(WireType::FP16, json::parse("[65519]"), {1}));
  EXPECT_NO_THROW(to_bytes(WireType::FP32, json::parse("[3.4028235e38]"), {1}));
  EXPECT_NO_THROW(to_bytes(WireType::FP64, json::parse("[1.7e308]"), {1}));
}

TEST(Wire, WrongElementTypesAreRejected) {
  EXPECT_EQ(error_of<hg::InvalidArgument>([] { to_bytes(WireType::INT32, json::parse("[1,1.5]"), {2}); }),
            "input 'x': data element 1 is the number 1.5, expected an integer (datatype INT32)");
  EXPECT_THAT(error_of<hg::InvalidArgument>([] { to_bytes(WireType::BOOL, json::parse("[true,1]"), {2}); }),
              HasSubstr("data element 1 is the number 1, expected true or false (datatype BOOL)"));
  EXPECT_THAT(error_of<hg::InvalidArgument>([] { to_bytes(WireType::FP32, json::parse(R"([1,"2"])"), {2}); }),
              HasSubstr("data element 1 is string, expected a number (datatype FP32)"));
  EXPECT_THAT(error_of<hg::InvalidArgument>([] { to_bytes(WireType::BYTES, json::parse(R"(["a",2])"), {2}); }),
              HasSubstr("data element 1 is number, expected a string (datatype BYTES)"));
  EXPECT_THAT(error_of<hg::InvalidArgument>([] { to_bytes(WireType::UINT8, json::parse("[null]"), {1}); }),
              HasSubstr("data element 0 is null, expected an integer"));
  EXPECT_THAT(error_of<hg::InvalidArgument>([] { to_bytes(WireType::FP32, json::parse("[[1],{}]"), {2}); }),
              HasSubstr("data element 1 is object"));
  EXPECT_THAT(error_of<hg::InvalidArgument>([] { to_bytes(WireType::FP32, json::parse("3"), {1}); }),
              HasSubstr("'data' must be an array"));
  // null reads as NaN for float types (what a NaN output prints as)
  const std::string nan = to_bytes(WireType::FP32, json::parse("[null]"), {1});
  float f;
  std::memcpy(&f, nan.data(), 4);
  EXPECT_TRUE(std::isnan(f));
}

TEST(Wire, ElementCountMustMatchTheShape) {
  EXPECT_EQ(error_of<hg::InvalidArgument>([] { to_bytes(WireType::FP32, json::parse("[[1,2],[3]]"), {2, 2}); }),
            "input 'x': shape [2,2] needs 4 elements, 'data' has 3");
  EXPECT_THAT(error_of<hg::InvalidArgument>([] { to_bytes(WireType::INT64, json::parse("[1,2,3]"), {2}); }),
              HasSubstr("needs 2 elements, 'data' has 3"));
  EXPECT_EQ(to_bytes(WireType::FP32, json::array(), {0, 5}), "");
}

TEST(Wire, ElementLimitIsEnforcedBeforeAllocating) {
  WireLimits limits;
  limits.max_elements = 1000;
  EXPECT_EQ(error_of<hg::InvalidArgument>([&] { to_bytes(WireType::FP32, json::array(), {10, 101}, limits); }),
            "input 'x': shape [10,101] has 1010 elements, more than the limit of 1000");
  EXPECT_THAT(error_of<hg::InvalidArgument>(
                  [&] { to_bytes(WireType::FP32, json::array(), {INT64_MAX, INT64_MAX}, limits); }),
              HasSubstr("more than 2^64 elements"));
  EXPECT_EQ(hg::server::element_count({INT64_MAX, 4}), UINT64_MAX);
  EXPECT_EQ(hg::server::element_count({}), 1u);
  EXPECT_EQ(hg::server::shape_text({1, 3, 224, 224}), "[1,3,224,224]");
}

json nested(size_t levels) {
  json j = json::array({7});
  for (size_t i = 1; i < levels; ++i) j = json::array({std::move(j)});
  return j;
}

TEST(Wire, NestingDepthIsCappedAt100Levels) {
  EXPECT_EQ(to_bytes(WireType::INT32, nested(100), {1}).size(), 4u);
  EXPECT_EQ(error_of<hg::InvalidArgument>([] { to_bytes(WireType::INT32, nested(101), {1}); }),
            "input 'x': 'data' is nested deeper than 100 levels");
  WireLimits shallow;
  shallow.max_json_depth = 2;
  EXPECT_THAT(error_of<hg::InvalidArgument>([&] { to_bytes(WireType::INT32, nested(3), {1}, shallow); }),
              HasSubstr("nested deeper than 2 levels"));
}

TEST(Wire, HalfFloatsMatchKnownBitPatterns) {
  EXPECT_EQ(bits16(WireType::FP16, 1.0), 0x3C00);
  EXPECT_EQ(bits16(WireType::BF16, 1.0), 0x3F80);
  EXPECT_EQ(bits16(WireType::FP16, -2.0), 0xC000);
  EXPECT_EQ(bits16(WireType::FP16, 65504.0), 0x7BFF);
  EXPECT_EQ(bits16(WireType::FP16, std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(bits16(WireType::FP16, 0.0), 0x0000);
  EXPECT_EQ(bits16(WireType::BF16, -0.5), 0xBF00);
  // ties round to even
  EXPECT_EQ(bits16(WireType::FP16, 1.0 + std::ldexp(1.0, -11)), 0x3C00);
  EXPECT_EQ(bits16(WireType::FP16, 1.0 + 3 * std::ldexp(1.0, -11)), 0x3C02);
  EXPECT_EQ(bits16(WireType::BF16, 1.0 + std::ldexp(1.0, -8)), 0x3F80);
  EXPECT_EQ(bits16(WireType::BF16, 1.0 + 3 * std::ldexp(1.0, -8)), 0x3F82);
  // just above a tie rounds up, even where double -> float alone would land on the tie
  EXPECT_EQ(bits16(WireType::FP16, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3C01);
  EXPECT_EQ(bits16(WireType::BF16, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3F81);
  // null is NaN
  EXPECT_EQ(to_bytes(WireType::FP16, json::parse("[null]"), {1}), std::string("\x00\x7e", 2));
  // printing: shortest form of the value, null for inf/NaN
  EXPECT_EQ(half_text(WireType::FP16, 0x3C00), "[1]");
  EXPECT_EQ(half_text(WireType::BF16, 0x3F80), "[1]");
  EXPECT_EQ(half_text(WireType::FP16, 0x3555), "[0.33325195]");
  EXPECT_EQ(half_text(WireType::FP16, 0x7C00), "[null]");
  EXPECT_EQ(half_text(WireType::BF16, 0x7FC0), "[null]");
}

TEST(Wire, FloatsPrintShortestRoundTrip) {
  std::string s;
  hg::server::append_number(s, 0.1f);
  s += ' ';
  hg::server::append_number(s, 0.1);
  s += ' ';
  hg::server::append_number(s, std::numeric_limits<float>::denorm_min());
  s += ' ';
  hg::server::append_number(s, std::numeric_limits<double>::infinity());
  s += ' ';
  hg::server::append_number(s, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(s, "0.1 0.1 1e-45 null null");
  for (float f : {1.0f / 3, 123456.789f, -2.5e-20f, 3.4028235e38f}) {
    std::string t;
    hg::server::append_number(t, f);
    EXPECT_EQ(std::stof(t), f) << t;
  }
}

TEST(Wire, BinarySizesMustBeExact) {
  WireTensor w = tensor(WireType::UINT32, {2, 2});
  EXPECT_NO_THROW(hg::server::check_binary(std::string(16, '\0'), w));
  EXPECT_EQ(error_of<hg::InvalidArgument>([&] { hg::server::check_binary(std::string(15, '\0'), w); }),
            "input 'x': binary data has 15 bytes, shape [2,2] of UINT32 needs 16");
  EXPECT_THAT(error_of<hg::InvalidArgument>([&] { hg::server::check_binary(std::string(17, '\0'), w, "output"); }),
              HasSubstr("output 'x': binary data has 17 bytes"));
  WireTensor huge = tensor(WireType::FP64, {INT64_MAX, 4});
  EXPECT_THAT(error_of<hg::InvalidArgument>([&] { hg::server::check_binary("", huge); }),
              HasSubstr("needs more than 2^64"));
}

// Corrupting any length-prefix byte of a BYTES tensor is caught and the error names the
// element's byte offset; corrupting payload bytes is not an error.
TEST(Wire, BytesPrefixCorruptionAtEveryOffsetIsCaught) {
  const std::string good = hg::server::bytes_encode({"ab", "cde"});
  ASSERT_EQ(good.size(), 13u);
  WireTensor w = tensor(WireType::BYTES, {2});
  EXPECT_NO_THROW(hg::server::check_binary(good, w));
  for (size_t i = 0; i < good.size(); ++i) {
    SCOPED_TRACE(i);
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x40);
    const bool prefix = i < 4 || (i >= 6 && i < 10);
    if (!prefix) {
      EXPECT_NO_THROW(hg::server::check_binary(bad, w));
      continue;
    }
    const std::string e = error_of<hg::InvalidArgument>([&] { hg::server::check_binary(bad, w); });
    EXPECT_THAT(e, HasSubstr(i < 4 ? "BYTES element 0 at byte offset 0" : "BYTES element 1 at byte offset 6"));
    EXPECT_THAT(e, HasSubstr("input 'x'"));
  }
  for (size_t n = 0; n < good.size(); ++n) {  // every truncation
    SCOPED_TRACE(n);
    EXPECT_THROW(hg::server::check_binary(good.substr(0, n), w), hg::InvalidArgument);
  }
  EXPECT_EQ(error_of<hg::InvalidArgument>([&] { hg::server::check_binary(good.substr(0, 8), w); }),
            "input 'x': BYTES element 1 at byte offset 6: the 4-byte length prefix runs past the end of the "
            "8-byte data");
  EXPECT_EQ(error_of<hg::InvalidArgument>([&] { hg::server::check_binary(good + "x", w); }),
            "input 'x': BYTES data has 1 bytes left at byte offset 13 after the 2 elements of shape [2]");
  EXPECT_EQ(error_of<hg::InvalidArgument>([&] { hg::server::check_binary(good.substr(0, 6), w); }),
            "input 'x': BYTES data holds 1 elements, shape [2] needs 2");
  EXPECT_THROW(hg::server::bytes_elements(good.substr(0, 12)), hg::InvalidArgument);
}

TEST(Wire, BytesElementsAndEncodeAreInverse) {
  const std::vector<std::string> s = {"", "a", std::string("\0\xff", 2), std::string(300, 'z')};
  EXPECT_EQ(hg::server::bytes_elements(hg::server::bytes_encode(s)), s);
  EXPECT_TRUE(hg::server::bytes_elements("").empty());
}

TEST(Wire, JsonStringsAreEscapedAndInvalidUtf8Replaced) {
  std::string out;
  hg::server::append_json_string(out, "a\"b\\c\n\x01 h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\n\\u0001 h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  EXPECT_EQ(json::parse(out).get<std::string>(), std::string("a\"b\\c\n\x01 h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  out.clear();
  hg::server::append_json_string(out, "x\xff y\xc3 \xed\xa0\x80");  // stray byte, truncated, surrogate
  EXPECT_EQ(json::parse(out).get<std::string>(), "x\xef\xbf\xbd y\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  // BYTES data with invalid UTF-8 still prints as valid JSON
  WireTensor w = tensor(WireType::BYTES, {1});
  w.data = hg::server::bytes_encode({"\xfe"});
  std::string text;
  hg::server::append_json_data(text, w);
  EXPECT_EQ(json::parse(text), json::parse("[\"\xef\xbf\xbd\"]"));
}

}  // namespace
