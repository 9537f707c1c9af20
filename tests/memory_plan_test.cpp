// Memory planner: hand-made cases with expected offsets, alias-rule validation, and invariants
// on a few hundred seeded random lifetimes and random DAGs compiled by the Executable (no run,
// no device).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "engine/error.h"
#include "engine/kernels.h"
#include "graphs/executable.h"

using namespace hg;
using namespace hg::graphs;
using hg::kernels::BinaryOp;
using ::testing::HasSubstr;

namespace {

size_t aligned(size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// True when j reaches i through alias_of links (i took over j's bytes, maybe through a chain).
bool alias_chain(const std::vector<BufferRequest>& reqs, size_t i, size_t j) {
  for (int a = reqs[i].alias_of; a >= 0; a = reqs[a].alias_of)
    if (static_cast<size_t>(a) == j) return true;
  return false;
}

void check_plan(const std::vector<BufferRequest>& reqs, const MemoryPlan& p) {
  ASSERT_EQ(p.offsets.size(), reqs.size());
  size_t total = 0, inplace = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    total += aligned(reqs[i].bytes);
    inplace += reqs[i].alias_of >= 0;
    EXPECT_EQ(p.offsets[i] % kArenaAlignment, 0u);
    EXPECT_LE(p.offsets[i] + reqs[i].bytes, p.arena_bytes);
    if (reqs[i].alias_of >= 0) {
      EXPECT_EQ(p.offsets[i], p.offsets[reqs[i].alias_of]) << "buffer " << i;
    }
    for (size_t j = 0; j < i; ++j) {
      const bool live_together = reqs[i].first_step <= reqs[j].last_step && reqs[j].first_step <= reqs[i].last_step;
      const bool overlap = p.offsets[i] < p.offsets[j] + reqs[j].bytes && p.offsets[j] < p.offsets[i] + reqs[i].bytes;
      // The one sanctioned overlap: i writes over j at the step that reads j last.
      const bool sanctioned = reqs[i].alias_of == static_cast<int>(j) && reqs[j].last_step == reqs[i].first_step;
      EXPECT_FALSE(live_together && overlap && !sanctioned) << "buffers " << j << " and " << i << " overlap while both live";
      if (overlap && live_together) {
        EXPECT_TRUE(alias_chain(reqs, i, j));
      }
    }
  }
  EXPECT_EQ(p.total_bytes, total);
  EXPECT_EQ(p.inplace, inplace);
  EXPECT_LE(p.arena_bytes, p.total_bytes);
}

TEST(MemoryPlanCases, ChainAlternatesBetweenTwoBuffers) {
  const std::vector<BufferRequest> chain{{4096, 0, 1}, {4096, 1, 2}, {4096, 2, 3}};
  const MemoryPlan p = plan_memory(chain);
  check_plan(chain, p);
  EXPECT_EQ(p.offsets, (std::vector<size_t>{0, 4096, 0}));
  EXPECT_EQ(p.arena_bytes, 8192u);
  EXPECT_EQ(p.total_bytes, 3u * 4096u);
}

TEST(MemoryPlanCases, InPlaceChainSharesOneBuffer) {
  const std::vector<BufferRequest> chain{{4096, 0, 1}, {4096, 1, 2, 0}, {4096, 2, 3, 1}};
  const MemoryPlan p = plan_memory(chain);
  check_plan(chain, p);
  EXPECT_EQ(p.offsets, (std::vector<size_t>{0, 0, 0}));
  EXPECT_EQ(p.arena_bytes, 4096u);
  EXPECT_EQ(p.total_bytes, 3u * 4096u);
  EXPECT_EQ(p.inplace, 2u);
}

TEST(MemoryPlanCases, LargestFirstLowestFreeOffset) {
  // 5000 B goes first at 0 (5056 aligned); the 100 B buffer lives with it: 5056; the 64 B one
  // lives with both: after them at 5184.
  const std::vector<BufferRequest> reqs{{100, 0, 3}, {5000, 1, 2}, {64, 2, 4}, {64, 4, 5}};
  const MemoryPlan p = plan_memory(reqs);
  check_plan(reqs, p);
  EXPECT_EQ(p.offsets, (std::vector<size_t>{5056, 0, 5184, 0}));
  EXPECT_EQ(p.arena_bytes, 5248u);
}

TEST(MemoryPlanCases, AliasBlockKeepsTheUnionOfLifetimes) {
  // 1 takes over 0 at step 2 and lives to step 6; 2 (steps 3-4) must avoid the whole block.
  const std::vector<BufferRequest> reqs{{1024, 0, 2}, {1024, 2, 6, 0}, {1024, 3, 4}};
  const MemoryPlan p = plan_memory(reqs);
  check_plan(reqs, p);
  EXPECT_EQ(p.offsets, (std::vector<size_t>{0, 0, 1024}));
  EXPECT_EQ(p.arena_bytes, 2048u);
}

TEST(MemoryPlanCases, RejectsInvalidAliasRules) {
  auto expect_rejected = [](const std::vector<BufferRequest>& reqs, const std::string& why) {
    try {
      plan_memory(reqs);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const InternalError& e) {
      EXPECT_THAT(e.what(), HasSubstr(why));
    }
  };
  expect_rejected({{1024, 0, 1}, {2048, 1, 2, 0}}, "sizes differ");
  expect_rejected({{1024, 0, 3}, {1024, 1, 2, 0}}, "last read at step 3");
  expect_rejected({{1024, 0, 1}, {1024, 1, 2, 0}, {1024, 1, 3, 0}}, "already took it over");
  expect_rejected({{1024, 0, 1, 1}, {1024, 1, 2}}, "earlier buffer");
  expect_rejected({{1024, 3, 1}}, "before it is written");
  expect_rejected({{1024, 2, 2}, {1024, 2, 3, 0}}, "both are written at step 2");
}

TEST(MemoryPlanProperty, RandomLifetimesWithAliases) {
  std::mt19937 rng(20261122);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<BufferRequest> reqs;
    std::vector<char> taken;
    const int n = 1 + static_cast<int>(rng() % 48);
    for (int i = 0; i < n; ++i) {
      const int a = static_cast<int>(rng() % 40), len = static_cast<int>(rng() % 8);
      BufferRequest r{1 + rng() % 6000, a, a + len};
      // Sometimes take over an earlier buffer whose last read is this buffer's first step.
      if (rng() % 2) {
        for (int j = 0; j < i; ++j) {
          if (taken[j] || reqs[j].last_step != a || reqs[j].first_step == a) continue;
          r.bytes = reqs[j].bytes;
          r.alias_of = j;
          taken[j] = 1;
          break;
        }
      }
      reqs.push_back(r);
      taken.push_back(0);
    }
    const MemoryPlan p = plan_memory(reqs);
    check_plan(reqs, p);
    const MemoryPlan again = plan_memory(reqs);  // a pure function: same request, same plan
    EXPECT_EQ(again.offsets, p.offsets);
    EXPECT_EQ(again.arena_bytes, p.arena_bytes);
  }
}

