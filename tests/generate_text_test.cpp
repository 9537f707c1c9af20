// GeneratedText (server/generate_text.h): the generate endpoints' text assembly from byte
// tokens: pieces of whole UTF-8 characters (the same text as decode_utf8 of all the bytes, which
// is Python's replacement: data from scripts/testdata_gpt.py) and stop strings held back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "models/tokenizer.h"
#include "server/generate_text.h"

using namespace hg;
using namespace hg::server;
using json = nlohmann::json;

namespace {

std::filesystem::path tokenizer_cases() {
  const auto p = std::filesystem::path(HG_TESTDATA_DIR) / "gpt" / "tokenizer.json";
  if (!std::filesystem::exists(p))
    throw std::runtime_error(p.string() + " is missing: run /usr/bin/python3 scripts/testdata_gpt.py " HG_TESTDATA_DIR "/gpt");
  return p;
}

bool whole_utf8(const std::string& s) { return models::decode_utf8(s).invalid_offsets.empty(); }

// Each piece GeneratedText gives for `bytes` fed one at a time (finish() last, when not empty).
std::vector<std::string> pieces_of(const std::string& bytes, std::vector<std::string> stop = {}) {
  GeneratedText t(std::move(stop));
  std::vector<std::string> out;
  for (char b : bytes) {
    if (auto p = t.push(b); !p.empty()) out.push_back(p);
    if (t.stopped()) break;
  }
  if (auto p = t.finish(); !p.empty()) out.push_back(p);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& p : v) s += p;
  return s;
}

}  // namespace

TEST(GeneratedText, PiecesAreWholeCharacters) {
  const std::string text = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad";  // é € 😀 中
  const auto pieces = pieces_of(text);
  EXPECT_EQ(joined(pieces), text);
  EXPECT_EQ(pieces.size(), 11u);  // one per character
  for (const auto& p : pieces) EXPECT_TRUE(whole_utf8(p)) << p;
  GeneratedText t;
  EXPECT_EQ(t.push('\xf0'), "");
  EXPECT_EQ(t.push('\x9f'), "");
  EXPECT_EQ(t.push('\x98'), "");
  EXPECT_EQ(t.finish(), "\xEF\xBF\xBD");  // an unfinished character at the end is one U+FFFD
}

// Fed one byte at a time, any bytes come out as decode_utf8 of all of them: the ill-formed
// cases of the tokenizer test (Python's replacement) and random strings of tricky bytes.
TEST(GeneratedText, PiecesConcatenateToTheWholeDecoding) {
  for (const auto& c : json::parse(std::ifstream(tokenizer_cases()))) {
    const std::string bytes = models::decode_bytes(c["bytes"].get<std::vector<int64_t>>());
    EXPECT_EQ(joined(pieces_of(bytes)), models::decode_bytes(c["replaced"].get<std::vector<int64_t>>())) << c["bytes"].dump();
  }
  const std::vector<unsigned char> alphabet = {'a', 0x80, 0x9f, 0xa0, 0xbf, 0xc0, 0xc3, 0xdf, 0xe0, 0xe2,
                                               0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff, 0x82, 0xa9, 0x90, 0x8f};
  std::mt19937 rng(3);
  for (int n = 0; n < 2000; ++n) {
    std::string bytes;
    for (size_t i = rng() % 10; i > 0; --i) bytes += static_cast<char>(alphabet[rng() % alphabet.size()]);
    const auto pieces = pieces_of(bytes);
    ASSERT_EQ(joined(pieces), models::decode_utf8(bytes).text) << testing::PrintToString(bytes);
    for (const auto& p : pieces) ASSERT_TRUE(whole_utf8(p));
  }
}

TEST(GeneratedText, StopStringsEndTheTextAndAreHeldBack) {
  EXPECT_EQ(pieces_of("ab\ncd\n\nef", {"\n\n"}), (std::vector<std::string>{"a", "b", "\nc", "d"}));
  EXPECT_EQ(joined(pieces_of("xyz END", {"END", "yz"})), "x");  // the earliest stop string wins
  EXPECT_EQ(joined(pieces_of("caf\xc3\xa9!", {"\xc3\xa9!"})), "caf");
  EXPECT_EQ(joined(pieces_of("ab", {"bc"})), "ab");  // a held start that never completes is released
  GeneratedText t({"ab"});
  EXPECT_EQ(t.push('a'), "");
  EXPECT_EQ(t.push('b'), "");
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.push('c'), "");
  EXPECT_EQ(t.finish(), "");
}
