#include "fuzz/fuzz_inputs.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

#include "engine/error.h"
#include "models/onnx_import.h"
#include "models/package.h"
#include "models/safetensors.h"

namespace hg::fuzz {
namespace {

namespace fs = std::filesystem;

// One scratch directory per process for the package loader, which reads files.
const fs::path& scratch_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("hgraph-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

void write_bytes(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void load_package(std::string_view input) {
  const size_t mark = input.find(kWeightsMark);
  const std::string_view json = input.substr(0, mark);
  const std::string_view weights =
      mark == std::string_view::npos ? std::string_view() : input.substr(mark + kWeightsMark.size());
  write_bytes(scratch_dir() / "model.json", json);
  write_bytes(scratch_dir() / "weights.safetensors", weights);
  models::load_package(scratch_dir());
}

// An ONNX input is the .onnx file itself (external data, if it names any, is looked up
// beside it in the scratch directory and is normally absent: that error path is fuzzed too).
void load_onnx(std::string_view input) {
  write_bytes(scratch_dir() / "model.onnx", input);
  models::import_onnx(scratch_dir() / "model.onnx");
}

}  // namespace

Target parse_target(std::string_view name) {
  if (name == "safetensors") return Target::Safetensors;
  if (name == "package") return Target::Package;
  if (name == "onnx") return Target::Onnx;
  std::fprintf(stderr, "HG_FUZZ_TARGET must be safetensors, package or onnx (got '%.*s')\n",
               static_cast<int>(name.size()), name.data());
  std::exit(2);
}

void load(Target t, const uint8_t* data, size_t size) {
  try {
    switch (t) {
      case Target::Safetensors:
        safetensors::parse(std::span<const uint8_t>(data, size), "fuzz-input");
        break;
      case Target::Package:
        load_package(std::string_view(reinterpret_cast<const char*>(data), size));
        break;
      case Target::Onnx:
        load_onnx(std::string_view(reinterpret_cast<const char*>(data), size));
        break;
    }
  } catch (const Error&) {
    // Rejected with a typed error: what bad input must get.
  }
}

}  // namespace hg::fuzz
