// Shared pieces of hg_train_bench (bench/train_bench.cpp: prepare, the raw loops, DDP, digits;
// bench/train_bench_trainer.cpp: the same through the Trainer).
//
//   auto o = train_bench::options(argc, argv, 3);                     // --name value pairs
//   auto net = train_bench::load_model("mlp", train_bench::model_dir(root, "mlp", 32));   // on hpu:0
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "models/module.h"

namespace train_bench {

namespace fs = std::filesystem;
using Options = std::map<std::string, std::string>;

inline const hg::Device kHpu = hg::Device::hpu(0);
inline constexpr int64_t kBertSeq = 128;   // the encoder's token ids per sample
inline constexpr double kMomentum = 0.9;   // SGD momentum of every run

Options options(int argc, char** argv, int first);  // hg::InvalidArgument on a bad option
std::string opt(const Options& o, const std::string& k, const std::string& dflt);
int env_threads();      // OMP_NUM_THREADS (0 when unset)
double cpu_seconds();   // this process's user + system time
double unix_seconds();  // wall clock, for lining up processes
double learning_rate(const std::string& model);
// DIR/digits or DIR/MODEL_bBATCH.
fs::path model_dir(const fs::path& root, const std::string& model, int64_t batch);
// The zoo model with dir/init.safetensors loaded, on hpu:0, in training mode.
std::unique_ptr<hg::models::Module> load_model(const std::string& model, const fs::path& dir);

// The digits: U8 images [N, 64] scaled to [0, 1], labels [N].
struct Digits {
  std::vector<float> x;
  std::vector<int64_t> y;
};
Digits load_digits();

// bench/train_bench_trainer.cpp
int trainer_run(const fs::path& root, const Options& o);
int trainer_digits(const fs::path& root, const fs::path& out_dir, const Options& o);
int loader_run(const Options& o);

}  // namespace train_bench
