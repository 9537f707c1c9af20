#include <algorithm>
#include <system_error>

#include "engine/error.h"
#include "training/loggers.h"

namespace hg::training {

LoggerVersion::LoggerVersion(int n) : number(n) {
  if (n < 0) throw InvalidArgument("logger version: " + std::to_string(n) + " is negative");
}

LoggerVersion::LoggerVersion(std::string s) : name(std::move(s)) {
  if (name.find('/') != std::string::npos || name == "." || name == "..")
    throw InvalidArgument("logger version '" + name + "' is not a directory name");
}

std::filesystem::path versioned_log_dir(const std::filesystem::path& save_dir, const std::string& name,
                                        LoggerVersion& version) {
  std::filesystem::path root = name.empty() ? save_dir : save_dir / name;
  if (!version.name.empty()) return root / version.name;
  if (version.number < 0) {
    int next = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(root, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      std::string d = it->path().filename().string();
      if (!it->is_directory() || d.rfind("version_", 0) != 0) continue;
      std::string digits = d.substr(8);
      if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
      next = std::max(next, std::stoi(digits) + 1);
    }
    version.number = next;
  }
  return root / ("version_" + std::to_string(version.number));
}

}  // namespace hg::training
