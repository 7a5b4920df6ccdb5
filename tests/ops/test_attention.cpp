// ops::attention (the fused online-softmax path, written with Highway) against ops::ref::attention
// (the per-cell scalar reference) over head sizes, GQA groups, cache sizes, batch sizes, masks,
// K/V types, softcap, ALiBi, thread counts and misaligned buffers. Every comparison runs once per
// Highway target this build generated and the CPU supports (x86: AVX3, AVX2, SSE4, SCALAR), with
// dispatch pinned to it (test::for_each_simd_target).
//
// Tolerance: |fast - ref| <= 1e-4 * max|ref row| + 1e-6 for every K/V type and target. Both paths
// round q to the same dot format (f16 for F16 K, Q8_0 blocks with identical integer block dots for
// Q8_0 K), so they differ only by float summation order, the exp polynomial (~1e-7 relative) and
// the online rescaling; Q8_0 needs no looser bound, nor do targets without FMA (SSE4, SCALAR:
// MulAdd rounds twice, a few ulp per row).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/half.h"
#include "base/simd.h"
#include "base/threadpool.h"
#include "ops/attention.h"
#include "ops/attention_internal.h"
#include "quant/quant.h"

#include "test_util.h"

namespace loom::ops {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using test::random_vec;

enum class MaskKind { kCausal, kRandom, kRandomWithHiddenRow, kAllVisible, kFinite };

struct Case {
  int head_dim = 64;
  int group = 2;
  int n_head_kv = 2;
  int n_kv = 64;
  int n_tokens = 1;
  TensorType k_type = TensorType::F16;
  TensorType v_type = TensorType::F16;
  MaskKind mask = MaskKind::kCausal;
  float softcap = 0.0f;
  bool alibi = false;
  bool pos_bias = false;    // T5's relative-position bias: a table per bucket and head, a bucket per (token, column)
  float scale = 0.0f;       // 0: 1 / sqrt(head_dim)
  size_t row_pad = 0;       // extra bytes per cell in the K/V rows
  bool nan_hidden = false;  // K/V of cells no token sees hold NaN

  std::string name() const {
    std::ostringstream os;
    os << "D" << head_dim << " g" << group << " hkv" << n_head_kv << " kv" << n_kv << " T" << n_tokens << " "
       << tensor_type_name(k_type) << "/" << tensor_type_name(v_type) << " mask" << int(mask);
    std::string s = os.str();
    if (softcap > 0) s += " softcap";
    if (alibi) s += " alibi";
    if (pos_bias) s += " pos_bias";
    return s;
  }
};

// Inputs of one case, with q and out placed one float past a 32-byte boundary.
struct Problem {
  Case c;
  AttentionParams p;
  std::vector<float> qbuf;
  const float* q = nullptr;
  std::vector<uint8_t> k, v;
  std::vector<float> mask;
  std::vector<float> slopes;
  std::vector<int32_t> q_pos, kv_pos;
  std::vector<int32_t> buckets;  // [T][n_kv]
  std::vector<float> bias;       // [32 buckets][n_head]
  std::vector<int32_t> groups;   // one prefix group where every token's visible cells nest (causal, all visible)

