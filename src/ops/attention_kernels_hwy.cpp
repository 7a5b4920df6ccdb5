// Fused online-softmax ("flash") attention tiles written once with Google Highway: compiled for
// every Highway target of the build (foreach_target.h) and dispatched at run time
// (HWY_DYNAMIC_DISPATCH) by attention.cpp after simd_enabled().
//
// One call computes one AttnTile (see attention_internal.h): the query rows of up to
// kAttnMaxKvHeads kv heads over ranges of their visible columns. Per chunk (the next kAttnChunk
// columns visible to any of the tile's tokens; kAttnRangeChunks chunks per range, whose softmax
// state starts afresh and is folded into the row's by attn_fold):
//   1. gather the columns visible to any of the tile's tokens (mask != -inf); the K/V rows of the
//      others are never touched;
//   then for each kv head of the tile:
//   2. scores S[r][j] = dot(q_r, K[cell_j]) with register tiles of (rows x cells) = 8 dot
//      products, so each K row is loaded and converted once per 1, 2 or 4 query rows (Q8_0 K: 1
//      or 2 on targets with 16 vector registers); the 8 dots are finished together by a
//      transposing reduction (x86: within 128-bit blocks, then across them; elsewhere a tree of
//      pairwise lane sums for any width);
//   3. s = S * scale (+ softcap, + ALiBi) + mask, then the online-softmax update per row:
//      m' = max(m, max_j s_j), P_j = exp(s_j - m'), l = l * exp(m - m') + sum_j P_j;
//   4. acc_r = acc_r * exp(m - m') + sum_j P[r][j] * V[cell_j], each V row loaded and converted
//      once per 1 or 2 query rows, 4 vectors of head dims at a time.
// Tiles whose rows come from cache (prefill) run steps 2-4 per kv head over the whole chunk.
// Streaming tiles (decode: each row read once, from memory) read the chunk's K rows in steps of
// cells with all kv heads (step 2 for every head), then step 3 for all rows, then the V rows in
// steps with all heads (step 4): memory in order, the next step's rows prefetched a few per dot
// product (the hardware prefetchers follow one kv head's strided rows poorly, and bursts of
// prefetches stall the loads), in address order when the step's rows are one run of memory.
// Steps only order the memory reads: every row gets the chunk's arithmetic of the per-head order
// (AccumulateV over part of a chunk continues it exactly).
// Queries are first rounded to the format the reference dot product consumes
// (quant::vec_dot_type(k_type)): F32 as is, F16 rounded to half precision and widened back,
// Q8_0 quantized with quant::quantize_row and dotted per 32-block in integers (int8 widened to
// int16, pairwise products summed in int32, exact as in quant::vec_dot), scaled in f32. Results
// match ops::ref::attention to float rounding (summation order, exp polynomial, and on targets
// without FMA, such as SSE4, MulAdd rounded twice).
//
// Vector width: the float tag is CappedTag<float, 16> (at most 512 bits: one Q8_0 block of 32
// quants widens to one vector of int16), so Lanes(d) is 16 (AVX3; SVE of 512 bits and more), 8
// (AVX2, SVE 256), 4 (SSE4, NEON, SVE 128) or 1 (HWY_SCALAR), known at run time only on SVE. The
// head size is a multiple of 8, so a row ends in at most one half vector (16 lanes only): it is
// read through a half-width tag, never past the row. No arrays of vectors (SVE vectors are
// sizeless): register tiles are named variables. The only target-conditional code picks between
// equivalent formulations (the reduction, the Q8_0 tile height); no intrinsics.
//
// AVX3 runs the full 16 lanes (bench/micro_kernels BM_attention measures it; capping it at 8 is
// slower). Its F16 loads split cache lines unless K/V rows are 64-byte aligned; the KV cache's
// storage only guarantees 16 bytes.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attention_kernels_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/cache_control.h>

#include "base/simd_hwy-inl.h"

// ---- target-independent part (compiled once, before the first target) ---------------------------
#ifndef LOOM_OPS_ATTENTION_KERNELS_HWY_ONCE_
#define LOOM_OPS_ATTENTION_KERNELS_HWY_ONCE_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/arena.h"
#include "ops/attention_internal.h"
#include "quant/quant.h"

namespace loom::ops::detail::attn {

constexpr int kRows = kAttnMaxRows;
constexpr int kChunk = kAttnChunk;
constexpr int kQ8Block = 32;  // Q8_0: {f16 d; int8 qs[32]}
constexpr int kQ8Bytes = 34;
constexpr int kMaxLanes = 16;                   // floats per vector at most (the capped tag of the kernels)
constexpr int kMaxQ = kRows * kAttnMaxKvHeads;  // query rows of a tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Floats per query row in f32 (F32/F16 K): head_dim rounded up to a whole vector, zero padded.
inline size_t q_stride(int head_dim) { return (size_t(head_dim) + kMaxLanes - 1) / kMaxLanes * kMaxLanes; }

// ---- per-thread scratch ---------------------------------------------------------------------

// Gathered columns per chunk plus room for one vector written past them (CompressStore).
constexpr int kMvStride = kChunk + kMaxLanes;

struct TileScratch {
  float* qf;           // [kMaxQ][q_stride]: queries in f32 (F32/F16 K)
  int16_t* q16;        // [kMaxQ][head_dim]: Q8_0 queries' quants widened to int16 (Q8_0 K); aliases qf
  float* qd;           // [kMaxQ][nb]: their block scales in f32
  uint8_t* qtmp;       // one query row in the K dot format (f16 or Q8_0 blocks)
  float* s;            // [kMaxQ][kChunk]: scores, then probabilities, of the tile's rows
  float* mv;           // [kAttnMaxTileTokens][kMvStride]: mask values of the gathered columns
  int32_t* idx;        // [kMvStride]: gathered column indices
  float* racc;         // [kMaxQ][attn_partial_row_floats]: range states of a whole tile's later ranges
  const uint8_t** kp;  // [kChunk]: K row of each gathered cell (current kv head)
  const uint8_t** vp;  // [kChunk]: V row
  const uint8_t** pf;  // [kChunk]: streaming tiles: rows to prefetch (kv head 0's), see below
  // Scores/AccumulateV over cells [j0, j1) prefetch pf[j - j0] + pf_off (pf_bytes of it) for
  // j - j0 < pf_n, interleaved with the arithmetic (bursts of prefetches stall the loads). Kv
  // head kl of a streaming tile sets pf_off = kl * pf_head_stride.
  int pf_n = 0, pf_bytes = 0;
  size_t pf_off = 0, pf_head_stride = 0;
  bool pf_run = false;  // the planned rows are pieces of one run of memory (PrefetchLineStarts)
  int s_shift = 0;      // query row q0 + r keeps its scores in ts.s row q0 + r - s_shift
};

inline size_t q_bytes(int head_dim) {
  const size_t f = sizeof(float) * size_t(kMaxQ) * q_stride(head_dim);
  const size_t nb = size_t(head_dim) / kQ8Block;
  const size_t q8 = Arena::padded(sizeof(int16_t) * size_t(kMaxQ) * size_t(head_dim)) + sizeof(float) * size_t(kMaxQ) * nb;
  return Arena::padded(f > q8 ? f : q8);
}

// One query row as f16 (2 bytes per element) or Q8_0 (34 bytes per 32): 2 * head_dim bytes.
inline size_t qtmp_bytes(int head_dim) { return Arena::padded(2 * size_t(head_dim)); }

// (+ kAlign: the base is rounded up to a cache line, so that whole-vector loads of the query rows
// never straddle two lines.)
inline size_t racc_bytes(int head_dim) {
  return Arena::padded(sizeof(float) * size_t(kMaxQ) * attn_partial_row_floats(head_dim));
}

inline size_t scratch_bytes(int head_dim) {
  return Arena::kAlign + q_bytes(head_dim) + qtmp_bytes(head_dim) + Arena::padded(sizeof(float) * size_t(kMaxQ) * kChunk) +
         Arena::padded(sizeof(float) * size_t(kAttnMaxTileTokens) * kMvStride) + Arena::padded(sizeof(int32_t) * kMvStride) +
         racc_bytes(head_dim) + 3 * Arena::padded(sizeof(void*) * kChunk);
}

inline TileScratch carve(void* base, int head_dim) {
  auto* p = static_cast<uint8_t*>(base);
  p += (Arena::kAlign - reinterpret_cast<uintptr_t>(p) % Arena::kAlign) % Arena::kAlign;
  TileScratch s;
  s.qf = reinterpret_cast<float*>(p);
  s.q16 = reinterpret_cast<int16_t*>(p);
  s.qd = reinterpret_cast<float*>(p + Arena::padded(sizeof(int16_t) * size_t(kMaxQ) * size_t(head_dim)));
  p += q_bytes(head_dim);
  s.qtmp = p;
  p += qtmp_bytes(head_dim);
  s.s = reinterpret_cast<float*>(p);
  p += Arena::padded(sizeof(float) * size_t(kMaxQ) * kChunk);
  s.mv = reinterpret_cast<float*>(p);
  p += Arena::padded(sizeof(float) * size_t(kAttnMaxTileTokens) * kMvStride);
  s.idx = reinterpret_cast<int32_t*>(p);
  p += Arena::padded(sizeof(int32_t) * kMvStride);
  s.racc = reinterpret_cast<float*>(p);
  p += racc_bytes(head_dim);
  s.kp = reinterpret_cast<const uint8_t**>(p);
  p += Arena::padded(sizeof(void*) * kChunk);
  s.vp = reinterpret_cast<const uint8_t**>(p);
  p += Arena::padded(sizeof(void*) * kChunk);
  s.pf = reinterpret_cast<const uint8_t**>(p);
  return s;
}

inline bool kv_type_ok(TensorType t) { return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::Q8_0; }

}  // namespace loom::ops::detail::attn

