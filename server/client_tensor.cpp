#include "server/client_tensor.h"

#include "engine/error.h"

namespace hg::server {

Tensor Tensor::from_bytes(std::string name, WireType type, std::vector<int64_t> shape, std::string bytes) {
  Tensor t;
  t.name = std::move(name);
  t.datatype = type;
  t.shape = std::move(shape);
  t.check_shape();
  check_binary(bytes, t, "tensor");
  t.data = std::move(bytes);
  return t;
}

size_t Tensor::size() const { return static_cast<size_t>(element_count(shape)); }

void Tensor::check_shape() const {
  for (int64_t d : shape)
    if (d < 0) throw InvalidArgument("tensor '" + name + "': shape " + shape_text(shape) + " has a negative dimension");
}

void Tensor::check_count(size_t values) const {
  check_shape();
  if (element_count(shape) != values)
    throw InvalidArgument("tensor '" + name + "': shape " + shape_text(shape) + " holds " +
                          std::to_string(element_count(shape)) + " elements, got " + std::to_string(values) + " values");
}

void Tensor::check_type(WireType asked) const {
  if (asked != datatype)
    throw InvalidArgument("tensor '" + name + "' is " + wire_type_name(datatype) + ", not " + wire_type_name(asked));
  check_binary(data, *this, "tensor");
}

}  // namespace hg::server
