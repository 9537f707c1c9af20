// The JSON reader for untrusted text (engine/json_reader.h) against nlohmann::json::parse: the same
// values for valid documents, a rejection for every invalid one (fixed cases and random
// mutations of a request body), and the nesting cap.
#include "engine/json_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tests/errors.h"

namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

std::optional<json> nlohmann_parse(std::string_view s) {
  try {
    return json::parse(s.begin(), s.end());
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::optional<json> ours(std::string_view s) {
  try {
    return hg::read_json(s, {.max_depth = 1000}, "the body");
  } catch (const hg::InvalidArgument&) {
    return std::nullopt;
  }
}

// Same acceptance and, when accepted, the same value with the same number types.
void expect_same(std::string_view s) {
  SCOPED_TRACE(std::string(s));
  const auto a = nlohmann_parse(s), b = ours(s);
  ASSERT_EQ(a.has_value(), b.has_value());
  if (!a) return;
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->dump(), b->dump());  // dump tells integer, unsigned and float apart
}

TEST(JsonReader, ValidDocumentsGiveNlohmannsValues) {
  for (const char* s : {
           "0", "-0", "1", "-1", "18446744073709551615", "18446744073709551616", "-9223372036854775808",
           "-9223372036854775809", "1.5", "-0.0", "1e10", "1E-10", "2.5e+3", "1e-400", "1.7976931348623157e308",
           "4.9e-324", "0.1", "123456789012345678901234567890", "true", "false", "null", "\"\"",
           R"("a\"b\\c\/d\b\f\n\r\t")", R"("\u0041\u00e9\u20ac\ud83d\ude00")", "\"h\xc3\xa9 \xf0\x9f\x98\x80\"",
           "[]", "{}", " [ 1 , 2 ,3 ] ", R"({"a":1,"b":[true,null,{"c":"d"}],"a":2})", "\t\r\n{}\n",
           R"({"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2.5],[-3e2,0]]}]})"})
    expect_same(s);
}

TEST(JsonReader, InvalidDocumentsAreRejected) {
  for (const char* s : {"", " ", "01", "-01", "1.", ".5", "-", "+1", "1e", "1e+", "0x10", "NaN", "Infinity",
                        "[1,]", "[,1]", "[1 2]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{\"a\":}", "tru", "nul",
                        "truex", "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\u12G4\"", "\"\\ud800\"", "\"\\udc00\"",
                        "\"\\ud800\\u0041\"", "\"a\tb\"", "\"\x01\"", "\"\xff\"", "\"\xc0\x80\"", "\"\xed\xa0\x80\"",
                        "\"\xf4\x90\x80\x80\"", "\"\xe2\x82\"", "1 2", "[1]]", "[", "{", "{\"a\":1", "1e999",
                        "-1e999", "[1e400]"}) {
    expect_same(s);
    EXPECT_FALSE(ours(s)) << s;
  }
}

TEST(JsonReader, ErrorsNameTheTextAndByteOffset) {
  EXPECT_EQ(hg::test::error_of<hg::InvalidArgument>([] { hg::read_json("[1,2 3]", {.max_depth = 10}, "the request body"); }),
            "malformed JSON in the request body: expected ',' or ']' at byte offset 5");
  EXPECT_EQ(hg::test::error_of<hg::InvalidArgument>([] { hg::read_json("[1e999]", {.max_depth = 10}, "the body"); }),
            "malformed JSON in the body: number out of range at byte offset 1");
  EXPECT_EQ(hg::test::error_of<hg::InvalidArgument>([] { hg::read_json("\"\xff\"", {.max_depth = 10}, "the body"); }),
            "malformed JSON in the body: invalid UTF-8 in a string at byte offset 1");
}

