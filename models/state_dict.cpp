#include "models/state_dict.h"

#include <cstring>

#include "engine/error.h"

namespace hg::models {

std::map<std::string, Tensor> tensors_from(const safetensors::File& f, const std::string& source, Device device) {
  std::map<std::string, Tensor> r;
  for (const auto& e : f.entries) {
    DType t;
    try {
      t = dtype_from_name(e.dtype);
    } catch (const DTypeError&) {
      throw FormatError(source + ": tensor '" + e.name + "' has dtype " + e.dtype + ", which hgraph tensors do not hold");
    }
    Tensor x = Tensor::empty(e.shape, t, device);
    if (!e.data.empty()) std::memcpy(x.raw_data(), e.data.data(), e.data.size());
    r.emplace(e.name, std::move(x));
  }
  return r;
}

safetensors::File to_safetensors(const StateDict& sd) {
  safetensors::File f;
  f.metadata["format"] = "pt";
  for (const auto& [name, t] : sd) {
    const Tensor c = t.contiguous();
    const auto* p = static_cast<const uint8_t*>(c.raw_data());
    f.entries.push_back({name, dtype_name(c.dtype()), c.shape(), std::vector<uint8_t>(p, p + c.meta().bytes())});
  }
  return f;
}

}  // namespace hg::models
