// Graph caches: the memory LRU (count and byte bounds), compile_cached, the disk cache (round
// trip, corruption of every kind, concurrent writers, size cap) and the entry format.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <thread>

#include "engine/atomic_file.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "disk_cache_fixture.h"
#include "golden.h"
#include "test_env.h"
#include "wait.h"
#include "graphs/disk_cache.h"
#include "graphs/graph_cache.h"
#include "graphs/graph_serialize.h"
#include "graphs/hpu_graph.h"
#include "models/zoo.h"
#include "tests/errors.h"

using namespace hg;
using namespace hg::graphs;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

using hg::test::error_of;
using hg::test::LogCapture;
using hg::test::temp_dir;

// x [batch, 16] -> linear(hidden) -> relu -> linear(4); the weights are inputs 1..4.
Graph mlp_graph(int64_t batch, int64_t hidden, bool frozen) {
  Graph g;
  const int x = g.add_input({{batch, 16}, DType::F32});
  const int w1 = g.add_input({{hidden, 16}, DType::F32}), b1 = g.add_input({{hidden}, DType::F32});
  const int w2 = g.add_input({{4, hidden}, DType::F32}), b2 = g.add_input({{4}, DType::F32});
  for (int w : {w1, b1, w2, b2}) g.nodes[w].frozen = frozen;
  const int h = g.add_op(op_schema("linear"), {x, w1, b1}, Attrs{{0}, {}});
  const int r = g.add_op(op_schema("relu"), {h}, {});
  g.outputs = {g.add_op(op_schema("linear"), {r, w2, b2}, Attrs{{0}, {}})};
  return g;
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// Runs `exe` on deterministic inputs of its input metas; returns output 0.
std::vector<float> run_exe(const Executable& exe, const std::vector<std::vector<float>>& inputs) {
  std::unique_ptr<void, AlignedFree> arena(std::aligned_alloc(64, (exe.arena_bytes() + 64) / 64 * 64));
  std::vector<const void*> in;
  for (const auto& v : inputs) in.push_back(v.data());
  std::vector<float> out(static_cast<size_t>(exe.output_metas()[0].numel()));
  void* outs[] = {out.data()};
  exe.run(arena.get(), in.data(), outs);
  return out;
}

std::vector<std::vector<float>> inputs_for(const Graph& g) {
  std::vector<std::vector<float>> in;
  for (const Node& n : g.nodes) {
    if (n.kind != Node::Kind::Input) continue;
    std::vector<float> v(static_cast<size_t>(n.meta.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37 + in.size() * 11) % 23) / 23.0f - 0.4f;
    in.push_back(std::move(v));
  }
  return in;
}

std::vector<const void*> frozen_ptrs(const Graph& g, const std::vector<std::vector<float>>& in) {
  std::vector<const void*> f(in.size(), nullptr);
  for (const Node& n : g.nodes)
    if (n.kind == Node::Kind::Input && n.frozen) f[n.input_index] = in[n.input_index].data();
  return f;
}

// ---------------------------------------------------------------------------- memory LRU

TEST(GraphCacheMemory, EvictsLeastRecentlyUsedByCount) {
  GraphCache cache({.max_entries = 2, .max_bytes = size_t{1} << 40});
  const Graph ga = mlp_graph(1, 8, false), gb = mlp_graph(2, 8, false), gc = mlp_graph(3, 8, false);
  auto a = Executable::compile(ga), b = Executable::compile(gb), c = Executable::compile(gc);
  cache.put(ga, a);
  cache.put(gb, b);
  EXPECT_EQ(cache.get(mlp_graph(1, 8, false)), a);  // an equal graph hits; a becomes the most recent
  cache.put(gc, c);
  EXPECT_EQ(cache.keys(), (std::vector<uint64_t>{memory_key(gc), memory_key(ga)}));
  EXPECT_EQ(cache.get(gb), nullptr);
  const GraphCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.bytes, executable_bytes(*a) + executable_bytes(*c));
}

