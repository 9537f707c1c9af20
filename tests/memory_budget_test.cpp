// MemoryBudget (server/memory_budget.h): leases charge within the total and give back what they
// held; a charge past what is left throws naming what, its bytes and the budget.
#include "server/memory_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/error.h"

using hg::server::MemoryBudget;
using ::testing::HasSubstr;

TEST(MemoryBudget, LeasesChargeWithinTheTotalAndGiveItBack) {
  auto budget = MemoryBudget::make(size_t{10} << 20);
  auto a = budget->lease("model 'a'");
  a->charge("its files", size_t{6} << 20);
  EXPECT_EQ(budget->used(), size_t{6} << 20);
  EXPECT_EQ(a->left(), size_t{4} << 20);
  {
    auto b = budget->lease("model 'b'");
    b->charge("its files", size_t{1} << 20);
    try {
      b->charge("generation.max_batch_total_tokens (a KV cache of 4096 tokens in F32)", size_t{5} << 20);
      FAIL() << "a charge past the budget was accepted";
    } catch (const hg::OutOfMemoryError& e) {
      EXPECT_THAT(e.what(), HasSubstr("model 'b': generation.max_batch_total_tokens (a KV cache of 4096 tokens in F32) "
                                      "needs 5.0 MiB, but the model memory budget (--model-memory-mb 10) has 3.0 MiB "
                                      "left (6.0 MiB held by loaded models, 1.0 MiB by this load so far)"));
    }
    EXPECT_EQ(b->held(), size_t{1} << 20);  // a refused charge holds nothing
  }
  EXPECT_EQ(budget->used(), size_t{6} << 20);  // b's share is back
  a.reset();
  EXPECT_EQ(budget->used(), 0u);
  auto unlimited = MemoryBudget::make(0);
  auto c = unlimited->lease("model 'c'");
  c->charge("anything", size_t{1} << 40);
  EXPECT_EQ(c->left(), SIZE_MAX);
}
