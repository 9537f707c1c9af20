// libFuzzer target for the files hgraph reads: one binary, the loader picked by HG_FUZZ_TARGET.
//
//   HG_FUZZ_TARGET=safetensors ./hgraph-fuzz -max_total_time=60 corpus/ fuzz/corpus/safetensors
//   HG_FUZZ_TARGET=package     ./hgraph-fuzz ...   # input: model.json [kWeightsMark weights.safetensors]
//   HG_FUZZ_TARGET=onnx        ./hgraph-fuzz ...   # input: an .onnx file
//   HG_FUZZ_TARGET=infer       ./hgraph-fuzz ...   # input: ["#<header length>\n"] infer request body
//
// Every loader must either succeed or throw hg::Error; anything else (another exception, a
// crash, a sanitizer report, a huge allocation) is a finding. scripts/fuzz.sh builds and runs it.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz/fuzz_inputs.h"

namespace {
hg::fuzz::Target g_target;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* t = std::getenv("HG_FUZZ_TARGET");
  g_target = hg::fuzz::parse_target(t ? t : "");  // exits with a message when unknown
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hg::fuzz::load(g_target, data, size);
  return 0;
}