TEST(GraphCacheMemory, KeysTellStructuresApartAndAHitIsConfirmed) {
  const Graph g = mlp_graph(4, 8, false);
  Graph other_attr = g, other_frozen = g, other_shape = mlp_graph(4, 9, false);
  other_attr.nodes.back().attrs.ints[0] = 1;  // a fused activation on the last linear
  other_frozen.nodes[1].frozen = true;
  for (const Graph* o : {&other_attr, &other_frozen, &other_shape}) {
    EXPECT_NE(memory_key(*o), memory_key(g));
    EXPECT_FALSE(o->same_structure(g));
    EXPECT_NE(o->signature(), g.signature());
  }
  EXPECT_NE(memory_key(g, {.fusion = false}), memory_key(g));
  Graph scale = g, scale_neg_zero = g;  // floats compare by bit pattern, as the signature does
  const int s1 = scale.add_op(op_schema("scale"), {scale.outputs[0]}, Attrs{{}, {0.0}});
  const int s2 = scale_neg_zero.add_op(op_schema("scale"), {scale_neg_zero.outputs[0]}, Attrs{{}, {-0.0}});
  scale.outputs = {s1};
  scale_neg_zero.outputs = {s2};
  EXPECT_FALSE(scale.same_structure(scale_neg_zero));
  EXPECT_TRUE(g.same_structure(mlp_graph(4, 8, false)));
  EXPECT_EQ(memory_key(g), memory_key(mlp_graph(4, 8, false)));
}

TEST(GraphCacheMemory, EvictsLeastRecentlyUsedByBytes) {
  const Graph gs = mlp_graph(1, 64, false), gm = mlp_graph(8, 64, false), gbig = mlp_graph(64, 64, false);
  auto small = Executable::compile(gs);
  auto mid = Executable::compile(gm);
  auto big = Executable::compile(gbig);
  ASSERT_GT(executable_bytes(*small), 0u);
  ASSERT_LT(executable_bytes(*small), executable_bytes(*mid));
  ASSERT_LT(executable_bytes(*mid), executable_bytes(*big));
  GraphCache cache({.max_entries = 100, .max_bytes = executable_bytes(*mid) + executable_bytes(*big)});
  cache.put(gs, small);
  cache.put(gm, mid);
  cache.get(gs);
  cache.put(gbig, big);  // over the byte bound: mid, the least recent, goes
  EXPECT_EQ(cache.keys(), (std::vector<uint64_t>{memory_key(gbig), memory_key(gs)}));
  EXPECT_EQ(cache.get(gm), nullptr);
  EXPECT_EQ(cache.stats().bytes, executable_bytes(*small) + executable_bytes(*big));
  EXPECT_EQ(cache.stats().evictions, 1u);

  cache.get(gs);
  cache.set_limits({.max_entries = 100, .max_bytes = executable_bytes(*small)});  // shrinking evicts big
  EXPECT_EQ(cache.keys(), (std::vector<uint64_t>{memory_key(gs)}));
  cache.put(gbig, big);  // larger than the bound on its own: not kept, nothing else evicted
  EXPECT_EQ(cache.keys(), (std::vector<uint64_t>{memory_key(gs)}));
  EXPECT_EQ(cache.get(gbig), nullptr);
}

TEST(GraphCacheMemory, CompileCachedHitsMemoryOnlyWithoutFrozenInputs) {
  set_disk_cache(std::nullopt);
  memory_graph_cache().clear();
  CompileInfo info;
  auto first = compile_cached(mlp_graph(5, 8, false), {}, &info);
  EXPECT_FALSE(info.memory_hit);
  auto again = compile_cached(mlp_graph(5, 8, false), {}, &info);
  EXPECT_TRUE(info.memory_hit);
  EXPECT_EQ(first, again);

  const Graph frozen = mlp_graph(5, 8, true);
  const auto in = inputs_for(frozen);
  auto f1 = compile_cached(frozen, frozen_ptrs(frozen, in), &info);
  auto f2 = compile_cached(frozen, frozen_ptrs(frozen, in), &info);
  EXPECT_FALSE(info.memory_hit);  // baked-in weights are per caller
  EXPECT_NE(f1, f2);
  test::expect_close(run_exe(*f2, in), run_exe(*first, in), 1e-6, "frozen == plain");
}

