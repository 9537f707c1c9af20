#include "engine/version.h"

namespace hg {

const char* version() { return HG_VERSION; }  // set by engine/CMakeLists.txt from the project version

}  // namespace hg
