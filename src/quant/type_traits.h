// One table of what loom knows about each GGUF tensor type (the role of ggml's type_traits and
// type_traits_cpu): geometry (from gguf/tensor_type_table.h, not repeated), whether loom computes
// with it, the activation format its dot products take, the scalar reference functions, the SIMD
// kernels of each kernel set, and its packed (row-interleaved) layout. quant.cpp and packed.cpp
// dispatch through it; no other file switches on a type to learn a fact about it. Adding a type
// is one entry in type_traits.cpp plus the functions it names (docs/design.md, "Adding a tensor
// type").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "gguf/tensor_type.h"

namespace loom::quant {

// Row functions: n elements (a whole number of blocks, checked by the caller), any alignment.
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
// w in the weight type, a in its vec_dot_type.
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);
// See quant::vec_dot_tile. A kernel set's tile kernel computes each pair bit for bit as that
// set's vec_dot of the type (batch invariance), so a set has one only where it has the vec_dot.
using VecDotTileFn = void (*)(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride,
                              int n_rows_a, float* out, size_t out_stride);

// One implementation's functions for one type; null where it has none.
struct RowKernels {
  DequantizeRowFn dequantize_row = nullptr;
  QuantizeRowFn quantize_row = nullptr;
  VecDotFn vec_dot = nullptr;
  VecDotTileFn vec_dot_tile = nullptr;
};

// The SIMD kernel sets, in dispatch order: for each operation the first set this CPU runs that
// has a kernel for the type wins, else the scalar reference does. A set of another architecture
// has only null entries (type_traits.cpp compiles its names out).
enum class KernelSet : uint8_t {
  kAvx2,     // x86-64 AVX2 + FMA + F16C int8 kernels (kernels_avx2.cpp, kernels_avx2_k.cpp)
  kNeonDot,  // AArch64 ARMv8.2 dotprod (kernels_neon.cpp)
  kHighway,  // Google Highway, best target of the CPU (kernels_hwy.cpp)
};
inline constexpr int kKernelSets = 3;
// Whether dispatch uses the set on this CPU: AVX2 (cpu_features().has_avx2_set()), dotprod
// (cpu_features().neon_dotprod), Highway (simd_enabled()); all false under LOOM_FORCE_SCALAR.
// Read once.
bool kernel_set_enabled(KernelSet s);

// ---- packed (row-interleaved) layouts: quant/packed.h ----------------------------------------

namespace detail {
struct PackJob;  // packed_layout.h

// The 32-column block types' tile (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q8_0; F16/BF16 use only
// tile_bytes). packed_layout.h draws it:
//   f16 d[16], [f16 m[16]], u8 q[chunks][16][4], [u64 qh[chunks][2]]
// The unsigned level u of an element is its byte (Q8_0: the int8 + 128; on AArch64 the int8,
// bias 0), its nibble, its nibble plus 16 · fifth bit, or kIq4nlBiased[nibble] (IQ4_NL; MXFP4:
// kMxfp4Biased); the value is (u - bias) · d, plus m for the types with a minimum (bias 0).
// Every tile has the file's bytes for its 16 blocks, except MXFP4's E8M0 scale bytes, stored as
// the f16 of 2^(e - 128) (the table holds twice the E2M1 values): exact for e in 104..143, which
// quant::can_pack_data checks.
struct PackedLayout {
  static constexpr size_t kScaleBytes = 32;  // f16 d[16]
  int chunks;                                // 64-byte chunks of quants per tile
  bool nibbles;                              // each byte holds two weights (low: element 4j+k, high: 16+4j+k)
  int32_t bias;                              // value = u - bias
  size_t tile_bytes;                         // everything above
  bool has_min;                              // f16 m[16] after d
  bool fifth_bit;                            // qh after the chunks
  bool lut;                                  // nibbles index a biased table: kIq4nlBiased, or kMxfp4Biased with mxfp4
  bool mxfp4 = false;                        // MXFP4: the table of E2M1 values, the E8M0 scales stored as f16 d

  constexpr size_t q_offset() const { return kScaleBytes * (has_min ? 2 : 1); }
  constexpr size_t qh_offset() const { return q_offset() + 64 * size_t(chunks); }
  // The layout of a packable 32-column type (its TypeTraits::packed.blocks).
  static const PackedLayout& of(TensorType t);
};
}  // namespace detail

