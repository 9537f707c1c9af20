#include "engine/tensor.h"

#include <algorithm>
#include <cstring>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/lazy.h"
#include "engine/op.h"

namespace hg {

Storage::Storage(Device d, size_t b) : device(d), bytes(b), data(device_backend(d).allocate(b)) {}
Storage::~Storage() { device_backend(device).release(data, bytes); }

namespace {

bool numel_nonzero(const Shape& shape) {
  return std::none_of(shape.begin(), shape.end(), [](int64_t d) { return d == 0; });
}

std::shared_ptr<TensorImpl> new_impl(const Shape& shape, DType dtype, Device device) {
  // Overflow-checked bytes: a shape whose numel * dtype_size wraps or exceeds the cap would
  // otherwise become a tiny (or absurd) allocation that later kernels index past.
  for (int64_t d : shape)
    if (d < 0) throw ShapeError("tensor shape " + shape_str(shape) + " has a negative dimension");
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  if (numel_nonzero(shape))
    for (int64_t d : shape)
      if (__builtin_mul_overflow(bytes, d, &bytes) || bytes > kMaxTensorBytes)
        throw ShapeError("tensor shape " + shape_str(shape) + " of " + dtype_name(dtype) + " exceeds the limit of " +
                         std::to_string(kMaxTensorBytes) + " bytes");
  auto t = std::make_shared<TensorImpl>();
  t->meta = {shape, dtype};
  t->strides = contiguous_strides(shape);
  t->device = device;
  return t;
}

// Copies a strided view into contiguous memory, element by element (elem bytes each).
void strided_copy(const char* src, const Shape& shape, const Shape& strides, size_t elem, char* dst) {
  const size_t nd = shape.size();
  const int64_t n = numel(shape);
  if (n == 0) return;
  std::vector<int64_t> idx(nd, 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = 0;
    for (size_t d = 0; d < nd; ++d) off += idx[d] * strides[d];
    std::memcpy(dst + k * elem, src + off * static_cast<int64_t>(elem), elem);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  auto t = new_impl(shape, dtype, device);
  t->storage = std::make_shared<Storage>(device, std::max<size_t>(t->meta.bytes(), 1));
  return Tensor(t);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  std::memset(t.impl_->storage->data, 0, t.impl_->storage->bytes);
  return t;
}

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, DType::F32, device);
  float* p = static_cast<float*>(t.impl_->storage->data);
  std::fill(p, p + t.numel(), value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& shape, Device device) {
  if (static_cast<int64_t>(v.size()) != hg::numel(shape))
    throw ShapeError("from_vector: " + std::to_string(v.size()) + " values do not fill shape " + shape_str(shape));
  Tensor t = empty(shape, DType::F32, device);
  if (!v.empty()) std::memcpy(t.impl_->storage->data, v.data(), v.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_indices(const std::vector<int64_t>& v, const Shape& shape, Device device) {
  if (static_cast<int64_t>(v.size()) != hg::numel(shape))
    throw ShapeError("from_indices: " + std::to_string(v.size()) + " values do not fill shape " + shape_str(shape));
  Tensor t = empty(shape, DType::I64, device);
  if (!v.empty()) std::memcpy(t.impl_->storage->data, v.data(), v.size() * sizeof(int64_t));
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = static_cast<int>(ndim());
  if (i < -n || i >= n) throw ShapeError("dim " + std::to_string(i) + " out of range for shape " + shape_str(shape()));
  return shape()[i < 0 ? i + n : i];
}

bool Tensor::is_contiguous() const { return impl_->strides == contiguous_strides(shape()); }

Tensor Tensor::reshape(const Shape& s) const {
  Shape target = s;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1 && infer < 0) infer = static_cast<int64_t>(i);
    else if (target[i] < 0) throw ShapeError("reshape: bad target shape " + shape_str(s));
    else known *= target[i];
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known) throw ShapeError("reshape: cannot reshape " + shape_str(shape()) + " to " + shape_str(s));
    target[infer] = numel() / known;
  }
  if (hg::numel(target) != numel())
    throw ShapeError("reshape: cannot reshape " + shape_str(shape()) + " (" + std::to_string(numel()) +
                     " elements) to " + shape_str(s));
  if (!is_lazy() && is_contiguous() && !(requires_grad() && grad_mode_enabled())) {
    auto v = std::make_shared<TensorImpl>(*impl_);
    v->meta.shape = target;
    v->strides = contiguous_strides(target);
    v->grad_fn.reset();
    v->grad.reset();
    v->requires_grad = false;
    return Tensor(v);
  }
  return dispatch("reshape", {is_contiguous() ? *this : contiguous()}, Attrs{target, {}});
}

Tensor Tensor::transpose(int d0, int d1) const {
  const int n = static_cast<int>(ndim());
  if (d0 < 0) d0 += n;
  if (d1 < 0) d1 += n;
  if (d0 < 0 || d1 < 0 || d0 >= n || d1 >= n)
    throw ShapeError("transpose: dims out of range for shape " + shape_str(shape()));
  if (requires_grad() && grad_mode_enabled()) {  // a copy through the permute op keeps the history
    Shape perm(n);
    for (int i = 0; i < n; ++i) perm[i] = i;
    std::swap(perm[d0], perm[d1]);
    return dispatch("permute", {*this}, Attrs{perm, {}});
  }
  if (is_lazy()) materialize(*this);
  auto v = std::make_shared<TensorImpl>(*impl_);
  std::swap(v->meta.shape[d0], v->meta.shape[d1]);
  std::swap(v->strides[d0], v->strides[d1]);
  v->grad_fn.reset();
  v->grad.reset();
  v->requires_grad = false;
  return Tensor(v);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  materialize(*this);
  Tensor out = empty(shape(), dtype(), device());
  const size_t elem = dtype_size(dtype());
  strided_copy(static_cast<const char*>(impl_->storage->data) + impl_->offset * elem, shape(), strides(), elem,
               static_cast<char*>(out.impl_->storage->data));
  return out;
}

Tensor Tensor::to(Device d) const {
  device_backend(d);  // validates the device
  if (d == device()) return *this;
  Tensor src = contiguous();
  materialize(src);
  Tensor out = empty(shape(), dtype(), d);
  std::memcpy(out.impl_->storage->data, src.raw_data(), meta().bytes());
  return out;
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  return dispatch("cast", {*this}, Attrs{{static_cast<int64_t>(t)}, {}});
}

Tensor Tensor::clone() const {
  Tensor src = contiguous();
  materialize(src);
  Tensor out = empty(shape(), dtype(), device());
  std::memcpy(out.impl_->storage->data, src.raw_data(), meta().bytes());
  return out;
}

Tensor Tensor::detach() const {
  if (is_lazy()) materialize(*this);
  auto v = std::make_shared<TensorImpl>(*impl_);
  v->grad_fn.reset();
  v->grad.reset();
  v->requires_grad = false;
  return Tensor(v);
}

void* Tensor::raw_data() const {
  materialize(*this);
  return static_cast<char*>(impl_->storage->data) + impl_->offset * static_cast<int64_t>(dtype_size(dtype()));
}

template <class T>
T* Tensor::data() const {
  constexpr DType want = std::is_same_v<T, float>     ? DType::F32
                         : std::is_same_v<T, double>  ? DType::F64
                         : std::is_same_v<T, int64_t> ? DType::I64
                         : std::is_same_v<T, int32_t> ? DType::I32
                         : std::is_same_v<T, bf16>    ? DType::BF16
                         : std::is_same_v<T, f16>     ? DType::F16
                                                      : DType::U8;
  const bool ok = dtype() == want || (want == DType::U8 && dtype() == DType::BOOL);
  if (!ok)
    throw DTypeError(std::string("data<") + dtype_name(want) + ">() on a " + dtype_name(dtype()) + " tensor");
  if (!is_contiguous()) throw InvalidArgument("data() on a non-contiguous tensor; call contiguous() first");
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template int64_t* Tensor::data<int64_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;
template double* Tensor::data<double>() const;
template int32_t* Tensor::data<int32_t>() const;
template bf16* Tensor::data<bf16>() const;
template f16* Tensor::data<f16>() const;

std::vector<float> Tensor::to_vector() const {
  Tensor c = contiguous();
  const float* p = c.data<float>();
  return std::vector<float>(p, p + numel());
}

std::vector<int64_t> Tensor::to_indices() const {
  Tensor c = contiguous();
  const int64_t* p = c.data<int64_t>();
  return std::vector<int64_t>(p, p + numel());
}

float Tensor::item() const {
  if (numel() != 1) throw ShapeError("item() on a tensor of shape " + shape_str(shape()) + " (needs one element)");
  return to_vector()[0];
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape() != shape())
    throw ShapeError("copy_from: source shape " + shape_str(src.shape()) + " differs from " + shape_str(shape()));
  if (src.dtype() != dtype())
    throw DTypeError(std::string("copy_from: source dtype ") + dtype_name(src.dtype()) + " differs from " +
                     dtype_name(dtype()));
  if (!is_contiguous()) throw InvalidArgument("copy_from into a non-contiguous tensor");
  Tensor s = src.contiguous();
  const void* from = s.raw_data();
  std::memcpy(raw_data(), from, meta().bytes());
}

Tensor& Tensor::set_requires_grad(bool r) {
  if (r && !is_floating(dtype())) throw DTypeError(std::string("requires_grad needs a floating-point tensor, not ") + dtype_name(dtype()));
  impl_->requires_grad = r;
  return *this;
}

void Tensor::backward() const { run_backward(*this); }

void materialize(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (impl->lazy) {
    if (!lazy_backend()) throw InternalError("lazy tensor without a lazy backend");
    lazy_backend()->materialize(*impl);
  }
  device_backend(impl->device).synchronize();
}

}  // namespace hg
