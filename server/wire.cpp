#include "server/wire.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/error.h"
#include "engine/json_reader.h"

namespace hg::server {

namespace {

using json = nlohmann::json;

struct TypeInfo {
  const char* name;
  size_t size;
};
constexpr TypeInfo kTypes[] = {{"BOOL", 1}, {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4}, {"UINT64", 8},
                               {"INT8", 1}, {"INT16", 2}, {"INT32", 4},  {"INT64", 8},  {"FP16", 2},
                               {"FP32", 4}, {"FP64", 8},  {"BF16", 2},   {"BYTES", 0}};
static_assert(std::size(kTypes) == std::size(kAllWireTypes));

const TypeInfo& info(WireType t) { return kTypes[static_cast<size_t>(t)]; }

std::string who(std::string_view role, const WireTensor& t) {
  std::string s(role);
  s += " '";
  s += t.name;
  s += '\'';
  return s;
}

// Wire bytes are little-endian, like every host we build for: loads and stores are memcpy.
static_assert(std::endian::native == std::endian::little);

template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// ---- JSON -> bytes ------------------------------------------------------------------------

// Leaves of a (nested) data array; throws when nested deeper than max_depth arrays.
uint64_t count_leaves(const json& j, size_t level, const WireLimits& limits, const std::string& what) {
  if (level > limits.max_json_depth)
    throw InvalidArgument(what + ": 'data' is nested deeper than " + std::to_string(limits.max_json_depth) +
                          " levels");
  uint64_t n = 0;
  for (const json& x : j) n += x.is_array() ? count_leaves(x, level + 1, limits, what) : 1;
  return n;
}

template <class F>
void for_each_leaf(const json& j, F& f) {
  for (const json& x : j) {
    if (x.is_array()) for_each_leaf(x, f);
    else f(x);
  }
}

// Converts and writes one element of a fixed-size type; `i` is its flat index for errors.
struct ElementWriter {
  const std::string& what;
  WireType type;
  char* out;
  size_t i = 0;

  [[noreturn]] void bad_type(const json& x, const char* expected) const {
    throw InvalidArgument(what + ": data element " + std::to_string(i) + " is " +
                          (x.is_number() ? "the number " + x.dump() : std::string(x.type_name())) +
                          ", expected " + expected + " (datatype " + info(type).name + ")");
  }
  [[noreturn]] void out_of_range(const json& x) const {
    throw InvalidArgument(what + ": data element " + std::to_string(i) + " (" + x.dump() +
                          ") is out of range for " + info(type).name);
  }

  template <class T>
  void integer(const json& x) {
    T v;
    if (const auto* u = x.get_ptr<const json::number_unsigned_t*>()) {
      if (*u > static_cast<uint64_t>(std::numeric_limits<T>::max())) out_of_range(x);
      v = static_cast<T>(*u);
    } else if (const auto* s = x.get_ptr<const json::number_integer_t*>()) {
      if constexpr (std::is_unsigned_v<T>) {
        if (*s < 0) out_of_range(x);
        if (static_cast<uint64_t>(*s) > static_cast<uint64_t>(std::numeric_limits<T>::max())) out_of_range(x);
      } else {
        if (*s < std::numeric_limits<T>::min() || *s > std::numeric_limits<T>::max()) out_of_range(x);
      }
      v = static_cast<T>(*s);
    } else {
      bad_type(x, "an integer");
    }
    std::memcpy(out + i * sizeof(T), &v, sizeof(T));
  }

  double number(const json& x) const {
    if (const auto* d = x.get_ptr<const json::number_float_t*>()) return *d;
    if (const auto* s = x.get_ptr<const json::number_integer_t*>()) return static_cast<double>(*s);
    if (const auto* u = x.get_ptr<const json::number_unsigned_t*>()) return static_cast<double>(*u);
    if (x.is_null()) return std::numeric_limits<double>::quiet_NaN();
    bad_type(x, "a number");
  }

