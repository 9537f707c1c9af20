// Executable: constants computed once at compile, pre-packing with frozen data, in-place
// reuse (numerics equal to a plain node-by-node evaluation; every in-place kernel checked with
// out == in[0]), errors, the dump (golden text) and the global dump switch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "engine/error.h"
#include "engine/kernels.h"
#include "graphs/executable.h"
#include "graphs/graph_dump.h"
#include "graphs/graph_serialize.h"

using namespace hg;
using namespace hg::graphs;
using hg::kernels::BinaryOp;
using ::testing::HasSubstr;

namespace {

std::atomic<int> g_double_runs{0}, g_prepack_calls{0};
std::vector<const void*> g_prepack_constants;

TensorMeta infer_first(const OpSchema&, const std::vector<TensorMeta>& in, const Attrs&) { return in[0]; }

// "exec_test_double": y = 2x, counting kernel runs.
Kernel prepare_double(const std::vector<TensorMeta>&, const TensorMeta& out, const Attrs&) {
  return [n = out.numel()](const void* const* in, void* o) {
    ++g_double_runs;
    const float* x = static_cast<const float*>(in[0]);
    float* y = static_cast<float*>(o);
    for (int64_t i = 0; i < n; ++i) y[i] = 2 * x[i];
  };
}

// "exec_test_addrow": y[r, c] = x[r, c] + w[c]. The pre-packed kernel copies w at prepack time.
Kernel prepare_addrow(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs&) {
  return [rows = in[0].shape[0], cols = in[0].shape[1]](const void* const* p, void* o) {
    const float* x = static_cast<const float*>(p[0]);
    const float* w = static_cast<const float*>(p[1]);
    float* y = static_cast<float*>(o);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] + w[c];
  };
}
Kernel prepack_addrow(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs&,
                      const std::vector<const void*>& constant) {
  ++g_prepack_calls;
  g_prepack_constants = constant;
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  std::vector<float> w(static_cast<const float*>(constant[1]), static_cast<const float*>(constant[1]) + cols);
  return [rows, cols, w](const void* const* p, void* o) {
    const float* x = static_cast<const float*>(p[0]);
    float* y = static_cast<float*>(o);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] + w[c];
  };
}

void register_test_ops() {
  static const bool once = [] {
    register_op({"exec_test_double", 1, infer_first, prepare_double});
    OpSchema addrow{"exec_test_addrow", 2, infer_first, prepare_addrow};
    addrow.prepack = prepack_addrow;
    register_op(addrow);
    return true;
  }();
  (void)once;
}

Attrs binary_attrs(BinaryOp op) { return Attrs{{static_cast<int64_t>(op)}, {}}; }

