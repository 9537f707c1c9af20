// The client's tensor: any KServe v2 datatype, built from typed values and read back typed.
// It is a WireTensor (server/wire.h): name, datatype, shape, raw little-endian bytes
// (BYTES: length-prefixed elements), parameters, and `binary` (send as binary data).
//
//   using hg::server::Tensor;
//   Tensor x("input", {1, 64}, pixels);                          // std::vector<float>: FP32
//   Tensor ids("ids", {1, 16}, std::vector<int64_t>(16, 7));     // INT64
//   Tensor text("text", {2}, std::vector<std::string>{"a", "bc"});  // BYTES
//   Tensor mask("mask", {3}, std::vector<bool>{true, false, true});  // BOOL
//   Tensor h("h", {2}, std::vector<hg::f16>{hg::f16::from_float(1), hg::f16::from_float(2)});
//   x.binary = true;                                 // this input goes as binary data
//   std::vector<float> v = out.as<float>();          // throws unless out is FP32
//   std::vector<std::string> s = out.as<std::string>();   // the elements of a BYTES tensor
//
// C++ element types: bool BOOL, uint8_t..uint64_t UINT8..UINT64, int8_t..int64_t INT8..INT64,
// hg::f16 FP16, float FP32, double FP64, hg::bf16 BF16, std::string BYTES. Errors are
// hg::InvalidArgument naming the tensor.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/dtype.h"
#include "server/wire.h"

namespace hg::server {

static_assert(std::endian::native == std::endian::little, "tensor bytes are copied as little-endian");

template <class T>
struct WireTypeOf;
#define HG_WIRE_TYPE_OF(T, W) \
  template <>                 \
  struct WireTypeOf<T> {      \
    static constexpr WireType value = WireType::W; \
  };
HG_WIRE_TYPE_OF(bool, BOOL)
HG_WIRE_TYPE_OF(uint8_t, UINT8)
HG_WIRE_TYPE_OF(uint16_t, UINT16)
HG_WIRE_TYPE_OF(uint32_t, UINT32)
HG_WIRE_TYPE_OF(uint64_t, UINT64)
HG_WIRE_TYPE_OF(int8_t, INT8)
HG_WIRE_TYPE_OF(int16_t, INT16)
HG_WIRE_TYPE_OF(int32_t, INT32)
HG_WIRE_TYPE_OF(int64_t, INT64)
HG_WIRE_TYPE_OF(f16, FP16)
HG_WIRE_TYPE_OF(float, FP32)
HG_WIRE_TYPE_OF(double, FP64)
HG_WIRE_TYPE_OF(bf16, BF16)
HG_WIRE_TYPE_OF(std::string, BYTES)
#undef HG_WIRE_TYPE_OF

class Tensor : public WireTensor {
 public:
  Tensor() = default;
  Tensor(WireTensor t) : WireTensor(std::move(t)) {}  // NOLINT: a received tensor
  // Row-major values; their count must equal the product of the shape.
  template <class T>
  Tensor(std::string name, std::vector<int64_t> shape, const std::vector<T>& values);
  // Raw bytes of `type` (BYTES: length-prefixed), checked against the shape.
  static Tensor from_bytes(std::string name, WireType type, std::vector<int64_t> shape, std::string bytes);

  // The elements; T must be the datatype's element type (list above).
  template <class T>
  std::vector<T> as() const;
  // Number of elements (the product of the shape).
  size_t size() const;

 private:
  void check_shape() const;                // no negative dimension
  void check_count(size_t values) const;   // against the shape
  void check_type(WireType asked) const;   // as<T>() of the wrong type
};

template <class T>
Tensor::Tensor(std::string name_, std::vector<int64_t> shape_, const std::vector<T>& values) {
  name = std::move(name_);
  datatype = WireTypeOf<T>::value;
  shape = std::move(shape_);
  check_count(values.size());
  if constexpr (std::is_same_v<T, std::string>) {
    data = bytes_encode(values);
  } else if constexpr (std::is_same_v<T, bool>) {
    data.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) data[i] = values[i] ? 1 : 0;
  } else {
    static_assert(std::is_trivially_copyable_v<T>);
    data.resize(values.size() * sizeof(T));
    if (!values.empty()) std::memcpy(data.data(), values.data(), data.size());
  }
}

template <class T>
std::vector<T> Tensor::as() const {
  check_type(WireTypeOf<T>::value);
  if constexpr (std::is_same_v<T, std::string>) {
    return bytes_elements(data);
  } else if constexpr (std::is_same_v<T, bool>) {
    std::vector<bool> out(data.size());
    for (size_t i = 0; i < data.size(); ++i) out[i] = data[i] != 0;
    return out;
  } else {
    std::vector<T> out(data.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), data.data(), out.size() * sizeof(T));
    return out;
  }
}

}  // namespace hg::server
