// Helpers of the fusion pass tests (fusion_elementwise_test.cpp, attention_fusion_test.cpp):
// run a graph as it is through Executable, random input data, golden before/after dumps.
//
//   auto data = hg::test::fusion::random_inputs(g, /*seed=*/1);
//   Graph f = g;  hg::graphs::fuse_elementwise(f);
//   hg::test::fusion::expect_near(run_graph(f, data), run_graph(g, data), 1e-5);
//   hg::test::fusion::expect_golden("attention", "bert", g, f);  // tests/golden/attention/bert.txt
// HG_UPDATE_GOLDENS=1 rewrites the golden files instead of comparing.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/atomic_file.h"
#include "graphs/executable.h"
#include "tests/golden.h"

namespace hg::test::fusion {

using Buffer = std::vector<std::byte>;

// A graph under construction: F32 inputs, frozen weights, ops by name (shapes inferred).
struct GraphBuilder {
  graphs::Graph g;
  int in(const Shape& s) { return g.add_input({s, DType::F32}); }
  int weight(const Shape& s) {
    const int w = in(s);
    g.nodes[w].frozen = true;
    return w;
  }
  int op(const char* name, std::vector<int> ins, Attrs a = {}) { return g.add_op(op_schema(name), std::move(ins), a); }
};

// Per graph input: F32 normal(0, 1) values, BOOL random with P(true) = 0.7.
inline std::vector<Buffer> random_inputs(const graphs::Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::bernoulli_distribution coin(0.7);
  std::vector<Buffer> data(g.num_inputs);
  for (const auto& n : g.nodes) {
    if (n.kind != graphs::Node::Kind::Input) continue;
    Buffer& b = data[n.input_index];
    b.resize(n.meta.bytes());
    if (n.meta.dtype == DType::BOOL) {
      for (auto& v : b) v = std::byte{coin(rng)};
    } else {
      for (size_t k = 0; k < b.size() / 4; ++k) {
        const float v = nd(rng);
        std::memcpy(b.data() + 4 * k, &v, 4);
      }
    }
  }
  return data;
}

// random_inputs with every frozen weight of rank >= 2 scaled by 1 / sqrt(fan-in) (numel / its
// first dimension), as nn.Linear's and nn.Conv2d's init do: activations stay near 1 through the
// layers, so a relative tolerance means what it says.
inline std::vector<Buffer> scaled_inputs(const graphs::Graph& g, uint32_t seed) {
  auto data = random_inputs(g, seed);
  for (const auto& n : g.nodes) {
    if (n.kind != graphs::Node::Kind::Input || !n.frozen || n.meta.shape.size() < 2) continue;
    const float s = 1.0f / std::sqrt(static_cast<float>(n.meta.numel() / n.meta.shape[0]));
    auto* v = reinterpret_cast<float*>(data[n.input_index].data());
    for (int64_t i = 0; i < n.meta.numel(); ++i) v[i] *= s;
  }
  return data;
}

// Runs `g` with no passes (the graph exactly as given), or with them (`optimize`), and returns
// its F32 outputs. Frozen inputs are given at compile, as a Predictor gives its weights.
inline std::vector<std::vector<float>> run_graph(const graphs::Graph& g, const std::vector<Buffer>& data,
                                                 bool optimize = false) {
  constexpr size_t kAlign = 64;
  std::vector<const void*> in(g.num_inputs), frozen(g.num_inputs);
  for (int i = 0; i < g.num_inputs; ++i) in[i] = data[i].data();
  for (const auto& n : g.nodes)
    if (n.kind == graphs::Node::Kind::Input && n.frozen) frozen[n.input_index] = in[n.input_index];
  auto exe = graphs::Executable::compile(g, graphs::CompileOptions{.optimize = optimize}, frozen);
  std::vector<std::byte> arena(exe->arena_bytes() + kAlign);
  void* base = arena.data();
  size_t space = arena.size();
  std::align(kAlign, std::max<size_t>(exe->arena_bytes(), 1), base, space);
  std::vector<std::vector<float>> out;
  std::vector<void*> ptrs;
  for (const auto& m : exe->output_metas()) out.emplace_back(m.numel());
  for (auto& o : out) ptrs.push_back(o.data());
  exe->run(base, in.data(), ptrs.data());
  return out;
}

// |got - want| <= rtol * |want| + atol elementwise; where the unfused graph gives NaN or an
// infinity the fused one must give the same, and nowhere else.
inline void expect_near(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                        double rtol, double atol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << "output " << k;
    for (size_t i = 0; i < got[k].size(); ++i)
      ASSERT_TRUE(matches_reference(got[k][i], want[k][i], rtol, atol))
          << "output " << k << " element " << i << ": got " << got[k][i] << " want " << want[k][i];
  }
}

// max |a - b| / max |b| over all outputs; NaN or Inf in either is infinite.
inline double max_rel(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double err = 0, scale = 0;
  for (size_t k = 0; k < a.size(); ++k)
    for (size_t i = 0; i < a[k].size(); ++i) {
      if (!std::isfinite(a[k][i]) || !std::isfinite(b[k][i])) return INFINITY;
      err = std::max(err, std::abs(static_cast<double>(a[k][i]) - b[k][i]));
      scale = std::max(scale, std::abs(static_cast<double>(b[k][i])));
    }
  return err / scale;
}

inline int count_ops(const graphs::Graph& g, const std::string& name) {
  int c = 0;
  for (const auto& n : g.nodes) c += n.kind == graphs::Node::Kind::Op && n.op->name == name;
  return c;
}

// "# before" + dump + "# after" + dump against tests/golden/<dir>/<name>.txt.
inline void expect_golden(const std::string& dir, const std::string& name, const graphs::Graph& before,
                          const graphs::Graph& after) {
  const std::string text = "# before\n" + before.dump() + "# after\n" + after.dump();
  const std::string path = std::string(HG_SOURCE_DIR) + "/tests/golden/" + dir + "/" + name + ".txt";
  const char* update = std::getenv("HG_UPDATE_GOLDENS");
  if (update && std::strcmp(update, "1") == 0) {
    write_file_atomic(path, {as_bytes(text)});
    return;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "missing golden " << path << " (HG_UPDATE_GOLDENS=1 writes it)";
  std::stringstream want;
  want << f.rdbuf();
  EXPECT_EQ(text, want.str()) << "golden " << path << " differs (HG_UPDATE_GOLDENS=1 rewrites it; review the diff)";
}

}  // namespace hg::test::fusion
