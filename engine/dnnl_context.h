// Internal: the one oneDNN engine of the process, a stream per thread, and the dtype mapping
// that every oneDNN kernel (matmul, bmm, conv, pooling, norms) shares.
//
//   dnnl::memory m(md, hg::kernels::dnnl_engine(), ptr);
//   prim.execute(hg::kernels::dnnl_stream(), args);
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include "engine/dtype.h"

namespace hg::kernels {

dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();                  // one per thread
dnnl::memory::data_type dnnl_dtype(DType t);  // F32 or BF16 (callers check dtypes in infer)

}  // namespace hg::kernels
