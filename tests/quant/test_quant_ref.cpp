// Reference formats: byte layouts, quantize -> dequantize error bounds, dot products against a
// double-precision dot of the dequantized rows, and the type tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "quant/type_traits.h"
#include "quant_test_util.h"

namespace loom::quant::test {
namespace {

TEST(QuantTypes, SupportedExactlyTheImplementedTypes) {
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = static_cast<TensorType>(id);
    const std::vector<TensorType> types = every_supported_type();
    const bool expected = std::find(types.begin(), types.end(), t) != types.end();
    EXPECT_EQ(is_supported(t), expected) << "type id " << id;
  }
}

TEST(QuantTypes, VecDotType) {
  EXPECT_EQ(vec_dot_type(TensorType::F32), TensorType::F32);
  EXPECT_EQ(vec_dot_type(TensorType::F16), TensorType::F16);
  EXPECT_EQ(vec_dot_type(TensorType::BF16), TensorType::BF16);
  EXPECT_EQ(vec_dot_type(TensorType::Q4_0), TensorType::Q8_0);
  EXPECT_EQ(vec_dot_type(TensorType::Q5_0), TensorType::Q8_0);
  EXPECT_EQ(vec_dot_type(TensorType::Q8_0), TensorType::Q8_0);
  EXPECT_EQ(vec_dot_type(TensorType::Q4_1), TensorType::Q8_1);
  EXPECT_EQ(vec_dot_type(TensorType::Q5_1), TensorType::Q8_1);
  EXPECT_EQ(vec_dot_type(TensorType::Q8_1), TensorType::Q8_1);
  EXPECT_EQ(vec_dot_type(TensorType::IQ4_NL), TensorType::Q8_0);
  for (TensorType t : {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
                       TensorType::Q8_K, TensorType::IQ4_XS}) {
    EXPECT_EQ(vec_dot_type(t), TensorType::Q8_K) << type_name(t);
  }
  for (TensorType t : iq_types()) EXPECT_EQ(vec_dot_type(t), TensorType::Q8_K) << type_name(t);
  for (TensorType t : {TensorType::TQ1_0, TensorType::TQ2_0}) EXPECT_EQ(vec_dot_type(t), TensorType::Q8_K);
  for (TensorType t : {TensorType::MXFP4, TensorType::Q1_0, TensorType::Q2_0}) {
    EXPECT_EQ(vec_dot_type(t), TensorType::Q8_0) << type_name(t);
  }
  for (TensorType t : every_supported_type()) {
    EXPECT_TRUE(is_supported(vec_dot_type(t))) << type_name(t);
    // Activation blocks tile the weight's (Q1_0: 4 Q8_0 blocks per block, Q2_0: 2).
    EXPECT_EQ(block_size(t) % block_size(vec_dot_type(t)), 0) << type_name(t);
  }
  EXPECT_FALSE(is_supported(TensorType::NVFP4));
}

TEST(QuantDeathTest, RejectsUnsupportedTypeAndPartialBlocks) {
  float x[64] = {};
  uint8_t buf[256] = {};
  EXPECT_DEATH(quantize_row(TensorType::NVFP4, x, buf, 64), "unsupported");
  EXPECT_DEATH(dequantize_row(static_cast<TensorType>(99), buf, x, 32), "unsupported");
  // Computable but not writable without an importance matrix (type_traits.cpp).
  for (TensorType t : {TensorType::IQ2_XXS, TensorType::IQ2_XS, TensorType::IQ1_S}) {
    EXPECT_DEATH(quantize_row(t, x, buf, 256), "no quantizer") << type_name(t);
  }
  EXPECT_DEATH(dequantize_row(TensorType::IQ2_XXS, buf, x, 128), "multiple");
  EXPECT_DEATH(dequantize_row(TensorType::Q1_0, buf, x, 64), "multiple");
  EXPECT_DEATH(dequantize_row(TensorType::Q4_K, buf, x, 32), "multiple");
  EXPECT_DEATH(dequantize_row(TensorType::Q8_0, buf, x, 31), "multiple");
}

// ---- byte layouts (hand-checked blocks) ----------------------------------------------------

TEST(QuantLayout, Q4_0) {
  // Largest magnitude -8 => d = 1 and level = x + 8 exactly.
  float x[32];
  for (int j = 0; j < 16; ++j) {
    x[j] = float(j - 8);
    x[j + 16] = float(7 - j);
  }
  uint8_t b[18];
  ref::quantize_row(TensorType::Q4_0, x, b, 32);
  EXPECT_EQ(get_u16(b), 0x3c00);  // f16 1.0
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[2 + j], j | (15 - j) << 4) << j;
  float y[32];
  ref::dequantize_row(TensorType::Q4_0, b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]);
}

