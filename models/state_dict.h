// Moving state dicts in and out of safetensors files (hg::safetensors works on raw bytes).
//
//   auto w = hg::models::tensors_from(hg::safetensors::read("resnet18.safetensors"), "resnet18.safetensors");
//   net->load_state_dict(w);                                        // keys as in PyTorch
//   hg::safetensors::write("out.safetensors", hg::models::to_safetensors(net->state_dict()));
#pragma once
#include <map>
#include <string>

#include "models/module.h"
#include "models/safetensors.h"

namespace hg::models {

// Every entry as a cpu tensor of its dtype. A dtype hgraph has no tensors for (I16, I8) throws
// hg::FormatError naming `source` and the tensor.
std::map<std::string, Tensor> tensors_from(const safetensors::File& f, const std::string& source, Device device = {});
// The tensors in state_dict order with their own dtypes (copied to the host).
safetensors::File to_safetensors(const StateDict& sd);

}  // namespace hg::models
