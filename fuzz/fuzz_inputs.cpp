#include "fuzz/fuzz_inputs.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>

#include "engine/error.h"
#include "fuzz/fuzz_targets.h"
#include "models/onnx_import.h"
#include "models/package.h"
#include "models/safetensors.h"
#include "server/infer_codec.h"

namespace hg::fuzz {

namespace fs = std::filesystem;

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

void round_trip_differs(const std::string& what) { throw std::logic_error("round trip: " + what); }

namespace {

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

// An infer input goes the server's way (decode, bind to a model, answer) and the answer goes
// the client's way back (decode the encoded response).
void decode_infer(std::string_view input) {
  std::optional<size_t> header_length;
  if (input.starts_with(kHeaderLengthMark)) {
    const size_t eol = input.find('\n');
    const std::string_view digits = input.substr(1, eol == std::string_view::npos ? 0 : eol - 1);
    size_t n = 0;
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos)
      return;  // not a header-length line: nothing to run
    for (char c : digits) n = n * 10 + static_cast<size_t>(c - '0');
    header_length = n;
    input.remove_prefix(eol + 1);
  }
  server::InferRequest req = server::decode_infer_request(input, header_length, server::WireLimits{});
  models::PackageSpec spec;
  spec.name = "fuzz";
  if (req.raw) spec.inputs = {{"x", "FP32", {-1, 4}}};
  else spec.inputs = {{"x", "FP32", {-1, 4}}, {"ids", "INT64", {-1}}};
  spec.outputs = {{"y", "FP32", {-1, 4}}, {"n", "INT64", {-1}}};
  const server::ModelInputs in = server::bind_inputs(req, spec, 64);
  std::vector<std::string> outputs = {std::string(static_cast<size_t>(in.batch) * 16, '\0'),
                                      std::string(static_cast<size_t>(in.batch) * 8, '\1')};
  const server::EncodedBody e = server::encode_infer_response(
      server::make_response(req, spec, in, "fuzz", "1", std::move(outputs)));
  server::decode_infer_response(e.body, e.header_length);
}

}  // namespace

Target parse_target(std::string_view name) {
  if (name == "safetensors") return Target::Safetensors;
  if (name == "package") return Target::Package;
  if (name == "onnx") return Target::Onnx;
  if (name == "infer") return Target::Infer;
  if (name == "http") return Target::Http;
  if (name == "generate") return Target::Generate;
  if (name == "config") return Target::Config;
  if (name == "checkpoint") return Target::Checkpoint;
  if (name == "graph_cache") return Target::GraphCache;
  if (name == "data_file") return Target::DataFile;
  std::fprintf(stderr,
               "HG_FUZZ_TARGET must be safetensors, package, onnx, infer, http, generate, config, checkpoint, "
               "graph_cache or data_file (got '%.*s')\n",
               static_cast<int>(name.size()), name.data());
  std::exit(2);
}

void load(Target t, const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    switch (t) {
      case Target::Safetensors: safetensors::parse(std::span<const uint8_t>(data, size), "fuzz-input"); break;
      case Target::Package: load_package(input); break;
      case Target::Onnx: load_onnx(input); break;
      case Target::Infer: decode_infer(input); break;
      case Target::Http: load_http(input); break;
      case Target::Generate: load_generate(input); break;
      case Target::Config: load_config(input); break;
      case Target::Checkpoint: load_checkpoint(input); break;
      case Target::GraphCache: load_graph_cache(input); break;
      case Target::DataFile: load_data_file(input); break;
    }
  } catch (const Error&) {
    // Rejected with a typed error: what bad input must get.
  }
}

}  // namespace hg::fuzz
