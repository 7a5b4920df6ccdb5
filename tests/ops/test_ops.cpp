// Ops against straightforward double-precision references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "base/half.h"
#include "base/threadpool.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "quant/packed.h"
#include "quant/quant.h"

#include "test_util.h"

namespace loom::ops {
namespace {

using test::random_vec;

TEST(Ops, RmsNormMatchesDefinition) {
  // Every length 1..70 and a long row, at several misalignments, large values included.
  test::for_each_simd_target([] {
    for (size_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 67, 70, 4099}) {
      for (size_t off = 0; off < 3; ++off) {
        auto xs = random_vec(n + off, uint32_t(n), n > 1000 ? 300.0f : 1.0f), w = random_vec(n, 2);
        const float* x = xs.data() + off;
        std::vector<float> out(n);
        rms_norm_row(x, w.data(), int64_t(n), 1e-5f, out.data());
        double ss = 0;
        for (size_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
        const double inv = 1.0 / std::sqrt(ss / double(n) + 1e-5);
        for (size_t i = 0; i < n; ++i) {
          const double want = x[i] * inv * w[i];
          ASSERT_NEAR(out[i], want, 1e-5 * std::max(1.0, std::fabs(want))) << n << " " << off << " " << i;
        }
        // Without weights too.
        rms_norm_row(x, nullptr, int64_t(n), 1e-5f, out.data());
        for (size_t i = 0; i < n; ++i) {
          ASSERT_NEAR(out[i], x[i] * inv, 1e-5 * std::max(1.0, std::fabs(x[i] * inv))) << n << " " << off;
        }
      }
    }
  });
}

TEST(Ops, SoftmaxHandlesMaskedEntries) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> v = {1.0f, ninf, 3.0f, ninf};
  softmax_inplace(v.data(), 4);
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_EQ(v[3], 0.0f);
  EXPECT_NEAR(v[0] + v[2], 1.0f, 1e-6);
  EXPECT_NEAR(v[2] / v[0], std::exp(2.0f), 1e-4);
  std::vector<float> all_masked = {ninf, ninf};
  softmax_inplace(all_masked.data(), 2);
  EXPECT_EQ(all_masked[0], 0.0f);
}

TEST(Ops, SwigluMatchesDefinition) {
  auto g = random_vec(33, 3), u = random_vec(33, 4);
  auto g2 = g;
  swiglu_inplace(g2.data(), u.data(), 33);
  for (size_t i = 0; i < 33; ++i) EXPECT_NEAR(g2[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
}

// The vectorised SiLU over the whole float range (huge, tiny, ±0, ±inf) at every length and
// offset: relative error ~1e-6 against the double-precision definition, no NaN or overflow.
TEST(Ops, SwigluWideRangeEveryLengthAndOffset) {
  std::vector<float> vals = {0.0f,
                             -0.0f,
                             1e-30f,
                             -1e-30f,
                             0.5f,
                             -0.5f,
                             3.0f,
                             -3.0f,
                             20.0f,
                             -20.0f,
                             87.0f,
                             -87.0f,
                             88.5f,
                             -88.5f,
                             100.0f,
                             -100.0f,
                             1e30f,
                             -1e30f,
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity()};
  auto r = random_vec(64, 9);
  for (float v : r) vals.push_back(v * 30.0f);
  test::for_each_simd_target([&] {
    for (size_t off = 0; off < 3; ++off) {
      for (size_t n = 0; n + off <= vals.size(); ++n) {
        std::vector<float> g(vals.begin() + long(off), vals.begin() + long(off + n)), u(n, 1.5f);
        auto out = g;
        swiglu_inplace(out.data(), u.data(), int64_t(n));
        for (size_t i = 0; i < n; ++i) {
          const double x = g[i];
          const double want = std::isinf(x) ? (x > 0 ? x * 1.5 : 0.0) : x / (1.0 + std::exp(-x)) * 1.5;
          EXPECT_FALSE(std::isnan(out[i])) << "x=" << x;
          if (std::isinf(want)) {
            EXPECT_EQ(out[i], float(want));
          } else {
            EXPECT_NEAR(out[i], want, 2e-6 * std::fabs(want) + 1e-30) << "x=" << x;
          }
        }
      }
    }
  });
}

// Reference RoPE: rotate pairs by pos * base^(-2i/n_rot) / factors[i] (factors null: 1).
void rope_ref(std::vector<float>& x, int pos, int n_rot, float base, bool neox, const float* factors = nullptr) {
  std::vector<float> y = x;
  for (int i = 0; i < n_rot / 2; ++i) {
    const double theta = pos * std::pow(double(base), -2.0 * i / n_rot) / (factors ? factors[i] : 1.0);
    const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
    y[size_t(a)] = float(x[size_t(a)] * std::cos(theta) - x[size_t(b)] * std::sin(theta));
    y[size_t(b)] = float(x[size_t(a)] * std::sin(theta) + x[size_t(b)] * std::cos(theta));
  }
  x = y;
}

TEST(Ops, RopeNormalAndNeoxPairings) {
  for (bool neox : {false, true}) {
    for (int n_rot : {8, 16}) {
      auto x = random_vec(16 * 3, 5);  // 3 heads of 16
      int32_t pos[1] = {37};
      RopeParams p;
      p.n_rot = n_rot;
      p.freq_base = 10000.0f;
      p.mode = neox ? RopeMode::kNeox : RopeMode::kNormal;
      auto got = x;
      rope(got.data(), pos, 1, 3, 16, p);
      for (int h = 0; h < 3; ++h) {
        std::vector<float> head(x.begin() + h * 16, x.begin() + (h + 1) * 16);
        rope_ref(head, 37, n_rot, 10000.0f, neox);
        for (int d = 0; d < 16; ++d) EXPECT_NEAR(got[size_t(h * 16 + d)], head[size_t(d)], 1e-5) << neox << n_rot;
      }
    }
  }
}

TEST(Ops, RopeFreqFactorsDivideEachPairsFrequency) {
  // LongRoPE: pair i turns by pos * base^(-2i/n_rot) / factors[i], in both pairings; factors
  // of 1 change nothing.
  const float factors[8] = {1.0f, 1.5f, 2.0f, 3.25f, 4.0f, 5.5f, 7.0f, 8.0f};
  const float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  for (bool neox : {false, true}) {
    auto x = random_vec(16 * 2, 11);  // 2 heads of 16, n_rot 16
    int32_t pos[1] = {53};
    RopeParams p;
    p.n_rot = 16;
    p.mode = neox ? RopeMode::kNeox : RopeMode::kNormal;
    auto plain = x;
    rope(plain.data(), pos, 1, 2, 16, p);
    p.freq_factors = ones;
    auto with_ones = x;
    rope(with_ones.data(), pos, 1, 2, 16, p);
    EXPECT_EQ(with_ones, plain);
    p.freq_factors = factors;
    auto got = x;
    rope(got.data(), pos, 1, 2, 16, p);
    for (int h = 0; h < 2; ++h) {
      std::vector<float> head(x.begin() + h * 16, x.begin() + (h + 1) * 16);
      rope_ref(head, 53, 16, 10000.0f, neox, factors);
      for (int d = 0; d < 16; ++d) EXPECT_NEAR(got[size_t(h * 16 + d)], head[size_t(d)], 1e-5) << neox;
    }
    float moved = 0;
    for (size_t i = 0; i < got.size(); ++i) moved = std::max(moved, std::fabs(got[i] - plain[i]));
    EXPECT_GT(moved, 1e-2f);
  }
}

TEST(Ops, RopeIsRelative) {
  // <rope(q, m), rope(k, n)> depends only on m - n.
  auto q = random_vec(32, 6), k = random_vec(32, 7);
  RopeParams p;
  p.n_rot = 32;
  auto dot_at = [&](int m, int n) {
    auto qq = q, kk = k;
    int32_t pm[1] = {m}, pn[1] = {n};
    rope(qq.data(), pm, 1, 1, 32, p);
    rope(kk.data(), pn, 1, 1, 32, p);
    double s = 0;
    for (int i = 0; i < 32; ++i) s += double(qq[size_t(i)]) * kk[size_t(i)];
    return s;
  };
  EXPECT_NEAR(dot_at(10, 3), dot_at(107, 100), 1e-4);
  EXPECT_GT(std::fabs(dot_at(10, 3) - dot_at(10, 4)), 1e-4);
}

TEST(Ops, MatmulMatchesDequantizedReferenceForEveryType) {
  ThreadPool pool(2);
  // n = 1 is the decode path (one dot per weight row), n >= 2 the tiled matrix x matrix path
  // with full and partial tiles (m = 37 is no multiple of the weight-row blocking either).
  for (const int64_t n : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(5), int64_t(9)}) {
    const int64_t k = 96, m = 37;
    auto wf = random_vec(size_t(k * m), 8, 0.5f);
    auto x = random_vec(size_t(k * n), 9);
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0,
                         TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL}) {
      const size_t rb = size_t(row_bytes(t, k));
      std::vector<uint8_t> w(rb * size_t(m));
      for (int64_t r = 0; r < m; ++r) quant::quantize_row(t, wf.data() + r * k, w.data() + size_t(r) * rb, k);
      TensorView view{t, w.data(), k, m, rb};
      std::vector<uint8_t> scratch(matmul_scratch_bytes(t, k, n) + 1);
      std::vector<float> y(size_t(m * n));
      matmul(pool, view, x.data(), n, y.data(), scratch.data());
      // Reference: the dequantized weights times the activations as the dot format rounds them.
      const TensorType dt = quant::vec_dot_type(t);
      std::vector<float> xa(x.size());
      for (int64_t i = 0; i < n; ++i) {
        std::vector<uint8_t> tmp(size_t(row_bytes(dt, k)));
        quant::quantize_row(dt, x.data() + i * k, tmp.data(), k);
        quant::dequantize_row(dt, tmp.data(), xa.data() + i * k, k);
      }
      std::vector<float> wd(static_cast<size_t>(k));
      for (int64_t r = 0; r < m; ++r) {
        quant::dequantize_row(t, w.data() + size_t(r) * rb, wd.data(), k);
        for (int64_t i = 0; i < n; ++i) {
          double s = 0, mag = 0;
          for (int64_t j = 0; j < k; ++j) {
            s += double(wd[size_t(j)]) * xa[size_t(i * k + j)];
            mag += std::fabs(double(wd[size_t(j)]) * xa[size_t(i * k + j)]);
          }
          // Q8_1 stores the activation block sums as f16 (as llama.cpp does): the min term of
          // Q4_1/Q5_1 carries that rounding.
          const bool has_min = t == TensorType::Q4_1 || t == TensorType::Q5_1;
          EXPECT_NEAR(y[size_t(i * m + r)], s, (has_min ? 1e-3 : 1e-5) * (1 + mag))
              << tensor_type_name(t) << " n " << n << " row " << r << " tok " << i;
        }
      }
    }
  }
}