  explicit Problem(const Case& cs, uint32_t seed = 1) : c(cs) {
    const int n_head = c.group * c.n_head_kv, D = c.head_dim, T = c.n_tokens, n_kv = c.n_kv;
    qbuf.assign(size_t(T) * n_head * D + 16, 0.0f);
    const auto qv = random_vec(size_t(T) * n_head * D, seed);
    std::copy(qv.begin(), qv.end(), qbuf.begin() + 1);
    q = qbuf.data() + 1;

    // Mask: token t sits at position n_kv - T + t (its own cell included in causal masks).
    std::mt19937 rng(seed + 7);
    mask.assign(size_t(T) * n_kv, 0.0f);
    q_pos.resize(size_t(T));
    kv_pos.resize(size_t(n_kv));
    for (int i = 0; i < n_kv; ++i) kv_pos[size_t(i)] = i;
    for (int t = 0; t < T; ++t) {
      q_pos[size_t(t)] = n_kv - T + t;
      for (int i = 0; i < n_kv; ++i) {
        float& m = mask[size_t(t) * n_kv + i];
        switch (c.mask) {
          case MaskKind::kCausal: m = i <= n_kv - T + t ? 0.0f : kNegInf; break;
          case MaskKind::kRandom:
          case MaskKind::kRandomWithHiddenRow: m = rng() % 2 ? 0.0f : kNegInf; break;
          case MaskKind::kAllVisible: m = 0.0f; break;
          case MaskKind::kFinite: m = rng() % 3 == 0 ? kNegInf : -0.25f * float(rng() % 8); break;
        }
      }
      if (c.mask == MaskKind::kRandomWithHiddenRow && t == T / 2) {
        for (int i = 0; i < n_kv; ++i) mask[size_t(t) * n_kv + i] = kNegInf;
      }
    }

    // K/V: [cell][kv head][head_dim] in their types, row_pad bytes after each cell.
    const size_t kh = size_t(row_bytes(c.k_type, D)), vh = size_t(row_bytes(c.v_type, D));
    const size_t krow = kh * c.n_head_kv + c.row_pad, vrow = vh * c.n_head_kv + c.row_pad;
    k.assign(krow * size_t(std::max(n_kv, 1)), 0);
    v.assign(vrow * size_t(std::max(n_kv, 1)), 0);
    const auto kf = random_vec(size_t(n_kv) * c.n_head_kv * D, seed + 1);
    const auto vf = random_vec(size_t(n_kv) * c.n_head_kv * D, seed + 2);
    for (int i = 0; i < n_kv; ++i) {
      bool seen = false;
      for (int t = 0; t < T; ++t) seen |= mask[size_t(t) * n_kv + i] != kNegInf;
      for (int h = 0; h < c.n_head_kv; ++h) {
        uint8_t* kd = k.data() + size_t(i) * krow + size_t(h) * kh;
        uint8_t* vd = v.data() + size_t(i) * vrow + size_t(h) * vh;
        quant::quantize_row(c.k_type, kf.data() + (size_t(i) * c.n_head_kv + h) * D, kd, D);
        quant::quantize_row(c.v_type, vf.data() + (size_t(i) * c.n_head_kv + h) * D, vd, D);
        if (c.nan_hidden && !seen) {
          std::memset(kd, 0xff, kh);  // NaN in every float format, NaN scales in Q8_0
          std::memset(vd, 0xff, vh);
        }
      }
    }

    slopes.resize(size_t(n_head));
    alibi_slopes(n_head, 8.0f, slopes.data());

    p.n_tokens = T;
    p.n_head = n_head;
    p.n_head_kv = c.n_head_kv;
    p.head_dim = D;
    p.n_kv = n_kv;
    p.k_type = c.k_type;
    p.v_type = c.v_type;
    p.k = k.data();
    p.v = v.data();
    p.k_row_bytes = krow;
    p.v_row_bytes = vrow;
    p.mask = mask.data();
    if (c.mask == MaskKind::kCausal || c.mask == MaskKind::kAllVisible) {
      groups.assign(size_t(T), 0);
      p.prefix_group = groups.data();
    }
    p.scale = c.scale > 0 ? c.scale : 1.0f / std::sqrt(float(D));
    p.softcap = c.softcap;
    if (c.alibi) {
      p.alibi_slopes = slopes.data();
      p.q_pos = q_pos.data();
      p.kv_pos = kv_pos.data();
    }
    if (c.pos_bias) {
      bias = random_vec(size_t(32) * n_head, seed + 3, 2.0f);
      buckets.resize(size_t(T) * n_kv);
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < n_kv; ++i) buckets[size_t(t) * n_kv + i] = std::abs(q_pos[size_t(t)] - i) % 32;
      }
      p.pos_bucket = buckets.data();
      p.pos_bias = bias.data();
    }
  }

  size_t out_floats() const { return size_t(p.n_tokens) * p.n_head * p.head_dim; }

  // Runs fast (or reference) attention with n_threads into a misaligned output; returns it.
  std::vector<float> run(int n_threads, bool reference) const {
    ThreadPool pool(n_threads);
    std::vector<uint8_t> scratch(attention_scratch_bytes(p.n_tokens, p.n_kv, p.head_dim, p.k_type, pool.size()));
    std::vector<float> obuf(out_floats() + 16, 12345.0f);
    float* out = obuf.data() + 1;
    if (reference) ref::attention(pool, p, q, out, scratch.data());
    else attention(pool, p, q, out, scratch.data());
    EXPECT_EQ(obuf[0], 12345.0f);
    EXPECT_EQ(obuf[out_floats() + 1], 12345.0f) << "wrote past the output";
    return std::vector<float>(out, out + out_floats());
  }
};

