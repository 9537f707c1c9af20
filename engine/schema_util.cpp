#include "engine/schema_util.h"

namespace hg::schema {

void fail(const OpSchema& op, const Metas& in, const std::string& why) {
  throw ShapeError(op_context(op, in) + ": " + why);
}

void expect_dtype(const OpSchema& op, const Metas& in, size_t i, DType t) {
  if (in[i].dtype != t)
    throw DTypeError(op_context(op, in) + ": input " + std::to_string(i) + " must be " + dtype_name(t));
}

void expect_float(const OpSchema& op, const Metas& in, size_t i) {
  if (!is_floating(in[i].dtype))
    throw DTypeError(op_context(op, in) + ": input " + std::to_string(i) + " must be a floating-point tensor");
}

void expect_same_dtype(const OpSchema& op, const Metas& in, size_t i, size_t j) {
  if (in[i].dtype != in[j].dtype)
    throw DTypeError(op_context(op, in) + ": inputs " + std::to_string(i) + " and " + std::to_string(j) +
                     " must have the same dtype");
}

void expect_rank(const OpSchema& op, const Metas& in, size_t i, size_t r) {
  if (in[i].shape.size() != r) fail(op, in, "input " + std::to_string(i) + " must have rank " + std::to_string(r));
}

int64_t norm_dim(const OpSchema& op, const Metas& in, int64_t dim) {
  if (in.empty()) fail(op, in, "needs at least one input");
  const int64_t n = static_cast<int64_t>(in[0].shape.size());
  if (dim < -n || dim >= n || n == 0) fail(op, in, "dim " + std::to_string(dim) + " out of range");
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_shape(const OpSchema& op, const Metas& in, const Shape& a, const Shape& b) {
  std::optional<Shape> out = broadcast_shapes(a, b);
  if (!out) fail(op, in, "shapes " + shape_str(a) + " and " + shape_str(b) + " cannot be broadcast together");
  return *out;
}

}  // namespace hg::schema
