// Where programs find the files hgraph ships with (the digits data set, the bundled model
// repository): <prefix>/share/hgraph/... when the program runs from an installation
// (<prefix>/bin/<program>, `cmake --install` or the Debian package), else the source tree it
// was built from.
//
//   std::filesystem::path repo = hg::bundled_data("repository", HG_SOURCE_DIR "/models/repository");
//   // /usr/share/hgraph/repository for /usr/bin/hgraph-serve; the source path in a build tree
#pragma once
#include <filesystem>

namespace hg {

std::filesystem::path bundled_data(const std::filesystem::path& installed, const std::filesystem::path& source);

}  // namespace hg
