// Internal to the server: padding a request's dynamic dimension up to the model's buckets
// (ModelConfig::padding) and cutting the answer back to the request's length.
//
//   check_padding(*config.padding, spec);                          // at load: names the bad field
//   copt.signatures = padding_signatures(*config.padding, spec);    // the warm-up grid
//   const int64_t length = pad_request(in, spec, *config.padding);  // after bind_inputs
//   strip_outputs(j.outputs, j.output_shapes, spec, *config.padding, length, in.batch);  // the run's answer
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/package.h"
#include "server/infer_codec.h"
#include "server/model_config.h"

namespace hg::server {

// The padded inputs and stripped outputs exist in the model, and their dimensions are dynamic
// (-1 after the batch). Throws hg::InvalidArgument naming the config field.
void check_padding(const Padding& p, const models::PackageSpec& spec);

// The signatures the padding makes (every input's sample shape, one per bucket), to capture at
// warm-up; empty when an input keeps a dynamic dimension that the padding does not fix.
std::vector<std::vector<Shape>> padding_signatures(const Padding& p, const models::PackageSpec& spec);

// Pads the bound inputs in place (in.data, in.shapes) to the smallest bucket that holds the
// request's length, and returns that length. Throws hg::InvalidArgument naming the input and
// dimension when the padded inputs disagree on it or it is above the largest bucket.
int64_t pad_request(ModelInputs& in, const models::PackageSpec& spec, const Padding& p);

// Cuts the stripped outputs' dimension back to `length` (outputs[j]: batch samples of
// output j, shapes[j]: one sample's shape, both updated).
void strip_outputs(std::vector<std::string>& outputs, std::vector<Shape>& shapes, const models::PackageSpec& spec,
                   const Padding& p, int64_t length, int64_t batch);

}  // namespace hg::server
