#include "base/cpu.h"

#include <cstdlib>
#include <cstring>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__aarch64__)
#include <sys/auxv.h>
#endif
#if defined(__APPLE__) && defined(__aarch64__)
#include <sys/sysctl.h>
#endif
#include <hwy/targets.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace loom {
namespace {

// False when the environment variable is set to something other than "" or "0".
[[maybe_unused]] bool env_allows(const char* name) {
  const char* v = std::getenv(name);
  return !(v && v[0] != '\0' && std::strcmp(v, "0") != 0);
}

#if defined(__x86_64__) || defined(__i386__)

// Linux keeps the AMX tile data state off until a process asks for it (kernel 5.16+).
bool request_amx_permission() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// CPUID bits, read directly (portable across GCC and Clang, unlike __builtin_cpu_supports for
// every feature name), plus the OS check that YMM state is saved (XGETBV).
CpuFeatures detect_x86() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  const bool avx = c & (1u << 28);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  bool ymm_enabled = false;
  if (osxsave && avx) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    ymm_enabled = (lo & 0x6u) == 0x6u;
    f.zmm_enabled = ymm_enabled && (lo & 0xe0u) == 0xe0u;
  }
  if (!ymm_enabled) return CpuFeatures{};
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = b & (1u << 5);
    f.avx512f = b & (1u << 16);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512vnni = c & (1u << 11);
  }
  bool amx = false, amx_bf16 = false;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    amx = (d & (1u << 24)) && (d & (1u << 25));  // AMX-TILE, AMX-INT8
    amx_bf16 = d & (1u << 22);
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx_vnni = a & (1u << 4);
  f.amx_int8 = amx && env_allows("LOOM_NO_AMX") && request_amx_permission();
  f.amx_bf16 = f.amx_int8 && amx_bf16;
  // The switches hide an ISA and everything that builds on it (so that a machine with more can
  // run the kernels of a machine with less): no AVX2 also means no AVX-512, AVX-VNNI or AMX.
  const bool no_avx2 = !env_allows("LOOM_NO_AVX2");
  if (no_avx2 || !env_allows("LOOM_NO_AVX512")) {
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = false;
    f.amx_int8 = f.amx_bf16 = false;  // the AMX kernels need the AVX-512 set (has_amx_int8_set)
  }
  if (no_avx2 || !env_allows("LOOM_NO_AVX_VNNI")) f.avx_vnni = false;
  if (no_avx2) f.avx2 = false;
  return f;
}
#endif

#if defined(__aarch64__)
#if defined(__APPLE__)
// hw.optional.arm.FEAT_* (macOS 12 / iOS 15 on): 1 when the core has the feature, absent or 0 when not.
bool apple_feature(const char* name) {
  int v = 0;
  size_t size = sizeof v;
  return sysctlbyname(name, &v, &size, nullptr, 0) == 0 && v != 0;
}
#endif

CpuFeatures detect_arm64() {
  CpuFeatures f;
#if defined(__linux__)
  // Linux and Android (bionic has getauxval since API 18).
  const unsigned long hwcap = getauxval(AT_HWCAP);
  const unsigned long hwcap2 = getauxval(AT_HWCAP2);
  f.neon_fp16 = hwcap & (1ul << 10);     // HWCAP_ASIMDHP
  f.neon_dotprod = hwcap & (1ul << 20);  // HWCAP_ASIMDDP
  f.sve = hwcap & (1ul << 22);           // HWCAP_SVE
  f.neon_fhm = hwcap & (1ul << 23);      // HWCAP_ASIMDFHM
  f.neon_i8mm = hwcap2 & (1ul << 13);    // HWCAP2_I8MM
#elif defined(__APPLE__)
  f.neon_fp16 = apple_feature("hw.optional.arm.FEAT_FP16") || apple_feature("hw.optional.neon_fp16");
  f.neon_dotprod = apple_feature("hw.optional.arm.FEAT_DotProd");
  f.neon_i8mm = apple_feature("hw.optional.arm.FEAT_I8MM");
  f.neon_fhm = apple_feature("hw.optional.arm.FEAT_FHM");
#endif
  // The switches hide an ISA and what builds on it (the i8mm kernels use SDOT too).
  if (!env_allows("LOOM_NO_DOTPROD")) f.neon_dotprod = false;
  if (!f.neon_dotprod || !env_allows("LOOM_NO_I8MM")) f.neon_i8mm = false;
  if (!env_allows("LOOM_NO_FHM")) f.neon_fhm = false;
  return f;
}
#endif

CpuFeatures detect() {
  const char* force = std::getenv("LOOM_FORCE_SCALAR");
  if (force && force[0] != '\0' && std::strcmp(force, "0") != 0) return CpuFeatures{};
#if defined(__x86_64__) || defined(__i386__)
  CpuFeatures f = detect_x86();
  // Highway's AVX3 targets need the same OS state and switch as the intrinsic AVX-512 kernels,
  // its AVX2 target the AVX2 switch (then SSE4 is the best it has).
  int64_t hwy_off = 0;
  if (!f.avx512f) hwy_off |= HWY_AVX3 | HWY_AVX3_DL;
#if defined(HWY_AVX3_ZEN4)
  if (!f.avx512f) hwy_off |= HWY_AVX3_ZEN4;
#endif
#if defined(HWY_AVX3_SPR)
  if (!f.avx512f) hwy_off |= HWY_AVX3_SPR;
#endif
  if (!f.has_avx2_set()) hwy_off |= HWY_AVX2;
  if (hwy_off) hwy::DisableTargets(hwy_off);
#elif defined(__aarch64__)
  CpuFeatures f = detect_arm64();
#else
  CpuFeatures f;
#endif
  f.simd = true;
  return f;
}

}  // namespace

const char* CpuFeatures::isa_level() const {
  if (!simd) return "scalar";
#if defined(__x86_64__) || defined(__i386__)
  if (has_amx_int8_set()) return "amx";
  if (has_avx512_vnni_set()) return "avx512-vnni";
  if (has_avx_vnni_set()) return "avx-vnni";
  if (has_avx2_set()) return "avx2";
  return "sse4";
#elif defined(__aarch64__)
  if (neon_i8mm) return "neon-i8mm";
  return neon_dotprod ? "neon-dotprod" : "neon";
#else
  return "generic";
#endif
}

const char* CpuFeatures::isa_extras() const {
#if defined(__aarch64__)
  if (simd && neon_fhm) return "+fhm";
#endif
  return "";
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

int cpu_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace loom