std::vector<float> iota_data(size_t n, float start, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

// Runs `exe` with a fresh arena on the given F32 inputs; returns the outputs.
std::vector<std::vector<float>> run_f32(const Executable& exe, const std::vector<const std::vector<float>*>& inputs) {
  std::vector<std::byte> arena(std::max<size_t>(exe.arena_bytes(), 1) + kArenaAlignment);
  void* base = arena.data();
  size_t space = arena.size();
  std::align(kArenaAlignment, exe.arena_bytes(), base, space);
  std::vector<const void*> in;
  for (const auto* v : inputs) in.push_back(v ? v->data() : nullptr);
  std::vector<std::vector<float>> out;
  for (const auto& m : exe.output_metas()) out.emplace_back(static_cast<size_t>(m.numel()));
  std::vector<void*> out_ptrs;
  for (auto& o : out) out_ptrs.push_back(o.data());
  exe.run(base, in.data(), out_ptrs.data());
  return out;
}

// Node-by-node evaluation, every value in its own buffer: the reference for in-place runs.
std::vector<std::vector<std::byte>> run_plain(const Graph& g, const std::vector<const void*>& inputs) {
  std::vector<std::vector<std::byte>> val(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    val[i].resize(n.meta.bytes());
    if (n.kind == Node::Kind::Input) {
      std::memcpy(val[i].data(), inputs[n.input_index], n.meta.bytes());
      continue;
    }
    std::vector<TensorMeta> metas;
    std::vector<const void*> ptrs;
    for (int in : n.inputs) {
      metas.push_back(g.nodes[in].meta);
      ptrs.push_back(val[in].data());
    }
    n.op->prepare(metas, n.meta, n.attrs)(ptrs.data(), val[i].data());
  }
  std::vector<std::vector<std::byte>> out;
  for (int o : g.outputs) out.push_back(val[o]);
  return out;
}

CompileOptions unoptimized() {
  CompileOptions o;
  o.optimize = false;
  return o;
}

TEST(Executable, ConstantsAreComputedOnceAtCompile) {
  register_test_ops();
  Graph g;
  const TensorMeta m{{2, 4}, DType::F32};
  const int x = g.add_input(m), w = g.add_input(m);
  g.nodes[w].frozen = true;
  const int c1 = g.add_op(op_schema("exec_test_double"), {w}, {});
  const int c2 = g.add_op(op_schema("exec_test_double"), {c1}, {});
  const int dead = g.add_op(op_schema("exec_test_double"), {w}, {});  // read by nothing: not computed
  g.nodes[c1].constant = g.nodes[c2].constant = g.nodes[dead].constant = true;
  const int y = g.add_op(op_schema("binary"), {x, c2}, binary_attrs(BinaryOp::Add));
  g.outputs = {y, c2};
  const std::vector<float> xv = iota_data(8, 1, 1), wv = iota_data(8, 0.5f, 0.25f);

  g_double_runs = 0;
  const auto exe = Executable::compile(g, unoptimized(), {nullptr, wv.data()});
  EXPECT_EQ(g_double_runs.load(), 2);
  EXPECT_EQ(exe->step_of(c1), -1);
  EXPECT_EQ(exe->step_of(c2), -1);
  EXPECT_EQ(exe->location(c2).where, Executable::Where::Constant);
  EXPECT_EQ(exe->location(w).where, Executable::Where::Constant);
  EXPECT_EQ(exe->num_steps(), 2u);  // the add and the copy of the constant output
  EXPECT_EQ(exe->constant_bytes(), m.bytes()) << "c1 is only an intermediate of c2: freed after compile";
  const std::string dump = exe->dump();
  EXPECT_THAT(dump, HasSubstr("%2 = constant exec_test_double(%1) : F32[2, 4]  @ constant, freed after compile\n"));
  EXPECT_THAT(dump, HasSubstr("%3 = constant exec_test_double(%2) : F32[2, 4]  @ constant 32 B\n"));
  for (int run = 0; run < 3; ++run) {
    const auto out = run_f32(*exe, {&xv, nullptr});  // a frozen input is read from frozen_data
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_FLOAT_EQ(out[0][i], xv[i] + 4 * wv[i]);
      EXPECT_FLOAT_EQ(out[1][i], 4 * wv[i]);
    }
  }
  EXPECT_EQ(g_double_runs.load(), 2) << "a run evaluated a constant again";
}