TEST(GraphCacheMemory, ConcurrentCallersGetWorkingExecutables) {
  set_disk_cache(std::nullopt);
  memory_graph_cache().clear();
  const GraphCacheLimits saved = memory_graph_cache().limits();
  memory_graph_cache().set_limits({.max_entries = 2, .max_bytes = saved.max_bytes});  // constant eviction
  std::vector<Graph> graphs;
  std::vector<std::vector<std::vector<float>>> inputs;
  std::vector<std::vector<float>> want;
  for (int64_t batch : {1, 2, 3}) {
    graphs.push_back(mlp_graph(batch, 16, false));
    inputs.push_back(inputs_for(graphs.back()));
    want.push_back(run_exe(*Executable::compile(graphs.back()), inputs.back()));
  }
  const GraphCacheStats before = memory_graph_cache().stats();  // counters are cumulative
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 30; ++i) {
        const size_t k = static_cast<size_t>(t + i) % graphs.size();
        if (run_exe(*compile_cached(graphs[k]), inputs[k]) != want[k]) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  const GraphCacheStats st = memory_graph_cache().stats();
  EXPECT_EQ(st.hits + st.misses - before.hits - before.misses, 120u);
  EXPECT_LE(st.entries, 2u);
  EXPECT_GT(st.evictions, before.evictions);
  memory_graph_cache().set_limits(saved);
  memory_graph_cache().clear();
}

// ---------------------------------------------------------------------------- disk cache

using DiskCacheTest = hg::test::DiskCacheTest;

TEST_F(DiskCacheTest, RoundTripGivesTheSameGraphAndOutputs) {
  const Graph g = mlp_graph(4, 32, true);
  const auto in = inputs_for(g);
  CompileInfo info;
  auto cold = compile_cached(g, frozen_ptrs(g, in), &info);
  EXPECT_FALSE(info.disk_hit);
  const fs::path entry = disk_cache()->path_for(compile_key(g, default_pass_options()));
  ASSERT_TRUE(fs::exists(entry));
  auto warm = compile_cached(g, frozen_ptrs(g, in), &info);
  EXPECT_TRUE(info.disk_hit);
  EXPECT_EQ(serialize_graph(warm->graph()), serialize_graph(cold->graph()));
  EXPECT_EQ(warm->graph().dump(), cold->graph().dump());
  EXPECT_EQ(warm->arena_bytes(), cold->arena_bytes());
  test::expect_close(run_exe(*warm, in), run_exe(*cold, in), 0, "disk hit == cold compile", 0);
  const Graph plain = mlp_graph(4, 32, false);
  test::expect_close(run_exe(*warm, in), run_exe(*Executable::compile(plain, {.optimize = false}), in), 1e-5,
                     "disk hit == unoptimized");
  const uint64_t entries = cold->computed_constants().empty() ? 1 : 2;  // the graph, its constants
  EXPECT_EQ(disk_cache()->stats().hits, entries);
  EXPECT_EQ(disk_cache()->stats().writes, entries);
}

