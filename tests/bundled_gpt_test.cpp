// The bundled text generation model, models/repository/fortunes_gpt (made by
// scripts/train_fortunes_gpt.sh): a GPT hgraph-train trained on the fortunes corpus, that predicts
// English text written for this test (not from its corpus) far better than chance, greedily
// continues a prompt with printable words, and that the server serves for generation.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "models/gpt.h"
#include "models/package.h"
#include "models/tokenizer.h"

namespace hg {
namespace {

const std::filesystem::path kDir = std::filesystem::path(HG_SOURCE_DIR) / "models/repository/fortunes_gpt";

// Mean cross-entropy (nats per byte) of each next byte of `text` under the model.
double next_byte_loss(models::GPT& gpt, const std::string& text) {
  const std::vector<int64_t> ids = models::encode_bytes(text);
  const auto n = static_cast<int64_t>(ids.size());
  const std::vector<float> logits = gpt.forward(Tensor::from_indices(ids, {1, n}, gpt.device())).to_vector();
  double total = 0;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const float* row = logits.data() + i * 256;
    double top = row[0], sum = 0;
    for (int v = 1; v < 256; ++v) top = std::max<double>(top, row[v]);
    for (int v = 0; v < 256; ++v) sum += std::exp(row[v] - top);
    total += top + std::log(sum) - row[ids[static_cast<size_t>(i + 1)]];
  }
  return total / static_cast<double>(n - 1);
}

TEST(BundledGpt, IsTrainedPredictsEnglishAndContinuesWithWords) {
  std::unique_ptr<models::Module> module;
  const models::ModelPackage p = models::load_package(kDir / "1", &module, Device::hpu(0));
  EXPECT_EQ(p.spec.metadata.value("trained_by", ""), "hgraph-train");
  EXPECT_GE(p.spec.metadata.value("global_step", 0), 3000);
  auto* gpt = dynamic_cast<models::GPT*>(module.get());
  ASSERT_NE(gpt, nullptr) << "the bundled fortunes_gpt is not the GPT zoo model";
  EXPECT_EQ(gpt->config().max_len, 128);
  gpt->to(Device::hpu(0));
  gpt->eval();
  NoGradGuard no_grad;
  const std::string text =
      "When the weather turns cold, the people of the town light their fires early and tell the "
      "old stories again, all winter.";  // 119 bytes: within the model's context of 128
  const double loss = next_byte_loss(*gpt, text);
  ASSERT_TRUE(std::isfinite(loss));
  RecordProperty("loss_nats_per_byte", std::to_string(loss));
  // Chance is ln 256 = 5.55 nats; a model stuck on letter frequencies (the "the the the" stage of
  // training) scores about 2.6.
  EXPECT_LT(loss, 2.2) << "nats per byte";
  const std::vector<int64_t> out = gpt->generate_ids(models::encode_bytes("The man said "), 60);
  std::string s;
  for (int64_t b : out) s += static_cast<char>(b);
  for (char c : s)
    EXPECT_TRUE(std::isprint(static_cast<unsigned char>(c)) || c == '\n' || c == '\t') << "byte " << int(c) << " in: " << s;
  std::set<std::string> words;
  std::istringstream in(s.substr(13));  // after the prompt
  for (std::string w; in >> w;) words.insert(w);
  EXPECT_GE(words.size(), 5u) << "different words, not one repeated (\"the the the\") or a run of letters: " << s;
  // Served for generation: config.json sets the generation settings.
  std::ifstream config(kDir / "config.json");
  ASSERT_TRUE(config) << (kDir / "config.json");
  const nlohmann::json c = nlohmann::json::parse(config);
  EXPECT_TRUE(c.contains("generation")) << c.dump();
}

}  // namespace
}  // namespace hg
