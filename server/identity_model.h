// The identity backend: output i is a copy of input i (same datatype and shape). No weights,
// no graph; it measures the server's own overhead and carries every fixed-size datatype
// through the batcher. The repository loads it for config platform "identity".
//
//   models::PackageSpec spec;
//   spec.name = "identity";
//   spec.inputs = {{"INPUT0", "INT32", {-1, 16}}};
//   spec.outputs = {{"OUTPUT0", "INT32", {-1, 16}}};
//   std::shared_ptr<ServedModel> m = hg::server::make_identity_model(spec);
//   m->run({in}, 4, {out});   // copies 4 * 16 int32 values from in to out
//
// The spec must pair inputs and outputs one to one: equal counts, the same datatype and shape,
// a known fixed-size datatype (BYTES is refused: the batcher splits by byte offsets), names
// non-empty and distinct. Shapes are [-1, d1, ...] (-1: the batch dimension) for every tensor,
// or for none (max_batch_size 0: one sample per run is the whole shape); every other dim is
// >= 0. Violations throw hg::InvalidArgument naming the model and the tensor.
#pragma once
#include <memory>

#include "models/package.h"
#include "server/served_model.h"

namespace hg::server {

// buckets() is empty: any batch runs as is.
std::shared_ptr<ServedModel> make_identity_model(models::PackageSpec spec);

}  // namespace hg::server
