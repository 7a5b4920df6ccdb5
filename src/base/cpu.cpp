#include "base/cpu.h"

#include <cstdlib>
#include <cstring>
#include <thread>

namespace loom {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
    const char* force = std::getenv("LOOM_FORCE_SCALAR");
    if (force && std::strcmp(force, "0") != 0 && force[0] != '\0') return f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = __builtin_cpu_supports("f16c");
    f.avx512f = __builtin_cpu_supports("avx512f");
#endif
    return f;
  }();
  return features;
}

int cpu_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace loom
