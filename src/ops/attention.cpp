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
  float* scores;   // [n_kv]
  float* vrow;     // [head_dim]
  uint8_t* qconv;  // one head of q in the K type's dot format
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

namespace detail {

void attn_fold(float* g, float* gm, double* gl, const float* r, int head_dim) {
  const float rm = r[head_dim], rl = r[head_dim + 1];
  if (!(rl > 0)) return;  // the row saw none of the range's columns
  if (!(*gl > 0)) {
    std::memcpy(g, r, sizeof(float) * size_t(head_dim));
    *gm = rm;
    *gl = double(rl);
    return;
  }
  // Both states rescaled to the larger maximum: one factor is exp(0) = 1 (not computed).
  const bool g_max = *gm >= rm;
  const float a = g_max ? 1.0f : std::exp(*gm - rm), b = g_max ? std::exp(rm - *gm) : 1.0f;
  *gl = *gl * double(a) + double(rl) * double(b);
  // (loom_ops is compiled with -ffp-contract=off: two products and a sum, never fused. In
  // blocks of 8, which the compiler vectorizes: the fast path's head_dim is a multiple of 8.)
  float* __restrict gv = g;
  const float* __restrict rv = r;
  for (int d0 = 0; d0 < head_dim; d0 += 8) {
    for (int d = d0; d < d0 + 8; ++d) gv[d] = gv[d] * a + rv[d] * b;
  }
  if (!g_max) *gm = rm;
}

void attn_finish(float* acc, double l, int head_dim) {
  if (!(l > 0)) {
    std::memset(acc, 0, sizeof(float) * size_t(head_dim));
    return;
  }
  const float inv = float(1.0 / l);
  // + 0: a -0 becomes +0, so that exact zeros added by columns a row does not see (other tokens'
  // columns in a shared tile) cannot change the sign of a zero output.
  for (int d0 = 0; d0 < head_dim; d0 += 8) {
    for (int d = d0; d < d0 + 8; ++d) acc[d] = acc[d] * inv + 0.0f;
  }
}

void attn_finish_sink(float* acc, float m, double l, float sink, int head_dim) {
  if (!(l > 0) || sink == -std::numeric_limits<float>::infinity()) {
    attn_finish(acc, l, head_dim);
    return;
  }
  // Both frames: relative to m while the sink is not larger (exp(sink - m) <= 1), else relative to
  // the sink, so that no exponential overflows.
  double inv;
  if (sink <= m) {
    inv = 1.0 / (l + std::exp(double(sink) - double(m)));
  } else {
    const double f = std::exp(double(m) - double(sink));
    inv = f / (l * f + 1.0);
  }
  const float s = float(inv);
  for (int d0 = 0; d0 < head_dim; d0 += 8) {
    for (int d = d0; d < d0 + 8; ++d) acc[d] = acc[d] * s + 0.0f;
  }
}

}  // namespace detail

namespace {

// ---- the fast path: plan, threads, merge -------------------------------------------------------

// Split the tiles' columns into ranges computed in parallel when there are fewer than this many
// tiles (decode: one tile per 8 kv heads), so that several threads share one token's work. The
// ranges are the same whether or not a tile is split (attention_internal.h), so the plan may
// depend on anything (shapes, counts) without changing results.
constexpr int kSplitTarget = 32;
constexpr int64_t kSmallWork = 1 << 14;  // below this, run on the calling thread
constexpr int kMaxPieces = 2 * kSplitTarget;

// Rows of range states the partials buffer holds for n_kv columns: two decode tiles of the most
// rows over every range.
size_t partial_rows(int n_kv) {
  const size_t ranges = (size_t(std::max(n_kv, 1)) + detail::kAttnRangeCells - 1) / detail::kAttnRangeCells;
  return std::max<size_t>(512, 2 * size_t(detail::kAttnMaxRows) * detail::kAttnMaxKvHeads * ranges);
}

size_t partials_bytes(int n_kv, int head_dim) {
  return Arena::padded(sizeof(float) * partial_rows(n_kv) * detail::attn_partial_row_floats(head_dim));
}

size_t blocks_bytes(int n_tokens) { return Arena::padded(sizeof(int32_t) * 2 * size_t(std::max(n_tokens, 1))); }

// The fused kernels run wherever SIMD is enabled (every Highway target, HWY_SCALAR included;
// not under LOOM_FORCE_SCALAR) for the K/V types and head sizes they take.
bool fast_path(const AttentionParams& p) {
  if (!simd_enabled()) return false;
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0) return false;
  return detail::supports(p.k_type, p.v_type, p.head_dim);
}