TEST(QuantLayout, Q4_0ClampsPositiveExtreme) {
  // Largest magnitude is +8 => d = -1; +8 maps to level 0 and -8 would need level 16 -> 15.
  float x[32] = {};
  x[0] = 8.0f;
  x[1] = -8.0f;
  uint8_t b[18];
  ref::quantize_row(TensorType::Q4_0, x, b, 32);
  EXPECT_EQ(get_u16(b), 0xbc00);  // f16 -1.0
  EXPECT_EQ(b[2] & 0x0f, 0);
  EXPECT_EQ(b[3] & 0x0f, 15);
}

TEST(QuantLayout, Q4_1) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = 2.0f + 0.5f * float(j % 16);  // min 2, d = 0.5
  uint8_t b[20];
  ref::quantize_row(TensorType::Q4_1, x, b, 32);
  EXPECT_EQ(get_f16(b), 0.5f);
  EXPECT_EQ(get_f16(b + 2), 2.0f);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[4 + j], j | j << 4);
}

TEST(QuantLayout, Q5_0) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j - 16);  // largest magnitude -16 => d = 1
  uint8_t b[22];
  ref::quantize_row(TensorType::Q5_0, x, b, 32);
  EXPECT_EQ(get_f16(b), 1.0f);
  // Levels are j: 5th bit set for j >= 16; qh is a little-endian u32 with bit j for element j.
  EXPECT_EQ(b[2], 0x00);
  EXPECT_EQ(b[3], 0x00);
  EXPECT_EQ(b[4], 0xff);
  EXPECT_EQ(b[5], 0xff);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[6 + j], j | j << 4);
  float y[32];
  ref::dequantize_row(TensorType::Q5_0, b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]);
}

TEST(QuantLayout, Q5_1) {
  float x[32];
  // Element j gets level (j * 7) % 32 on the grid min -1, d = 0.25.
  for (int j = 0; j < 32; ++j) x[j] = -1.0f + 0.25f * float(j == 0 ? 0 : j == 1 ? 31 : (j * 7) % 32);
  uint8_t b[24];
  ref::quantize_row(TensorType::Q5_1, x, b, 32);
  EXPECT_EQ(get_f16(b), 0.25f);
  EXPECT_EQ(get_f16(b + 2), -1.0f);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < 32; ++j) {
    const int level = j == 0 ? 0 : j == 1 ? 31 : (j * 7) % 32;
    const int nib = j < 16 ? b[8 + j] & 0x0f : b[8 + j - 16] >> 4;
    EXPECT_EQ(nib | int(qh >> j & 1) << 4, level) << j;
  }
  float y[32];
  ref::dequantize_row(TensorType::Q5_1, b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]);
}

TEST(QuantLayout, Q8_0AndQ8_1) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j * 8 - 127);  // amax 127 => d = 1
  x[31] = 2.5f;                                            // ties round away from zero
  x[30] = -3.5f;
  x[29] = 0.49999997f;  // just below one half: rounds to 0
  uint8_t b0[34], b1[36];
  ref::quantize_row(TensorType::Q8_0, x, b0, 32);
  ref::quantize_row(TensorType::Q8_1, x, b1, 32);
  EXPECT_EQ(get_f16(b0), 1.0f);
  EXPECT_EQ(get_f16(b1), 1.0f);
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    const int expect = j == 31 ? 3 : j == 30 ? -4 : j == 29 ? 0 : j * 8 - 127;
    EXPECT_EQ(int8_t(b0[2 + j]), expect) << j;
    EXPECT_EQ(int8_t(b1[4 + j]), expect) << j;
    sum += expect;
  }
  EXPECT_EQ(get_f16(b1 + 2), f16_to_f32(f32_to_f16(float(sum))));
}