void expect_close(const Problem& pr, const std::vector<float>& got, const std::vector<float>& want) {
  const int D = pr.p.head_dim;
  int reported = 0;
  for (size_t row = 0; row * D < want.size(); ++row) {
    float mx = 0;
    for (int d = 0; d < D; ++d) mx = std::max(mx, std::fabs(want[row * D + d]));
    const float tol = 1e-4f * mx + 1e-6f;
    for (int d = 0; d < D; ++d) {
      const float a = got[row * D + d], b = want[row * D + d];
      if (!(std::fabs(a - b) <= tol) && reported++ < 5) {
        ADD_FAILURE() << pr.c.name() << ": row " << row << " (token " << row / pr.p.n_head << ", head " << row % pr.p.n_head
                      << ") dim " << d << ": fast " << a << " ref " << b << " tol " << tol;
      }
    }
  }
}

// Fast vs reference with 1 and 2 threads under every Highway target (the reference once); the
// fast results also agree bit for bit across threads.
void check(const Case& c, uint32_t seed = 1) {
  const Problem pr(c, seed);
  const auto want = pr.run(1, true);
  for (float x : want) ASSERT_FALSE(std::isnan(x)) << c.name() << ": reference NaN";
  test::for_each_simd_target([&] {
    const auto got1 = pr.run(1, false);
    expect_close(pr, got1, want);
    const auto got2 = pr.run(2, false);
    ASSERT_EQ(got1.size(), got2.size());
    EXPECT_EQ(std::memcmp(got1.data(), got2.data(), got1.size() * sizeof(float)), 0)
        << c.name() << ": 1 and 2 threads differ";
  });
}

TEST(Attention, FastPathIsAvailableForCacheTypes) {
  if (!simd_enabled()) GTEST_SKIP() << "LOOM_FORCE_SCALAR";
  for (TensorType k : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    for (TensorType v : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
      EXPECT_TRUE(detail::supports(k, v, 64)) << tensor_type_name(k) << "/" << tensor_type_name(v);
    }
  }
  EXPECT_TRUE(detail::supports(TensorType::F16, TensorType::F16, 40));
  EXPECT_TRUE(detail::supports(TensorType::F32, TensorType::F16, 8));
  EXPECT_FALSE(detail::supports(TensorType::Q8_0, TensorType::F16, 40));  // not whole blocks
  EXPECT_FALSE(detail::supports(TensorType::F32, TensorType::F32, 4));
  EXPECT_FALSE(detail::supports(TensorType::F16, TensorType::F16, 0));
  EXPECT_FALSE(detail::supports(TensorType::F16, TensorType::F16, -8));
  EXPECT_FALSE(detail::supports(TensorType::BF16, TensorType::F16, 64));
}

