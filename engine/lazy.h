// The hook through which a lazy tracer (graphs/lazy_tracer.h) takes over op calls on a
// device. The engine knows only this interface, never the tracer.
//
//   class MyTracer : public hg::LazyBackend { ... };
//   hg::set_lazy_backend(&tracer);   // from now on ops on traced devices are recorded
#pragma once
#include "engine/op.h"

namespace hg {

class LazyBackend {
 public:
  virtual ~LazyBackend() = default;
  virtual bool traces(Device d) const = 0;
  // Records `op` and returns a tensor whose impl has `lazy` set and no storage.
  virtual Tensor record(const OpSchema& op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                        const TensorMeta& out, Device d) = 0;
  // Runs whatever is pending so that `t` gets its storage.
  virtual void materialize(TensorImpl& t) = 0;
};

void set_lazy_backend(LazyBackend* b);
LazyBackend* lazy_backend();

}  // namespace hg