bool visible(float m) { return !(m == -std::numeric_limits<float>::infinity()); }

// Columns visible to any of n_tok mask rows (NaN counts as visible, as in the kernels), and the
// column where each range of kAttnRangeCells of them starts (starts[k], k < count / range + 1).
int union_ranges(const float* const* rows, int n_tok, int n_kv, int32_t* starts) {
  int n = 0;
  for (int c = 0; c < n_kv; ++c) {
    bool v = visible(rows[0][c]);
    for (int t = 1; t < n_tok; ++t) v |= visible(rows[t][c]);
    if (!v) continue;
    if (n % detail::kAttnRangeCells == 0) starts[n / detail::kAttnRangeCells] = c;
    ++n;
  }
  return n;
}

// Room for union_ranges' starts of one token block over n_kv columns.
size_t range_starts_per_block(int n_kv) { return size_t(std::max(n_kv, 0)) / detail::kAttnRangeCells + 2; }
size_t range_starts_bytes(int n_kv) {
  return Arena::padded(sizeof(int32_t) * size_t(kSplitTarget) * range_starts_per_block(n_kv));
}

// How the work is cut: token blocks (adjacent tokens of one prefix group, up to tile_tok), tiles
// of (token block, kv head block, query head block), and for few tiles pieces of ranges.
struct Plan {
  int group = 1;           // query heads per kv head
  int n_h = 1;             // query heads per kv head in a tile
  int n_hsub = 1;          // query head blocks per group
  int tile_tok = 1;        // tokens per tile at most
  int kvb = 1;             // kv heads per tile
  int n_kvb = 1;           // kv head blocks
  int n_blocks = 0;        // token blocks
  int32_t* bt0 = nullptr;  // [n_blocks] first token
  int32_t* bn = nullptr;   // [n_blocks] tokens
  int n_tiles = 0;

  Plan(const AttentionParams& p, int32_t* blocks) {
    group = p.n_head / p.n_head_kv;
    n_h = std::min(group, detail::kAttnMaxRows);
    n_hsub = (group + n_h - 1) / n_h;
    tile_tok = n_hsub == 1 ? std::clamp(detail::kAttnMaxRows / group, 1, detail::kAttnMaxTileTokens) : 1;
    kvb = std::min(p.n_head_kv, detail::kAttnMaxKvHeads);
    n_kvb = (p.n_head_kv + kvb - 1) / kvb;
    bt0 = blocks;
    bn = blocks + std::max(p.n_tokens, 1);
    for (int t = 0; t < p.n_tokens;) {
      int len = 1;
      const int32_t g = p.prefix_group ? p.prefix_group[t] : -1;
      if (g >= 0) {
        while (len < tile_tok && t + len < p.n_tokens && p.prefix_group[t + len] == g) ++len;
      }
      bt0[n_blocks] = t;
      bn[n_blocks] = len;
      ++n_blocks;
      t += len;
    }
    n_tiles = n_blocks * n_kvb * n_hsub;
  }

  int block_of(int i) const { return n_blocks - 1 - i / (n_kvb * n_hsub); }

  // Tile i; the last token blocks (which see the most cells under a causal mask) come first so
  // that the threads, which take tiles in order, finish together.
  detail::AttnTile tile(int i, const AttentionParams& p) const {
    detail::AttnTile t;
    const int per_tb = n_kvb * n_hsub;
    const int b = block_of(i), rem = i % per_tb;
    t.kvh0 = (rem / n_hsub) * kvb;
    t.n_kvh = std::min(kvb, p.n_head_kv - t.kvh0);
    t.h0 = (rem % n_hsub) * n_h;
    t.n_h = std::min(n_h, group - t.h0);
    t.t0 = bt0[b];
    t.n_tok = bn[b];
    t.stream = n_blocks == 1;  // one token block: each K/V row is read by one tile only
    return t;
  }
};

// A piece of work: ranges [r0, r1) of tile `tile` from column c_begin, their states at part_off
// (floats into the partials) or, for a whole tile (part_off < 0), its outputs.
struct Piece {
  int tile = 0;
  int r0 = 0, r1 = 1 << 30;
  int c_begin = 0;
  int64_t part_off = -1;
};