// A random DAG of element-wise ops (some in-place capable) over [rows, 16] F32 values, with
// inputs, some outputs and some values repeated as outputs.
Graph random_dag(std::mt19937& rng) {
  Graph g;
  const int64_t rows = 1 + static_cast<int64_t>(rng() % 4);
  const TensorMeta m{{rows, 16}, DType::F32};
  const int inputs = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < inputs; ++i) g.add_input(m);
  const int ops = 1 + static_cast<int>(rng() % 24);
  for (int k = 0; k < ops; ++k) {
    const int size = static_cast<int>(g.nodes.size());
    // Prefer recent values so chains (and in-place chances) form.
    auto pick = [&] { return rng() % 3 ? size - 1 - static_cast<int>(rng() % std::min(size, 3)) : static_cast<int>(rng() % size); };
    switch (rng() % 4) {
      case 0: g.add_op(op_schema("relu"), {pick()}, {}); break;
      case 1: g.add_op(op_schema("scale"), {pick()}, Attrs{{}, {0.5}}); break;
      case 2: g.add_op(op_schema("binary"), {pick(), pick()}, Attrs{{static_cast<int64_t>(BinaryOp::Add)}, {}}); break;
      default: g.add_op(op_schema("contiguous"), {pick()}, {}); break;  // a copy, not in-place
    }
  }
  g.outputs.push_back(static_cast<int>(g.nodes.size()) - 1);
  const int extra = static_cast<int>(rng() % 3);
  for (int k = 0; k < extra; ++k) g.outputs.push_back(static_cast<int>(rng() % g.nodes.size()));
  return g;
}

