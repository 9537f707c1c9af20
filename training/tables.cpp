// Tables from CSV, .npy and .npz files, and their normalisation (training/data_files.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "models/deflate.h"
#include "training/data_files.h"

namespace hg::training {

namespace {

std::string_view view_of(const MappedFile& m) {
  return {reinterpret_cast<const char*>(m.bytes().data()), m.bytes().size()};
}

uint32_t le16(const char* p) { return uint32_t{static_cast<uint8_t>(p[0])} | uint32_t{static_cast<uint8_t>(p[1])} << 8; }
uint32_t le32(const char* p) { return le16(p) | le16(p + 2) << 16; }

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// A finite decimal number (a leading '+' allowed); nullopt otherwise.
std::optional<double> parse_number(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// ---- .npy ----

// One array of a .npy file: its element type, shape and (little- or big-endian) data.
struct NpyArray {
  char kind = 'f';    // f float, i signed, u unsigned, b bool
  size_t size = 4;    // bytes per element
  bool big_endian = false;
  bool fortran = false;
  Shape shape;
  std::string_view data;
  size_t data_offset = 0;  // within the .npy bytes
  double at(size_t i) const {
    const char* p = data.data() + i * size;
    uint64_t bits = 0;
    for (size_t b = 0; b < size; ++b)
      bits |= uint64_t{static_cast<uint8_t>(p[big_endian ? size - 1 - b : b])} << (8 * b);
    switch (kind) {
      case 'f': {
        if (size == 4) {
          float f;
          const auto u = static_cast<uint32_t>(bits);
          std::memcpy(&f, &u, 4);
          return f;
        }
        double d;
        std::memcpy(&d, &bits, 8);
        return d;
      }
      case 'i': {
        const int shift = static_cast<int>(64 - 8 * size);
        return static_cast<double>(static_cast<int64_t>(bits << shift) >> shift);
      }
      default: return static_cast<double>(bits);
    }
  }
  size_t numel() const {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }
  // Element [r, c] of a 2-D array (or [r] of a 1-D one, c = 0), in either order.
  double at2(int64_t r, int64_t c) const {
    if (shape.size() == 1) return at(static_cast<size_t>(r));
    return at(static_cast<size_t>(fortran ? c * shape[0] + r : r * shape[1] + c));
  }
};

// The value of `key` in the header dictionary ("'descr': '<f4', 'fortran_order': False, ...").
std::string_view dict_value(std::string_view dict, std::string_view key, const std::string& src) {
  const std::string quoted = "'" + std::string(key) + "'";
  const size_t k = dict.find(quoted);
  if (k == std::string_view::npos) throw FormatError(src + ": the .npy header has no " + quoted);
  size_t v = dict.find(':', k + quoted.size());
  if (v == std::string_view::npos) throw FormatError(src + ": the .npy header's " + quoted + " has no value");
  ++v;
  while (v < dict.size() && dict[v] == ' ') ++v;
  size_t end = v;
  if (v < dict.size() && dict[v] == '(') end = dict.find(')', v);
  else if (v < dict.size() && dict[v] == '\'') end = dict.find('\'', v + 1);
  else end = dict.find_first_of(",}", v) - 1;
  if (end == std::string_view::npos || end >= dict.size())
    throw FormatError(src + ": the .npy header's " + quoted + " value is not terminated");
  return dict.substr(v, end - v + 1);
}

NpyArray parse_npy(std::string_view b, const std::string& src) {
  static constexpr char kMagic[] = "\x93NUMPY";
  if (b.size() < 10 || b.substr(0, 6) != std::string_view(kMagic, 6))
    throw FormatError(src + ": byte offset 0: not a .npy array (no \\x93NUMPY magic)");
  const int major = static_cast<uint8_t>(b[6]);
  if (major < 1 || major > 3) throw FormatError(src + ": byte offset 6: .npy version " + std::to_string(major) + " (1 to 3)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (b.size() < 8 + len_bytes) throw FormatError(src + ": truncated .npy header");
  const size_t hlen = major == 1 ? le16(b.data() + 8) : le32(b.data() + 8);
  const size_t start = 8 + len_bytes;
  if (hlen > (size_t{1} << 20) || b.size() - start < hlen)
    throw FormatError(src + ": byte offset 8: the .npy header length " + std::to_string(hlen) + " runs past the " +
                      std::to_string(b.size()) + " bytes of the file");
  const std::string_view dict = b.substr(start, hlen);
  NpyArray a;
  const std::string_view descr = dict_value(dict, "descr", src);
  if (descr.size() < 4 || descr.front() != '\'' || descr.back() != '\'')
    throw FormatError(src + ": .npy descr " + std::string(descr) + " is not a simple type string");
  const char order = descr[1];
  a.kind = descr[2];
  const std::string_view width = descr.substr(3, descr.size() - 4);
  unsigned w = 0;
  auto [wend, wec] = std::from_chars(width.data(), width.data() + width.size(), w);
  const bool ok_kind = (a.kind == 'f' && (w == 4 || w == 8)) || ((a.kind == 'i' || a.kind == 'u') && (w == 1 || w == 2 || w == 4 || w == 8)) ||
                       (a.kind == 'b' && w == 1);
  if (wec != std::errc() || wend != width.data() + width.size() || !ok_kind || (order != '<' && order != '>' && order != '|'))
    throw FormatError(src + ": .npy dtype " + std::string(descr) +
                      " is not supported (float32/64, int8..64, uint8..64 or bool, little- or big-endian)");
  a.size = w;
  a.big_endian = order == '>';
  const std::string_view fo = dict_value(dict, "fortran_order", src);
  if (fo != "True" && fo != "False") throw FormatError(src + ": .npy fortran_order is " + std::string(fo));
  a.fortran = fo == "True";
  std::string_view shape = dict_value(dict, "shape", src);
  if (shape.size() < 2 || shape.front() != '(') throw FormatError(src + ": .npy shape " + std::string(shape) + " is not a tuple");
  shape = shape.substr(1, shape.size() - 2);
  size_t count = 1;
  while (!(shape = trim(shape)).empty()) {
    const size_t comma = shape.find(',');
    const std::string_view dim = trim(shape.substr(0, comma));
    shape = comma == std::string_view::npos ? std::string_view{} : shape.substr(comma + 1);
    if (dim.empty()) continue;
    uint64_t n = 0;
    auto [e, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), n);
    if (ec != std::errc() || e != dim.data() + dim.size() || n > b.size() || a.shape.size() >= 8)
      throw FormatError(src + ": .npy shape dimension '" + std::string(dim) + "' is not a size this file can hold");
    a.shape.push_back(static_cast<int64_t>(n));
    count *= n;
    if (count > b.size()) throw FormatError(src + ": the .npy shape holds more elements than the file has bytes");
  }
  a.data_offset = start + hlen;
  if (b.size() - a.data_offset != count * a.size)
    throw FormatError(src + ": the .npy header declares " + shape_str(a.shape) + " x " + std::to_string(a.size) +
                      " bytes (" + std::to_string(count * a.size) + " bytes of data from byte offset " +
                      std::to_string(a.data_offset) + "), the file has " + std::to_string(b.size() - a.data_offset));
  a.data = b.substr(a.data_offset);
  return a;
}

// ---- .npz: a zip archive of .npy members ----

// The members of a zip archive, inflated ({name without ".npy", bytes}).
std::map<std::string, std::string> read_zip(std::string_view z, const std::string& src, size_t max_bytes) {
  // The end-of-central-directory record: the last "PK\5\6" within the final 64 KiB + 22 bytes.
  if (z.size() < 22) throw FormatError(src + ": " + std::to_string(z.size()) + " bytes, too short for a zip archive");
  size_t eocd = std::string_view::npos;
  for (size_t i = z.size() - 22 + 1; i-- > 0 && z.size() - i <= 65557;)
    if (le32(z.data() + i) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string_view::npos) throw FormatError(src + ": not a zip archive (no end-of-central-directory record)");
  const size_t entries = le16(z.data() + eocd + 10), cd_size = le32(z.data() + eocd + 12),
               cd_off = le32(z.data() + eocd + 16);
  if (cd_off == 0xffffffff || entries == 0xffff)
    throw FormatError(src + ": a zip64 archive (over 4 GiB or 65535 members): not supported");
  if (cd_off > eocd || cd_size > eocd - cd_off)
    throw FormatError(src + ": byte offset " + std::to_string(eocd + 16) + ": the central directory (" +
                      std::to_string(cd_size) + " bytes at " + std::to_string(cd_off) + ") lies outside the file");
  std::map<std::string, std::string> out;
  size_t total = 0, p = cd_off;
  for (size_t e = 0; e < entries; ++e) {
    if (p + 46 > cd_off + cd_size || le32(z.data() + p) != 0x02014b50)
      throw FormatError(src + ": byte offset " + std::to_string(p) + ": central directory entry " + std::to_string(e) +
                        " is missing or corrupt");
    const uint32_t method = le16(z.data() + p + 10), crc = le32(z.data() + p + 16);
    const size_t csize = le32(z.data() + p + 20), usize = le32(z.data() + p + 24);
    const size_t nlen = le16(z.data() + p + 28), xlen = le16(z.data() + p + 30), clen = le16(z.data() + p + 32);
    const size_t local = le32(z.data() + p + 42);
    if (p + 46 + nlen + xlen + clen > cd_off + cd_size)
      throw FormatError(src + ": byte offset " + std::to_string(p) + ": central directory entry " + std::to_string(e) +
                        " runs past the directory");
    std::string name(z.substr(p + 46, nlen));
    const std::string where = src + " member '" + printable(name, 64) + "'";
    p += 46 + nlen + xlen + clen;
    if (csize == 0xffffffff || usize == 0xffffffff || local == 0xffffffff)
      throw FormatError(where + ": zip64 sizes (a member over 4 GiB): not supported");
    if (local + 30 > z.size() || le32(z.data() + local) != 0x04034b50)
      throw FormatError(where + ": byte offset " + std::to_string(local) + ": no local file header");
    const size_t data = local + 30 + le16(z.data() + local + 26) + le16(z.data() + local + 28);
    if (data > z.size() || csize > z.size() - data)
      throw FormatError(where + ": its " + std::to_string(csize) + " bytes at byte offset " + std::to_string(data) +
                        " run past the end of the archive");
    if (usize > max_bytes || total + usize > max_bytes)
      throw TooLargeError(where + ": " + std::to_string(usize) + " bytes take the archive past the limit of " +
                          std::to_string(max_bytes) + " bytes");
    const std::string_view packed = z.substr(data, csize);
    std::string body;
    if (method == 0) body = std::string(packed);
    else if (method == 8) body = inflate(packed, Deflated::Raw, usize, where + " (deflate at byte offset " + std::to_string(data) + ")");
    else throw FormatError(where + ": compression method " + std::to_string(method) + " (only stored and deflate)");
    if (body.size() != usize)
      throw FormatError(where + ": " + std::to_string(body.size()) + " bytes, the directory says " + std::to_string(usize));
    if (crc32(body) != crc) throw FormatError(where + ": CRC-32 mismatch (the member is corrupt)");
    total += usize;
    if (name.size() > 4 && name.ends_with(".npy")) name.resize(name.size() - 4);
    if (!out.emplace(name, std::move(body)).second) throw FormatError(where + ": appears twice");
  }
  return out;
}

// ---- CSV ----

// RFC 4180 records: fields split on ',' with "quoted" fields ("" an escaped quote), records on
// '\n' (CRLF accepted); blank lines skipped. Each record remembers its byte offset.
struct CsvRecord {
  size_t offset;
  std::vector<std::string> fields;
};

std::vector<CsvRecord> parse_csv(std::string_view s, const std::string& src, int64_t max_columns) {
  std::vector<CsvRecord> rows;
  size_t i = 0;
  while (i < s.size()) {
    CsvRecord r{i, {}};
    std::string field;
    bool any = false;
    for (;;) {
      if (i < s.size() && s[i] == '"') {
        const size_t open = i++;
        for (;;) {
          if (i >= s.size()) throw FormatError(src + ": byte offset " + std::to_string(open) + ": unterminated quoted field");
          if (s[i] == '"') {
            if (i + 1 < s.size() && s[i + 1] == '"') field += '"', i += 2;
            else break;
          } else {
            field += s[i++];
          }
        }
        ++i;  // the closing quote
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) ++i;
        if (i < s.size() && s[i] != ',' && s[i] != '\n')
          throw FormatError(src + ": byte offset " + std::to_string(i) + ": text after a closing quote");
      } else {
        const size_t end = std::min(s.find_first_of(",\n", i), s.size());
        field.assign(s.substr(i, end - i));
        if (end == s.size() || s[end] == '\n')
          if (!field.empty() && field.back() == '\r') field.pop_back();  // CRLF line ends
        i = end;
      }
      any = any || !trim(field).empty();
      r.fields.push_back(std::move(field));
      field.clear();
      if (static_cast<int64_t>(r.fields.size()) > max_columns)
        throw TooLargeError(src + ": byte offset " + std::to_string(r.offset) + ": more than " +
                            std::to_string(max_columns) + " columns");
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      ++i;  // '\n' or the end
      break;
    }
    if (any || r.fields.size() > 1) rows.push_back(std::move(r));
  }
  return rows;
}

// The column `label` names: a header name, or an index (negative from the end).
size_t label_column(const std::string& label, const std::vector<std::string>& header, size_t columns, const std::string& src) {
  int64_t idx = 0;
  auto [end, ec] = std::from_chars(label.data(), label.data() + label.size(), idx);
  if (ec == std::errc() && end == label.data() + label.size()) {
    const int64_t c = idx < 0 ? idx + static_cast<int64_t>(columns) : idx;
    if (c < 0 || c >= static_cast<int64_t>(columns))
      throw InvalidArgument(src + ": label column " + label + " is out of range for " + std::to_string(columns) + " columns");
    return static_cast<size_t>(c);
  }
  for (size_t c = 0; c < header.size(); ++c)
    if (trim(header[c]) == label) return c;
  throw InvalidArgument(src + ": no column named '" + printable(label, 64) + "'" +
                        (header.empty() ? " (the file has no header row)" : ""));
}

// Labels as class indices: integers keep their values (classes "0".."max"), any text makes the
// sorted distinct texts the classes.
void number_labels(Table& t, const std::vector<std::string>& texts, const std::vector<size_t>& rows, const std::string& src) {
  const auto n = static_cast<int64_t>(texts.size());
  std::vector<int64_t> y(texts.size());
  bool integers = true;
  int64_t top = -1;
  for (size_t i = 0; i < texts.size() && integers; ++i) {
    const std::string_view v = trim(texts[i]);
    auto [e, ec] = std::from_chars(v.data(), v.data() + v.size(), y[i]);
    integers = !v.empty() && ec == std::errc() && e == v.data() + v.size();
    if (integers && y[i] < 0)
      throw FormatError(src + ": row " + std::to_string(rows[i]) + ": label " + std::to_string(y[i]) + " is negative");
    if (integers && y[i] > 1000000)
      throw FormatError(src + ": row " + std::to_string(rows[i]) + ": label " + std::to_string(y[i]) +
                        " is over a million classes");
    if (integers) top = std::max(top, y[i]);
  }
  t.classes.clear();
  if (integers) {
    for (int64_t c = 0; c <= top; ++c) t.classes.push_back(std::to_string(c));
  } else {
    std::set<std::string> names;
    for (const auto& s : texts) names.insert(std::string(trim(s)));
    t.classes.assign(names.begin(), names.end());
    for (size_t i = 0; i < texts.size(); ++i)
      y[i] = std::lower_bound(t.classes.begin(), t.classes.end(), std::string(trim(texts[i]))) - t.classes.begin();
  }
  t.y = Tensor::from_indices(y, {n});
}

Table table_from_csv(std::string_view s, const std::string& src, const TableOptions& opt) {
  auto rows = parse_csv(s, src, opt.max_columns);
  if (rows.empty()) throw FormatError(src + ": no rows");
  const size_t columns = rows[0].fields.size();
  if (columns < 2) throw FormatError(src + ": " + std::to_string(columns) + " column; a table needs features and a label");
  for (const auto& r : rows)
    if (r.fields.size() != columns)
      throw FormatError(src + ": byte offset " + std::to_string(r.offset) + ": " + std::to_string(r.fields.size()) +
                        " fields, the first row has " + std::to_string(columns));
  // A header row: the label is named, or some field of row 0 is text where row 1 has a number.
  int64_t lparsed = 0;
  const bool label_is_index =
      std::from_chars(opt.label.data(), opt.label.data() + opt.label.size(), lparsed).ptr == opt.label.data() + opt.label.size();
  bool header = !label_is_index;
  for (size_t c = 0; !header && rows.size() > 1 && c < columns; ++c)
    header = !parse_number(rows[0].fields[c]) && parse_number(rows[1].fields[c]);
  std::vector<std::string> names;
  if (header) names = rows[0].fields;
  const size_t lc = label_column(opt.label, names, columns, src);
  const size_t first = header ? 1 : 0;
  const auto n = static_cast<int64_t>(rows.size() - first);
  if (n == 0) throw FormatError(src + ": a header and no data rows");
  Table t;
  for (size_t c = 0; c < columns; ++c)
    if (c != lc) t.feature_names.push_back(header ? std::string(trim(names[c])) : "f" + std::to_string(t.feature_names.size()));
  const auto f = static_cast<int64_t>(columns - 1);
  t.x = Tensor::empty({n, f}, DType::F32);
  float* x = t.x.data<float>();
  std::vector<std::string> labels;
  std::vector<size_t> row_numbers;
  for (int64_t i = 0; i < n; ++i) {
    const CsvRecord& r = rows[first + static_cast<size_t>(i)];
    int64_t k = 0;
    for (size_t c = 0; c < columns; ++c) {
      if (c == lc) continue;
      const auto v = parse_number(r.fields[c]);
      if (!v)
        throw FormatError(src + ": row " + std::to_string(first + i + 1) + " (byte offset " + std::to_string(r.offset) +
                          "), column " + std::to_string(c) + (header ? " '" + printable(names[c], 64) + "'" : "") +
                          ": '" + printable(r.fields[c], 64) + "' is not a finite number");
      x[i * f + k++] = static_cast<float>(*v);
    }
    labels.push_back(r.fields[lc]);
    row_numbers.push_back(first + static_cast<size_t>(i) + 1);
  }
  number_labels(t, labels, row_numbers, src);
  return t;
}

// A label read from an array: an integer that a double holds exactly (NaN, infinities and values
// past 2^53 are refused before the conversion to int64).
bool is_integer_label(double v) { return std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= 9007199254740992.0; }

Table table_from_arrays(const NpyArray& xa, const NpyArray* ya, const std::string& xsrc, const std::string& ysrc,
                        const TableOptions& opt) {
  if (xa.shape.size() != 2 || xa.shape[0] == 0 || xa.shape[1] < (ya ? 1 : 2))
    throw FormatError(xsrc + ": expected a 2-D array of " + (ya ? "features [N, F]" : "rows [N, features + label]") +
                      ", found " + shape_str(xa.shape));
  const int64_t n = xa.shape[0];
  size_t lc = SIZE_MAX;
  if (!ya) lc = label_column(opt.label, {}, static_cast<size_t>(xa.shape[1]), xsrc);
  if (ya && (ya->shape.size() != 1 || ya->shape[0] != n))
    throw FormatError(ysrc + ": expected labels [" + std::to_string(n) + "], found " + shape_str(ya->shape));
  const int64_t f = xa.shape[1] - (ya ? 0 : 1);
  Table t;
  for (int64_t c = 0; c < f; ++c) t.feature_names.push_back("f" + std::to_string(c));
  t.x = Tensor::empty({n, f}, DType::F32);
  float* x = t.x.data<float>();
  std::vector<std::string> labels(static_cast<size_t>(n));
  std::vector<size_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = 0;
    for (int64_t c = 0; c < xa.shape[1]; ++c) {
      const double v = xa.at2(i, c);
      if (static_cast<size_t>(c) == lc) {
        if (!is_integer_label(v))
          throw FormatError(xsrc + ": row " + std::to_string(i) + ": label " + std::to_string(v) +
                            " is not an integer of at most 2^53 in magnitude");
        labels[static_cast<size_t>(i)] = std::to_string(static_cast<int64_t>(v));
        continue;
      }
      if (!std::isfinite(v))
        throw FormatError(xsrc + ": element [" + std::to_string(i) + ", " + std::to_string(c) + "] is not finite");
      x[i * f + k++] = static_cast<float>(v);
    }
    if (ya) {
      const double v = ya->at(static_cast<size_t>(i));
      if (!is_integer_label(v))
        throw FormatError(ysrc + ": element [" + std::to_string(i) + "] (" + std::to_string(v) +
                          ") is not an integer label of at most 2^53 in magnitude");
      labels[static_cast<size_t>(i)] = std::to_string(static_cast<int64_t>(v));
    }
    rows[static_cast<size_t>(i)] = static_cast<size_t>(i);
  }
  number_labels(t, labels, rows, ya ? ysrc : xsrc);
  return t;
}

}  // namespace