#endif  // LOOM_OPS_ATTENTION_KERNELS_HWY_ONCE_

// ---- per-target part ------------------------------------------------------------------------------
HWY_BEFORE_NAMESPACE();
namespace loom::ops::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace loom::ops::detail::attn;  // NOLINT(google-build-using-namespace): constants, scratch

using DF = hn::CappedTag<float, kMaxLanes>;
// int16 lanes for the Q8_0 dot: twice as many as floats (one vector of int32 pair sums), or one
// on HWY_SCALAR.
#if HWY_TARGET == HWY_SCALAR
using D16 = hn::Rebind<int16_t, DF>;
#else
using D16 = hn::Repartition<int16_t, DF>;
#endif

// Asks for the cache lines of `bytes` bytes at p (a prefetch never faults, even past a buffer).
// (Forced inline on purpose: GCC considers an out-of-line function that only prefetches free of
// side effects and deletes the calls.) When p is not at a line start, the last partial line is
// the next kv head's first (rows of a cell's kv heads are adjacent), prefetched with it.
HWY_INLINE void PrefetchBytes(const uint8_t* p, int bytes) {
  for (int o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);  // into L2 (see kPrefetchAhead)
}

// The cache lines that start in [p, p + bytes): pieces of one run of memory, each line once
// (a Q8_0 head of 68 bytes would otherwise ask for most lines twice).
HWY_INLINE void PrefetchLineStarts(const uint8_t* p, int bytes) {
  const int first = int((64 - reinterpret_cast<uintptr_t>(p) % 64) % 64);
  for (int o = first; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
}

// The f16 at p (a Q8_0 block scale) in every lane, converted as a vector: the compiler then keeps
// products with it in vector registers (a memory broadcast operand) instead of a scalar multiply
// and a broadcast per product.
template <class D>
HWY_INLINE hn::Vec<D> F16Broadcast(D d, const uint8_t* p) {
  const hn::Rebind<uint16_t, D> du16;
  const hn::Rebind<hwy::float16_t, D> df16;
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return hn::PromoteTo(d, hn::BitCast(df16, hn::Set(du16, bits)));
}

// The f16 at p (a Q8_0 block scale) as f32, with the target's conversion (F16C, FCVT...).
HWY_INLINE float F16At(const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(p))));
}

// ---- K/V row formats --------------------------------------------------------------------------
// Load(d, row, i): elements i .. i + Lanes(d) of one head's row as floats (d: the full tag or its
// half for the 8-element tail of a row).

struct F32Rows {
  static constexpr bool kQ8 = false;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t i) {
    return hn::LoadU(d, reinterpret_cast<const float*>(row) + i);
  }
};

struct F16Rows {
  static constexpr bool kQ8 = false;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t i) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + i));
  }
};

// Q8_0 rows: element i = qs[i] * scale of its block (the scale is applied separately).
struct Q8Rows {
  static constexpr bool kQ8 = true;
  // The int8 quants i .. i + Lanes(d) (all in one block) as floats, unscaled.
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* row, size_t i) {
    const hn::RebindToSigned<D> di;
    const hn::Rebind<int8_t, D> d8;
    const auto* qs = reinterpret_cast<const int8_t*>(row + (i / kQ8Block) * kQ8Bytes + 2 + i % kQ8Block);
    return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, qs)));
  }
};

// ---- register tiles of 8 dot products -----------------------------------------------------------
// Accumulator I = g * NC + c holds the partial dot of query row g with cell c (row-major, so that
// each row's NC finished dots are adjacent lanes of the reduction, stored together).

#define LOOM_ATTN_ACCS a0, a1, a2, a3, a4, a5, a6, a7
#define LOOM_ATTN_ACC_REFS V &a0, V &a1, V &a2, V &a3, V &a4, V &a5, V &a6, V &a7

// a_I += k * q
template <int I, class V>
HWY_INLINE void FmaAt(V k, V q, LOOM_ATTN_ACC_REFS) {
  static_assert(I >= 0 && I < 8);
  if constexpr (I == 0) a0 = hn::MulAdd(k, q, a0);
  else if constexpr (I == 1) a1 = hn::MulAdd(k, q, a1);
  else if constexpr (I == 2) a2 = hn::MulAdd(k, q, a2);
  else if constexpr (I == 3) a3 = hn::MulAdd(k, q, a3);
  else if constexpr (I == 4) a4 = hn::MulAdd(k, q, a4);
  else if constexpr (I == 5) a5 = hn::MulAdd(k, q, a5);
  else if constexpr (I == 6) a6 = hn::MulAdd(k, q, a6);
  else a7 = hn::MulAdd(k, q, a7);
}

