// Scalar references of TQ1_0, TQ2_0, MXFP4, Q1_0 and Q2_0 (layouts: small_types.h). They follow
// ggml's reference quantizers, to_float and scalar dot products operation by operation (float
// arithmetic in the same order, f16 scales rounded to nearest even), so that quantized rows are
// byte-identical and dequantized rows bit-identical with llama.cpp's; tests/quant/
// test_small_types.cpp checks them against ggml's own output (tests/data/quant-ref/).
#include "quant/small_types.h"

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/cpu.h"
#include "base/half.h"
#include "quant/blocks.h"

namespace loom::quant::ref {
namespace {

using namespace loom::quant::detail;

[[noreturn]] void bad_length(const char* fn, int64_t n, int block) {
  std::fprintf(stderr, "loom: %s: %lld elements is not a multiple of the block size %d\n", fn, static_cast<long long>(n),
               block);
  std::abort();
}

int64_t blocks_of(const char* fn, int64_t n, int block) {
  if (n < 0 || n % block != 0) bad_length(fn, n, block);
  return n / block;
}

template <class Block>
Block load(const void* row, int64_t i) {
  Block b;
  std::memcpy(&b, static_cast<const uint8_t*>(row) + i * int64_t(sizeof(Block)), sizeof(Block));
  return b;
}
template <class Block>
void store(void* row, int64_t i, const Block& b) {
  std::memcpy(static_cast<uint8_t*>(row) + i * int64_t(sizeof(Block)), &b, sizeof(Block));
}
inline float ld(const float* p, int64_t i) {
  float v;
  std::memcpy(&v, reinterpret_cast<const uint8_t*>(p) + i * 4, 4);
  return v;
}
inline void st(float* p, int64_t i, float v) { std::memcpy(reinterpret_cast<uint8_t*>(p) + i * 4, &v, 4); }

// Float-to-integer conversions as ggml's C code gets them on x86-64 (trunc_x86 of blocks.h for
// the 32-bit ones), where a value out of range (or NaN) converts to the "integer indefinite"
// 0x80...0 of cvttss2si. Such values arise when a block's maximum is so small that its reciprocal
// overflows to infinity.
// lroundf: half away from zero; out of range or NaN -> LONG_MIN (glibc returns (long) x there).
inline int64_t lround_i64(float v) {
  if (!(v > -9.2233720e18f && v < 9.2233720e18f)) return INT64_MIN;
  return std::lround(v);
}

// The activation blocks (layouts of blocks.h: Q8_0 {f16 d; i8 qs[32]}, Q8_K {f32 d; i8 qs[256];
// i16 bsums[16]}).
struct Q8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct Q8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
static_assert(sizeof(Q8_0) == 34);
static_assert(sizeof(Q8_K) == 292);

}  // namespace

// ---- Q1_0 -----------------------------------------------------------------------------------

void dequantize_row_q1_0(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_of("dequantize_row_q1_0", n, kQ1_0Block);
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load<BlockQ1_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQ1_0Block; ++j) {
      st(dst, i * kQ1_0Block + j, ((b.qs[j / 8] >> (j % 8)) & 1) ? d : -d);
    }
  }
}

void quantize_row_q1_0(const float* src, void* dst, int64_t n) {
  const int64_t nb = blocks_of("quantize_row_q1_0", n, kQ1_0Block);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kQ1_0Block;
    // The scale is the mean magnitude, summed in element order.
    float sum_abs = 0.0f;
    for (int j = 0; j < kQ1_0Block; ++j) sum_abs += std::fabs(ld(x, j));
    BlockQ1_0 b{};
    b.d = f32_to_f16(sum_abs / float(kQ1_0Block));
    for (int j = 0; j < kQ1_0Block; ++j) {
      if (ld(x, j) >= 0.0f) b.qs[j / 8] |= uint8_t(1u << (j % 8));  // -0 counts as positive
    }
    store(dst, i, b);
  }
}