TEST(QuantLayout, ZeroBlocks) {
  const float x[32] = {};
  for (TensorType t : all_types()) {
    std::vector<uint8_t> b(size_t(row_bytes(t, 32)), 0xaa);
    ref::quantize_row(t, x, b.data(), 32);
    float y[32];
    ref::dequantize_row(t, b.data(), y, 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.0f) << type_name(t) << " " << j;
  }
}

// ---- round trip -------------------------------------------------------------------------

// Largest admissible |x - dequant(quant(x))| over one block, from the format's step size plus
// the f16 rounding (relative 2^-11) of its scale and minimum.
double block_error_bound(TensorType t, const float* x) {
  double amax = 0, lo = DBL_MAX, hi = -DBL_MAX;
  for (int j = 0; j < 32; ++j) {
    amax = std::max(amax, std::fabs(double(x[j])));
    lo = std::min(lo, double(x[j]));
    hi = std::max(hi, double(x[j]));
  }
  // f16 rounding of a scale or minimum v: |error| <= |v| * 2^-11 (normal range) or 2^-25 (the
  // subnormal step's half, for tiny blocks).
  const double u = 1.0 / 2048, sub = std::ldexp(1.0, -25);
  const double tiny = 1e-7 * amax + 1e-30;
  switch (t) {
    case TensorType::Q8_0:
    case TensorType::Q8_1: {
      const double d = amax / 127;
      return 0.5 * d + 128 * (d * u + sub) + tiny;
    }
    // Symmetric 4/5-bit: one extreme clamps to the level next to it (error up to d).
    case TensorType::Q4_0: {
      const double d = amax / 8;
      return d + 8 * (d * u + sub) + tiny;
    }
    case TensorType::Q5_0: {
      const double d = amax / 16;
      return d + 16 * (d * u + sub) + tiny;
    }
    case TensorType::Q4_1: {
      const double d = (hi - lo) / 15;
      return 0.5 * d + 16 * (d * u + sub) + std::fabs(lo) * u + sub + 1e-6 * (hi - lo) + tiny;
    }
    case TensorType::Q5_1: {
      const double d = (hi - lo) / 31;
      return 0.5 * d + 32 * (d * u + sub) + std::fabs(lo) * u + sub + 1e-6 * (hi - lo) + tiny;
    }
    default: return 0;
  }
}

TEST(QuantRoundTrip, BlockFormatsWithinBounds) {
  std::mt19937 rng(1234);
  for (TensorType t : all_types()) {
    if (block_size(t) != 32) continue;
    for (int64_t n = 32; n <= 4096; n = n < 256 ? n + 32 : n * 2) {
      const std::vector<float> x = random_floats(n, rng);
      std::vector<uint8_t> q(size_t(row_bytes(t, n)));
      std::vector<float> y(static_cast<size_t>(n));
      ref::quantize_row(t, x.data(), q.data(), n);
      ref::dequantize_row(t, q.data(), y.data(), n);
      for (int64_t b = 0; b < n / 32; ++b) {
        const double bound = block_error_bound(t, x.data() + b * 32);
        for (int64_t j = b * 32; j < b * 32 + 32; ++j) {
          ASSERT_LE(std::fabs(double(x[size_t(j)]) - y[size_t(j)]), bound) << type_name(t) << " n=" << n << " element " << j;
        }
      }
    }
  }
}

TEST(QuantRoundTrip, Q8ExactOnItsOwnGrid) {
  // Values that are exactly levels * d with f16-exact d come back unchanged.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(-127, 127);
  std::vector<float> x(256);
  for (int b = 0; b < 8; ++b) {
    const float d = std::ldexp(1.0f, b - 4);
    x[size_t(b * 32)] = 127 * d;
    for (int j = 1; j < 32; ++j) x[size_t(b * 32 + j)] = float(level(rng)) * d;
  }
  for (TensorType t : {TensorType::Q8_0, TensorType::Q8_1}) {
    std::vector<uint8_t> q(size_t(row_bytes(t, 256)));
    std::vector<float> y(256);
    ref::quantize_row(t, x.data(), q.data(), 256);
    ref::dequantize_row(t, q.data(), y.data(), 256);
    EXPECT_EQ(x, y) << type_name(t);
  }
}

TEST(QuantRoundTrip, F32Exact) {
  std::mt19937 rng(5);
  const std::vector<float> x = random_floats(100, rng);
  std::vector<float> q(100), y(100);
  ref::quantize_row(TensorType::F32, x.data(), q.data(), 100);
  ref::dequantize_row(TensorType::F32, q.data(), y.data(), 100);
  EXPECT_EQ(x, y);
}

