// Fused online-softmax ("flash") attention tiles with AVX2 + FMA + F16C, compiled with
// __attribute__((target)) and only called after the run-time CPU check in attention.cpp.
//
// One call computes one AttnTile (see attention_internal.h): the query rows of up to
// kAttnMaxKvHeads kv heads over a range of cells. Per chunk of cells (kAttnChunk, or fewer for
// streaming tiles, see kAttnStreamChunkBytes):
//   1. gather the cells visible to any of the tile's tokens (mask != -inf); the K/V rows of the
//      others are never touched;
//   then for each kv head of the tile:
//   2. scores S[r][j] = dot(q_r, K[cell_j]) with register tiles of (rows x cells), so each K row
//      is loaded and converted once per 1, 2 or 4 query rows;
//   3. s = S * scale (+ softcap, + ALiBi) + mask, then the online-softmax update per row:
//      m' = max(m, max_j s_j), P_j = exp(s_j - m'), l = l * exp(m - m') + sum_j P_j;
//   4. acc_r = acc_r * exp(m - m') + sum_j P[r][j] * V[cell_j], each V row loaded and converted
//      once per 1 or 2 query rows.
// While a kv head's rows of one chunk are read, those of the next chunk are prefetched: the rows
// of one kv head are strided by the others, which the hardware prefetchers follow poorly.
// Queries are first rounded to the format the reference dot product consumes
// (quant::vec_dot_type(k_type)): F32 as is, F16 rounded to half precision and widened back,
// Q8_0 quantized with quant::quantize_row and dotted per 32-block in integers, as quant::vec_dot
// does. Results match ops::ref::attention to float rounding (summation order, exp polynomial).
#include "ops/attention_internal.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/arena.h"
#include "base/simd_avx2.h"
#include "quant/quant.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace loom::ops::detail {

namespace {

constexpr int kRows = kAttnMaxRows;
constexpr int kChunk = kAttnChunk;
constexpr int kQ8Block = 32;  // Q8_0: {f16 d; int8 qs[32]}
constexpr int kQ8Bytes = 34;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- per-thread scratch ---------------------------------------------------------------------

struct TileScratch {
  float* qf;          // [kMaxQ][head_dim]: queries in f32 (F32/F16 K)
  uint8_t* q8;        // [kMaxQ][nb * 34]: queries as Q8_0 blocks (Q8_0 K); aliases qf's space
  float* qd;          // [kMaxQ][nb]: their block scales in f32
  uint16_t* q16;      // [head_dim]: one query row rounded to f16
  float* s;           // [kRows][kChunk]: scores, then probabilities (one kv head at a time)
  float* mv;          // [kAttnMaxTileTokens][kChunk]: mask values of the gathered cells
  int* idx;           // [kChunk]: gathered cell indices
  const uint8_t** kp; // [kChunk]: K row of each gathered cell (current kv head)
  const uint8_t** vp; // [kChunk]: V row
  // Prefetch of the next chunk: kp[j] + k_ahead is cell idx[j] + chunk size (0: none).
  size_t k_ahead = 0, v_ahead = 0;
  int k_bytes = 0, v_bytes = 0;  // one head's row
};

constexpr int kMaxQ = kRows * kAttnMaxKvHeads;  // query rows of a tile

// Asks for the cache lines of `bytes` bytes at p (a prefetch never faults, even past a buffer).
// (Forced inline on purpose: GCC considers an out-of-line function that only prefetches free of
// side effects and deletes the calls.)
LOOM_AVX2 __attribute__((always_inline)) inline void prefetch(const uint8_t* p, int bytes) {
  for (int o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}

size_t q_bytes(int head_dim) {
  const size_t f = sizeof(float) * size_t(kMaxQ) * size_t(head_dim);
  const size_t nb = size_t(head_dim) / kQ8Block;
  const size_t q8 = Arena::padded(size_t(kMaxQ) * nb * kQ8Bytes) + sizeof(float) * size_t(kMaxQ) * nb;
  return Arena::padded(f > q8 ? f : q8);
}

TileScratch carve(void* base, int head_dim) {
  auto* p = static_cast<uint8_t*>(base);
  TileScratch s;
  s.qf = reinterpret_cast<float*>(p);
  s.q8 = p;
  const size_t nb = size_t(head_dim) / kQ8Block;
  s.qd = reinterpret_cast<float*>(p + Arena::padded(size_t(kMaxQ) * nb * kQ8Bytes));
  p += q_bytes(head_dim);
  s.q16 = reinterpret_cast<uint16_t*>(p);
  p += Arena::padded(sizeof(uint16_t) * size_t(head_dim));
  s.s = reinterpret_cast<float*>(p);
  p += Arena::padded(sizeof(float) * size_t(kRows) * kChunk);
  s.mv = reinterpret_cast<float*>(p);
  p += Arena::padded(sizeof(float) * size_t(kAttnMaxTileTokens) * kChunk);
  s.idx = reinterpret_cast<int*>(p);
  p += Arena::padded(sizeof(int) * kChunk);
  s.kp = reinterpret_cast<const uint8_t**>(p);
  p += Arena::padded(sizeof(void*) * kChunk);
  s.vp = reinterpret_cast<const uint8_t**>(p);
  return s;
}

// ---- helpers ----------------------------------------------------------------------------------

LOOM_AVX2 inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Lane i of the result = horizontal sum of v[i] (8 dot products finished at once).
LOOM_AVX2 inline __m256 reduce8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  // u0 = [v0 v1 v2 v3 (low halves) | v0 v1 v2 v3 (high halves)], u1 likewise for v4..v7.
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}


// ---- K/V row formats --------------------------------------------------------------------------
// load8(row, d): elements d..d+7 of one head's row as floats.

struct F32Rows {
  static constexpr bool kQ8 = false;
  LOOM_AVX2 static inline __m256 load8(const uint8_t* row, int d) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
  }
};

