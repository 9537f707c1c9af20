// Shared by the HPU graph tests (hpu_graph_test.cpp, hpu_wrap_test.cpp): the device and a
// deterministic ramp of values.
//
//   hg::Tensor x = hg::test::ramp({2, 8}, 0.25f);   // on hpu:0: 0.25 * ((i % 17) - 8)
#pragma once
#include <vector>

#include "engine/tensor.h"

namespace hg::test {

inline const Device kHpu = Device::hpu(0);

inline Tensor ramp(const Shape& shape, float scale, Device d = kHpu) {
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 17) - 8);
  return Tensor::from_vector(v, shape, d);
}

}  // namespace hg::test
