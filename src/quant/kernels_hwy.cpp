// Row kernels of src/quant written once with Google Highway (base/simd.h) and compiled for every
// target Highway reaches on this architecture (x86: SSE4, AVX2, AVX-512; AArch64: NEON, SVE,
// SVE2; plus the one-lane HWY_SCALAR fallback). quant.cpp calls them through
// detail::highway (kernels.h) after simd_enabled(), behind the x86 int8 intrinsic kernels and the
// AArch64 dotprod ones; on every other CPU they are the SIMD path.
//
// Vector-length agnostic: lane counts come from hn::Lanes(d) at run time (SVE is scalable,
// HWY_SCALAR has one lane). The block kernels use tags capped at 16 lanes, so a chunk of lanes
// never straddles a 16-element half-block of a 32-element block or a 16-element sub-block of a
// k-quant; the lane count is always a power of two (Highway's SVE tags use SV_POW2). SVE vectors
// are sizeless: no arrays or members of vector type here, only named locals and references.
//
// Integer dot products: weight levels and int8 activations widened to int16 lanes,
// ReorderWidenMulAccumulate (int16 x int16 summed into int32: pmaddwd, smlal, ...) per block or
// sub-block, then one int32 -> float conversion and FMA with the block's scale product.
//
// Exactness contract with the references (formats_ref.cpp, kquants_ref.cpp), checked by
// tests/quant/test_quant_simd.cpp under every target:
//  - dequantize_row: bit-identical (float multiply, then add; never fused).
//  - quantize_row (Q8_0, Q8_1, Q8_K, F16, BF16): byte-identical, including roundf's rounding of
//    halves away from zero (Q8_0/Q8_1), nearest-even (Q8_K, F16, BF16) and NaN quieting.
//  - vec_dot / vec_dot_tile: the same exact integer sums per block and the same scale products,
//    float accumulation in another order: agreement to rounding. For the types with a tile kernel
//    vec_dot is the 1 x 1 tile: bit-identical with every tile shape (batch invariance).
// All loads and stores are unaligned. Block layouts: blocks.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/kernels_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/half.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

// Targets with hardware f16 <-> f32 conversion that rounds to nearest even (F16C on x86's AVX2
// and AVX-512 targets, FCVT on AArch64); the others use the integer conversions below.
// (Redefined for each target: this file is compiled once per target.)
#undef LOOM_HWY_HW_F16
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define LOOM_HWY_HW_F16 1
#elif HWY_ARCH_ARM_A64 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
#define LOOM_HWY_HW_F16 1
#else
#define LOOM_HWY_HW_F16 0
#endif

HWY_BEFORE_NAMESPACE();
namespace loom::quant::detail::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

// ---- scalar helpers -----------------------------------------------------------------------

HWY_INLINE float F16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#if HWY_ARCH_ARM_A64
  __fp16 f;
  std::memcpy(&f, &h, 2);
  return float(f);
#elif LOOM_HWY_HW_F16
  return _cvtsh_ss(h);
#else
  return f16_to_f32(h);
#endif
}
HWY_INLINE float F32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
HWY_INLINE int16_t I16(const uint8_t* p) {
  int16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
HWY_INLINE const int8_t* AsI8(const uint8_t* p) { return reinterpret_cast<const int8_t*>(p); }

// ---- tags ---------------------------------------------------------------------------------

// int16 lanes of the integer dot products (<= 16: one chunk stays within a half-block).
using D16 = hn::CappedTag<int16_t, 16>;
using DU16 = hn::RebindToUnsigned<D16>;
using DU8 = hn::Rebind<uint8_t, D16>;
using DI8 = hn::Rebind<int8_t, D16>;
using D32 = hn::RepartitionToWide<D16>;  // the int32 sums (half as many lanes)
using DF32 = hn::Rebind<float, D32>;
using V16 = hn::VFromD<D16>;
// Float lanes of the float-row kernels (no cap: the rows are long) and of the block
// (de)quantizers (<= 16, with their int32 twin).
using DF = hn::ScalableTag<float>;
using DBF = hn::CappedTag<float, 16>;
using DBI = hn::RebindToSigned<DBF>;

// The widened int8 at p (Lanes(D16) of them).
HWY_INLINE V16 LoadI8(const uint8_t* p) { return hn::PromoteTo(D16(), hn::LoadU(DI8(), AsI8(p))); }
HWY_INLINE hn::VFromD<DU16> LoadU8(const uint8_t* p) { return hn::PromoteTo(DU16(), hn::LoadU(DU8(), p)); }

// One sum1 for ReorderWidenMulAccumulate's odd lanes (SVE, NEON) next to every sum0.
#define LOOM_RWMA(sum0, sum1, a, b) sum0 = hn::ReorderWidenMulAccumulate(D32(), a, b, sum0, sum1)

// Lanes i: 1 << i (bit selectors for the 5th bits of Q5_0 / Q5_1).
HWY_ALIGN static constexpr uint16_t kBitSel16[16] = {1,   2,   4,    8,    16,   32,   64,    128,
                                                     256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
HWY_ALIGN static constexpr uint32_t kBitSel32[16] = {1,   2,   4,    8,    16,   32,   64,    128,
                                                     256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
template <class DU>
HWY_INLINE hn::VFromD<DU> BitSel(DU du) {
  if constexpr (sizeof(hn::TFromD<DU>) == 2) {
    return hn::LoadU(du, reinterpret_cast<const hn::TFromD<DU>*>(kBitSel16));
  } else {
    return hn::LoadU(du, reinterpret_cast<const hn::TFromD<DU>*>(kBitSel32));
  }
}

// ---- f16 / bf16 conversions ---------------------------------------------------------------

// Lanes(df) f16 at p -> f32, exact (inf and NaN kept).
template <class D>
HWY_INLINE hn::VFromD<D> LoadF16(D df, const uint8_t* p) {
#if LOOM_HWY_HW_F16
  const hn::Rebind<::hwy::float16_t, D> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const ::hwy::float16_t*>(p)));
#else
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> dh;
  const auto h = hn::PromoteTo(du, hn::LoadU(dh, reinterpret_cast<const uint16_t*>(p)));
  // Exponent and mantissa shifted into f32 position: scaling by 2^112 rebiases the exponent
  // (and normalizes subnormals, exactly); exponent 31 (inf/NaN) becomes 255 instead.
  const auto o = hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x7fffu)));
  const auto scaled = hn::Mul(hn::BitCast(df, o), hn::Set(df, 5.192296858534828e33f));
  const auto is_special = hn::Eq(hn::And(o, hn::Set(du, 0x0f800000u)), hn::Set(du, 0x0f800000u));
  const auto mag =
      hn::IfThenElse(hn::RebindMask(df, is_special), hn::BitCast(df, hn::Or(o, hn::Set(du, 0x7f800000u))), scaled);
  const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  return hn::Or(mag, hn::BitCast(df, sign));
#endif
}

// Lanes(df) floats -> f16 bits (nearest even, NaNs quieted as f32_to_f16), stored at p.
template <class D>
HWY_INLINE void StoreF16(D df, hn::VFromD<D> v, uint8_t* p) {
#if LOOM_HWY_HW_F16
  const hn::Rebind<::hwy::float16_t, D> dh;
  hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<::hwy::float16_t*>(p));
  (void)df;