struct F16Rows {
  static constexpr bool kQ8 = false;
  LOOM_AVX2 static inline __m256 load8(const uint8_t* row, int d) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * size_t(d))));
  }
};

// Q8_0 rows: element d = qs[d] * scale of its block (loaded separately, see v_rows).
struct Q8Rows {
  static constexpr bool kQ8 = true;
  // The 8 int8 quants d..d+7 (d % 8 == 0, same block) as floats, unscaled.
  LOOM_AVX2 static inline __m256 load8(const uint8_t* row, int d) {
    const uint8_t* qs = row + size_t(d / kQ8Block) * kQ8Bytes + 2 + d % kQ8Block;
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs))));
  }
};

// ---- scores: S[r][j] = q_r . K[cell j] --------------------------------------------------------

// Stores the NC x NH dot products held in acc[c * NH + g] (NC * NH <= 8) to s[g * kChunk + c].
template <int NH, int NC>
LOOM_AVX2 inline void store_dots(__m256* acc, float* s) {
  for (int i = NC * NH; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  alignas(32) float sums[8];
  _mm256_store_ps(sums, reduce8(acc));
  for (int c = 0; c < NC; ++c) {
    for (int g = 0; g < NH; ++g) s[g * kChunk + c] = sums[c * NH + g];
  }
}

// F32/F16 K: NH query rows (f32, stride head_dim) against NC cells, all head_dim elements. Each
// 8-element slice of a K row is converted once and used by the NH rows.
template <class KR, int NH, int NC>
LOOM_AVX2 inline void qk_tile(const uint8_t* const* kp, const float* q, int D, float* s) {
  __m256 acc[8];
  for (int i = 0; i < NC * NH; ++i) acc[i] = _mm256_setzero_ps();
  for (int d = 0; d < D; d += 8) {
    __m256 qv[NH];
    for (int g = 0; g < NH; ++g) qv[g] = _mm256_loadu_ps(q + size_t(g) * D + d);
    for (int c = 0; c < NC; ++c) {
      const __m256 k = KR::load8(kp[c], d);
      for (int g = 0; g < NH; ++g) acc[c * NH + g] = _mm256_fmadd_ps(k, qv[g], acc[c * NH + g]);
    }
  }
  store_dots<NH, NC>(acc, s);
}

// Q8_0 K against Q8_0 queries: per 32-block the exact integer dot (|k| * sign(q, k) with
// maddubs, pairs summed with madd), scaled by d_k * d_q and accumulated in f32, like quant::vec_dot.
template <int NH, int NC>
LOOM_AVX2 inline void qk_tile_q8(const uint8_t* const* kp, const uint8_t* q8, const float* qd, int nb, float* s) {
  __m256 acc[8];
  for (int i = 0; i < NC * NH; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const size_t q_stride = size_t(nb) * kQ8Bytes;
  for (int b = 0; b < nb; ++b) {
    for (int c = 0; c < NC; ++c) {
      const uint8_t* blk = kp[c] + size_t(b) * kQ8Bytes;
      const float dk = f16_at(blk);
      const __m256i kq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      const __m256i ax = _mm256_sign_epi8(kq, kq);
      for (int g = 0; g < NH; ++g) {
        const __m256i qq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + g * q_stride + size_t(b) * kQ8Bytes + 2));
        const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(qq, kq)), ones);
        acc[c * NH + g] = _mm256_fmadd_ps(_mm256_set1_ps(dk * qd[g * nb + b]), _mm256_cvtepi32_ps(dot), acc[c * NH + g]);
      }
    }
  }
  store_dots<NH, NC>(acc, s);
}