TEST(JsonReader, NestingIsCappedWhileParsing) {
  const auto nest = [](size_t n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_EQ(hg::read_json(nest(10), {.max_depth = 10}, "x"), json::parse(nest(10)));
  EXPECT_EQ(hg::test::error_of<hg::InvalidArgument>([&] { hg::read_json(nest(11), {.max_depth = 10}, "the body"); }),
            "the body is nested deeper than 10 levels (at byte offset 10)");
  EXPECT_THAT(hg::test::error_of<hg::InvalidArgument>(
                  [] {
                    std::string deep;
                    for (int i = 0; i < 200000; ++i) deep += R"({"k":[)";
                    hg::read_json(deep, {.max_depth = 100}, "the body");
                  }),
              HasSubstr("nested deeper than 100 levels"));
}

TEST(JsonReader, ValuesAndBytesAreCappedBeforeTheWork) {
  const hg::JsonLimits limits{.max_depth = 8, .max_values = 5, .max_bytes = 64};
  EXPECT_EQ(hg::read_json("[1,2,3,4]", limits, "x"), json::parse("[1,2,3,4]"));  // 5 values: the array and 4
  EXPECT_EQ(hg::test::error_of<hg::InvalidArgument>([&] { hg::read_json("[1,2,3,4,5]", limits, "the body"); }),
            "the body has more than 5 JSON values (at byte offset 9)");
  EXPECT_EQ(hg::test::error_of<hg::InvalidArgument>([&] { hg::read_json(std::string(65, ' ') + "1", limits, "the body"); }),
            "the body is 66 bytes, over the limit of 64 bytes");
  // Keys do not count as values; objects do.
  EXPECT_NO_THROW(hg::read_json(R"({"a":{"b":1},"c":[2]})", limits, "x"));
}

TEST(JsonReader, FilesAreSizeCheckedAndNamed) {
  const auto dir = std::filesystem::temp_directory_path() / ("hg_json_reader_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "config.json";
  std::ofstream(path) << R"({"a": [1, 2})";
  EXPECT_THAT(hg::test::error_of<hg::FormatError>([&] { hg::read_json_file(path, {}); }),
              HasSubstr("malformed JSON in " + path.string() + ": expected ',' or ']' at byte offset 11"));
  std::ofstream(path) << std::string(100, ' ') << "{}";
  EXPECT_THAT(hg::test::error_of<hg::FormatError>([&] { hg::read_json_file(path, {.max_bytes = 50}); }),
              HasSubstr("is 102 bytes, over the limit of 50 bytes"));
  EXPECT_THAT(hg::test::error_of<hg::IoError>([&] { hg::read_json_file(dir / "missing.json", {}); }),
              HasSubstr("missing.json: cannot be read"));
  std::filesystem::remove_all(dir);
}

TEST(JsonReader, ExcerptsAreBoundedWhateverTheValue) {
  EXPECT_EQ(hg::json_excerpt(json::parse(R"({"a":[1,"x"],"b":null})")), R"({"a":[1,"x"],"b":null})");
  json big = json::array();
  for (int i = 0; i < 1000000; ++i) big.push_back(i);
  const std::string e = hg::json_excerpt(big, 20);
  EXPECT_EQ(e, "[0,1,2,3,4,5,6,7,8,9...");
  json deep = json::array();
  for (int i = 0; i < 5000; ++i) {
    json outer = json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  EXPECT_EQ(hg::json_excerpt(deep, 200), std::string(17, '[') + "..." + std::string(17, ']'));
  EXPECT_EQ(hg::json_excerpt(json(std::string(10000, 'a')), 10), "\"aaaaaaaaa...");
}

// Random byte edits of a request body: whatever nlohmann accepts we accept with the same
// value, whatever it rejects we reject.
TEST(JsonReader, AgreesWithNlohmannOnMutatedBodies) {
  const std::string base =
      R"({"id":"r\u00e9-1","parameters":{"priority":2,"x":-1.5e-3},"inputs":[{"name":"x","shape":[2,3],)"
      R"("datatype":"FP32","data":[[0.5,-1,2e3],[18446744073709551615,-9223372036854775808,0]]},)"
      R"({"name":"s","shape":[1],"datatype":"BYTES","data":["a\nb\ud83d\ude00"]}],"outputs":[{"name":"y"}]})";
  const std::string alphabet = "{}[]\",:.-+eE0123456789 \\utrfnal\x80\xc3\xa9";
  std::mt19937 rng(7);
  size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) {
      const size_t at = rng() % s.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: s[at] = c; break;
        case 1: s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default: s.erase(at, 1);
      }
    }
    const auto a = nlohmann_parse(s), b = ours(s);
    ASSERT_EQ(a.has_value(), b.has_value()) << s;
    if (a) {
      ++accepted;
      ASSERT_EQ(a->dump(), b->dump()) << s;
    }
  }
  EXPECT_GT(accepted, 1000u);  // the mutations exercise the accepting paths too
}

}  // namespace
