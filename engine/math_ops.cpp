// The math family (engine/ops_math.h): schema, kernels and backward of "unary_math".
#include <cmath>

#include "engine/dtype_dispatch.h"
#include "engine/op_attrs.h"
#include "engine/op_families.h"
#include "engine/ops.h"
#include "engine/schema_util.h"

namespace hg {

namespace {

using Metas = std::vector<TensorMeta>;
using Ts = std::vector<Tensor>;

using attrs::MathFn;

Tensor unary_math(const Tensor& x, MathFn fn, double exponent = 0) {
  return dispatch("unary_math", {x}, attrs::UnaryMath{fn, exponent}.pack());
}

TensorMeta infer_unary_math(const OpSchema& op, const Metas& in, const Attrs& a) {
  schema::expect_float(op, in, 0);
  if (a.i(0) < 0 || a.i(0) > static_cast<int64_t>(MathFn::Pow)) schema::fail(op, in, "bad function " + std::to_string(a.i(0)));
  return in[0];
}

template <class T, class F>
Kernel map_kernel(int64_t n, F f) {
  return [n, f](const void* const* in, void* o) {
    const T* x = static_cast<const T*>(in[0]);
    T* y = static_cast<T*>(o);
    for (int64_t i = 0; i < n; ++i) y[i] = store<T>(f(load(x[i])));
  };
}

Kernel prepare_unary_math(const Metas&, const TensorMeta& out, const Attrs& a) {
  return visit_dtype(out.dtype, [&]<class T>(Type<T>) -> Kernel {
    using C = compute_t<T>;
    if constexpr (!std::is_floating_point_v<C>) {
      return nullptr;  // rejected by infer_unary_math
    } else {
      switch (static_cast<MathFn>(a.i(0))) {
        case MathFn::Sqrt: return map_kernel<T>(out.numel(), [](C v) { return std::sqrt(v); });
        case MathFn::Erf: return map_kernel<T>(out.numel(), [](C v) { return std::erf(v); });
        case MathFn::Exp: return map_kernel<T>(out.numel(), [](C v) { return std::exp(v); });
        case MathFn::Pow: return map_kernel<T>(out.numel(), [e = static_cast<C>(a.f(0))](C v) { return std::pow(v, e); });
      }
      return nullptr;
    }
  });
}

Ts bw_unary_math(const Ts& in, const Tensor& g, const Attrs& a) {
  const Tensor& x = in[0];
  switch (static_cast<MathFn>(a.i(0))) {
    case MathFn::Sqrt: return {ops::div(ops::scale(g, 0.5), ops::sqrt(x))};
    case MathFn::Erf:  // 2/sqrt(pi) e^{-x^2}
      return {ops::mul(g, ops::scale(ops::exp(ops::scale(ops::mul(x, x), -1.0)), 1.12837916709551257390))};
    case MathFn::Exp: return {ops::mul(g, ops::exp(x))};
    case MathFn::Pow: return {ops::mul(g, ops::scale(ops::pow(x, a.f(0) - 1.0), a.f(0)))};
  }
  return {Tensor()};
}

}  // namespace

namespace ops {

Tensor sqrt(const Tensor& x) { return unary_math(x, MathFn::Sqrt); }
Tensor erf(const Tensor& x) { return unary_math(x, MathFn::Erf); }
Tensor exp(const Tensor& x) { return unary_math(x, MathFn::Exp); }
Tensor pow(const Tensor& x, double exponent) { return unary_math(x, MathFn::Pow, exponent); }

}  // namespace ops

void register_math_ops() { register_op({"unary_math", 1, infer_unary_math, prepare_unary_math, bw_unary_math, /*inplace=*/true}); }

}  // namespace hg