Table read_table(const std::filesystem::path& file, const TableOptions& opt) {
  const std::string src = file.string();
  const auto mapped = map_file(file);
  const std::string_view bytes = view_of(*mapped);
  const std::string ext = file.extension().string();
  if (ext != ".npz" && bytes.size() > opt.max_bytes)
    throw TooLargeError(src + ": " + std::to_string(bytes.size()) + " bytes exceed the limit of " + std::to_string(opt.max_bytes));
  if (ext == ".csv") return table_from_csv(bytes, src, opt);
  if (ext == ".npy") return table_from_arrays(parse_npy(bytes, src), nullptr, src, src, opt);
  if (ext == ".npz") {
    const auto members = read_zip(bytes, src, opt.max_bytes);
    const auto find = [&](const std::string& key) -> const std::string& {
      auto it = members.find(key);
      if (it == members.end()) {
        std::string have;
        for (const auto& [k, v] : members) have += (have.empty() ? "" : ", ") + printable(k, 64);
        throw FormatError(src + ": no array '" + printable(key, 64) + "' (arrays: " + have + ")");
      }
      return it->second;
    };
    const std::string xsrc = src + " array '" + opt.features_key + "'", ysrc = src + " array '" + opt.labels_key + "'";
    const NpyArray xa = parse_npy(find(opt.features_key), xsrc);
    const NpyArray ya = parse_npy(find(opt.labels_key), ysrc);
    return table_from_arrays(xa, &ya, xsrc, ysrc, opt);
  }
  throw InvalidArgument(src + ": unknown table format '" + printable(ext, 16) + "' (.csv, .npy, .npz)");
}