TEST(Executable, PrepackReceivesFrozenAndConstantData) {
  register_test_ops();
  Graph g;
  const int x = g.add_input({{3, 4}, DType::F32}), w = g.add_input({{4}, DType::F32});
  g.nodes[w].frozen = true;
  const int y = g.add_op(op_schema("exec_test_addrow"), {x, w}, {});
  g.outputs = {y};
  const std::vector<float> xv = iota_data(12, 0, 1), wv{10, 20, 30, 40};
  g_prepack_calls = 0;
  const auto exe = Executable::compile(g, unoptimized(), {nullptr, wv.data()});
  EXPECT_EQ(g_prepack_calls.load(), 1);
  ASSERT_EQ(g_prepack_constants.size(), 2u);
  EXPECT_EQ(g_prepack_constants[0], nullptr);
  EXPECT_EQ(g_prepack_constants[1], wv.data());
  EXPECT_TRUE(exe->prepacked(y));
  EXPECT_THAT(exe->dump(), HasSubstr("output #0, prepacked"));
  const auto out = run_f32(*exe, {&xv, nullptr});
  for (size_t i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(out[0][i], xv[i] + wv[i % 4]);

  // The same op without frozen inputs goes through prepare.
  Graph plain = g;
  plain.nodes[w].frozen = false;
  const auto exe2 = Executable::compile(plain, unoptimized());
  EXPECT_EQ(g_prepack_calls.load(), 1);
  EXPECT_FALSE(exe2->prepacked(y));
  EXPECT_EQ(run_f32(*exe2, {&xv, &wv})[0], out[0]);
}

TEST(Executable, FrozenInputWithoutDataIsAnError) {
  Graph g;
  const int x = g.add_input({{2, 2}, DType::F32}), w = g.add_input({{2, 2}, DType::F32});
  g.nodes[w].frozen = true;
  g.outputs = {g.add_op(op_schema("binary"), {x, w}, binary_attrs(BinaryOp::Mul))};
  for (const std::vector<const void*>& data : {std::vector<const void*>{}, std::vector<const void*>{nullptr, nullptr}}) {
    try {
      Executable::compile(g, unoptimized(), data);
      ADD_FAILURE() << "compiled without the frozen input's data";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("graph input #1 (%1, F32[2, 2]) is frozen but no data was given"));
    }
  }
}

TEST(Executable, ConstantNodeReadingARuntimeValueIsAnError) {
  register_test_ops();
  Graph g;
  const int x = g.add_input({{2, 2}, DType::F32});
  const int c = g.add_op(op_schema("exec_test_double"), {x}, {});
  g.nodes[c].constant = true;
  g.outputs = {c};
  try {
    Executable::compile(g, unoptimized());
    ADD_FAILURE() << "a constant node read a graph input that is not frozen";
  } catch (const InternalError& e) {
    EXPECT_THAT(e.what(), HasSubstr("%1 (exec_test_double) is marked constant but its input 0, %0 (input #0)"));
  }
}

TEST(Executable, InPlaceOnlyWhenInputZeroIsReadLastAndIsAnArenaBuffer) {
  Graph g;
  const TensorMeta m{{4, 16}, DType::F32};
  const int x = g.add_input(m), z = g.add_input(m);
  const int r0 = g.add_op(op_schema("relu"), {x}, {});                             // input: never written
  const int a = g.add_op(op_schema("scale"), {r0}, Attrs{{}, {3.0}});               // in place of r0
  const int b = g.add_op(op_schema("relu"), {a}, {});                                // a read again below
  const int c = g.add_op(op_schema("binary"), {b, a}, binary_attrs(BinaryOp::Sub));  // in place of b
  const int d = g.add_op(op_schema("binary"), {c, c}, binary_attrs(BinaryOp::Add));  // reads c twice
  const int e = g.add_op(op_schema("binary"), {d, z}, binary_attrs(BinaryOp::Mul));  // in place of d
  const int f = g.add_op(op_schema("tanh"), {e}, {});                                // the output
  const int h = g.add_op(op_schema("scale"), {f}, Attrs{{}, {0.5}});                 // f is an output: no
  g.outputs = {f, h};
  const auto exe = Executable::compile(g, unoptimized());
  EXPECT_EQ(exe->inplace_of(r0), -1);
  EXPECT_EQ(exe->inplace_of(a), r0);
  EXPECT_EQ(exe->inplace_of(b), -1);
  EXPECT_EQ(exe->inplace_of(c), b);
  EXPECT_EQ(exe->inplace_of(d), -1);
  EXPECT_EQ(exe->inplace_of(e), d);
  EXPECT_EQ(exe->inplace_of(h), -1);
  EXPECT_EQ(exe->plan().inplace, 3u);
  EXPECT_EQ(exe->location(f).where, Executable::Where::Output);

  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> xv(64), zv(64);
  for (auto& v : xv) v = nd(rng);
  for (auto& v : zv) v = nd(rng);
  const std::vector<float> x_before = xv, z_before = zv;
  const auto out = run_f32(*exe, {&xv, &zv});
  EXPECT_EQ(xv, x_before);
  EXPECT_EQ(zv, z_before);
  const auto ref = run_plain(g, {xv.data(), zv.data()});
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(std::memcmp(out[k].data(), ref[k].data(), ref[k].size()), 0) << "output " << k;
}

