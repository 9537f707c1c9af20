// Internal to the passes: where the elements of a chain of view ops (reshape, permute, slice)
// sit in the buffer the chain starts from, so that a kernel can read (or write) them in place
// instead of through copies. Each dimension is a list of (size, stride) factors, outermost first:
// a reshape that merges two dimensions whose strides do not line up keeps both factors (PyTorch's
// view rules would need a copy there).
//
//   StridedView v = StridedView::contiguous({128, 8, 384});   // [S, B, 3E]
//   v.slice(2, 128, 256);                                      // k: [S, B, E] at offset 128
//   v.reshape({128, 32, 32});                                  // [S, B*H, D]: B*H is two factors
//   v.permute({1, 0, 2});                                      // [B*H, S, D]
//   // v.dims[0] == {{8, 384}, {4, 32}}, v.dims[1] == {{128, 3072}}, v.dims[2] == {{32, 1}}
#pragma once
#include <cstdint>
#include <vector>

#include "engine/dtype.h"

namespace hg::graphs {

struct StridedView {
  struct Factor {
    int64_t size, stride;
    bool operator==(const Factor&) const = default;
  };
  std::vector<std::vector<Factor>> dims;  // per dimension; empty: a dimension of size 1
  int64_t offset = 0;

  static StridedView contiguous(const Shape& shape);
  Shape shape() const;
  // Each returns false (leaving the view unspecified) when the op cannot be expressed.
  bool permute(const std::vector<int64_t>& perm);
  bool slice(int64_t dim, int64_t start, int64_t end, int64_t step);  // a dimension of one factor
  bool reshape(const Shape& to);
  // The dimension's factors merged where they line up (outer stride = inner size * stride).
  static std::vector<Factor> merged(const std::vector<Factor>& f);
};

}  // namespace hg::graphs
