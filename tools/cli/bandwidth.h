// Memory read bandwidth of this machine, measured by streaming over a large buffer with a given
// number of threads. `loom bench` measures it in the same run as the model so that the fraction
// of the limit a decode step reaches is computed against today's (noisy, shared) machine.
#pragma once

#include <cstddef>
#include <string>

namespace loom::cli {

struct MemBandwidth {
  double gbps = 0.0;  // best pass: bytes / seconds / 1e9
  size_t bytes = 0;   // buffer size read per pass
  int threads = 0;
  int passes = 0;
  std::string kernel;  // "avx2" or "scalar"
};

// Allocates `bytes` (rounded up to 4 KiB), touches every page, then reads the whole buffer
// `passes` times with `threads` threads (each a contiguous slice) and keeps the fastest pass.
// AVX2 loads when the CPU has them (runtime dispatch, LOOM_FORCE_SCALAR=1 disables), else a
// scalar 64-bit loop.
MemBandwidth measure_read_bandwidth(size_t bytes, int threads, int passes);

}  // namespace loom::cli
