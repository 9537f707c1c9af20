// Internal to the model repository (server/model_repository.h): building one served version of
// a model folder, on a load thread, and its READY log line.
//
//   std::shared_ptr<ModelVersion> v = build_model_version(opt, budget, "bert", 1, dir / "1", config, log);
//   log(ready_line(*v, dir / "1"));
//
// build_model_version loads the package or ONNX file (or calls opt.factory, or makes an identity
// model), checks the tensors config.json declares, calibrates INT8, captures every batch bucket
// within what the version's lease of `memory` has left, checks a reduced precision, starts a text
// generator for a GPT and the version's batcher. What the version allocates is charged to its
// lease (ModelVersion::memory) before it is allocated; throws naming what failed.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "server/memory_budget.h"
#include "server/model_config.h"
#include "server/model_repository.h"

namespace hg::server {

std::shared_ptr<ModelVersion> build_model_version(const RepositoryOptions& opt, MemoryBudget& memory, const std::string& name,
                                                  int64_t version, const std::filesystem::path& dir, const ModelConfig& config,
                                                  const std::function<void(const std::string&)>& log);

// "model 'm' version 1 (DIR) READY in 39.0 ms: 6 buckets captured (...), 1 instance(s), ..."
std::string ready_line(const ModelVersion& v, const std::filesystem::path& dir);

}  // namespace hg::server