#else
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint16_t, D> dh;
  const auto u = hn::BitCast(du, v);
  const auto sign = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 0x8000u));
  const auto abs = hn::And(u, hn::Set(du, 0x7fffffffu));
  const auto absi = hn::BitCast(di, abs);  // >= 0: signed compares are safe
  // Normal results: drop 13 mantissa bits with round-to-nearest-even, rebias by -112.
  const auto odd = hn::And(hn::ShiftRight<13>(abs), hn::Set(du, 1u));
  const auto normal = hn::ShiftRight<13>(hn::Add(hn::Sub(abs, hn::Set(du, 112u << 23)), hn::Add(hn::Set(du, 0xfffu), odd)));
  // Subnormal results (|x| < 2^-14): adding 0.5f aligns the 2^-24 unit with the mantissa's
  // last bit and the FPU rounds to nearest even.
  const auto sub = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, abs), hn::Set(df, 0.5f))), hn::Set(du, 0x3f000000u));
  auto r = hn::IfThenElse(hn::RebindMask(du, hn::Lt(absi, hn::Set(di, 0x38800000))), sub, normal);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Lt(absi, hn::Set(di, 0x477ff000))), r, hn::Set(du, 0x7c00u));
  const auto nan = hn::Or(hn::Set(du, 0x7e00u), hn::And(hn::ShiftRight<13>(abs), hn::Set(du, 0x3ffu)));
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(absi, hn::Set(di, 0x7f800000))), nan, r);
  r = hn::Or(r, sign);
  hn::StoreU(hn::DemoteTo(dh, hn::BitCast(di, r)), dh, reinterpret_cast<uint16_t*>(p));
#endif
}

template <class D>
HWY_INLINE hn::VFromD<D> LoadBF16(D df, const uint8_t* p) {
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> dh;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(dh, reinterpret_cast<const uint16_t*>(p)))));
}

// ---- float rows ---------------------------------------------------------------------------

struct F32Row {
  static constexpr int kBytes = 4;
  template <class D>
  static HWY_INLINE hn::VFromD<D> Load(D d, const uint8_t* p) {
    return hn::LoadU(d, reinterpret_cast<const float*>(p));
  }
  static HWY_INLINE float Load1(const uint8_t* p) { return F32(p); }
};
struct F16Row {
  static constexpr int kBytes = 2;
  template <class D>
  static HWY_INLINE hn::VFromD<D> Load(D d, const uint8_t* p) {
    return LoadF16(d, p);
  }
  static HWY_INLINE float Load1(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
  }
};
struct BF16Row {
  static constexpr int kBytes = 2;
  template <class D>
  static HWY_INLINE hn::VFromD<D> Load(D d, const uint8_t* p) {
    return LoadBF16(d, p);
  }
  static HWY_INLINE float Load1(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_f32(h);
  }
};

// sum w[i] a[i]: 4 vectors per step in four accumulators, then one vector, then scalars.
template <class Row>
float DotFloat(int64_t n, const uint8_t* w, const uint8_t* a) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  constexpr int64_t B = Row::kBytes;
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d), acc2 = hn::Zero(d), acc3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    acc0 = hn::MulAdd(Row::Load(d, w + i * B), Row::Load(d, a + i * B), acc0);
    acc1 = hn::MulAdd(Row::Load(d, w + (i + N) * B), Row::Load(d, a + (i + N) * B), acc1);
    acc2 = hn::MulAdd(Row::Load(d, w + (i + 2 * N) * B), Row::Load(d, a + (i + 2 * N) * B), acc2);
    acc3 = hn::MulAdd(Row::Load(d, w + (i + 3 * N) * B), Row::Load(d, a + (i + 3 * N) * B), acc3);
  }
  for (; i + N <= n; i += N) {
    acc0 = hn::MulAdd(Row::Load(d, w + i * B), Row::Load(d, a + i * B), acc0);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3))));
  for (; i < n; ++i) sum += Row::Load1(w + i * B) * Row::Load1(a + i * B);
  return sum;
}

template <class Row>
void DequantHalf(int64_t n, const uint8_t* x, float* y) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    hn::StoreU(Row::Load(d, x + 2 * i), d, y + i);
    hn::StoreU(Row::Load(d, x + 2 * (i + N)), d, y + i + N);
  }
  for (; i + N <= n; i += N) hn::StoreU(Row::Load(d, x + 2 * i), d, y + i);
  for (; i < n; ++i) {
    const float v = Row::Load1(x + 2 * i);
    std::memcpy(y + i, &v, 4);
  }
}

void QuantF16(int64_t n, const float* x, uint8_t* y) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    StoreF16(d, hn::LoadU(d, x + i), y + 2 * i);
    StoreF16(d, hn::LoadU(d, x + i + N), y + 2 * (i + N));
  }
  for (; i + N <= n; i += N) StoreF16(d, hn::LoadU(d, x + i), y + 2 * i);
  for (; i < n; ++i) {
    const uint16_t h = f32_to_f16(load_f32(x, i));
    std::memcpy(y + 2 * i, &h, 2);
  }
}

// Nearest even (u + 0x7fff + lsb), NaNs quieted instead (bit 6 of the result), as f32_to_bf16;
// the f32 bits stay in place (the bf16 is the upper half).
template <class D>
HWY_INLINE hn::VFromD<hn::RebindToUnsigned<D>> BF16Bits(D df, hn::VFromD<D> v) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), lsb));
  const auto is_nan = hn::Gt(hn::BitCast(di, hn::And(u, hn::Set(du, 0x7fffffffu))), hn::Set(di, 0x7f800000));
  (void)df;
  return hn::IfThenElse(hn::RebindMask(du, is_nan), hn::Or(u, hn::Set(du, 0x400000u)), rounded);
}

void QuantBF16(int64_t n, const float* x, uint8_t* y) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  // Two vectors per step: the upper 16-bit halves of both, in order (ConcatOdd), in one store.
  const hn::Repartition<uint16_t, DF> d16;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto lo = BF16Bits(d, hn::LoadU(d, x + i));
    const auto hi = BF16Bits(d, hn::LoadU(d, x + i + N));
    hn::StoreU(hn::ConcatOdd(d16, hn::BitCast(d16, hi), hn::BitCast(d16, lo)), d16, reinterpret_cast<uint16_t*>(y + 2 * i));
  }
#endif
  const hn::Rebind<uint16_t, DF> dh;
  const hn::RebindToSigned<DF> di;
  for (; i + N <= n; i += N) {
    const auto r = hn::ShiftRight<16>(BF16Bits(d, hn::LoadU(d, x + i)));
    hn::StoreU(hn::DemoteTo(dh, hn::BitCast(di, r)), dh, reinterpret_cast<uint16_t*>(y + 2 * i));
  }
  for (; i < n; ++i) {
    const uint16_t h = f32_to_bf16(load_f32(x, i));
    std::memcpy(y + 2 * i, &h, 2);
  }
}

// x rounded through f16 (kBf16: bf16) and widened back to f32 in one pass: the bits of
// QuantF16 (QuantBF16) followed by DequantHalf, without the 16-bit row in memory between them
// (the packed F16 / BF16 GEMM's activations, quantize_packed_act).
template <bool kBf16>
void RoundHalf(int64_t n, const float* x, float* y) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
#if !LOOM_HWY_HW_F16
  HWY_ALIGN uint8_t tmp[HWY_MAX_BYTES / 2];
#endif
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    if constexpr (kBf16) {
      const hn::RebindToUnsigned<DF> du;
      hn::StoreU(hn::BitCast(d, hn::And(BF16Bits(d, v), hn::Set(du, 0xffff0000u))), d, y + i);
    } else {
#if LOOM_HWY_HW_F16
      const hn::Rebind<::hwy::float16_t, DF> dh;
      hn::StoreU(hn::PromoteTo(d, hn::DemoteTo(dh, v)), d, y + i);
#else
      StoreF16(d, v, tmp);
      hn::StoreU(LoadF16(d, tmp), d, y + i);
#endif
    }
  }
  for (; i < n; ++i) {
    const float v = kBf16 ? bf16_to_f32(f32_to_bf16(load_f32(x, i))) : f16_to_f32(f32_to_f16(load_f32(x, i)));
    std::memcpy(y + i, &v, 4);
  }
}

