// The one way a kernel is prepared for an op, eager (the kernel cache) or in a compiled graph:
// op.prepack when it has one and an input's data is constant, else op.prepare.
//
//   hg::Kernel k = hg::prepare_kernel(op, in_metas, out_meta, attrs);             // any input
//   hg::Kernel p = hg::prepare_kernel(op, in_metas, out_meta, attrs, constants);  // weights fixed
//
// On a CPU whose oneDNN has no BF16 primitives (no AVX-512: oneDNN 2.6 needs avx512_core for
// them), an op whose BF16 kernel cannot be made runs its F32 kernel on F32 copies of its BF16
// inputs (exact: BF16 widens without loss), its output rounded to BF16: what a BF16 primitive
// computes (F32 accumulation), at F32 speed plus the conversions. Elsewhere the error stands.
#pragma once
#include <vector>

#include "engine/op.h"

namespace hg {

Kernel prepare_kernel(const OpSchema& op, const std::vector<TensorMeta>& in, const TensorMeta& out, const Attrs& a,
                      const std::vector<const void*>& constant = {});

}  // namespace hg
