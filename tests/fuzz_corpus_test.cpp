// Replays the committed fuzz seed corpora (fuzz/corpus/<target>/) through the loaders, as
// hgraph-fuzz does: every file must load (and round-trip, where the format promises it) or be
// rejected with hg::Error, nothing else.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz/fuzz_inputs.h"

namespace {

namespace fs = std::filesystem;

size_t replay(const char* target_name) {
  const hg::fuzz::Target target = hg::fuzz::parse_target(target_name);
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(HG_SOURCE_DIR) / "fuzz" / "corpus" / target_name)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    EXPECT_NO_THROW(hg::fuzz::load(target, bytes.data(), bytes.size())) << e.path();
    ++n;
  }
  return n;
}

TEST(FuzzCorpus, SafetensorsSeedsLoadOrRaiseHgError) { EXPECT_GE(replay("safetensors"), 10u); }
TEST(FuzzCorpus, PackageSeedsLoadOrRaiseHgError) { EXPECT_GE(replay("package"), 7u); }
TEST(FuzzCorpus, OnnxSeedsLoadOrRaiseHgError) { EXPECT_GE(replay("onnx"), 6u); }
TEST(FuzzCorpus, InferSeedsDecodeOrRaiseHgError) { EXPECT_GE(replay("infer"), 10u); }
TEST(FuzzCorpus, HttpSeedsParseAndRouteOrRaiseHgError) { EXPECT_GE(replay("http"), 15u); }
TEST(FuzzCorpus, GenerateSeedsParseOrRaiseHgError) { EXPECT_GE(replay("generate"), 19u); }
TEST(FuzzCorpus, ConfigSeedsLoadAndRoundTripOrRaiseHgError) { EXPECT_GE(replay("config"), 15u); }
TEST(FuzzCorpus, CheckpointSeedsLoadAndRoundTripOrRaiseHgError) { EXPECT_GE(replay("checkpoint"), 15u); }
TEST(FuzzCorpus, GraphCacheSeedsLoadAndRoundTripOrRaiseHgError) { EXPECT_GE(replay("graph_cache"), 15u); }
TEST(FuzzCorpus, DataFileSeedsLoadOrRaiseHgError) { EXPECT_GE(replay("data_file"), 10u); }

}  // namespace
