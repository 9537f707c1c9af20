// Op registry, eager dispatch and the eager kernel cache.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/lazy.h"
#include "engine/op.h"
#include "engine/op_families.h"
#include "engine/prepare_kernel.h"

namespace hg {

namespace {

struct OpTable {
  std::unordered_map<std::string, OpSchema> ops;
  std::vector<std::string> builtins;  // sorted, set once by ensure_builtins
  std::mutex mu;
};

OpTable& table() {
  static OpTable t;
  return t;
}

void ensure_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::unordered_map<std::string, OpSchema> before;  // ops registered ahead of the builtins
    {
      std::lock_guard lk(table().mu);
      before = table().ops;
    }
    register_builtin_ops();
    std::lock_guard lk(table().mu);
    for (const auto& [name, op] : table().ops)
      if (!before.count(name)) table().builtins.push_back(name);
    std::sort(table().builtins.begin(), table().builtins.end());
  });
}

std::atomic<LazyBackend*> g_lazy{nullptr};

// The eager kernel cache's key: the op, its input metas and attributes, compared
// structurally (floats by bit pattern, like append_attrs_key). Lookups go through KeyRef and
// a precomputed hash, so a hit builds no key and allocates nothing.
struct KeyRef {
  const OpSchema* op;
  const std::vector<TensorMeta>* in;
  const Attrs* attrs;
  size_t hash;
};
struct Key {
  const OpSchema* op;
  std::vector<TensorMeta> in;
  Attrs attrs;
  size_t hash;
  KeyRef ref() const { return {op, &in, &attrs, hash}; }
};

size_t key_hash(const OpSchema* op, const std::vector<TensorMeta>& in, const Attrs& a) {
  uint64_t h = std::bit_cast<uintptr_t>(op);
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull + (h >> 29); };
  for (const auto& m : in) {
    mix(static_cast<uint64_t>(m.dtype) + (m.shape.size() << 8));
    for (int64_t d : m.shape) mix(static_cast<uint64_t>(d));
  }
  mix(a.ints.size());
  for (int64_t v : a.ints) mix(static_cast<uint64_t>(v));
  for (double v : a.floats) mix(std::bit_cast<uint64_t>(v));
  return static_cast<size_t>(h);
}

bool same_bits(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::bit_cast<uint64_t>(x[i]) != std::bit_cast<uint64_t>(y[i])) return false;
  return true;
}

struct KeyHash {
  using is_transparent = void;
  size_t operator()(const KeyRef& k) const { return k.hash; }
  size_t operator()(const Key& k) const { return k.hash; }
};
struct KeyEq {
  using is_transparent = void;
  bool operator()(const KeyRef& x, const KeyRef& y) const {
    return x.hash == y.hash && x.op == y.op && *x.in == *y.in && x.attrs->ints == y.attrs->ints &&
           same_bits(x.attrs->floats, y.attrs->floats);
  }
  bool operator()(const Key& x, const KeyRef& y) const { return (*this)(x.ref(), y); }
  bool operator()(const KeyRef& x, const Key& y) const { return (*this)(x, y.ref()); }
  bool operator()(const Key& x, const Key& y) const { return (*this)(x.ref(), y.ref()); }
};

struct KernelCache {
  std::shared_mutex mu;
  std::unordered_map<Key, Kernel, KeyHash, KeyEq> map;
};

// Never destroyed: kernels queued on a device may still run while the process exits.
KernelCache& kernel_cache() {
  static KernelCache* c = new KernelCache;
  return *c;
}

}  // namespace

void register_op(const OpSchema& op) {
  std::lock_guard lk(table().mu);
  table().ops[op.name] = op;
}

const OpSchema& op_schema(std::string_view name) {
  ensure_builtins();
  std::lock_guard lk(table().mu);
  auto it = table().ops.find(std::string(name));
  if (it == table().ops.end()) throw NotFoundError("unknown op '" + std::string(name) + "'");
  return it->second;
}

std::vector<std::string> builtin_op_names() {
  ensure_builtins();
  std::lock_guard lk(table().mu);
  return table().builtins;
}

void set_lazy_backend(LazyBackend* b) { g_lazy.store(b); }
LazyBackend* lazy_backend() { return g_lazy.load(); }

void append_attrs_key(std::string& out, const Attrs& a) {
  for (int64_t v : a.ints) out += std::to_string(v) + ',';
  out += '/';
  char buf[24];
  for (double v : a.floats) {
    std::snprintf(buf, sizeof buf, "%016llx,", static_cast<unsigned long long>(std::bit_cast<uint64_t>(v)));
    out += buf;
  }
}

