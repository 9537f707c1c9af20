// Internal: run a kernel template on the C++ type of a DType.
//
//   visit_dtype(meta.dtype, [&]<class T>(Type<T>) { ... T* p ...; });
//   using C = compute_t<T>;          // float for bf16/f16, T otherwise
//   C v = load(p[i]);  p[i] = store<T>(v);
#pragma once
#include <cstdint>
#include <type_traits>

#include "engine/dtype.h"
#include "engine/error.h"

namespace hg {

template <class T>
struct Type {
  using type = T;
};

// BOOL is stored as one byte holding 0 or 1.
struct boolean {
  uint8_t v;
};

template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(Type<float>{});
    case DType::F64: return f(Type<double>{});
    case DType::BF16: return f(Type<bf16>{});
    case DType::F16: return f(Type<f16>{});
    case DType::I32: return f(Type<int32_t>{});
    case DType::I64: return f(Type<int64_t>{});
    case DType::U8: return f(Type<uint8_t>{});
    case DType::BOOL: return f(Type<boolean>{});
  }
  throw InternalError("visit_dtype: unknown dtype");
}

template <class T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<bf16> {
  using type = float;
};
template <>
struct compute_type<f16> {
  using type = float;
};
template <>
struct compute_type<boolean> {
  using type = uint8_t;
};
template <class T>
using compute_t = typename compute_type<T>::type;

template <class T>
inline compute_t<T> load(const T& v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) return v.to_float();
  else if constexpr (std::is_same_v<T, boolean>) return v.v;
  else return v;
}

template <class T, class C>
inline T store(C v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) return T::from_float(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, boolean>) return boolean{static_cast<uint8_t>(v != C(0))};
  else return static_cast<T>(v);
}

}  // namespace hg
