// The selective state-space ops (ops/ssm.h): the vector scan against its scalar twin over many
// sizes and misalignments on every Highway target, and token-split invariance (one call over n
// tokens = several calls over its pieces, bit for bit) for the conv and the scan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/ops.h"
#include "ops/ssm.h"
#include "test_util.h"

namespace loom::test {
namespace {

// Random inputs of a scan over T tokens, Ch channels, S states, buffers shifted by `off` floats.
struct ScanCase {
  int T, Ch, S, off;
  std::vector<float> x, dt, A, bc, D, z, state, y;
  ScanCase(int T_, int Ch_, int S_, int off_, uint32_t seed, int groups = 1) : T(T_), Ch(Ch_), S(S_), off(off_) {
    x = random_vec(size_t(off + T * Ch), seed);
    dt = random_vec(size_t(off + T * Ch), seed + 1, 1.5f);
    for (float& v : dt) v -= 2.0f;  // mostly small steps, a few large (softplus's > 20 branch too)
    if (!dt.empty()) dt.back() = 25.0f;
    A = random_vec(size_t(off + Ch * S), seed + 2);
    for (float& v : A) v = -std::fabs(v) - 0.1f;
    bc = random_vec(size_t(off + T * 2 * S * groups), seed + 3);
    D = random_vec(size_t(off + Ch), seed + 4);
    z = random_vec(size_t(off + T * Ch), seed + 5);
    state = random_vec(size_t(off + Ch * S), seed + 6, 0.5f);
    y.assign(size_t(off + T * Ch), 0.0f);
  }
  ops::SsmScan params(int t0, int n) {
    ops::SsmScan p;
    p.n_tokens = n;
    p.d_state = S;
    p.x = x.data() + off + t0 * Ch;
    p.x_stride = Ch;
    p.dt = dt.data() + off + t0 * Ch;
    p.dt_stride = Ch;
    p.A = A.data() + off;
    p.B = bc.data() + off + t0 * 2 * S;
    p.C = p.B + S;
    p.bc_stride = 2 * S;
    p.D = D.data() + off;
    p.z = z.data() + off + t0 * Ch;
    p.z_stride = Ch;
    p.state = state.data() + off;
    p.y = y.data() + off + t0 * Ch;
    p.y_stride = Ch;
    return p;
  }
};

TEST(Ssm, ScanMatchesScalarTwinOverSizes) {
  for_each_simd_target([] {
    for (int S : {1, 3, 4, 7, 8, 12, 15, 16, 17, 24, 31, 32, 33, 48, 64}) {
      for (int T : {1, 2, 5}) {
        for (int off : {0, 1, 3}) {
          const int Ch = 5;
          ScanCase a(T, Ch, S, off, uint32_t(100 * S + 10 * T + off)), b = a;
          ops::SsmScan pa = a.params(0, T), pb = b.params(0, T);
          ops::ssm_scan(pa, 0, Ch);
          ops::ref::ssm_scan(pb, 0, Ch);
          for (size_t i = 0; i < a.y.size(); ++i) {
            ASSERT_NEAR(a.y[i], b.y[i], 2e-5f * (1.0f + std::fabs(b.y[i])))
                << "S " << S << " T " << T << " off " << off << " i " << i;
          }
          for (size_t i = 0; i < a.state.size(); ++i) {
            ASSERT_NEAR(a.state[i], b.state[i], 2e-5f * (1.0f + std::fabs(b.state[i]))) << "S " << S << " state " << i;
          }
        }
      }
    }
  });
}

// Mamba-2: heads of head_dim channels share a step, a scalar decay and D; B and C per group.
TEST(Ssm, Mamba2ScanMatchesScalarTwinAndTheFormula) {
  for_each_simd_target([] {
    for (int S : {5, 16, 33}) {
      const int T = 3, Ch = 8, G = 2;
      ScanCase a(T, Ch, S, 1, uint32_t(S), G);
      auto params = [&](ScanCase& k) {
        ops::SsmScan p = k.params(0, T);
        p.head_dim = 2;           // 4 heads
        p.group_channels = 4;     // 2 groups of 2 heads
        p.bc_stride = 2 * S * G;  // B of both groups, then C of both
        p.C = p.B + S * G;
        return p;
      };
      ScanCase b = a, f = a;
      ops::SsmScan pa = params(a), pb = params(b);
      ops::ssm_scan(pa, 0, Ch);
      ops::ref::ssm_scan(pb, 0, Ch);
      for (size_t i = 0; i < a.y.size(); ++i) ASSERT_NEAR(a.y[i], b.y[i], 2e-5f * (1.0f + std::fabs(b.y[i]))) << i;
      // The formula, in double, for every channel and token.
      for (int c = 0; c < Ch; ++c) {
        const int h = c / 2, g = c / 4;
        std::vector<double> st(f.state.begin() + f.off + c * S, f.state.begin() + f.off + (c + 1) * S);
        for (int t = 0; t < T; ++t) {
          const double x = f.x[size_t(f.off + t * Ch + c)], dt = f.dt[size_t(f.off + t * Ch + h)];
          const double d = dt > 20 ? dt : std::log1p(std::exp(dt)), decay = std::exp(d * f.A[size_t(f.off + h)]);
          const float* B = f.bc.data() + f.off + t * 2 * S * G + g * S;
          const float* C = B + S * G;
          double sum = 0;
          for (int n = 0; n < S; ++n) {
            st[size_t(n)] = st[size_t(n)] * decay + B[n] * x * d;
            sum += st[size_t(n)] * C[n];
          }
          const double z = f.z[size_t(f.off + t * Ch + c)];
          const double y = (sum + f.D[size_t(f.off + h)] * x) * z / (1 + std::exp(-z));
          ASSERT_NEAR(b.y[size_t(f.off + t * Ch + c)], y, 1e-4 * (1 + std::fabs(y))) << "c " << c << " t " << t;
        }
      }
    }
  });
}

TEST(Ssm, ScanOverTokenPiecesEqualsOneCall) {
  for_each_simd_target([] {
    for (int S : {7, 16}) {
      const int T = 9, Ch = 6;
      ScanCase whole(T, Ch, S, 1, 7u), parts = whole;
      ops::SsmScan p = whole.params(0, T);
      ops::ssm_scan(p, 0, Ch);
      for (auto [t0, n] : {std::pair{0, 1}, {1, 3}, {4, 1}, {5, 4}}) {
        ops::SsmScan q = parts.params(t0, n);
        ops::ssm_scan(q, 0, 2);  // channel ranges too
        ops::ssm_scan(q, 2, Ch);
      }
      EXPECT_EQ(whole.y, parts.y);
      EXPECT_EQ(whole.state, parts.state);
    }
  });
}

TEST(Ssm, ConvIsCausalCarriesItsStateAndSplitsExactly) {
  const int T = 7, Ch = 3, K = 4;
  const std::vector<float> x = random_vec(size_t(T * Ch), 11), w = random_vec(size_t(Ch * K), 12),
                           b = random_vec(size_t(Ch), 13);
  std::vector<float> st0 = random_vec(size_t(Ch * (K - 1)), 14);
  auto conv = [&](std::vector<float>& state, int t0, int n, std::vector<float>& y) {
    ops::SsmConv p;
    p.n_tokens = n;
    p.d_conv = K;
    p.x = x.data() + t0 * Ch;
    p.x_stride = Ch;
    p.w = w.data();
    p.b = b.data();
    p.state = state.data();
    p.y = y.data() + t0 * Ch;
    p.y_stride = Ch;
    ops::ssm_conv(p, 0, Ch);
  };
  std::vector<float> s1 = st0, y1(size_t(T * Ch)), s2 = st0, y2(size_t(T * Ch));
  conv(s1, 0, T, y1);
  for (int t = 0; t < T; ++t) conv(s2, t, 1, y2);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(s1, s2);
  // Against the formula: token t sees (state, x[0..t]) through the last K taps, oldest first.
  for (int c = 0; c < Ch; ++c) {
    std::vector<float> hist(st0.begin() + c * (K - 1), st0.begin() + (c + 1) * (K - 1));
    for (int t = 0; t < T; ++t) hist.push_back(x[size_t(t * Ch + c)]);
    for (int t = 0; t < T; ++t) {
      float sum = 0.0f;
      for (int k = 0; k < K; ++k) sum += hist[size_t(t + k)] * w[size_t(c * K + k)];
      // Near, not equal: compilers may fuse the test's own multiply-adds (AArch64 GCC does).
      const float want = ops::silu(sum + b[size_t(c)]);
      EXPECT_NEAR(y1[size_t(t * Ch + c)], want, 1e-6f * (1.0f + std::fabs(want)));
    }
    for (int k = 0; k < K - 1; ++k) EXPECT_EQ(s1[size_t(c * (K - 1) + k)], hist[size_t(T + k)]);
  }
}

// The vector conv (channels in vectors, token by token) against its scalar twin: channel counts
// and ranges that leave tails, every tap count of the families (Mamba 4, LFM2 3), with and without
// bias and silu, misaligned buffers; states must come out the same too.
TEST(Ssm, ConvVectorMatchesScalarTwinOverSizes) {
  for_each_simd_target([] {
    for (int K : {2, 3, 4, 5}) {
      for (int Ch : {1, 7, 16, 17, 40}) {
        for (int T : {1, 3, 8}) {
          for (int variant = 0; variant < 4; ++variant) {
            const bool bias = variant & 1, silu = variant & 2;
            const int off = (Ch + T + K) % 3;
            const auto x = random_vec(size_t(off + T * Ch), uint32_t(K * 1000 + Ch * 10 + T));
            const auto w = random_vec(size_t(Ch * K), uint32_t(K + Ch + 1));
            const auto b = random_vec(size_t(Ch), uint32_t(K + Ch + 2));
            auto st_a = random_vec(size_t(off + Ch * (K - 1)), uint32_t(K + Ch + 3)), st_b = st_a;
            std::vector<float> y_a(size_t(off + T * Ch), 0.0f), y_b = y_a;
            auto params = [&](std::vector<float>& st, std::vector<float>& y) {
              ops::SsmConv p;
              p.n_tokens = T;
              p.d_conv = K;
              p.x = x.data() + off;
              p.x_stride = Ch;
              p.w = w.data();
              p.b = bias ? b.data() : nullptr;
              p.state = st.data() + off;
              p.y = y.data() + off;
              p.y_stride = Ch;
              p.silu = silu;
              return p;
            };
            const int64_t c0 = Ch > 3 ? 1 : 0;  // a range that starts off a vector boundary
            ops::ssm_conv(params(st_a, y_a), c0, Ch);
            ops::ref::ssm_conv(params(st_b, y_b), c0, Ch);
            for (size_t i = 0; i < y_a.size(); ++i) {
              ASSERT_NEAR(y_a[i], y_b[i], 1e-6f * (1.0f + std::fabs(y_b[i])))
                  << "K " << K << " Ch " << Ch << " T " << T << " variant " << variant;
            }
            ASSERT_EQ(st_a, st_b) << "K " << K << " Ch " << Ch << " T " << T;
          }
        }
      }
    }
  });
}

TEST(Ssm, SoftplusVectorMatchesScalarTwin) {
  for_each_simd_target([] {
    for (int n : {0, 1, 3, 7, 8, 15, 16, 17, 33, 100}) {
      for (int off : {0, 1, 2}) {
        std::vector<float> a = random_vec(size_t(n + off), uint32_t(n * 10 + off), 8.0f);
        if (n > 2) a[size_t(off)] = 25.0f, a[size_t(off + 1)] = -90.0f, a[size_t(off + 2)] = 20.0f;
        std::vector<float> b = a;
        ops::softplus_inplace(a.data() + off, n);
        ops::ref::softplus_inplace(b.data() + off, n);
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6f * (1.0f + std::fabs(b[i]))) << n << " " << i;
      }
    }
  });
}

TEST(Ssm, SoftplusAsTheReference) {
  EXPECT_EQ(ops::softplus(25.0f), 25.0f);
  EXPECT_FLOAT_EQ(ops::softplus(0.0f), std::log(2.0f));
  EXPECT_FLOAT_EQ(ops::softplus(-3.0f), std::log(1.0f + std::exp(-3.0f)));
}

}  // namespace
}  // namespace loom::test
