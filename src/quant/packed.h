// Row-interleaved ("packed") copies of weight matrices for the int8 matrix kernels.
//
// The GGUF layout stores a matrix row after row, so a dot-product kernel reads one row at a time
// and reduces horizontally. The packed layout interleaves kPackRows = 16 rows so that one 64-byte
// load holds 4 consecutive weights of each of the 16 rows: VPDPBUSD then computes 16 row dots at
// once against a broadcast of 4 activation bytes, with no horizontal reduction, one sequential
// memory stream for 16 rows, and each decoded weight register reused across several activation
// rows in prompt processing. Packing is done once at model load (model/), the mmapped original is
// left untouched.
//
// Layout. Rows are taken 16 at a time (a "group"; the last group is padded with zero rows).
// A group is cols / 32 "tiles", one per 32-column block, in column order. A tile is
//   f16 d[16]            the block scale of each of the 16 rows
//   u8  q[chunks][16][4] chunk j holds, for row r, 4 bytes (one 32-bit lane per row)
// Q4_0 (4 chunks): lane r of chunk j = bytes 4j..4j+3 of row r's qs, unchanged: the low nibbles
//   are elements 4j..4j+3, the high nibbles elements 16+4j..16+4j+3, level = nibble - 8.
// Q8_0 (8 chunks): lane r of chunk j = row r's qs[4j..4j+3] + 128 (as u8): elements 4j..4j+3,
//   level = byte - 128 (on AArch64 the int8 levels as they are, bias 0: kQ8_0PackedBias).
// Either way the unsigned byte u and the signed level differ by a constant bias (8 or 128).
// Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4: Q4_0's tile, with f16 m[16] after d for the types with a
//   minimum, a byte of fifth bits per row and chunk after the chunks for Q5_0/Q5_1, and nibbles
//   indexing the IQ4_NL or the MXFP4 table (PackedLayout in packed_layout.h). Every tile has the
//   file's bytes, but for MXFP4's E8M0 scales, which become f16 (can_pack_data).
// Q4_K: see PackedQ4K in packed_layout.h (super-block scales, 6-bit sub-block scales and mins,
//   nibbles in 64-byte chunks as above); activations are Q8_K blocks, integer sums per super-block.
// Q5_K: see PackedQ5K: Q4_K's tile followed by a plane of fifth bits, one byte per row and chunk.
// Q6_K: see PackedQ6K (6-bit levels one per byte, int8 scales per 16 columns), Q8_K activations.
// IQ4_XS: see PackedIQ4XS (Q4_K's nibble order, int8 sub-block scales), Q8_K activations.
// Q2_K, Q3_K: see PackedQ2K / PackedQ3K (2-bit planes four to a byte, Q3_K's third bits in a
//   plane of their own), Q8_K activations.
// F16 / BF16: no scales; a tile is 32 columns x 16 rows of f16 (bf16), column after column
//   (column c of the tile holds the 16 rows' weights at that column: one vcvtph2ps, or a widen
//   and a shift for bf16, gives a register of 16 rows).
//
// Activations are quantized per row (on AArch64 placed in panels of 4 and 2 rows for the 32-column
// block types: packed_act_panels.h) into PackedAct blocks {f32 d; i32 sum; i8 q[32]}: d and q are
// exactly the Q8_0 quantization llama.cpp uses for these weight types (d rounded through f16),
// sum = Σ q (Q4_1/Q5_1: Q8_1's quantization, and the second word is its f16 s as a float). A block product is then d_w · d_a · (Σ u·q − bias · sum), with the integer part exact,
// so results equal quant::vec_dot's to float rounding (accumulation order and FMA differ).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor_type.h"

namespace loom::quant {

constexpr int kPackRows = 16;

// Weight types with a packed layout (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, F16, BF16,
// Q2_K..Q6_K, IQ4_XS).
bool can_pack(TensorType t);
// Whether these rows (row r at src + r * src_row_bytes) can be packed: can_pack(t), whole 32-column
// blocks, and for MXFP4 every block's scale representable in the tile's f16 (E8M0 exponents
// 104..143, or a block of zeros); model loading keeps the GGUF layout of a matrix that cannot.
bool can_pack_data(TensorType t, const void* src, size_t src_row_bytes, int64_t rows, int64_t cols);
// True when this CPU has a packed kernel for t: on x86-64 with the AVX2 set (AVX2 + FMA + F16C)
// every packable type has one (AVX-512 VNNI, AVX-VNNI or plain AVX2; AMX-INT8 adds to AVX-512);
// on AArch64 the types of packed_neon.cpp (NEON is baseline there: i8mm, dotprod or plain); none
// under LOOM_FORCE_SCALAR or elsewhere: packing would only feed the scalar reference, and model
// loading keeps the GGUF layout.
bool packed_kernels_available(TensorType t);
// Bytes of the packed copy of a rows x cols matrix of type t (can_pack(t), cols % 32 == 0).
size_t packed_size(TensorType t, int64_t rows, int64_t cols);
// Bytes of one packed tile group row-range: the packed stride of one group.
size_t packed_group_bytes(TensorType t, int64_t cols);
// Packs rows [0, rows) of a matrix whose row r starts at src + r * src_row_bytes into dst
// (packed_size bytes). Groups [g0, g1) only, so packing can be split across threads.
void pack_weights(TensorType t, const void* src, size_t src_row_bytes, int64_t rows, int64_t cols, void* dst, int64_t g0,
                  int64_t g1);

// Bytes of one activation row of cols elements in the packed activation format for weights t.
size_t packed_act_row_bytes(TensorType t, int64_t cols);
// Converts one row of cols floats (cols % 32 == 0) into that format at dst.
void quantize_packed_act(TensorType t, const float* x, int64_t cols, void* dst);
// Quantizes rows [i0, i1) of a batch of n activation rows (row i at x + i * cols) into the batch
// layout packed_gemm reads, n * packed_act_row_bytes bytes at dst; any split of [0, n) into calls
// (and threads) gives the same bytes. A batch is its rows one after another (row i as
// quantize_packed_act writes it, at dst + i * packed_act_row_bytes), except on AArch64 for the
// 32-column block types, whose rows are interleaved in panels of 4 and 2 for the NEON prompt
// kernels (packed_act_panels.h); a batch of one row is always quantize_packed_act's.
void quantize_packed_act_rows(TensorType t, const float* x, int64_t cols, int n, int i0, int i1, void* dst);

// For activation rows i < n (a batch of n rows in that layout, act_stride =
// packed_act_row_bytes(t, cols) or more: row, or panel, i at act + i * act_stride bytes) and
// weight rows r of groups [g0, g1) with r < rows: out[i * out_stride + r] = Σ_k W[r][k] · x_i[k].
void packed_gemm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                 size_t act_stride, int n, float* out, size_t out_stride);

