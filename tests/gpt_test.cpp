// GPT decoder (models/gpt.h): logits vs PyTorch (scripts/torch_gpt.py, data from
// scripts/testdata_gpt.py), KV-cache decoding vs full recomputation, generation, the byte
// tokenizer (vs Python's UTF-8 replacement) and sampling; on cpu and hpu (eager).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "golden.h"
#include "models/gpt.h"
#include "models/gpt_paged.h"
#include "models/kv_blocks.h"
#include "models/package.h"
#include "models/predictor.h"
#include "models/state_dict.h"
#include "models/zoo.h"
#include "tests/resident.h"

using namespace hg;
using namespace hg::models;
using ::testing::HasSubstr;

namespace {

std::filesystem::path data_dir() { return std::filesystem::path(HG_TESTDATA_DIR) / "gpt"; }

void require(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path))
    throw std::runtime_error(path.string() + " is missing: run /usr/bin/python3 scripts/testdata_gpt.py " +
                             data_dir().string() + " (ctest runs it as a fixture)");
}

std::map<std::string, Tensor> read_data(const std::string& name) {
  require(data_dir() / name);
  return tensors_from(safetensors::read(data_dir() / name), name);
}

nlohmann::json read_json(const std::string& name) {
  require(data_dir() / name);
  return nlohmann::json::parse(std::ifstream(data_dir() / name));
}

Tensor io(const std::string& name) { return read_data("io.safetensors").at(name); }

// The PyTorch model's weights, on `d`.
std::unique_ptr<GPT> torch_gpt(Device d) {
  auto gpt = std::make_unique<GPT>();
  gpt->load_state_dict(read_data("weights.safetensors"));
  gpt->to(d);
  gpt->eval();
  return gpt;
}

std::vector<float> row(const std::vector<float>& v, size_t index, size_t width) {
  return {v.begin() + static_cast<std::ptrdiff_t>(index * width), v.begin() + static_cast<std::ptrdiff_t>((index + 1) * width)};
}

template <class F>
void expect_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no hg::Error, expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

class GPTTest : public ::testing::TestWithParam<test::Mode> {
 protected:
  Device dev() const { return test::device_of(GetParam()); }
  test::ModeGuard mode_{GetParam()};
};

TEST(GPT, StateDictKeysAreTorchs) {
  const auto weights = read_data("weights.safetensors");
  const auto want = read_json("keys.json").get<std::vector<std::string>>();
  GPT gpt;
  std::vector<std::string> got;
  for (auto& [name, t] : gpt.state_dict()) {
    got.push_back(name);
    EXPECT_EQ(t.shape(), weights.count(name) ? weights.at(name).shape() : Shape{}) << name;
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(got[2], "blocks.0.ln1.weight");
}

TEST_P(GPTTest, LogitsMatchPyTorch) {
  auto gpt = torch_gpt(dev());
  const Tensor ids = io("ids"), want = io("logits");
  NoGradGuard g;
  const Tensor got = gpt->forward(ids.to(dev()));
  EXPECT_EQ(got.shape(), (Shape{2, 24, 256}));
  test::expect_close(got.to_vector(), want.to_vector(), 1e-4, "gpt logits", 1e-5);
}

// Prefill 5 tokens, then decode the rest of the two sequences token by token (across the
// attention buckets 16 and 32): every step's logits equal the full forward's at that position.
TEST_P(GPTTest, DecodeWithCacheEqualsFullRecomputation) {
  auto gpt = torch_gpt(dev());
  const Tensor ids = Tensor::from_indices([] {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < 2 * 40; ++i) v.push_back((i * 37 + 11) % 256);
    return v;
  }(), {2, 40});
  NoGradGuard g;
  const std::vector<float> full = gpt->forward(ids.to(dev())).to_vector();  // [2, 40, 256]
  auto expect_step = [&](const Tensor& logits, int64_t pos) {
    ASSERT_EQ(logits.shape(), (Shape{2, 256}));
    const auto got = logits.to_vector();
    for (size_t n = 0; n < 2; ++n)
      test::expect_close(row(got, n, 256), row(full, n * 40 + static_cast<size_t>(pos), 256), 1e-4,
                         "sequence " + std::to_string(n) + " position " + std::to_string(pos), 1e-5);
  };
  KVCache cache = gpt->new_cache(2);
  expect_step(gpt->prefill(ops::slice(ids, 1, 0, 5).to(dev()), cache), 4);
  EXPECT_EQ(cache.length, 5);
  for (int64_t t = 5; t < 40; ++t) {
    expect_step(gpt->decode_step(ops::slice(ids, 1, t, t + 1), cache), t);
    EXPECT_EQ(cache.length, t + 1);
  }
}

