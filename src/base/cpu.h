// CPU feature detection for runtime kernel dispatch. Kernels compiled for a target (e.g. AVX2
// via __attribute__((target))) are selected only when the running CPU has those features.
#pragma once

namespace loom {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  // True when the AVX2 kernel set (AVX2 + FMA + F16C) may run.
  bool has_avx2_set() const { return avx2 && fma && f16c; }
};

// Detected once; LOOM_FORCE_SCALAR=1 in the environment forces every dispatch to the scalar
// reference kernels (used by tests and to debug a suspected SIMD bug).
const CpuFeatures& cpu_features();
int cpu_count();

}  // namespace loom