// Cell C (of NC) against the NH query rows q0..q3: one K slice, NH products.
template <int NH, int NC, int C, class V>
HWY_INLINE void FmaCell(V k, V q0, V q1, V q2, V q3, LOOM_ATTN_ACC_REFS) {
  FmaAt<C>(k, q0, LOOM_ATTN_ACCS);
  if constexpr (NH > 1) FmaAt<NC + C>(k, q1, LOOM_ATTN_ACCS);
  if constexpr (NH > 2) FmaAt<2 * NC + C>(k, q2, LOOM_ATTN_ACCS);
  if constexpr (NH > 3) FmaAt<3 * NC + C>(k, q3, LOOM_ATTN_ACCS);
}

#if HWY_TARGET != HWY_SCALAR
// Lanes [0, N/2) = sums of adjacent lane pairs of x, [N/2, N) = those of y.
template <class D, class V>
HWY_INLINE V PairSums(D d, V x, V y) {
  return hn::Add(hn::ConcatEven(d, y, x), hn::ConcatOdd(d, y, x));
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && HWY_TARGET != HWY_SCALAR
// x86 256/512-bit: within each 128-bit block (the x86 interleaves work per block), pairs give t =
// [x_0 + x_2, y_0 + y_2, x_1 + x_3, y_1 + y_3], then the 64-bit halves of two pairs give the four
// vectors' block sums, [x, y, z, w] in each block.
template <class D, class V>
HWY_INLINE V BlockSums4(D d, V x, V y, V z, V w) {
  const hn::Repartition<double, D> dd;
  const V t0 = hn::Add(hn::InterleaveLower(d, x, y), hn::InterleaveUpper(d, x, y));
  const V t1 = hn::Add(hn::InterleaveLower(d, z, w), hn::InterleaveUpper(d, z, w));
  const auto u0 = hn::BitCast(dd, t0), u1 = hn::BitCast(dd, t1);
  return hn::Add(hn::BitCast(d, hn::InterleaveLower(dd, u0, u1)), hn::BitCast(d, hn::InterleaveUpper(dd, u0, u1)));
}
#endif

// Where SumsOf8 leaves the sum of a_i: out[DotPos(i)].
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && HWY_TARGET != HWY_SCALAR
constexpr int DotPos(int i) { return i < 4 ? i : i + 4; }  // blocks 0 and 2 of 16 lanes
#else
constexpr int DotPos(int i) { return i; }
#endif

// out[DotPos(i)] = sum of the lanes of a_i, i < 8 (out has room for max(8, MaxLanes(d)) floats).
// The 8 dot products of a register tile are finished together, which costs a few shuffles and
// adds per product instead of a whole horizontal sum each.
template <class D, class V>
HWY_INLINE void SumsOf8(D d, V a0, V a1, V a2, V a3, V a4, V a5, V a6, V a7, float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  out[0] = hn::GetLane(a0), out[1] = hn::GetLane(a1), out[2] = hn::GetLane(a2), out[3] = hn::GetLane(a3);
  out[4] = hn::GetLane(a4), out[5] = hn::GetLane(a5), out[6] = hn::GetLane(a6), out[7] = hn::GetLane(a7);
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // 4 blocks: halves added (blocks 0+2, 1+3 of each), then adjacent blocks: the sums of a0..a3 in
  // block 0, of a4..a7 in block 2. 23 single-uop operations, no lane-crossing permutes with
  // index vectors.
  const V lo = BlockSums4(d, a0, a1, a2, a3), hi = BlockSums4(d, a4, a5, a6, a7);
  const V x = hn::Add(hn::ConcatLowerLower(d, hi, lo), hn::ConcatUpperUpper(d, hi, lo));
  hn::StoreU(hn::Add(x, hn::SwapAdjacentBlocks(x)), d, out);
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  // 2 blocks: added last. 21 single-uop operations (as the hadd-based intrinsics kernel).
  const V lo = BlockSums4(d, a0, a1, a2, a3), hi = BlockSums4(d, a4, a5, a6, a7);
  hn::StoreU(hn::Add(hn::ConcatLowerLower(d, hi, lo), hn::ConcatUpperUpper(d, hi, lo)), d, out);
#else
  // Any width (SVE: known at run time): a tree of pairwise sums; each level halves the lanes per
  // accumulator and packs twice as many accumulators per vector, until one vector holds all 8
  // (then folded onto itself while wider than 8).
  const size_t N = hn::Lanes(d);
  const V b0 = PairSums(d, a0, a1), b1 = PairSums(d, a2, a3), b2 = PairSums(d, a4, a5), b3 = PairSums(d, a6, a7);
  if (N == 2) {
    hn::StoreU(b0, d, out), hn::StoreU(b1, d, out + 2), hn::StoreU(b2, d, out + 4), hn::StoreU(b3, d, out + 6);
    return;
  }
  const V c0 = PairSums(d, b0, b1), c1 = PairSums(d, b2, b3);
  if (N == 4) {
    hn::StoreU(c0, d, out), hn::StoreU(c1, d, out + 4);
    return;
  }
  V e = PairSums(d, c0, c1);
  for (size_t run = N / 8; run > 1; run /= 2) e = PairSums(d, e, e);
  hn::StoreU(e, d, out);
#endif
}

// Stores the NH x NC dot products of the accumulators to s[g * kChunk + c].
template <int NH, int NC, class D, class V>
HWY_INLINE void StoreDots(D d, V a0, V a1, V a2, V a3, V a4, V a5, V a6, V a7, float* s) {
  static_assert(NH * NC <= 8);
  constexpr size_t kRoom = hn::MaxLanes(D()) > 8 ? hn::MaxLanes(D()) : 8;
  HWY_ALIGN float sums[kRoom];
  SumsOf8(d, LOOM_ATTN_ACCS, sums);
  for (int g = 0; g < NH; ++g) {
    for (int c = 0; c < NC; ++c) s[g * kChunk + c] = sums[DotPos(g * NC + c)];
  }
}

// ---- scores: S[r][j] = q_r . K[cell j] --------------------------------------------------------

// F32/F16 K: NH query rows (f32, stride qs) against NC cells, all D elements. Each slice of a K
// row is converted once and used by the NH rows.
template <class KR, int NH, int NC, class D>
HWY_INLINE void QkTile(D d, const uint8_t* const* kp, const float* q, size_t qs, size_t D_, float* s) {
  static_assert(NH <= 4 && NC <= 8 && NH * NC <= 8);
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
#define LOOM_ATTN_CELL(C, LOAD) \
  if constexpr (NC > C) FmaCell<NH, NC, C>(LOAD, q0, q1, q2, q3, LOOM_ATTN_ACCS)
#define LOOM_ATTN_CELLS(LOADC) \
  LOOM_ATTN_CELL(0, LOADC(0)); \
  LOOM_ATTN_CELL(1, LOADC(1)); \
  LOOM_ATTN_CELL(2, LOADC(2)); \
  LOOM_ATTN_CELL(3, LOADC(3)); \
  LOOM_ATTN_CELL(4, LOADC(4)); \
  LOOM_ATTN_CELL(5, LOADC(5)); \
  LOOM_ATTN_CELL(6, LOADC(6)); \
  LOOM_ATTN_CELL(7, LOADC(7))
  size_t i = 0;
  for (; i + N <= D_; i += N) {
    const V q0 = hn::LoadU(d, q + i);
    const V q1 = NH > 1 ? hn::LoadU(d, q + qs + i) : q0;
    const V q2 = NH > 2 ? hn::LoadU(d, q + 2 * qs + i) : q0;
    const V q3 = NH > 3 ? hn::LoadU(d, q + 3 * qs + i) : q0;
#define LOOM_ATTN_LOAD_FULL(C) KR::Load(d, kp[C], i)
    LOOM_ATTN_CELLS(LOOM_ATTN_LOAD_FULL);
#undef LOOM_ATTN_LOAD_FULL
  }
#if HWY_TARGET != HWY_SCALAR
  if constexpr (hn::MaxLanes(D()) > 8) {
    if (i < D_) {  // the last 8 elements (D % 16 == 8): a half vector of K, zero extended; the
                   // query rows are zero padded to whole vectors
      const hn::Half<D> dh;
      const V q0 = hn::LoadU(d, q + i);
      const V q1 = NH > 1 ? hn::LoadU(d, q + qs + i) : q0;
      const V q2 = NH > 2 ? hn::LoadU(d, q + 2 * qs + i) : q0;
      const V q3 = NH > 3 ? hn::LoadU(d, q + 3 * qs + i) : q0;
#define LOOM_ATTN_LOAD_HALF(C) hn::ZeroExtendVector(d, KR::Load(dh, kp[C], i))
      LOOM_ATTN_CELLS(LOOM_ATTN_LOAD_HALF);
#undef LOOM_ATTN_LOAD_HALF
    }
  }
#endif
#undef LOOM_ATTN_CELLS
#undef LOOM_ATTN_CELL
  StoreDots<NH, NC>(d, LOOM_ATTN_ACCS, s);
}

// Q8_0 K against Q8_0 queries (quants widened to int16, stride D_): per 32-block the exact
// integer dot (int8 widened to int16, pairwise products summed in int32 by
// ReorderWidenMulAccumulate: one vector per block with 16 float lanes, 32 / Lanes(d16) otherwise),
// scaled by d_k * d_q and accumulated in f32, like quant::vec_dot. (On AVX2 the maddubs/sign
// formulation of the intrinsics kernel was tried: not measurably faster, so it is not used.)
template <int NH, int NC, int C, class D, class V = hn::Vec<D>>
HWY_INLINE void Q8Cell(D d, const uint8_t* blk, const int16_t* qv, size_t qs, const float* qd, size_t nb,
                       LOOM_ATTN_ACC_REFS) {
  const hn::RebindToSigned<D> d32;
  const D16 d16;
  const hn::Rebind<int8_t, D16> d8;
  const size_t L = hn::Lanes(d16);
  const auto* kq = reinterpret_cast<const int8_t*>(blk + 2);
  auto s00 = hn::Zero(d32), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00, s31 = s00;
  for (size_t o = 0; o < size_t(kQ8Block); o += L) {
    const auto k = hn::PromoteTo(d16, hn::LoadU(d8, kq + o));
    s00 = hn::ReorderWidenMulAccumulate(d32, hn::LoadU(d16, qv + o), k, s00, s01);
    if constexpr (NH > 1) s10 = hn::ReorderWidenMulAccumulate(d32, hn::LoadU(d16, qv + qs + o), k, s10, s11);
    if constexpr (NH > 2) s20 = hn::ReorderWidenMulAccumulate(d32, hn::LoadU(d16, qv + 2 * qs + o), k, s20, s21);
    if constexpr (NH > 3) s30 = hn::ReorderWidenMulAccumulate(d32, hn::LoadU(d16, qv + 3 * qs + o), k, s30, s31);
  }
  const auto i0 = hn::RearrangeToOddPlusEven(s00, s01);
  const auto i1 = hn::RearrangeToOddPlusEven(s10, s11);
  const auto i2 = hn::RearrangeToOddPlusEven(s20, s21);
  const auto i3 = hn::RearrangeToOddPlusEven(s30, s31);
  // weight = d_k * d_q: d_k broadcast once per cell, d_q straight from memory per row.
  const V vdk = F16Broadcast(d, blk);
  FmaAt<C>(hn::Mul(vdk, hn::Set(d, qd[0])), hn::ConvertTo(d, i0), LOOM_ATTN_ACCS);
  if constexpr (NH > 1) FmaAt<NC + C>(hn::Mul(vdk, hn::Set(d, qd[nb])), hn::ConvertTo(d, i1), LOOM_ATTN_ACCS);
  if constexpr (NH > 2) FmaAt<2 * NC + C>(hn::Mul(vdk, hn::Set(d, qd[2 * nb])), hn::ConvertTo(d, i2), LOOM_ATTN_ACCS);
  if constexpr (NH > 3) FmaAt<3 * NC + C>(hn::Mul(vdk, hn::Set(d, qd[3 * nb])), hn::ConvertTo(d, i3), LOOM_ATTN_ACCS);
}

template <int NH, int NC, class D>
HWY_INLINE void QkTileQ8(D d, const uint8_t* const* kp, const int16_t* qv, size_t qs, const float* qd, size_t nb, float* s) {
  static_assert(NH <= 4 && NC <= 8 && NH * NC <= 8);
  using V = hn::Vec<D>;
  V a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t b = 0; b < nb; ++b) {
    const size_t bo = b * kQ8Bytes;
    const int16_t* qb = qv + b * kQ8Block;
#define LOOM_ATTN_Q8CELL(C) \
  if constexpr (NC > C) Q8Cell<NH, NC, C>(d, kp[C] + bo, qb, qs, qd + b, nb, LOOM_ATTN_ACCS)
    LOOM_ATTN_Q8CELL(0);
    LOOM_ATTN_Q8CELL(1);
    LOOM_ATTN_Q8CELL(2);
    LOOM_ATTN_Q8CELL(3);
    LOOM_ATTN_Q8CELL(4);
    LOOM_ATTN_Q8CELL(5);
    LOOM_ATTN_Q8CELL(6);
    LOOM_ATTN_Q8CELL(7);
#undef LOOM_ATTN_Q8CELL
  }
  StoreDots<NH, NC>(d, LOOM_ATTN_ACCS, s);
}

