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
// a known fixed-size datatype (BYTES is refused: the batcher splits by byte offsets), shape
// [-1, d1, ...] with -1 only as the batch dimension and every other dim >= 0, names non-empty
// and distinct. Violations throw hg::InvalidArgument naming the model and the tensor.
#pragma once
#include <memory>

#include "models/package.h"
#include "server/served_model.h"

namespace hg::server {

// buckets() is empty: any batch runs as is.
std::shared_ptr<ServedModel> make_identity_model(models::PackageSpec spec);

}  // namespace hg::server
