// hgraph's version: the CMake project version (project(hgraph VERSION ...) in CMakeLists.txt),
// compiled into engine/version.cpp. Every program's --version, checkpoints and disk graph-cache
// entries read it here; CMake users also get it as hgraph_VERSION from find_package(hgraph).
//
//   std::cout << "hgraph " << hg::version() << "\n";   // hgraph 0.1.0
#pragma once

namespace hg {

const char* version();

}  // namespace hg