TEST(QuantRoundTrip, HalfFormatsExactWhenRepresentableAndRoundToNearestEven) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> bits16(0, 0xffff);
  for (TensorType t : {TensorType::F16, TensorType::BF16}) {
    const auto to_f32 = t == TensorType::F16 ? f16_to_f32 : bf16_to_f32;
    // Representable values: every finite 16-bit pattern comes back bit for bit.
    for (int64_t n : {1, 7, 32, 33, 1000}) {
      std::vector<uint16_t> h(static_cast<size_t>(n));
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        do {
          v = uint16_t(bits16(rng));
        } while (std::isnan(to_f32(v)));
        h[size_t(i)] = v;
        x[size_t(i)] = to_f32(v);
      }
      std::vector<uint16_t> q(static_cast<size_t>(n));
      std::vector<float> y(static_cast<size_t>(n));
      ref::quantize_row(t, x.data(), q.data(), n);
      EXPECT_EQ(q, h) << type_name(t) << " n=" << n;
      ref::dequantize_row(t, q.data(), y.data(), n);
      EXPECT_EQ(y, x) << type_name(t) << " n=" << n;
    }
    // Midpoints between neighbours round to the even one; just above/below go to the nearest.
    for (uint16_t v :
         {uint16_t(0x3c00), uint16_t(0x3c01), uint16_t(0x0001), uint16_t(0x4000), uint16_t(0xc123), uint16_t(0x0400)}) {
      const double a = to_f32(v), b = to_f32(uint16_t(v + 1));
      const float mid = float((a + b) / 2);  // exact in f32 for both formats
      const uint16_t even = (v & 1) ? uint16_t(v + 1) : v;
      const float xs[3] = {mid, std::nextafter(mid, float(a)), std::nextafter(mid, float(b))};
      uint16_t q[3];
      ref::quantize_row(t, xs, q, 3);
      EXPECT_EQ(q[0], even) << type_name(t) << " midpoint above " << std::hex << v;
      EXPECT_EQ(q[1], v) << type_name(t);
      EXPECT_EQ(q[2], uint16_t(v + 1)) << type_name(t);
    }
  }
}

// ---- dot products against double precision -----------------------------------------------

TEST(QuantVecDot, MatchesDoubleDotOfDequantizedRows) {
  std::mt19937 rng(4321);
  for (TensorType t : all_types()) {
    const TensorType at = vec_dot_type(t);
    for (int64_t n : {32, 64, 96, 256, 1024, 4096}) {
      const std::vector<uint8_t> w = random_row(t, n, rng);
      const std::vector<uint8_t> a = random_row(at, n, rng);
      std::vector<float> wf(static_cast<size_t>(n)), af(static_cast<size_t>(n));
      ref::dequantize_row(t, w.data(), wf.data(), n);
      ref::dequantize_row(at, a.data(), af.data(), n);
      double exact = 0.0;
      for (int64_t i = 0; i < n; ++i) exact += double(wf[size_t(i)]) * af[size_t(i)];
      const double mag = dot_magnitude(t, n, w.data(), a.data());
      // Float accumulation error, plus for Q4_1/Q5_1 the f16 rounding of s = d * sum(q) which
      // the dot uses in place of the dequantized activations' sum.
      double tol = 2e-6 * mag + 1e-30;
      if (has_min(t)) tol += 2.0 / 2048 * mag;
      const float r = ref::vec_dot(t, n, w.data(), a.data());
      const float s = vec_dot(t, n, w.data(), a.data());
      EXPECT_NEAR(r, exact, tol) << type_name(t) << " n=" << n << " ref";
      EXPECT_NEAR(s, exact, tol) << type_name(t) << " n=" << n << " dispatch";
    }
  }
}