// ---- 32-element block formats -------------------------------------------------------------
//
// A format: kBytes per block; Prep(block, scratch) -> the pointer Levels reads (the block, or
// the block's levels decoded into 32 bytes of scratch); Levels(d, p, j, lo, hi) -> the levels of
// elements j.. (lo) and 16 + j.. (hi), Lanes(d) of each, for j a multiple of Lanes(d) below 16,
// as signed lanes of d (int16 or int32). Scales: f16 d at byte 0 (and m at 2).

template <int kOff>
struct Q8Fmt {  // Q8_0 (kOff 2), Q8_1 (kOff 4)
  static constexpr int kBytes = kOff + 32;
  static HWY_INLINE const uint8_t* Prep(const uint8_t* b, uint8_t*) { return b; }
  template <class D>
  static HWY_INLINE void Levels(D d, const uint8_t* p, size_t j, hn::VFromD<D>& lo, hn::VFromD<D>& hi) {
    const hn::Rebind<int8_t, D> d8;
    lo = hn::PromoteTo(d, hn::LoadU(d8, AsI8(p + kOff + j)));
    hi = hn::PromoteTo(d, hn::LoadU(d8, AsI8(p + kOff + 16 + j)));
  }
};
using FmtQ8_0 = Q8Fmt<2>;
using FmtQ8_1 = Q8Fmt<4>;

template <int kOff, int kSub>
struct Q4Fmt {  // Q4_0 (nibbles at 2, minus 8), Q4_1 (at 4, unsigned)
  static constexpr int kBytes = kOff + 16;
  static HWY_INLINE const uint8_t* Prep(const uint8_t* b, uint8_t*) { return b; }
  template <class D>
  static HWY_INLINE void Levels(D d, const uint8_t* p, size_t j, hn::VFromD<D>& lo, hn::VFromD<D>& hi) {
    const hn::RebindToUnsigned<D> du;
    const hn::Rebind<uint8_t, D> d8;
    const auto q = hn::PromoteTo(du, hn::LoadU(d8, p + kOff + j));
    lo = hn::BitCast(d, hn::And(q, hn::Set(du, 15)));
    hi = hn::BitCast(d, hn::ShiftRight<4>(q));
    if constexpr (kSub != 0) {
      lo = hn::Sub(lo, hn::Set(d, kSub));
      hi = hn::Sub(hi, hn::Set(d, kSub));
    }
  }
};
using FmtQ4_0 = Q4Fmt<2, 8>;
using FmtQ4_1 = Q4Fmt<4, 0>;

template <int kOff, bool kSym>
struct Q5Fmt {  // Q5_0 (qh at 2, qs at 6, minus 16), Q5_1 (qh at 4, qs at 8, unsigned)
  static constexpr int kBytes = kOff + 20;
  static HWY_INLINE const uint8_t* Prep(const uint8_t* b, uint8_t*) { return b; }
  template <class D>
  static HWY_INLINE void Levels(D d, const uint8_t* p, size_t j, hn::VFromD<D>& lo, hn::VFromD<D>& hi) {
    const hn::RebindToUnsigned<D> du;
    using TU = hn::TFromD<decltype(du)>;
    const hn::Rebind<uint8_t, D> d8;
    uint32_t qh;
    std::memcpy(&qh, p + kOff, 4);
    const auto q = hn::PromoteTo(du, hn::LoadU(d8, p + kOff + 4 + j));
    const auto sel = BitSel(du);
    const auto blo = hn::TestBit(hn::Set(du, TU((qh >> j) & 0xffffu)), sel);
    const auto bhi = hn::TestBit(hn::Set(du, TU((qh >> (16 + j)) & 0xffffu)), sel);
    const auto nlo = hn::And(q, hn::Set(du, 15)), nhi = hn::ShiftRight<4>(q);
    if constexpr (kSym) {  // (nibble | bit << 4) - 16: the nibble where the bit is set
      lo = hn::BitCast(d, hn::IfThenElse(blo, nlo, hn::Sub(nlo, hn::Set(du, 16))));
      hi = hn::BitCast(d, hn::IfThenElse(bhi, nhi, hn::Sub(nhi, hn::Set(du, 16))));
    } else {
      lo = hn::BitCast(d, hn::IfThenElse(blo, hn::Or(nlo, hn::Set(du, 16)), nlo));
      hi = hn::BitCast(d, hn::IfThenElse(bhi, hn::Or(nhi, hn::Set(du, 16)), nhi));
    }
  }
};
using FmtQ5_0 = Q5Fmt<2, true>;
using FmtQ5_1 = Q5Fmt<4, false>;

// 16 bytes of IQ4 nibbles (Q4_0's order) -> 32 int8 levels of kIq4nlValues at out: a byte table
// lookup where vectors have 16 byte lanes, else scalar.
HWY_INLINE void DecodeIq4(const uint8_t* qs, uint8_t* out) {
#if HWY_TARGET == HWY_SCALAR
  for (int j = 0; j < 16; ++j) {
    out[j] = uint8_t(kIq4nlValues[qs[j] & 0x0f]);
    out[j + 16] = uint8_t(kIq4nlValues[qs[j] >> 4]);
  }
#else
  const hn::CappedTag<uint8_t, 16> d8;  // exactly 16 lanes on every SIMD target
  const auto table = hn::LoadU(d8, reinterpret_cast<const uint8_t*>(kIq4nlValues));
  const auto q = hn::LoadU(d8, qs);
  hn::StoreU(hn::TableLookupBytes(table, hn::And(q, hn::Set(d8, 15))), d8, out);
  hn::StoreU(hn::TableLookupBytes(table, hn::ShiftRight<4>(q)), d8, out + 16);
#endif
}

struct FmtIQ4_NL {
  static constexpr int kBytes = 18;
  static HWY_INLINE const uint8_t* Prep(const uint8_t* b, uint8_t* scratch) {
    DecodeIq4(b + 2, scratch);
    return scratch;
  }
  template <class D>
  static HWY_INLINE void Levels(D d, const uint8_t* p, size_t j, hn::VFromD<D>& lo, hn::VFromD<D>& hi) {
    const hn::Rebind<int8_t, D> d8;
    lo = hn::PromoteTo(d, hn::LoadU(d8, AsI8(p + j)));
    hi = hn::PromoteTo(d, hn::LoadU(d8, AsI8(p + 16 + j)));
  }
};

// Integer dot of one block with the activation's 32 int8 at aq, as int32 lanes of D32.
template <class Fmt>
HWY_INLINE hn::VFromD<D32> BlockDot(const uint8_t* lv, const uint8_t* aq) {
  const D16 d16;
  const size_t N = hn::Lanes(d16);
  auto s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
  for (size_t j = 0; j < 16; j += N) {
    V16 lo, hi;
    Fmt::Levels(d16, lv, j, lo, hi);
    LOOM_RWMA(s0, s1, lo, LoadI8(aq + j));
    LOOM_RWMA(s0, s1, hi, LoadI8(aq + 16 + j));
  }
  return hn::Add(s0, s1);
}

