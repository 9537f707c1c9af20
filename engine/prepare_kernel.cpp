#include "engine/prepare_kernel.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>

#include "engine/dnnl_context.h"
#include "engine/error.h"

namespace hg {

namespace {

void widen(const void* from, float* to, size_t n) {
  const auto* b = static_cast<const uint16_t*>(from);
  for (size_t i = 0; i < n; ++i) to[i] = std::bit_cast<float>(static_cast<uint32_t>(b[i]) << 16);
}

void narrow(const float* from, void* to, size_t n) {
  auto* b = static_cast<bf16*>(to);
  for (size_t i = 0; i < n; ++i) b[i] = bf16::from_float(from[i]);
}

// One thread's F32 copies, by slot (inputs, then the output); kernels do not nest.
float* scratch(size_t slot, size_t floats) {
  thread_local std::vector<std::vector<float>> bufs;
  if (bufs.size() <= slot) bufs.resize(slot + 1);
  if (bufs[slot].size() < floats) bufs[slot].resize(floats);
  return bufs[slot].data();
}

bool involves_bf16(const std::vector<TensorMeta>& in, const TensorMeta& out) {
  return out.dtype == DType::BF16 || std::any_of(in.begin(), in.end(), [](const TensorMeta& m) { return m.dtype == DType::BF16; });
}

Kernel prepare_as_is(const OpSchema& op, const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                     const std::vector<const void*>& constant) {
  const bool any_constant = std::any_of(constant.begin(), constant.end(), [](const void* p) { return p != nullptr; });
  return any_constant && op.prepack ? op.prepack(in, out, a, constant) : op.prepare(in, out, a);
}

// The F32 kernel of a BF16 op, run on widened copies (see the header).
Kernel via_f32(const OpSchema& op, const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
               const std::vector<const void*>& constant) {
  std::vector<TensorMeta> in32 = in;
  TensorMeta out32 = out;
  for (auto& m : in32)
    if (m.dtype == DType::BF16) m.dtype = DType::F32;
  if (out32.dtype == DType::BF16) out32.dtype = DType::F32;
  // Constant inputs widened once and kept for the kernel's life: it may read them (a bias, say)
  // at every run as well as pack them now.
  std::vector<std::shared_ptr<float[]>> kept(in.size());
  std::vector<const void*> constant32 = constant;
  for (size_t i = 0; i < constant32.size() && i < in.size(); ++i) {
    if (!constant32[i] || in[i].dtype != DType::BF16) continue;
    const size_t n = static_cast<size_t>(in[i].numel());
    kept[i].reset(new float[std::max<size_t>(n, 1)]);
    widen(constant32[i], kept[i].get(), n);
    constant32[i] = kept[i].get();
  }
  Kernel f32 = prepare_as_is(op, in32, out32, a, constant32);
  std::vector<size_t> widened;  // the inputs given F32 copies at every run
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].dtype == DType::BF16 && !kept[i]) widened.push_back(i);
  std::vector<size_t> elems(in.size());
  for (size_t i = 0; i < in.size(); ++i) elems[i] = static_cast<size_t>(in[i].numel());
  const size_t out_elems = static_cast<size_t>(out.numel());
  const bool narrow_out = out.dtype == DType::BF16;
  return [f32 = std::move(f32), kept = std::move(kept), widened = std::move(widened), elems = std::move(elems),
          out_elems, narrow_out, n = in.size()](const void* const* inputs, void* output) {
    thread_local std::vector<const void*> ptrs;
    ptrs.assign(inputs, inputs + n);
    for (size_t i = 0; i < n; ++i)
      if (kept[i]) ptrs[i] = kept[i].get();
    for (size_t i : widened) {
      float* w = scratch(i, elems[i]);
      widen(inputs[i], w, elems[i]);
      ptrs[i] = w;
    }
    float* o = narrow_out ? scratch(n, out_elems) : static_cast<float*>(output);
    f32(ptrs.data(), o);
    if (narrow_out) narrow(o, output, out_elems);
  };
}

}  // namespace

Kernel prepare_kernel(const OpSchema& op, const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                      const std::vector<const void*>& constant) {
  if (!involves_bf16(in, out) || kernels::dnnl_has_bf16()) return prepare_as_is(op, in, out, a, constant);
  try {
    return prepare_as_is(op, in, out, a, constant);
  } catch (const Error& e) {  // oneDNN's own words, whichever kernel passes them on
    if (!std::strstr(e.what(), "could not create a primitive")) throw;
    return via_f32(op, in, out, a, constant);
  }
}

}  // namespace hg