TEST(QuantVecDot, KQuantsMatchDoubleDotOfDequantizedRows) {
  std::mt19937 rng(8765);
  std::vector<TensorType> types = kquant_types();
  for (TensorType t : new_types()) types.push_back(t);  // IQ and small types: blocks divide 256
  for (TensorType t : types) {
    const TensorType at = vec_dot_type(t);
    for (int64_t n : {256, 512, 1024, 4096, 8192}) {
      for (int rep = 0; rep < 4; ++rep) {
        const std::vector<uint8_t> w = any_random_row(t, n, rng);
        const std::vector<uint8_t> a = random_row(at, n, rng);
        std::vector<float> wf(static_cast<size_t>(n)), af(static_cast<size_t>(n));
        ref::dequantize_row(t, w.data(), wf.data(), n);
        ref::dequantize_row(at, a.data(), af.data(), n);
        double exact = 0.0;
        for (int64_t i = 0; i < n; ++i) exact += double(wf[size_t(i)]) * af[size_t(i)];
        const double tol = 2e-6 * dot_magnitude(t, n, w.data(), a.data()) + 1e-30;
        EXPECT_NEAR(ref::vec_dot(t, n, w.data(), a.data()), exact, tol) << type_name(t) << " n=" << n << " ref";
        EXPECT_NEAR(vec_dot(t, n, w.data(), a.data()), exact, tol) << type_name(t) << " n=" << n << " dispatch";
      }
    }
  }
}

// Q8_K: d = max / -127 from the element of largest magnitude with its sign (the first on ties),
// levels rounded to nearest even, bsums of each 16.
TEST(QuantLayout, Q8_K) {
  float x[256];
  for (int j = 0; j < 256; ++j) x[j] = float(j) - 100.0f;  // max magnitude 155 at j = 255
  uint8_t b[292];
  ref::quantize_row(TensorType::Q8_K, x, b, 256);
  float d;
  std::memcpy(&d, b, 4);
  const float iscale = -127.0f / 155.0f;
  EXPECT_EQ(f32_bits(d), f32_bits(1.0f / iscale));
  const auto* qs = reinterpret_cast<const int8_t*>(b + 4);
  EXPECT_EQ(qs[255], -127);
  EXPECT_EQ(qs[100], 0);
  for (int j = 0; j < 256; ++j) {
    ASSERT_EQ(qs[j], int(std::nearbyint(iscale * x[j]))) << j;
  }
  for (int k = 0; k < 16; ++k) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += qs[16 * k + j];
    int16_t bs;
    std::memcpy(&bs, b + 260 + 2 * k, 2);
    EXPECT_EQ(bs, s) << k;
  }
  // Ties in magnitude: the first one's sign wins; ties of x * iscale at .5 round to even.
  float y[256] = {};
  y[3] = -127.0f;
  y[7] = 127.0f;
  y[8] = 2.5f;    // iscale = -127 / -127 = 1: 2.5 -> 2
  y[9] = 3.5f;    // -> 4
  y[10] = -0.5f;  // -> 0
  ref::quantize_row(TensorType::Q8_K, y, b, 256);
  std::memcpy(&d, b, 4);
  EXPECT_EQ(d, 1.0f);  // -1 had y[7] won
  EXPECT_EQ(qs[3], -127);
  EXPECT_EQ(qs[7], 127);
  EXPECT_EQ(qs[8], 2);
  EXPECT_EQ(qs[9], 4);
  EXPECT_EQ(qs[10], 0);
  // All zero: d = 0, every level and bsum 0.
  const float z[256] = {};
  std::memset(b, 0xaa, sizeof(b));
  ref::quantize_row(TensorType::Q8_K, z, b, 256);
  for (uint8_t v : b) ASSERT_EQ(v, 0);
}

// k-quant weight formats: quantize -> dequantize keeps the relative RMS error of Gaussian rows
// below the format's typical level (byte-exactness with llama.cpp is checked by
// test_quant_golden on real tensors).
TEST(QuantRoundTrip, KQuantsRelativeRmsError) {
  const std::pair<TensorType, double> bounds[] = {
      {TensorType::Q2_K, 0.40}, {TensorType::Q3_K, 0.22},   {TensorType::Q4_K, 0.11},  {TensorType::Q5_K, 0.055},
      {TensorType::Q6_K, 0.03}, {TensorType::IQ4_NL, 0.12}, {TensorType::IQ4_XS, 0.12}};
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [t, bound] : bounds) {
    const int64_t n = 256 * 64;
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (auto& v : x) v = normal(rng) * 0.02f;
    std::vector<uint8_t> q(size_t(row_bytes(t, n)));
    ref::quantize_row(t, x.data(), q.data(), n);
    ref::dequantize_row(t, q.data(), y.data(), n);
    double err = 0, ref_sq = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      ref_sq += double(x[i]) * x[i];
    }
    const double rel = std::sqrt(err / ref_sq);
    std::printf("%-7s relative rms error %.4f\n", type_name(t).c_str(), rel);
    EXPECT_LT(rel, bound) << type_name(t);
    // All-zero rows stay all zero.
    std::vector<float> z(static_cast<size_t>(n), 0.0f);
    ref::quantize_row(t, z.data(), q.data(), n);
    ref::dequantize_row(t, q.data(), y.data(), n);
    for (float v : y) ASSERT_EQ(v, 0.0f) << type_name(t);
  }
}

