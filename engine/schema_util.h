// Internal helpers for op schemas: checks that throw errors naming the op and its operands.
//
//   using namespace hg::schema;
//   expect_dtype(op, in, 0, DType::F32);          // DTypeError "op 'x': inputs F32[2], I64[2]: input 0 must be F32"
//   int64_t d = norm_dim(op, in, -1);             // ShapeError when out of range
//   Shape out = broadcast_shape(op, in[0].shape, in[1].shape);
#pragma once
#include "engine/error.h"
#include "engine/op.h"

namespace hg::schema {

using Metas = std::vector<TensorMeta>;

[[noreturn]] void fail(const OpSchema& op, const Metas& in, const std::string& why);
void expect_dtype(const OpSchema& op, const Metas& in, size_t i, DType t);
void expect_float(const OpSchema& op, const Metas& in, size_t i);  // F32, F64, F16 or BF16
void expect_same_dtype(const OpSchema& op, const Metas& in, size_t i, size_t j);
void expect_rank(const OpSchema& op, const Metas& in, size_t i, size_t r);
int64_t norm_dim(const OpSchema& op, const Metas& in, int64_t dim);  // of input 0
Shape broadcast_shape(const OpSchema& op, const Metas& in, const Shape& a, const Shape& b);

}  // namespace hg::schema