TEST_F(DiskCacheTest, ZooModelsCaptureFromTheDiskCache) {
  struct Case {
    std::string name;
    std::function<std::unique_ptr<models::Module>()> make;
    Tensor input;
  };
  std::vector<int64_t> ids(2 * 16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7 % 50);
  std::vector<Case> cases;
  cases.push_back({"mlp", [] { return models::zoo::mlp({64, 32, 10}); }, Tensor::full({3, 64}, 0.25f)});
  cases.push_back({"lenet5", [] { return models::zoo::lenet5(); }, Tensor::full({2, 1, 32, 32}, 0.5f)});
  cases.push_back({"bert", [] { return models::zoo::bert_classifier({.vocab = 50, .d_model = 32, .nhead = 2, .layers = 1, .ff = 64, .max_len = 16}); },
                   Tensor::from_indices(ids, {2, 16})});
  for (auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto net = c.make();
    net->eval();
    net->to(Device::hpu(0));
    std::vector<Tensor> frozen;
    for (auto& [n, t] : net->named_parameters()) frozen.push_back(*t);
    for (auto& [n, t] : net->named_buffers()) frozen.push_back(*t);
    const Tensor x = c.input.to(Device::hpu(0));
    std::vector<std::vector<float>> outs;
    std::vector<std::vector<uint8_t>> graphs;
    for (int run = 0; run < 2; ++run) {
      NoGradGuard no_grad;
      HPUGraph g(Device::hpu(0));
      Tensor y;
      g.capture([&] { y = net->forward(x); }, {.frozen = frozen});
      EXPECT_EQ(g.stats().disk_cache_hit, run == 1);
      graphs.push_back(serialize_graph(g.executable().graph()));
      outs.push_back(y.to(Device()).to_vector());
    }
    EXPECT_EQ(graphs[0], graphs[1]);
    NoGradGuard no_grad;
    test::expect_close(outs[1], outs[0], 0, "replay from the disk cache", 0);
    test::expect_close(outs[1], net->forward(x).to(Device()).to_vector(), 1e-4, "disk-cached replay == eager", 1e-5);
  }
}

struct Corruption {
  std::string name;
  std::function<std::vector<uint8_t>(std::vector<uint8_t>, const Graph&, const EntryHeader&)> make;
  std::string message;  // part of the FormatError's message
};

void flip(std::vector<uint8_t>& b, size_t at) { b.at(at) ^= 0x5a; }

std::vector<Corruption> corruptions() {
  auto truncate = [](size_t n) {
    return [n](std::vector<uint8_t> b, const Graph&, const EntryHeader&) {
      b.resize(std::min(n, b.size()));
      return b;
    };
  };
  auto rewrite = [](std::function<void(EntryHeader&)> change) {
    return [change](std::vector<uint8_t>, const Graph& g, const EntryHeader& h) {
      EntryHeader other = h;
      change(other);
      return write_entry(other, g);
    };
  };
  return {
      {"empty", truncate(0), "empty file"},
      {"truncated in the magic", truncate(5), "bad magic"},
      {"truncated in the version", truncate(10), "truncated"},
      {"truncated in the header", truncate(20), "checksum"},
      {"truncated at a third", [](std::vector<uint8_t> b, const Graph&, const EntryHeader&) { b.resize(b.size() / 3); return b; }, "checksum"},
      {"truncated by one byte", [](std::vector<uint8_t> b, const Graph&, const EntryHeader&) { b.pop_back(); return b; }, "checksum"},
      {"header byte flipped", [](std::vector<uint8_t> b, const Graph&, const EntryHeader&) { flip(b, 17); return b; }, "checksum"},
      {"payload byte flipped", [](std::vector<uint8_t> b, const Graph&, const EntryHeader&) { flip(b, b.size() - 40); return b; }, "checksum"},
      {"checksum byte flipped", [](std::vector<uint8_t> b, const Graph&, const EntryHeader&) { flip(b, b.size() - 1); return b; }, "checksum"},
      {"format version", [](std::vector<uint8_t> b, const Graph&, const EntryHeader&) {
         const uint32_t v = 99;
         std::memcpy(b.data() + 8, &v, 4);
         const uint64_t sum = hash64(std::span<const uint8_t>(b.data(), b.size() - 8));
         std::memcpy(b.data() + b.size() - 8, &sum, 8);  // a consistent file of another format
         return b;
       }, "format version 99"},
      {"engine version", rewrite([](EntryHeader& h) { h.engine_version = "hgraph 0.0.1 graph-format 1"; }), "written by engine"},
      {"cpu isa", rewrite([](EntryHeader& h) { h.cpu_isa = "x86_64 avx512f avx512bf16 amx"; }), "compiled for CPU"},
      {"key", rewrite([](EntryHeader& h) { h.key += "x"; }), "key differs"},
      {"garbage", [](std::vector<uint8_t> b, const Graph&, const EntryHeader&) {
         for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 131 + 7);
         return b;
       }, "bad magic"},
      {"unknown op with a valid checksum", [](std::vector<uint8_t>, const Graph& g, const EntryHeader& h) {
         static OpSchema fake = op_schema("relu");
         fake.name = "no_such_op";
         Graph bad = g;
         for (Node& n : bad.nodes)
           if (n.kind == Node::Kind::Op) {
             n.op = &fake;
             break;
           }
         return write_entry(h, bad);
       }, "op 'no_such_op' does not exist"},
  };
}

