// Warm starts: the content hash, the disk cache's stored constants (hit, used in place, every
// kind of damage rebuilt, other weights never reused), the imported-ONNX entry, and packages
// loaded without drawing random initial values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "engine/hash.h"
#include "engine/kernels.h"
#include "disk_cache_fixture.h"
#include "golden.h"
#include "graphs/disk_cache.h"
#include "graphs/graph_cache.h"
#include "graphs/graph_serialize.h"
#include "models/init.h"
#include "models/module.h"
#include "models/onnx_import.h"
#include "models/package.h"
#include "models/zoo.h"
#include "test_env.h"

using namespace hg;
using namespace hg::graphs;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------- hash

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 131 + 7);
  return b;
}

TEST(Hash64, KnownAnswers) {
  // Stored in cache entries and keys: a change here is a format change (bump the versions).
  EXPECT_EQ(hash64(std::string_view("")), 0x9341e527d6cfae98u);
  EXPECT_EQ(hash64(std::string_view("hgraph")), 0x62449a08b9dc9fe8u);
  EXPECT_EQ(hash64(pattern(1000)), 0x3bface2b5b714943u);
  EXPECT_EQ(hash64(pattern(1000), 42), 0xf005b2a120a34e03u);
}

TEST(Hash64, PiecesGiveTheHashOfTheWhole) {
  const std::vector<uint8_t> b = pattern(777);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    Hasher h(trial);
    size_t at = 0;
    while (at < b.size()) {
      const size_t n = std::min<size_t>(b.size() - at, rng() % 70);
      h.update(std::span<const uint8_t>(b).subspan(at, n));
      at += n;
    }
    ASSERT_EQ(h.digest(), hash64(b, trial)) << "trial " << trial;
  }
}

TEST(Hash64, EveryFlippedBitAndEveryLengthChangesIt) {
  std::vector<uint8_t> b = pattern(4096 + 13);
  const uint64_t base = hash64(b);
  std::mt19937 rng(11);
  for (int k = 0; k < 10000; ++k) {
    const size_t bit = rng() % (b.size() * 8);
    b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    const uint64_t h = hash64(b);
    b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ASSERT_NE(h, base) << "bit " << bit;
    // Avalanche: about half of the 64 bits change; far from 0 or 64 would be a weak mix.
    const int changed = std::popcount(h ^ base);
    ASSERT_GT(changed, 10) << "bit " << bit;
    ASSERT_LT(changed, 54) << "bit " << bit;
  }
  std::vector<uint8_t> zeros;
  std::set<uint64_t> seen;
  for (int n = 0; n < 100; ++n, zeros.push_back(0)) EXPECT_TRUE(seen.insert(hash64(zeros)).second) << n << " zero bytes";
}

// ---------------------------------------------------------------------------- stored constants

class WarmStartTest : public test::DiskCacheTest {};

// y = linear(x, w * s, b): w * s (and its transpose chain) is folded into a constant.
Graph scaled_linear() {
  Graph g;
  const int x = g.add_input({{4, 16}, DType::F32});
  const int w = g.add_input({{8, 16}, DType::F32}), s = g.add_input({{8, 1}, DType::F32}), b = g.add_input({{8}, DType::F32});
  for (int f : {w, s, b}) g.nodes[f].frozen = true;
  const int ws = g.add_op(op_schema("binary"), {w, s}, Attrs{{static_cast<int64_t>(kernels::BinaryOp::Mul)}, {}});
  g.outputs = {g.add_op(op_schema("linear"), {x, ws, b}, Attrs{{0}, {}})};
  return g;
}

struct Data {
  std::vector<float> x = std::vector<float>(64), w = std::vector<float>(128), s = std::vector<float>(8),
                     b = std::vector<float>(8);
  explicit Data(float k) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * i);
    for (size_t i = 0; i < w.size(); ++i) w[i] = k * std::cos(0.7f * i);
    for (size_t i = 0; i < s.size(); ++i) s[i] = 0.5f + 0.1f * i;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.01f * i;
  }
  std::vector<const void*> frozen() const { return {nullptr, w.data(), s.data(), b.data()}; }
  std::vector<float> run(const Executable& exe) const {
    std::vector<std::byte> arena(exe.arena_bytes() + 64);
    void* base = arena.data();
    size_t space = arena.size();
    std::align(64, exe.arena_bytes(), base, space);
    std::vector<float> y(32);
    const void* in[] = {x.data(), w.data(), s.data(), b.data()};
    void* out[] = {y.data()};
    exe.run(base, in, out);
    return y;
  }
};