// All nv gathered cells for rows [r, r + NH) of the current kv head, whose query rows start at
// row q0 of the query buffers. The first row group prefetches the next chunk's K rows.
template <class KR, int NH>
LOOM_AVX2 inline void score_rows(const TileScratch& ts, int q0, int r, int nv, int D) {
  constexpr int NC = 8 / NH;
  float* s = ts.s + size_t(r) * kChunk;
  const bool pf = r == 0 && ts.k_ahead != 0;
  int j = 0;
  if constexpr (KR::kQ8) {
    const int nb = D / kQ8Block;
    const uint8_t* q8 = ts.q8 + size_t(q0 + r) * nb * kQ8Bytes;
    const float* qd = ts.qd + size_t(q0 + r) * nb;
    for (; j + NC <= nv; j += NC) {
      if (pf) {
        for (int c = 0; c < NC; ++c) prefetch(ts.kp[j + c] + ts.k_ahead, ts.k_bytes);
      }
      qk_tile_q8<NH, NC>(ts.kp + j, q8, qd, nb, s + j);
    }
    for (; j < nv; ++j) qk_tile_q8<NH, 1>(ts.kp + j, q8, qd, nb, s + j);
  } else {
    const float* q = ts.qf + size_t(q0 + r) * D;
    for (; j + NC <= nv; j += NC) {
      if (pf) {
        for (int c = 0; c < NC; ++c) prefetch(ts.kp[j + c] + ts.k_ahead, ts.k_bytes);
      }
      qk_tile<KR, NH, NC>(ts.kp + j, q, D, s + j);
    }
    for (; j < nv; ++j) qk_tile<KR, NH, 1>(ts.kp + j, q, D, s + j);
  }
}

// S[0..R)[0..nv) for the current kv head (query rows q0..q0+R).
template <class KR>
LOOM_AVX2 void scores(const TileScratch& ts, int q0, int R, int nv, int D) {
  for (int r = 0; r < R;) {
    // Q8_0 tiles need more registers per row: at most 2 rows at a time.
    if (!KR::kQ8 && R - r >= 4) {
      score_rows<KR, 4>(ts, q0, r, nv, D);
      r += 4;
    } else if (R - r >= 2) {
      score_rows<KR, 2>(ts, q0, r, nv, D);
      r += 2;
    } else {
      score_rows<KR, 1>(ts, q0, r, nv, D);
      r += 1;
    }
  }
}

