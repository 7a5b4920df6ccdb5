// Scalar reference implementations (loom::quant::ref). They are the ground truth for the SIMD
// kernels and reproduce the numerics of ggml's reference quantizers and dequantizers step by
// step (same operations in the same order, float arithmetic, f16 scales rounded to nearest
// even), so that quantized files and activations are byte-identical with llama.cpp's.
//
// Block layouts: see blocks.h. The super-block formats and IQ4_NL are in kquants_ref.cpp
// (dequantization, dot products, Q8_K) and kquants_quantize.cpp (weight quantizers).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/quant.h"

namespace loom::quant::ref {
namespace {

using namespace loom::quant::detail;

// ---- dequantization -----------------------------------------------------------------------

void dequant_q4_0(const void* src, float* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = f16_to_f32(b.d);
    float* y = dst + i * kBlock;
    for (int j = 0; j < 16; ++j) {
      store_f32(y, j, float((b.qs[j] & 0x0f) - 8) * d);
      store_f32(y, j + 16, float((b.qs[j] >> 4) - 8) * d);
    }
  }
}

void dequant_q4_1(const void* src, float* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = f16_to_f32(b.d);
    const float m = f16_to_f32(b.m);
    float* y = dst + i * kBlock;
    for (int j = 0; j < 16; ++j) {
      // Separate multiply and add (no fused multiply-add): that is what ggml's to_float does,
      // and the golden dequantizations are compared bit for bit.
      store_f32(y, j, float(b.qs[j] & 0x0f) * d + m);
      store_f32(y, j + 16, float(b.qs[j] >> 4) * d + m);
    }
  }
}

void dequant_q5_0(const void* src, float* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = f16_to_f32(b.d);
    const uint32_t qh = qh_bits(b.qh);
    float* y = dst + i * kBlock;
    for (int j = 0; j < 16; ++j) {
      const int lo = (b.qs[j] & 0x0f) | int((qh >> j) & 1u) << 4;
      const int hi = (b.qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4;
      store_f32(y, j, float(lo - 16) * d);
      store_f32(y, j + 16, float(hi - 16) * d);
    }
  }
}

void dequant_q5_1(const void* src, float* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = f16_to_f32(b.d);
    const float m = f16_to_f32(b.m);
    const uint32_t qh = qh_bits(b.qh);
    float* y = dst + i * kBlock;
    for (int j = 0; j < 16; ++j) {
      const int lo = (b.qs[j] & 0x0f) | int((qh >> j) & 1u) << 4;
      const int hi = (b.qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4;
      store_f32(y, j, float(lo) * d + m);
      store_f32(y, j + 16, float(hi) * d + m);
    }
  }
}

void dequant_q8_0(const void* src, float* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ8_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kBlock; ++j) store_f32(dst + i * kBlock, j, float(b.qs[j]) * d);
  }
}

void dequant_q8_1(const void* src, float* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockQ8_1>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kBlock; ++j) store_f32(dst + i * kBlock, j, float(b.qs[j]) * d);
  }
}

// ---- quantization -------------------------------------------------------------------------

// Symmetric formats scale by the value of largest magnitude *with its sign*, so that value maps
// exactly onto the most negative level (-8 or -16), which has no positive counterpart.
float signed_absmax(const float* x) {
  float amax = 0.0f, vmax = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    const float v = load_f32(x, j);
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      vmax = v;
    }
  }
  return vmax;
}

void min_max(const float* x, float* vmin, float* vmax) {
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (int j = 0; j < kBlock; ++j) {
    const float v = load_f32(x, j);
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  *vmin = lo;
  *vmax = hi;
}

void quant_q4_0(const float* src, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kBlock;
    const float d = signed_absmax(x) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;  // scaled with the f32 d, stored as f16
    BlockQ4_0 b;
    b.d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
      // +8.5 then truncation: round half up into 0..16; 16 (only the extreme) clamps to 15.
      // trunc_x86 (blocks.h): ggml's cast, also for the infinite id of a block of tiny values.
      const int q0 = std::min(15, trunc_x86(load_f32(x, j) * id + 8.5f));
      const int q1 = std::min(15, trunc_x86(load_f32(x, j + 16) * id + 8.5f));
      b.qs[j] = uint8_t(q0 | q1 << 4);
    }
    store_block(dst, i, b);
  }
}

void quant_q4_1(const float* src, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kBlock;
    float vmin, vmax;
    min_max(x, &vmin, &vmax);
    const float d = (vmax - vmin) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1 b;
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(vmin);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, trunc_x86((load_f32(x, j) - vmin) * id + 0.5f));
      const int q1 = std::min(15, trunc_x86((load_f32(x, j + 16) - vmin) * id + 0.5f));
      b.qs[j] = uint8_t(q0 | q1 << 4);
    }
    store_block(dst, i, b);
  }
}