// Gathered cells [j0, j1) for rows [r, r + NH) of the current kv head, whose query rows start at
// row q0 of the query buffers; scores into ts.s row q0 + r - s_shift.
// Prefetches of ts.pf for the cells [j, j + n) of a call over [j0, ...).
HWY_INLINE void PrefetchPlanned(const TileScratch& ts, int j, int n, int j0) {
  for (int c = j - j0; c < j - j0 + n && c < ts.pf_n; ++c) {
    if (ts.pf_run) PrefetchLineStarts(ts.pf[c] + ts.pf_off, ts.pf_bytes);
    else PrefetchBytes(ts.pf[c] + ts.pf_off, ts.pf_bytes);
  }
}

template <class KR, int NH>
HWY_INLINE void ScoreRows(const TileScratch& ts, int q0, int r, int j0, int j1, int D_) {
  constexpr int NC = 8 / NH;
  const DF d;
  float* s = ts.s + size_t(q0 + r - ts.s_shift) * kChunk;
  const bool pf = r == 0 && ts.pf_n > 0;
  int j = j0;
  if constexpr (KR::kQ8) {
    const size_t nb = size_t(D_) / kQ8Block;
    const int16_t* qv = reinterpret_cast<const int16_t*>(ts.q16) + size_t(q0 + r) * size_t(D_);
    const float* qd = ts.qd + size_t(q0 + r) * nb;
    for (; j + NC <= j1; j += NC) {
      if (pf) PrefetchPlanned(ts, j, NC, j0);
      QkTileQ8<NH, NC>(d, ts.kp + j, qv, size_t(D_), qd, nb, s + j);
    }
    for (; j < j1; ++j) {
      if (pf) PrefetchPlanned(ts, j, 1, j0);
      QkTileQ8<NH, 1>(d, ts.kp + j, qv, size_t(D_), qd, nb, s + j);
    }
  } else {
    const size_t qs = q_stride(D_);
    const float* q = ts.qf + size_t(q0 + r) * qs;
    for (; j + NC <= j1; j += NC) {
      if (pf) PrefetchPlanned(ts, j, NC, j0);
      QkTile<KR, NH, NC>(d, ts.kp + j, q, qs, size_t(D_), s + j);
    }
    for (; j < j1; ++j) {
      if (pf) PrefetchPlanned(ts, j, 1, j0);
      QkTile<KR, NH, 1>(d, ts.kp + j, q, qs, size_t(D_), s + j);
    }
  }
}

