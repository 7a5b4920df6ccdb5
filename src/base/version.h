// loom's version: the project version (CMake's project(VERSION), also LOOM_VERSION_* in
// include/loom/loom.h) and the git commit the binary was built from ("unknown" outside a checkout,
// "-dirty" appended for uncommitted changes). Targets that report it link loom_version.
#pragma once

#include <string>

namespace loom {

const char* version_string();  // "0.2.0"
const char* git_commit();      // "1a2b3c4d5e6f", "1a2b3c4d5e6f-dirty" or "unknown"
std::string version_full();    // "0.2.0 (git 1a2b3c4d5e6f)"

}  // namespace loom