  // double -> float rounded to odd: a second rounding to a 16-bit float then rounds the
  // original value correctly (to nearest even), which double -> float -> 16 bits would not.
  static float to_float_odd(double v) {
    const float f = static_cast<float>(v);
    if (static_cast<double>(f) == v || !std::isfinite(f) || (std::bit_cast<uint32_t>(f) & 1u)) return f;
    return std::nextafter(f, v > static_cast<double>(f) ? std::numeric_limits<float>::infinity()
                                                        : -std::numeric_limits<float>::infinity());
  }

  void operator()(const json& x) {
    switch (type) {
      case WireType::BOOL: {
        const auto* b = x.get_ptr<const json::boolean_t*>();
        if (!b) bad_type(x, "true or false");
        out[i] = *b ? 1 : 0;
        break;
      }
      case WireType::UINT8: integer<uint8_t>(x); break;
      case WireType::UINT16: integer<uint16_t>(x); break;
      case WireType::UINT32: integer<uint32_t>(x); break;
      case WireType::UINT64: integer<uint64_t>(x); break;
      case WireType::INT8: integer<int8_t>(x); break;
      case WireType::INT16: integer<int16_t>(x); break;
      case WireType::INT32: integer<int32_t>(x); break;
      case WireType::INT64: integer<int64_t>(x); break;
      case WireType::FP64: {
        const double v = number(x);
        std::memcpy(out + i * 8, &v, 8);
        break;
      }
      case WireType::FP32: {
        const double v = number(x);
        const float f = static_cast<float>(v);
        if (std::isinf(f) && !std::isinf(v)) out_of_range(x);
        std::memcpy(out + i * 4, &f, 4);
        break;
      }
      case WireType::FP16:
      case WireType::BF16: {
        const double v = number(x);
        const float f = to_float_odd(v);
        const uint16_t h = type == WireType::FP16 ? f16::from_float(f).bits : bf16::from_float(f).bits;
        if ((h & 0x7fffu) == (type == WireType::FP16 ? 0x7c00u : 0x7f80u)) out_of_range(x);  // rounds to inf
        std::memcpy(out + i * 2, &h, 2);
        break;
      }
      case WireType::BYTES: break;  // not a fixed-size type: json_to_bytes handles it
    }
    ++i;
  }
};

// ---- bytes -> JSON ------------------------------------------------------------------------

// Room one printed number needs: sign and digits for integers, the longest shortest
// round-trip form for floats ("-1.17549435e-38", "-2.2250738585072014e-308"), "null".
template <class T>
constexpr size_t kMaxChars = std::is_floating_point_v<T> ? (sizeof(T) == 4 ? 16 : 25)
                                                          : std::numeric_limits<T>::digits10 + 3;

template <class T>
char* write_number(char* w, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) {
      std::memcpy(w, "null", 4);
      return w + 4;
    }
  }
  return std::to_chars(w, w + kMaxChars<T>, v).ptr;
}

// The n elements at p (stored as S, printed as what `get` returns) as a comma-separated
// list, written straight into a buffer sized for the longest numbers.
template <class S, class Get>
void append_elements(std::string& out, const char* p, size_t n, Get get) {
  using T = decltype(get(p));
  const size_t start = out.size();
  out.resize(start + n * (kMaxChars<T> + 1));
  char* w = out.data() + start;
  for (size_t i = 0; i < n; ++i, p += sizeof(S)) {
    if (i) *w++ = ',';
    w = write_number(w, get(p));
  }
  out.resize(static_cast<size_t>(w - out.data()));
}

template <class T>
void append_integer(std::string& out, T v) {
  char buf[kMaxChars<T>];
  out.append(buf, write_number(buf, v));
}

}  // namespace

std::optional<WireType> wire_type_from_name(std::string_view name) {
  for (WireType t : kAllWireTypes)
    if (name == info(t).name) return t;
  return std::nullopt;
}

const char* wire_type_name(WireType t) { return info(t).name; }
size_t wire_type_size(WireType t) { return info(t).size; }

std::optional<DType> engine_dtype(WireType t) {
  switch (t) {
    case WireType::BOOL: return DType::BOOL;
    case WireType::UINT8: return DType::U8;
    case WireType::INT32: return DType::I32;
    case WireType::INT64: return DType::I64;
    case WireType::FP16: return DType::F16;
    case WireType::FP32: return DType::F32;
    case WireType::FP64: return DType::F64;
    case WireType::BF16: return DType::BF16;
    default: return std::nullopt;
  }
}