// Targets with 16 vector registers (x86 below AVX-512) score Q8_0 K 2 rows at a time: 4 rows need
// 4 integer and 8 float accumulators beside the widened K and spill.
#if HWY_ARCH_X86 && HWY_TARGET >= HWY_AVX2
constexpr bool kFewRegisters = true;
#else
constexpr bool kFewRegisters = false;
#endif

// S[q0..q0+R)[j0..j1) for the current kv head (query rows q0..q0+R).
template <class KR>
HWY_NOINLINE void Scores(const TileScratch& ts, int q0, int R, int j0, int j1, int D_) {
  for (int r = 0; r < R;) {
    if (R - r >= 4 && !(KR::kQ8 && kFewRegisters)) {
      ScoreRows<KR, 4>(ts, q0, r, j0, j1, D_);
      r += 4;
    } else if (R - r >= 2) {
      ScoreRows<KR, 2>(ts, q0, r, j0, j1, D_);
      r += 2;
    } else {
      ScoreRows<KR, 1>(ts, q0, r, j0, j1, D_);
      r += 1;
    }
  }
}

// ---- output: acc_r = acc_r * fac_r + sum_j P[r][j] * V[cell j] --------------------------------

// NH rows (1 or 2), NB vectors (4 or 1) of head dims from i (d: the full tag, or its half for the
// last 8 dims of a row). Each V slice is converted once and used by the NH rows; accumulators
// stay in registers over all cells. Q8_0: a pass of 4 vectors lies in one block, or (16 lanes)
// in two: vectors 0-1 and 2-3.
template <class VR, int NH, int NB, class D>
HWY_INLINE void VBlock(D d, const TileScratch& ts, int rs, int j0, int j1, float* const* acc, const float* fac, size_t i,
                       bool pf) {
  static_assert((NH == 1 || NH == 2) && (NB == 1 || NB == 4));
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  float* o0 = acc[0] + i;
  float* o1 = acc[NH > 1 ? 1 : 0] + i;
  const V f0 = hn::Set(d, fac[0]);
  const V f1 = hn::Set(d, fac[NH > 1 ? 1 : 0]);
  V x00 = hn::Mul(hn::LoadU(d, o0), f0), x01 = x00, x02 = x00, x03 = x00;
  V x10 = x00, x11 = x00, x12 = x00, x13 = x00;
  if constexpr (NB > 1) {
    x01 = hn::Mul(hn::LoadU(d, o0 + N), f0);
    x02 = hn::Mul(hn::LoadU(d, o0 + 2 * N), f0);
    x03 = hn::Mul(hn::LoadU(d, o0 + 3 * N), f0);
  }
  if constexpr (NH > 1) {
    x10 = hn::Mul(hn::LoadU(d, o1), f1);
    if constexpr (NB > 1) {
      x11 = hn::Mul(hn::LoadU(d, o1 + N), f1);
      x12 = hn::Mul(hn::LoadU(d, o1 + 2 * N), f1);
      x13 = hn::Mul(hn::LoadU(d, o1 + 3 * N), f1);
    }
  }
  const float* P = ts.s + size_t(rs) * kChunk;
  // Q8_0: the scale of the pass's first block and, when it spans two, of the second.
  const size_t blk0 = (i / kQ8Block) * kQ8Bytes;
  const bool two_blocks = VR::kQ8 && NB * N > size_t(kQ8Block);
  for (int j = j0; j < j1; ++j) {
    const uint8_t* row = ts.vp[j];
    if (pf) PrefetchPlanned(ts, j, 1, j0);
    const V v0 = VR::Load(d, row, i);
    const V v1 = NB > 1 ? VR::Load(d, row, i + N) : v0;
    const V v2 = NB > 1 ? VR::Load(d, row, i + 2 * N) : v0;
    const V v3 = NB > 1 ? VR::Load(d, row, i + 3 * N) : v0;
    // Weights P[g][j] (times the block scale for Q8_0, multiplied in vector registers: the
    // probabilities are broadcast from memory, the scale converted once per cell).
    V w0 = hn::Set(d, P[j]), w1 = hn::Set(d, P[NH > 1 ? kChunk + j : j]);
    V w0b = w0, w1b = w1;  // weights of vectors 2-3
    if constexpr (VR::kQ8) {
      const V sc0 = F16Broadcast(d, row + blk0);
      const V sc1 = two_blocks ? F16Broadcast(d, row + blk0 + kQ8Bytes) : sc0;
      w0b = hn::Mul(w0, sc1), w1b = hn::Mul(w1, sc1);
      w0 = hn::Mul(w0, sc0), w1 = hn::Mul(w1, sc0);
    }
    x00 = hn::MulAdd(w0, v0, x00);
    if constexpr (NB > 1) {
      x01 = hn::MulAdd(w0, v1, x01);
      x02 = hn::MulAdd(w0b, v2, x02);
      x03 = hn::MulAdd(w0b, v3, x03);
    }
    if constexpr (NH > 1) {
      x10 = hn::MulAdd(w1, v0, x10);
      if constexpr (NB > 1) {
        x11 = hn::MulAdd(w1, v1, x11);
        x12 = hn::MulAdd(w1b, v2, x12);
        x13 = hn::MulAdd(w1b, v3, x13);
      }
    }
  }
  hn::StoreU(x00, d, o0);
  if constexpr (NB > 1) {
    hn::StoreU(x01, d, o0 + N), hn::StoreU(x02, d, o0 + 2 * N), hn::StoreU(x03, d, o0 + 3 * N);
  }
  if constexpr (NH > 1) {
    hn::StoreU(x10, d, o1);
    if constexpr (NB > 1) {
      hn::StoreU(x11, d, o1 + N), hn::StoreU(x12, d, o1 + 2 * N), hn::StoreU(x13, d, o1 + 3 * N);
    }
  }
}