TEST_P(GPTTest, GreedyGenerationMatchesPyTorch) {
  auto gpt = torch_gpt(dev());
  const std::vector<int64_t> prompt = io("prompt").to_indices(), greedy = io("greedy").to_indices();
  const std::vector<int64_t> want(greedy.begin() + static_cast<std::ptrdiff_t>(prompt.size()), greedy.end());
  EXPECT_EQ(gpt->generate_ids(prompt, static_cast<int64_t>(want.size())), want);
  // Full recomputation (argmax of forward's last position) gives the same tokens.
  std::vector<int64_t> ids = prompt;
  {
    NoGradGuard g;
    while (ids.size() < greedy.size()) {
      const Tensor l = gpt->forward(Tensor::from_indices(ids, {1, static_cast<int64_t>(ids.size())}, dev()));
      ids.push_back(argmax_token(row(l.to_vector(), ids.size() - 1, 256)));
    }
  }
  EXPECT_EQ(ids, greedy);
  // The text interface gives the same bytes.
  const Utf8Text text = gpt->generate(decode_bytes(prompt), static_cast<int64_t>(want.size()));
  EXPECT_EQ(text.text, decode_utf8(decode_bytes(want)).text);
}

TEST_P(GPTTest, SamplingIsReproducibleAndTopK1IsGreedy) {
  auto gpt = torch_gpt(dev());
  SamplingOptions o{.greedy = false, .temperature = 1.0, .top_k = 0, .top_p = 0.95, .seed = 7};
  const Utf8Text a = gpt->generate("Hello", 24, o), b = gpt->generate("Hello", 24, o);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.invalid_offsets, b.invalid_offsets);
  int differ = 0;
  for (uint64_t s = 8; s < 12; ++s) {
    o.seed = s;
    differ += gpt->generate("Hello", 24, o).text != a.text;
  }
  EXPECT_GE(differ, 3) << "sampling with other seeds almost always gives other text (random weights)";
  const auto greedy = gpt->generate_ids(encode_bytes("Hello"), 24);
  for (uint64_t s = 0; s < 3; ++s)
    EXPECT_EQ(gpt->generate_ids(encode_bytes("Hello"), 24, {.greedy = false, .temperature = 0.7, .top_k = 1, .seed = s}),
              greedy);
}

// A pool takes memory as its blocks are written, not when it is made: 512 MiB of pool costs far
// less resident memory until used, and a block never written reads as zeros.
TEST(GPT, AKvPoolIsNotFilledWhenMade) {
  const size_t before = hg::test::resident_bytes();
  // 2 (keys, values) x 4 layers x 4096 blocks x 16 positions x 8 heads x 64 x 4 bytes = 512 MiB.
  KVBlockPool pool({.layers = 4, .heads = 8, .head_dim = 64, .block_size = 16, .blocks = 4096});
  const size_t after = hg::test::resident_bytes();
  EXPECT_LT(after - std::min(after, before), size_t{64} << 20) << "the pool was filled when made";
  const float* k = static_cast<const float*>(pool.keys(3));
  EXPECT_EQ(k[123456], 0.0f);
}

// Decoding through HPU graphs (one per attention bucket, captured on first use) gives the
// eager model's logits at every position, and the same generated tokens.
// A capture that fails (here: no memory for the graph's outputs and arena) leaves no half-built
// bucket and no open capture: the next step captures afresh and decodes correctly.
TEST(GPT, PagedDecoderRecoversFromAFailedCapture) {
  const Device d = Device::hpu(0);
  GPT gpt({.d_model = 16, .nhead = 2, .layers = 1, .ff = 32, .max_len = 32});
  gpt.to(d);
  gpt.eval();
  KVBlockPool pool(gpt.kv_options(8, 8));
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(1, a));
  ASSERT_TRUE(pool.allocate(1, b));
  PagedDecoder ref(gpt, pool), dec(gpt, pool);
  ref.step({{.tokens = {72, 105}, .blocks = &a}});
  const std::vector<float> want = ref.step({{.tokens = {33}, .start = 2, .blocks = &a}});
  dec.step({{.tokens = {72, 105}, .blocks = &b}});
  {
    synchronize(d);
    const MemoryStats s = memory_stats(d);
    // 64 bytes left: the new bucket's logits (1 KiB) and arena cannot be allocated
    const Tensor hog = Tensor::empty({(s.limit - s.in_use - 64) / 4}, DType::F32, d);
    EXPECT_THROW(dec.step({{.tokens = {33}, .start = 2, .blocks = &b}}), OutOfMemoryError);
  }
  EXPECT_EQ(dec.captured_graphs(), 1u);  // the prefill's only
  test::expect_close(dec.step({{.tokens = {33}, .start = 2, .blocks = &b}}), want, 1e-6, "step after a failed capture", 1e-6);
  EXPECT_EQ(dec.captured_graphs(), 2u);
}