TEST_F(DiskCacheTest, CorruptEntriesAreDetectedRemovedAndRewritten) {
  const Graph g = mlp_graph(4, 32, true);
  const auto in = inputs_for(g);
  const std::string key = compile_key(g, default_pass_options());
  auto reference = compile_cached(g, frozen_ptrs(g, in));
  const std::vector<float> want = run_exe(*reference, in);
  const fs::path entry = disk_cache()->path_for(key);
  const std::vector<uint8_t> valid = read_file(entry);
  const EntryHeader header{engine_version(), cpu_isa(), key};
  uint64_t invalid = disk_cache()->stats().invalid;
  for (const Corruption& c : corruptions()) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> bad = c.make(valid, reference->graph(), header);
    try {
      read_entry(bad, header, entry.string());
      ADD_FAILURE() << "no error";
    } catch (const FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.message));
      EXPECT_THAT(e.what(), HasSubstr(entry.string()));
    }
    write_file_atomic(entry, {ByteSpan(bad)});
    LogCapture log;
    CompileInfo info;
    auto exe = compile_cached(g, frozen_ptrs(g, in), &info);
    EXPECT_FALSE(info.disk_hit);
    EXPECT_EQ(disk_cache()->stats().invalid, ++invalid);
    EXPECT_THAT(log.text(), HasSubstr("removing invalid entry " + entry.string()));
    EXPECT_THAT(log.text(), HasSubstr(c.message));
    test::expect_close(run_exe(*exe, in), want, 0, "recompiled", 0);
    EXPECT_NO_THROW(read_entry(read_file(entry), header, entry.string()));  // rewritten valid
    compile_cached(g, frozen_ptrs(g, in), &info);
    EXPECT_TRUE(info.disk_hit);
  }
}

