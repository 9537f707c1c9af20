#include "graphs/strided_view.h"

namespace hg::graphs {

StridedView StridedView::contiguous(const Shape& shape) {
  StridedView v;
  v.dims.resize(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1) v.dims[d] = {{shape[d], stride}};
    stride *= shape[d];
  }
  return v;
}

Shape StridedView::shape() const {
  Shape s;
  for (const auto& f : dims) {
    int64_t n = 1;
    for (const Factor& x : f) n *= x.size;
    s.push_back(n);
  }
  return s;
}

std::vector<StridedView::Factor> StridedView::merged(const std::vector<Factor>& f) {
  std::vector<Factor> out;
  for (const Factor& x : f) {
    if (x.size == 1) continue;
    if (!out.empty() && out.back().stride == x.size * x.stride) {
      out.back() = {out.back().size * x.size, x.stride};
    } else {
      out.push_back(x);
    }
  }
  return out;
}

bool StridedView::permute(const std::vector<int64_t>& perm) {
  if (perm.size() != dims.size()) return false;
  std::vector<std::vector<Factor>> out;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(dims.size())) return false;
    out.push_back(dims[p]);
  }
  dims = std::move(out);
  return true;
}

bool StridedView::slice(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (dim < 0 || dim >= static_cast<int64_t>(dims.size()) || step < 1) return false;
  std::vector<Factor> f = merged(dims[dim]);
  const int64_t size = f.empty() ? 1 : f[0].size;
  if (f.size() > 1 || start < 0 || end > size || start > end) return false;
  const int64_t n = (end - start + step - 1) / step;
  if (f.empty()) {  // a dimension of size 1: [0, 1) or [0, 0)
    if (n != 1) return false;
    return true;
  }
  offset += start * f[0].stride;
  dims[dim] = n == 1 ? std::vector<Factor>{} : std::vector<Factor>{{n, f[0].stride * step}};
  return n >= 1;
}

bool StridedView::reshape(const Shape& to) {
  std::vector<Factor> flat;  // every factor, outermost first
  for (const auto& f : dims)
    for (const Factor& x : merged(f)) flat.push_back(x);
  std::vector<std::vector<Factor>> out;
  size_t next = 0;
  for (int64_t n : to) {
    if (n < 0) return false;
    std::vector<Factor> dim;
    int64_t need = n;
    while (need > 1) {
      if (next == flat.size()) return false;
      Factor& f = flat[next];
      if (f.size <= need) {
        if (need % f.size) return false;
        dim.push_back(f);
        need /= f.size;
        ++next;
      } else {  // the outer `need` of f's indices; the rest stays for the next dimension
        if (f.size % need) return false;
        const int64_t rest = f.size / need;
        dim.push_back({need, f.stride * rest});
        f = {rest, f.stride};
        need = 1;
      }
    }
    if (n == 0) return false;  // empty tensors are not views worth tracking
    out.push_back(merged(dim));
  }
  if (next != flat.size()) return false;
  dims = std::move(out);
  return true;
}

}  // namespace hg::graphs