namespace ref {
// The scalar definition of packed_gemm over the packed layout; the SIMD kernels are tested
// against it, and it against quant::ref::vec_dot on the original rows.
void packed_gemm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                 size_t act_stride, int n, float* out, size_t out_stride);
}  // namespace ref

namespace detail {
#if defined(__x86_64__)
// The SIMD variants (x86-64 only: their definitions are compiled out elsewhere), exposed for
// tests; each may be called only when its CPU check passes
// (cpu_features().has_avx512_vnni_set() / has_avx_vnni_set()).
// The 32-column block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) with AVX-512 VNNI.
void packed_gemm_avx512(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                        const void* act, size_t act_stride, int n, float* out, size_t out_stride);
// The 32-column block types: AMX-INT8 tiles for runs of 16 activation rows, the rest through
// packed_gemm_avx512
// (cpu_features().has_amx_int8_set()).
void packed_gemm_amx(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                     size_t act_stride, int n, float* out, size_t out_stride);
// Q4_K / Q5_K / IQ4_XS: AMX-INT8 tiles for runs of 16 activation rows, the rest through
// packed_gemm_q4k_avx512 / q5k / iq4xs (cpu_features().has_amx_int8_set()).
void packed_gemm_amx_q4k(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                         const void* act, size_t act_stride, int n, float* out, size_t out_stride);
// Q4_K (and Q5_K) weights against Q8_K activations with AVX-512 VNNI (any n).
void packed_gemm_q4k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride);
void packed_gemm_q5k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride);
// Q2_K, Q3_K and IQ4_XS weights against Q8_K activations with AVX-512 VNNI (any n).
void packed_gemm_q2k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride);
void packed_gemm_q3k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride);
void packed_gemm_iq4xs_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                              size_t act_stride, int n, float* out, size_t out_stride);
// Q6_K weights against Q8_K activations with AVX-512 VNNI (any n).
void packed_gemm_q6k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride);
// F16 / BF16 weights with AVX-512 F (any n).
void packed_gemm_f16_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride);
void packed_gemm_bf16_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                             size_t act_stride, int n, float* out, size_t out_stride);
// 256-bit kernels (packed_avx2.cpp) for the types packed_avx2_has_kernel names (every packable
// type; any n): plain AVX2 (VPMADDUBSW; cpu_features().has_avx2_set()) and AVX-VNNI (VPDPBUSD on
// ymm; has_avx_vnni_set()); F16 / BF16 through FMA in both.
bool packed_avx2_has_kernel(TensorType t);
void packed_gemm_avx2(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                      size_t act_stride, int n, float* out, size_t out_stride);
void packed_gemm_avxvnni(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                         const void* act, size_t act_stride, int n, float* out, size_t out_stride);
#endif  // __x86_64__
#if defined(__aarch64__)
// The AArch64 kernels (packed_neon.cpp) for the types packed_neon_has_kernel names (any n):
// plain NEON (any AArch64 core), dotprod (SDOT; cpu_features().neon_dotprod) and i8mm (SMMLA for
// runs of 2 and 4 activation rows, SDOT for single rows; cpu_features().neon_i8mm). All three
// give the same bits.
bool packed_neon_has_kernel(TensorType t);
void packed_gemm_neon(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                      size_t act_stride, int n, float* out, size_t out_stride);
void packed_gemm_neon_dot(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                          const void* act, size_t act_stride, int n, float* out, size_t out_stride);
void packed_gemm_neon_i8mm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                           const void* act, size_t act_stride, int n, float* out, size_t out_stride);
// F16 weights, the two ways the three copies above choose between (the same bits): FCVTL + FMLA
// (every core) and FMLAL / FMLAL2 (only where cpu_features().neon_fhm; taken there).
void packed_gemm_f16_neon_fcvtl(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                                size_t act_stride, int n, float* out, size_t out_stride);
void packed_gemm_f16_neon_fhm(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                              size_t act_stride, int n, float* out, size_t out_stride);
#endif  // __aarch64__
}  // namespace detail

}  // namespace loom::quant
