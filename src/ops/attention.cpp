#include "ops/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/arena.h"
#include "base/simd.h"
#include "ops/attention_internal.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace loom::ops {
namespace {

struct ThreadScratch {
  float* scores;  // [n_kv]
  float* vrow;    // [head_dim]
  uint8_t* qconv; // one head of q in the K type's dot format
};

size_t per_thread_bytes(int n_kv, int head_dim, TensorType kv_type) {
  const TensorType dt = quant::vec_dot_type(kv_type);
  return Arena::padded(sizeof(float) * size_t(n_kv)) + Arena::padded(sizeof(float) * size_t(head_dim)) +
         Arena::padded(size_t(row_bytes(dt, head_dim)));
}

ThreadScratch carve(void* base, int ith, int n_kv, int head_dim, TensorType kv_type) {
  auto* p = static_cast<uint8_t*>(base) + size_t(ith) * per_thread_bytes(n_kv, head_dim, kv_type);
  ThreadScratch s;
  s.scores = reinterpret_cast<float*>(p);
  p += Arena::padded(sizeof(float) * size_t(n_kv));
  s.vrow = reinterpret_cast<float*>(p);
  p += Arena::padded(sizeof(float) * size_t(head_dim));
  s.qconv = p;
  return s;
}

}  // namespace

void alibi_slopes(int n_head, float max_bias, float* out) {
  const int n_floor = 1 << int(std::floor(std::log2(double(n_head))));
  const double m0 = std::pow(2.0, -double(max_bias) / n_floor);
  const double m1 = std::pow(2.0, -double(max_bias) / 2.0 / n_floor);
  for (int h = 0; h < n_head; ++h) {
    out[h] = float(h < n_floor ? std::pow(m0, h + 1) : std::pow(m1, 2 * (h - n_floor) + 1));
  }
}

namespace {

// ---- the fast path: plan, threads, merge -------------------------------------------------------

// Split the cells of the tiles into ranges when there are fewer than this many tiles (decode:
// one tile per 8 kv heads), so that several threads share one token's work; the ranges' softmax
// states are merged at the end. The plan depends on the shapes only, never on the thread count,
// so results are identical for any number of threads.
constexpr int kSplitTarget = 32;
constexpr int kMinSplitCells = 256;      // per range
constexpr int kPartialRows = 512;        // capacity of the partials buffer, in rows
constexpr int64_t kSmallWork = 1 << 14;  // below this, run on the calling thread

size_t partials_bytes(int head_dim) {
  return Arena::padded(sizeof(float) * size_t(kPartialRows) * detail::attn_partial_row_floats(head_dim));
}

// The fused kernels run wherever SIMD is enabled (every Highway target, HWY_SCALAR included;
// not under LOOM_FORCE_SCALAR) for the K/V types and head sizes they take.
bool fast_path(const AttentionParams& p) {
  if (!simd_enabled()) return false;
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0) return false;
  return detail::supports(p.k_type, p.v_type, p.head_dim);
}

// How the work is cut: tiles of (token block, kv head block, query head block), and cell ranges
// per tile when there are few tiles.
struct Plan {
  int group = 1;     // query heads per kv head
  int n_h = 1;       // query heads per kv head in a tile
  int n_hsub = 1;    // query head blocks per group
  int tile_tok = 1;  // tokens per tile
  int n_tb = 0;      // token blocks
  int kvb = 1;       // kv heads per tile
  int n_kvb = 1;     // kv head blocks
  int n_tiles = 0;
  int max_rows = 0;  // rows of a tile (partial rows per piece)
  int splits = 1;    // cell ranges per tile

  explicit Plan(const AttentionParams& p) {
    group = p.n_head / p.n_head_kv;
    n_h = std::min(group, detail::kAttnMaxRows);
    n_hsub = (group + n_h - 1) / n_h;
    tile_tok = n_hsub == 1 ? std::clamp(detail::kAttnMaxRows / group, 1, detail::kAttnMaxTileTokens) : 1;
    n_tb = (p.n_tokens + tile_tok - 1) / tile_tok;
    kvb = std::min(p.n_head_kv, detail::kAttnMaxKvHeads);
    n_kvb = (p.n_head_kv + kvb - 1) / kvb;
    n_tiles = n_tb * n_kvb * n_hsub;
    max_rows = kvb * tile_tok * n_h;
    if (n_tiles > 0 && n_tiles < kSplitTarget) {
      const int want = (kSplitTarget + n_tiles - 1) / n_tiles;
      const int by_cells = p.n_kv / kMinSplitCells;
      const int by_room = kPartialRows / (n_tiles * max_rows);
      splits = std::max(1, std::min({want, by_cells, by_room}));
    }
  }