void align_classes(Table& t, const std::vector<std::string>& classes, const std::filesystem::path& file) {
  int64_t* y = t.y.data<int64_t>();
  for (int64_t i = 0; i < t.y.numel(); ++i) {
    const std::string& name = t.classes[static_cast<size_t>(y[i])];
    auto it = std::find(classes.begin(), classes.end(), name);
    if (it == classes.end())
      throw FormatError(file.string() + ": row " + std::to_string(i) + ": label '" + printable(name, 64) +
                        "' is not a class of the training split (" + std::to_string(classes.size()) + " classes)");
    y[i] = it - classes.begin();
  }
  t.classes = classes;
}

Normalizer Normalizer::fit(const Tensor& x) {
  if (x.dtype() != DType::F32 || x.ndim() != 2 || x.dim(0) < 1)
    throw InvalidArgument("Normalizer::fit: expected F32 [N >= 1, F], got " + std::string(dtype_name(x.dtype())) + " " +
                          shape_str(x.shape()));
  const Tensor h = x.is_contiguous() ? x : x.contiguous();
  const int64_t n = h.dim(0), f = h.dim(1);
  const float* d = h.data<float>();
  Normalizer z;
  z.mean.assign(static_cast<size_t>(f), 0);
  z.std.assign(static_cast<size_t>(f), 1);
  for (int64_t c = 0; c < f; ++c) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; ++i) s += d[i * f + c];
    const double m = s / static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) s2 += (d[i * f + c] - m) * (d[i * f + c] - m);
    const double sd = std::sqrt(s2 / static_cast<double>(n));
    z.mean[static_cast<size_t>(c)] = static_cast<float>(m);
    z.std[static_cast<size_t>(c)] = sd > 0 ? static_cast<float>(sd) : 1.0f;
  }
  return z;
}

