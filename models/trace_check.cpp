// The traced graph checked against the module it was traced from (TraceOptions::check).
#include <algorithm>
#include <cmath>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "models/trace_emit.h"

namespace hg::models::trace_detail {

Tensor resize_along(const Tensor& x, int64_t axis, int64_t size) {
  Tensor r = x;
  while (r.shape()[static_cast<size_t>(axis)] < size) r = ops::concat({r, x}, axis);
  return r.shape()[static_cast<size_t>(axis)] == size ? r : ops::slice(r, axis, 0, size);
}

void check_traced(Module& m, const OpGraph& graph, const std::vector<std::pair<std::string, Tensor>>& constants,
                  const std::vector<std::vector<Tensor>>& input_sets) {
  OpGraphModule g(graph, constants);  // on the host
  const bool was = m.training();
  m.eval();
  NoGradGuard no_grad;
  try {
    for (const auto& inputs : input_sets) {
      std::vector<Tensor> host;
      for (const Tensor& x : inputs) host.push_back(x.to(Device::cpu()));
      const std::vector<Tensor> want = m.forward_all(inputs), got = g.forward_all(host);
      for (size_t k = 0; k < want.size(); ++k) {
        const std::string where = "export check: output '" + graph.outputs[k] + "' for inputs of shape " +
                                  shape_str(inputs[0].shape());
        if (got[k].shape() != want[k].shape())
          throw InvalidArgument(where + ": the traced graph gives " + shape_str(got[k].shape()) + ", the module " +
                                shape_str(want[k].shape()));
        if (!is_floating(want[k].dtype())) {
          if (got[k].to(DType::I64).to_indices() != want[k].to(Device::cpu()).to(DType::I64).to_indices())
            throw InvalidArgument(where + ": the traced graph's values differ from the module's");
          continue;
        }
        const auto w = want[k].to(Device::cpu()).to(DType::F32).to_vector(), v = got[k].to(DType::F32).to_vector();
        float scale = 0;
        for (float x : w) scale = std::isfinite(x) ? std::max(scale, std::fabs(x)) : scale;
        for (size_t i = 0; i < w.size(); ++i) {
          const bool same_nan = std::isnan(w[i]) && std::isnan(v[i]);
          if (same_nan || (w[i] == v[i]) || std::fabs(w[i] - v[i]) <= 1e-4f * std::fabs(w[i]) + 1e-5f * (1 + scale)) continue;
          throw InvalidArgument(where + ": element " + std::to_string(i) + " is " + std::to_string(v[i]) +
                                " in the traced graph and " + std::to_string(w[i]) +
                                " in the module (a tracing problem; TraceOptions::check = false skips this check)");
        }
      }
    }
  } catch (...) {
    m.train(was);
    throw;
  }
  m.train(was);
}

}  // namespace hg::models::trace_detail
