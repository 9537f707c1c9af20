#include "training/py_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/error.h"

namespace hg::training {
namespace {

[[noreturn]] void bad_spec(std::string_view spec, const char* why) {
  throw InvalidArgument("format spec '" + std::string(spec) + "': " + why);
}

// Shortest round-trip digits and the decimal exponent of |v| (v finite, non-zero).
void shortest(double v, std::string& digits, int& exp10) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  std::string s(buf, r.ptr);
  size_t e = s.find('e');
  digits.clear();
  for (size_t i = 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  exp10 = std::stoi(s.substr(e + 1));
}

std::string with_precision(double v, char type, int precision) {
  char fmt[16], buf[512];
  std::snprintf(fmt, sizeof fmt, "%%.%d%c", precision, type);
  int n = std::snprintf(buf, sizeof buf, fmt, v);
  if (n < 0 || n >= int(sizeof buf)) throw InvalidArgument("format: value too long to format");
  return buf;
}

// Like 'g' with `p` significant digits, but a fixed-point result keeps one decimal digit and so
// switches to the exponent form one digit earlier (CPython's Py_DTSF_ADD_DOT_0).
std::string general_add_dot_0(double a, int p) {
  std::string e = with_precision(a, 'e', p - 1);
  int decpt = std::stoi(e.substr(e.find('e') + 1)) + 1;
  auto strip = [](std::string s, bool keep_one) {
    if (s.find('.') == std::string::npos) return keep_one ? s + ".0" : s;
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') keep_one ? s += '0' : (s.pop_back(), s);
    return s;
  };
  if (decpt <= -4 || decpt > p - 1) {
    size_t x = e.find('e');
    return strip(e.substr(0, x), false) + e.substr(x);
  }
  return strip(with_precision(a, 'f', p - decpt), true);
}

}  // namespace

std::string py_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  std::string sign = std::signbit(v) ? "-" : "";
  if (v == 0) return sign + "0.0";
  std::string d;
  int e;
  shortest(v, d, e);
  if (e >= -4 && e < 16) {
    std::string s;
    if (e < 0) {
      s = "0." + std::string(size_t(-e - 1), '0') + d;
    } else if (size_t(e) + 1 >= d.size()) {
      s = d + std::string(size_t(e) + 1 - d.size(), '0') + ".0";
    } else {
      s = d.substr(0, size_t(e) + 1) + "." + d.substr(size_t(e) + 1);
    }
    return sign + s;
  }
  std::string m = d.size() > 1 ? d.substr(0, 1) + "." + d.substr(1) : d;
  char ex[16];  // "e+308" at most; sized for any int (-Wformat-truncation)
  std::snprintf(ex, sizeof ex, "e%c%02d", e < 0 ? '-' : '+', std::abs(e));
  return sign + m + ex;
}

std::string py_format(double v, std::string_view spec, bool is_int) {
  size_t i = 0;
  char fill = ' ', align = 0, sign = '-';
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = spec[0], align = spec[1], i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    align = spec[0], i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '0') {
    if (!align) fill = '0', align = '=';
    ++i;
  }
  size_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width = width * 10 + size_t(spec[i++] - '0');
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    if (i >= spec.size() || !std::isdigit(static_cast<unsigned char>(spec[i]))) bad_spec(spec, "precision without digits");
    precision = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) precision = precision * 10 + (spec[i++] - '0');
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) bad_spec(spec, "unsupported (expected [[fill]align][sign][0][width][.precision][type])");

  std::string body;  // without sign
  double a = std::fabs(v);
  bool neg = std::signbit(v) && !(is_int && v == 0);
  if (type == 'd') {
    if (!is_int) bad_spec(spec, "'d' needs an integer value");
    if (precision >= 0) bad_spec(spec, "precision not allowed with 'd'");
    body = std::to_string(static_cast<long long>(a));
  } else if (!std::isfinite(v)) {
    body = std::isnan(v) ? "nan" : "inf";
    if (type == 'F' || type == 'E' || type == 'G') for (auto& c : body) c = char(std::toupper(c));
  } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E') {
    body = with_precision(a, type, precision < 0 ? 6 : precision);
  } else if (type == '%') {
    body = with_precision(a * 100, 'f', precision < 0 ? 6 : precision) + "%";
  } else if (type == 'g' || type == 'G') {
    body = with_precision(a, type, precision < 0 ? 6 : precision == 0 ? 1 : precision);
  } else if (type == 0) {
    if (is_int && precision < 0) body = std::to_string(static_cast<long long>(a));
    else if (precision < 0) body = py_repr(a);
    else body = general_add_dot_0(a, precision == 0 ? 1 : precision);
  } else {
    bad_spec(spec, "unsupported type");
  }
  std::string sgn = neg ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
  size_t len = sgn.size() + body.size();
  if (len >= width) return sgn + body;
  size_t pad = width - len;
  if (!align) align = '>';  // numbers align right
  switch (align) {
    case '<': return sgn + body + std::string(pad, fill);
    case '^': return std::string(pad / 2, fill) + sgn + body + std::string(pad - pad / 2, fill);
    case '=': return sgn + std::string(pad, fill) + body;
    default: return std::string(pad, fill) + sgn + body;
  }
}

}  // namespace hg::training
