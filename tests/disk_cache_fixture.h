// The fixture for tests of the disk graph cache: each test gets an empty cache directory of
// 64 MB and an empty memory cache; both caches are off again afterwards.
//
//   class MyCacheTest : public hg::test::DiskCacheTest {};
//   TEST_F(MyCacheTest, X) { compile_cached(g, frozen); EXPECT_TRUE(fs::exists(dir_)); }
#pragma once
#include <gtest/gtest.h>

#include <filesystem>

#include "graphs/disk_cache.h"
#include "graphs/graph_cache.h"
#include "test_env.h"

namespace hg::test {

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    graphs::set_disk_cache(graphs::DiskCacheConfig{dir_, 64 << 20});
    graphs::memory_graph_cache().clear();
  }
  void TearDown() override {
    graphs::set_disk_cache(std::nullopt);
    graphs::memory_graph_cache().clear();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

}  // namespace hg::test