void set_qh(uint8_t (&qh)[4], uint32_t bits) {
  for (int k = 0; k < 4; ++k) qh[k] = uint8_t(bits >> (8 * k));
}

void quant_q5_0(const float* src, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kBlock;
    const float d = signed_absmax(x) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_0 b;
    b.d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, trunc_x86(load_f32(x, j) * id + 16.5f));
      const int q1 = std::min(31, trunc_x86(load_f32(x, j + 16) * id + 16.5f));
      b.qs[j] = uint8_t((q0 & 0x0f) | (q1 & 0x0f) << 4);
      qh |= uint32_t(q0 >> 4 & 1) << j | uint32_t(q1 >> 4 & 1) << (j + 16);
    }
    set_qh(b.qh, qh);
    store_block(dst, i, b);
  }
}

void quant_q5_1(const float* src, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kBlock;
    float vmin, vmax;
    min_max(x, &vmin, &vmax);
    const float d = (vmax - vmin) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_1 b;
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(vmin);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      // No clamp here (ggml has none for Q5_1): (x - min) * id <= 31 + rounding, so the
      // truncated value never exceeds 31.
      const int q0 = trunc_x86((load_f32(x, j) - vmin) * id + 0.5f);
      const int q1 = trunc_x86((load_f32(x, j + 16) - vmin) * id + 0.5f);
      b.qs[j] = uint8_t((q0 & 0x0f) | (q1 & 0x0f) << 4);
      qh |= uint32_t(q0 >> 4 & 1) << j | uint32_t(q1 >> 4 & 1) << (j + 16);
    }
    set_qh(b.qh, qh);
    store_block(dst, i, b);
  }
}

// Q8_0 and Q8_1 share the scale and rounding: d = amax / 127, q = roundf(x / d) (half away from
// zero). Returns sum(q) for Q8_1's s field.
int quant_q8_block(const float* x, int8_t* qs, float* d_out) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(load_f32(x, j)));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int sum = 0;
  for (int j = 0; j < kBlock; ++j) {
    qs[j] = int8_t(trunc_x86(std::round(load_f32(x, j) * id)));
    sum += qs[j];
  }
  *d_out = d;
  return sum;
}

void quant_q8_0(const float* src, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    BlockQ8_0 b;
    float d;
    quant_q8_block(src + i * kBlock, b.qs, &d);
    b.d = f32_to_f16(d);
    store_block(dst, i, b);
  }
}

void quant_q8_1(const float* src, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    BlockQ8_1 b;
    float d;
    const int sum = quant_q8_block(src + i * kBlock, b.qs, &d);
    b.d = f32_to_f16(d);
    b.s = f32_to_f16(float(sum) * d);  // with the f32 d, as ggml
    store_block(dst, i, b);
  }
}

// ---- dot products -------------------------------------------------------------------------

// Integer dot of one block of 32 weight levels (already decoded to signed or unsigned ints)
// with 32 int8 activations.
int dot_block(const int (&w)[kBlock], const int8_t* a) {
  int s = 0;
  for (int j = 0; j < kBlock; ++j) s += w[j] * a[j];
  return s;
}

void unpack4(const uint8_t* qs, int offset, int (&w)[kBlock]) {
  for (int j = 0; j < 16; ++j) {
    w[j] = (qs[j] & 0x0f) - offset;
    w[j + 16] = (qs[j] >> 4) - offset;
  }
}

void unpack5(const uint8_t* qs, const uint8_t (&qhb)[4], int offset, int (&w)[kBlock]) {
  const uint32_t qh = qh_bits(qhb);
  for (int j = 0; j < 16; ++j) {
    w[j] = ((qs[j] & 0x0f) | int((qh >> j) & 1u) << 4) - offset;
    w[j + 16] = ((qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4) - offset;
  }
}

// Symmetric weights against Q8_0 activations: sum_b isum_b * (d_w * d_a).
template <class Block, class Unpack>
float dot_sym(int64_t nb, const void* w, const void* a, Unpack unpack) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const auto bw = load_block<Block>(w, i);
    const auto ba = load_block<BlockQ8_0>(a, i);
    int q[kBlock];
    unpack(bw, q);
    sum += float(dot_block(q, ba.qs)) * (f16_to_f32(bw.d) * f16_to_f32(ba.d));
  }
  return sum;
}