// Tiles split into pieces: their range states in the partials, combined per row by attn_fold in
// range order (the order a whole tile folds them in), then normalised.
struct SplitTile {
  int tile = 0;
  int n_ranges = 0;
  int64_t part_off = 0;
};

void merge_partials(const AttentionParams& p, const Plan& pl, const SplitTile* splits, int n_split, const float* part,
                    float* out) {
  const size_t pstride = detail::attn_partial_row_floats(p.head_dim);
  const int D = p.head_dim;
  for (int s = 0; s < n_split; ++s) {
    const detail::AttnTile t = pl.tile(splits[s].tile, p);
    const int R = t.n_tok * t.n_h, rows = t.rows();
    const float* base = part + splits[s].part_off;
    for (int rr = 0; rr < rows; ++rr) {
      const int kl = rr / R, r = rr % R;
      const int tok = t.t0 + r / t.n_h, h = (t.kvh0 + kl) * pl.group + t.h0 + r % t.n_h;
      float* o = out + (size_t(tok) * p.n_head + size_t(h)) * D;
      float gm = -std::numeric_limits<float>::infinity();
      double gl = 0.0;
      for (int k = 0; k < splits[s].n_ranges; ++k) {
        detail::attn_fold(o, &gm, &gl, base + (size_t(k) * rows + size_t(rr)) * pstride, D);
      }
      if (p.sinks) detail::attn_finish_sink(o, gm, gl, p.sinks[h], D);
      else detail::attn_finish(o, gl, D);
    }
  }
}

}  // namespace

size_t attention_scratch_bytes(int n_tokens, int n_kv, int head_dim, TensorType k_type, int n_threads) {
  const size_t ref = per_thread_bytes(n_kv, head_dim, k_type) * size_t(n_threads);
  size_t fast = 0;
  if (head_dim > 0) {
    fast = partials_bytes(n_kv, head_dim) + blocks_bytes(n_tokens) + range_starts_bytes(n_kv) +
           detail::attn_tile_scratch_bytes(head_dim) * size_t(n_threads);
  }
  return std::max(ref, fast);
}

void attention(ThreadPool& pool, const AttentionParams& p, const float* q, float* out, void* scratch) {
  if (!fast_path(p)) {
    ref::attention(pool, p, q, out, scratch);
    return;
  }
  if (p.n_tokens <= 0) return;
  auto* base = static_cast<uint8_t*>(scratch);
  auto* part = reinterpret_cast<float*>(base);
  const size_t part_cap = partial_rows(p.n_kv);
  auto* blocks = reinterpret_cast<int32_t*>(base + partials_bytes(p.n_kv, p.head_dim));
  auto* starts = reinterpret_cast<int32_t*>(base + partials_bytes(p.n_kv, p.head_dim) + blocks_bytes(p.n_tokens));
  uint8_t* thread_base = base + partials_bytes(p.n_kv, p.head_dim) + blocks_bytes(p.n_tokens) + range_starts_bytes(p.n_kv);
  const size_t thread_bytes = detail::attn_tile_scratch_bytes(p.head_dim);
  const size_t pstride = detail::attn_partial_row_floats(p.head_dim);
  const Plan pl(p, blocks);

  // Few tiles: cut each tile's ranges (of its token block's union of visible columns) into up to
  // `want` pieces, as long as their states fit in the partials buffer.
  Piece pieces[kMaxPieces];
  SplitTile splits[kSplitTarget];
  int n_pieces = pl.n_tiles, n_split = 0;
  const bool split_plan = pl.n_tiles < kSplitTarget && p.n_kv > detail::kAttnRangeCells;
  if (split_plan) {
    const int want = (kSplitTarget + pl.n_tiles - 1) / pl.n_tiles;
    int union_count[kSplitTarget];
    const size_t per_block = range_starts_per_block(p.n_kv);
    for (int b = 0; b < pl.n_blocks; ++b) {
      const float* rows[detail::kAttnMaxTileTokens];
      for (int tt = 0; tt < pl.bn[b]; ++tt) rows[tt] = p.mask + size_t(pl.bt0[b] + tt) * p.n_kv;
      union_count[b] = union_ranges(rows, pl.bn[b], p.n_kv, starts + size_t(b) * per_block);
    }
    size_t used = 0;
    n_pieces = 0;
    for (int i = 0; i < pl.n_tiles; ++i) {
      const detail::AttnTile t = pl.tile(i, p);
      const int b = pl.block_of(i);
      const int n_ranges = (union_count[b] + detail::kAttnRangeCells - 1) / detail::kAttnRangeCells;
      const int np = std::min(want, n_ranges);
      const size_t need = size_t(n_ranges) * size_t(t.rows());
      if (np <= 1 || used + need > part_cap) {
        pieces[n_pieces++] = Piece{i, 0, 1 << 30, 0, -1};
        continue;
      }
      const int64_t off = int64_t(used * pstride);
      splits[n_split++] = SplitTile{i, n_ranges, off};
      used += need;
      for (int k = 0; k < np; ++k) {
        Piece pc;
        pc.tile = i;
        pc.r0 = int(int64_t(n_ranges) * k / np);
        pc.r1 = int(int64_t(n_ranges) * (k + 1) / np);
        pc.c_begin = starts[size_t(b) * per_block + size_t(pc.r0)];
        pc.part_off = off + int64_t(size_t(pc.r0) * size_t(t.rows()) * pstride);
        pieces[n_pieces++] = pc;
      }
    }
  }

  const int64_t work = int64_t(p.n_tokens) * p.n_head * p.n_kv * p.head_dim;
  // Pieces are handed out dynamically (a descheduled thread does not hold up the others); each
  // piece is computed by one thread in a fixed order, so the thread count never changes results.
  std::atomic<int64_t> next{0};
  pool.run(
      [&](int ith, int) {
        void* ts = thread_base + size_t(ith) * thread_bytes;
        for (;;) {
          const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
          if (i >= n_pieces) break;
          const Piece pc = split_plan ? pieces[i] : Piece{int(i), 0, 1 << 30, 0, -1};
          detail::AttnTile t = pl.tile(pc.tile, p);
          t.c_begin = pc.c_begin;
          t.n_ranges = pc.r1 - pc.r0;
          detail::attention_tile(p, q, out, t, pc.part_off >= 0 ? part + pc.part_off : nullptr, ts);
        }
      },
      work < kSmallWork ? 1 : 0);
  if (n_split > 0) merge_partials(p, pl, splits, n_split, part, out);
}