  // Tile i; the last token blocks (which see the most cells under a causal mask) come first so
  // that the threads, which take tiles in order, finish together.
  detail::AttnTile tile(int i, const AttentionParams& p) const {
    detail::AttnTile t;
    const int per_tb = n_kvb * n_hsub;
    const int tb = n_tb - 1 - i / per_tb, rem = i % per_tb;
    t.kvh0 = (rem / n_hsub) * kvb;
    t.n_kvh = std::min(kvb, p.n_head_kv - t.kvh0);
    t.h0 = (rem % n_hsub) * n_h;
    t.n_h = std::min(n_h, group - t.h0);
    t.t0 = tb * tile_tok;
    t.n_tok = std::min(tile_tok, p.n_tokens - t.t0);
    t.stream = n_tb == 1;  // one token block: each K/V row is read by one tile only
    return t;
  }
};

// out rows of every tile from its split partials: the softmax states are combined in range order
// (max of the maxima, sums and accumulators rescaled to it), then normalised.
void merge_partials(const AttentionParams& p, const Plan& pl, const float* part, float* out) {
  const size_t pstride = detail::attn_partial_row_floats(p.head_dim);
  const size_t piece = size_t(pl.max_rows) * pstride;
  const int D = p.head_dim;
  for (int i = 0; i < pl.n_tiles; ++i) {
    const detail::AttnTile t = pl.tile(i, p);
    const int R = t.n_tok * t.n_h;
    const float* base = part + size_t(i) * pl.splits * piece;
    for (int rr = 0; rr < t.rows(); ++rr) {
      const int kl = rr / R, r = rr % R;
      const int tok = t.t0 + r / t.n_h, h = (t.kvh0 + kl) * pl.group + t.h0 + r % t.n_h;
      float* o = out + (size_t(tok) * p.n_head + size_t(h)) * D;
      float mx = -std::numeric_limits<float>::infinity();
      for (int k = 0; k < pl.splits; ++k) {
        const float* pr = base + size_t(k) * piece + size_t(rr) * pstride;
        if (pr[1] > 0) mx = std::max(mx, pr[0]);
      }
      std::memset(o, 0, sizeof(float) * size_t(D));
      if (mx == -std::numeric_limits<float>::infinity()) continue;  // saw no cell: zeros
      double sum = 0;
      for (int k = 0; k < pl.splits; ++k) {
        const float* pr = base + size_t(k) * piece + size_t(rr) * pstride;
        if (!(pr[1] > 0)) continue;
        const float w = std::exp(pr[0] - mx);
        sum += double(w) * pr[1];
        for (int d = 0; d < D; ++d) o[d] += w * pr[2 + d];
      }
      const float inv = float(1.0 / sum);
      for (int d = 0; d < D; ++d) o[d] *= inv;
    }
  }
}

}  // namespace

size_t attention_scratch_bytes(int n_kv, int head_dim, TensorType k_type, int n_threads) {
  const size_t ref = per_thread_bytes(n_kv, head_dim, k_type) * size_t(n_threads);
  size_t fast = 0;
  if (head_dim > 0) fast = partials_bytes(head_dim) + detail::attn_tile_scratch_bytes(head_dim) * size_t(n_threads);
  return std::max(ref, fast);
}