// Every head size, GQA group, cache size and batch size with F16 K/V (the default cache) and a
// causal mask.
TEST(Attention, ShapesF16Causal) {
  for (int D : {32, 40, 64, 80, 128, 256}) {
    for (int group : {1, 2, 4, 8}) {
      for (int n_kv : {1, 7, 64, 300, 1000}) {
        for (int T : {1, 3, 17}) {
          if (T > n_kv) continue;
          if (D >= 128 && n_kv == 1000 && T == 17) continue;  // the reference is slow
          Case c;
          c.head_dim = D;
          c.group = group;
          c.n_head_kv = 2;
          c.n_kv = n_kv;
          c.n_tokens = T;
          check(c, uint32_t(D * 7 + group * 3 + n_kv + T));
        }
      }
    }
  }
}

// Every K/V type pair, random masks (a row with every cell hidden included), padded K/V rows.
TEST(Attention, KvTypePairs) {
  const TensorType types[] = {TensorType::F32, TensorType::F16, TensorType::Q8_0};
  for (TensorType kt : types) {
    for (TensorType vt : types) {
      for (int D : {32, 64, 128}) {
        for (int n_kv : {1, 7, 300}) {
          for (int T : {1, 3}) {
            for (MaskKind mk : {MaskKind::kCausal, MaskKind::kRandomWithHiddenRow}) {
              Case c;
              c.head_dim = D;
              c.group = 4;
              c.n_head_kv = 2;
              c.n_kv = n_kv;
              c.n_tokens = T;
              c.k_type = kt;
              c.v_type = vt;
              c.mask = mk;
              c.row_pad = 64;
              check(c, uint32_t(D + n_kv * 5 + T));
            }
          }
        }
      }
    }
  }
}

// Every head size 8..136 (multiples of 8: on 16-lane targets every other one ends in a half
// vector) with F32 and F16 K/V in all four pairs, and the Q8_0 sizes (multiples of 32) with the
// other types, over cache sizes around the vector and chunk widths (gathered runs of 1..2N cells).
// Cells are 4 bytes longer than their heads, so K/V rows start at every 4-byte offset of a line.
TEST(Attention, EveryHeadSize) {
  const TensorType types[] = {TensorType::F32, TensorType::F16, TensorType::Q8_0};
  for (int D = 8; D <= 136; D += 8) {
    for (TensorType kt : types) {
      for (TensorType vt : types) {
        const bool q8 = kt == TensorType::Q8_0 || vt == TensorType::Q8_0;
        if (q8 && D % 32 != 0) continue;
        for (int n_kv : {1, 15, 33, 130}) {
          Case c;
          c.head_dim = D;
          c.group = 3;
          c.n_head_kv = 2;
          c.n_kv = n_kv;
          c.n_tokens = n_kv > 1 ? 2 : 1;
          c.k_type = kt;
          c.v_type = vt;
          c.mask = n_kv == 130 ? MaskKind::kRandomWithHiddenRow : MaskKind::kCausal;
          c.row_pad = 4;
          check(c, uint32_t(D * 3 + n_kv));
        }
      }
    }
  }
}

TEST(Attention, MasksHideAndBiasCells) {
  for (MaskKind mk : {MaskKind::kRandom, MaskKind::kRandomWithHiddenRow, MaskKind::kAllVisible, MaskKind::kFinite}) {
    for (int n_kv : {7, 64, 300, 1000}) {
      for (int T : {1, 3, 17}) {
        Case c;
        c.n_kv = n_kv;
        c.n_tokens = T;
        c.mask = mk;
        c.group = 2;
        c.n_head_kv = 3;
        check(c, uint32_t(n_kv + T * 11));
      }
    }
  }
}

// n_kv = 0 and a mask that hides everything: all outputs are exactly 0, as in the reference.
TEST(Attention, NothingVisibleGivesZeros) {
  for (int n_kv : {0, 1, 300}) {
    Case c;
    c.n_kv = n_kv;
    c.n_tokens = 3;
    Problem pr(c);
    std::fill(pr.mask.begin(), pr.mask.end(), kNegInf);
    for (float x : pr.run(2, true)) ASSERT_EQ(x, 0.0f) << "n_kv " << n_kv << " ref";
    test::for_each_simd_target([&] {
      for (float x : pr.run(2, false)) ASSERT_EQ(x, 0.0f) << "n_kv " << n_kv << " fast";
    });
  }
}