namespace ref {
namespace {

// softmax_inplace with exp(sink) in the sum (ggml's soft_max with sinks): the max taken over the
// row and the sink, -inf entries 0, a row without a visible entry all 0.
void softmax_with_sink(float* x, int n, float sink) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float mx = kNegInf;
  for (int i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  if (mx == kNegInf) {
    std::fill(x, x + n, 0.0f);
    return;
  }
  const float m = std::max(mx, sink);
  double sum = sink == kNegInf ? 0.0 : double(std::exp(sink - m));
  for (int i = 0; i < n; ++i) {
    const float e = x[i] == kNegInf ? 0.0f : std::exp(x[i] - m);
    x[i] = e;
    sum += e;
  }
  const float inv = float(1.0 / sum);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

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
  pool.run(
      [&](int ith, int nth) {
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
            const size_t cell = size_t(p.kv_cells ? p.kv_cells[c] : c);
            const uint8_t* kc = kbase + cell * p.k_row_bytes + size_t(kvh) * k_head_bytes;
            float sc = quant::vec_dot(p.k_type, p.head_dim, kc, qd) * p.scale;
            if (p.softcap > 0) sc = p.softcap * std::tanh(sc / p.softcap);
            if (p.alibi_slopes) sc += p.alibi_slopes[h] * float(p.kv_pos[c] - p.q_pos[t]);
            if (p.pos_bucket) sc += p.pos_bias[size_t(p.pos_bucket[int64_t(t) * p.n_kv + c]) * size_t(p.n_head) + size_t(h)];
            s.scores[c] = sc + mrow[c];
          }
          if (p.sinks) softmax_with_sink(s.scores, p.n_kv, p.sinks[h]);
          else softmax_inplace(s.scores, p.n_kv);
          float* o = out + item * p.head_dim;
          std::memset(o, 0, sizeof(float) * size_t(p.head_dim));
          for (int c = 0; c < p.n_kv; ++c) {
            const float w = s.scores[c];
            if (w == 0.0f) continue;
            const size_t cell = size_t(p.kv_cells ? p.kv_cells[c] : c);
            const uint8_t* vc = vbase + cell * p.v_row_bytes + size_t(kvh) * v_head_bytes;
            quant::dequantize_row(p.v_type, vc, s.vrow, p.head_dim);
            for (int d = 0; d < p.head_dim; ++d) o[d] += w * s.vrow[d];
          }
        }
      },
      max_threads);
}

}  // namespace ref
}  // namespace loom::ops