float vec_dot_q1_0(int64_t n, const void* w, const void* a) {
  const int64_t nb = blocks_of("vec_dot_q1_0", n, kQ1_0Block);
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const auto bw = load<BlockQ1_0>(w, i);
    // Four Q8_0 blocks per weight block, each scaled on its own, then the weight scale.
    float block_sum = 0.0f;
    for (int k = 0; k < 4; ++k) {
      const auto ba = load<Q8_0>(a, i * 4 + k);
      int isum = 0;
      for (int b = 0; b < 4; ++b) {
        const int bits = bw.qs[4 * k + b];
        for (int t = 0; t < 8; ++t) isum += (2 * ((bits >> t) & 1) - 1) * ba.qs[8 * b + t];
      }
      block_sum += f16_to_f32(ba.d) * float(isum);
    }
    sum += f16_to_f32(bw.d) * block_sum;
  }
  return sum;
}

// ---- Q2_0 -----------------------------------------------------------------------------------

void dequantize_row_q2_0(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_of("dequantize_row_q2_0", n, kQ2_0Block);
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load<BlockQ2_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQ2_0Block; ++j) {
      const int q = (b.qs[j / 4] >> (2 * (j % 4))) & 3;
      st(dst, i * kQ2_0Block + j, float(q - 1) * d);
    }
  }
}

void quantize_row_q2_0(const float* src, void* dst, int64_t n) {
  const int64_t nb = blocks_of("quantize_row_q2_0", n, kQ2_0Block);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kQ2_0Block;
    float amax = 0.0f;
    for (int j = 0; j < kQ2_0Block; ++j) amax = std::fmax(amax, std::fabs(ld(x, j)));
    // The largest magnitude maps to level 1 (level 2 is never chosen by this quantizer).
    const float id = amax > 0.0f ? 1.0f / amax : 0.0f;
    BlockQ2_0 b{};
    b.d = f32_to_f16(amax);
    for (int j = 0; j < kQ2_0Block; ++j) {
      int32_t q = trunc_x86(std::round(ld(x, j) * id));
      q = q < INT32_MAX ? q + 1 : q;  // (INT32_MIN + 1 stays negative and clamps to 0)
      q = q < 0 ? 0 : (q > 3 ? 3 : q);
      b.qs[j / 4] |= uint8_t(q << (2 * (j % 4)));
    }
    store(dst, i, b);
  }
}

float vec_dot_q2_0(int64_t n, const void* w, const void* a) {
  const int64_t nb = blocks_of("vec_dot_q2_0", n, kQ2_0Block);
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const auto bw = load<BlockQ2_0>(w, i);
    float block_sum = 0.0f;
    for (int k = 0; k < 2; ++k) {
      const auto ba = load<Q8_0>(a, i * 2 + k);
      int isum = 0;
      for (int b = 0; b < 8; ++b) {
        const int q = bw.qs[8 * k + b];
        for (int t = 0; t < 4; ++t) isum += (((q >> (2 * t)) & 3) - 1) * ba.qs[4 * b + t];
      }
      block_sum += f16_to_f32(ba.d) * float(isum);
    }
    sum += f16_to_f32(bw.d) * block_sum;
  }
  return sum;
}

// ---- TQ2_0 ----------------------------------------------------------------------------------

namespace {
// The 256 levels (trit - 1: -1, 0, 1) of a TQ1_0 block in element order.
inline void tq1_levels(const BlockTQ1_0& b, int8_t* lv) {
  for (int k = 0; k < 5; ++k) {
    for (int m = 0; m < 32; ++m) lv[32 * k + m] = int8_t(tq1_trit(b.qs[m], k) - 1);
    for (int m = 0; m < 16; ++m) lv[160 + 16 * k + m] = int8_t(tq1_trit(b.qs[32 + m], k) - 1);
  }
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 4; ++j) lv[240 + 4 * k + j] = int8_t(tq1_trit(b.qh[j], k) - 1);
  }
}
// Absolute maximum of a 256-element block and the reciprocal the ternary quantizers scale by.
inline float tq_absmax(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kTQBlock; ++j) {
    const float v = std::fabs(ld(x, j));
    amax = amax > v ? amax : v;
  }
  return amax;
}
// lroundf(x * id) + 1 as the ternary quantizers compute it (0..2 for finite products; an
// infinite or NaN product gives LONG_MIN + 1, whose low bits are those of 1).
inline int64_t tq_digit(float v, float id) { return lround_i64(v * id) + 1; }
}  // namespace

void dequantize_row_tq2_0(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_of("dequantize_row_tq2_0", n, kTQBlock);
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load<BlockTQ2_0>(src, i);
    const float d = f16_to_f32(b.d);
    float* y = dst + i * kTQBlock;
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 4; ++l) {
        for (int m = 0; m < 32; ++m) {
          st(y, 128 * h + 32 * l + m, float(((b.qs[32 * h + m] >> (2 * l)) & 3) - 1) * d);
        }
      }
    }
  }
}

