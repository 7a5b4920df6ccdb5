// Quantizers with an optional importance matrix, byte-identical with ggml's ggml_quantize_chunk
// for the same rows and importance values: the IQ1/IQ2/IQ3 weight formats (IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) and, further below, the importance-weighted variants of
// the older types (Q2_K..Q6_K, Q4_0..Q5_1, IQ4_NL, IQ4_XS) (tests/quant/test_iq_quantize.cpp checks that against files
// written by real ggml, tests/data/quant-ref/).
//
// Each function quantizes nrows rows of n_per_row floats (a multiple of 256) from src into
// consecutive rows of blocks at dst and returns the bytes written (nrows * n_per_row / 256 * the
// block size). imatrix, when given, holds n_per_row importance values (llama.cpp's imatrix entry
// of the tensor, already divided by its counts: see model/imatrix.h) used for every row; null
// quantizes without one. src, dst and imatrix may be unaligned.
//
// IQ2_XXS, IQ2_XS and IQ1_S cannot be made without an importance matrix (ggml asserts; these
// return 0 and write nothing). llama-quantize also refuses IQ3_XXS, IQ2_S and IQ1_M (and Q2_K in a
// Q2_K_S file) without one for every tensor except token_embd/output, though ggml itself has
// a fallback weighting for them, which these functions reproduce when imatrix is null.
// A row length that is not a positive multiple of 256 also returns 0.
//
// The searches use ggml's lattice search structures (grid index of each quantized point, and for
// points off the grid the list of the nearest grid points), built here from the grids of
// iq_grids.h on first use of a type (thread-safe; ~10-100 ms).
//
// Inputs that ggml cannot quantize (NaN or infinite values, where ggml's search may abort or read
// out of bounds) give some well-formed blocks here, never a crash; their bytes are unspecified.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor_type.h"

namespace loom::quant {

size_t quantize_iq2_xxs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq2_xs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq2_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq3_xxs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq3_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq1_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq1_m(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);

// True for the types ggml cannot quantize without an importance matrix (IQ2_XXS, IQ2_XS, IQ1_S:
// ggml_quantize_requires_imatrix).
bool iq_requires_imatrix(TensorType t);
// True for the types llama-quantize refuses to write without an importance matrix (any tensor
// but token_embd / output): IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ1_S, IQ1_M (and Q2_K, only in a
// Q2_K_S file, which this function does not know about).
bool llama_quantize_requires_imatrix(TensorType t);
// One of the functions above by type; returns 0 for a type not listed here.
size_t quantize_iq(TensorType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);

// The older weight types as ggml_quantize_chunk writes them: with an importance matrix, ggml's
// weighted quantizers (quantize_qX_K / quantize_qX_Y with quant_weights: each fit weighs element i
// by imatrix[i] * sqrt(sigma2 + x_i^2), sigma2 from the super-block, or from the whole row for
// the 32-element types; Q6_K by imatrix[i] alone; the sub-block scales fitted by weighted least
// squares); without one, the reference quantizers of quant.h (what llama-quantize writes without
// an imatrix). n_per_row: a multiple of 256 (k-quants, IQ4_XS) or 32 (Q4_0..Q5_1, IQ4_NL).
size_t quantize_q2_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q3_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q4_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q5_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q6_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q4_0(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q4_1(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q5_0(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q5_1(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
// IQ4_NL / IQ4_XS: ggml's search with 15 trial scales; weights x^2 without an importance matrix
// (the same bytes as quant.h's reference quantizers).
size_t quantize_iq4_nl(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq4_xs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);

// ggml_quantize_chunk for every type above (the IQ1/IQ2/IQ3 types, the k-quants, Q4_0..Q5_1,
// IQ4_NL, IQ4_XS): nrows rows of n_per_row floats with the same optional importance values (for
// a MoE tensor, call it per expert with that expert's slice). Returns the bytes written, 0 for
// another type, a row length the type cannot take, or a type that needs an imatrix without one.
size_t quantize_chunk(TensorType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);

}  // namespace loom::quant
