#include "fuzz_util.h"

#include <filesystem>

namespace loom::fuzz {

std::string shared_file(const std::string& rel) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(LOOM_SOURCE_DIR) / ".." / "shared";
  if (const char* env = std::getenv("LOOM_SHARED"); env && *env) dir = env;
  const fs::path p = dir / rel;
  if (!fs::exists(p)) {
    std::fprintf(stderr, "fuzz: missing shared file %s (set LOOM_SHARED to the shared folder)\n", p.c_str());
    std::exit(2);
  }
  return p.string();
}

std::string source_file(const std::string& rel) { return (std::filesystem::path(LOOM_SOURCE_DIR) / rel).string(); }

}  // namespace loom::fuzz