void quantize_row_tq2_0(const float* src, void* dst, int64_t n) {
  const int64_t nb = blocks_of("quantize_row_tq2_0", n, kTQBlock);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kTQBlock;
    const float amax = tq_absmax(x);
    const float id = amax != 0.0f ? 1.0f / amax : 0.0f;
    BlockTQ2_0 b{};
    b.d = f32_to_f16(amax);
    for (int e = 0; e < kTQBlock; ++e) {
      const int q = int(tq_digit(ld(x, e), id) & 3);
      b.qs[32 * (e / 128) + e % 32] |= uint8_t(q << (2 * ((e / 32) % 4)));
    }
    store(dst, i, b);
  }
}

float vec_dot_tq2_0(int64_t n, const void* w, const void* a) {
  const int64_t nb = blocks_of("vec_dot_tq2_0", n, kTQBlock);
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const auto bw = load<BlockTQ2_0>(w, i);
    const auto ba = load<Q8_K>(a, i);
    int32_t isum = 0;
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 4; ++l) {
        for (int m = 0; m < 32; ++m) {
          isum += (((bw.qs[32 * h + m] >> (2 * l)) & 3) - 1) * ba.qs[128 * h + 32 * l + m];
        }
      }
    }
    sum += float(isum) * (ba.d * f16_to_f32(bw.d));
  }
  return sum;
}

// ---- TQ1_0 ----------------------------------------------------------------------------------

void dequantize_row_tq1_0(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_of("dequantize_row_tq1_0", n, kTQBlock);
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load<BlockTQ1_0>(src, i);
    const float d = f16_to_f32(b.d);
    int8_t lv[kTQBlock];
    tq1_levels(b, lv);
    for (int e = 0; e < kTQBlock; ++e) st(dst, i * kTQBlock + e, float(lv[e]) * d);
  }
}

void quantize_row_tq1_0(const float* src, void* dst, int64_t n) {
  const int64_t nb = blocks_of("quantize_row_tq1_0", n, kTQBlock);
  // Base-3 number of the digits (first most significant, uint8 arithmetic as ggml: an out-of-
  // range digit wraps), then the byte ceil(v * 256 / 243).
  auto pack = [](const float* x, float id, int count, int stride) {
    uint8_t v = 0;
    for (int k = 0; k < count; ++k) {
      v = uint8_t(v * 3);
      v = uint8_t(v + uint8_t(uint64_t(tq_digit(ld(x, k * stride), id))));
    }
    if (count == 4) v = uint8_t(v * 3);
    return uint8_t((uint16_t(v) * 256 + 242) / 243);
  };
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kTQBlock;
    const float amax = tq_absmax(x);
    const float id = amax != 0.0f ? 1.0f / amax : 0.0f;
    BlockTQ1_0 b{};
    b.d = f32_to_f16(amax);
    for (int m = 0; m < 32; ++m) b.qs[m] = pack(x + m, id, 5, 32);
    for (int m = 0; m < 16; ++m) b.qs[32 + m] = pack(x + 160 + m, id, 5, 16);
    for (int m = 0; m < 4; ++m) b.qh[m] = pack(x + 240 + m, id, 4, 4);
    store(dst, i, b);
  }
}

float vec_dot_tq1_0(int64_t n, const void* w, const void* a) {
  const int64_t nb = blocks_of("vec_dot_tq1_0", n, kTQBlock);
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const auto bw = load<BlockTQ1_0>(w, i);
    const auto ba = load<Q8_K>(a, i);
    int8_t lv[kTQBlock];
    tq1_levels(bw, lv);
    int32_t isum = 0;
    for (int e = 0; e < kTQBlock; ++e) isum += lv[e] * ba.qs[e];
    sum += float(isum) * (f16_to_f32(bw.d) * ba.d);
  }
  return sum;
}

// ---- MXFP4 ----------------------------------------------------------------------------------