// The writable IQ and small types: Gaussian rows quantized without an importance matrix stay
// within each format's typical relative RMS error, and zero rows stay zero. (Byte-identity with
// ggml is test_quant_iq_quantize's and test_quant_small's.) The types without quantize_row are
// refused by the row API (QuantDeathTest).
TEST(QuantRoundTrip, NewTypesRelativeRmsError) {
  const std::pair<TensorType, double> bounds[] = {
      {TensorType::IQ2_S, 0.40}, {TensorType::IQ3_XXS, 0.30}, {TensorType::IQ3_S, 0.25},
      {TensorType::IQ1_M, 0.60}, {TensorType::TQ1_0, 0.90},   {TensorType::TQ2_0, 0.90},
      {TensorType::MXFP4, 0.20}, {TensorType::Q1_0, 0.70},    {TensorType::Q2_0, 0.80}};
  std::mt19937 rng(78);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [t, bound] : bounds) {
    ASSERT_TRUE(has_ref_quantizer(t)) << type_name(t);
    const int64_t n = 256 * 16;
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (auto& v : x) v = normal(rng) * 0.02f;
    std::vector<uint8_t> q(size_t(row_bytes(t, n)));
    ref::quantize_row(t, x.data(), q.data(), n);
    ref::dequantize_row(t, q.data(), y.data(), n);
    double err = 0, ref_sq = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      ref_sq += double(x[i]) * x[i];
    }
    const double rel = std::sqrt(err / ref_sq);
    std::printf("%-7s relative rms error %.4f\n", type_name(t).c_str(), rel);
    EXPECT_LT(rel, bound) << type_name(t);
    // The dispatched quantizer writes the same bytes.
    std::vector<uint8_t> q2(q.size());
    quantize_row(t, x.data(), q2.data(), n);
    EXPECT_EQ(q, q2) << type_name(t);
    std::vector<float> z(static_cast<size_t>(n), 0.0f);
    ref::quantize_row(t, z.data(), q.data(), n);
    ref::dequantize_row(t, q.data(), y.data(), n);
    for (float v : y) ASSERT_EQ(v, 0.0f) << type_name(t);
  }
}

TEST(QuantRoundTrip, Q8_KWithinHalfAStep) {
  std::mt19937 rng(99);
  for (int64_t n : {256, 1024, 4096}) {
    const std::vector<float> x = random_floats(n, rng);
    std::vector<uint8_t> q(size_t(row_bytes(TensorType::Q8_K, n)));
    std::vector<float> y(static_cast<size_t>(n));
    ref::quantize_row(TensorType::Q8_K, x.data(), q.data(), n);
    ref::dequantize_row(TensorType::Q8_K, q.data(), y.data(), n);
    for (int64_t b = 0; b < n / 256; ++b) {
      float d;
      std::memcpy(&d, q.data() + b * 292, 4);
      for (int64_t j = b * 256; j < b * 256 + 256; ++j) {
        ASSERT_LE(std::fabs(double(x[size_t(j)]) - y[size_t(j)]), 0.5 * std::fabs(d) * (1 + 1e-5) + 1e-30)
            << "n=" << n << " element " << j;
      }
    }
  }
}

TEST(QuantVecDot, MinTermUsesActivationSum) {
  // w: Q4_1 with all levels 0 => every weight equals m; a: Q8_1. Dot = m * s per block.
  uint8_t w[20] = {};
  const uint16_t d = f32_to_f16(0.5f), m = f32_to_f16(-1.5f);
  std::memcpy(w, &d, 2);
  std::memcpy(w + 2, &m, 2);
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j) - 10.0f;
  uint8_t a[36];
  ref::quantize_row(TensorType::Q8_1, x, a, 32);
  const float expect = -1.5f * get_f16(a + 2);
  EXPECT_FLOAT_EQ(ref::vec_dot(TensorType::Q4_1, 32, w, a), expect);
  EXPECT_FLOAT_EQ(vec_dot(TensorType::Q4_1, 32, w, a), expect);
}