// Random chains and branches of in-place and other ops, batch-sized so that oneDNN kernels run.
TEST(Executable, InPlaceRunsEqualPlainEvaluationOnRandomGraphs) {
  std::mt19937 rng(11);
  size_t inplace = 0;
  const char* unary[] = {"relu", "gelu", "silu", "tanh", "sigmoid"};
  for (int trial = 0; trial < 40; ++trial) {
    Graph g;
    const TensorMeta m{{8, 64 + static_cast<int64_t>(rng() % 3) * 64}, DType::F32};
    g.add_input(m);
    g.add_input(m);
    for (int k = 0; k < 12; ++k) {
      const int size = static_cast<int>(g.nodes.size());
      const int a = size - 1 - static_cast<int>(rng() % std::min(size, 2)), b = static_cast<int>(rng() % size);
      switch (rng() % 5) {
        case 0: g.add_op(op_schema(unary[rng() % 5]), {a}, Attrs{{0}, {}}); break;
        case 1: g.add_op(op_schema("scale"), {a}, Attrs{{}, {0.75}}); break;
        case 2: g.add_op(op_schema("binary"), {a, b}, binary_attrs(static_cast<BinaryOp>(rng() % 3))); break;
        case 3: g.add_op(op_schema("unary_math"), {g.add_op(op_schema("sigmoid"), {a}, {})}, Attrs{{0}, {}}); break;
        default: g.add_op(op_schema("contiguous"), {a}, {}); break;
      }
    }
    g.outputs = {static_cast<int>(g.nodes.size()) - 1, static_cast<int>(rng() % g.nodes.size())};
    const auto exe = Executable::compile(g, unoptimized());
    inplace += exe->plan().inplace;
    std::normal_distribution<float> nd;
    std::vector<float> xv(static_cast<size_t>(m.numel())), yv(xv.size());
    for (auto& v : xv) v = nd(rng);
    for (auto& v : yv) v = nd(rng);
    const auto out = run_f32(*exe, {&xv, &yv});
    const auto ref = run_plain(g, {xv.data(), yv.data()});
    for (size_t k = 0; k < out.size(); ++k)
      EXPECT_EQ(std::memcmp(out[k].data(), ref[k].data(), ref[k].size()), 0) << "trial " << trial << " output " << k;
  }
  EXPECT_GT(inplace, 40u);
}