void dequantize_row_mxfp4(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_of("dequantize_row_mxfp4", n, kMxfp4Block);
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load<BlockMXFP4>(src, i);
    const float d = e8m0_half(b.e);
    for (int j = 0; j < 16; ++j) {
      st(dst, i * kMxfp4Block + j, float(kMxfp4Values[b.qs[j] & 0x0f]) * d);
      st(dst, i * kMxfp4Block + j + 16, float(kMxfp4Values[b.qs[j] >> 4]) * d);
    }
  }
}

namespace {
// The code whose value (times the block scale d) is nearest to x; the lowest code on ties.
inline uint8_t nearest_fp4(float x, float d) {
  uint8_t best = 0;
  float best_err = std::fabs(float(kMxfp4Values[0]) * d - x);
  for (uint8_t c = 1; c < 16; ++c) {
    const float err = std::fabs(float(kMxfp4Values[c]) * d - x);
    if (err < best_err) {
      best = c;
      best_err = err;
    }
  }
  return best;
}
}  // namespace

void quantize_row_mxfp4(const float* src, void* dst, int64_t n) {
  const int64_t nb = blocks_of("quantize_row_mxfp4", n, kMxfp4Block);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kMxfp4Block;
    float amax = 0.0f;
    for (int j = 0; j < kMxfp4Block; ++j) {
      const float v = std::fabs(ld(x, j));
      if (amax < v) amax = v;
    }
    // Exponent: floor(log2(amax)) - 2 (largest code 6 = 2^2 * 1.5 covers amax), biased by 127;
    // computed in float with the C library's log2f (as ggml does), converted like ggml's
    // (uint8_t) cast of a float on x86-64 (through a 32-bit integer, so a negative exponent
    // of a tiny block wraps).
    BlockMXFP4 b{};
    if (amax > 0.0f) {
      const float biased = std::floor(std::log2(amax)) - 2.0f + 127.0f;
      b.e = uint8_t(uint32_t(trunc_x86(biased)));
    }
    const float d = e8m0_half(b.e);
    for (int j = 0; j < 16; ++j) {
      b.qs[j] = uint8_t(nearest_fp4(ld(x, j), d) | nearest_fp4(ld(x, j + 16), d) << 4);
    }
    store(dst, i, b);
  }
}

float vec_dot_mxfp4(int64_t n, const void* w, const void* a) {
  const int64_t nb = blocks_of("vec_dot_mxfp4", n, kMxfp4Block);
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const auto bw = load<BlockMXFP4>(w, i);
    const auto ba = load<Q8_0>(a, i);
    const float d = f16_to_f32(ba.d) * e8m0_half(bw.e);
    int lo = 0, hi = 0;
    for (int j = 0; j < 16; ++j) {
      lo += ba.qs[j] * kMxfp4Values[bw.qs[j] & 0x0f];
      hi += ba.qs[j + 16] * kMxfp4Values[bw.qs[j] >> 4];
    }
    sum += d * float(lo + hi);
  }
  return sum;
}

}  // namespace loom::quant::ref

#if defined(__x86_64__)
namespace loom::quant::detail::small_simd {
namespace {
// Read once: cpu_features() already honours LOOM_FORCE_SCALAR and LOOM_NO_AVX512.
bool use_avx512() {
  static const bool z = cpu_features().has_avx512_vnni_set();
  return z;
}
}  // namespace

float vec_dot_tq1_0_x86(int64_t n, const void* w, const void* a) {
  return use_avx512() ? vec_dot_tq1_0_avx512(n, w, a) : vec_dot_tq1_0_avx2(n, w, a);
}
float vec_dot_tq2_0_x86(int64_t n, const void* w, const void* a) {
  return use_avx512() ? vec_dot_tq2_0_avx512(n, w, a) : vec_dot_tq2_0_avx2(n, w, a);
}
float vec_dot_mxfp4_x86(int64_t n, const void* w, const void* a) {
  return use_avx512() ? vec_dot_mxfp4_avx512(n, w, a) : vec_dot_mxfp4_avx2(n, w, a);
}
float vec_dot_q1_0_x86(int64_t n, const void* w, const void* a) {
  return use_avx512() ? vec_dot_q1_0_avx512(n, w, a) : vec_dot_q1_0_avx2(n, w, a);
}
float vec_dot_q2_0_x86(int64_t n, const void* w, const void* a) {
  return use_avx512() ? vec_dot_q2_0_avx512(n, w, a) : vec_dot_q2_0_avx2(n, w, a);
}
}  // namespace loom::quant::detail::small_simd
#endif
