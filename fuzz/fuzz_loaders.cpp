// libFuzzer target for the files and requests hgraph reads: one binary, the loader picked by HG_FUZZ_TARGET.
//
//   HG_FUZZ_TARGET=safetensors ./hgraph-fuzz -max_total_time=60 corpus/ fuzz/corpus/safetensors
//   HG_FUZZ_TARGET=package     ./hgraph-fuzz ...   # input: model.json [kWeightsMark weights.safetensors]
//   HG_FUZZ_TARGET=onnx        ./hgraph-fuzz ...   # input: an .onnx file
//   HG_FUZZ_TARGET=infer       ./hgraph-fuzz ...   # input: ["#<header length>\n"] infer request body
//   HG_FUZZ_TARGET=http        ./hgraph-fuzz ...   # input: raw bytes a client sends (requests, pipelined)
//   HG_FUZZ_TARGET=generate    ./hgraph-fuzz ...   # input: a generate, completions or chat request body
//   HG_FUZZ_TARGET=config      ./hgraph-fuzz ...   # input: a model's config.json
//   HG_FUZZ_TARGET=checkpoint  ./hgraph-fuzz ...   # input: a trainer checkpoint (.ckpt)
//   HG_FUZZ_TARGET=graph_cache ./hgraph-fuzz ...   # input: a graph-cache entry without its checksum
//
// Every loader must either succeed or throw hg::Error (and give back what it read where the
// format promises a round trip); anything else (another exception, a crash, a sanitizer
// report, a huge allocation) is a finding. scripts/fuzz.sh builds and runs it.
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