// What an eager computation gives: x @ (w * s)^T + b.
std::vector<float> reference(const Data& d) {
  std::vector<float> y(32);
  for (int r = 0; r < 4; ++r)
    for (int o = 0; o < 8; ++o) {
      double acc = d.b[o];
      for (int k = 0; k < 16; ++k) acc += double(d.x[r * 16 + k]) * d.w[o * 16 + k] * d.s[o];
      y[r * 8 + o] = static_cast<float>(acc);
    }
  return y;
}

fs::path constants_entry(const fs::path& dir, const std::string& graph_entry) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".hgg" && e.path() != graph_entry) return e.path();
  return {};
}

TEST_F(WarmStartTest, StoredConstantsAreUsedInPlaceAndGiveTheSameOutputs) {
  const Graph g = scaled_linear();
  const Data d(1.0f);
  CompileInfo info;
  auto cold = compile_cached(g, d.frozen(), &info);
  EXPECT_FALSE(info.disk_hit);
  EXPECT_FALSE(info.constants_hit);
  ASSERT_EQ(cold->computed_constants().size(), 1u);  // w * s
  const fs::path graph_entry = disk_cache()->path_for(compile_key(g, default_pass_options()));
  const fs::path entry = constants_entry(dir_, graph_entry.string());
  ASSERT_FALSE(entry.empty()) << "no constants entry next to " << graph_entry;
  auto warm = compile_cached(g, d.frozen(), &info);
  EXPECT_TRUE(info.disk_hit);
  EXPECT_TRUE(info.constants_hit);
  test::expect_close(d.run(*warm), d.run(*cold), 0, "warm == cold", 0);
  test::expect_close(d.run(*warm), reference(d), 1e-5, "warm == reference");
  // In place: the constant's bytes are the mapped entry's, 64-byte aligned.
  const auto c = warm->computed_constants();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.begin()->second.data()) % 64, 0u);
  const std::vector<uint8_t> file = read_file(entry);
  const auto& bytes = c.begin()->second;
  EXPECT_NE(std::search(file.begin(), file.end(), bytes.begin(), bytes.end()), file.end());
}

TEST_F(WarmStartTest, OtherWeightsNeverReuseStoredConstants) {
  const Graph g = scaled_linear();
  const Data a(1.0f), b(-2.0f);
  compile_cached(g, a.frozen());
  CompileInfo info;
  auto other = compile_cached(g, b.frozen(), &info);
  EXPECT_TRUE(info.disk_hit);  // the graph is shared
  EXPECT_FALSE(info.constants_hit);
  test::expect_close(b.run(*other), reference(b), 1e-5, "other weights");
  compile_cached(g, b.frozen(), &info);
  EXPECT_TRUE(info.constants_hit);  // each set of weights has its own entry
}

// A payload rewritten into a valid envelope: table damage that the checksum cannot see.
void rewrite_payload(const fs::path& entry, const std::string& key, std::function<void(std::vector<uint8_t>&)> change) {
  const std::vector<uint8_t> bytes = read_file(entry);
  const EntryHeader h{engine_version(), cpu_isa(), key};
  const size_t at = unwrap_entry(bytes, h, entry.string());
  std::vector<uint8_t> payload(bytes.begin() + at, bytes.end() - 8);
  change(payload);
  EntryFrame f = frame_entry(h, {payload});
  write_file_atomic(entry, {f.head, payload, {reinterpret_cast<const uint8_t*>(&f.checksum), 8}});
}

std::string key_of(const fs::path& entry) {
  // The key is the third string of the header: magic(8) version(4) then u32-length strings.
  const std::vector<uint8_t> b = read_file(entry);
  size_t at = 12;
  std::string s;
  for (int k = 0; k < 3; ++k) {
    uint32_t n;
    std::memcpy(&n, b.data() + at, 4);
    s.assign(reinterpret_cast<const char*>(b.data() + at + 4), n);
    at += 4 + n;
  }
  return s;
}