template <class VR, int NH>
HWY_INLINE void VRows(const TileScratch& ts, int rs, int j0, int j1, float* const* acc, const float* fac, int D_, bool pf) {
  const DF d;
  const size_t N = hn::Lanes(d), Dm = size_t(D_);
  size_t i = 0;
  for (; i + 4 * N <= Dm; i += 4 * N) VBlock<VR, NH, 4>(d, ts, rs, j0, j1, acc, fac, i, pf && i == 0);
  for (; i + N <= Dm; i += N) VBlock<VR, NH, 1>(d, ts, rs, j0, j1, acc, fac, i, pf && i == 0);
#if HWY_TARGET != HWY_SCALAR
  if constexpr (hn::MaxLanes(DF()) > 8) {
    if (i < Dm) VBlock<VR, NH, 1>(hn::Half<DF>(), ts, rs, j0, j1, acc, fac, i, pf && i == 0);  // the last 8
  }
#endif
}

// acc[r] = acc[r] * fac[r] + sum_{j0 <= j < j1} P[q0 + r][j] * V[cell j] for the R rows of the
// current kv head (probabilities in ts.s rows q0..q0+R). A chunk's cells may be split into
// several calls (fac = 1 after the first: exact), which gives the bits of one call.
template <class VR>
HWY_NOINLINE void AccumulateV(const TileScratch& ts, int q0, int R, int j0, int j1, float* const* acc, const float* fac,
                              int D_) {
  int r = 0;
  const bool pf = ts.pf_n > 0;
  for (; r + 2 <= R; r += 2) VRows<VR, 2>(ts, q0 + r - ts.s_shift, j0, j1, acc + r, fac + r, D_, pf && r == 0);
  if (r < R) VRows<VR, 1>(ts, q0 + r - ts.s_shift, j0, j1, acc + r, fac + r, D_, pf && r == 0);
}

// ---- cells -----------------------------------------------------------------------------------

// Gathers the next kChunk columns from *cursor on (fewer at the end of the mask) visible to any
// of the n_tok mask rows (mask != -inf; NaN counts as visible, as in the reference): their
// indices into idx and, per token, their mask values into mv[tt * kMvStride + j]. Returns how
// many; *cursor moves past the last one gathered (to n_kv when the columns ran out).
HWY_INLINE int GatherVisible(const float* const* mrows, int n_tok, int* cursor, int n_kv, int32_t* idx, float* mv) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const int N = int(hn::Lanes(d));
  const auto ninf = hn::Set(d, kNegInf);
  int nv = 0, c = *cursor;
  for (; c + N <= n_kv && nv < kChunk; c += N) {
    auto hidden = hn::Eq(hn::LoadU(d, mrows[0] + c), ninf);
    for (int tt = 1; tt < n_tok; ++tt) hidden = hn::And(hidden, hn::Eq(hn::LoadU(d, mrows[tt] + c), ninf));
    if (hn::AllTrue(d, hidden)) continue;
    const auto vis = hn::Not(hidden);
    const int n = int(hn::CountTrue(d, vis));
    if (nv + n > kChunk) break;  // this block completes the chunk: column by column below
    if (n == N) {                // dense run (the common case): copy N at once
      hn::StoreU(hn::Iota(di, c), di, idx + nv);
      for (int tt = 0; tt < n_tok; ++tt) hn::StoreU(hn::LoadU(d, mrows[tt] + c), d, mv + tt * kMvStride + nv);
    } else {
      // (CompressStore may write all N lanes: nv + N < kChunk + N = kMvStride.)
      hn::CompressStore(hn::Iota(di, c), hn::RebindMask(di, vis), di, idx + nv);
      for (int tt = 0; tt < n_tok; ++tt) hn::CompressStore(hn::LoadU(d, mrows[tt] + c), vis, d, mv + tt * kMvStride + nv);
    }
    nv += n;
  }
  for (; c < n_kv && nv < kChunk; ++c) {
    bool any = false;
    for (int tt = 0; tt < n_tok; ++tt) any |= !(mrows[tt][c] == kNegInf);
    if (!any) continue;
    idx[nv] = c;
    for (int tt = 0; tt < n_tok; ++tt) mv[tt * kMvStride + nv] = mrows[tt][c];
    ++nv;
  }
  *cursor = c;
  return nv;
}

// ---- the tile --------------------------------------------------------------------------------

