#include "engine/dnnl_context.h"

#include <algorithm>
#include <atomic>
#include <new>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <omp.h>

#include "engine/kernels.h"
#include "engine/packed_weights.h"

namespace hg::kernels {

// Never destroyed, like the eager kernel cache: kernels queued on an hpu may still run while
// the process exits, after function-local statics constructed later than the device queues
// are gone.
dnnl::engine& dnnl_engine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream s(dnnl_engine());
  return s;
}

dnnl::memory::data_type dnnl_dtype(DType t) {
  return t == DType::BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

bool dnnl_has_bf16() {
  static const bool has = [] {
    try {
      const dnnl::memory::desc m({4, 4}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(m, m, m), dnnl_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void append_activation(dnnl::post_ops& po, FusedAct act) {
  auto eltwise = [&](dnnl::algorithm alg, float alpha, float beta = 0.f) { po.append_eltwise(1.f, alg, alpha, beta); };
  switch (act) {
    case FusedAct::None: break;
    case FusedAct::Relu: eltwise(dnnl::algorithm::eltwise_relu, 0.f); break;
    case FusedAct::GeluErf: eltwise(dnnl::algorithm::eltwise_gelu_erf, 0.f); break;
    case FusedAct::GeluTanh: eltwise(dnnl::algorithm::eltwise_gelu_tanh, 0.f); break;
    case FusedAct::Silu: eltwise(dnnl::algorithm::eltwise_swish, 1.f); break;  // x * sigmoid(1 * x)
    case FusedAct::Sigmoid: eltwise(dnnl::algorithm::eltwise_logistic, 0.f); break;
    case FusedAct::Tanh: eltwise(dnnl::algorithm::eltwise_tanh, 0.f); break;
    case FusedAct::Relu6: eltwise(dnnl::algorithm::eltwise_clip, 0.f, 6.f); break;  // min(max(x, 0), 6)
  }
}

void append_post_ops(dnnl::primitive_attr& attr, FusedAct act, bool sum) {
  dnnl::post_ops po;
  if (sum) po.append_sum(1.f);
  append_activation(po, act);
  if (po.len() > 0) attr.set_post_ops(po);
}

std::shared_ptr<void> reorder_once(const dnnl::memory::desc& from, const void* data, const dnnl::memory::desc& to) {
  static PackedWeights<std::pair<dnnl::memory::desc, dnnl::memory::desc>> packs;
  return packs.get(data, from.get_size(), {from, to}, to.get_size(), [&](void* buf) {
    dnnl::memory src(from, dnnl_engine(), const_cast<void*>(data)), dst(to, dnnl_engine(), buf);
    dnnl::stream& s = dnnl_stream();
    dnnl::reorder(src, dst).execute(s, src, dst);
    s.wait();
  });
}

namespace {

// One thread's memory objects for one DnnlCall, in the C API's argument form (execute through
// the C++ map overload would copy the map into a fresh vector on every call).
struct Bound {
  std::vector<dnnl::memory> mems;
  std::vector<dnnl_exec_arg_t> exec_args;
  std::weak_ptr<const bool> owner;  // the call's alive_ token: expired once every copy is gone
};

// The running thread's scratchpad for DnnlCalls (one primitive runs at a time per thread).
void* thread_scratchpad(size_t bytes) {
  struct Buf {
    void* p = nullptr;
    size_t n = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf b;
  if (b.n < bytes) {
    std::free(b.p);
    b.n = (bytes + 63) / 64 * 64;
    b.p = std::aligned_alloc(64, b.n);
    if (!b.p) {
      std::fprintf(stderr, "hgraph: out of host memory for a %zu-byte oneDNN scratchpad; aborting\n", bytes);
      std::abort();
    }
  }
  return b.p;
}

struct ThreadBindings {
  std::unordered_map<uint64_t, Bound> map;
  uint64_t last_id = 0;  // one-entry cache in front of the map
  Bound* last = nullptr;
  size_t sweep_at = 64;  // the size at which entries of destroyed calls are dropped
};

}  // namespace

// A failed oneDNN call aborts with a message (one compare when it succeeds).
void dnnl_check(dnnl_status_t status, const char* what) {
  if (status == dnnl_success) return;
  std::fprintf(stderr, "hgraph: oneDNN %s failed with status %d; aborting rather than leave the output unwritten\n",
               what, static_cast<int>(status));
  std::abort();
}

DnnlCall::DnnlCall(dnnl::primitive prim, Args args, bool single_thread)
    : prim_(std::move(prim)), args_(std::move(args)), single_thread_(single_thread) {
  const bool has_pad = std::any_of(args_.begin(), args_.end(), [](const auto& a) { return a.first == DNNL_ARG_SCRATCHPAD; });
  const_dnnl_primitive_desc_t pd = nullptr;
  dnnl_check(dnnl_primitive_get_primitive_desc(prim_.get(), &pd), "get_primitive_desc");
  const dnnl_memory_desc_t* pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (!has_pad && pad) {
    dnnl::memory::desc md(*pad);
    if (md.get_size() > 0) {
      scratchpad_bytes_ = md.get_size();
      args_.emplace_back(DNNL_ARG_SCRATCHPAD, md);
    }
  }
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id++;
}

namespace {
ThreadBindings& thread_bindings() {
  thread_local ThreadBindings tb;
  return tb;
}
}  // namespace

size_t thread_bound_calls() { return thread_bindings().map.size(); }

void DnnlCall::run(const void* const* ptrs) const {
  ThreadBindings& tb = thread_bindings();
  Bound* b = tb.last_id == id_ ? tb.last : nullptr;
  if (!b) {
    // Calls of freed kernels (a model reloaded, say) leave entries behind: drop them whenever
    // the map has doubled since the last sweep, so it stays within twice the live calls.
    if (tb.map.size() >= tb.sweep_at) {
      std::erase_if(tb.map, [](const auto& e) { return e.second.owner.expired(); });
      tb.last_id = 0, tb.last = nullptr;
      tb.sweep_at = std::max<size_t>(64, 2 * tb.map.size());
    }
    auto [it, fresh] = tb.map.try_emplace(id_);
    b = &it->second;
    if (fresh) {
      b->owner = alive_;
      for (const auto& [arg, md] : args_) b->mems.emplace_back(md, dnnl_engine(), nullptr);
      for (size_t i = 0; i < args_.size(); ++i) b->exec_args.push_back({args_[i].first, b->mems[i].get()});
    }
    tb.last_id = id_, tb.last = b;
  }
  const size_t n = b->mems.size() - (scratchpad_bytes_ ? 1 : 0);
  for (size_t i = 0; i < n; ++i)
    dnnl_check(dnnl_memory_set_data_handle_v2(b->mems[i].get(), const_cast<void*>(ptrs[i]), nullptr), "set_data_handle");
  if (scratchpad_bytes_)
    dnnl_check(dnnl_memory_set_data_handle_v2(b->mems[n].get(), thread_scratchpad(scratchpad_bytes_), nullptr),
               "set_data_handle");
  dnnl::stream& s = dnnl_stream();
  const int threads = single_thread_ ? omp_get_max_threads() : 1;
  if (threads > 1) omp_set_num_threads(1);  // this thread's setting only
  const dnnl_status_t status =
      dnnl_primitive_execute(prim_.get(), s.get(), static_cast<int>(b->exec_args.size()), b->exec_args.data());
  if (threads > 1) omp_set_num_threads(threads);
  dnnl_check(status, "primitive_execute");
  dnnl_check(dnnl_stream_wait(s.get()), "stream_wait");
}

}  // namespace hg::kernels
