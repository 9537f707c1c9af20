// Python's float and int formatting, for file names and logs that must read as Lightning's.
//
//   hg::training::py_repr(0.1);               // "0.1"    (repr: shortest round trip)
//   hg::training::py_repr(1e-05);             // "1e-05"
//   hg::training::py_format(0.12345, ".2f");  // "0.12"   (str.format's spec mini-language)
//   hg::training::py_format(7, "03d", true);  // "007"
#pragma once
#include <string>
#include <string_view>

namespace hg::training {

std::string py_repr(double v);
// format(v, spec) for a Python float, or for an int when `is_int` (v integral). Supports
// [[fill]align][sign][0][width][.precision][type] with type one of "", d, f, F, e, E, g, G, %.
// Throws hg::InvalidArgument naming the spec otherwise.
std::string py_format(double v, std::string_view spec, bool is_int = false);

}  // namespace hg::training