// K/V of cells no token sees hold NaN: neither path reads them.
TEST(Attention, HiddenCellsAreNeverRead) {
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    for (MaskKind mk : {MaskKind::kCausal, MaskKind::kRandomWithHiddenRow}) {
      Case c;
      c.n_kv = 300;
      c.n_tokens = 3;
      c.k_type = c.v_type = t;
      c.mask = mk;
      c.nan_hidden = true;
      const Problem pr(c);
      const auto want = pr.run(1, true);
      test::for_each_simd_target([&] {
        const auto got = pr.run(2, false);
        for (float x : got) ASSERT_FALSE(std::isnan(x)) << c.name();
        expect_close(pr, got, want);
      });
    }
  }
}

TEST(Attention, SoftcapAndAlibi) {
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    for (int variant = 0; variant < 3; ++variant) {
      for (int n_kv : {7, 300}) {
        for (int T : {1, 17}) {
          if (T > n_kv) continue;
          Case c;
          c.k_type = c.v_type = t;
          c.n_kv = n_kv;
          c.n_tokens = T;
          c.softcap = variant != 1 ? 50.0f : 0.0f;
          c.alibi = variant != 0;
          c.scale = 0.5f;  // large scores, so the cap bends them
          check(c, uint32_t(n_kv + T + variant));
        }
      }
    }
  }
}

// T5's relative-position bias (scale 1, one bias per bucket and head), alone and with a soft-cap.
TEST(Attention, RelativePositionBias) {
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    for (int n_kv : {7, 300}) {
      for (int T : {1, 17}) {
        if (T > n_kv) continue;
        for (MaskKind mask : {MaskKind::kCausal, MaskKind::kAllVisible, MaskKind::kRandom}) {
          Case c;
          c.k_type = c.v_type = t;
          c.n_kv = n_kv;
          c.n_tokens = T;
          c.mask = mask;
          c.pos_bias = true;
          c.scale = 1.0f;
          check(c, uint32_t(n_kv + T + int(mask)));
        }
      }
    }
  }
}

// Peaked distributions (scores of tens) stress the running max and rescaling.
TEST(Attention, LargeScores) {
  for (int T : {1, 17}) {
    for (int n_kv : {64, 1000}) {
      Case c;
      c.head_dim = 128;
      c.n_kv = n_kv;
      c.n_tokens = T;
      c.scale = 1.0f;
      check(c, uint32_t(T + n_kv));
    }
  }
}

// Groups that are not powers of two or exceed the rows of a tile, single kv head (MQA), and
// decode over long caches (the cells are split into ranges and merged).
TEST(Attention, OddGroupsAndSplitDecode) {
  struct S {
    int group, hkv, n_kv, T;
  };
  for (S s : {S{3, 2, 300, 3}, S{7, 2, 1000, 1}, S{12, 2, 300, 2}, S{16, 1, 1000, 1}, S{5, 1, 3000, 1}, S{2, 8, 3000, 1},
              S{1, 1, 2000, 1}, S{8, 1, 1000, 5}}) {
    for (TensorType t : {TensorType::F16, TensorType::Q8_0}) {
      Case c;
      c.group = s.group;
      c.n_head_kv = s.hkv;
      c.n_kv = s.n_kv;
      c.n_tokens = s.T;
      c.k_type = c.v_type = t;
      c.mask = MaskKind::kRandomWithHiddenRow;
      check(c, uint32_t(s.group * 100 + s.n_kv));
    }
  }
}

// Decode over many kv heads with large heads: small streaming steps (16 cells) with prefetch.
TEST(Attention, StreamingChunksOverManyKvHeads) {
  for (int D : {128, 256}) {
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
      Case c;
      c.head_dim = D;
      c.group = 2;
      c.n_head_kv = 8;
      c.n_kv = 1100;
      c.n_tokens = 1;
      c.k_type = c.v_type = t;
      c.mask = MaskKind::kRandom;
      check(c, uint32_t(D));
    }
  }
}