TEST_F(WarmStartTest, DamagedConstantsEntriesAreRebuiltNeverTrusted) {
  const Graph g = scaled_linear();
  const Data d(1.0f);
  const std::vector<float> want = reference(d);
  compile_cached(g, d.frozen());
  const fs::path graph_entry = disk_cache()->path_for(compile_key(g, default_pass_options()));
  const fs::path entry = constants_entry(dir_, graph_entry.string());
  ASSERT_FALSE(entry.empty());
  const std::string key = key_of(entry);
  ASSERT_THAT(key, HasSubstr("constants|"));
  const std::vector<uint8_t> valid = read_file(entry);
  auto u32 = [](std::vector<uint8_t>& p, size_t at, uint32_t v) { std::memcpy(p.data() + at, &v, 4); };
  auto u64 = [](std::vector<uint8_t>& p, size_t at, uint64_t v) { std::memcpy(p.data() + at, &v, 8); };
  struct Damage {
    std::string name, message;
    std::function<void()> apply;
  };
  const std::vector<Damage> damages = {
      {"a data byte", "checksum", [&] { auto b = valid; b[b.size() - 20] ^= 1; write_file_atomic(entry, {b}); }},
      {"truncated", "checksum", [&] { auto b = valid; b.resize(b.size() / 2); write_file_atomic(entry, {b}); }},
      {"count", "does not fit", [&] { rewrite_payload(entry, key, [&](auto& p) { u32(p, 0, 1000000); }); }},
      {"node index", "not a constant node", [&] { rewrite_payload(entry, key, [&](auto& p) { u32(p, 8, 0); }); }},
      {"node out of range", "not a constant node", [&] { rewrite_payload(entry, key, [&](auto& p) { u32(p, 8, 999); }); }},
      {"byte size", "bytes", [&] { rewrite_payload(entry, key, [&](auto& p) { u64(p, 24, 4); }); }},
      {"offset past the end", "pass the end", [&] { rewrite_payload(entry, key, [&](auto& p) { u64(p, 16, 1 << 30); }); }},
      {"offset unaligned", "unaligned", [&] { rewrite_payload(entry, key, [&](auto& p) { u64(p, 16, 65); }); }},
      {"offset into the table", "overlap", [&] { rewrite_payload(entry, key, [&](auto& p) { u64(p, 16, 0); }); }},
  };
  for (const Damage& dmg : damages) {
    SCOPED_TRACE(dmg.name);
    write_file_atomic(entry, {valid});
    dmg.apply();
    test::LogCapture log;
    CompileInfo info;
    auto exe = compile_cached(g, d.frozen(), &info);
    EXPECT_FALSE(info.constants_hit);
    EXPECT_THAT(log.text(), HasSubstr("removing invalid entry " + entry.string()));
    EXPECT_THAT(log.text(), HasSubstr(dmg.message));
    test::expect_close(d.run(*exe), want, 1e-5, "rebuilt");
    compile_cached(g, d.frozen(), &info);
    EXPECT_TRUE(info.constants_hit) << "the entry was not written again";
  }
}

// ---------------------------------------------------------------------------- imported ONNX

fs::path onnx_file(const std::string& name) { return fs::path(HG_TESTDATA_DIR) / "onnx" / name; }

TEST_F(WarmStartTest, AnImportedOnnxModelIsReadFromTheCache) {
  const fs::path file = onnx_file("lenet5_op15.onnx");
  set_disk_cache(std::nullopt);
  const models::ModelPackage fresh = models::import_onnx(file);
  set_disk_cache(DiskCacheConfig{dir_, 64 << 20});
  models::import_onnx(file);  // imports and stores
  const uint64_t hits = disk_cache()->stats().hits;
  std::unique_ptr<models::Module> net;
  const models::ModelPackage cached = models::import_onnx(file, &net);
  EXPECT_EQ(disk_cache()->stats().hits, hits + 2);  // the file's digest, then the imported package
  EXPECT_EQ(models::package_json(cached.spec), models::package_json(fresh.spec));
  EXPECT_EQ(safetensors::serialize(cached.weights), safetensors::serialize(fresh.weights));
  EXPECT_EQ(cached.dir, file.parent_path());
  ASSERT_TRUE(net);
  net->eval();
  const Tensor x = Tensor::full({2, 1, 32, 32}, 0.3f);
  auto ref = models::build_module(fresh);
  ref->eval();
  test::expect_close(net->forward(x).to_vector(), ref->forward(x).to_vector(), 0, "cached import == fresh import", 0);
}

