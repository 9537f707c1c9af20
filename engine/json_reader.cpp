#include "engine/json_reader.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "engine/error.h"

namespace hg {

namespace {

using json = nlohmann::json;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string quoted_key(const std::string& key) {
  return nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Recursive descent; the recursion is bounded by max_depth. Json is nlohmann::json (objects
// sorted by key) or nlohmann::ordered_json (objects in document order; keys must be unique,
// checked through a hash set so that a large object costs linear time).
template <class Json>
class Reader {
  using json = Json;
  static constexpr bool kOrdered = std::is_same_v<Json, nlohmann::ordered_json>;

 public:
  Reader(std::string_view text, const JsonLimits& limits, std::string_view what)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()), limits_(limits), what_(what) {}

  json document() {
    json v = value(0);
    skip_ws();
    if (p_ != end_) fail("unexpected characters after the JSON value");
    return v;
  }

 private:
  const char* begin_;
  const char* p_;
  const char* end_;
  JsonLimits limits_;
  size_t values_ = 0;
  std::string_view what_;

  [[noreturn]] void fail(const std::string& why) const {
    throw InvalidArgument("malformed JSON in " + std::string(what_) + ": " + why + " at byte offset " +
                          std::to_string(p_ - begin_));
  }

  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  void expect(char c, const char* why) {
    skip_ws();
    if (p_ == end_ || *p_ != c) fail(why);
    ++p_;
  }

  json value(size_t depth) {
    skip_ws();
    if (p_ == end_) fail("unexpected end of input, expected a value");
    if (++values_ > limits_.max_values)
      throw InvalidArgument(std::string(what_) + " has more than " + std::to_string(limits_.max_values) +
                            " JSON values (at byte offset " + std::to_string(p_ - begin_) + ")");
    switch (*p_) {
      case '{': return object(depth + 1);
      case '[': return array(depth + 1);
      case '"': return json(string());
      case 't': literal("true"); return json(true);
      case 'f': literal("false"); return json(false);
      case 'n': literal("null"); return json(nullptr);
      default:
        if (*p_ == '-' || is_digit(*p_)) return number();
        fail("unexpected character, expected a value");
    }
  }

  void enter(size_t depth) const {
    if (depth > limits_.max_depth)
      throw InvalidArgument(std::string(what_) + " is nested deeper than " + std::to_string(limits_.max_depth) +
                            " levels (at byte offset " + std::to_string(p_ - begin_) + ")");
  }

  json array(size_t depth) {
    enter(depth);
    ++p_;
    json a = json::array();
    auto& items = *a.template get_ptr<typename json::array_t*>();
    skip_ws();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      return a;
    }
    for (;;) {
      items.push_back(value(depth));
      skip_ws();
      if (p_ == end_) fail("unexpected end of input in an array");
      if (*p_ == ']') {
        ++p_;
        return a;
      }
      if (*p_ != ',') fail("expected ',' or ']'");
      ++p_;
    }
  }

  json object(size_t depth) {
    enter(depth);
    ++p_;
    json o = json::object();
    auto& members = *o.template get_ptr<typename json::object_t*>();
    std::unordered_set<std::string> keys;  // ordered objects only
    skip_ws();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      return o;
    }
    for (;;) {
      skip_ws();
      if (p_ == end_ || *p_ != '"') fail("expected a string key");
      std::string key = string();
      expect(':', "expected ':'");
      if constexpr (kOrdered) {
        if (!keys.insert(key).second) fail("duplicate key " + quoted_key(key));
        using Pairs = std::vector<std::pair<const std::string, Json>>;
        static_cast<Pairs&>(members).emplace_back(std::move(key), value(depth));  // no linear lookup
      } else {
        members[std::move(key)] = value(depth);  // a repeated key: the last one wins
      }
      skip_ws();
      if (p_ == end_) fail("unexpected end of input in an object");
      if (*p_ == '}') {
        ++p_;
        return o;
      }
      if (*p_ != ',') fail("expected ',' or '}'");
      ++p_;
    }
  }