// Symmetric weights against Q8_0 (or Q8_1, kAOff 4): acc += (d_w * d_a) * isum per block, two
// accumulators for consecutive blocks.
template <class Fmt, int kABytes>
float DotSym(int64_t nb, const uint8_t* w, const uint8_t* a) {
  constexpr int kAOff = kABytes - 32;
  const DF32 df;
  HWY_ALIGN uint8_t s0[32], s1[32];
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    const uint8_t* w0 = w + i * Fmt::kBytes;
    const uint8_t* a0 = a + i * kABytes;
    const uint8_t* w1 = w0 + Fmt::kBytes;
    const uint8_t* a1 = a0 + kABytes;
    const auto p0 = hn::ConvertTo(df, BlockDot<Fmt>(Fmt::Prep(w0, s0), a0 + kAOff));
    const auto p1 = hn::ConvertTo(df, BlockDot<Fmt>(Fmt::Prep(w1, s1), a1 + kAOff));
    acc0 = hn::MulAdd(hn::Set(df, F16(w0) * F16(a0)), p0, acc0);
    acc1 = hn::MulAdd(hn::Set(df, F16(w1) * F16(a1)), p1, acc1);
  }
  if (i < nb) {
    const uint8_t* w0 = w + i * Fmt::kBytes;
    const uint8_t* a0 = a + i * kABytes;
    const auto p0 = hn::ConvertTo(df, BlockDot<Fmt>(Fmt::Prep(w0, s0), a0 + kAOff));
    acc0 = hn::MulAdd(hn::Set(df, F16(w0) * F16(a0)), p0, acc0);
  }
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
}

// Weights with a minimum (Q4_1, Q5_1) against Q8_1: acc += (d_w d_a) isum, plus m_w * s_a.
template <class Fmt>
float DotMin(int64_t nb, const uint8_t* w, const uint8_t* a) {
  constexpr int kAB = sizeof(BlockQ8_1);
  const DF32 df;
  auto acc = hn::Zero(df);
  float mins = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* wb = w + i * Fmt::kBytes;
    const uint8_t* ab = a + i * kAB;
    const auto p = hn::ConvertTo(df, BlockDot<Fmt>(Fmt::Prep(wb, nullptr), ab + 4));
    acc = hn::MulAdd(hn::Set(df, F16(wb) * F16(ab)), p, acc);
    mins += F16(wb + 2) * F16(ab + 2);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc)) + mins;
}

// Dequantization: level * d (kMin: then + m), rounded after each step.
template <class Fmt, bool kMin>
void DequantBlocks(int64_t nb, const uint8_t* x, float* y) {
  const DBF df;
  const DBI di;
  const size_t N = hn::Lanes(df);
  HWY_ALIGN uint8_t scratch[32];
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = x + i * Fmt::kBytes;
    const uint8_t* lv = Fmt::Prep(b, scratch);
    const auto vd = hn::Set(df, F16(b));
    const auto vm = hn::Set(df, kMin ? F16(b + 2) : 0.0f);
    float* out = y + i * kBlock;
    for (size_t j = 0; j < 16; j += N) {
      hn::VFromD<DBI> lo, hi;
      Fmt::Levels(di, lv, j, lo, hi);
      auto flo = hn::Mul(hn::ConvertTo(df, lo), vd);
      auto fhi = hn::Mul(hn::ConvertTo(df, hi), vd);
      if constexpr (kMin) {
        flo = hn::Add(flo, vm);
        fhi = hn::Add(fhi, vm);
      }
      hn::StoreU(flo, df, out + j);
      hn::StoreU(fhi, df, out + 16 + j);
    }
  }
}

// ---- tiles (matrix x matrix) --------------------------------------------------------------
//
// RN activation rows x RM weight rows (RN <= 4 and RM <= 2, or RN = 1 and RM <= 4), one
// accumulator per pair in named variables (SVE vectors cannot live in arrays); unused ones are
// compiled out. Per pair and block: acc += (d_w * d_a) * isum, blocks in order in one chain, then
// SumOfLanes. This is *the* dot of these types: vec_dot is the 1 x 1 tile, so a pair's result is
// bit-identical whatever tile computes it (batch invariance); the latency of each pair's chain is
// hidden by the other pairs of the tile.

#define LOOM_TILE_PAIRS(X) \
  X(0, 0)                  \
  X(0, 1) X(0, 2) X(0, 3) X(1, 0) X(1, 1) X(1, 2) X(1, 3) X(2, 0) X(2, 1) X(2, 2) X(2, 3) X(3, 0) X(3, 1) X(3, 2) X(3, 3)