Tensor Normalizer::apply(const Tensor& x) const {
  if (x.dtype() != DType::F32 || x.ndim() != 2 || x.dim(1) != static_cast<int64_t>(mean.size()))
    throw InvalidArgument("Normalizer::apply: expected F32 [N, " + std::to_string(mean.size()) + "], got " +
                          std::string(dtype_name(x.dtype())) + " " + shape_str(x.shape()));
  const Tensor h = x.is_contiguous() ? x : x.contiguous();
  Tensor out = Tensor::empty(h.shape(), DType::F32);
  const float* s = h.data<float>();
  float* o = out.data<float>();
  const int64_t f = h.dim(1);
  for (int64_t i = 0; i < h.numel(); ++i) o[i] = (s[i] - mean[static_cast<size_t>(i % f)]) / std[static_cast<size_t>(i % f)];
  return out;
}

nlohmann::json Normalizer::to_json() const { return {{"mean", mean}, {"std", std}}; }

Normalizer Normalizer::from_json(const nlohmann::json& j) {
  Normalizer z;
  try {
    z.mean = j.at("mean").get<std::vector<float>>();
    z.std = j.at("std").get<std::vector<float>>();
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(std::string("normalization: expected {\"mean\": [numbers], \"std\": [numbers]}: ") + e.what());
  }
  if (z.mean.size() != z.std.size())
    throw FormatError("normalization: " + std::to_string(z.mean.size()) + " means and " + std::to_string(z.std.size()) + " stds");
  for (size_t i = 0; i < z.std.size(); ++i)
    if (!std::isfinite(z.mean[i]) || !std::isfinite(z.std[i]) || !(z.std[i] > 0))
      throw FormatError("normalization: feature " + std::to_string(i) + " has mean " + std::to_string(z.mean[i]) +
                        ", std " + std::to_string(z.std[i]) + " (finite, std > 0)");
  return z;
}

}  // namespace hg::training