// matmul_many gives the bits of one matmul per job, whatever mix of jobs: packed and row-major
// weights, jobs sharing their activations (an expert's gate and up) or not, several types and
// widths, row counts from 0 to past a register block, and the pool's split across job bounds.
TEST(Ops, MatmulManyEqualsOneMatmulPerJob) {
  struct Weights {
    TensorType type;
    int64_t rows, cols;
    std::vector<uint8_t> data;
    std::vector<uint8_t> packed;
    TensorView view;
  };
  auto make = [](TensorType t, int64_t rows, int64_t cols, bool pack, unsigned seed) {
    auto w = std::make_unique<Weights>();
    w->type = t;
    w->rows = rows;
    w->cols = cols;
    const size_t rb = size_t(row_bytes(t, cols));
    auto f = random_vec(size_t(rows * cols), seed, 0.5f);
    w->data.resize(rb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) quant::quantize_row(t, f.data() + r * cols, w->data.data() + size_t(r) * rb, cols);
    w->view = TensorView{t, w->data.data(), cols, rows, rb};
    if (pack && quant::packed_kernels_available(t)) {
      w->packed.resize(quant::packed_size(t, rows, cols) + 64);
      void* dst = w->packed.data() + (64 - reinterpret_cast<uintptr_t>(w->packed.data()) % 64) % 64;
      quant::pack_weights(t, w->data.data(), rb, rows, cols, dst, 0, (rows + quant::kPackRows - 1) / quant::kPackRows);
      w->view.packed = dst;
    }
    return w;
  };
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<std::unique_ptr<Weights>> ws;
    ws.push_back(make(TensorType::Q4_K, 40, 256, true, 1));  // gate of "expert 0"
    ws.push_back(make(TensorType::Q4_K, 40, 256, true, 2));  // up: shares gate's activations
    ws.push_back(make(TensorType::Q6_K, 256, 64 * 4, true, 3));
    ws.push_back(make(TensorType::Q8_0, 17, 96, true, 4));
    ws.push_back(make(TensorType::Q4_0, 33, 96, false, 5));  // row-major
    ws.push_back(make(TensorType::F16, 48, 64, true, 6));
    for (const int64_t n : {int64_t(0), int64_t(1), int64_t(3), int64_t(7)}) {
      // Job 1 reads job 0's activations (shared quantization); job 3 takes one row more.
      std::vector<std::vector<float>> xs(ws.size()), ys, want;
      std::vector<ops::MatmulJob> jobs;
      for (size_t j = 0; j < ws.size(); ++j) {
        const Weights& w = *ws[j];
        const int64_t nj = j == 3 ? n + 1 : n;
        if (j != 1) xs[j] = random_vec(size_t(std::max<int64_t>(1, nj) * w.cols), uint32_t(10 + j + 7 * n));
        const float* x = xs[j == 1 ? 0 : j].data();
        ys.emplace_back(size_t(std::max<int64_t>(1, nj) * w.rows), -7.0f);
        want.emplace_back(size_t(std::max<int64_t>(1, nj) * w.rows), -7.0f);
        std::vector<uint8_t> scratch(matmul_scratch_bytes(w.type, w.cols, std::max<int64_t>(1, nj)) + 1);
        if (nj > 0) matmul(pool, w.view, x, nj, want.back().data(), scratch.data());
        jobs.push_back({w.view, x, nj, nullptr});
      }
      for (size_t j = 0; j < jobs.size(); ++j) jobs[j].y = ys[j].data();
      std::vector<uint8_t> scratch(matmul_many_scratch_bytes(jobs) + 1);
      matmul_many(pool, jobs, scratch.data());
      for (size_t j = 0; j < jobs.size(); ++j) {
        EXPECT_EQ(ys[j], want[j]) << "job " << j << " (" << tensor_type_name(ws[j]->type) << ") n " << jobs[j].n
                                  << " threads " << threads;
      }
    }
  }
}

