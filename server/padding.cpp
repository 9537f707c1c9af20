#include "server/padding.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"
#include "server/wire.h"

namespace hg::server {
namespace {

size_t index_of(const std::vector<models::IOSpec>& ios, const std::string& name, const char* what) {
  for (size_t i = 0; i < ios.size(); ++i)
    if (ios[i].name == name) return i;
  throw InvalidArgument(std::string("config.json: padding names ") + what + " '" + name + "', which the model lacks");
}

size_t element_size(const models::IOSpec& io) {
  const auto w = wire_type_from_name(io.datatype);
  const size_t n = w ? wire_type_size(*w) : 0;
  if (n == 0) throw InvalidArgument("config.json: padding: '" + io.name + "' is " + io.datatype + ", which cannot be padded");
  return n;
}

// One element holding `v` in the tensor's datatype.
std::string element_of(const models::IOSpec& io, double v) {
  auto put = [](auto x) { return std::string(reinterpret_cast<const char*>(&x), sizeof x); };
  const std::string& t = io.datatype;
  if (t == "FP32") return put(static_cast<float>(v));
  if (t == "FP64") return put(v);
  if (t == "INT64") return put(static_cast<int64_t>(v));
  if (t == "INT32") return put(static_cast<int32_t>(v));
  if (t == "INT16") return put(static_cast<int16_t>(v));
  if (t == "INT8" || t == "UINT8" || t == "BOOL") return put(static_cast<uint8_t>(v));
  if (v == 0) return std::string(element_size(io), '\0');
  throw InvalidArgument("config.json: padding.pad_value " + std::to_string(v) + " cannot be written as " + t +
                        " (input '" + io.name + "'); use 0");
}

int64_t product(Shape::const_iterator a, Shape::const_iterator b) {
  int64_t n = 1;
  for (; a != b; ++a) n *= *a;
  return n;
}

// `data` holds `outer` blocks of `from` rows of `row` bytes; returns `outer` blocks of `to` rows:
// the first min(from, to) rows of each block, then `fill` rows.
std::string resize_rows(const std::string& data, int64_t outer, int64_t from, int64_t to, size_t row, const std::string& fill) {
  std::string out;
  out.reserve(static_cast<size_t>(outer * to) * row);
  const size_t keep = static_cast<size_t>(std::min(from, to)) * row;
  for (int64_t o = 0; o < outer; ++o) {
    out.append(data, static_cast<size_t>(o * from) * row, keep);
    for (int64_t r = from; r < to; ++r) out += fill;
  }
  return out;
}

}  // namespace

void check_padding(const Padding& p, const models::PackageSpec& spec) {
  if (!spec.batched)
    throw InvalidArgument("config.json: padding: model '" + spec.name +
                          "' has no batch dimension (max_batch_size 0: its tensors are whole); padding pads a batch's "
                          "samples");
  for (const auto& [list, ios, what] : {std::tuple{&p.dims, &spec.inputs, "input"}, std::tuple{&p.strip, &spec.outputs, "output"}})
    for (const auto& [name, d] : *list) {
      const models::IOSpec& io = (*ios)[index_of(*ios, name, what)];
      if (d >= static_cast<int64_t>(io.shape.size()) || io.shape[static_cast<size_t>(d)] != -1 || io.shape[0] != -1)
        throw InvalidArgument(std::string("config.json: padding: ") + what + " '" + name + "' dimension " +
                              std::to_string(d) + " is not a dynamic dimension after the batch (shape " +
                              shape_text(io.shape) + ")");
      element_size(io);
    }
}

std::vector<std::vector<Shape>> padding_signatures(const Padding& p, const models::PackageSpec& spec) {
  std::vector<std::vector<Shape>> out;
  for (int64_t bucket : p.buckets) {
    std::vector<Shape> sig;
    for (const auto& io : spec.inputs) {
      Shape s(io.shape.begin() + 1, io.shape.end());
      if (auto d = p.dims.find(io.name); d != p.dims.end()) s.at(static_cast<size_t>(d->second - 1)) = bucket;
      if (std::any_of(s.begin(), s.end(), [](int64_t x) { return x < 0; })) return {};
      sig.push_back(std::move(s));
    }
    out.push_back(std::move(sig));
  }
  return out;
}

int64_t pad_request(ModelInputs& in, const models::PackageSpec& spec, const Padding& p) {
  int64_t length = -1;
  std::string first;
  for (const auto& [name, d] : p.dims) {
    const size_t k = index_of(spec.inputs, name, "input");
    const int64_t l = in.shapes.at(k).at(static_cast<size_t>(d - 1));
    if (length >= 0 && l != length)
      throw InvalidArgument("input '" + name + "': dimension " + std::to_string(d) + " is " + std::to_string(l) +
                            ", input '" + first + "' has " + std::to_string(length) + "; the padded inputs must agree");
    length = l, first = name;
  }
  const auto bucket = std::lower_bound(p.buckets.begin(), p.buckets.end(), length);
  if (bucket == p.buckets.end())
    throw InvalidArgument("input '" + first + "': dimension " + std::to_string(p.dims.at(first)) + " is " +
                          std::to_string(length) + "; the model takes 1 to " + std::to_string(p.buckets.back()) +
                          " (padding buckets " + shape_text(p.buckets) + ")");
  for (const auto& [name, d] : p.dims) {
    const size_t k = index_of(spec.inputs, name, "input");
    const models::IOSpec& io = spec.inputs[k];
    Shape& s = in.shapes[k];
    const auto at = s.begin() + (d - 1);
    const int64_t outer = in.batch * product(s.begin(), at);
    const size_t row = static_cast<size_t>(product(at + 1, s.end())) * element_size(io);
    std::string fill;
    const std::string element = element_of(io, name == p.mask ? 0.0 : p.pad_value);
    for (size_t r = 0; r < row / element.size(); ++r) fill += element;
    in.data[k] = resize_rows(in.data[k], outer, length, *bucket, row, fill);
    *at = *bucket;
  }
  return length;
}

void strip_outputs(std::vector<std::string>& outputs, std::vector<Shape>& shapes, const models::PackageSpec& spec,
                   const Padding& p, int64_t length, int64_t batch) {
  for (const auto& [name, d] : p.strip) {
    const size_t j = index_of(spec.outputs, name, "output");
    Shape& s = shapes.at(j);
    const auto at = s.begin() + (d - 1);
    if (*at <= length) continue;
    const int64_t outer = batch * product(s.begin(), at);
    const size_t row = static_cast<size_t>(product(at + 1, s.end())) * element_size(spec.outputs[j]);
    outputs.at(j) = resize_rows(outputs[j], outer, *at, length, row, "");
    *at = length;
  }
}

}  // namespace hg::server
