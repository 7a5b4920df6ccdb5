// Glue between loom's run-time dispatch and Google Highway's. Kernels written once with Highway
// (foreach_target.h + HWY_DYNAMIC_DISPATCH) are compiled for every target Highway can reach on
// this architecture (x86: SSE4, AVX2, AVX-512; AArch64: NEON, SVE, SVE2) and the best one the CPU
// supports is chosen at the first call. Every dispatch site first asks simd_enabled(), so that
// LOOM_FORCE_SCALAR sends it to the kernel's scalar twin and the environment switches of
// base/cpu.h take effect before Highway picks a target.
#pragma once

#include <functional>
#include <string>

namespace loom {

// False under LOOM_FORCE_SCALAR. The first call also applies LOOM_NO_AVX512 to Highway.
bool simd_enabled();

// The Highway target a dynamic dispatch would pick now, e.g. "AVX3", "AVX2", "NEON".
std::string hwy_target_name();

// For tests and benchmarks: runs fn once per Highway target that this build generated and this
// CPU supports, with dispatch pinned to that target (fn gets its name), then restores the normal
// choice. Not thread-safe: call from one thread with no other dispatch in flight.
void for_each_hwy_target(const std::function<void(const std::string& target)>& fn);

}  // namespace loom