// The result does not depend on the thread count (the contexts promise identical logits).
TEST(Attention, ThreadCountDoesNotChangeResults) {
  for (int T : {1, 17}) {
    Case c;
    c.n_kv = 1000;
    c.n_tokens = T;
    c.n_head_kv = 1;
    c.group = 4;
    const Problem pr(c);
    test::for_each_simd_target([&] {
      const auto a = pr.run(1, false), b = pr.run(2, false), d = pr.run(3, false);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(a.data(), d.data(), a.size() * sizeof(float)), 0);
    });
  }
}

// ---- batch invariance ------------------------------------------------------------------------
//
// A token's output must be bit-identical whatever else is in the batch: computed alone or among
// other tokens (of its sequence, sharing tiles through prefix groups, or of other sequences),
// with its sequence's cells anywhere in the cache among other sequences' cells (columns in
// position order through kv_cells), with few tiles (ranges split across threads) or many.

// One cache layout: cell i holds (seq, pos) of cells[i] (seq < 0: empty); K/V and queries are
// functions of (seq, pos), so the same token sees the same rows in every layout.
struct InvSetup {
  int D = 64, group = 2, n_head_kv = 2;
  TensorType kt = TensorType::F16, vt = TensorType::F16;
  int n_head() const { return group * n_head_kv; }
};

std::vector<float> row_values(uint32_t seq, uint32_t pos, uint32_t what, size_t n) {
  return random_vec(n, seq * 1000003u + pos * 7919u + what);
}

// Runs attention for the tokens (seq, pos) over the cells (seq, pos), causal within a sequence;
// columns sorted by position through kv_cells when `sort`; prefix groups = sequences when
// `groups`. Returns each token's n_head * D outputs.
std::vector<std::vector<float>> run_layout(const InvSetup& u, const std::vector<std::pair<int, int>>& cells,
                                           const std::vector<std::pair<int, int>>& tokens, bool sort, bool groups,
                                           int n_threads) {
  const int D = u.D, H = u.n_head(), n_kv = int(cells.size()), T = int(tokens.size());
  const size_t kh = size_t(row_bytes(u.kt, D)), vh = size_t(row_bytes(u.vt, D));
  const size_t krow = kh * size_t(u.n_head_kv), vrow = vh * size_t(u.n_head_kv);
  std::vector<uint8_t> k(krow * size_t(std::max(n_kv, 1)), 0), v(vrow * size_t(std::max(n_kv, 1)), 0);
  for (int c = 0; c < n_kv; ++c) {
    if (cells[size_t(c)].first < 0) continue;
    const auto kf =
        row_values(uint32_t(cells[size_t(c)].first), uint32_t(cells[size_t(c)].second), 1, size_t(u.n_head_kv) * D);
    const auto vf =
        row_values(uint32_t(cells[size_t(c)].first), uint32_t(cells[size_t(c)].second), 2, size_t(u.n_head_kv) * D);
    for (int h = 0; h < u.n_head_kv; ++h) {
      quant::quantize_row(u.kt, kf.data() + size_t(h) * D, k.data() + size_t(c) * krow + size_t(h) * kh, D);
      quant::quantize_row(u.vt, vf.data() + size_t(h) * D, v.data() + size_t(c) * vrow + size_t(h) * vh, D);
    }
  }
  std::vector<int32_t> order(static_cast<size_t>(n_kv));
  for (int c = 0; c < n_kv; ++c) order[size_t(c)] = c;
  if (sort) {
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return cells[size_t(a)].second < cells[size_t(b)].second; });
  }
  std::vector<float> q, mask(size_t(T) * size_t(n_kv));
  std::vector<int32_t> grp(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) {
    const auto qv = row_values(uint32_t(tokens[size_t(t)].first), uint32_t(tokens[size_t(t)].second), 3, size_t(H) * D);
    q.insert(q.end(), qv.begin(), qv.end());
    grp[size_t(t)] = tokens[size_t(t)].first;
    for (int c = 0; c < n_kv; ++c) {
      const auto& cell = cells[size_t(order[size_t(c)])];
      const bool vis = cell.first == tokens[size_t(t)].first && cell.second <= tokens[size_t(t)].second;
      mask[size_t(t) * size_t(n_kv) + size_t(c)] = vis ? 0.0f : kNegInf;
    }
  }
  AttentionParams p;
  p.n_tokens = T;
  p.n_head = H;
  p.n_head_kv = u.n_head_kv;
  p.head_dim = D;
  p.n_kv = n_kv;
  p.k_type = u.kt;
  p.v_type = u.vt;
  p.k = k.data();
  p.v = v.data();
  p.k_row_bytes = krow;
  p.v_row_bytes = vrow;
  p.mask = mask.data();
  p.kv_cells = sort ? order.data() : nullptr;
  p.prefix_group = groups ? grp.data() : nullptr;
  p.scale = 1.0f / std::sqrt(float(D));
  ThreadPool pool(n_threads);
  std::vector<uint8_t> scratch(attention_scratch_bytes(T, n_kv, D, u.kt, pool.size()));
  std::vector<float> out(size_t(T) * H * D);
  attention(pool, p, q.data(), out.data(), scratch.data());
  std::vector<std::vector<float>> res;
  for (int t = 0; t < T; ++t) res.emplace_back(out.begin() + ptrdiff_t(t) * H * D, out.begin() + ptrdiff_t(t + 1) * H * D);
  return res;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Sequence 0 holds positions [0, L); its last T tokens are the batch. Checked against the same