std::string op_context(const OpSchema& op, const std::vector<TensorMeta>& in) {
  std::string s = "op '" + op.name + "': inputs ";
  for (size_t i = 0; i < in.size(); ++i) s += (i ? ", " : "") + meta_str(in[i]);
  return s;
}

const Kernel& cached_kernel(const OpSchema& op, const std::vector<TensorMeta>& in, const TensorMeta& out,
                           const Attrs& a) {
  auto& c = kernel_cache();
  const KeyRef ref{&op, &in, &a, key_hash(&op, in, a)};
  {
    std::shared_lock lk(c.mu);
    auto it = c.map.find(ref);
    if (it != c.map.end()) return it->second;
  }
  Kernel k = prepare_kernel(op, in, out, a);
  std::unique_lock lk(c.mu);
  return c.map.emplace(Key{&op, in, a, ref.hash}, std::move(k)).first->second;
}

size_t kernel_cache_size() {
  std::shared_lock lk(kernel_cache().mu);
  return kernel_cache().map.size();
}

Tensor dispatch(std::string_view op, std::vector<Tensor> inputs, const Attrs& attrs) {
  return dispatch(op_schema(op), std::move(inputs), attrs);
}

Tensor dispatch(const OpSchema& op, std::vector<Tensor> inputs, const Attrs& attrs) {
  if (op.num_inputs >= 0 ? static_cast<int>(inputs.size()) != op.num_inputs : inputs.empty())
    throw InvalidArgument("op '" + op.name + "' takes " +
                          (op.num_inputs >= 0 ? std::to_string(op.num_inputs) : std::string("one or more")) +
                          " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined()) throw InvalidArgument("op '" + op.name + "': input " + std::to_string(i) + " is undefined");
  apply_autocast(op, inputs);
  // The metas live in a per-thread vector reused across calls (copy-assigning a meta reuses
  // its shape's capacity), so a steady stream of eager ops allocates none for them. A nested
  // dispatch (autocast, materialising a lazy input) finds it moved out and makes its own.
  thread_local std::vector<TensorMeta> spare_metas;
  std::vector<TensorMeta> metas = std::move(spare_metas);
  metas.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) metas[i] = inputs[i].meta();
  const Device dev = inputs[0].device();
  for (size_t i = 1; i < inputs.size(); ++i)
    if (inputs[i].device() != dev)
      throw DeviceError(op_context(op, metas) + ": input 0 is on " + dev.str() + " but input " + std::to_string(i) +
                        " is on " + inputs[i].device().str());
  const TensorMeta out_meta = op.infer(op, metas, attrs);

  Tensor out;
  LazyBackend* lazy = lazy_backend();
  if (lazy && lazy->traces(dev)) {
    for (auto& t : inputs)
      if (!t.is_contiguous()) t = t.contiguous();
    out = lazy->record(op, inputs, attrs, out_meta, dev);
  } else {
    for (auto& t : inputs) {
      if (!t.is_contiguous()) t = t.contiguous();
      if (t.is_lazy()) materialize(t);
    }
    out = Tensor::empty(out_meta.shape, out_meta.dtype, dev);
    const Kernel& k = cached_kernel(op, metas, out_meta, attrs);  // cache entries live forever
    auto data_of = [](const Tensor& t) -> const void* {
      return static_cast<const char*>(t.impl()->storage->data) +
             t.impl()->offset * static_cast<int64_t>(dtype_size(t.dtype()));
    };
    void* optr = out.impl()->storage->data;
    if (!dev.is_hpu() && inputs.size() <= 8) {  // cpu: run now, no closure, no allocation
      const void* ptrs[8];
      for (size_t i = 0; i < inputs.size(); ++i) ptrs[i] = data_of(inputs[i]);
      k(ptrs, optr);
    } else {
      std::vector<const void*> ptrs;
      std::vector<std::shared_ptr<Storage>> keep;  // alive until the queued kernel has run
      for (auto& t : inputs) {
        ptrs.push_back(data_of(t));
        keep.push_back(t.impl()->storage);
      }
      device_backend(dev).enqueue([&k, ptrs = std::move(ptrs), optr, keep = std::move(keep),
                                   o = out.impl()->storage] { k(ptrs.data(), optr); });
    }
  }
  record_grad(op, inputs, attrs, out);
  spare_metas = std::move(metas);
  return out;
}

}  // namespace hg