template <class Fmt, int RN, int RM>
void TileSym(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t os) {
  static_assert((RN <= 4 && RM <= 2) || (RN == 1 && RM <= 4));
  constexpr int kAB = sizeof(BlockQ8_0);
  const D16 d16;
  const D32 d32;
  const DF32 df;
  const size_t N = hn::Lanes(d16);
  HWY_ALIGN uint8_t scr0[32], scr1[32], scr2[32], scr3[32];
#define LOOM_DECL(i, j) auto acc##i##j = hn::Zero(df);
  LOOM_TILE_PAIRS(LOOM_DECL)
#undef LOOM_DECL
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb0 = w + b * Fmt::kBytes;
    const uint8_t* wb1 = RM > 1 ? wb0 + ws : wb0;
    const uint8_t* wb2 = RM > 2 ? wb0 + 2 * ws : wb0;
    const uint8_t* wb3 = RM > 3 ? wb0 + 3 * ws : wb0;
    const uint8_t* lv0 = Fmt::Prep(wb0, scr0);
    const uint8_t* lv1 = RM > 1 ? Fmt::Prep(wb1, scr1) : lv0;
    const uint8_t* lv2 = RM > 2 ? Fmt::Prep(wb2, scr2) : lv0;
    const uint8_t* lv3 = RM > 3 ? Fmt::Prep(wb3, scr3) : lv0;
    const uint8_t* ab0 = a + b * kAB;
    const uint8_t* ab1 = RN > 1 ? ab0 + as : ab0;
    const uint8_t* ab2 = RN > 2 ? ab0 + 2 * as : ab0;
    const uint8_t* ab3 = RN > 3 ? ab0 + 3 * as : ab0;
#define LOOM_DECL(i, j) auto s##i##j = hn::Zero(d32), t##i##j = hn::Zero(d32);
    LOOM_TILE_PAIRS(LOOM_DECL)
#undef LOOM_DECL
    for (size_t j = 0; j < 16; j += N) {
      V16 x0lo, x0hi, x1lo = hn::Zero(d16), x1hi = x1lo, x2lo = x1lo, x2hi = x1lo, x3lo = x1lo, x3hi = x1lo;
      Fmt::Levels(d16, lv0, j, x0lo, x0hi);
      if constexpr (RM > 1) Fmt::Levels(d16, lv1, j, x1lo, x1hi);
      if constexpr (RM > 2) Fmt::Levels(d16, lv2, j, x2lo, x2hi);
      if constexpr (RM > 3) Fmt::Levels(d16, lv3, j, x3lo, x3hi);
#define LOOM_PAIR(i, j)                              \
  if constexpr (RN > i && RM > j) {                  \
    LOOM_RWMA(s##i##j, t##i##j, x##j##lo, y##i##lo); \
    LOOM_RWMA(s##i##j, t##i##j, x##j##hi, y##i##hi); \
  }
#define LOOM_ROW(i)                                                 \
  if constexpr (RN > i) {                                           \
    const V16 y##i##lo = LoadI8(ab##i + 2 + j);                     \
    const V16 y##i##hi = LoadI8(ab##i + 18 + j);                    \
    LOOM_PAIR(i, 0) LOOM_PAIR(i, 1) LOOM_PAIR(i, 2) LOOM_PAIR(i, 3) \
  }
      LOOM_ROW(0) LOOM_ROW(1) LOOM_ROW(2) LOOM_ROW(3)
#undef LOOM_ROW
#undef LOOM_PAIR
    }
    const float dw0 = F16(wb0), dw1 = RM > 1 ? F16(wb1) : 0.0f, dw2 = RM > 2 ? F16(wb2) : 0.0f,
                dw3 = RM > 3 ? F16(wb3) : 0.0f;
    const float da0 = F16(ab0), da1 = RN > 1 ? F16(ab1) : 0.0f, da2 = RN > 2 ? F16(ab2) : 0.0f,
                da3 = RN > 3 ? F16(ab3) : 0.0f;
#define LOOM_ACC(i, j)                                                                                           \
  if constexpr (RN > i && RM > j) {                                                                              \
    acc##i##j = hn::MulAdd(hn::Set(df, dw##j * da##i), hn::ConvertTo(df, hn::Add(s##i##j, t##i##j)), acc##i##j); \
  }
    LOOM_TILE_PAIRS(LOOM_ACC)
#undef LOOM_ACC
    (void)da1, (void)da2, (void)da3, (void)dw1, (void)dw2, (void)dw3;
  }
#define LOOM_STORE(i, j) \
  if constexpr (RN > i && RM > j) out[size_t(i) * os + j] = hn::GetLane(hn::SumOfLanes(df, acc##i##j));
  LOOM_TILE_PAIRS(LOOM_STORE)
#undef LOOM_STORE
}

// F16 weights against F16 activations: one vector of elements per step in one chain per pair,
// then SumOfLanes and a scalar tail per pair (vec_dot is the 1 x 1 tile, as for TileSym).
template <int RN, int RM>
void TileF16(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t os) {
  static_assert((RN <= 4 && RM <= 2) || (RN == 1 && RM <= 4));
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const uint8_t* w0 = w;
  const uint8_t* w1 = RM > 1 ? w + ws : w;
  const uint8_t* w2 = RM > 2 ? w + 2 * ws : w;
  const uint8_t* w3 = RM > 3 ? w + 3 * ws : w;
  const uint8_t* a0 = a;
  const uint8_t* a1 = RN > 1 ? a + as : a;
  const uint8_t* a2 = RN > 2 ? a + 2 * as : a;
  const uint8_t* a3 = RN > 3 ? a + 3 * as : a;
#define LOOM_DECL(i, j) auto acc##i##j = hn::Zero(df);
  LOOM_TILE_PAIRS(LOOM_DECL)
#undef LOOM_DECL
  int64_t e = 0;
  for (; e + N <= n; e += N) {
    const auto x0 = LoadF16(df, w0 + 2 * e);
    const auto x1 = RM > 1 ? LoadF16(df, w1 + 2 * e) : x0;
    const auto x2 = RM > 2 ? LoadF16(df, w2 + 2 * e) : x0;
    const auto x3 = RM > 3 ? LoadF16(df, w3 + 2 * e) : x0;
#define LOOM_PAIR(i, j) \
  if constexpr (RN > i && RM > j) acc##i##j = hn::MulAdd(x##j, y, acc##i##j);
#define LOOM_ROW(i)                                                 \
  if constexpr (RN > i) {                                           \
    const auto y = LoadF16(df, a##i + 2 * e);                       \
    LOOM_PAIR(i, 0) LOOM_PAIR(i, 1) LOOM_PAIR(i, 2) LOOM_PAIR(i, 3) \
  }
    LOOM_ROW(0)
    LOOM_ROW(1)
    LOOM_ROW(2)
    LOOM_ROW(3)
#undef LOOM_ROW
#undef LOOM_PAIR
    (void)x1, (void)x2, (void)x3;
  }
#define LOOM_STORE(i, j)                                                \
  if constexpr (RN > i && RM > j) {                                     \
    float sum = hn::GetLane(hn::SumOfLanes(df, acc##i##j));             \
    for (int64_t r = e; r < n; ++r) {                                   \
      sum += F16Row::Load1(w##j + 2 * r) * F16Row::Load1(a##i + 2 * r); \
    }                                                                   \
    out[size_t(i) * os + j] = sum;                                      \
  }
  LOOM_TILE_PAIRS(LOOM_STORE)
#undef LOOM_STORE
}
#undef LOOM_TILE_PAIRS

// A tile kernel K<rows of a, rows of w> over any number of rows (kernels.h: run_register_tiles).
template <template <int, int> class K>
void TileLoop(int64_t len, const uint8_t* w, size_t ws, int nw, const uint8_t* a, size_t as, int na, float* out, size_t os) {
  static constexpr TileFn fns[kTileA][kTileW] = {
      {K<1, 1>::fn, K<1, 2>::fn}, {K<2, 1>::fn, K<2, 2>::fn}, {K<3, 1>::fn, K<3, 2>::fn}, {K<4, 1>::fn, K<4, 2>::fn}};
  static constexpr TileFn row_fns[kTileW1] = {K<1, 1>::fn, K<1, 2>::fn, K<1, 3>::fn, K<1, 4>::fn};
  run_register_tiles(fns, row_fns, len, w, ws, nw, a, as, na, out, os);
}

template <class Fmt>
struct SymTile {
  template <int RN, int RM>
  struct K {
    static constexpr TileFn fn = TileSym<Fmt, RN, RM>;
  };
};
template <int RN, int RM>
struct F16Tile {
  static constexpr TileFn fn = TileF16<RN, RM>;
};

// vec_dot of the tile types: the 1 x 1 tile.
template <class Fmt>
float DotTile1(int64_t nb, const uint8_t* w, const uint8_t* a) {
  float out;
  TileSym<Fmt, 1, 1>(nb, w, 0, a, 0, &out, 1);
  return out;
}
float DotF16Tile1(int64_t n, const uint8_t* w, const uint8_t* a) {
  float out;
  TileF16<1, 1>(n, w, 0, a, 0, &out, 1);
  return out;
}

// ---- activation quantizers ----------------------------------------------------------------

// roundf (half away from zero), exactly: trunc(v) plus copysign(1, v) when the discarded
// fraction, which the subtraction computes exactly, is at least one half.
template <class D>
HWY_INLINE hn::VFromD<D> RoundHalfAway(D d, hn::VFromD<D> v) {
  const auto t = hn::Trunc(v);
  const auto up = hn::Ge(hn::Abs(hn::Sub(v, t)), hn::Set(d, 0.5f));
  return hn::Add(t, hn::IfThenElseZero(up, hn::CopySign(hn::Set(d, 1.0f), v)));
}

// One Q8_0/Q8_1 block of 32 floats: the 32 int8 at qs, d (f32) and the sum of the levels.
HWY_INLINE int QuantQ8Block(const float* x, uint8_t* qs, float* d_out) {
  const DBF df;
  const DBI di;
  const hn::Rebind<int8_t, DBI> d8;
  const size_t N = hn::Lanes(df);
  auto amax = hn::Zero(df);
  for (size_t k = 0; k < 32; k += N) {
    const auto v = hn::Abs(hn::LoadU(df, x + k));
    amax = hn::IfThenElse(hn::Lt(amax, v), v, amax);  // std::max's choice: NaNs are skipped
  }
  // Same scalar steps as the reference: d = amax / 127 and id = 1 / d, both in f32.
  const float d = hn::GetLane(hn::MaxOfLanes(df, amax)) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const auto vid = hn::Set(df, id);
  auto sum = hn::Zero(di);
  for (size_t k = 0; k < 32; k += N) {
    const auto q = hn::ConvertTo(di, RoundHalfAway(df, hn::Mul(hn::LoadU(df, x + k), vid)));
    sum = hn::Add(sum, q);
    hn::StoreU(hn::DemoteTo(d8, q), d8, reinterpret_cast<int8_t*>(qs + k));
  }
  *d_out = d;
  return hn::GetLane(hn::SumOfLanes(di, sum));
}

void QuantQ8_0(int64_t nb, const float* x, uint8_t* y) {
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* b = y + i * int64_t(sizeof(BlockQ8_0));
    float d;
    QuantQ8Block(x + i * kBlock, b + 2, &d);
    store_u16(b, 0, f32_to_f16(d));
  }
}

void QuantQ8_1(int64_t nb, const float* x, uint8_t* y) {
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* b = y + i * int64_t(sizeof(BlockQ8_1));
    float d;
    const int sum = QuantQ8Block(x + i * kBlock, b + 4, &d);
    store_u16(b, 0, f32_to_f16(d));
    store_u16(b, 1, f32_to_f16(float(sum) * d));  // with the f32 d, as ggml
  }
}

// Q8_K: scale from the first element of largest magnitude (NaNs skipped) with its sign, levels
// rounded to nearest even and clamped as the reference (NaN and +inf -> 127, -inf -> -128), the
// bsums of each 16.
void QuantQ8_K(int64_t nb, const float* src, uint8_t* dst) {
  const DBF df;
  const DBI di;
  const hn::Rebind<int8_t, DBI> d8;
  const size_t N = hn::Lanes(df);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kSuper;
    uint8_t* b = dst + i * int64_t(sizeof(BlockQ8_K));
    auto amax = hn::Zero(df);
    for (size_t k = 0; k < kSuper; k += N) {
      const auto v = hn::Abs(hn::LoadU(df, x + k));
      amax = hn::IfThenElse(hn::Gt(v, amax), v, amax);
    }
    const float m = hn::GetLane(hn::MaxOfLanes(df, amax));
    if (!(m > 0.0f)) {
      std::memset(b, 0, sizeof(BlockQ8_K));
      continue;
    }
    float vmax = 0.0f;
    const auto vm = hn::Set(df, m);
    for (size_t k = 0; k < kSuper; k += N) {
      const intptr_t pos = hn::FindFirstTrue(df, hn::Eq(hn::Abs(hn::LoadU(df, x + k)), vm));
      if (pos >= 0) {
        vmax = load_f32(x, int64_t(k) + pos);
        break;
      }
    }
    const float iscale = -127.0f / vmax;
    const auto vis = hn::Set(df, iscale);
    const auto top = hn::Set(df, 127.0f), bottom = hn::Set(df, -128.0f);
    for (size_t g = 0; g < 16; ++g) {
      auto s = hn::Zero(di);
      for (size_t k = 16 * g; k < 16 * g + 16; k += N) {
        const auto r = hn::Round(hn::Mul(vis, hn::LoadU(df, x + k)));
        auto c = hn::IfThenElse(hn::Lt(r, top), r, top);
        c = hn::IfThenElse(hn::Gt(c, bottom), c, bottom);
        const auto q = hn::ConvertTo(di, c);
        s = hn::Add(s, q);
        hn::StoreU(hn::DemoteTo(d8, q), d8, reinterpret_cast<int8_t*>(b + 4 + k));
      }
      const int16_t bs = int16_t(hn::GetLane(hn::SumOfLanes(di, s)));
      std::memcpy(b + 4 + kSuper + 2 * g, &bs, 2);
    }
    const float d = 1.0f / iscale;
    std::memcpy(b, &d, 4);
  }
}

// ---- super-block formats against Q8_K -----------------------------------------------------
//
// Per super-block: weight levels (signed, or unsigned with the mins taken out through the
// activations' bsums) multiplied by their sub-block scale in int16 (|level * scale| <= 4096),
// then ReorderWidenMulAccumulate with the activations into int32; per super-block one
// conversion and FMA with d_a * d_w, as the reference's (ba.d * o.d) * float(isum).

constexpr int kQ8KQs = 4, kQ8KBsums = 4 + kSuper;

// 8 scales and 8 mins of a Q4_K / Q5_K block.
HWY_INLINE void K4Scales(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 8; ++j) k4_scale_min(s, j, sc + j, mn + j);
}

// sum_j mn[j] * (bsums[2j] + bsums[2j+1]) for the 32-element sub-blocks.
HWY_INLINE int MinSum32(const int* mn, const uint8_t* y) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += mn[j] * (I16(y + kQ8KBsums + 4 * j) + I16(y + kQ8KBsums + 4 * j + 2));
  return s;
}

template <bool kHigh>
float DotQ45K(int64_t nb, const uint8_t* w, const uint8_t* a) {
  constexpr int64_t kBytes = kHigh ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr int kQs = kHigh ? 48 : 16;
  const D16 d16;
  const DU16 du;
  const DF32 df;
  const size_t N = hn::Lanes(d16);
  auto acc = hn::Zero(df);
  float mins = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * kBytes;
    const uint8_t* y = a + i * int64_t(sizeof(BlockQ8_K));
    int sc[8], mn[8];
    K4Scales(x + 4, sc, mn);
    auto s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (int c = 0; c < 4; ++c) {
      const V16 slo = hn::Set(d16, int16_t(sc[2 * c])), shi = hn::Set(d16, int16_t(sc[2 * c + 1]));
      const uint8_t* yq = y + kQ8KQs + 64 * c;
      for (size_t j = 0; j < 32; j += N) {
        const auto q = LoadU8(x + kQs + 32 * c + j);
        auto lo = hn::And(q, hn::Set(du, 15)), hi = hn::ShiftRight<4>(q);
        if constexpr (kHigh) {
          const auto h = hn::ShiftRightSame(LoadU8(x + 16 + j), 2 * c);
          lo = hn::Or(lo, hn::And(hn::ShiftLeft<4>(h), hn::Set(du, 16)));
          hi = hn::Or(hi, hn::And(hn::ShiftLeft<3>(h), hn::Set(du, 16)));
        }
        LOOM_RWMA(s0, s1, hn::Mul(hn::BitCast(d16, lo), slo), LoadI8(yq + j));
        LOOM_RWMA(s0, s1, hn::Mul(hn::BitCast(d16, hi), shi), LoadI8(yq + 32 + j));
      }
    }
    const float dy = F32(y);
    acc = hn::MulAdd(hn::Set(df, dy * F16(x)), hn::ConvertTo(df, hn::Add(s0, s1)), acc);
    mins += (dy * F16(x + 2)) * float(MinSum32(mn, y));
  }
  return hn::GetLane(hn::SumOfLanes(df, acc)) - mins;
}

float DotQ6K(int64_t nb, const uint8_t* w, const uint8_t* a) {
  const D16 d16;
  const DU16 du;
  const DF32 df;
  const size_t N = hn::Lanes(d16);
  const auto m4 = hn::Set(du, 15), m3 = hn::Set(du, 3);
  const V16 k32 = hn::Set(d16, 32);
  auto acc = hn::Zero(df);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockQ6_K));
    const uint8_t* y = a + i * int64_t(sizeof(BlockQ8_K));
    const int8_t* scales = AsI8(x + 192);
    auto s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x + 64 * h;
      const uint8_t* qh = x + 128 + 32 * h;
      const uint8_t* yq = y + kQ8KQs + 128 * h;
      const int8_t* sc = scales + 8 * h;
      for (size_t l = 0; l < 32; l += N) {
        const auto q0 = LoadU8(ql + l), q1 = LoadU8(ql + 32 + l), hb = LoadU8(qh + l);
        const int s = int(l / 16);  // sub-block of element l within each group of 32
        const auto v0 = hn::Or(hn::And(q0, m4), hn::ShiftLeft<4>(hn::And(hb, m3)));
        const auto v1 = hn::Or(hn::And(q1, m4), hn::ShiftLeft<2>(hn::And(hb, hn::Set(du, 12))));
        const auto v2 = hn::Or(hn::ShiftRight<4>(q0), hn::And(hb, hn::Set(du, 48)));
        const auto v3 = hn::Or(hn::ShiftRight<4>(q1), hn::ShiftRight<2>(hn::And(hb, hn::Set(du, 192))));
        LOOM_RWMA(s0, s1, hn::Mul(hn::Sub(hn::BitCast(d16, v0), k32), hn::Set(d16, sc[s])), LoadI8(yq + l));
        LOOM_RWMA(s0, s1, hn::Mul(hn::Sub(hn::BitCast(d16, v1), k32), hn::Set(d16, sc[2 + s])), LoadI8(yq + 32 + l));
        LOOM_RWMA(s0, s1, hn::Mul(hn::Sub(hn::BitCast(d16, v2), k32), hn::Set(d16, sc[4 + s])), LoadI8(yq + 64 + l));
        LOOM_RWMA(s0, s1, hn::Mul(hn::Sub(hn::BitCast(d16, v3), k32), hn::Set(d16, sc[6 + s])), LoadI8(yq + 96 + l));
      }
    }
    acc = hn::MulAdd(hn::Set(df, F32(y) * F16(x + 208)), hn::ConvertTo(df, hn::Add(s0, s1)), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

float DotQ2K(int64_t nb, const uint8_t* w, const uint8_t* a) {
  const D16 d16;
  const DU16 du;
  const DF32 df;
  const size_t N = hn::Lanes(d16);
  const auto m3 = hn::Set(du, 3);
  auto acc = hn::Zero(df);
  float mins = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockQ2_K));
    const uint8_t* y = a + i * int64_t(sizeof(BlockQ8_K));
    int msum = 0;
    for (int s = 0; s < 16; ++s) msum += (x[s] >> 4) * I16(y + kQ8KBsums + 2 * s);
    auto s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (int h = 0; h < 2; ++h) {
      for (size_t l = 0; l < 32; l += N) {
        const auto q = LoadU8(x + 16 + 32 * h + l);
        for (int j = 0; j < 4; ++j) {
          const size_t e = 128 * h + 32 * j + l;
          const V16 sc = hn::Set(d16, int16_t(x[e / 16] & 0x0f));
          const auto v = hn::And(hn::ShiftRightSame(q, 2 * j), m3);
          LOOM_RWMA(s0, s1, hn::Mul(hn::BitCast(d16, v), sc), LoadI8(y + kQ8KQs + e));
        }
      }
    }
    const float dy = F32(y);
    acc = hn::MulAdd(hn::Set(df, dy * F16(x + 80)), hn::ConvertTo(df, hn::Add(s0, s1)), acc);
    mins += (dy * F16(x + 82)) * float(msum);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc)) - mins;
}

