// Feeds one fuzz input to a loader: shared by the libFuzzer binary (fuzz/fuzz_loaders.cpp)
// and the corpus replay test (tests/fuzz_corpus_test.cpp), so both exercise the same path.
//
//   hg::fuzz::load(hg::fuzz::Target::Safetensors, bytes.data(), bytes.size());  // throws only hg::Error
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hg::fuzz {

enum class Target { Safetensors, Package, Onnx, Infer };

// A package input is model.json, optionally followed by this line and weights.safetensors.
inline constexpr std::string_view kWeightsMark = "\n--hgraph-fuzz-weights--\n";
// An infer input is a KServe v2 infer request body; "#<N>\n" in front sets its
// Inference-Header-Content-Length to N (binary tensor extension; 0 is raw mode).
inline constexpr std::string_view kHeaderLengthMark = "#";

Target parse_target(std::string_view name);  // "safetensors" | "package" | "onnx" | "infer"; exits otherwise
// Runs the loader on the bytes; hg::Error is caught (the expected outcome of bad input),
// everything else propagates.
void load(Target t, const uint8_t* data, size_t size);

}  // namespace hg::fuzz
