// CPU feature detection for runtime kernel dispatch. Kernels compiled for a target (e.g. AVX2
// via __attribute__((target))) are selected only when the running CPU has those features.
#pragma once

namespace loom {

struct CpuFeatures {
  // SIMD kernels may run at all: false only under LOOM_FORCE_SCALAR, which sends every dispatch
  // (intrinsics and Highway alike) to the scalar twins.
  bool simd = false;
  // AArch64: the SDOT/UDOT int8 dot products (ARMv8.2 dotprod, Linux HWCAP_ASIMDDP), the int8
  // matrix multiply-accumulate SMMLA/USDOT (FEAT_I8MM, HWCAP2_I8MM: Cortex-A510/A710/X2 on,
  // Neoverse V1/N2, Apple M2 on), FP16 arithmetic (FEAT_FP16, HWCAP_ASIMDHP) and SVE. Read from
  // getauxval on Linux and Android, sysctl hw.optional.arm.FEAT_* on macOS / iOS.
  bool neon_dotprod = false;
  bool neon_i8mm = false;  // only with neon_dotprod (the i8mm kernels use SDOT too)
  bool neon_fp16 = false;
  // FMLAL / FMLAL2 (FEAT_FHM, HWCAP_ASIMDFHM, "fp16fml"; Cortex-A510/A710/X2 on, Neoverse V1/N2,
  // Apple M1 on; not Cortex-A55/A76 nor Neoverse N1): f16 x f16 products added to f32
  // accumulators, which the F16 weight kernels use in place of FCVTL + FMLA (the same bits).
  bool neon_fhm = false;
  bool sve = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;   // VPDPBUSD on 512-bit registers (EVEX)
  bool avx_vnni = false;     // VPDPBUSD on 256-bit registers (VEX, Alder Lake / Sapphire Rapids on)
  bool zmm_enabled = false;  // the OS saves the AVX-512 register state (XCR0 bits 5-7)
  // AMX tiles with int8 dot products, and the kernel granted this process the tile state
  // (Linux arch_prctl ARCH_REQ_XCOMP_PERM, requested once at detection).
  bool amx_int8 = false;
  bool amx_bf16 = false;  // AMX tiles with bf16 dot products (same permission as amx_int8)
  // True when the AVX2 kernel set (AVX2 + FMA + F16C) may run.
  bool has_avx2_set() const { return avx2 && fma && f16c; }
  // The 512-bit int8 kernel set: AVX-512 F/BW/VL + VNNI on top of the AVX2 set.
  bool has_avx512_vnni_set() const { return has_avx2_set() && zmm_enabled && avx512f && avx512bw && avx512vl && avx512vnni; }
  // The 256-bit int8 kernel set: AVX2 set + AVX-VNNI.
  bool has_avx_vnni_set() const { return has_avx2_set() && avx_vnni; }
  // AMX-INT8 plus the AVX-512 set its kernels use around the tile instructions.
  bool has_amx_int8_set() const { return has_avx512_vnni_set() && amx_int8; }
  // The widest kernel family these features select, for reports (`loom bench`, bench/types.sh):
  // "amx", "avx512-vnni", "avx-vnni", "avx2", "sse4" (x86 below AVX2), "neon-i8mm" (AArch64 with
  // dotprod and i8mm: SMMLA prompt kernels), "neon-dotprod", "neon" (ARMv8.0: plain NEON), or
  // "scalar" (LOOM_FORCE_SCALAR).
  const char* isa_level() const;
  // What the reports add after isa_level for kernels outside that ladder: "+fhm" on AArch64 where
  // F16 weights run by FMLAL (neon_fhm), else "".
  const char* isa_extras() const;
};

// Detected once (this also applies the environment switches to Highway's target choice, so call
// it before the first HWY_DYNAMIC_DISPATCH: base/simd.h's simd_enabled() does); LOOM_FORCE_SCALAR=1 in the environment forces every dispatch to the scalar
// reference kernels (used by tests and to debug a suspected SIMD bug). The LOOM_NO_* switches hide
// an ISA and everything built on it, so that one machine runs the kernels of smaller ones:
//   LOOM_NO_AVX512=1    AVX-512 (and AMX, whose kernels need it; Highway's AVX3 targets too): the
//                       256-bit kernels of a machine that has both;
//   LOOM_NO_AVX_VNNI=1  AVX-VNNI: with LOOM_NO_AVX512 the plain AVX2 kernels (maddubs) of an AMD
//                       Zen 2/3 or Haswell..Skylake client;
//   LOOM_NO_AVX2=1      the AVX2 set (AVX2, FMA, F16C) and everything above it; Highway's best
//                       target is then SSE4;
//   LOOM_NO_AMX=1       AMX;
//   LOOM_NO_I8MM=1      AArch64 i8mm (SMMLA): the dotprod kernels of a Cortex-A76 / Apple M1;
//   LOOM_NO_DOTPROD=1   AArch64 dotprod and i8mm: the plain NEON kernels of an ARMv8.0 core;
//   LOOM_NO_FHM=1       AArch64 FMLAL (FEAT_FHM): F16 weights by FCVTL + FMLA, as on a core
//                       without it (Cortex-A53, A55 without FP16).
const CpuFeatures& cpu_features();
int cpu_count();

}  // namespace loom
