// Trainer checkpoints: one safetensors file holding the module's state_dict, every optimizer's
// state tensors, and everything else as JSON in the header metadata.
//
//   hg::training::Checkpoint c;
//   c.epoch = 3; c.global_step = 120;
//   c.state_dict = net->state_dict();                 // copied to the host when written
//   c.optimizer_states.push_back(opt->state_dict());
//   hg::training::write_checkpoint("runs/epoch=3-step=120.ckpt", c);   // temp file + rename
//   hg::training::Checkpoint r = hg::training::read_checkpoint("runs/epoch=3-step=120.ckpt");
//
// Layout: tensors "state_dict/<key>" and "optimizer_states/<i>/<name>"; metadata
// "format" = "hgraph-checkpoint", "format_version" = "1", "checkpoint" = a JSON object with
// epoch, global_step, loops, weights_only, state_dict (the keys in order), optimizer_states
// (each optimizer's json and tensor names), lr_schedulers, callbacks (by state_key),
// hyper_parameters, precision, module (on_save_checkpoint's object), rng and hgraph_version.
// read_checkpoint validates all of it; every problem is an hg::FormatError naming the file and
// the key (and the byte offset for a damaged safetensors layout).
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "models/module.h"
#include "training/optimizer.h"

namespace hg::training {

inline constexpr const char* kCheckpointFormatVersion = "1";

struct Checkpoint {
  int64_t epoch = 0;
  int64_t global_step = 0;
  // The fit loop's position: {"next_epoch", "next_batch", "total_batch_idx"} (see trainer.h).
  nlohmann::json loops = nlohmann::json::object();
  bool weights_only = false;  // then no optimizer, scheduler, callback or loop state
  models::StateDict state_dict;
  std::vector<StateBlob> optimizer_states;
  nlohmann::json lr_schedulers = nlohmann::json::array();
  nlohmann::json callbacks = nlohmann::json::object();
  nlohmann::json hyper_parameters = nlohmann::json::object();
  std::string precision = "32-true";
  nlohmann::json module = nlohmann::json::object();  // LightningModule::on_save_checkpoint's
  nlohmann::json rng = nlohmann::json::object();     // {"<device>": {"seed", "offset"}}
  std::string hgraph_version;                        // filled by write_checkpoint
};

// The hgraph version written into checkpoints.
std::string hgraph_version();

std::vector<uint8_t> serialize_checkpoint(const Checkpoint& c);
void write_checkpoint(const std::filesystem::path& file, const Checkpoint& c);  // atomic
Checkpoint parse_checkpoint(std::span<const uint8_t> bytes, const std::string& source);
Checkpoint read_checkpoint(const std::filesystem::path& file);

}  // namespace hg::training