// Paged KV cache (models/kv_blocks.h) and batched steps (models/gpt_paged.h): three sequences
// of different lengths prefilled in one step, then decoded together, each step's logits equal to
// the full recomputation's at that position; blocks handed out interleaved so that no sequence's
// blocks are contiguous.
TEST(GPT, PagedStepsEqualFullRecomputation) {
  const Device d = Device::hpu(0);
  auto gpt = torch_gpt(d);
  NoGradGuard g;
  constexpr int64_t kLen = 40;
  std::vector<std::vector<int64_t>> seqs(3);
  for (size_t n = 0; n < 3; ++n)
    for (int64_t i = 0; i < kLen; ++i) seqs[n].push_back((i * 53 + 7 + static_cast<int64_t>(n) * 31) % 256);
  std::vector<float> full;  // [3, kLen, 256]
  for (const auto& q : seqs) {
    const auto f = gpt->forward(Tensor::from_indices(q, {1, kLen}, d)).to_vector();
    full.insert(full.end(), f.begin(), f.end());
  }
  // Blocks of 4 positions take the attention's plain loops, blocks of 16 its vector path.
  for (const int64_t block : {4, 16}) {
    SCOPED_TRACE("block_size " + std::to_string(block));
    KVBlockPool pool(gpt->kv_options(block, /*blocks=*/40));
    PagedDecoder dec(*gpt, pool, {.batch_buckets = {1, 2, 4}, .max_step_tokens = 64});
    std::vector<std::vector<int32_t>> tables(3);
    for (int64_t b = 0; b < pool.blocks_for(kLen); ++b)
      for (auto& t : tables) ASSERT_TRUE(pool.allocate(1, t));
    EXPECT_EQ(pool.free_blocks(), 40 - 3 * pool.blocks_for(kLen));
    const std::vector<int64_t> prompt = {5, 11, 1};
    std::vector<PagedRow> rows;
    for (size_t n = 0; n < 3; ++n)
      rows.push_back({.tokens = {seqs[n].begin(), seqs[n].begin() + prompt[n]}, .start = 0, .blocks = &tables[n]});
    // Row i of `got` is sequence seq[i] (default: i) at position at[i].
    auto expect_rows = [&](const std::vector<float>& got, const std::vector<int64_t>& at, const std::string& what,
                           std::vector<size_t> seq = {0, 1, 2}) {
      ASSERT_EQ(got.size(), at.size() * 256);
      for (size_t i = 0; i < at.size(); ++i)
        test::expect_close(row(got, i, 256), row(full, seq[i] * kLen + static_cast<size_t>(at[i]), 256), 1e-4,
                           what + ", sequence " + std::to_string(seq[i]) + " position " + std::to_string(at[i]), 1e-5);
    };
    expect_rows(dec.step(rows), {4, 10, 0}, "prefill");
    // Sequence 2 catches up with a 6-token chunk while the others decode one token: one flat step.
    rows = {{.tokens = {seqs[0][5]}, .start = 5, .blocks = &tables[0]},
            {.tokens = {seqs[1][11]}, .start = 11, .blocks = &tables[1]},
            {.tokens = {seqs[2].begin() + 1, seqs[2].begin() + 7}, .start = 1, .blocks = &tables[2]}};
    expect_rows(dec.step(rows), {5, 11, 6}, "mixed step");
    std::vector<int64_t> len = {6, 12, 7};
    for (int step = 0; step < 20; ++step) {
      rows.clear();
      for (size_t n = 0; n < 3; ++n) rows.push_back({.tokens = {seqs[n][static_cast<size_t>(len[n])]}, .start = len[n], .blocks = &tables[n]});
      expect_rows(dec.step(rows), len, "decode step " + std::to_string(step));
      for (auto& l : len) ++l;
    }
    // A batch of 1 (a sequence alone) reads the same pool.
    expect_rows(dec.step({{.tokens = {seqs[1][static_cast<size_t>(len[1])]}, .start = len[1], .blocks = &tables[1]}}),
                {len[1]}, "alone", {1});
    // (tokens, sequences): the prefill (32, 4), the mixed step (8, 4), decode steps (4, 4), alone (1, 1)
    EXPECT_EQ(dec.captured_graphs(), 4u);
    for (auto& t : tables) pool.release(t);
    EXPECT_EQ(pool.free_blocks(), 40);
  }
}

// Every path of the paged attention equals the full forward: head sizes with registers for the
// values (16) and without (8, 40), blocks whose keys are scored 16 positions per vector (16, 32)
// and others (4, 24), keys and values stored as F32 (to 1e-4) and as BF16 (8 significant bits:
// to 3e-2); a prompt prefilled in two chunks, then three decoded tokens.
TEST(GPT, PagedAttentionAnyHeadAndBlockSize) {
  const Device d = Device::hpu(0);
  NoGradGuard g;
  constexpr int64_t kLen = 41;
  std::vector<int64_t> seq;
  for (int64_t i = 0; i < kLen; ++i) seq.push_back((i * 37 + 3) % 256);
  for (const auto& [model, heads] : {std::pair<int64_t, int64_t>{16, 2}, {32, 2}, {80, 2}}) {
    GPT gpt({.d_model = model, .nhead = heads, .layers = 2, .ff = 32, .max_len = 64}, /*seed=*/7);
    gpt.to(d);
    gpt.eval();
    const std::vector<float> full = gpt.forward(Tensor::from_indices(seq, {1, kLen}, d)).to_vector();
    for (const auto& [dtype, tol] : {std::pair{DType::F32, 1e-4}, {DType::BF16, 3e-2}})
    for (const int64_t block : {4, 16, 24, 32}) {
      SCOPED_TRACE("head_dim " + std::to_string(model / heads) + ", block_size " + std::to_string(block) + ", " +
                   dtype_name(dtype));
      KVBlockPool pool(gpt.kv_options(block, (kLen + block - 1) / block, dtype));
      EXPECT_EQ(pool.bytes(), static_cast<size_t>(2 * 2 * pool.slots() * model) * dtype_size(dtype)) << "2 layers";
      PagedDecoder dec(gpt, pool, {.batch_buckets = {1}, .max_step_tokens = 32});
      std::vector<int32_t> table;
      ASSERT_TRUE(pool.allocate(pool.blocks_for(kLen), table));
      std::reverse(table.begin(), table.end());  // blocks out of order
      auto expect_at = [&](const std::vector<float>& got, int64_t at) {
        test::expect_close(got, row(full, static_cast<size_t>(at), 256), tol, "position " + std::to_string(at), tol / 10);
      };
      expect_at(dec.step({{.tokens = {seq.begin(), seq.begin() + 30}, .start = 0, .blocks = &table}}), 29);
      expect_at(dec.step({{.tokens = {seq.begin() + 30, seq.begin() + 38}, .start = 30, .blocks = &table}}), 37);
      for (int64_t at = 38; at < kLen; ++at)
        expect_at(dec.step({{.tokens = {seq[static_cast<size_t>(at)]}, .start = at, .blocks = &table}}), at);
    }
  }
}

