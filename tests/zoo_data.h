// The zoo test data (weights, inputs and PyTorch outputs) that scripts/testdata_zoo.py writes
// into HG_TESTDATA_DIR/zoo (the testdata_zoo ctest fixture).
//
//   std::map<std::string, hg::Tensor> t = hg::test::zoo_data("lenet5");   // zoo/lenet5.safetensors
#pragma once
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

#include "models/safetensors.h"
#include "models/state_dict.h"

namespace hg::test {

inline std::map<std::string, Tensor> zoo_data(const std::string& name) {
  const std::string dir = std::string(HG_TESTDATA_DIR) + "/zoo/", path = dir + name + ".safetensors";
  if (!std::filesystem::exists(path))
    throw std::runtime_error(path + " is missing: run /usr/bin/python3 scripts/testdata_zoo.py " + dir +
                             " (ctest runs it as the testdata_zoo fixture)");
  return models::tensors_from(safetensors::read(path), path);
}

}  // namespace hg::test
