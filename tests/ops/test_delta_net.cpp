// The gated delta rule (ops/delta_net.h): the vector kernel against its scalar twin over many head
// sizes, head layouts and misalignments on every Highway target; the rule against its formula
// written out for one step; token-split invariance (one call over n tokens = calls over its
// pieces, bit for bit) and head-range invariance.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/delta_net.h"
#include "test_util.h"

namespace loom::test {
namespace {

// Random inputs of T tokens, Hk key heads and Hv value heads of S channels, buffers shifted by off.
struct DnCase {
  int T, S, Hk, Hv, off;
  std::vector<float> qk, v, g, beta, state, out;
  DnCase(int T_, int S_, int Hk_, int Hv_, int off_, uint32_t seed) : T(T_), S(S_), Hk(Hk_), Hv(Hv_), off(off_) {
    qk = random_vec(size_t(off + T * 2 * Hk * S), seed);
    // q and k as the model gives them: L2-normalised per head.
    for (int t = 0; t < T; ++t) {
      for (int j = 0; j < 2 * Hk; ++j) {
        float* x = qk.data() + off + (t * 2 * Hk + j) * S;
        float ss = 0;
        for (int i = 0; i < S; ++i) ss += x[i] * x[i];
        for (int i = 0; i < S; ++i) x[i] /= std::sqrt(ss + 1e-6f);
      }
    }
    v = random_vec(size_t(off + T * Hv * S), seed + 1);
    g = random_vec(size_t(off + T * Hv), seed + 2);
    for (float& x : g) x = -std::fabs(x);
    beta = random_vec(size_t(off + T * Hv), seed + 3);
    for (float& x : beta) x = 1.0f / (1.0f + std::exp(-x));
    state = random_vec(size_t(off + Hv * S * S), seed + 4, 0.5f);
    out.assign(size_t(off + T * Hv * S), 0.0f);
  }
  ops::DeltaNet params(int t0, int n) {
    ops::DeltaNet p;
    p.n_tokens = n;
    p.head_dim = S;
    p.n_k_heads = Hk;
    p.q = qk.data() + off + t0 * 2 * Hk * S;
    p.k = p.q + Hk * S;
    p.qk_stride = 2 * Hk * S;
    p.v = v.data() + off + t0 * Hv * S;
    p.v_stride = Hv * S;
    p.g = g.data() + off + t0 * Hv;
    p.beta = beta.data() + off + t0 * Hv;
    p.gb_stride = Hv;
    p.state = state.data() + off;
    p.out = out.data() + off + t0 * Hv * S;
    p.out_stride = Hv * S;
    p.scale = 1.0f / std::sqrt(float(S));
    return p;
  }
};

TEST(DeltaNet, VectorKernelMatchesScalarTwinOverSizes) {
  for_each_simd_target([] {
    for (int S : {1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 64, 128}) {
      for (auto [Hk, Hv] : {std::pair{1, 1}, {2, 4}, {3, 3}}) {
        for (int off : {0, 1, 3}) {
          const int T = S >= 64 ? 2 : 5;
          DnCase a(T, S, Hk, Hv, off, uint32_t(1000 * S + 10 * Hv + off)), b = a;
          ops::delta_net(a.params(0, T), 0, Hv);
          ops::ref::delta_net(b.params(0, T), 0, Hv);
          for (size_t i = 0; i < a.out.size(); ++i) {
            ASSERT_NEAR(a.out[i], b.out[i], 2e-5f * (1.0f + std::fabs(b.out[i])))
                << "S " << S << " Hv " << Hv << " off " << off << " i " << i;
          }
          for (size_t i = 0; i < a.state.size(); ++i) {
            ASSERT_NEAR(a.state[i], b.state[i], 2e-5f * (1.0f + std::fabs(b.state[i]))) << "S " << S << " state " << i;
          }
        }
      }
    }
  });
}

// One step against the rule written out with whole matrices: M' = e^g·M + β·(v - e^g·M·k)·kᵀ,
// out = scale·M'·q; value head h reads key head h mod Hk.
TEST(DeltaNet, OneStepIsTheGatedDeltaRule) {
  for_each_simd_target([] {
    const int S = 5, Hk = 2, Hv = 4;
    DnCase c(1, S, Hk, Hv, 0, 77);
    const std::vector<float> M0 = c.state;
    ops::delta_net(c.params(0, 1), 0, Hv);
    for (int h = 0; h < Hv; ++h) {
      const float* q = c.qk.data() + (h % Hk) * S;
      const float* k = c.qk.data() + (Hk + h % Hk) * S;
      const float* v = c.v.data() + h * S;
      const double decay = std::exp(double(c.g[size_t(h)])), beta = c.beta[size_t(h)];
      for (int j = 0; j < S; ++j) {
        const float* m = M0.data() + (h * S + j) * S;
        double mk = 0;
        for (int i = 0; i < S; ++i) mk += decay * m[i] * k[i];
        const double d = beta * (v[j] - mk);
        double o = 0;
        for (int i = 0; i < S; ++i) {
          const double mi = decay * m[i] + d * k[i];
          EXPECT_NEAR(c.state[size_t((h * S + j) * S + i)], mi, 1e-5) << "h " << h << " j " << j << " i " << i;
          o += mi * q[i];
        }
        EXPECT_NEAR(c.out[size_t(h * S + j)], o / std::sqrt(double(S)), 1e-5) << "h " << h << " j " << j;
      }
    }
  });
}

TEST(DeltaNet, TokenPiecesAndHeadRangesGiveIdenticalBits) {
  for_each_simd_target([] {
    const int T = 9, S = 16, Hk = 2, Hv = 4;
    DnCase whole(T, S, Hk, Hv, 1, 5);
    DnCase pieces = whole, heads = whole;
    ops::delta_net(whole.params(0, T), 0, Hv);
    for (auto [t0, n] : {std::pair{0, 1}, {1, 3}, {4, 4}, {8, 1}}) ops::delta_net(pieces.params(t0, n), 0, Hv);
    ops::delta_net(heads.params(0, T), 0, 1);
    ops::delta_net(heads.params(0, T), 1, 3);
    ops::delta_net(heads.params(0, T), 3, 4);
    EXPECT_EQ(pieces.out, whole.out);
    EXPECT_EQ(pieces.state, whole.state);
    EXPECT_EQ(heads.out, whole.out);
    EXPECT_EQ(heads.state, whole.state);
  });
}

}  // namespace
}  // namespace loom::test