// ---- output: acc_r = acc_r * fac_r + sum_j P[r][j] * V[cell j] --------------------------------

// NH rows; 32 dims (NB = 4 vectors: one cache line of an f16 row, one Q8_0 block) or 8 dims
// (NB = 1, the head_dim % 32 tail of F32/F16) starting at d. Each V slice is converted once and
// used by the NH rows; accumulators stay in registers over all cells.
template <class VR, int NH, int NB>
LOOM_AVX2 inline void v_block(const TileScratch& ts, int r, int nv, float* const* acc, const float* fac, int d) {
  __m256 a[NH][NB];
  for (int g = 0; g < NH; ++g) {
    const __m256 f = _mm256_set1_ps(fac[g]);
    for (int b = 0; b < NB; ++b) a[g][b] = _mm256_mul_ps(_mm256_loadu_ps(acc[g] + d + 8 * b), f);
  }
  const float* P = ts.s + size_t(r) * kChunk;
  for (int j = 0; j < nv; ++j) {
    const uint8_t* row = ts.vp[j];
    if (r == 0 && d == 0 && ts.v_ahead != 0) prefetch(row + ts.v_ahead, ts.v_bytes);
    __m256 v[NB];
    for (int b = 0; b < NB; ++b) v[b] = VR::load8(row, d + 8 * b);
    float sc = 1.0f;
    if constexpr (VR::kQ8) sc = f16_at(row + size_t(d / kQ8Block) * kQ8Bytes);
    for (int g = 0; g < NH; ++g) {
      const __m256 w = _mm256_set1_ps(VR::kQ8 ? P[g * kChunk + j] * sc : P[g * kChunk + j]);
      for (int b = 0; b < NB; ++b) a[g][b] = _mm256_fmadd_ps(w, v[b], a[g][b]);
    }
  }
  for (int g = 0; g < NH; ++g) {
    for (int b = 0; b < NB; ++b) _mm256_storeu_ps(acc[g] + d + 8 * b, a[g][b]);
  }
}

template <class VR, int NH>
LOOM_AVX2 inline void v_rows(const TileScratch& ts, int r, int nv, float* const* acc, const float* fac, int D) {
  int d = 0;
  for (; d + 32 <= D; d += 32) v_block<VR, NH, 4>(ts, r, nv, acc + r, fac + r, d);
  if constexpr (!VR::kQ8) {
    for (; d < D; d += 8) v_block<VR, NH, 1>(ts, r, nv, acc + r, fac + r, d);
  }
}

template <class VR>
LOOM_AVX2 void accumulate_v(const TileScratch& ts, int R, int nv, float* const* acc, const float* fac, int D) {
  int r = 0;
  for (; r + 2 <= R; r += 2) v_rows<VR, 2>(ts, r, nv, acc, fac, D);
  if (r < R) v_rows<VR, 1>(ts, r, nv, acc, fac, D);
}

// ---- cells -----------------------------------------------------------------------------------

// Gathers the cells of [c0, c1) visible to any of the n_tok mask rows (mask != -inf; NaN counts
// as visible, as in the reference): their indices into idx and, per token, their mask values into
// mv[tt * kChunk + j]. Returns how many.
LOOM_AVX2 int gather_visible(const float* const* mrows, int n_tok, int c0, int c1, int* idx, float* mv) {
  const __m256 ninf = _mm256_set1_ps(kNegInf);
  int nv = 0, c = c0;
  for (; c + 8 <= c1; c += 8) {
    __m256 vis = _mm256_setzero_ps();
    for (int tt = 0; tt < n_tok; ++tt) {
      vis = _mm256_or_ps(vis, _mm256_cmp_ps(_mm256_loadu_ps(mrows[tt] + c), ninf, _CMP_NEQ_UQ));
    }
    unsigned bits = unsigned(_mm256_movemask_ps(vis));
    if (bits == 0xffu) {  // dense run (the common case): copy 8 at once
      for (int i = 0; i < 8; ++i) idx[nv + i] = c + i;
      for (int tt = 0; tt < n_tok; ++tt) _mm256_storeu_ps(mv + tt * kChunk + nv, _mm256_loadu_ps(mrows[tt] + c));
      nv += 8;
      continue;
    }
    while (bits) {
      const int i = __builtin_ctz(bits);
      bits &= bits - 1;
      idx[nv] = c + i;
      for (int tt = 0; tt < n_tok; ++tt) mv[tt * kChunk + nv] = mrows[tt][c + i];
      ++nv;
    }
  }
  for (; c < c1; ++c) {
    bool any = false;
    for (int tt = 0; tt < n_tok; ++tt) any |= !(mrows[tt][c] == kNegInf);
    if (!any) continue;
    idx[nv] = c;
    for (int tt = 0; tt < n_tok; ++tt) mv[tt * kChunk + nv] = mrows[tt][c];
    ++nv;
  }
  return nv;
}