  void literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::memcmp(p_, word.data(), word.size()) != 0)
      fail("invalid literal");
    p_ += word.size();
  }

  uint32_t hex4() {
    if (end_ - p_ < 4) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = hex_digit(p_[i]);
      if (d < 0) fail("invalid \\u escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    p_ += 4;
    return v;
  }

  std::string string() {
    ++p_;  // the opening quote
    std::string s;
    const std::string_view all(begin_, static_cast<size_t>(end_ - begin_));
    for (;;) {
      const char* run = p_;
      while (p_ < end_ && static_cast<unsigned char>(*p_) >= 0x20 && static_cast<unsigned char>(*p_) < 0x80 &&
             *p_ != '"' && *p_ != '\\')
        ++p_;
      s.append(run, p_);
      if (p_ == end_) fail("unterminated string");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return s;
      }
      if (c < 0x20) fail("control character in a string");
      if (c >= 0x80) {
        const size_t n = utf8_sequence(all, static_cast<size_t>(p_ - begin_));
        if (!n) fail("invalid UTF-8 in a string");
        s.append(p_, n);
        p_ += n;
        continue;
      }
      ++p_;  // backslash
      if (p_ == end_) fail("unterminated string");
      switch (*p_++) {
        case '"': s += '"'; break;
        case '\\': s += '\\'; break;
        case '/': s += '/'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) fail("lone low surrogate in a \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') fail("high surrogate without a low surrogate");
            p_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff) fail("high surrogate without a low surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          append_utf8(s, cp);
          break;
        }
        default: --p_; fail("invalid escape");
      }
    }
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?; integers that fit stay integers (uint64
  // when non-negative, int64 when negative), like nlohmann.
  json number() {
    const char* start = p_;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    if (p_ < end_ && *p_ == '0') {
      ++p_;
    } else if (p_ < end_ && is_digit(*p_)) {
      while (p_ < end_ && is_digit(*p_)) ++p_;
    } else {
      fail("invalid number");
    }
    bool integer = true;
    if (p_ < end_ && *p_ == '.') {
      integer = false;
      ++p_;
      if (p_ == end_ || !is_digit(*p_)) fail("invalid number: digits expected after '.'");
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      integer = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !is_digit(*p_)) fail("invalid number: digits expected in the exponent");
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (integer) {
      if (negative) {
        int64_t v;
        if (std::from_chars(start, p_, v).ec == std::errc()) return json(v);
      } else {
        uint64_t v;
        if (std::from_chars(start, p_, v).ec == std::errc()) return json(v);
      }
    }
    double d = 0;
    if (std::from_chars(start, p_, d).ec == std::errc::result_out_of_range)
      d = std::strtod(std::string(start, p_).c_str(), nullptr);  // underflow: 0 or subnormal; overflow: inf
    if (!std::isfinite(d)) {
      p_ = start;
      fail("number out of range");
    }
    return json(d);
  }
};

}  // namespace

template <class Json>
static Json read_as(std::string_view text, const JsonLimits& limits, std::string_view what) {
  if (text.size() > limits.max_bytes)
    throw InvalidArgument(std::string(what) + " is " + std::to_string(text.size()) + " bytes, over the limit of " +
                          std::to_string(limits.max_bytes) + " bytes");
  return Reader<Json>(text, limits, what).document();
}

json read_json(std::string_view text, const JsonLimits& limits, std::string_view what) {
  return read_as<json>(text, limits, what);
}

nlohmann::ordered_json read_ordered_json(std::string_view text, const JsonLimits& limits, std::string_view what) {
  return read_as<nlohmann::ordered_json>(text, limits, what);
}

json read_json_file(const std::filesystem::path& path, const JsonLimits& limits) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(path.string() + ": cannot be read: " + ec.message());
  if (size > limits.max_bytes)
    throw FormatError(path.string() + ": is " + std::to_string(size) + " bytes, over the limit of " +
                      std::to_string(limits.max_bytes) + " bytes for a JSON file");
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size)) || in.gcount() != static_cast<std::streamsize>(size))
    throw IoError(path.string() + ": cannot be read");
  try {
    return read_json(text, limits, path.string());
  } catch (const InvalidArgument& e) {
    throw FormatError(e.what());
  }
}

namespace {

// Appends at most `budget` characters of `v`'s compact JSON text; false once it ran out.
template <class J>
bool excerpt(const J& v, std::string& out, size_t budget, size_t depth) {
  auto room = [&] { return out.size() < budget; };
  auto put = [&](std::string_view s) {
    out.append(s.substr(0, budget - std::min(budget, out.size())));
    return room();
  };
  if (v.is_array() || v.is_object()) {
    const bool object = v.is_object();
    if (!put(object ? "{" : "[")) return false;
    if (depth >= 16 && !v.empty()) return put("...") && put(object ? "}" : "]");
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first && !put(",")) return false;
      first = false;
      if (object && !(put(quoted_key(it.key())) && put(":")))
        return false;
      if (!excerpt(*it, out, budget, depth + 1)) return false;
    }
    return put(object ? "}" : "]");
  }
  if (v.is_string()) {
    const auto& s = v.template get_ref<const std::string&>();
    return put(quoted_key(s.substr(0, budget)));
  }
  return put(v.dump());
}

}  // namespace

std::string json_excerpt(const json& v, size_t max_chars) {
  std::string out;
  if (!excerpt(v, out, max_chars, 0)) out += "...";
  return out;
}

std::string json_excerpt(const nlohmann::ordered_json& v, size_t max_chars) {
  std::string out;
  if (!excerpt(v, out, max_chars, 0)) out += "...";
  return out;
}

size_t utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  size_t n;
  unsigned lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlong forms
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;  // up to U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  return n;
}

}  // namespace hg