// tokens decoded alone, one at a time, over the cells 0..L-1:
//  - in one batch with prefix groups (shared tiles), and without;
//  - among the tokens of two other sequences (alternating in the batch), with the three
//    sequences' cells interleaved at random in the cache (and a few empty cells);
//  - with sequence 0's cells shuffled (columns sorted back by position);
//  - one token among many others (many tiles: no ranges split across threads).
void check_invariance(const InvSetup& u, int L, int T, uint32_t seed) {
  std::vector<std::pair<int, int>> own;
  for (int i = 0; i < L; ++i) own.push_back({0, i});
  std::vector<std::pair<int, int>> toks;
  for (int t = L - T; t < L; ++t) toks.push_back({0, t});
  std::vector<std::vector<float>> ref;
  for (const auto& tk : toks) ref.push_back(run_layout(u, own, {tk}, false, true, 2)[0]);
  auto expect_ref = [&](const std::vector<std::vector<float>>& got, const std::vector<int>& rows, const char* what) {
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_TRUE(same(got[size_t(rows[i])], ref[i]))
          << what << ": D" << u.D << " g" << u.group << " hkv" << u.n_head_kv << " " << tensor_type_name(u.kt) << "/"
          << tensor_type_name(u.vt) << " L" << L << " T" << T << " token " << i;
    }
  };
  std::vector<int> first_rows(static_cast<size_t>(T));
  for (int i = 0; i < T; ++i) first_rows[size_t(i)] = i;
  expect_ref(run_layout(u, own, toks, false, true, 2), first_rows, "one batch, groups");
  expect_ref(run_layout(u, own, toks, false, false, 3), first_rows, "one batch, no groups");

  std::mt19937 rng(seed);
  // Three sequences' cells interleaved, positions in order within each (a cache filled by
  // batches mixing them), a few empty cells.
  std::vector<std::pair<int, int>> mixed;
  int next[3] = {0, 0, 0};
  const int len[3] = {L, L / 2 + 3, L / 3 + 1};
  while (next[0] < len[0] || next[1] < len[1] || next[2] < len[2]) {
    const int s = int(rng() % 3);
    if (next[s] >= len[s]) continue;
    mixed.push_back({s, next[s]++});
    if (rng() % 17 == 0) mixed.push_back({-1, 0});
  }
  std::vector<std::pair<int, int>> batch;
  std::vector<int> rows;
  for (int i = 0; i < T; ++i) {
    rows.push_back(int(batch.size()));
    batch.push_back(toks[size_t(i)]);
    if (i % 2 == 0) batch.push_back({1, len[1] - 1 - i % len[1]});
    if (i % 3 == 0) batch.push_back({2, len[2] - 1});
  }
  expect_ref(run_layout(u, mixed, batch, false, true, 2), rows, "among other sequences");
  expect_ref(run_layout(u, mixed, batch, true, true, 2), rows, "among other sequences, sorted columns");
  // The same with sequence 0's tokens adjacent (sharing tiles) before the others'.
  std::vector<std::pair<int, int>> grouped = toks;
  for (int i = 0; i < T; i += 2) grouped.push_back({1, len[1] - 1 - i % len[1]});
  grouped.push_back({2, len[2] - 1});
  expect_ref(run_layout(u, mixed, grouped, false, true, 3), first_rows, "adjacent among other sequences");

  // Sequence 0's cells in random order: the columns sorted back by position.
  std::vector<std::pair<int, int>> shuffled = own;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  expect_ref(run_layout(u, shuffled, toks, true, true, 2), first_rows, "shuffled cells");

  // The last token among 40 tokens of other sequences: 40 tiles, none split.
  std::vector<std::pair<int, int>> many = {toks.back()};
  std::vector<std::pair<int, int>> cells2 = own;
  for (int s = 1; s <= 40; ++s) {
    for (int i = 0; i < 3; ++i) cells2.push_back({s, i});
    many.push_back({s, 2});
  }
  const auto got = run_layout(u, cells2, many, false, true, 2);
  ASSERT_TRUE(same(got[0], ref.back())) << "among 40 tokens: D" << u.D << " L" << L << " " << tensor_type_name(u.kt) << "/"
                                        << tensor_type_name(u.vt);
}