float DotQ3K(int64_t nb, const uint8_t* w, const uint8_t* a) {
  const D16 d16;
  const DU16 du;
  const DF32 df;
  const size_t N = hn::Lanes(d16);
  const auto m3 = hn::Set(du, 3), one = hn::Set(du, 1);
  auto acc = hn::Zero(df);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockQ3_K));
    const uint8_t* y = a + i * int64_t(sizeof(BlockQ8_K));
    int16_t scales[16];
    for (int s = 0; s < 16; ++s) scales[s] = int16_t(q3k_scale(x + 96, s) - 32);
    auto s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (int h = 0; h < 2; ++h) {
      for (size_t l = 0; l < 32; l += N) {
        const auto q = LoadU8(x + 32 + 32 * h + l);
        const auto hm = LoadU8(x + l);
        for (int j = 0; j < 4; ++j) {
          const size_t e = 128 * h + 32 * j + l;
          const auto low = hn::And(hn::ShiftRightSame(q, 2 * j), m3);
          const auto high = hn::And(hn::ShiftRightSame(hm, 4 * h + j), one);
          // level = low + 4 * high - 4
          const V16 v = hn::Sub(hn::BitCast(d16, hn::Or(low, hn::ShiftLeft<2>(high))), hn::Set(d16, 4));
          LOOM_RWMA(s0, s1, hn::Mul(v, hn::Set(d16, scales[e / 16])), LoadI8(y + kQ8KQs + e));
        }
      }
    }
    acc = hn::MulAdd(hn::Set(df, F32(y) * F16(x + 108)), hn::ConvertTo(df, hn::Add(s0, s1)), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

float DotIQ4XS(int64_t nb, const uint8_t* w, const uint8_t* a) {
  const D16 d16;
  const DF32 df;
  const size_t N = hn::Lanes(d16);
  HWY_ALIGN uint8_t lv[32];
  auto acc = hn::Zero(df);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockIQ4_XS));
    const uint8_t* y = a + i * int64_t(sizeof(BlockQ8_K));
    uint16_t scales_h;
    std::memcpy(&scales_h, x + 2, 2);
    auto s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (int s = 0; s < 8; ++s) {
      DecodeIq4(x + 8 + 16 * s, lv);
      const V16 sc = hn::Set(d16, int16_t(iq4xs_scale(x + 4, scales_h, s) - 32));
      for (size_t j = 0; j < 32; j += N) {
        LOOM_RWMA(s0, s1, hn::Mul(LoadI8(lv + j), sc), LoadI8(y + kQ8KQs + 32 * s + j));
      }
    }
    acc = hn::MulAdd(hn::Set(df, F32(y) * F16(x)), hn::ConvertTo(df, hn::Add(s0, s1)), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

float DotQ8K(int64_t nb, const uint8_t* w, const uint8_t* a) {
  const D16 d16;
  const DF32 df;
  const size_t N = hn::Lanes(d16);
  auto acc = hn::Zero(df);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockQ8_K));
    const uint8_t* y = a + i * int64_t(sizeof(BlockQ8_K));
    auto s0 = hn::Zero(D32()), s1 = hn::Zero(D32());
    for (size_t e = 0; e < kSuper; e += N) {
      LOOM_RWMA(s0, s1, LoadI8(x + kQ8KQs + e), LoadI8(y + kQ8KQs + e));
    }
    acc = hn::MulAdd(hn::Set(df, F32(y) * F32(x)), hn::ConvertTo(df, hn::Add(s0, s1)), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}
