// Feeds one fuzz input to a loader: shared by the libFuzzer binary (fuzz/fuzz_loaders.cpp)
// and the corpus replay test (tests/fuzz_corpus_test.cpp), so both exercise the same path.
//
//   hg::fuzz::load(hg::fuzz::Target::Safetensors, bytes.data(), bytes.size());  // throws only hg::Error
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hg::fuzz {

enum class Target { Safetensors, Package, Onnx, Infer, Http, Generate, Config, Checkpoint, GraphCache, DataFile };

// A package input is model.json, optionally followed by this line and weights.safetensors.
inline constexpr std::string_view kWeightsMark = "\n--hgraph-fuzz-weights--\n";
// An infer input is a KServe v2 infer request body; "#<N>\n" in front sets its
// Inference-Header-Content-Length to N (binary tensor extension; 0 is raw mode).
inline constexpr std::string_view kHeaderLengthMark = "#";
// A graph_cache input is a disk graph-cache entry without its trailing checksum (the target
// appends the right one, so that mutations reach the header and graph checks), written with
// this engine version, CPU ISA and key.
inline constexpr std::string_view kCacheEngine = "fuzz-engine", kCacheIsa = "fuzz-isa", kCacheKey = "fuzz-key";

// A data_file input is a format line (".idx", ".csv", ".npy", ".npz" or ".txt") and the file's bytes.
//
// "safetensors" | "package" | "onnx" | "infer" | "http" | "generate" | "config" | "checkpoint" |
// "graph_cache" | "data_file"; exits with a message otherwise.
Target parse_target(std::string_view name);
// Runs the loader on the bytes; hg::Error is caught (the expected outcome of bad input),
// everything else propagates. Where a format promises a round trip (config, checkpoint,
// graph_cache), an accepted input is written back and read again, and a difference is thrown
// as std::logic_error.
void load(Target t, const uint8_t* data, size_t size);

}  // namespace hg::fuzz
