#include "ops/delta_net.h"

#include <cmath>

#include "base/simd.h"

namespace loom::ops {

namespace ref {

void delta_net(const DeltaNet& p, int64_t h0, int64_t h1) {
  const int S = p.head_dim;
  for (int64_t h = h0; h < h1; ++h) {
    float* M = p.state + h * S * S;
    const int64_t kh = h % p.n_k_heads;
    for (int t = 0; t < p.n_tokens; ++t) {
      const float* q = p.q + t * p.qk_stride + kh * S;
      const float* k = p.k + t * p.qk_stride + kh * S;
      const float* v = p.v + t * p.v_stride + h * S;
      float* o = p.out + t * p.out_stride + h * S;
      const float decay = std::exp(p.g[t * p.gb_stride + h]), beta = p.beta[t * p.gb_stride + h];
      for (int j = 0; j < S; ++j) {
        float* row = M + int64_t(j) * S;
        float mk = 0.0f;
        for (int i = 0; i < S; ++i) {
          row[i] *= decay;
          mk += row[i] * k[i];
        }
        const float d = beta * (v[j] - mk);
        float mq = 0.0f;
        for (int i = 0; i < S; ++i) {
          row[i] += d * k[i];
          mq += row[i] * q[i];
        }
        o[j] = mq * p.scale;
      }
    }
  }
}

}  // namespace ref

void delta_net(const DeltaNet& p, int64_t h0, int64_t h1) {
  if (simd_enabled()) {
    detail::delta_net_simd(p, h0, h1);
    return;
  }
  ref::delta_net(p, h0, h1);
}

}  // namespace loom::ops
