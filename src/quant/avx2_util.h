// Internal to src/quant: small AVX2 helpers shared by the kernel files (kernels_avx2.cpp,
// kernels_avx2_k.cpp). Every function carries the target attribute; include only from x86-64
// code that is called after the run-time AVX2 check.
#pragma once
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "base/simd_avx2.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace loom::quant::detail::avx2 {

// ---- helpers ------------------------------------------------------------------------------

using simd::hmax;
using simd::hsum;
using simd::hsum_i32;

LOOM_AVX2 inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

LOOM_AVX2 inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
LOOM_AVX2 inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 16 bytes of packed nibbles -> 32 bytes 0..15 in element order (low nibbles are elements
// 0..15, high nibbles 16..31).
LOOM_AVX2 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = loadu128(qs);
  const __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

// The 32 bits of qh (little-endian) -> 32 bytes, 0xff where the element's bit is set.
LOOM_AVX2 inline __m256i expand_bits(const uint8_t* qh_ptr) {
  uint32_t qh;
  std::memcpy(&qh, qh_ptr, 4);
  // Byte k of qh holds the bits of elements 8k..8k+7: replicate it over those 8 bytes...
  const __m256i shuf =
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(qh)), shuf);
  // ...then test bit (i mod 8) in byte i.
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

}  // namespace loom::quant::detail::avx2

#endif  // __x86_64__