// The activation rows packed_gemm takes for a layout (packed.h).
enum class PackedAct : uint8_t {
  kQ8_0Blocks,  // PackedActBlock {d, Σ q, q[32]}: Q8_0's quantization
  kQ8_1Blocks,  // PackedActBlock {d, s, q[32]}: Q8_1's (types with a block minimum)
  kQ8K,         // plain Q8_K blocks (the super-block types)
  kF32,         // floats rounded through the weight type (F16, BF16)
};

// out[i * out_stride + r] = Σ_k W[r][k] · x_i[k] for weight rows r of groups [g0, g1) (packed.h).
using PackedGemmFn = void (*)(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                              const void* act, size_t act_stride, int n, float* out, size_t out_stride);
// The reference's one output: weight row r of the group at grp against one activation row.
using PackedRefDotFn = float (*)(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols);
// Fills the groups [job.g0, job.g1) of the packed copy (already zeroed).
using PackWeightsFn = void (*)(const detail::PackJob& job);

struct PackedTraits {
  int tile_cols = 0;      // columns per tile (a 32-column block or a 256-column super-block); 0: no layout
  size_t tile_bytes = 0;  // bytes of one 16-row tile
  PackedAct act = PackedAct::kQ8_0Blocks;
  detail::PackedLayout blocks{};  // the 32-column block types (and F16/BF16: tile_bytes only)
  PackWeightsFn pack = nullptr;
  PackedRefDotFn ref_dot = nullptr;  // the scalar definition (quant::ref::packed_gemm)
  // The x86 kernels, tried in this order where the CPU has the ISA (null elsewhere or where there
  // is none): AMX-INT8 (for n >= 16: runs of 16 activation rows, the rest through its AVX-512
  // kernel), AVX-512 VNNI (F16/BF16: AVX-512F, checked as VNNI like the others), AVX-VNNI, AVX2.
  PackedGemmFn amx = nullptr;
  PackedGemmFn avx512 = nullptr;
  PackedGemmFn avxvnni = nullptr;
  PackedGemmFn avx2 = nullptr;
  // The AArch64 kernels (packed_neon.cpp, the same layout), tried in this order where the CPU has
  // the feature: i8mm (SMMLA for runs of 2 and 4 activation rows, SDOT for single rows), dotprod
  // (SDOT), plain NEON (ARMv8.0: SMULL + SADALP).
  PackedGemmFn neon_i8mm = nullptr;
  PackedGemmFn neon_dot = nullptr;
  PackedGemmFn neon = nullptr;
};

// ---- the table -----------------------------------------------------------------------------

struct TypeTraits {
  TensorType type = TensorType::F32;
  std::string_view name;      // gguf's name ("q4_k"); "unknown" for ids that are not ggml types
  int64_t block_size = 0;     // elements per block (0: not a ggml type)
  int64_t type_size = 0;      // bytes per block
  bool is_quantized = false;  // a block format (ggml_is_quantized: block_size > 1)
  // A format model weights are stored in (llama-quantize writes it, a model may hold it); false
  // for the activation-only formats Q8_1 and Q8_K and for the integer types.
  bool weight_format = false;
  // loom dequantizes it and computes dots with it (ref has dequantize_row and vec_dot):
  // quant::is_supported. Models with other types are refused at load.
  bool computable = false;
  TensorType vec_dot_type = TensorType::F32;  // the activation format its dots take
  RowKernels ref;                             // the scalar references (vec_dot_tile: generic)
  RowKernels kernels[kKernelSets];            // indexed by KernelSet
  PackedTraits packed;                        // packed.tile_cols == 0: no packed layout

  const RowKernels& set(KernelSet s) const { return kernels[static_cast<int>(s)]; }
  bool packable() const { return packed.tile_cols != 0; }
};

// Every ggml type id GGUF knows (gguf/tensor_type_table.h), in id order, with the ids between
// them as "unknown" entries.
std::span<const TypeTraits> all_type_traits();
// The entry of t; for an id that is not a ggml type, an entry with block_size 0 and nothing else.
const TypeTraits& type_traits(TensorType t);

}  // namespace loom::quant
