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
  float scale = 0.0f;     // 0: 1 / sqrt(head_dim)
  size_t row_pad = 0;     // extra bytes per cell in the K/V rows
  bool nan_hidden = false;  // K/V of cells no token sees hold NaN

  std::string name() const {
    std::ostringstream os;
    os << "D" << head_dim << " g" << group << " hkv" << n_head_kv << " kv" << n_kv << " T" << n_tokens << " "
       << tensor_type_name(k_type) << "/" << tensor_type_name(v_type) << " mask" << int(mask);
    std::string s = os.str();
    if (softcap > 0) s += " softcap";
    if (alibi) s += " alibi";
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
    p.scale = c.scale > 0 ? c.scale : 1.0f / std::sqrt(float(D));
    p.softcap = c.softcap;
    if (c.alibi) {
      p.alibi_slopes = slopes.data();
      p.q_pos = q_pos.data();
      p.kv_pos = kv_pos.data();
    }
  }

  size_t out_floats() const { return size_t(p.n_tokens) * p.n_head * p.head_dim; }

  // Runs fast (or reference) attention with n_threads into a misaligned output; returns it.
  std::vector<float> run(int n_threads, bool reference) const {
    ThreadPool pool(n_threads);
    std::vector<uint8_t> scratch(attention_scratch_bytes(p.n_kv, p.head_dim, p.k_type, pool.size()));
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
        ADD_FAILURE() << pr.c.name() << ": row " << row << " (token " << row / pr.p.n_head << ", head "
                      << row % pr.p.n_head << ") dim " << d << ": fast " << a << " ref " << b << " tol " << tol;
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
  struct S { int group, hkv, n_kv, T; };
  for (S s : {S{3, 2, 300, 3}, S{7, 2, 1000, 1}, S{12, 2, 300, 2}, S{16, 1, 1000, 1}, S{5, 1, 3000, 1},
              S{2, 8, 3000, 1}, S{1, 1, 2000, 1}, S{8, 1, 1000, 5}}) {
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

// Decode over many kv heads with large heads: small streaming chunks (16 cells) with prefetch.
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

// K/V types without a fast kernel, and head sizes it does not take, run the reference.
TEST(Attention, OtherTypesFallBackToReference) {
  struct S { TensorType k, v; int D; };
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