TEST(Ops, AttentionMatchesNaiveReference) {
  ThreadPool pool(2);
  const int T = 3, H = 4, Hkv = 2, D = 32, n_kv = 7;
  auto q = random_vec(size_t(T * H * D), 10);
  auto kf = random_vec(size_t(n_kv * Hkv * D), 11), vf = random_vec(size_t(n_kv * Hkv * D), 12);
  for (TensorType kv_type : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    const size_t head_bytes = size_t(row_bytes(kv_type, D));
    std::vector<uint8_t> k(head_bytes * size_t(n_kv * Hkv)), v(k.size());
    for (int i = 0; i < n_kv * Hkv; ++i) {
      quant::quantize_row(kv_type, kf.data() + i * D, k.data() + size_t(i) * head_bytes, D);
      quant::quantize_row(kv_type, vf.data() + i * D, v.data() + size_t(i) * head_bytes, D);
    }
    std::vector<float> mask(size_t(T * n_kv));
    for (int t = 0; t < T; ++t) {
      for (int c = 0; c < n_kv; ++c) mask[size_t(t * n_kv + c)] = c <= 4 + t ? 0.0f : -INFINITY;
    }
    AttentionParams p;
    p.n_tokens = T;
    p.n_head = H;
    p.n_head_kv = Hkv;
    p.head_dim = D;
    p.n_kv = n_kv;
    p.k_type = kv_type;
    p.v_type = kv_type;
    p.k = k.data();
    p.v = v.data();
    p.k_row_bytes = head_bytes * Hkv;
    p.v_row_bytes = head_bytes * Hkv;
    p.mask = mask.data();
    p.scale = 1.0f / std::sqrt(float(D));
    std::vector<uint8_t> scratch(attention_scratch_bytes(T, n_kv, D, kv_type, pool.size()));
    std::vector<float> out(size_t(T * H * D));
    attention(pool, p, q.data(), out.data(), scratch.data());
    const double tol = kv_type == TensorType::F32 ? 1e-5 : 0.03;
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        const int kvh = h / (H / Hkv);
        std::vector<double> s(static_cast<size_t>(n_kv));
        double mx = -1e30;
        for (int c = 0; c < n_kv; ++c) {
          double d = 0;
          for (int i = 0; i < D; ++i) d += double(q[size_t((t * H + h) * D + i)]) * kf[size_t((c * Hkv + kvh) * D + i)];
          s[size_t(c)] = c <= 4 + t ? d * p.scale : -1e300;
          mx = std::max(mx, s[size_t(c)]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int i = 0; i < D; ++i) {
          double o = 0;
          for (int c = 0; c < n_kv; ++c) o += s[size_t(c)] / sum * vf[size_t((c * Hkv + kvh) * D + i)];
          EXPECT_NEAR(out[size_t((t * H + h) * D + i)], o, tol) << tensor_type_name(kv_type);
        }
      }
    }
  }
}