// A memory budget leaves out the token buckets past it (and the sequence buckets past the largest
// token bucket left); a budget too small for the 1-token graph is an error naming it.
TEST(GPT, PagedWarmupWithinAMemoryBudget) {
  auto gpt = std::make_unique<GPT>(GPTConfig{.d_model = 32, .nhead = 2, .layers = 1, .ff = 64, .max_len = 64});
  gpt->to(Device::hpu(0));
  gpt->eval();
  KVBlockPool pool(gpt->kv_options(8, 16));
  // The second decoder's graphs cost what the budgeted one's will: both share the first one's
  // packed weights (engine/packed_weights.h).
  PagedDecoder first(*gpt, pool, {.batch_buckets = {1, 2, 4}}), full(*gpt, pool, {.batch_buckets = {1, 2, 4}});
  first.warmup();
  full.warmup();
  size_t up_to_2 = 0;  // the graphs of 1 and 2 tokens: (1, 1), (2, 1), (2, 2)
  for (const StepGraphInfo& g : full.grid()) {
    EXPECT_GT(g.arena_bytes, 0u);
    if (g.tokens <= 2) up_to_2 += g.arena_bytes + g.constant_bytes;
  }
  PagedDecoder dec(*gpt, pool, {.batch_buckets = {1, 2, 4}, .memory_budget = up_to_2});
  EXPECT_EQ(dec.warmup(), 3u);
  EXPECT_LE(dec.graph_bytes(), up_to_2);
  EXPECT_EQ(dec.max_step_tokens(), 2);
  EXPECT_EQ(dec.max_batch(), 2u) << "a step holds at least one token per sequence";
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.allocate(1, a));
  EXPECT_EQ(dec.step({{.tokens = {5, 6}, .start = 0, .blocks = &a}}).size(), 256u);
  expect_error([&] { dec.step({{.tokens = {1, 2, 3}, .blocks = &a}}); }, "is past the buckets (2 rows, 2 tokens)");
  PagedDecoder tiny(*gpt, pool, {.batch_buckets = {1}, .memory_budget = 16});
  expect_error([&] { tiny.warmup(); }, "a memory budget of 16 bytes holds no step graph (steps of 1 token take ");
  EXPECT_EQ(tiny.captured_graphs(), 0u);
  pool.release(a);
}