#undef LOOM_RWMA

// ---- per-target entry points (arguments validated by the caller) ---------------------------
// One per type and operation, with the signatures of TypeTraits' slots; LOOM_HWY_KERNELS
// (kernels.h) lists them and type_traits.cpp puts them in the table.

#define LOOM_U8(p) static_cast<const uint8_t*>(p)
void DequantF16(const void* src, float* dst, int64_t n) { DequantHalf<F16Row>(n, LOOM_U8(src), dst); }
void DequantBF16(const void* src, float* dst, int64_t n) { DequantHalf<BF16Row>(n, LOOM_U8(src), dst); }
void DequantQ4_0(const void* src, float* dst, int64_t n) { DequantBlocks<FmtQ4_0, false>(n / kBlock, LOOM_U8(src), dst); }
void DequantQ5_0(const void* src, float* dst, int64_t n) { DequantBlocks<FmtQ5_0, false>(n / kBlock, LOOM_U8(src), dst); }
void DequantQ8_0(const void* src, float* dst, int64_t n) { DequantBlocks<FmtQ8_0, false>(n / kBlock, LOOM_U8(src), dst); }
void DequantQ8_1(const void* src, float* dst, int64_t n) { DequantBlocks<FmtQ8_1, false>(n / kBlock, LOOM_U8(src), dst); }
void DequantIQ4_NL(const void* src, float* dst, int64_t n) {
  DequantBlocks<FmtIQ4_NL, false>(n / kBlock, LOOM_U8(src), dst);
}
void DequantQ4_1(const void* src, float* dst, int64_t n) { DequantBlocks<FmtQ4_1, true>(n / kBlock, LOOM_U8(src), dst); }
void DequantQ5_1(const void* src, float* dst, int64_t n) { DequantBlocks<FmtQ5_1, true>(n / kBlock, LOOM_U8(src), dst); }