// Weights with a minimum against Q8_1 activations: sum_j (q_j d_w + m_w) a_j d_a
//   = d_w d_a isum + m_w (d_a sum_j a_j) = d_w d_a isum + m_w s_a.
template <class Block, class Unpack>
float dot_min(int64_t nb, const void* w, const void* a, Unpack unpack) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const auto bw = load_block<Block>(w, i);
    const auto ba = load_block<BlockQ8_1>(a, i);
    int q[kBlock];
    unpack(bw, q);
    sum += float(dot_block(q, ba.qs)) * (f16_to_f32(bw.d) * f16_to_f32(ba.d)) + f16_to_f32(bw.m) * f16_to_f32(ba.s);
  }
  return sum;
}

}  // namespace
}  // namespace loom::quant::ref

// ---- one entry point per type and operation (kernels.h), n elements; type_traits.cpp puts them
// in the table and quant.cpp's ref:: functions dispatch through it --------------------------

namespace loom::quant::detail::scalar {

void dequantize_f32(const void* src, float* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, size_t(n) * 4);
}
void quantize_f32(const float* src, void* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, size_t(n) * 4);
}
float vec_dot_f32(int64_t n, const void* w, const void* a) {
  float sum = 0.0f;
  const auto* wf = static_cast<const float*>(w);
  const auto* af = static_cast<const float*>(a);
  for (int64_t i = 0; i < n; ++i) sum += load_f32(wf, i) * load_f32(af, i);
  return sum;
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_f32(dst, i, f16_to_f32(load_u16(src, i)));
}
void quantize_f16(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_u16(dst, i, f32_to_f16(load_f32(src, i)));
}
float vec_dot_f16(int64_t n, const void* w, const void* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += f16_to_f32(load_u16(w, i)) * f16_to_f32(load_u16(a, i));
  return sum;
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_f32(dst, i, bf16_to_f32(load_u16(src, i)));
}
void quantize_bf16(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_u16(dst, i, f32_to_bf16(load_f32(src, i)));
}
float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_f32(load_u16(w, i)) * bf16_to_f32(load_u16(a, i));
  return sum;
}

#define LOOM_BLOCK_ROWS(t)                                                                                \
  void dequantize_##t(const void* src, float* dst, int64_t n) { ref::dequant_##t(src, dst, n / kBlock); } \
  void quantize_##t(const float* src, void* dst, int64_t n) { ref::quant_##t(src, dst, n / kBlock); }
LOOM_BLOCK_ROWS(q4_0)
LOOM_BLOCK_ROWS(q4_1)
LOOM_BLOCK_ROWS(q5_0)
LOOM_BLOCK_ROWS(q5_1)
LOOM_BLOCK_ROWS(q8_0)
LOOM_BLOCK_ROWS(q8_1)
#undef LOOM_BLOCK_ROWS

float vec_dot_q4_0(int64_t n, const void* w, const void* a) {
  return ref::dot_sym<BlockQ4_0>(n / kBlock, w, a, [](const BlockQ4_0& b, int(&q)[kBlock]) { ref::unpack4(b.qs, 8, q); });
}
float vec_dot_q5_0(int64_t n, const void* w, const void* a) {
  return ref::dot_sym<BlockQ5_0>(n / kBlock, w, a,
                                 [](const BlockQ5_0& b, int(&q)[kBlock]) { ref::unpack5(b.qs, b.qh, 16, q); });
}
float vec_dot_q8_0(int64_t n, const void* w, const void* a) {
  return ref::dot_sym<BlockQ8_0>(n / kBlock, w, a, [](const BlockQ8_0& b, int(&q)[kBlock]) {
    for (int j = 0; j < kBlock; ++j) q[j] = b.qs[j];
  });
}
float vec_dot_q4_1(int64_t n, const void* w, const void* a) {
  return ref::dot_min<BlockQ4_1>(n / kBlock, w, a, [](const BlockQ4_1& b, int(&q)[kBlock]) { ref::unpack4(b.qs, 0, q); });
}
float vec_dot_q5_1(int64_t n, const void* w, const void* a) {
  return ref::dot_min<BlockQ5_1>(n / kBlock, w, a,
                                 [](const BlockQ5_1& b, int(&q)[kBlock]) { ref::unpack5(b.qs, b.qh, 0, q); });
}
// Q8_1 weights (not produced by llama.cpp's quantizer for models, but a valid type): symmetric,
// so the s fields are not needed.
float vec_dot_q8_1(int64_t n, const void* w, const void* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kBlock; ++i) {
    const auto bw = load_block<BlockQ8_1>(w, i);
    const auto ba = load_block<BlockQ8_1>(a, i);
    int s = 0;
    for (int j = 0; j < kBlock; ++j) s += int(bw.qs[j]) * ba.qs[j];
    sum += float(s) * (f16_to_f32(bw.d) * f16_to_f32(ba.d));
  }
  return sum;
}

}  // namespace loom::quant::detail::scalar