TEST(GPT, PagedWarmupCapturesTheGridAndStepsOnlyReplay) {
  auto gpt = std::make_unique<GPT>(GPTConfig{.d_model = 32, .nhead = 2, .layers = 1, .ff = 64, .max_len = 64});
  gpt->to(Device::hpu(0));
  gpt->eval();
  KVBlockPool pool(gpt->kv_options(8, 16));
  PagedDecoder dec(*gpt, pool, {.batch_buckets = {1, 2}});
  EXPECT_EQ(dec.warmup(), 1u + 2u * 6u);  // tokens 1 (1 sequence), 2, 4, ..., 64 (1 or 2 sequences)
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(pool.blocks_for(50), a));
  ASSERT_TRUE(pool.allocate(pool.blocks_for(50), b));
  EXPECT_FALSE(pool.allocate(pool.blocks_for(50), b)) << "16 blocks of 8: two sequences of 50 leave 2";
  EXPECT_EQ(b.size(), 7u) << "a failed allocation leaves the table alone";
  std::vector<int64_t> prompt(40, 65);
  dec.step({{.tokens = prompt, .start = 0, .blocks = &a}, {.tokens = {66, 67}, .start = 0, .blocks = &b}});
  dec.step({{.tokens = {68}, .start = 40, .blocks = &a}});
  EXPECT_EQ(dec.warmup(), 0u);
  EXPECT_EQ(dec.captured_graphs(), 13u);
  EXPECT_GT(dec.graph_bytes(), 0u);
  // Host-side checks name the row and what is wrong; nothing runs.
  expect_error([&] { dec.step({{.tokens = {1}, .start = 60, .blocks = &a}}); }, "row 0: its block table has 7 blocks, positions up to 61 need 8");
  expect_error([&] { dec.step({{.tokens = {1}, .start = 64, .blocks = &a}}); }, "row 0: 1 tokens at position 64 go past max_len 64");
  std::vector<int32_t> bad = {0, 99};
  expect_error([&] { dec.step({{.tokens = {1}, .start = 9, .blocks = &bad}}); }, "block table entry 1 (99) is outside the pool's 16 blocks");
  expect_error([&] { dec.step({{.tokens = {300}, .start = 0, .blocks = &a}}); }, "token 300 at 0 is outside the vocabulary");
  expect_error([&] { dec.step({{.tokens = {1}, .blocks = &a}, {.tokens = {1}, .blocks = &a}, {.tokens = {1}, .blocks = &a}}); },
               "a step of 3 rows and 3 tokens is past the buckets (2 rows, 64 tokens)");
  expect_error([&] { dec.step({{.tokens = std::vector<int64_t>(65, 1), .blocks = &a}}); }, "past the buckets");
  expect_error([&] { dec.step({{.tokens = {}, .blocks = &a}}); }, "row 0: no tokens");
  expect_error([&] { dec.step({{.tokens = {1}}}); }, "row 0: no block table");
  KVBlockPool other({.layers = 2, .heads = 2, .head_dim = 16, .block_size = 8, .blocks = 4});
  expect_error([&] { PagedDecoder(*gpt, other); }, "the KV block pool holds 2 layers of 2 heads x 16, the model has 1 of 2 x 16");
  expect_error([&] { PagedDecoder(*gpt, pool, {.batch_buckets = {2, 1}}); }, "batch_buckets must be increasing");
  expect_error([&] { KVBlockPool({.layers = 1, .heads = 1, .head_dim = 1, .block_size = 0, .blocks = 1}); },
               "block_size must be in [1, 2^31], got 0");
  pool.release(a);
  pool.release(b);
}

TEST(GPT, ZooBuilderChecksThePackageSpec) {
  PackageSpec s;
  s.graph = GPT({.d_model = 32, .max_len = 64}).spec();
  s.inputs = {{"ids", "INT64", {-1, 16}}};
  s.outputs = {{"logits", "FP32", {-1, 16, 256}}};
  auto gpt = zoo::build_gpt(s, "model.json");
  EXPECT_EQ(gpt->config().to_json(), (GPTConfig{.d_model = 32, .max_len = 64}).to_json());
  auto expect_bad = [&](PackageSpec bad, const std::string& needle) {
    expect_error([&] { zoo::build_gpt(bad, "model.json"); }, needle);
  };
  auto b = s;
  b.graph["config"]["nhead"] = 5;
  expect_bad(b, "model.json: field 'graph.config' is invalid: gpt config: d_model 32 is not divisible by nhead 5");
  b = s;
  b.inputs[0].shape = {-1, 65};
  expect_bad(b, "field 'inputs[0].shape' is [-1, 65], gpt takes token ids [-1, S] with 1 <= S <= max_len (64)");
  b = s;
  b.inputs[0].datatype = "FP32";
  expect_bad(b, "field 'inputs[0].datatype' is FP32");
  b = s;
  b.outputs[0].shape = {-1, 256};
  expect_bad(b, "field 'outputs[0].shape' is [-1, 256], gpt produces logits [-1, 16, 256]");
}