TEST(Attention, BatchInvariance) {
  struct S {
    int D, group, hkv, L, T;
  };
  const TensorType types[] = {TensorType::F32, TensorType::F16, TensorType::Q8_0};
  bool first = true;                        // every shape and type pair under the best target, a few under the others
  const bool emu = test::under_emulator();  // QEMU: two shapes, same-type pairs, every target
  test::for_each_simd_target([&] {
    for (S s : {S{64, 2, 2, 300, 5}, S{64, 1, 3, 600, 9}, S{128, 4, 2, 1100, 2}, S{32, 8, 1, 1500, 3}, S{64, 3, 4, 40, 7}}) {
      if ((!first || emu) && s.L != 300 && s.L != 1100) continue;
      if (emu && !first && s.L != 300) continue;
      for (TensorType kt : types) {
        for (TensorType vt : types) {
          if (kt != vt && (s.L != 300 || !first || emu)) continue;  // mixed pairs once
          if (kt == TensorType::F32 && (s.L > 1000 || !first || emu)) continue;
          InvSetup u;
          u.D = s.D;
          u.group = s.group;
          u.n_head_kv = s.hkv;
          u.kt = kt;
          u.vt = vt;
          check_invariance(u, s.L, s.T, uint32_t(s.L + s.D));
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
    first = false;
  });
}

// K/V types without a fast kernel, and head sizes it does not take, run the reference.
TEST(Attention, OtherTypesFallBackToReference) {
  struct S {
    TensorType k, v;
    int D;
  };
  for (S s : {S{TensorType::BF16, TensorType::BF16, 64}, S{TensorType::Q4_0, TensorType::F16, 64},
              S{TensorType::F32, TensorType::F32, 4}, S{TensorType::F16, TensorType::F16, 12}}) {
    Case c;
    c.k_type = s.k;
    c.v_type = s.v;
    c.head_dim = s.D;
    c.n_kv = 64;
    c.n_tokens = 3;
    const Problem pr(c);
    // (Under the same target: the reference's own vec_dot and softmax dispatch to it too.)
    test::for_each_simd_target([&] {
      const auto got = pr.run(2, false), want = pr.run(2, true);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << c.name();
    });
  }
}

}  // namespace
}  // namespace loom::ops