uint64_t element_count(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    const auto u = static_cast<uint64_t>(d);
    if (u != 0 && n > UINT64_MAX / u) return UINT64_MAX;
    n *= u;
  }
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    append_integer(out, shape[i]);
  }
  return out + "]";
}

std::string json_to_bytes(const json& data, const WireTensor& t, const WireLimits& limits, std::string_view role) {
  const std::string what = who(role, t);
  const uint64_t want = element_count(t.shape);
  if (want > limits.max_elements)
    throw InvalidArgument(what + ": shape " + shape_text(t.shape) + " has " +
                          (want == UINT64_MAX ? std::string("more than 2^64") : std::to_string(want)) +
                          " elements, more than the limit of " + std::to_string(limits.max_elements));
  if (!data.is_array())
    throw InvalidArgument(what + ": 'data' must be an array, got " + std::string(data.type_name()));
  const uint64_t got = count_leaves(data, 1, limits, what);
  if (got != want)
    throw InvalidArgument(what + ": shape " + shape_text(t.shape) + " needs " + std::to_string(want) +
                          " elements, 'data' has " + std::to_string(got));
  std::string out;
  if (t.datatype == WireType::BYTES) {
    size_t total = 0;
    size_t i = 0;
    auto size_of = [&](const json& x) {
      const auto* s = x.get_ptr<const json::string_t*>();
      if (!s)
        throw InvalidArgument(what + ": data element " + std::to_string(i) + " is " + x.type_name() +
                              ", expected a string (datatype BYTES)");
      if (s->size() > UINT32_MAX)
        throw InvalidArgument(what + ": data element " + std::to_string(i) + " is longer than 2^32-1 bytes");
      total += 4 + s->size();
      ++i;
    };
    for_each_leaf(data, size_of);
    out.reserve(total);
    auto append = [&](const json& x) {
      const auto& s = x.get_ref<const json::string_t&>();
      const auto n = static_cast<uint32_t>(s.size());
      out.append(reinterpret_cast<const char*>(&n), 4);
      out += s;
    };
    for_each_leaf(data, append);
    return out;
  }
  out.resize(static_cast<size_t>(want) * info(t.datatype).size);
  ElementWriter w{what, t.datatype, out.data()};
  for_each_leaf(data, w);
  return out;
}

void append_number(std::string& out, float v) {
  char buf[kMaxChars<float>];
  out.append(buf, write_number(buf, v));
}

void append_number(std::string& out, double v) {
  char buf[kMaxChars<double>];
  out.append(buf, write_number(buf, v));
}

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  size_t run = 0;  // start of the pending run of bytes copied as they are
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      if (size_t n = utf8_sequence(s, i)) {
        i += n;
        continue;
      }
    }
    out.append(s.data() + run, i - run);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
          out.append(esc, sizeof(esc));
        } else {
          out += "\xef\xbf\xbd";  // U+FFFD for a byte that starts no valid sequence
        }
    }
    run = ++i;
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