// ---- the tile --------------------------------------------------------------------------------

template <class KR, class VR>
LOOM_AVX2 void tile_impl(const AttentionParams& p, const float* q, float* out, const AttnTile& tl,
                         float* part, void* scratch) {
  const int D = p.head_dim;
  const int group = p.n_head / p.n_head_kv;
  const int R = tl.n_tok * tl.n_h;  // rows per kv head
  const int RT = tl.n_kvh * R;      // rows of the tile: rr = kl * R + r
  TileScratch ts = carve(scratch, D);

  // Query rows in the K dot format.
  int heads[kMaxQ], toks[kMaxQ];
  for (int rr = 0; rr < RT; ++rr) {
    const int kl = rr / R, r = rr % R;
    toks[rr] = tl.t0 + r / tl.n_h;
    heads[rr] = (tl.kvh0 + kl) * group + tl.h0 + r % tl.n_h;
    const float* qr = q + (size_t(toks[rr]) * p.n_head + size_t(heads[rr])) * D;
    if constexpr (KR::kQ8) {
      const int nb = D / kQ8Block;
      uint8_t* q8 = ts.q8 + size_t(rr) * nb * kQ8Bytes;
      quant::quantize_row(TensorType::Q8_0, qr, q8, D);
      for (int b = 0; b < nb; ++b) ts.qd[rr * nb + b] = f16_at(q8 + size_t(b) * kQ8Bytes);
    } else if constexpr (std::is_same_v<KR, F16Rows>) {
      quant::quantize_row(TensorType::F16, qr, ts.q16, D);
      for (int d = 0; d < D; d += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ts.q16 + d));
        _mm256_storeu_ps(ts.qf + size_t(rr) * D + d, _mm256_cvtph_ps(h));
      }
    } else {
      std::memcpy(ts.qf + size_t(rr) * D, qr, sizeof(float) * size_t(D));
    }
  }

  // Online-softmax state; acc rows live in the output (or the partial buffer) from the start.
  const size_t pstride = attn_partial_row_floats(D);
  float* acc[kMaxQ];
  float m[kMaxQ], fac[kMaxQ];
  double l[kMaxQ];
  for (int rr = 0; rr < RT; ++rr) {
    acc[rr] = part ? part + size_t(rr) * pstride + 2 : out + (size_t(toks[rr]) * p.n_head + size_t(heads[rr])) * D;
    std::memset(acc[rr], 0, sizeof(float) * size_t(D));
    m[rr] = kNegInf;
    l[rr] = 0.0;
  }

  const float* mrows[kAttnMaxTileTokens];
  for (int tt = 0; tt < tl.n_tok; ++tt) mrows[tt] = p.mask + size_t(tl.t0 + tt) * p.n_kv;
  const size_t k_head = size_t(row_bytes(p.k_type, D)), v_head = size_t(row_bytes(p.v_type, D));
  ts.k_bytes = int(k_head);
  ts.v_bytes = int(v_head);
  const bool plain = !(p.softcap > 0) && !p.alibi_slopes;
  const __m256 vscale = _mm256_set1_ps(p.scale);

  // Streaming tiles (decode: every cell is read once, from memory) take chunks of about
  // kAttnStreamChunkBytes of K + V and prefetch the next chunk while computing this one; the
  // others (prefill: the rows come from cache, read by many tiles) take the largest chunks.
  int chunk = kChunk;
  if (tl.stream) {
    chunk = int(kAttnStreamChunkBytes / (size_t(tl.n_kvh) * (k_head + v_head)));
    chunk = chunk < 16 ? 16 : (chunk > kChunk ? kChunk : chunk & ~7);
    // The first chunk's rows, all at once (later chunks are prefetched one chunk ahead).
    const uint8_t* k0 = static_cast<const uint8_t*>(p.k) + size_t(tl.kvh0) * k_head;
    const uint8_t* v0 = static_cast<const uint8_t*>(p.v) + size_t(tl.kvh0) * v_head;
    for (int c = tl.c_begin; c < tl.c_end && c < tl.c_begin + chunk; ++c) {
      prefetch(k0 + size_t(c) * p.k_row_bytes, int(size_t(tl.n_kvh) * k_head));
      prefetch(v0 + size_t(c) * p.v_row_bytes, int(size_t(tl.n_kvh) * v_head));
    }
  }
  for (int c0 = tl.c_begin; c0 < tl.c_end; c0 += chunk) {
    const int c1 = c0 + chunk < tl.c_end ? c0 + chunk : tl.c_end;
    const int nv = gather_visible(mrows, tl.n_tok, c0, c1, ts.idx, ts.mv);
    if (nv == 0) continue;
    const int nv8 = (nv + 7) & ~7;
    for (int tt = 0; tt < tl.n_tok; ++tt) {
      for (int j = nv; j < nv8; ++j) ts.mv[tt * kChunk + j] = kNegInf;
    }
    // (Past the tile's range too: the next range is the next piece, often this thread's.)
    const bool ahead = tl.stream && c1 < p.n_kv;
    ts.k_ahead = ahead ? size_t(chunk) * p.k_row_bytes : 0;
    ts.v_ahead = ahead ? size_t(chunk) * p.v_row_bytes : 0;

    for (int kl = 0; kl < tl.n_kvh; ++kl) {
      const int kvh = tl.kvh0 + kl, q0 = kl * R;
      const uint8_t* kbase = static_cast<const uint8_t*>(p.k) + size_t(kvh) * k_head;
      const uint8_t* vbase = static_cast<const uint8_t*>(p.v) + size_t(kvh) * v_head;
      for (int j = 0; j < nv; ++j) {
        ts.kp[j] = kbase + size_t(ts.idx[j]) * p.k_row_bytes;
        ts.vp[j] = vbase + size_t(ts.idx[j]) * p.v_row_bytes;
      }
      scores<KR>(ts, q0, R, nv, D);

      // Scores -> probabilities, per row.
      for (int r = 0; r < R; ++r) {
        const int rr = q0 + r;
        float* s = ts.s + size_t(r) * kChunk;
        const float* mv = ts.mv + size_t(r / tl.n_h) * kChunk;
        __m256 vmax = _mm256_set1_ps(kNegInf);
        if (plain) {
          // score * scale + mask, as the reference; the tail lanes get 0 * scale + -inf.
          for (int j = nv; j < nv8; ++j) s[j] = 0.0f;
          for (int j = 0; j < nv8; j += 8) {
            const __m256 x = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(s + j), vscale), _mm256_loadu_ps(mv + j));
            _mm256_storeu_ps(s + j, x);
            vmax = _mm256_max_ps(vmax, x);
          }
        } else {
          const float slope = p.alibi_slopes ? p.alibi_slopes[heads[rr]] : 0.0f;
          const int32_t qpos = p.alibi_slopes ? p.q_pos[toks[rr]] : 0;
          float mx = kNegInf;
          for (int j = 0; j < nv; ++j) {
            float sc = s[j] * p.scale;
            if (p.softcap > 0) sc = p.softcap * std::tanh(sc / p.softcap);
            if (p.alibi_slopes) sc += slope * float(p.kv_pos[ts.idx[j]] - qpos);
            s[j] = sc + mv[j];
            mx = s[j] > mx ? s[j] : mx;
          }
          for (int j = nv; j < nv8; ++j) s[j] = kNegInf;
          vmax = _mm256_set1_ps(mx);
        }
        const float cmax = simd::hmax(vmax);
        if (cmax == kNegInf) {  // this row's token sees none of these cells
          fac[rr] = 1.0f;
          for (int j = 0; j < nv8; j += 8) _mm256_storeu_ps(s + j, _mm256_setzero_ps());
          continue;
        }
        const float m_new = cmax > m[rr] ? cmax : m[rr];
        fac[rr] = std::exp(m[rr] - m_new);  // 0 on the first visible chunk (m = -inf)
        const __m256 vm = _mm256_set1_ps(m_new);
        __m256 sum = _mm256_setzero_ps();
        for (int j = 0; j < nv8; j += 8) {
          const __m256 e = simd::exp_nonpos_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
          _mm256_storeu_ps(s + j, e);
          sum = _mm256_add_ps(sum, e);
        }
        l[rr] = l[rr] * fac[rr] + double(simd::hsum(sum));
        m[rr] = m_new;
      }

      accumulate_v<VR>(ts, R, nv, acc + q0, fac + q0, D);
    }
  }

  for (int rr = 0; rr < RT; ++rr) {
    if (part) {
      float* pr = acc[rr] - 2;
      pr[0] = m[rr];
      pr[1] = float(l[rr]);
    } else {
      // Rows that saw no cell keep acc = 0, the reference's output for them.
      const __m256 inv = _mm256_set1_ps(l[rr] > 0 ? float(1.0 / l[rr]) : 0.0f);
      for (int d = 0; d < D; d += 8) _mm256_storeu_ps(acc[rr] + d, _mm256_mul_ps(_mm256_loadu_ps(acc[rr] + d), inv));
    }
  }
}

