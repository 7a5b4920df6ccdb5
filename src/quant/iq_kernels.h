// SIMD kernels of the IQ1/IQ2/IQ3 formats: dot products with Q8_K activations (kernels_iq_avx2.cpp,
// kernels_iq_avx512.cpp) and dequantization (AVX2). Same signatures and contract as the
// references in iq_ref.h: n % 256 == 0, rows at any byte address. Dot products are
// bit-identical with the reference's: each block's integer sum is exact (int16 pair sums stay
// below 2 * 62 * 127 for activations within [-127, 127], which Q8_K quantization of finite values
// guarantees) and the float part runs in the reference's order. Activations of -128 are outside
// the contract (the sign transfer wraps; the references take them).
//
// Call only where the CPU has the set (base/cpu.h): avx2:: needs has_avx2_set(), avx512:: needs
// has_avx512_vnni_set(). x86-64 builds only; elsewhere the functions are not defined.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::quant::iq {

namespace avx2 {
// Bit-identical with ref::dequantize_row_* (the same float multiply per element, no FMA).
void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_m(const void* src, float* dst, int64_t n);

float vec_dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq2_s_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq3_s_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq1_s_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq1_m_q8_k(int64_t n, const void* w, const void* a);
}  // namespace avx2

namespace avx512 {
float vec_dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq2_s_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq3_s_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq1_s_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq1_m_q8_k(int64_t n, const void* w, const void* a);

// Several weight rows against one activation row (decode): out[j] = vec_dot_<t>_q8_k(n, w + j ws,
// a) bit for bit, for j < nw (any nw >= 0, rows at any byte address). The activation side of
// each block is prepared once for up to 16 rows and their block sums are reduced together.
void vec_dot_rows_iq2_xxs_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out);
void vec_dot_rows_iq2_xs_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out);
void vec_dot_rows_iq2_s_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out);
void vec_dot_rows_iq3_xxs_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out);
void vec_dot_rows_iq3_s_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out);
void vec_dot_rows_iq1_s_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out);
void vec_dot_rows_iq1_m_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out);
}  // namespace avx512

}  // namespace loom::quant::iq