void append_json_data(std::string& out, const WireTensor& t) {
  const size_t size = info(t.datatype).size;
  const char* p = t.data.data();
  out += '[';
  if (t.datatype == WireType::BYTES) {
    size_t k = 0;
    for (const std::string& s : bytes_elements(t.data)) {
      if (k++) out += ',';
      append_json_string(out, s);
    }
    out += ']';
    return;
  }
  const size_t n = t.data.size() / size;
  switch (t.datatype) {
    case WireType::BOOL:
      for (size_t i = 0; i < n; ++i) {
        if (i) out += ',';
        out += p[i] ? "true" : "false";
      }
      break;
    case WireType::UINT8: append_elements<uint8_t>(out, p, n, load<uint8_t>); break;
    case WireType::UINT16: append_elements<uint16_t>(out, p, n, load<uint16_t>); break;
    case WireType::UINT32: append_elements<uint32_t>(out, p, n, load<uint32_t>); break;
    case WireType::UINT64: append_elements<uint64_t>(out, p, n, load<uint64_t>); break;
    case WireType::INT8: append_elements<int8_t>(out, p, n, load<int8_t>); break;
    case WireType::INT16: append_elements<int16_t>(out, p, n, load<int16_t>); break;
    case WireType::INT32: append_elements<int32_t>(out, p, n, load<int32_t>); break;
    case WireType::INT64: append_elements<int64_t>(out, p, n, load<int64_t>); break;
    case WireType::FP16:
      append_elements<uint16_t>(out, p, n, [](const char* q) { return f16{load<uint16_t>(q)}.to_float(); });
      break;
    case WireType::BF16:
      append_elements<uint16_t>(out, p, n, [](const char* q) { return bf16{load<uint16_t>(q)}.to_float(); });
      break;
    case WireType::FP32: append_elements<float>(out, p, n, load<float>); break;
    case WireType::FP64: append_elements<double>(out, p, n, load<double>); break;
    case WireType::BYTES: break;
  }
  out += ']';
}

void check_binary(std::string_view bytes, const WireTensor& t, std::string_view role) {
  const uint64_t n = element_count(t.shape);
  const size_t size = info(t.datatype).size;
  if (size) {
    if (n > bytes.size() / size || n * size != bytes.size())
      throw InvalidArgument(who(role, t) + ": binary data has " + std::to_string(bytes.size()) + " bytes, shape " +
                            shape_text(t.shape) + " of " + info(t.datatype).name + " needs " +
                            (n > UINT64_MAX / size ? std::string("more than 2^64") : std::to_string(n * size)));
    return;
  }
  size_t off = 0;
  uint64_t k = 0;
  for (; off < bytes.size(); ++k) {
    if (k == n)
      throw InvalidArgument(who(role, t) + ": BYTES data has " + std::to_string(bytes.size() - off) +
                            " bytes left at byte offset " + std::to_string(off) + " after the " + std::to_string(n) +
                            " elements of shape " + shape_text(t.shape));
    if (bytes.size() - off < 4)
      throw InvalidArgument(who(role, t) + ": BYTES element " + std::to_string(k) + " at byte offset " +
                            std::to_string(off) + ": the 4-byte length prefix runs past the end of the " +
                            std::to_string(bytes.size()) + "-byte data");
    const uint32_t len = load<uint32_t>(bytes.data() + off);
    if (len > bytes.size() - off - 4)
      throw InvalidArgument(who(role, t) + ": BYTES element " + std::to_string(k) + " at byte offset " +
                            std::to_string(off) + " has length " + std::to_string(len) +
                            ", which runs past the end of the " + std::to_string(bytes.size()) + "-byte data");
    off += 4 + len;
  }
  if (k != n)
    throw InvalidArgument(who(role, t) + ": BYTES data holds " + std::to_string(k) + " elements, shape " +
                          shape_text(t.shape) + " needs " + std::to_string(n));
}

std::vector<std::string> bytes_elements(std::string_view data) {
  std::vector<std::string> out;
  size_t off = 0;
  while (off < data.size()) {
    if (data.size() - off < 4)
      throw InvalidArgument("BYTES data: the length prefix at byte offset " + std::to_string(off) +
                            " runs past the end of the data");
    const uint32_t len = load<uint32_t>(data.data() + off);
    if (len > data.size() - off - 4)
      throw InvalidArgument("BYTES data: element at byte offset " + std::to_string(off) + " has length " +
                            std::to_string(len) + ", past the end of the " + std::to_string(data.size()) +
                            "-byte data");
    out.emplace_back(data.substr(off + 4, len));
    off += 4 + len;
  }
  return out;
}

std::string bytes_encode(const std::vector<std::string>& elements) {
  size_t total = 0;
  for (const auto& s : elements) total += 4 + s.size();
  std::string out;
  out.reserve(total);
  for (const auto& s : elements) {
    if (s.size() > UINT32_MAX) throw InvalidArgument("BYTES element longer than 2^32-1 bytes");
    const auto n = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += s;
  }
  return out;
}

}  // namespace hg::server