TEST(DiskCacheFormat, RejectsInconsistentGraphsNamingTheProblem) {
  const Graph frozen = mlp_graph(2, 8, true);
  const auto in = inputs_for(frozen);
  const Graph good = Executable::compile(frozen, {}, frozen_ptrs(frozen, in))->graph();
  EXPECT_NO_THROW(deserialize_graph(serialize_graph(good), "g"));
  auto expect_error = [&](const std::function<void(Graph&)>& change, const std::string& message) {
    Graph bad = good;
    change(bad);
    try {
      deserialize_graph(serialize_graph(bad), "g.hgg");
      ADD_FAILURE() << "no error for " << message;
    } catch (const FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr("g.hgg"));
      EXPECT_THAT(e.what(), HasSubstr(message));
      EXPECT_THAT(e.what(), HasSubstr("byte offset"));
    }
  };
  const int op = good.num_inputs;  // the first op node
  expect_error([&](Graph& g) { g.nodes[op].inputs[0] = 99; }, "refers to node 99, not an earlier node");
  expect_error([&](Graph& g) { g.nodes[op].inputs[0] = op; }, "not an earlier node");
  expect_error([&](Graph& g) { g.nodes[op].meta.shape[0] = 3; }, "recorded as F32[3,");
  expect_error([&](Graph& g) { g.nodes[op].meta.shape[0] = -1; }, "negative dimension");
  expect_error([&](Graph& g) { g.nodes[0].meta.shape = {int64_t{1} << 40, 4}; }, "larger than 1 TiB");
  expect_error([&](Graph& g) { g.outputs = {99}; }, "output 0 refers to node 99");
  expect_error([&](Graph& g) { g.outputs.clear(); }, "no outputs");
  expect_error([&](Graph& g) { g.nodes[1].input_index = 3; }, "input index 3, expected 1");
  expect_error([&](Graph& g) { g.nodes[op].inputs.pop_back(); }, "inputs, the op takes 3");
  expect_error(
      [&](Graph& g) {  // a variadic op with no inputs (its shape inference would read input 0)
        g.nodes[op].op = &op_schema("concat");
        g.nodes[op].inputs.clear();
      },
      "no inputs, the op takes one or more");
  {  // reshape attributes whose product overflows int64 (found by hgraph-fuzz: UBSan in numel)
    Graph g;
    const int x = g.add_input({{1}, DType::F32});
    g.outputs = {g.add_op(op_schema("reshape"), {x}, Attrs{{int64_t{1} << 32, int64_t{1} << 32, 0}, {}}, {{1}, DType::F32})};
    EXPECT_THAT(error_of<FormatError>([&] { deserialize_graph(serialize_graph(g), "g.hgg"); }),
                HasSubstr("cannot reshape to [4294967296, 4294967296, 0]"));
  }
  const std::vector<uint8_t> bytes = serialize_graph(good);
  for (size_t n : {size_t{0}, size_t{3}, size_t{9}, bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE(n);
    EXPECT_THROW(deserialize_graph(std::span(bytes).first(n), "g"), FormatError);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// cpu_isa() reads cpuid itself (clang has no __builtin_cpu_supports("f16c")); on GCC builds it
// must give the string GCC's builtins gave, which existing cache entries were written with.
TEST(DiskCacheFormat, CpuIsaIsWhatGccBuiltinsReport) {
  __builtin_cpu_init();
  const std::pair<const char*, bool> features[] = {
      {"sse4.2", __builtin_cpu_supports("sse4.2")},     {"avx", __builtin_cpu_supports("avx")},
      {"avx2", __builtin_cpu_supports("avx2")},         {"fma", __builtin_cpu_supports("fma")},
      {"f16c", __builtin_cpu_supports("f16c")},         {"avx512f", __builtin_cpu_supports("avx512f")},
      {"avx512bw", __builtin_cpu_supports("avx512bw")}, {"avx512vl", __builtin_cpu_supports("avx512vl")},
      {"avx512dq", __builtin_cpu_supports("avx512dq")}, {"avx512vnni", __builtin_cpu_supports("avx512vnni")},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16")},
  };
  std::string gcc = "x86_64";
  for (auto [name, on] : features)
    if (on) gcc += std::string(" ") + name;
  EXPECT_EQ(cpu_isa(), gcc);
}
#endif

TEST_F(DiskCacheTest, TwoProcessesWritingTheSameKeyLeaveAValidEntry) {
  const Graph g = mlp_graph(4, 32, false);
  const std::string key = compile_key(g, default_pass_options());
  const Graph optimized = Executable::compile(g)->graph();
  const std::vector<uint8_t> want = serialize_graph(optimized);
  DiskCache dc({dir_, 64 << 20});
  std::vector<pid_t> kids;
  for (int k = 0; k < 2; ++k) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int bad = 0;
      for (int i = 0; i < 200; ++i) {
        try {
          dc.store(key, optimized);
          std::optional<Graph> r = dc.load(key);
          if (r && serialize_graph(*r) != want) ++bad;
        } catch (...) {
          ++bad;
        }
      }
      ::_exit(bad + static_cast<int>(dc.stats().invalid) > 0 ? 1 : 0);
    }
    kids.push_back(pid);
  }
  int seen = 0;
  size_t running = kids.size();
  const auto give_up = std::chrono::steady_clock::now() + test::kWaitLimit;
  while (running > 0) {  // read while the writers write
    if (std::optional<Graph> r = dc.load(key)) {
      EXPECT_EQ(serialize_graph(*r), want);
      ++seen;
    }
    for (pid_t& pid : kids) {
      int status = 0;
      if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer saw an invalid entry";
        pid = -1;
        --running;
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() >= give_up) {
      for (pid_t pid : kids) {
        if (pid <= 0) continue;
        ADD_FAILURE() << "timed out after " << test::kWaitLimit.count() << " s waiting for writer process " << pid
                      << " (200 stores and loads) to exit; killed it";
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
      return;
    }
  }
  EXPECT_EQ(dc.stats().invalid, 0u);
  ASSERT_TRUE(dc.load(key).has_value());
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.path().extension() == ".hgg" ? 1 : 0;
  EXPECT_EQ(files, 1u);  // no temporary file left behind
  EXPECT_GT(seen, 0);
}

TEST_F(DiskCacheTest, EvictsTheOldestEntriesBeyondTheCap) {
  const Graph optimized = Executable::compile(mlp_graph(4, 32, false))->graph();
  const uint64_t size = write_entry({engine_version(), cpu_isa(), "k1"}, optimized).size();
  DiskCache dc({dir_, size * 3 + size / 2});
  const auto now = fs::file_time_type::clock::now();
  auto age = [&](const std::string& key, int seconds) {
    fs::last_write_time(dc.path_for(key), now - std::chrono::seconds(seconds));
  };
  dc.store("k1", optimized);
  age("k1", 400);
  dc.store("k2", optimized);
  age("k2", 300);
  dc.store("k3", optimized);
  age("k3", 200);
  EXPECT_EQ(dc.stats().evictions, 0u);
  ASSERT_TRUE(dc.load("k1").has_value());  // a hit makes k1 the most recent
  dc.store("k4", optimized);                // over the cap: k2 is now the oldest
  EXPECT_FALSE(fs::exists(dc.path_for("k2")));
  EXPECT_TRUE(fs::exists(dc.path_for("k1")));
  dc.store("k5", optimized);
  EXPECT_FALSE(fs::exists(dc.path_for("k3")));
  for (const char* k : {"k1", "k4", "k5"}) EXPECT_TRUE(fs::exists(dc.path_for(k))) << k;
  EXPECT_EQ(dc.stats().evictions, 2u);
  EXPECT_LE(dc.total_bytes(), dc.config().max_bytes);
}

TEST_F(DiskCacheTest, TemporaryFilesOfDeadWritersAreRemovedWhenOld) {
  const Graph optimized = Executable::compile(mlp_graph(4, 32, false))->graph();
  DiskCache dc({dir_, 64 << 20});
  const fs::path stale = dir_ / ".0123456789abcdef.hgg.tmp-AbC123", fresh = dir_ / ".fedcba9876543210.hgg.tmp-XyZ789";
  for (const fs::path& p : {stale, fresh}) std::ofstream(p) << "half-written entry";
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::minutes(11));
  dc.store("k", optimized);  // a store sweeps the directory
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh)) << "a temp file a live writer may still own stays";
  EXPECT_TRUE(dc.load("k").has_value());
}

