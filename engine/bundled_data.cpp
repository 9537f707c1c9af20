#include "engine/bundled_data.h"

#include <system_error>

namespace hg {

std::filesystem::path bundled_data(const std::filesystem::path& installed, const std::filesystem::path& source) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path p = exe.parent_path().parent_path() / "share" / "hgraph" / installed;
    if (std::filesystem::exists(p, ec)) return p;
  }
  return source;
}

}  // namespace hg