TEST_F(WarmStartTest, ADamagedImportEntryIsRemovedAndTheFileImportedAgain) {
  const fs::path file = onnx_file("mlp_op13.onnx");
  const models::ModelPackage first = models::import_onnx(file);
  fs::path entry;
  for (const auto& e : fs::directory_iterator(dir_))
    if (key_of(e.path()).starts_with("onnx-import|")) entry = e.path();
  ASSERT_FALSE(entry.empty()) << "no onnx-import entry in " << dir_;
  const std::string key = key_of(entry);
  const std::vector<uint8_t> valid = read_file(entry);
  const std::vector<std::pair<std::string, std::function<void()>>> damages = {
      {"checksum", [&] { auto b = valid; b[b.size() / 2] ^= 4; write_file_atomic(entry, {b}); }},
      {"JSON length", [&] { rewrite_payload(entry, key, [](auto& p) { p[7] = 0x7f; }); }},
      {"not an hgraph-model",
       [&] { rewrite_payload(entry, key, [](auto& p) { p[8 + 2] = 'X'; }); }},  // {"fXrmat"...: a missing field
      {"safetensors", [&] { rewrite_payload(entry, key, [](auto& p) { p.resize(p.size() - 3); }); }},
  };
  for (const auto& [name, damage] : damages) {
    SCOPED_TRACE(name);
    write_file_atomic(entry, {valid});
    damage();
    test::LogCapture log;
    const models::ModelPackage again = models::import_onnx(file);
    EXPECT_THAT(log.text(), HasSubstr("removing invalid entry " + entry.string()));
    EXPECT_EQ(models::package_json(again.spec), models::package_json(first.spec));
    EXPECT_EQ(safetensors::serialize(again.weights), safetensors::serialize(first.weights));
    EXPECT_EQ(read_file(entry), valid) << "the entry was not written again";
  }
}

TEST_F(WarmStartTest, AReplacedOrRewrittenOnnxFileIsImportedAgain) {
  const fs::path model = dir_ / "model" / "model.onnx";
  fs::create_directories(model.parent_path());
  const fs::path mlp = onnx_file("mlp_op13.onnx"), lenet = onnx_file("lenet5_op15.onnx");
  fs::copy_file(mlp, model);
  EXPECT_EQ(models::import_onnx(model).spec.inputs[0].shape, (Shape{-1, 64}));
  EXPECT_EQ(models::import_onnx(model).spec.inputs[0].shape, (Shape{-1, 64}));  // from the cache
  const fs::path tmp = model.parent_path() / "new.onnx";
  fs::copy_file(lenet, tmp);
  fs::rename(tmp, model);  // replaced: another inode
  EXPECT_EQ(models::import_onnx(model).spec.inputs[0].shape, (Shape{-1, 1, 32, 32}));
  {
    const std::vector<uint8_t> b = read_file(mlp);  // rewritten in place: new times and size
    std::ofstream out(model, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  EXPECT_EQ(models::import_onnx(model).spec.inputs[0].shape, (Shape{-1, 64}));
}

// ---------------------------------------------------------------------------- no random init

TEST(SkipInit, DrawsNothingAndNests) {
  std::mt19937_64 a(3), b(3);
  {
    models::init::SkipInit outer;
    {
      models::init::SkipInit inner;
      EXPECT_TRUE(models::init::skipping());
    }
    EXPECT_TRUE(models::init::skipping());
    const Tensor t = models::init::normal(a, {4, 4});
    EXPECT_EQ(t.shape(), (Shape{4, 4}));
  }
  EXPECT_FALSE(models::init::skipping());
  EXPECT_EQ(a(), b()) << "a skipped draw consumed the generator";
}

TEST(LoadStateDict, AdoptSharesTheGivenTensorsAndKeepsRequiresGrad) {
  auto net = models::zoo::mlp({8, 4, 2});
  std::map<std::string, Tensor> sd;
  for (const auto& [name, t] : net->state_dict()) sd[name] = Tensor::full(t.shape(), 0.5f);
  net->load_state_dict(sd, true, models::LoadMode::Adopt);
  for (auto& [name, t] : net->named_parameters()) {
    EXPECT_EQ(t->impl()->storage, sd.at(name).impl()->storage) << name;
    EXPECT_TRUE(t->requires_grad()) << name;
  }
}

TEST(LoadStateDict, PackagesLoadWithoutRandomInitAndGiveTheSameOutputs) {
  const fs::path dir = test::temp_dir("skip_init_package");
  auto net = models::zoo::lenet5();
  net->eval();
  models::PackageSpec spec;
  spec.name = "lenet5";
  spec.inputs = {{"input", "FP32", {-1, 1, 32, 32}}};
  spec.outputs = {{"logits", "FP32", {-1, 10}}};
  models::save_package(dir, *net, spec);
  std::unique_ptr<models::Module> loaded;
  models::load_package(dir, &loaded);
  loaded->eval();
  const Tensor x = Tensor::full({2, 1, 32, 32}, 0.25f);
  test::expect_close(loaded->forward(x).to_vector(), net->forward(x).to_vector(), 0, "loaded == saved", 0);
  fs::remove_all(dir);
}

}  // namespace