TEST_F(DiskCacheTest, AnEntryLargerThanTheCapIsNotRead) {
  DiskCache dc({dir_, 1000});
  const std::vector<uint8_t> huge(5000, 0x42);
  write_file_atomic(dc.path_for("k"), {ByteSpan(huge)});
  LogCapture log;
  EXPECT_FALSE(dc.load("k").has_value());
  EXPECT_THAT(log.text(), HasSubstr("5000 bytes, more than the cache's cap of 1000"));
  EXPECT_FALSE(fs::exists(dc.path_for("k")));
  EXPECT_EQ(dc.stats().invalid, 1u);
}

TEST(DiskCacheConfig, ParsesDirAndMegabytes) {
  EXPECT_EQ(parse_disk_cache_config("/tmp/c,64").max_bytes, uint64_t{64} << 20);
  EXPECT_EQ(parse_disk_cache_config("/tmp/c,64").dir, fs::path("/tmp/c"));
  EXPECT_EQ(parse_disk_cache_config("/tmp/c").max_bytes, uint64_t{1024} << 20);
  for (const char* bad : {"", ",5", "/tmp/c,", "/tmp/c,0", "/tmp/c,12x", "/tmp/c,-3"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_disk_cache_config(bad), InvalidArgument);
  }
}

}  // namespace
