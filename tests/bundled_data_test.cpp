// Where programs find the bundled data (engine/bundled_data.h): <prefix>/share/hgraph next to an
// installed program, else the source tree's copy. The test binary is build/tests/hg_tests, so its
// "installation" is build/share/hgraph.
#include "engine/bundled_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace {

namespace fs = std::filesystem;

TEST(BundledData, PrefersTheInstalledCopyNextToTheProgram) {
  const fs::path share = fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "share" / "hgraph";
  const fs::path name = "bundled_data_test_" + std::to_string(::getpid());
  EXPECT_EQ(hg::bundled_data(name, "/source/copy"), "/source/copy");  // not installed: the source tree's
  fs::create_directories(share / name);
  EXPECT_EQ(hg::bundled_data(name, "/source/copy"), share / name);
  fs::remove_all(share / name);
}

}  // namespace
