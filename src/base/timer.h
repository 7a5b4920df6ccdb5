// Monotonic wall-clock time for perf counters and benchmarks.
#pragma once

#include <chrono>
#include <cstdint>

namespace loom {

inline int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace loom