template <class KR, class VR>
HWY_NOINLINE void TileImpl(const AttentionParams& p, const float* q, float* out, const AttnTile& tl, float* part,
                           void* scratch) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const int D_ = p.head_dim;
  const int group = p.n_head / p.n_head_kv;
  const int R = tl.n_tok * tl.n_h;  // rows per kv head
  const int RT = tl.n_kvh * R;      // rows of the tile: rr = kl * R + r
  TileScratch ts = carve(scratch, D_);

  // Query rows in the K dot format.
  int heads[kMaxQ], toks[kMaxQ];
  const size_t qs = q_stride(D_);
  for (int rr = 0; rr < RT; ++rr) {
    const int kl = rr / R, r = rr % R;
    toks[rr] = tl.t0 + r / tl.n_h;
    heads[rr] = (tl.kvh0 + kl) * group + tl.h0 + r % tl.n_h;
    const float* qr = q + (size_t(toks[rr]) * p.n_head + size_t(heads[rr])) * D_;
    if constexpr (KR::kQ8) {
      const int nb = D_ / kQ8Block;
      quant::quantize_row(TensorType::Q8_0, qr, ts.qtmp, D_);
      int16_t* qv = reinterpret_cast<int16_t*>(ts.q16) + size_t(rr) * D_;
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = ts.qtmp + size_t(b) * kQ8Bytes;
        ts.qd[rr * nb + b] = F16At(blk);
        for (int k = 0; k < kQ8Block; ++k) qv[b * kQ8Block + k] = int16_t(int8_t(blk[2 + k]));
      }
    } else {
      float* qf = ts.qf + size_t(rr) * qs;
      if constexpr (std::is_same_v<KR, F16Rows>) {
        // Rounded by the reference's conversion, widened back as F16 K rows are (D_ % 8 == 0).
        quant::quantize_row(TensorType::F16, qr, ts.qtmp, D_);
        const hn::CappedTag<float, 8> d8;
        for (size_t i = 0; i < size_t(D_); i += hn::Lanes(d8)) hn::StoreU(F16Rows::Load(d8, ts.qtmp, i), d8, qf + i);
      } else {
        std::memcpy(qf, qr, sizeof(float) * size_t(D_));
      }
      for (size_t i = size_t(D_); i < qs; ++i) qf[i] = 0.0f;
    }
  }

  // Rows' outputs, their running (folded) state, and the state of the current range: its
  // accumulators live in the partial buffer (split pieces), else in the output for the first
  // range (folding into an empty state is a copy) and in scratch for the later ones.
  const size_t pstride = attn_partial_row_floats(D_);
  float* orow[kMaxQ];
  float* acc[kMaxQ];
  float m[kMaxQ], fac[kMaxQ], gm[kMaxQ];
  double l[kMaxQ], gl[kMaxQ];
  for (int rr = 0; rr < RT; ++rr) {
    orow[rr] = out + (size_t(toks[rr]) * p.n_head + size_t(heads[rr])) * D_;
    gm[rr] = kNegInf;
    gl[rr] = 0.0;
  }

  const float* mrows[kAttnMaxTileTokens];
  for (int tt = 0; tt < tl.n_tok; ++tt) mrows[tt] = p.mask + size_t(tl.t0 + tt) * p.n_kv;
  const size_t k_head = size_t(row_bytes(p.k_type, D_)), v_head = size_t(row_bytes(p.v_type, D_));
  const bool plain = !(p.softcap > 0) && !p.alibi_slopes && !p.pos_bucket;
  const auto vscale = hn::Set(d, p.scale);
  const int32_t* cells = p.kv_cells;
  auto cell_of = [cells](int c) { return size_t(cells ? cells[c] : c); };
  const auto* kb0 = static_cast<const uint8_t*>(p.k);
  const auto* vb0 = static_cast<const uint8_t*>(p.v);
  // The K (and V) rows of kv head kvh for the gathered cells [j0, j1).
  auto point_rows = [&](int kvh, int j0, int j1) {
    const uint8_t* kbase = kb0 + size_t(kvh) * k_head;
    const uint8_t* vbase = vb0 + size_t(kvh) * v_head;
    for (int j = j0; j < j1; ++j) {
      const size_t cell = cell_of(ts.idx[j]);
      ts.kp[j] = kbase + cell * p.k_row_bytes;
      ts.vp[j] = vbase + cell * p.v_row_bytes;
    }
  };
  // Streaming tiles (decode: every cell is read once, from memory) read a chunk's K rows, then
  // its V rows, in steps of `step` cells with all the tile's kv heads (a cell's heads are
  // adjacent: memory is read in order), prefetching the next step's rows (the next chunk's
  // first ones, after the last step, assuming its columns follow). Steps only order the memory
  // reads: every row's scores, softmax and accumulation are those of the whole chunk.
  int step = kChunk;
  if (tl.stream) {
    // A power of two, so that the steps divide the chunk evenly (each step prefetches the next).
    const size_t want = kAttnStreamStepBytes / (size_t(tl.n_kvh) * (k_head + v_head));
    step = 16;
    while (step < kChunk && size_t(step) * 2 <= want) step *= 2;
  }
  const uint8_t* k_first = kb0 + size_t(tl.kvh0) * k_head;
  const uint8_t* v_first = vb0 + size_t(tl.kvh0) * v_head;
  if (tl.stream) {  // the first step's K rows, all at once
    for (int c = tl.c_begin; c < p.n_kv && c < tl.c_begin + step; ++c) {
      PrefetchBytes(k_first + cell_of(c) * p.k_row_bytes, int(size_t(tl.n_kvh) * k_head));
    }
  }
  // Plans the prefetch of the rows of the gathered cells [j0, j1), or of the columns [c0, c1)
  // when j0 < 0 (the next chunk's, not gathered yet), spread over the calls of the current step:
  // each kv head's calls prefetch n rows' worth. When those rows are one run of memory (adjacent
  // cells whose rows hold just the tile's kv heads: decode over a contiguous cache), the calls
  // walk it in address order, kv head kl taking the kl-th n-th of it, each line once; measured
  // faster than each kv head prefetching its own short rows a cell row apart (bench/README,
  // "Decode attention at depth on AVX2"). Otherwise each kv head prefetches its own rows.
  auto plan = [&](int j0, int j1, int c0, int c1, const uint8_t* base, size_t row_bytes, size_t head) {
    int n = 0;
    if (j0 >= 0) {
      for (int j = j0; j < j1; ++j) ts.pf[n++] = base + cell_of(ts.idx[j]) * row_bytes;
    } else {
      for (int c = c0; c < c1 && c < p.n_kv; ++c) ts.pf[n++] = base + cell_of(c) * row_bytes;
    }
    bool run = n > 1 && row_bytes == size_t(tl.n_kvh) * head;
    for (int i = 1; run && i < n; ++i) run = ts.pf[i] == ts.pf[0] + size_t(i) * row_bytes;
    if (run) {
      for (int i = 1; i < n; ++i) ts.pf[i] = ts.pf[0] + size_t(i) * head;
    }
    ts.pf_head_stride = run ? size_t(n) * head : head;
    ts.pf_run = run;
    ts.pf_n = n;
    ts.pf_bytes = int(head);
  };
  HWY_ALIGN float ones[kMaxQ];
  for (int rr = 0; rr < RT; ++rr) ones[rr] = 1.0f;

  // Scores -> probabilities of the rows of kv head block row q0 over the nv gathered cells.
  auto probabilities = [&](int q0, int nv, int nvp) {
    for (int r = 0; r < R; ++r) {
      const int rr = q0 + r;
      float* s = ts.s + size_t(rr - ts.s_shift) * kChunk;
      const float* mv = ts.mv + size_t(r / tl.n_h) * kMvStride;
      auto vmax = hn::Set(d, kNegInf);
      if (plain) {
        // score * scale + mask, as the reference; the tail lanes get 0 * scale + -inf.
        for (int j = nv; j < nvp; ++j) s[j] = 0.0f;
        for (size_t j = 0; j < size_t(nvp); j += N) {
          const auto x = hn::Add(hn::Mul(hn::LoadU(d, s + j), vscale), hn::LoadU(d, mv + j));
          hn::StoreU(x, d, s + j);
          vmax = hn::Max(vmax, x);
        }
      } else {
        const float slope = p.alibi_slopes ? p.alibi_slopes[heads[rr]] : 0.0f;
        const int32_t qpos = p.alibi_slopes ? p.q_pos[toks[rr]] : 0;
        const int32_t* brow = p.pos_bucket ? p.pos_bucket + size_t(toks[rr]) * size_t(p.n_kv) : nullptr;
        float mx = kNegInf;
        for (int j = 0; j < nv; ++j) {
          float sc = s[j] * p.scale;
          if (p.softcap > 0) sc = p.softcap * std::tanh(sc / p.softcap);
          if (p.alibi_slopes) sc += slope * float(p.kv_pos[ts.idx[j]] - qpos);
          if (brow) sc += p.pos_bias[size_t(brow[ts.idx[j]]) * size_t(p.n_head) + size_t(heads[rr])];
          s[j] = sc + mv[j];
          mx = s[j] > mx ? s[j] : mx;
        }
        for (int j = nv; j < nvp; ++j) s[j] = kNegInf;
        vmax = hn::Set(d, mx);
      }
      const float cmax = hn::GetLane(hn::MaxOfLanes(d, vmax));
      if (cmax == kNegInf) {  // this row's token sees none of these columns: exact no-op
        fac[rr] = 1.0f;
        for (size_t j = 0; j < size_t(nvp); j += N) hn::StoreU(hn::Zero(d), d, s + j);
        continue;
      }
      const float m_new = cmax > m[rr] ? cmax : m[rr];
      fac[rr] = std::exp(m[rr] - m_new);  // 0 on the range's first visible chunk (m = -inf)
      const auto vm = hn::Set(d, m_new);
      auto sum = hn::Zero(d);
      for (size_t j = 0; j < size_t(nvp); j += N) {
        const auto e = loom::simd::HWY_NAMESPACE::ExpNonPos(d, hn::Sub(hn::LoadU(d, s + j), vm));
        hn::StoreU(e, d, s + j);
        sum = hn::Add(sum, e);
      }
      l[rr] = l[rr] * fac[rr] + double(hn::GetLane(hn::SumOfLanes(d, sum)));
      m[rr] = m_new;
    }
  };

  int cursor = tl.c_begin, rg = 0;
  for (; rg < tl.n_ranges && cursor < p.n_kv; ++rg) {
    for (int rr = 0; rr < RT; ++rr) {
      acc[rr] = part ? part + (size_t(rg) * size_t(RT) + size_t(rr)) * pstride
                     : (rg == 0 ? orow[rr] : ts.racc + size_t(rr) * pstride);
      std::memset(acc[rr], 0, sizeof(float) * size_t(D_));
      m[rr] = kNegInf;
      l[rr] = 0.0;
    }
    int seen = 0;
    for (int ch = 0; ch < kAttnRangeChunks && cursor < p.n_kv; ++ch) {
      const int nv = GatherVisible(mrows, tl.n_tok, &cursor, p.n_kv, ts.idx, ts.mv);
      if (nv == 0) break;
      seen += nv;
      // Scores and masks are processed in whole vectors: nv rounded up to a multiple of N (a
      // power of two <= 16, so nvp <= kChunk).
      const int nvp = (nv + int(N) - 1) & ~(int(N) - 1);
      for (int tt = 0; tt < tl.n_tok; ++tt) {
        for (int j = nv; j < nvp; ++j) ts.mv[tt * kMvStride + j] = kNegInf;
      }
      if (!tl.stream) {
        // From cache: each kv head's K and V rows of the chunk in turn, reused by its rows.
        ts.pf_n = 0;
        for (int kl = 0; kl < tl.n_kvh; ++kl) {
          const int q0 = kl * R;
          ts.s_shift = q0;
          point_rows(tl.kvh0 + kl, 0, nv);
          Scores<KR>(ts, q0, R, 0, nv, D_);
          probabilities(q0, nv, nvp);
          AccumulateV<VR>(ts, q0, R, 0, nv, acc + q0, fac + q0, D_);
        }
        continue;
      }
      ts.s_shift = 0;
      for (int j0 = 0; j0 < nv; j0 += step) {
        const int j1 = j0 + step < nv ? j0 + step : nv;
        // Prefetch: the next step's K rows, or after the last one the chunk's first V rows.
        if (j1 < nv) plan(j1, j1 + step < nv ? j1 + step : nv, 0, 0, k_first, p.k_row_bytes, k_head);
        else plan(0, step < nv ? step : nv, 0, 0, v_first, p.v_row_bytes, v_head);
        for (int kl = 0; kl < tl.n_kvh; ++kl) {
          ts.pf_off = size_t(kl) * ts.pf_head_stride;
          point_rows(tl.kvh0 + kl, j0, j1);
          Scores<KR>(ts, kl * R, R, j0, j1, D_);
        }
      }
      for (int kl = 0; kl < tl.n_kvh; ++kl) probabilities(kl * R, nv, nvp);
      for (int j0 = 0; j0 < nv; j0 += step) {
        const int j1 = j0 + step < nv ? j0 + step : nv;
        // Prefetch: the next step's V rows, or after the last one the next chunk's first K rows
        // (the columns after the cursor: the next chunk's when they are visible).
        if (j1 < nv) plan(j1, j1 + step < nv ? j1 + step : nv, 0, 0, v_first, p.v_row_bytes, v_head);
        else plan(-1, 0, cursor, cursor + step, k_first, p.k_row_bytes, k_head);
        for (int kl = 0; kl < tl.n_kvh; ++kl) {
          const int q0 = kl * R;
          ts.pf_off = size_t(kl) * ts.pf_head_stride;
          point_rows(tl.kvh0 + kl, j0, j1);
          AccumulateV<VR>(ts, q0, R, j0, j1, acc + q0, j0 == 0 ? fac + q0 : ones, D_);
        }
      }
    }
    if (seen == 0) break;  // no visible column left
    // The range's state, into the partials, or folded into the row's running state.
    for (int rr = 0; rr < RT; ++rr) {
      float* pr = acc[rr];  // [acc, m, l]
      if (part || rg > 0) {
        pr[D_] = m[rr];
        pr[D_ + 1] = float(l[rr]);
        if (!part) attn_fold(orow[rr], &gm[rr], &gl[rr], pr, D_);
      } else if (l[rr] > 0) {  // the first range of a whole tile: its state is the running one
        gm[rr] = m[rr];
        gl[rr] = double(float(l[rr]));
      }
    }
  }

  if (part) {
    for (; rg < tl.n_ranges; ++rg) {  // ranges past the last visible column
      for (int rr = 0; rr < RT; ++rr) {
        float* pr = part + (size_t(rg) * size_t(RT) + size_t(rr)) * pstride;
        pr[D_] = kNegInf;
        pr[D_ + 1] = 0.0f;
      }
    }
  } else {
    // Rows that saw no cell become 0, the reference's output for them.
    for (int rr = 0; rr < RT; ++rr) {
      if (p.sinks) attn_finish_sink(orow[rr], gm[rr], gl[rr], p.sinks[heads[rr]], D_);
      else attn_finish(orow[rr], gl[rr], D_);
    }
  }
}