// Every schema marked in-place: its kernel gives the same bytes with out == in[0], on the
// loop path (37 elements) and the oneDNN path (5000), in F32 and BF16.
TEST(Executable, InPlaceKernelsAllowOutputOverInputZero) {
  struct Case {
    const char* op;
    Attrs attrs;
    bool binary;
  };
  const std::vector<Case> cases = {
      {"relu", {}, false},       {"scale", {{}, {-1.5}}, false}, {"gelu", {{0}, {}}, false},
      {"gelu", {{1}, {}}, false}, {"silu", {}, false},           {"tanh", {}, false},
      {"sigmoid", {}, false},    {"unary_math", {{0}, {}}, false}, {"unary_math", {{3}, {2.0}}, false},
      {"binary", binary_attrs(BinaryOp::Add), true}, {"binary", binary_attrs(BinaryOp::Div), true},
      {"contiguous", {}, false}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> ud(0.1f, 3.0f);
  for (const Case& c : cases) {
    const OpSchema& op = op_schema(c.op);
    EXPECT_TRUE(op.inplace) << c.op;
    for (DType t : {DType::F32, DType::BF16}) {
      for (int64_t n : {int64_t{37}, int64_t{5000}}) {
        for (bool broadcast : {false, true}) {
          if (broadcast && !c.binary) continue;
          const TensorMeta m{{n}, t};
          const TensorMeta other = broadcast ? TensorMeta{{1}, t} : m;
          std::vector<TensorMeta> metas{m};
          if (c.binary) metas.push_back(other);
          const TensorMeta out = op.infer(op, metas, c.attrs);
          ASSERT_EQ(out.bytes(), m.bytes());
          std::vector<std::byte> x(m.bytes()), y(other.bytes()), ref(m.bytes());
          for (int64_t i = 0; i < n; ++i) {
            const float v = ud(rng);
            if (t == DType::F32) std::memcpy(x.data() + i * 4, &v, 4);
            else {
              const bf16 h = bf16::from_float(v);
              std::memcpy(x.data() + i * 2, &h.bits, 2);
            }
          }
          for (size_t i = 0; i < y.size(); ++i) y[i] = x[i % x.size()];
          const Kernel k = op.prepare(metas, out, c.attrs);
          const void* sep[] = {x.data(), y.data()};
          k(sep, ref.data());
          std::vector<std::byte> buf = x;
          const void* same[] = {buf.data(), y.data()};
          k(same, buf.data());
          EXPECT_EQ(buf, ref) << c.op << " " << dtype_name(t) << " n=" << n << (broadcast ? " broadcast" : "");
        }
      }
    }
  }
}

TEST(Executable, ReportsArenaNextToTheSumOfBuffers) {
  Graph g;
  const TensorMeta m{{16, 64}, DType::F32};  // 4096 B
  int v = g.add_input(m);
  for (int k = 0; k < 6; ++k) v = g.add_op(op_schema(k % 2 ? "relu" : "contiguous"), {v}, {});
  g.outputs = {v};
  const auto exe = Executable::compile(g, unoptimized());
  // Five arena buffers; the first copy needs its own (it reads a graph input), then contiguous and
  // relu each run in place of the value before them: one buffer for the whole chain.
  EXPECT_EQ(exe->buffer_bytes(), 5u * 4096u);
  EXPECT_EQ(exe->arena_bytes(), 4096u);
  EXPECT_EQ(exe->plan().inplace, 4u);
  EXPECT_THAT(exe->dump(), HasSubstr("memory: arena 4096 B, sum of buffers 20480 B (5 buffers, 4 in place)"));
}

Graph golden_graph() {
  Graph g;
  const int x = g.add_input({{2, 4}, DType::F32}), w = g.add_input({{1, 4}, DType::F32});
  g.nodes[w].frozen = true;
  const int c = g.add_op(op_schema("scale"), {w}, Attrs{{}, {0.5}});
  g.nodes[c].constant = true;
  const int p = g.add_op(op_schema("binary"), {x, c}, binary_attrs(BinaryOp::Mul));
  g.nodes[p].fused = {"mul", "add"};
  const int r = g.add_op(op_schema("relu"), {p}, {});
  const int t = g.add_op(op_schema("tanh"), {r}, {});
  g.outputs = {t, x};
  return g;
}

TEST(Executable, DumpGolden) {
  const std::vector<float> w{1, 2, 3, 4};
  const auto exe = Executable::compile(golden_graph(), unoptimized(), {nullptr, w.data()});
  EXPECT_EQ(exe->dump(),
            "%0 = input #0 : F32[2, 4]  @ input #0\n"
            "%1 = frozen input #1 : F32[1, 4]  @ frozen data\n"
            "%2 = constant scale(%1) floats=[0.5] : F32[1, 4]  @ constant 16 B\n"
            "%3 = binary(%0, %2) ints=[2] : F32[2, 4]  fused: mul+add  @ arena 0+32\n"
            "%4 = relu(%3) : F32[2, 4]  @ arena 0+32 in-place of %3\n"
            "%5 = tanh(%4) : F32[2, 4]  @ output #0\n"
            "outputs: %5 %0\n"
            "memory: arena 64 B, sum of buffers 128 B (2 buffers, 1 in place), constants 16 B, 4 steps\n"
            "passes: not run (the graph was optimized before)\n");
  EXPECT_EQ(golden_graph().dump(),
            "%0 = input #0 : F32[2, 4]\n"
            "%1 = frozen input #1 : F32[1, 4]\n"
            "%2 = constant scale(%1) floats=[0.5] : F32[1, 4]\n"
            "%3 = binary(%0, %2) ints=[2] : F32[2, 4]  fused: mul+add\n"
            "%4 = relu(%3) : F32[2, 4]\n"
            "%5 = tanh(%4) : F32[2, 4]\n"
            "outputs: %5 %0\n");
}

TEST(Executable, DumpListsEveryPassWhenOptimized) {
  const std::vector<float> w{1, 2, 3, 4};
  const auto exe = Executable::compile(golden_graph(), {}, {nullptr, w.data()});
  const std::string d = exe->dump();
  EXPECT_THAT(d, HasSubstr("\npasses: "));
  for (const Pass& p : all_passes()) EXPECT_THAT(d, HasSubstr(std::string(p.name) + " ")) << d;
  EXPECT_THAT(d, HasSubstr(" round"));
}

TEST(GraphDump, EveryCompileAppendsUnderItsSignatureHash) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("hg_graph_dump_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                      "_" + std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id())) + ".txt");
  set_graph_dump(file.string());
  EXPECT_EQ(graph_dump_path(), file.string());
  const std::vector<float> w{1, 2, 3, 4};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int k = 0; k < 3; ++k) Executable::compile(golden_graph(), unoptimized(), {nullptr, w.data()});
    });
  for (auto& t : threads) t.join();
  set_graph_dump("");
  Executable::compile(golden_graph(), unoptimized(), {nullptr, w.data()});  // off: not appended

  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto exe = Executable::compile(golden_graph(), unoptimized(), {nullptr, w.data()});
  const std::string block = "=== graph " + hex64(hash64(golden_graph().signature())) + ": 6 nodes, 4 steps ===\n" +
                            exe->dump() + "\n";
  EXPECT_EQ(exe->signature_hash(), hash64(golden_graph().signature()));
  std::string twelve;
  for (int k = 0; k < 12; ++k) twelve += block;
  EXPECT_EQ(text, twelve) << "12 whole, unmixed dumps";
  std::filesystem::remove(file);

  EXPECT_THROW(set_graph_dump((file.parent_path() / "no_such_dir" / "x.txt").string()), IoError);
}

// Child of the test below: compiles with HG_DUMP_GRAPH set and exits 0 when the dump landed.
[[noreturn]] void compile_with_env_dump(const std::filesystem::path& file) {
  ::setenv("HG_DUMP_GRAPH", file.c_str(), 1);
  const std::vector<float> w{1, 2, 3, 4};
  Executable::compile(golden_graph(), unoptimized(), {nullptr, w.data()});
  std::ifstream in(file);
  std::string first;
  std::getline(in, first);
  std::exit(graph_dump_path() == file.string() && first.starts_with("=== graph ") ? 0 : 1);
}

// HG_DUMP_GRAPH applies while set_graph_dump has not been called: checked in a fresh process
// (the threadsafe death-test style re-runs only this test).
TEST(GraphDumpDeathTest, EnvironmentVariableTurnsTheDumpOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("hg_graph_dump_env_" + std::to_string(::getpid()) + ".txt");
  EXPECT_EXIT(compile_with_env_dump(file), ::testing::ExitedWithCode(0), "");
  std::filesystem::remove(file);
}

}  // namespace