// model.json {"type": "zoo", "model": "gpt"} + weights.safetensors give back the same model.
TEST(GPT, PackageRoundTrip) {
  const auto dir = std::filesystem::temp_directory_path() / ("hgraph_test_gpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  PackageSpec s;
  s.name = "gpt";
  s.inputs = {{"ids", "INT64", {-1, 24}}};
  s.outputs = {{"logits", "FP32", {-1, 24, 256}}};
  save_package(dir, *torch_gpt(Device::cpu()), s);
  const ModelPackage p = load_package(dir);
  EXPECT_EQ(p.spec.graph["model"], "gpt");
  auto net = build_module(p);
  NoGradGuard g;
  test::expect_close(net->forward_all({io("ids")})[0].to_vector(), io("logits").to_vector(), 1e-4, "packaged gpt", 1e-5);
  // Served: the Predictor replays its batch-2 HPU graph.
  auto pred = Predictor::load(dir, {.device = Device::hpu(0), .batch_buckets = {1, 2}});
  const std::vector<int64_t> ids = io("ids").to_indices();
  std::vector<float> logits(static_cast<size_t>(pred->output_size(0)) * 2);
  pred->run({ids.data()}, 2, {logits.data()});
  test::expect_close(logits, io("logits").to_vector(), 1e-4, "served gpt", 1e-5);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Devices, GPTTest, ::testing::Values(test::Mode::Cpu, test::Mode::HpuEager, test::Mode::HpuLazy),
                         [](const auto& info) {
                           return info.param == test::Mode::Cpu ? "Cpu" : info.param == test::Mode::HpuEager ? "HpuEager" : "HpuLazy";
                         });

TEST(GPT, BadInputRaisesErrors) {
  GPT gpt({.d_model = 16, .nhead = 2, .layers = 1, .ff = 32, .max_len = 20});
  std::vector<int64_t> long_prompt(21, 65);
  KVCache cache;
  expect_error([&] { gpt.prefill(Tensor::from_indices(long_prompt, {1, 21}), cache); },
               "prompt of 21 tokens exceeds max_len 20");
  expect_error([&] { gpt.forward(Tensor::from_indices(long_prompt, {1, 21})); }, "sequence of 21 tokens exceeds max_len 20");
  expect_error([&] { gpt.generate_ids(std::vector<int64_t>(15, 65), 6); },
               "prompt of 15 tokens + 6 new tokens exceeds max_len 20");
  expect_error([&] { gpt.generate_ids(std::vector<int64_t>(15, 65), INT64_MAX); },  // p + n would overflow
               "prompt of 15 tokens + 9223372036854775807 new tokens exceeds max_len 20");
  expect_error([&] { gpt.forward(Tensor::from_indices({1, 256, 3}, {1, 3})); },
               "token 256 at flat index 1 of [1, 3] is outside the vocabulary [0, 256)");
  expect_error([&] { gpt.generate_ids({72, -1}, 2); }, "prompt token -1 at position 1 is outside the vocabulary");
  expect_error([&] { gpt.generate_ids({}, 2); }, "the prompt is empty");
  expect_error([&] { gpt.forward(Tensor::from_vector({1, 2}, {1, 2})); }, "token ids must be I64, got F32");
  cache = gpt.new_cache(1);
  expect_error([&] { gpt.decode_step(Tensor::from_indices({66, 67}, {2}), cache); }, "tokens must be [1] or [1, 1]");
  gpt.prefill(Tensor::from_indices(std::vector<int64_t>(19, 65), {1, 19}), cache);
  expect_error([&] { gpt.decode_step(Tensor::from_indices({300}, {1}), cache); }, "token 300 at flat index 0");
  gpt.decode_step(Tensor::from_indices({66}, {1}), cache);
  EXPECT_EQ(cache.length, 20);
  expect_error([&] { gpt.decode_step(Tensor::from_indices({66}, {1}), cache); },
               "the cache holds 20 positions and max_len is 20: no room for another token");
  KVCache other = GPT({.layers = 2}).new_cache(1);
  expect_error([&] { gpt.decode_step(Tensor::from_indices({66}, {1}), other); }, "the cache does not match the model");
  expect_error([&] { Sampler({.greedy = false, .top_p = 0}); }, "top_p must be in (0, 1]");
  expect_error([&] { Sampler({.greedy = false, .temperature = 0}); }, "temperature must be a finite number > 0");
  expect_error([&] { Sampler({.top_k = -1}); }, "top_k must be >= 0");
}

TEST(GPT, ConfigJsonAndSpec) {
  const GPTConfig c{.d_model = 64, .nhead = 8, .max_len = 32};
  const GPTConfig back = GPTConfig::from_json(c.to_json(), "m.json");
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(GPT(c).spec(), (nlohmann::json{{"type", "zoo"}, {"model", "gpt"}, {"config", c.to_json()}}));
  EXPECT_EQ(GPTConfig::from_json(nlohmann::json::object(), "m.json").to_json(), GPTConfig{}.to_json());
  auto from = [](const nlohmann::json& j) { return GPTConfig::from_json(j, "m.json"); };
  expect_error([&] { from({{"heads", 4}}); }, "m.json: field 'graph.config.heads' is not a config key");
  expect_error([&] { from({{"d_model", 1.5}}); }, "field 'graph.config.d_model' must be a positive integer up to 2^24, got 1.5");
  expect_error([&] { from({{"d_model", 130}}); }, "field 'graph.config' is invalid: gpt config: d_model 130 is not divisible by nhead 4");
  expect_error([&] { from({{"layers", 0}}); }, "field 'graph.config.layers' must be a positive integer");
  expect_error([&] { from({{"layers", int64_t{1} << 40}}); }, "field 'graph.config.layers' must be a positive integer up to 2^24");
  EXPECT_EQ(GPTConfig{}.parameter_count("m.json"), 256 * 128 * 2 + 2 * (4 * 128 * 128 + 2 * 128 * 512 + 9 * 128 + 512) +
                                                       2 * 128 + 129 * 256);
  expect_error([&] { from({{"d_model", 1 << 24}, {"layers", 1 << 24}}).parameter_count("m.json"); },
               "m.json: field 'graph.config' describes a model of more than 2^32 parameters");
}

// A package whose config is absurd (or does not match its weights) fails cleanly in
// load_package, before any module is built.
TEST(GPT, PackageWithAbsurdConfigIsAFormatError) {
  const auto dir = std::filesystem::temp_directory_path() / ("hgraph_test_gpt_cfg_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  PackageSpec s;
  s.name = "gpt";
  s.inputs = {{"ids", "INT64", {-1, 8}}};
  s.outputs = {{"logits", "FP32", {-1, 8, 256}}};
  save_package(dir, GPT({.d_model = 16, .nhead = 2, .layers = 1, .ff = 32, .max_len = 32}), s);
  std::string good;
  {
    std::ifstream in(dir / "model.json");
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto expect_bad = [&](const char* key, int64_t value, const std::string& needle) {
    auto j = nlohmann::json::parse(good);
    j["graph"]["config"][key] = value;
    std::ofstream(dir / "model.json") << j.dump();
    try {
      load_package(dir);
      ADD_FAILURE() << "no error for " << key << " = " << value;
    } catch (const FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr("model.json: field 'graph.config"));
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  };
  expect_bad("layers", int64_t{1} << 40, "graph.config.layers' must be a positive integer up to 2^24");
  expect_bad("d_model", int64_t{1} << 30, "graph.config.d_model' must be a positive integer up to 2^24");
  expect_bad("layers", int64_t{1} << 24, "describes a model of more than 2^32 parameters");
  expect_bad("layers", 2, "weights.safetensors holds");
  std::ofstream(dir / "model.json") << good;
  EXPECT_NO_THROW(load_package(dir));
  std::filesystem::remove_all(dir);
}

TEST(GPT, AttentionBucketsAreStatic) {
  GPT gpt({.d_model = 16, .nhead = 2, .layers = 1, .ff = 32, .max_len = 100});
  EXPECT_EQ(gpt.bucket(0), 16);
  EXPECT_EQ(gpt.bucket(15), 16);
  EXPECT_EQ(gpt.bucket(16), 32);
  EXPECT_EQ(gpt.bucket(63), 64);
  EXPECT_EQ(gpt.bucket(64), 100);
  EXPECT_EQ(gpt.bucket(99), 100);
  KVCache cache = gpt.new_cache(3);
  cache.length = 20;
  const DecodeInputs in = gpt.decode_inputs(Tensor::from_indices({1, 2, 3}, {3}), cache);
  EXPECT_EQ(in.tokens.shape(), (Shape{3, 1}));
  EXPECT_EQ(in.position.to_indices(), std::vector<int64_t>{20});
  EXPECT_EQ(in.write.shape(), (Shape{1, 1, 100, 1}));
  EXPECT_EQ(in.attend.shape(), (Shape{1, 1, 1, 32}));
  const std::vector<float> write = in.write.to(DType::F32).to_vector(), attend = in.attend.to(DType::F32).to_vector();
  for (size_t i = 0; i < write.size(); ++i) EXPECT_EQ(write[i], i == 20 ? 1.0f : 0.0f) << i;
  for (size_t i = 0; i < attend.size(); ++i) EXPECT_EQ(attend[i], i <= 20 ? 1.0f : 0.0f) << i;
}

TEST(ByteTokenizer, RoundTripsAnyBytes) {
  const std::string text = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad";  // é € 😀 中
  const auto ids = encode_bytes(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0xc3);
  EXPECT_EQ(decode_bytes(ids), text);
  const Utf8Text t = decode_utf8(decode_bytes(ids));
  EXPECT_EQ(t.text, text);
  EXPECT_TRUE(t.invalid_offsets.empty());
  std::vector<int64_t> all(256);
  for (int64_t i = 0; i < 256; ++i) all[static_cast<size_t>(i)] = i;
  EXPECT_EQ(encode_bytes(decode_bytes(all)), all);
  expect_error([] { decode_bytes({65, 256}); }, "token 256 at position 1 is outside the vocabulary [0, 256)");
  expect_error([] { decode_bytes({-3}); }, "token -3 at position 0");
}

TEST(ByteTokenizer, ReplacesInvalidUtf8AsPython) {
  const auto cases = read_json("tokenizer.json");
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string in = decode_bytes(c["bytes"].get<std::vector<int64_t>>());
    const std::string want = decode_bytes(c["replaced"].get<std::vector<int64_t>>());
    EXPECT_EQ(decode_utf8(in).text, want) << c["bytes"].dump();
  }
  EXPECT_EQ(decode_utf8("a\x80" "b").invalid_offsets, (std::vector<size_t>{1}));
  EXPECT_EQ(decode_utf8("\xe2\x82x\xf0\x9f\x98").invalid_offsets, (std::vector<size_t>{0, 3}));
  EXPECT_EQ(decode_utf8("\xed\xa0\x80").invalid_offsets, (std::vector<size_t>{0, 1, 2}));
}

// A hand-made distribution: p = {0.1, 0.4, 0.2, 0.3} over tokens 0..3.
std::vector<float> hand_logits() { return {std::log(0.1f), std::log(0.4f), std::log(0.2f), std::log(0.3f)}; }

void expect_probs(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << what << " token " << i;
}

TEST(Sampling, TopKAndTopPKeepTheRightSets) {
  const auto l = hand_logits();
  SamplingOptions o{.greedy = false};
  expect_probs(sampling_distribution(l, o), {0.1, 0.4, 0.2, 0.3}, "no filter");
  o.top_k = 2;
  expect_probs(sampling_distribution(l, o), {0, 0.4 / 0.7, 0, 0.3 / 0.7}, "top_k 2");
  o.top_k = 0;
  o.top_p = 0.3;  // 0.4 alone reaches it
  expect_probs(sampling_distribution(l, o), {0, 1, 0, 0}, "top_p 0.3");
  o.top_p = 0.5;  // 0.4 < 0.5 <= 0.4 + 0.3
  expect_probs(sampling_distribution(l, o), {0, 0.4 / 0.7, 0, 0.3 / 0.7}, "top_p 0.5");
  o.top_p = 0.7;  // exactly 0.4 + 0.3: the smallest set reaching it has two tokens
  expect_probs(sampling_distribution(l, o), {0, 0.4 / 0.7, 0, 0.3 / 0.7}, "top_p 0.7");
  o.top_p = 0.71;
  expect_probs(sampling_distribution(l, o), {0, 0.4 / 0.9, 0.2 / 0.9, 0.3 / 0.9}, "top_p 0.71");
  o.top_k = 3;  // top-k first (0.4, 0.3, 0.2 renormalised), then top-p 0.75 of those: 4/9 + 3/9 >= 0.75
  o.top_p = 0.75;
  expect_probs(sampling_distribution(l, o), {0, 0.4 / 0.7, 0, 0.3 / 0.7}, "top_k 3 then top_p 0.75");
  o = {.greedy = false, .temperature = 2.0};  // p^(1/2), renormalised
  const double z = std::sqrt(0.1) + std::sqrt(0.4) + std::sqrt(0.2) + std::sqrt(0.3);
  expect_probs(sampling_distribution(l, o), {std::sqrt(0.1) / z, std::sqrt(0.4) / z, std::sqrt(0.2) / z, std::sqrt(0.3) / z},
               "temperature 2");
  expect_probs(sampling_distribution(l, SamplingOptions{}), {0, 1, 0, 0}, "greedy");
  // Ties: the lower token index ranks first.
  expect_probs(sampling_distribution({1, 2, 2, 0}, {.greedy = false, .top_k = 1}), {0, 1, 0, 0}, "tie");
  EXPECT_EQ(argmax_token({1, 2, 2, 0}), 1);
  expect_error([] { argmax_token({1, NAN}); }, "logit 1 is NaN");
}

TEST(Sampling, NonFiniteLogits) {
  const SamplingOptions o{.greedy = false, .temperature = 0.7};
  expect_error([&] { sampling_distribution({1, NAN, 2}, o); }, "logit 1 is NaN");
  expect_error([&] { Sampler(o).next({0, NAN}); }, "logit 1 is NaN");
  expect_probs(sampling_distribution({1, INFINITY, 2}, o), {0, 1, 0}, "+inf is certain");
  expect_probs(sampling_distribution({INFINITY, 0, INFINITY}, o), {0.5, 0, 0.5}, "+inf ties share");
  expect_probs(sampling_distribution({INFINITY, 0, INFINITY}, {.greedy = false, .top_k = 1}), {1, 0, 0}, "top_k 1 of ties");
  expect_probs(sampling_distribution({-INFINITY, 0, std::log(3.0f)}, {.greedy = false}), {0, 0.25, 0.75}, "-inf is impossible");
  expect_error([&] { sampling_distribution({-INFINITY, -INFINITY}, o); }, "every logit is -inf");
  EXPECT_EQ(Sampler(o).next({1, INFINITY, 2}), 1);
}

// The maximum is subtracted before the temperature divides: a temperature that tends to 0
// gives the greedy token (logits / 1e-310 overflow to inf, and inf - inf would be NaN).
TEST(Sampling, TinyAndHugeTemperaturesGiveValidDistributions) {
  for (double t : {1e-310, 4.9e-324, 1e-30, 1e-3}) {
    const SamplingOptions o{.greedy = false, .temperature = t};
    const std::vector<double> p = sampling_distribution({3, 7.5f, -2, 7.25f}, o);
    expect_probs(p, {0, 1, 0, 0}, "temperature " + std::to_string(t) + " is greedy");
    EXPECT_EQ(Sampler(o).next({3, 7.5f, -2, 7.25f}), 1) << "temperature " << t;
  }
  const std::vector<double> flat = sampling_distribution({1e30f, -1e30f, 0}, {.greedy = false, .temperature = 1e300});
  for (double v : flat) EXPECT_TRUE(std::isfinite(v) && v > 0.3 && v < 0.34) << v;  // a huge temperature: uniform
}

TEST(Sampling, DrawsFollowTheDistribution) {
  Sampler s({.greedy = false, .top_p = 0.71, .seed = 3});
  std::vector<int> count(4);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++count[static_cast<size_t>(s.next(hand_logits()))];
  EXPECT_EQ(count[0], 0) << "token 0 is outside the top-p set";
  EXPECT_NEAR(count[1] / double(draws), 0.4 / 0.9, 0.02);
  EXPECT_NEAR(count[2] / double(draws), 0.2 / 0.9, 0.02);
  EXPECT_NEAR(count[3] / double(draws), 0.3 / 0.9, 0.02);
  Sampler a({.greedy = false, .seed = 11}), b({.greedy = false, .seed = 11});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next(hand_logits()), b.next(hand_logits()));
}

}  // namespace