// ---- the type table (type_traits.h) --------------------------------------------------------

TEST(TypeTable, GeometryIsGgufs) {
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = static_cast<TensorType>(id);
    const TypeTraits& tt = type_traits(t);
    const auto info = gguf::tensor_type_info(id);
    SCOPED_TRACE(id);
    if (!info) {
      EXPECT_EQ(tt.block_size, 0);
      EXPECT_FALSE(tt.computable);
      EXPECT_EQ(tt.name, "unknown");
      continue;
    }
    EXPECT_EQ(tt.type, t);
    EXPECT_EQ(tt.name, info->name);
    EXPECT_EQ(tt.block_size, info->block_size);
    EXPECT_EQ(tt.type_size, info->block_bytes);
    EXPECT_EQ(tt.is_quantized, info->block_size > 1);
  }
  EXPECT_EQ(type_traits(static_cast<TensorType>(1u << 20)).block_size, 0);
}

TEST(TypeTable, EntriesAreConsistent) {
  for (const TypeTraits& tt : all_type_traits()) {
    SCOPED_TRACE(tt.name);
    EXPECT_EQ(tt.computable, tt.block_size > 0 && tt.ref.dequantize_row && tt.ref.vec_dot);
    EXPECT_EQ(is_supported(tt.type), tt.computable);
    EXPECT_EQ(vec_dot_type(tt.type), tt.vec_dot_type);
    EXPECT_EQ(tt.ref.vec_dot_tile, nullptr);  // the generic loop over vec_dot
    if (tt.computable) {
      // Activations are quantized to vec_dot_type, whose blocks must tile the weight's.
      const TypeTraits& at = type_traits(tt.vec_dot_type);
      EXPECT_TRUE(at.computable);
      EXPECT_NE(at.ref.quantize_row, nullptr);
      EXPECT_EQ(tt.block_size % at.block_size, 0);
    }
    for (int s = 0; s < kKernelSets; ++s) {
      const RowKernels& k = tt.kernels[s];
      if (!tt.computable) {
        EXPECT_TRUE(!k.dequantize_row && !k.quantize_row && !k.vec_dot && !k.vec_dot_tile);
      }
      // A tile kernel's pairs are bit-identical with its own set's vec_dot (batch invariance).
      if (k.vec_dot_tile) {
        EXPECT_NE(k.vec_dot, nullptr) << "set " << s;
      }
      if (k.quantize_row) {
        EXPECT_NE(tt.ref.quantize_row, nullptr) << "set " << s;
      }
    }
    const PackedTraits& p = tt.packed;
    if (!tt.packable()) {
      EXPECT_TRUE(!p.pack && !p.ref_dot && !p.amx && !p.avx512 && !p.avxvnni);
      continue;
    }
    EXPECT_TRUE(tt.computable);
    EXPECT_TRUE(p.tile_cols == 32 || p.tile_cols == 256);
    EXPECT_EQ(p.tile_cols % tt.block_size, 0);
    EXPECT_GT(p.tile_bytes, 0u);
    EXPECT_NE(p.pack, nullptr);
    EXPECT_NE(p.ref_dot, nullptr);
    if (p.act == PackedAct::kQ8K) {
      EXPECT_EQ(p.tile_cols, 256);
    }
    if (p.act == PackedAct::kQ8_0Blocks || p.act == PackedAct::kQ8_1Blocks) {
      EXPECT_EQ(p.blocks.tile_bytes, p.tile_bytes);
    }
    if (p.amx) {
      EXPECT_NE(p.avx512, nullptr);
    }  // AMX hands runs shorter than 16 rows to AVX-512
  }
}

// The suites' type lists (quant_test_util.h) name every type the table computes with, so a new
// row is not silently left out of the reference and SIMD tests.
TEST(TypeTable, TestListsCoverEveryComputableType) {
  std::vector<TensorType> listed = every_supported_type(), computable;
  for (const TypeTraits& tt : all_type_traits()) {
    if (tt.computable) computable.push_back(tt.type);
  }
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, computable);
}

}  // namespace
}  // namespace loom::quant::test
