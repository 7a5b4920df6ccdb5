#include "base/version.h"

#ifndef LOOM_VERSION_STRING
#define LOOM_VERSION_STRING "0.0.0"
#endif

extern "C" const char* loom_git_commit_string();  // generated: build/generated/git_commit.cpp

namespace loom {

const char* version_string() { return LOOM_VERSION_STRING; }
const char* git_commit() { return loom_git_commit_string(); }
std::string version_full() { return std::string(version_string()) + " (git " + git_commit() + ")"; }

}  // namespace loom