void attention(ThreadPool& pool, const AttentionParams& p, const float* q, float* out, void* scratch) {
  if (!fast_path(p)) {
    ref::attention(pool, p, q, out, scratch);
    return;
  }
  if (p.n_tokens <= 0) return;
  const Plan pl(p);
  auto* base = static_cast<uint8_t*>(scratch);
  float* part = pl.splits > 1 ? reinterpret_cast<float*>(base) : nullptr;
  uint8_t* thread_base = base + partials_bytes(p.head_dim);
  const size_t thread_bytes = detail::attn_tile_scratch_bytes(p.head_dim);
  const size_t part_tile = size_t(pl.max_rows) * detail::attn_partial_row_floats(p.head_dim);
  const int64_t n_pieces = int64_t(pl.n_tiles) * pl.splits;

  const int64_t work = int64_t(p.n_tokens) * p.n_head * p.n_kv * p.head_dim;
  // Pieces are handed out dynamically (a descheduled thread does not hold up the others); each
  // piece is computed by one thread in a fixed order, so the thread count never changes results.
  std::atomic<int64_t> next{0};
  pool.run([&](int ith, int) {
    void* ts = thread_base + size_t(ith) * thread_bytes;
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_pieces) break;
      detail::AttnTile t = pl.tile(int(i / pl.splits), p);
      const int k = int(i % pl.splits);
      t.c_begin = int(int64_t(p.n_kv) * k / pl.splits);
      t.c_end = int(int64_t(p.n_kv) * (k + 1) / pl.splits);
      detail::attention_tile(p, q, out, t, part ? part + size_t(i) * part_tile : nullptr, ts);
    }
  }, work < kSmallWork ? 1 : 0);
  if (part) merge_partials(p, pl, part, out);
}

namespace ref {

void attention(ThreadPool& pool, const AttentionParams& p, const float* q, float* out, void* scratch) {
  const int group = p.n_head / p.n_head_kv;
  const TensorType dt = quant::vec_dot_type(p.k_type);
  const size_t k_head_bytes = size_t(row_bytes(p.k_type, p.head_dim));
  const size_t v_head_bytes = size_t(row_bytes(p.v_type, p.head_dim));
  const auto* kbase = static_cast<const uint8_t*>(p.k);
  const auto* vbase = static_cast<const uint8_t*>(p.v);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  // Small jobs (few heads over few cells) run on the calling thread: a wake-up costs more.
  const int64_t work = int64_t(p.n_tokens) * p.n_head * p.n_kv * p.head_dim;
  const int max_threads = work < (1 << 14) ? 1 : 0;
  pool.run([&](int ith, int nth) {
    ThreadScratch s = carve(scratch, ith, p.n_kv, p.head_dim, p.k_type);
    const int64_t n_items = int64_t(p.n_tokens) * p.n_head;
    for (int64_t item = n_items * ith / nth; item < n_items * (ith + 1) / nth; ++item) {
      const int t = int(item / p.n_head), h = int(item % p.n_head);
      const int kvh = h / group;
      const float* qh = q + item * p.head_dim;
      const float* mrow = p.mask + int64_t(t) * p.n_kv;
      const void* qd = qh;
      if (dt != TensorType::F32) {
        quant::quantize_row(dt, qh, s.qconv, p.head_dim);
        qd = s.qconv;
      }
      for (int c = 0; c < p.n_kv; ++c) {
        if (mrow[c] == kNegInf) {
          s.scores[c] = kNegInf;
          continue;
        }
        const uint8_t* kc = kbase + size_t(c) * p.k_row_bytes + size_t(kvh) * k_head_bytes;
        float sc = quant::vec_dot(p.k_type, p.head_dim, kc, qd) * p.scale;
        if (p.softcap > 0) sc = p.softcap * std::tanh(sc / p.softcap);
        if (p.alibi_slopes) sc += p.alibi_slopes[h] * float(p.kv_pos[c] - p.q_pos[t]);
        s.scores[c] = sc + mrow[c];
      }
      softmax_inplace(s.scores, p.n_kv);
      float* o = out + item * p.head_dim;
      std::memset(o, 0, sizeof(float) * size_t(p.head_dim));
      for (int c = 0; c < p.n_kv; ++c) {
        const float w = s.scores[c];
        if (w == 0.0f) continue;
        const uint8_t* vc = vbase + size_t(c) * p.v_row_bytes + size_t(kvh) * v_head_bytes;
        quant::dequantize_row(p.v_type, vc, s.vrow, p.head_dim);
        for (int d = 0; d < p.head_dim; ++d) o[d] += w * s.vrow[d];
      }
    }
  }, max_threads);
}


}  // namespace ref
}  // namespace loom::ops
