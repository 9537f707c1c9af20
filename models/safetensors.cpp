#include "models/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "engine/json_reader.h"

namespace hg::safetensors {
namespace {

using Json = nlohmann::ordered_json;  // the header lists tensors in the file's order
constexpr const char* kMetadataKey = "__metadata__";

// One tensor as described by the header, before its bytes are loaded.
struct Layout {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct Header {
  std::vector<Layout> tensors;  // header order
  std::map<std::string, std::string> metadata;
};

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw FormatError("safetensors: " + source + ": " + what);
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

uint64_t load_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool is_known_dtype(const std::string& dtype) {
  static const std::set<std::string> known = {"F32", "F16", "BF16", "F64", "I64",
                                              "I32", "I16", "I8",   "U8",  "BOOL"};
  return known.count(dtype) != 0;
}

// Bytes needed by `shape` of `dtype`; false on overflow.
bool byte_count(const std::vector<int64_t>& shape, const std::string& dtype, uint64_t* out) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

Json parse_json(std::string_view text, const std::string& src) {
  try {
    return read_ordered_json(text, {.max_depth = 8, .max_values = text.size(), .max_bytes = text.size()},
                             src + " header (which starts at file byte 8)");
  } catch (const InvalidArgument& e) {
    throw FormatError(std::string("safetensors: ") + e.what());
  }
}

const Json& field(const Json& entry, const char* key, const std::string& tensor,
                  const std::string& src) {
  auto it = entry.find(key);
  if (it == entry.end()) fail(src, "tensor '" + tensor + "': missing field '" + key + "'");
  return *it;
}

Layout parse_entry(const std::string& name, const Json& j, const std::string& src) {
  const std::string where = "tensor '" + name + "': ";
  if (!j.is_object()) fail(src, where + "entry must be a JSON object, got " + j.type_name());
  Layout t;
  t.name = name;

  const Json& dtype = field(j, "dtype", name, src);
  if (!dtype.is_string())
    fail(src, where + "field 'dtype' must be a string, got " + dtype.type_name());
  t.dtype = dtype.get<std::string>();
  if (!is_known_dtype(t.dtype)) fail(src, where + "field 'dtype' has unknown dtype \"" + t.dtype + "\"");

  const Json& shape = field(j, "shape", name, src);
  if (!shape.is_array())
    fail(src, where + "field 'shape' must be an array, got " + shape.type_name());
  for (size_t i = 0; i < shape.size(); ++i) {
    const Json& d = shape[i];
    const std::string at = where + "field 'shape'[" + std::to_string(i) + "] ";
    if (d.is_number_unsigned()) {
      if (d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(src, at + "is too large");
      t.shape.push_back(d.get<int64_t>());
    } else if (d.is_number_integer()) {
      fail(src, at + "is negative (" + std::to_string(d.get<int64_t>()) + ")");
    } else {
      fail(src, at + "must be an integer, got " + std::string(d.type_name()) + " " + json_excerpt(d));
    }
  }

  const Json& offs = field(j, "data_offsets", name, src);
  if (!offs.is_array() || offs.size() != 2)
    fail(src, where + "field 'data_offsets' must be an array of two integers, got " + json_excerpt(offs));
  for (size_t i = 0; i < 2; ++i) {
    if (!offs[i].is_number_unsigned())
      fail(src, where + "field 'data_offsets'[" + std::to_string(i) +
                    "] must be a non-negative integer, got " + json_excerpt(offs[i]));
  }
  t.begin = offs[0].get<uint64_t>();
  t.end = offs[1].get<uint64_t>();
  if (t.begin > t.end)
    fail(src, where + "field 'data_offsets' begin " + std::to_string(t.begin) + " > end " +
                  std::to_string(t.end));
  return t;
}

// Validates the header text; data_start is the file offset of the data section.
Header parse_header(std::string_view text, uint64_t data_start, uint64_t data_size,
                    const std::string& src) {
  Json root = parse_json(text, src);
  if (!root.is_object()) fail(src, std::string("header must be a JSON object, got ") + root.type_name());

  Header h;
  for (const auto& [key, value] : root.items()) {
    if (key != kMetadataKey) {
      h.tensors.push_back(parse_entry(key, value, src));
      continue;
    }
    if (!value.is_object())
      fail(src, std::string("field '__metadata__' must be an object, got ") + value.type_name());
    for (const auto& [mk, mv] : value.items()) {
      if (!mv.is_string())
        fail(src, "field '__metadata__' value for key \"" + mk + "\" must be a string, got " +
                      mv.type_name());
      h.metadata[mk] = mv.get<std::string>();
    }
  }

  for (const Layout& t : h.tensors) {
    const std::string where = "tensor '" + t.name + "': field 'data_offsets' ";
    if (t.end > data_size)
      fail(src, where + "end " + std::to_string(t.end) + " (file byte " +
                    std::to_string(data_start + t.end) + ") is beyond the data section of " +
                    std::to_string(data_size) + " bytes (file bytes " +
                    range_text(data_start, data_start + data_size) + ")");
    uint64_t need = 0;
    if (!byte_count(t.shape, t.dtype, &need))
      fail(src, "tensor '" + t.name + "': field 'shape' " + shape_text(t.shape) + " is too large");
    if (need != t.end - t.begin)
      fail(src, where + range_text(t.begin, t.end) + " holds " + std::to_string(t.end - t.begin) +
                    " bytes at file byte " + std::to_string(data_start + t.begin) + " but shape " +
                    shape_text(t.shape) + " of " + t.dtype + " needs " + std::to_string(need));
  }

  // The data section must be covered exactly once; empty tensors occupy no bytes.
  std::vector<const Layout*> order;
  for (const Layout& t : h.tensors)
    if (t.end > t.begin) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const Layout* a, const Layout* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  uint64_t cursor = 0;
  const Layout* prev = nullptr;
  for (const Layout* t : order) {
    if (t->begin < cursor)
      fail(src, "tensors '" + prev->name + "' and '" + t->name + "' overlap: data_offsets " +
                    range_text(prev->begin, prev->end) + " and " + range_text(t->begin, t->end) +
                    " (file byte " + std::to_string(data_start + t->begin) + ")");
    if (t->begin > cursor)
      fail(src, "data section bytes " + range_text(cursor, t->begin) + " (file bytes " +
                    range_text(data_start + cursor, data_start + t->begin) +
                    ") are not covered by any tensor");
    cursor = t->end;
    prev = t;
  }
  if (cursor != data_size)
    fail(src, "data section bytes " + range_text(cursor, data_size) + " (file bytes " +
                  range_text(data_start + cursor, data_start + data_size) +
                  ") are not covered by any tensor");
  return h;
}

uint64_t header_length(uint64_t file_size, const uint8_t prefix[8], const std::string& src) {
  if (file_size < 8)
    fail(src, "file is " + std::to_string(file_size) +
                  " bytes long, shorter than the 8-byte header length field");
  uint64_t n = load_u64_le(prefix);
  if (n > file_size - 8)
    fail(src, "header length " + std::to_string(n) + " (file bytes [0, 8)) runs past the end of the " +
                  std::to_string(file_size) + "-byte file");
  return n;
}

Entry make_entry(Layout&& t) {
  Entry e;
  e.name = std::move(t.name);
  e.dtype = std::move(t.dtype);
  e.shape = std::move(t.shape);
  e.data.resize(t.end - t.begin);
  return e;
}

// The header text for `file`, padded with spaces so 8 + its length is a multiple of 8.
std::string header_text(const File& file) {
  Json root = Json::object();
  if (!file.metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [k, v] : file.metadata) meta[k] = v;
    root[kMetadataKey] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const Entry& e : file.entries) {
    const std::string where = "safetensors write: tensor '" + e.name + "': ";
    if (e.name == kMetadataKey || root.contains(e.name))
      throw InvalidArgument(where + "name is reserved or duplicated");
    if (!is_known_dtype(e.dtype)) throw DTypeError(where + "unknown dtype \"" + e.dtype + "\"");
    uint64_t need = 0;
    if (!byte_count(e.shape, e.dtype, &need) || need != e.data.size())
      throw ShapeError(where + "shape " + shape_text(e.shape) + " of " + e.dtype +
                                        " does not match " + std::to_string(e.data.size()) + " data bytes");
    root[e.name] = Json{{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + need}}};
    offset += need;
  }
  std::string text;
  try {
    text = root.dump();
  } catch (const Json::type_error& e) {
    throw InvalidArgument(std::string("safetensors write: cannot encode header: ") + e.what());
  }
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
}

void append_u64_le(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

[[noreturn]] void io_fail(const std::string& what, const std::filesystem::path& p, int err) {
  throw IoError("safetensors: " + what + " " + p.string() + ": " + std::strerror(err));
}

}  // namespace

const Entry* File::find(const std::string& name) const {
  for (const Entry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

size_t dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  throw DTypeError("safetensors: unknown dtype \"" + dtype + "\"");
}

File parse(std::span<const uint8_t> bytes, const std::string& source_name) {
  const uint64_t n = header_length(bytes.size(), bytes.data(), source_name);
  std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  Header h = parse_header(text, 8 + n, bytes.size() - 8 - n, source_name);
  File f;
  f.metadata = std::move(h.metadata);
  for (Layout& t : h.tensors) {
    const uint8_t* src = bytes.data() + 8 + n + t.begin;
    f.entries.push_back(make_entry(std::move(t)));
    std::copy(src, src + f.entries.back().data.size(), f.entries.back().data.begin());
  }
  return f;
}

File read(const std::filesystem::path& path) {
  const std::string src = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) io_fail("cannot open", path, errno);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) io_fail("cannot stat", path, ec.value());

