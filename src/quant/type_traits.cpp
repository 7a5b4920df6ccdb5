// The table of type facts (type_traits.h). One TypeEntry per type loom knows more about than its
// geometry; name, block size and bytes come from gguf/tensor_type_table.h. To add a type: write
// its scalar functions (dequantize_row, quantize_row, vec_dot with the signatures of
// type_traits.h), add an entry below naming them and its vec_dot_type, then plug in kernels
// per set and a packed layout as they come (docs/design.md, "Adding a tensor type").
#include "quant/type_traits.h"

#include <array>

#include "base/cpu.h"
#include "base/simd.h"
#include "gguf/tensor_type_table.h"
#include "quant/iq_kernels.h"
#include "quant/iq_quantize.h"
#include "quant/iq_ref.h"
#include "quant/kernels.h"
#include "quant/new_tile_kernels.h"
#include "quant/packed.h"
#include "quant/packed_layout.h"
#include "quant/small_types.h"

namespace loom::quant {
namespace {

namespace sc = detail::scalar;
namespace hw = detail::highway;

// The kernel sets of other architectures are compiled out: their names become null. AVX2(fn)
// names detail::avx2::fn, X86(fn) any detail::fn of an x86-only file (X86(ns::fn) for a nested
// namespace), NEON(fn) detail::neon::fn.
#if defined(__x86_64__)
#define AVX2(fn) detail::avx2::fn
#define X86(fn) detail::fn
#else
#define AVX2(fn) nullptr
#define X86(fn) nullptr
#endif
#if defined(__aarch64__)
#define NEON(fn) detail::neon::fn
#else
#define NEON(fn) nullptr
#endif

// NEON_PK(t): the three AArch64 packed kernels (packed_neon.cpp) added to a type's packed traits.
#if defined(__aarch64__)
constexpr PackedTraits neon_packed(PackedTraits p) {
  p.neon_i8mm = detail::packed_gemm_neon_i8mm;
  p.neon_dot = detail::packed_gemm_neon_dot;
  p.neon = detail::packed_gemm_neon;
  return p;
}
#else
constexpr PackedTraits neon_packed(PackedTraits p) { return p; }
#endif

// The packed kernels of one type that take no TensorType argument, adapted to PackedGemmFn.
#if defined(__x86_64__)
template <void (*F)(int64_t, int64_t, const void*, int64_t, int64_t, const void*, size_t, int, float*, size_t)>
void untyped(TensorType, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
             size_t act_stride, int n, float* out, size_t out_stride) {
  F(rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}
#define X86_UNTYPED(fn) untyped<detail::fn>
#else
#define X86_UNTYPED(fn) nullptr
#endif

// The IQ kernels (iq_kernels.h): IQ_AVX2(fn) names iq::avx2::fn; IQ_DOT(t) the dot of type t
// with Q8_K activations, AVX-512 VNNI where the CPU has it (cpu_features() honours
// LOOM_NO_AVX512 and LOOM_FORCE_SCALAR), else AVX2 — bit-identical with each other and with the
// reference. SMALL_X86(fn) names small_simd::fn (small_types.h).
#if defined(__x86_64__)
bool iq_use_avx512() {
  static const bool z = cpu_features().has_avx512_vnni_set();
  return z;
}
template <VecDotFn Avx2, VecDotFn Avx512>
float iq_dot_x86(int64_t n, const void* w, const void* a) {
  return iq_use_avx512() ? Avx512(n, w, a) : Avx2(n, w, a);
}
#define IQ_AVX2(fn) iq::avx2::fn
#define IQ_DOT(t) iq_dot_x86<iq::avx2::vec_dot_##t##_q8_k, iq::avx512::vec_dot_##t##_q8_k>
#define SMALL_X86(fn) detail::small_simd::fn
// NEW_TILE(t): the vec_dot_tile of an issue-27 type (new_tile_kernels.h), bit-identical with the
// x86 dot above it dispatches to.
#define NEW_TILE(t) detail::new_tile::vec_dot_tile_##t
#else
#define IQ_AVX2(fn) nullptr
#define IQ_DOT(t) nullptr
#define SMALL_X86(fn) nullptr
#define NEW_TILE(t) nullptr
#endif

// quant::quantize_row of an IQ type: ggml's quantizer without an importance matrix, one row of n.
template <size_t (*F)(const float*, void*, int64_t, int64_t, const float*)>
void iq_row(const float* src, void* dst, int64_t n) {
  if (n > 0) F(src, dst, 1, n, nullptr);
}

// What a type adds to its geometry. Fields are in TypeTraits' order (designated initializers).
struct TypeEntry {
  TensorType type;
  bool weight_format = false;
  TensorType vec_dot_type = TensorType::F32;
  RowKernels ref;
  RowKernels avx2, neon, highway;  // KernelSet order
  PackedTraits packed;
};

// The 32-column block types' packed traits: tile = one block of 16 rows.
// Every one has the AVX-512 and the 256-bit (AVX-VNNI, AVX2) kernels.
constexpr PackedTraits blocks32(const detail::PackedLayout& layout, PackedAct act, PackedGemmFn amx) {
  PackedTraits p;
  p.tile_cols = detail::kPackBlock;
  p.tile_bytes = layout.tile_bytes;
  p.act = act;
  p.blocks = layout;
  p.pack = detail::pack_blocks32;
  p.ref_dot = detail::packed_ref_dot_blocks32;
  p.amx = amx;
  p.avx512 = X86(packed_gemm_avx512);
  p.avxvnni = X86(packed_gemm_avxvnni);
  p.avx2 = X86(packed_gemm_avx2);
  return p;
}
// The super-block types': tile = one 256-column super-block of 16 rows, Q8_K activations.
// Every one has the 256-bit kernels (packed_avx2.cpp) too.
constexpr PackedTraits super256(size_t tile_bytes, PackWeightsFn pack, PackedRefDotFn ref_dot, PackedGemmFn amx,
                                PackedGemmFn avx512) {
  PackedTraits p;
  p.tile_cols = 256;
  p.tile_bytes = tile_bytes;
  p.act = PackedAct::kQ8K;
  p.pack = pack;
  p.ref_dot = ref_dot;
  p.amx = amx;
  p.avx512 = avx512;
  p.avxvnni = X86(packed_gemm_avxvnni);
  p.avx2 = X86(packed_gemm_avx2);
  return p;
}
// F16 / BF16: 32 columns x 16 rows of 16-bit floats, f32 activations rounded through the type;
// AVX-512 and 256-bit (FMA) kernels.
constexpr PackedTraits float16(PackedRefDotFn ref_dot, PackedGemmFn avx512) {
  PackedTraits p;
  p.tile_cols = detail::kPackBlock;
  p.tile_bytes = detail::kLayoutF16.tile_bytes;
  p.act = PackedAct::kF32;
  p.blocks = detail::kLayoutF16;
  p.pack = detail::pack_f16;
  p.ref_dot = ref_dot;
  p.avx512 = avx512;
  p.avxvnni = X86(packed_gemm_avxvnni);
  p.avx2 = X86(packed_gemm_avx2);
  return p;
}

using TT = TensorType;
constexpr PackedGemmFn kNoKernel = nullptr;

// Omitted fields are null / false: an entry names only what the type has.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// clang-format off
constexpr TypeEntry kEntries[] = {
    {.type = TT::F32, .weight_format = true, .vec_dot_type = TT::F32,
     .ref = {sc::dequantize_f32, sc::quantize_f32, sc::vec_dot_f32},
     .highway = {nullptr, nullptr, hw::vec_dot_f32}},
    {.type = TT::F16, .weight_format = true, .vec_dot_type = TT::F16,
     .ref = {sc::dequantize_f16, sc::quantize_f16, sc::vec_dot_f16},
     .highway = {hw::dequantize_f16, hw::quantize_f16, hw::vec_dot_f16, hw::vec_dot_tile_f16},
     .packed = neon_packed(float16(detail::packed_ref_dot_f16, X86_UNTYPED(packed_gemm_f16_avx512)))},
    {.type = TT::BF16, .weight_format = true, .vec_dot_type = TT::BF16,
     .ref = {sc::dequantize_bf16, sc::quantize_bf16, sc::vec_dot_bf16},
     .highway = {hw::dequantize_bf16, hw::quantize_bf16, hw::vec_dot_bf16},
     .packed = neon_packed(float16(detail::packed_ref_dot_bf16, X86_UNTYPED(packed_gemm_bf16_avx512)))},
    {.type = TT::Q4_0, .weight_format = true, .vec_dot_type = TT::Q8_0,
     .ref = {sc::dequantize_q4_0, sc::quantize_q4_0, sc::vec_dot_q4_0},
     .avx2 = {AVX2(dequantize_q4_0), nullptr, AVX2(vec_dot_q4_0), AVX2(vec_dot_tile_q4_0)},
     .neon = {nullptr, nullptr, NEON(vec_dot_q4_0), NEON(vec_dot_tile_q4_0)},
     .highway = {hw::dequantize_q4_0, nullptr, hw::vec_dot_q4_0, hw::vec_dot_tile_q4_0},
     .packed = neon_packed(blocks32(detail::kLayoutQ4_0, PackedAct::kQ8_0Blocks, X86(packed_gemm_amx)))},
    {.type = TT::Q4_1, .weight_format = true, .vec_dot_type = TT::Q8_1,
     .ref = {sc::dequantize_q4_1, sc::quantize_q4_1, sc::vec_dot_q4_1},
     .avx2 = {AVX2(dequantize_q4_1), nullptr, AVX2(vec_dot_q4_1)},
     .highway = {hw::dequantize_q4_1, nullptr, hw::vec_dot_q4_1},
     .packed = neon_packed(blocks32(detail::kLayoutQ4_1, PackedAct::kQ8_1Blocks, X86(packed_gemm_amx)))},
    {.type = TT::Q5_0, .weight_format = true, .vec_dot_type = TT::Q8_0,
     .ref = {sc::dequantize_q5_0, sc::quantize_q5_0, sc::vec_dot_q5_0},
     .avx2 = {AVX2(dequantize_q5_0), nullptr, AVX2(vec_dot_q5_0), AVX2(vec_dot_tile_q5_0)},
     .neon = {nullptr, nullptr, NEON(vec_dot_q5_0), NEON(vec_dot_tile_q5_0)},
     .highway = {hw::dequantize_q5_0, nullptr, hw::vec_dot_q5_0, hw::vec_dot_tile_q5_0},
     .packed = neon_packed(blocks32(detail::kLayoutQ5_0, PackedAct::kQ8_0Blocks, X86(packed_gemm_amx)))},
    {.type = TT::Q5_1, .weight_format = true, .vec_dot_type = TT::Q8_1,
     .ref = {sc::dequantize_q5_1, sc::quantize_q5_1, sc::vec_dot_q5_1},
     .avx2 = {AVX2(dequantize_q5_1), nullptr, AVX2(vec_dot_q5_1)},
     .highway = {hw::dequantize_q5_1, nullptr, hw::vec_dot_q5_1},
     .packed = neon_packed(blocks32(detail::kLayoutQ5_1, PackedAct::kQ8_1Blocks, X86(packed_gemm_amx)))},
    {.type = TT::Q8_0, .weight_format = true, .vec_dot_type = TT::Q8_0,
     .ref = {sc::dequantize_q8_0, sc::quantize_q8_0, sc::vec_dot_q8_0},
     .avx2 = {AVX2(dequantize_q8_0), AVX2(quantize_q8_0), AVX2(vec_dot_q8_0), AVX2(vec_dot_tile_q8_0)},
     .neon = {nullptr, nullptr, NEON(vec_dot_q8_0), NEON(vec_dot_tile_q8_0)},
     .highway = {hw::dequantize_q8_0, hw::quantize_q8_0, hw::vec_dot_q8_0, hw::vec_dot_tile_q8_0},
     .packed = neon_packed(blocks32(detail::kLayoutQ8_0, PackedAct::kQ8_0Blocks, X86(packed_gemm_amx)))},
    {.type = TT::Q8_1, .weight_format = false, .vec_dot_type = TT::Q8_1,
     .ref = {sc::dequantize_q8_1, sc::quantize_q8_1, sc::vec_dot_q8_1},
     .avx2 = {AVX2(dequantize_q8_1), AVX2(quantize_q8_1), AVX2(vec_dot_q8_1)},
     .highway = {hw::dequantize_q8_1, hw::quantize_q8_1, hw::vec_dot_q8_1}},
    {.type = TT::Q2_K, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {sc::dequantize_q2_k, sc::quantize_q2_k, sc::vec_dot_q2_k},
     .avx2 = {AVX2(dequantize_q2_k), nullptr, AVX2(vec_dot_q2_k)},
     .highway = {nullptr, nullptr, hw::vec_dot_q2_k},
     .packed = super256(detail::PackedQ2K::kTileBytes, detail::pack_q2k, detail::packed_ref_dot_q2k, kNoKernel,
                        X86_UNTYPED(packed_gemm_q2k_avx512))},
    {.type = TT::Q3_K, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {sc::dequantize_q3_k, sc::quantize_q3_k, sc::vec_dot_q3_k},
     .avx2 = {AVX2(dequantize_q3_k), nullptr, AVX2(vec_dot_q3_k)},
     .highway = {nullptr, nullptr, hw::vec_dot_q3_k},
     .packed = super256(detail::PackedQ3K::kTileBytes, detail::pack_q3k, detail::packed_ref_dot_q3k, kNoKernel,
                        X86_UNTYPED(packed_gemm_q3k_avx512))},
    {.type = TT::Q4_K, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {sc::dequantize_q4_k, sc::quantize_q4_k, sc::vec_dot_q4_k},
     .avx2 = {AVX2(dequantize_q4_k), nullptr, AVX2(vec_dot_q4_k)},
     .neon = {nullptr, nullptr, NEON(vec_dot_q4_k)},
     .highway = {nullptr, nullptr, hw::vec_dot_q4_k},
     .packed = neon_packed(super256(detail::PackedQ4K::kTileBytes, detail::pack_q4k, detail::packed_ref_dot_q4k,
                                    X86(packed_gemm_amx_q4k), X86_UNTYPED(packed_gemm_q4k_avx512)))},
    {.type = TT::Q5_K, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {sc::dequantize_q5_k, sc::quantize_q5_k, sc::vec_dot_q5_k},
     .avx2 = {AVX2(dequantize_q5_k), nullptr, AVX2(vec_dot_q5_k)},
     .highway = {nullptr, nullptr, hw::vec_dot_q5_k},
     .packed = neon_packed(super256(detail::PackedQ5K::kTileBytes, detail::pack_q5k, detail::packed_ref_dot_q5k,
                        X86(packed_gemm_amx_q4k), X86_UNTYPED(packed_gemm_q5k_avx512)))},
    {.type = TT::Q6_K, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {sc::dequantize_q6_k, sc::quantize_q6_k, sc::vec_dot_q6_k},
     .avx2 = {AVX2(dequantize_q6_k), nullptr, AVX2(vec_dot_q6_k)},
     .neon = {nullptr, nullptr, NEON(vec_dot_q6_k)},
     .highway = {nullptr, nullptr, hw::vec_dot_q6_k},
     .packed = neon_packed(super256(detail::PackedQ6K::kTileBytes, detail::pack_q6k, detail::packed_ref_dot_q6k, kNoKernel,
                        X86_UNTYPED(packed_gemm_q6k_avx512)))},
    {.type = TT::Q8_K, .weight_format = false, .vec_dot_type = TT::Q8_K,
     .ref = {sc::dequantize_q8_k, sc::quantize_q8_k, sc::vec_dot_q8_k},
     .avx2 = {AVX2(dequantize_q8_k), AVX2(quantize_q8_k), AVX2(vec_dot_q8_k)},
     .highway = {nullptr, hw::quantize_q8_k, hw::vec_dot_q8_k}},
    {.type = TT::IQ4_NL, .weight_format = true, .vec_dot_type = TT::Q8_0,
     .ref = {sc::dequantize_iq4_nl, sc::quantize_iq4_nl, sc::vec_dot_iq4_nl},
     .avx2 = {AVX2(dequantize_iq4_nl), nullptr, AVX2(vec_dot_iq4_nl), AVX2(vec_dot_tile_iq4_nl)},
     .neon = {nullptr, nullptr, NEON(vec_dot_iq4_nl), NEON(vec_dot_tile_iq4_nl)},
     .highway = {hw::dequantize_iq4_nl, nullptr, hw::vec_dot_iq4_nl, hw::vec_dot_tile_iq4_nl},
     .packed = neon_packed(blocks32(detail::kLayoutIQ4_NL, PackedAct::kQ8_0Blocks, X86(packed_gemm_amx)))},
    {.type = TT::IQ4_XS, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {sc::dequantize_iq4_xs, sc::quantize_iq4_xs, sc::vec_dot_iq4_xs},
     .avx2 = {AVX2(dequantize_iq4_xs), nullptr, AVX2(vec_dot_iq4_xs)},
     .highway = {nullptr, nullptr, hw::vec_dot_iq4_xs},
     .packed = neon_packed(super256(detail::PackedIQ4XS::kTileBytes, detail::pack_iq4xs, detail::packed_ref_dot_iq4xs,
                        X86(packed_gemm_amx_q4k), X86_UNTYPED(packed_gemm_iq4xs_avx512)))},

    // The IQ1/IQ2/IQ3 lattice formats (iq_ref.h), Q8_K activations as ggml-cpu pairs them. AVX2
    // set: the AVX2 dequantizers and, per call, the AVX-512 VNNI dot where the CPU has it (both
    // bit-identical with the reference, so the choice never changes a result).
    // quantize_row (no importance matrix: quant::quantize_row has no imatrix argument) is ggml's
    // quantizer with a null imatrix, one row of n, where ggml has a fallback weighting for it
    // (IQ2_S, IQ3_XXS, IQ3_S, IQ1_M: what ggml_quantize_chunk writes without one). IQ2_XXS,
    // IQ2_XS and IQ1_S have no quantize_row: ggml cannot make them without an importance matrix
    // (ggml_quantize_requires_imatrix), and a uniform importance would write bytes no ggml tool
    // writes, so they are not writable through the row API; loom quantize makes them with
    // quantize_chunk and the file's imatrix (iq_quantize.h).
    {.type = TT::IQ2_XXS, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {ref::dequantize_row_iq2_xxs, nullptr, ref::vec_dot_iq2_xxs_q8_k},
     .avx2 = {IQ_AVX2(dequantize_row_iq2_xxs), nullptr, IQ_DOT(iq2_xxs), NEW_TILE(iq2_xxs)}},
    {.type = TT::IQ2_XS, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {ref::dequantize_row_iq2_xs, nullptr, ref::vec_dot_iq2_xs_q8_k},
     .avx2 = {IQ_AVX2(dequantize_row_iq2_xs), nullptr, IQ_DOT(iq2_xs), NEW_TILE(iq2_xs)}},
    {.type = TT::IQ3_XXS, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {ref::dequantize_row_iq3_xxs, iq_row<quantize_iq3_xxs>, ref::vec_dot_iq3_xxs_q8_k},
     .avx2 = {IQ_AVX2(dequantize_row_iq3_xxs), nullptr, IQ_DOT(iq3_xxs), NEW_TILE(iq3_xxs)}},
    {.type = TT::IQ1_S, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {ref::dequantize_row_iq1_s, nullptr, ref::vec_dot_iq1_s_q8_k},
     .avx2 = {IQ_AVX2(dequantize_row_iq1_s), nullptr, IQ_DOT(iq1_s), NEW_TILE(iq1_s)}},
    {.type = TT::IQ3_S, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {ref::dequantize_row_iq3_s, iq_row<quantize_iq3_s>, ref::vec_dot_iq3_s_q8_k},
     .avx2 = {IQ_AVX2(dequantize_row_iq3_s), nullptr, IQ_DOT(iq3_s), NEW_TILE(iq3_s)}},
    {.type = TT::IQ2_S, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {ref::dequantize_row_iq2_s, iq_row<quantize_iq2_s>, ref::vec_dot_iq2_s_q8_k},
     .avx2 = {IQ_AVX2(dequantize_row_iq2_s), nullptr, IQ_DOT(iq2_s), NEW_TILE(iq2_s)}},
    {.type = TT::IQ1_M, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {ref::dequantize_row_iq1_m, iq_row<quantize_iq1_m>, ref::vec_dot_iq1_m_q8_k},
     .avx2 = {IQ_AVX2(dequantize_row_iq1_m), nullptr, IQ_DOT(iq1_m), NEW_TILE(iq1_m)}},

    // Ternary, 1-/2-bit and FP4 formats (small_types.h): Q8_K activations for TQ1_0/TQ2_0, Q8_0
    // for MXFP4/Q1_0/Q2_0, as ggml-cpu pairs them. AVX2 set: AVX2 dequantizers and the x86 dots
    // (small_simd::*_x86: AVX-512 VNNI where the CPU has it, else AVX2). The dots differ from the
    // reference by float rounding only; the tile kernels (NEW_TILE) reproduce the dispatched dot's
    // float steps per pair (batch invariant). quantize_row: ggml's reference quantizers.
    {.type = TT::TQ1_0, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {ref::dequantize_row_tq1_0, ref::quantize_row_tq1_0, ref::vec_dot_tq1_0},
     .avx2 = {SMALL_X86(dequantize_row_tq1_0_avx2), nullptr, SMALL_X86(vec_dot_tq1_0_x86), NEW_TILE(tq1_0)}},
    {.type = TT::TQ2_0, .weight_format = true, .vec_dot_type = TT::Q8_K,
     .ref = {ref::dequantize_row_tq2_0, ref::quantize_row_tq2_0, ref::vec_dot_tq2_0},
     .avx2 = {SMALL_X86(dequantize_row_tq2_0_avx2), nullptr, SMALL_X86(vec_dot_tq2_0_x86), NEW_TILE(tq2_0)}},
    {.type = TT::MXFP4, .weight_format = true, .vec_dot_type = TT::Q8_0,
     .ref = {ref::dequantize_row_mxfp4, ref::quantize_row_mxfp4, ref::vec_dot_mxfp4},
     .avx2 = {SMALL_X86(dequantize_row_mxfp4_avx2), nullptr, SMALL_X86(vec_dot_mxfp4_x86), NEW_TILE(mxfp4)},
     // IQ4_NL's tile with MXFP4's table (packed_layout.h), IQ4_NL's kernels on AArch64 too
     // (packed_neon.cpp); no AMX kernel.
     .packed = neon_packed(blocks32(detail::kLayoutMXFP4, PackedAct::kQ8_0Blocks, nullptr))},
    {.type = TT::Q1_0, .weight_format = true, .vec_dot_type = TT::Q8_0,
     .ref = {ref::dequantize_row_q1_0, ref::quantize_row_q1_0, ref::vec_dot_q1_0},
     .avx2 = {SMALL_X86(dequantize_row_q1_0_avx2), nullptr, SMALL_X86(vec_dot_q1_0_x86), NEW_TILE(q1_0)}},
    {.type = TT::Q2_0, .weight_format = true, .vec_dot_type = TT::Q8_0,
     .ref = {ref::dequantize_row_q2_0, ref::quantize_row_q2_0, ref::vec_dot_q2_0},
     .avx2 = {SMALL_X86(dequantize_row_q2_0_avx2), nullptr, SMALL_X86(vec_dot_q2_0_x86), NEW_TILE(q2_0)}},

    // Read but not computed (no reference functions, so computable is false and loading refuses
    // it by name): NVFP4, a GPU format; its vec_dot_type is llama.cpp CPU backend's pairing.
    {.type = TT::NVFP4, .weight_format = true, .vec_dot_type = TT::Q8_0},
};
// clang-format on
#pragma GCC diagnostic pop

#undef AVX2
#undef X86
#undef X86_UNTYPED
#undef NEON
#undef IQ_AVX2
#undef IQ_DOT
#undef SMALL_X86
#undef NEW_TILE

struct Table {
  std::array<TypeTraits, gguf_types::kIdLimit> by_id;
  TypeTraits unknown;

  Table() {
    for (uint32_t id = 0; id < gguf_types::kIdLimit; ++id) {
      TypeTraits& t = by_id[id];
      t.type = static_cast<TensorType>(id);
      t.name = "unknown";
    }
    unknown.name = "unknown";
    for (const gguf_types::Entry& g : gguf_types::kTable) {
      TypeTraits& t = by_id[static_cast<uint32_t>(g.type)];
      t.name = g.info.name;
      t.block_size = g.info.block_size;
      t.type_size = g.info.block_bytes;
      t.is_quantized = g.info.block_size > 1;
    }
    for (const TypeEntry& e : kEntries) {
      TypeTraits& t = by_id[static_cast<uint32_t>(e.type)];
      t.weight_format = e.weight_format;
      t.vec_dot_type = e.vec_dot_type;
      t.ref = e.ref;
      t.computable = t.block_size > 0 && e.ref.dequantize_row && e.ref.vec_dot;
      t.kernels[int(KernelSet::kAvx2)] = e.avx2;
      t.kernels[int(KernelSet::kNeonDot)] = e.neon;
      t.kernels[int(KernelSet::kHighway)] = e.highway;
      t.packed = e.packed;
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

std::span<const TypeTraits> all_type_traits() { return table().by_id; }

const TypeTraits& type_traits(TensorType t) {
  const Table& tab = table();
  const auto id = static_cast<uint32_t>(t);
  return id < tab.by_id.size() ? tab.by_id[id] : tab.unknown;
}

bool kernel_set_enabled(KernelSet s) {
  switch (s) {
    case KernelSet::kAvx2: {
#if defined(__x86_64__)
      // cpu_features() already honours LOOM_FORCE_SCALAR.
      static const bool avx2 = cpu_features().has_avx2_set();
      return avx2;
#else
      return false;
#endif
    }
    case KernelSet::kNeonDot: {
#if defined(__aarch64__)
      // ARMv8.2 dotprod (cpu_features() clears it under LOOM_FORCE_SCALAR).
      static const bool dot = cpu_features().neon_dotprod;
      return dot;
#else
      return false;
#endif
    }
    case KernelSet::kHighway: {
      // False only under LOOM_FORCE_SCALAR. simd_enabled() also applies the environment
      // switches to Highway's target choice before its first dispatch.
      static const bool hwy = simd_enabled();
      return hwy;
    }
  }
  return false;
}

const detail::PackedLayout& detail::PackedLayout::of(TensorType t) { return type_traits(t).packed.blocks; }

}  // namespace loom::quant
