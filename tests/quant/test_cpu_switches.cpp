// The LOOM_NO_* switches of base/cpu.h: each hides its ISA and everything built on it. Run plain
// and under each switch (tests/quant/CMakeLists.txt); the expectations follow the environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include <hwy/targets.h>

#include "base/cpu.h"
#include "quant/packed.h"
#include "quant/type_traits.h"

namespace loom {
namespace {

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

TEST(CpuSwitches, HiddenIsasStayHidden) {
  const CpuFeatures& f = cpu_features();
  if (env_set("LOOM_FORCE_SCALAR")) {
    EXPECT_FALSE(f.simd);
    EXPECT_FALSE(f.has_avx2_set());
    EXPECT_FALSE(f.neon_fhm);
    EXPECT_STREQ(f.isa_extras(), "");
    return;
  }
  if (env_set("LOOM_NO_AVX2")) {
    EXPECT_FALSE(f.has_avx2_set());
    EXPECT_FALSE(f.has_avx_vnni_set());
    EXPECT_FALSE(f.has_avx512_vnni_set());
    EXPECT_FALSE(f.has_amx_int8_set());
    EXPECT_FALSE(f.avx2);
    EXPECT_FALSE(f.avx_vnni);
    EXPECT_FALSE(f.avx512f);
  }
  if (env_set("LOOM_NO_AVX512")) {
    EXPECT_FALSE(f.has_avx512_vnni_set());
    EXPECT_FALSE(f.has_amx_int8_set());
    EXPECT_FALSE(f.avx512f);
  }
  if (env_set("LOOM_NO_AVX_VNNI")) {
    EXPECT_FALSE(f.avx_vnni);
    EXPECT_FALSE(f.has_avx_vnni_set());
  }
  if (env_set("LOOM_NO_AMX")) {
    EXPECT_FALSE(f.amx_int8);
  }
  if (env_set("LOOM_NO_DOTPROD")) {
    EXPECT_FALSE(f.neon_dotprod);
    EXPECT_FALSE(f.neon_i8mm);
  }
  if (env_set("LOOM_NO_I8MM")) {
    EXPECT_FALSE(f.neon_i8mm);
  }
  if (env_set("LOOM_NO_FHM")) {
    EXPECT_FALSE(f.neon_fhm);
  }
  EXPECT_TRUE(!f.neon_i8mm || f.neon_dotprod);  // the i8mm kernels use SDOT too
#if defined(__aarch64__)
  EXPECT_STREQ(f.isa_level(), !f.simd ? "scalar" : f.neon_i8mm ? "neon-i8mm" : f.neon_dotprod ? "neon-dotprod" : "neon");
  EXPECT_STREQ(f.isa_extras(), f.simd && f.neon_fhm ? "+fhm" : "");  // F16 by FMLAL
#else
  EXPECT_FALSE(f.neon_fhm);
  EXPECT_STREQ(f.isa_extras(), "");
#endif
#if defined(__x86_64__)
  // Highway's targets follow (cpu_features() above applied the switches).
  const int64_t hwy_targets = hwy::SupportedTargets();
  if (env_set("LOOM_NO_AVX2")) {
    EXPECT_EQ(hwy_targets & (HWY_AVX2 | HWY_AVX3 | HWY_AVX3_DL), 0);
  }
  if (env_set("LOOM_NO_AVX512")) {
    EXPECT_EQ(hwy_targets & (HWY_AVX3 | HWY_AVX3_DL), 0);
  }
  if (f.has_avx2_set()) {
    EXPECT_NE(hwy_targets & HWY_AVX2, 0);
  }
#endif
}

// Model loading packs a matrix where the CPU has a packed kernel for its type: on any x86-64 CPU
// with the AVX2 set that holds for every type with a 256-bit kernel (AVX2, AVX-VNNI, AVX-512 or
// AMX run it), on AArch64 for every type of packed_neon.cpp, and for none without SIMD.
TEST(CpuSwitches, PackedKernelsFollowTheIsas) {
  const CpuFeatures& f = cpu_features();
  for (const quant::TypeTraits& tt : quant::all_type_traits()) {
    if (!tt.packable()) continue;
#if defined(__x86_64__)
    if (quant::detail::packed_avx2_has_kernel(tt.type)) {
      EXPECT_EQ(quant::packed_kernels_available(tt.type), f.has_avx2_set()) << tt.name;
    } else {
      EXPECT_EQ(quant::packed_kernels_available(tt.type), f.has_avx512_vnni_set()) << tt.name;
    }
#elif defined(__aarch64__)
    // NEON is baseline: plain, dotprod or i8mm kernels run wherever SIMD is allowed.
    EXPECT_EQ(quant::packed_kernels_available(tt.type), quant::detail::packed_neon_has_kernel(tt.type) && f.simd) << tt.name;
#else
    EXPECT_FALSE(quant::packed_kernels_available(tt.type)) << tt.name;
#endif
  }
  (void)f;
}

}  // namespace
}  // namespace loom
