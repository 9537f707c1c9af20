// Internal: the one oneDNN engine of the process, a stream per thread, the dtype mapping
// that every oneDNN kernel (matmul, bmm, conv, pooling, norms, eltwise, softmax) shares, and
// DnnlCall, a prepared primitive whose memory objects are bound once per thread.
//
//   dnnl::memory m(md, hg::kernels::dnnl_engine(), ptr);
//   prim.execute(hg::kernels::dnnl_stream(), args);
//
//   hg::kernels::DnnlCall call(prim, {{DNNL_ARG_SRC, x_md}, {DNNL_ARG_DST, y_md}});
//   const void* ptrs[] = {x, y};
//   call.run(ptrs);                                   // pointers in the order of the arguments
//
//   dnnl::primitive_attr attr;
//   hg::kernels::append_post_ops(attr, hg::FusedAct::Relu, /*sum=*/false);  // then build the primitive
//   std::shared_ptr<void> packed = hg::kernels::reorder_once(plain_md, weights, pd.weights_desc());
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/dtype.h"
#include "engine/post_ops.h"

namespace hg::kernels {

dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();                  // one per thread
dnnl::memory::data_type dnnl_dtype(DType t);  // F32 or BF16 (callers check dtypes in infer)
// oneDNN makes BF16 primitives on this CPU (2.6: AVX-512 core or later); without them BF16 ops
// run through F32 (engine/prepare_kernel.h). Probed once.
bool dnnl_has_bf16();

// Aborts with a message naming `what` unless `status` is dnnl_success: kernels run on replay
// paths that cannot throw, and an output left unwritten must not be served.
void dnnl_check(dnnl_status_t status, const char* what);

// An attribute with scratchpad_mode::user. Every primitive we run is made with it: in library
// mode (Debian's build has DNNL_ENABLE_CONCURRENT_EXEC) a primitive owns one scratchpad, so two
// threads running one prepared kernel at once corrupt each other's results.
dnnl::primitive_attr user_scratchpad();

// Sets attr's post-ops: `sum` (dst += the primitive's result: a residual preloaded into dst),
// then the activation `act` as an eltwise post-op (none for FusedAct::None).
void append_post_ops(dnnl::primitive_attr& attr, FusedAct act, bool sum);
// Appends the activation `act` to `po` as an eltwise post-op (nothing for FusedAct::None).
void append_activation(dnnl::post_ops& po, FusedAct act);

// `data` (laid out as `from`) reordered into a 64-byte aligned buffer laid out as `to`: weights
// pre-packed once into the layout a primitive chose, shared with every kernel that packed the same
// bytes into the same layout (engine/packed_weights.h). Throws dnnl::error.
std::shared_ptr<void> reorder_once(const dnnl::memory::desc& from, const void* data, const dnnl::memory::desc& to);

// A primitive and its arguments. Each thread that runs it creates its memory objects on its
// first call; later calls only swap their data handles and execute, with no allocation. A
// primitive made with user_scratchpad() that needs a scratchpad gets the running thread's own
// (grown on demand), unless `args` already name DNNL_ARG_SCRATCHPAD (then the caller passes it). `single_thread`: run on one OpenMP thread (small problems, where a fork/join
// costs more than it gives). Copyable; copies share the primitive.
// Calls whose memory objects the running thread holds (tests: bounded by about twice the live
// calls, however many were created and destroyed).
size_t thread_bound_calls();

class DnnlCall {
 public:
  using Args = std::vector<std::pair<int, dnnl::memory::desc>>;
  DnnlCall(dnnl::primitive prim, Args args, bool single_thread = false);
  // ptrs[i]: the data of args[i]. Waits for the primitive to finish. Never throws: a failing
  // oneDNN call aborts the process with a message (an unwritten output must not be served).
  void run(const void* const* ptrs) const;

 private:
  dnnl::primitive prim_;
  Args args_;
  size_t scratchpad_bytes_ = 0;  // > 0: the last arg is the thread's scratchpad, not in ptrs
  uint64_t id_;  // unique per constructed call: the key of each thread's memory objects
  std::shared_ptr<const bool> alive_ = std::make_shared<const bool>(true);  // expires with the last copy
  bool single_thread_;
};

}  // namespace hg::kernels