using TileFn = void (*)(const AttentionParams&, const float*, float*, const AttnTile&, float*, void*);

template <class KR>
TileFn PickV(TensorType v) {
  switch (v) {
    case TensorType::F32: return TileImpl<KR, F32Rows>;
    case TensorType::F16: return TileImpl<KR, F16Rows>;
    case TensorType::Q8_0: return TileImpl<KR, Q8Rows>;
    default: return nullptr;
  }
}

TileFn Pick(TensorType k, TensorType v) {
  switch (k) {
    case TensorType::F32: return PickV<F32Rows>(v);
    case TensorType::F16: return PickV<F16Rows>(v);
    case TensorType::Q8_0: return PickV<Q8Rows>(v);
    default: return nullptr;
  }
}

// Entry point per target (supports() was checked by the caller).
void AttentionTileImpl(const AttentionParams& p, const float* q, float* out, const AttnTile& tile, float* part,
                       void* scratch) {
  Pick(p.k_type, p.v_type)(p, q, out, tile, part, scratch);
}

#undef LOOM_ATTN_ACCS
#undef LOOM_ATTN_ACC_REFS

}  // namespace loom::ops::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::ops::detail {
HWY_EXPORT(AttentionTileImpl);

size_t attn_tile_scratch_bytes(int head_dim) { return attn::scratch_bytes(head_dim); }

bool supports(TensorType k_type, TensorType v_type, int head_dim) {
  if (head_dim <= 0 || head_dim % 8 != 0 || !attn::kv_type_ok(k_type) || !attn::kv_type_ok(v_type)) return false;
  const bool q8 = k_type == TensorType::Q8_0 || v_type == TensorType::Q8_0;
  return !q8 || head_dim % attn::kQ8Block == 0;
}

void attention_tile(const AttentionParams& p, const float* q, float* out, const AttnTile& tile, float* part, void* scratch) {
  HWY_DYNAMIC_DISPATCH(AttentionTileImpl)(p, q, out, tile, part, scratch);
}
}  // namespace loom::ops::detail
#endif  // HWY_ONCE