void QuantizeQ8_0(const float* src, void* dst, int64_t n) { QuantQ8_0(n / kBlock, src, static_cast<uint8_t*>(dst)); }
void QuantizeQ8_1(const float* src, void* dst, int64_t n) { QuantQ8_1(n / kBlock, src, static_cast<uint8_t*>(dst)); }
void QuantizeQ8_K(const float* src, void* dst, int64_t n) { QuantQ8_K(n / kSuper, src, static_cast<uint8_t*>(dst)); }
void QuantizeF16(const float* src, void* dst, int64_t n) { QuantF16(n, src, static_cast<uint8_t*>(dst)); }
void QuantizeBF16(const float* src, void* dst, int64_t n) { QuantBF16(n, src, static_cast<uint8_t*>(dst)); }
void RoundF16(const float* src, float* dst, int64_t n) { RoundHalf<false>(n, src, dst); }
void RoundBF16(const float* src, float* dst, int64_t n) { RoundHalf<true>(n, src, dst); }

float DotF32(int64_t n, const void* w, const void* a) { return DotFloat<F32Row>(n, LOOM_U8(w), LOOM_U8(a)); }
float DotF16(int64_t n, const void* w, const void* a) { return DotF16Tile1(n, LOOM_U8(w), LOOM_U8(a)); }
float DotBF16(int64_t n, const void* w, const void* a) { return DotFloat<BF16Row>(n, LOOM_U8(w), LOOM_U8(a)); }
float DotQ4_0(int64_t n, const void* w, const void* a) { return DotTile1<FmtQ4_0>(n / kBlock, LOOM_U8(w), LOOM_U8(a)); }
float DotQ5_0(int64_t n, const void* w, const void* a) { return DotTile1<FmtQ5_0>(n / kBlock, LOOM_U8(w), LOOM_U8(a)); }
float DotQ8_0(int64_t n, const void* w, const void* a) { return DotTile1<FmtQ8_0>(n / kBlock, LOOM_U8(w), LOOM_U8(a)); }
float DotIQ4_NL(int64_t n, const void* w, const void* a) { return DotTile1<FmtIQ4_NL>(n / kBlock, LOOM_U8(w), LOOM_U8(a)); }
float DotQ8_1(int64_t n, const void* w, const void* a) {
  return DotSym<FmtQ8_1, int(sizeof(BlockQ8_1))>(n / kBlock, LOOM_U8(w), LOOM_U8(a));
}
float DotQ4_1(int64_t n, const void* w, const void* a) { return DotMin<FmtQ4_1>(n / kBlock, LOOM_U8(w), LOOM_U8(a)); }
float DotQ5_1(int64_t n, const void* w, const void* a) { return DotMin<FmtQ5_1>(n / kBlock, LOOM_U8(w), LOOM_U8(a)); }
float DotQ2_K(int64_t n, const void* w, const void* a) { return DotQ2K(n / kSuper, LOOM_U8(w), LOOM_U8(a)); }
float DotQ3_K(int64_t n, const void* w, const void* a) { return DotQ3K(n / kSuper, LOOM_U8(w), LOOM_U8(a)); }
float DotQ4_K(int64_t n, const void* w, const void* a) { return DotQ45K<false>(n / kSuper, LOOM_U8(w), LOOM_U8(a)); }
float DotQ5_K(int64_t n, const void* w, const void* a) { return DotQ45K<true>(n / kSuper, LOOM_U8(w), LOOM_U8(a)); }
float DotQ6_K(int64_t n, const void* w, const void* a) { return DotQ6K(n / kSuper, LOOM_U8(w), LOOM_U8(a)); }
float DotIQ4_XS(int64_t n, const void* w, const void* a) { return DotIQ4XS(n / kSuper, LOOM_U8(w), LOOM_U8(a)); }
float DotQ8_K(int64_t n, const void* w, const void* a) { return DotQ8K(n / kSuper, LOOM_U8(w), LOOM_U8(a)); }

void RowsTileF16(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na, float* out, size_t os) {
  TileLoop<F16Tile>(n, LOOM_U8(w), ws, nw, LOOM_U8(a), as, na, out, os);
}
#define LOOM_HWY_SYM_TILE(Name, Fmt)                                                                                \
  void Name(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na, float* out, size_t os) { \
    TileLoop<SymTile<Fmt>::K>(n / kBlock, LOOM_U8(w), ws, nw, LOOM_U8(a), as, na, out, os);                         \
  }
LOOM_HWY_SYM_TILE(RowsTileQ4_0, FmtQ4_0)
LOOM_HWY_SYM_TILE(RowsTileQ5_0, FmtQ5_0)
LOOM_HWY_SYM_TILE(RowsTileQ8_0, FmtQ8_0)
LOOM_HWY_SYM_TILE(RowsTileIQ4_NL, FmtIQ4_NL)
#undef LOOM_HWY_SYM_TILE
#undef LOOM_U8

}  // namespace loom::quant::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::quant::detail {

#define LOOM_HWY_EXPORT_ONE(t, Impl) HWY_EXPORT(Impl);
LOOM_HWY_KERNELS(LOOM_HWY_EXPORT_ONE, LOOM_HWY_EXPORT_ONE, LOOM_HWY_EXPORT_ONE, LOOM_HWY_EXPORT_ONE)
#undef LOOM_HWY_EXPORT_ONE
HWY_EXPORT(RoundF16);
HWY_EXPORT(RoundBF16);

namespace highway {

#define LOOM_HWY_DEFINE_DEQUANT(t, Impl) \
  void dequantize_##t(const void* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(Impl)(src, dst, n); }
#define LOOM_HWY_DEFINE_QUANT(t, Impl) \
  void quantize_##t(const float* src, void* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(Impl)(src, dst, n); }
#define LOOM_HWY_DEFINE_DOT(t, Impl) \
  float vec_dot_##t(int64_t n, const void* w, const void* a) { return HWY_DYNAMIC_DISPATCH(Impl)(n, w, a); }
#define LOOM_HWY_DEFINE_TILE(t, Impl)                                                                              \
  void vec_dot_tile_##t(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na, float* out, \
                        size_t os) {                                                                               \
    HWY_DYNAMIC_DISPATCH(Impl)(n, w, ws, nw, a, as, na, out, os);                                                  \
  }
LOOM_HWY_KERNELS(LOOM_HWY_DEFINE_DEQUANT, LOOM_HWY_DEFINE_QUANT, LOOM_HWY_DEFINE_DOT, LOOM_HWY_DEFINE_TILE)
#undef LOOM_HWY_DEFINE_DEQUANT
#undef LOOM_HWY_DEFINE_QUANT
#undef LOOM_HWY_DEFINE_DOT
#undef LOOM_HWY_DEFINE_TILE

void round_row_half(TensorType t, const float* src, float* dst, int64_t n) {
  if (t == TensorType::BF16) return HWY_DYNAMIC_DISPATCH(RoundBF16)(src, dst, n);
  HWY_DYNAMIC_DISPATCH(RoundF16)(src, dst, n);
}

}  // namespace highway
}  // namespace loom::quant::detail
#endif  // HWY_ONCE