using TileFn = void (*)(const AttentionParams&, const float*, float*, const AttnTile&, float*, void*);

template <class KR>
TileFn pick_v(TensorType v) {
  switch (v) {
    case TensorType::F32: return tile_impl<KR, F32Rows>;
    case TensorType::F16: return tile_impl<KR, F16Rows>;
    case TensorType::Q8_0: return tile_impl<KR, Q8Rows>;
    default: return nullptr;
  }
}

TileFn pick(TensorType k, TensorType v) {
  switch (k) {
    case TensorType::F32: return pick_v<F32Rows>(v);
    case TensorType::F16: return pick_v<F16Rows>(v);
    case TensorType::Q8_0: return pick_v<Q8Rows>(v);
    default: return nullptr;
  }
}

}  // namespace

size_t attn_tile_scratch_bytes(int head_dim) {
  return q_bytes(head_dim) + Arena::padded(sizeof(uint16_t) * size_t(head_dim)) +
         Arena::padded(sizeof(float) * size_t(kRows) * kChunk) +
         Arena::padded(sizeof(float) * size_t(kAttnMaxTileTokens) * kChunk) + Arena::padded(sizeof(int) * kChunk) +
         2 * Arena::padded(sizeof(void*) * kChunk);
}

namespace avx2 {

bool supports(TensorType k_type, TensorType v_type, int head_dim) {
  if (head_dim <= 0 || head_dim % 8 != 0 || !pick(k_type, v_type)) return false;
  const bool q8 = k_type == TensorType::Q8_0 || v_type == TensorType::Q8_0;
  return !q8 || head_dim % kQ8Block == 0;
}

void attention_tile(const AttentionParams& p, const float* q, float* out, const AttnTile& tile, float* part,
                    void* scratch) {
  pick(p.k_type, p.v_type)(p, q, out, tile, part, scratch);
}

}  // namespace avx2
}  // namespace loom::ops::detail

#endif  // __x86_64__