TEST(MemoryPlanProperty, RandomDagsCompileToSafePlans) {
  std::mt19937 rng(5);
  size_t inplace_total = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Graph g = random_dag(rng);
    CompileOptions opt;
    opt.optimize = false;  // plan exactly this DAG
    const auto exe = Executable::compile(g, opt);
    const Graph& cg = exe->graph();
    const int n = static_cast<int>(cg.nodes.size());
    std::vector<int> last(n, -1);
    for (int i = 0; i < n; ++i)
      for (int in : cg.nodes[i].inputs) last[in] = std::max(last[in], exe->step_of(i));
    std::vector<char> is_output(n, 0);
    for (int o : cg.outputs) is_output[o] = 1;
    for (int i = 0; i < n; ++i) {
      const auto li = exe->location(i);
      if (cg.nodes[i].kind == Node::Kind::Input) {
        EXPECT_EQ(li.where, Executable::Where::Input);
      }
      if (is_output[i] && cg.nodes[i].kind == Node::Kind::Op) {
        EXPECT_EQ(li.where, Executable::Where::Output);
      }
      if (li.where != Executable::Where::Arena) {
        EXPECT_EQ(exe->inplace_of(i), -1) << "%" << i << " is not in the arena but took over a buffer";
        continue;
      }
      EXPECT_EQ(li.index % kArenaAlignment, 0u);
      const size_t bi = cg.nodes[i].meta.bytes();
      EXPECT_LE(li.index + bi, exe->arena_bytes());
      const int src = exe->inplace_of(i);
      if (src >= 0) {
        ++inplace_total;
        EXPECT_TRUE(cg.nodes[i].op->inplace);
        EXPECT_EQ(cg.nodes[i].inputs[0], src);
        EXPECT_EQ(exe->location(src).where, Executable::Where::Arena) << "inputs and outputs are never taken over";
        EXPECT_EQ(exe->location(src).index, li.index);
        EXPECT_EQ(last[src], exe->step_of(i)) << "taken over before its last read";
      }
      for (int j = 0; j < i; ++j) {
        const auto lj = exe->location(j);
        if (lj.where != Executable::Where::Arena) continue;
        const size_t bj = cg.nodes[j].meta.bytes();
        const bool overlap = li.index < lj.index + bj && lj.index < li.index + bi;
        const bool live_together = exe->step_of(i) <= std::max(last[j], exe->step_of(j)) &&
                                   exe->step_of(j) <= std::max(last[i], exe->step_of(i));
        EXPECT_FALSE(overlap && live_together && src != j) << "%" << j << " and %" << i << " share bytes while both live";
      }
    }
    EXPECT_LE(exe->arena_bytes(), exe->buffer_bytes());
    const auto again = Executable::compile(g, opt);
    EXPECT_EQ(again->plan().offsets, exe->plan().offsets);
  }
  EXPECT_GT(inplace_total, 100u) << "the random DAGs should exercise in-place reuse";
}

}  // namespace
