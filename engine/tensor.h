// Tensors: shape, strides and an offset over shared storage on a device.
//
//   auto x = hg::Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});     // cpu, F32
//   auto t = x.transpose(0, 1);            // a view: same storage, strides swapped
//   auto h = x.to(hg::Device::hpu(0));     // copy to hpu:0 (allocated from its pool)
//   std::vector<float> v = h.reshape({3, 2}).to_vector();   // waits for the device
//
// Reading data on the host (data(), to_vector(), item()) synchronizes the device and,
// in lazy mode, runs the pending graph first.
#pragma once
#include <memory>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"

namespace hg {

// A block of device memory; freed back to its device's pool when the last owner goes.
struct Storage {
  Storage(Device d, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  Device device;
  size_t bytes;
  void* data;
};

struct GradNode;    // engine/autograd.h
struct LazyValue {  // a value recorded by a lazy tracer (graphs/ implements it)
  virtual ~LazyValue() = default;
};

struct TensorImpl {
  TensorMeta meta;
  Shape strides;
  int64_t offset = 0;  // in elements
  Device device;
  std::shared_ptr<Storage> storage;   // null while the value is lazy
  std::shared_ptr<LazyValue> lazy;    // set while the value exists only in a trace
  bool rng_seed = false;  // an I64 seed drawn from the device generator: HPU graph replays redraw it
  // autograd
  bool requires_grad = false;
  std::shared_ptr<GradNode> grad_fn;  // null for leaves
  std::shared_ptr<TensorImpl> grad;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = {});
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = {});
  static Tensor full(const Shape& shape, float value, Device device = {});
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, Device device = {});
  static Tensor from_indices(const std::vector<int64_t>& values, const Shape& shape, Device device = {});

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->meta.shape; }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t ndim() const { return static_cast<int64_t>(shape().size()); }
  const Shape& strides() const { return impl_->strides; }
  DType dtype() const { return impl_->meta.dtype; }
  Device device() const { return impl_->device; }
  const TensorMeta& meta() const { return impl_->meta; }
  int64_t numel() const { return impl_->meta.numel(); }
  bool is_contiguous() const;
  bool is_lazy() const { return impl_->lazy != nullptr; }

  // Views share storage; on a lazy or non-contiguous tensor reshape copies.
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int d0, int d1) const;  // on a tensor that requires grad (grad mode on): a copy with history
  Tensor contiguous() const;
  Tensor to(Device d) const;
  Tensor to(DType t) const;  // a cast (differentiable between float types)
  Tensor clone() const;
  Tensor detach() const;  // same storage, no autograd history

  // Host access. data() requires a contiguous tensor of that dtype.
  template <class T> T* data() const;
  void* raw_data() const;  // start of this view's elements (synchronizes; no dtype check)
  std::vector<float> to_vector() const;
  std::vector<int64_t> to_indices() const;
  float item() const;
  void copy_from(const Tensor& src);  // same shape; any devices; src converted to this dtype

  // Autograd.
  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& set_requires_grad(bool r);
  Tensor grad() const { return impl_->grad ? Tensor(impl_->grad) : Tensor(); }
  void zero_grad() { impl_->grad.reset(); }
  void backward() const;  // requires a one-element tensor

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Makes `t`'s storage valid on the host: runs pending lazy work and waits for the device.
void materialize(const Tensor& t);

}  // namespace hg