  uint8_t prefix[8] = {};
  if (size >= 8 && !in.read(reinterpret_cast<char*>(prefix), 8)) io_fail("cannot read", path, EIO);
  const uint64_t n = header_length(size, prefix, src);
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) io_fail("cannot read", path, EIO);
  Header h = parse_header(text, 8 + n, size - 8 - n, src);

  File f;
  f.metadata = std::move(h.metadata);
  for (Layout& t : h.tensors) {
    const uint64_t at = 8 + n + t.begin;
    f.entries.push_back(make_entry(std::move(t)));
    auto& data = f.entries.back().data;
    if (data.empty()) continue;
    if (!in.seekg(static_cast<std::streamoff>(at)) ||
        !in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size())))
      io_fail("cannot read tensor '" + f.entries.back().name + "' from", path, EIO);
  }
  return f;
}

std::vector<uint8_t> serialize(const File& file) {
  const std::string text = header_text(file);
  std::vector<uint8_t> out;
  append_u64_le(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
  for (const Entry& e : file.entries) out.insert(out.end(), e.data.begin(), e.data.end());
  return out;
}

void write(const std::filesystem::path& path, const File& file) {
  const std::string text = header_text(file);  // validates before touching the disk
  std::vector<uint8_t> prefix;
  append_u64_le(prefix, text.size());
  std::vector<ByteSpan> parts{prefix, as_bytes(text)};
  for (const Entry& e : file.entries) parts.emplace_back(e.data);
  write_file_atomic(path, parts);
}

}  // namespace hg::safetensors
