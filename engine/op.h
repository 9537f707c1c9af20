// The op registry: every op is a schema with shape inference, a kernel factory and an
// optional backward. Eager mode, lazy tracing and compiled graphs all run the same kernels.
//
//   const hg::OpSchema& op = hg::op_schema("relu");
//   hg::TensorMeta out = op.infer(op, {x.meta()}, {});             // throws ShapeError
//   hg::Kernel k = op.prepare({x.meta()}, out, {});                // e.g. builds a oneDNN primitive
//   k(inputs, output);                                             // raw pointers, contiguous data
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tensor.h"

namespace hg {

// Op attributes: integers and reals, compared and hashed structurally.
struct Attrs {
  std::vector<int64_t> ints;
  std::vector<double> floats;
  bool operator==(const Attrs&) const = default;
  int64_t i(size_t k, int64_t dflt = 0) const { return k < ints.size() ? ints[k] : dflt; }
  double f(size_t k, double dflt = 0) const { return k < floats.size() ? floats[k] : dflt; }
};

// A prepared kernel: reads contiguous inputs, writes one contiguous output. Never throws.
using Kernel = std::function<void(const void* const* inputs, void* output)>;

struct OpSchema;
using InferFn = TensorMeta (*)(const OpSchema& op, const std::vector<TensorMeta>& in, const Attrs& a);
using PrepareFn = Kernel (*)(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a);
// Gradients of the inputs given the gradient of the output (undefined Tensor = no gradient).
using BackwardFn = std::vector<Tensor> (*)(const std::vector<Tensor>& in, const Tensor& grad,
                                           const Attrs& a);

struct OpSchema {
  std::string name;
  int num_inputs;  // -1: variadic (one or more inputs)
  InferFn infer;
  PrepareFn prepare;
  BackwardFn backward = nullptr;  // null: not differentiable
  // The output may be written over input 0's buffer when nothing else reads input 0 afterwards
  // (elementwise ops whose output has input 0's meta; the kernel must allow out == in[0]).
  bool inplace = false;
  // Optional: prepares a kernel knowing the data of inputs that stay fixed for the kernel's
  // lifetime (weights frozen in an HPU graph): constant[i] points at input i's data or is null.
  // Lets matmul/conv pre-pack weights once. Falls back to `prepare` when null.
  using PrepackFn = Kernel (*)(const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                               const std::vector<const void*>& constant);
  PrepackFn prepack = nullptr;
  // False for ops that cannot run inside a captured graph (data-dependent output shape, host sync).
  bool capturable = true;
};

void register_op(const OpSchema& op);
const OpSchema& op_schema(std::string_view name);  // throws NotFoundError
// The names of the ops the engine registers itself (register_builtin_ops), sorted; ops
// registered later (graphs/, tests) are not among them. For audits such as autograd coverage.
std::vector<std::string> builtin_op_names();

// Runs `op` on `inputs`: checks devices, infers the output, then records it (lazy mode)
// or runs the kernel now (eager; enqueued on an HPU), and records autograd history.
Tensor dispatch(const OpSchema& op, std::vector<Tensor> inputs, const Attrs& attrs = {});
Tensor dispatch(std::string_view op, std::vector<Tensor> inputs, const Attrs& attrs = {});

// Eager-mode kernel cache: one prepared kernel per (op, input metas, attrs). Entries are never
// evicted, so the reference stays valid.
const Kernel& cached_kernel(const OpSchema& op, const std::vector<TensorMeta>& in, const TensorMeta& out,
                     const Attrs& attrs);
size_t kernel_cache_size();

// Appends an exact text key of `a` (floats by bit pattern) for caches.
void append_attrs_key(std::string& out, const Attrs& a);

// Formats "op 'name': inputs F32[2, 3], F32[4]" for error messages.
std::string op_context(const OpSchema& op, const std::vector<TensorMeta>& in);

}  // namespace hg