TEST(Ops, AlibiSlopesAndBias) {
  std::vector<float> s8(8), s6(6);
  alibi_slopes(8, 8.0f, s8.data());
  for (int h = 0; h < 8; ++h) EXPECT_NEAR(s8[size_t(h)], std::pow(2.0, -(h + 1.0)), 1e-7);  // 1/2, 1/4, ...
  alibi_slopes(6, 8.0f, s6.data());  // 4 geometric in 2^-2, then interleaved in 2^-1
  EXPECT_NEAR(s6[0], 0.25, 1e-7);
  EXPECT_NEAR(s6[3], std::pow(0.25, 4), 1e-9);
  EXPECT_NEAR(s6[4], std::pow(2.0, -1.0), 1e-7);
  EXPECT_NEAR(s6[5], std::pow(2.0, -3.0), 1e-7);

  // One token over 3 cells with equal keys: softmax weights follow exp(slope * (p_c - p_t)).
  ThreadPool pool(1);
  const int D = 4, n_kv = 3;
  std::vector<float> q(D, 0.0f), kf(size_t(n_kv * D), 0.0f), vf(size_t(n_kv * D), 0.0f);
  for (int c = 0; c < n_kv; ++c) vf[size_t(c * D)] = float(c);  // v[c][0] = c
  std::vector<float> mask(n_kv, 0.0f), out(D);
  const float slope = 0.5f;
  const int32_t q_pos = 2, kv_pos[3] = {0, 1, 2};
  AttentionParams p;
  p.n_tokens = 1;
  p.n_head = 1;
  p.n_head_kv = 1;
  p.head_dim = D;
  p.n_kv = n_kv;
  p.k_type = p.v_type = TensorType::F32;
  p.k = kf.data();
  p.v = vf.data();
  p.k_row_bytes = p.v_row_bytes = D * sizeof(float);
  p.mask = mask.data();
  p.alibi_slopes = &slope;
  p.q_pos = &q_pos;
  p.kv_pos = kv_pos;
  std::vector<uint8_t> scratch(attention_scratch_bytes(1, n_kv, D, TensorType::F32, 1));
  attention(pool, p, q.data(), out.data(), scratch.data());
  const double w0 = std::exp(-1.0), w1 = std::exp(-0.5), w2 = 1.0;
  EXPECT_NEAR(out[0], (0 * w0 + 1 * w1 + 2 * w2) / (w0 + w1 + w2), 1e-6);
}

}  // namespace
}  // namespace loom::ops
