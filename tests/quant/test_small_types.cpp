// TQ1_0, TQ2_0, MXFP4, Q1_0, Q2_0 (src/quant/small_types.h): the scalar references against
// ggml's own arithmetic (tests/data/quant-ref/*.qref, written by tools/dev/llama-ref/quant_ref.cpp
// against real ggml: to_float bit for bit, the reference quantizers byte for byte, the dot
// products within float rounding), the format facts (FP4 and E8M0 values, the base-3 packing), and
// the x86 SIMD kernels against the references over sizes, misalignments and extreme values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/half.h"
#include "gguf/tensor_type.h"
#include "quant/quant.h"
#include "quant/small_types.h"

namespace loom::quant {
namespace {

using DequantFn = void (*)(const void*, float*, int64_t);
using QuantFn = void (*)(const float*, void*, int64_t);
using DotFn = float (*)(int64_t, const void*, const void*);

struct SmallType {
  const char* name;
  TensorType type;
  TensorType act;  // vec_dot_type
  int block;       // elements per block
  int bytes;       // bytes per block
  DequantFn dequantize;
  QuantFn quantize;
  DotFn dot;
};

const std::vector<SmallType>& small_types() {
  static const std::vector<SmallType> v = {
      {"tq1_0", TensorType::TQ1_0, TensorType::Q8_K, 256, 54, ref::dequantize_row_tq1_0, ref::quantize_row_tq1_0,
       ref::vec_dot_tq1_0},
      {"tq2_0", TensorType::TQ2_0, TensorType::Q8_K, 256, 66, ref::dequantize_row_tq2_0, ref::quantize_row_tq2_0,
       ref::vec_dot_tq2_0},
      {"mxfp4", TensorType::MXFP4, TensorType::Q8_0, 32, 17, ref::dequantize_row_mxfp4, ref::quantize_row_mxfp4,
       ref::vec_dot_mxfp4},
      {"q1_0", TensorType::Q1_0, TensorType::Q8_0, 128, 18, ref::dequantize_row_q1_0, ref::quantize_row_q1_0,
       ref::vec_dot_q1_0},
      {"q2_0", TensorType::Q2_0, TensorType::Q8_0, 64, 18, ref::dequantize_row_q2_0, ref::quantize_row_q2_0,
       ref::vec_dot_q2_0},
  };
  return v;
}

// ---- the .qref files (layout: tests/data/quant-ref/README.md) ------------------------------

struct QRef {
  uint32_t hdr[16];
  std::vector<uint8_t> weights, act_q, qout;
  std::vector<float> dequant, act, dot, dot_generic, qsrc, imatrix;
  int64_t n() const { return hdr[8]; }
  int64_t w_rows() const { return hdr[9]; }
  int64_t a_rows() const { return hdr[10]; }
  int64_t q_rows() const { return hdr[11]; }
};

std::string data_path(const std::string& name) { return std::string(LOOM_SOURCE_DIR) + "/tests/data/quant-ref/" + name; }

bool read_qref(const std::string& path, QRef* r) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t off = 0;
  auto take = [&](void* dst, size_t bytes) {
    if (off + bytes > all.size()) return false;
    if (bytes) std::memcpy(dst, all.data() + off, bytes);
    off += bytes;
    return true;
  };
  if (!take(r->hdr, sizeof r->hdr) || r->hdr[0] != 0x46525141u || r->hdr[1] != 1) return false;
  const int64_t n = r->n(), w = r->w_rows(), k = r->a_rows(), q = r->q_rows();
  const size_t row = size_t(n / r->hdr[4] * r->hdr[5]), arow = size_t(n / r->hdr[6] * r->hdr[7]);
  r->weights.resize(row * size_t(w));
  r->dequant.resize(size_t(w * n));
  r->act.resize(size_t(k * n));
  r->act_q.resize(arow * size_t(k));
  r->dot.resize(size_t(k * w));
  r->dot_generic.resize(size_t(k * w));
  bool ok = take(r->weights.data(), r->weights.size()) && take(r->dequant.data(), r->dequant.size() * 4) &&
            take(r->act.data(), r->act.size() * 4) && take(r->act_q.data(), r->act_q.size()) &&
            take(r->dot.data(), r->dot.size() * 4) && take(r->dot_generic.data(), r->dot_generic.size() * 4);
  if (ok && q > 0) {
    r->qsrc.resize(size_t(q * n));
    r->qout.resize(row * size_t(q));
    ok = take(r->qsrc.data(), r->qsrc.size() * 4);
    if (ok && (r->hdr[12] & 2)) {
      r->imatrix.resize(size_t(n));
      ok = take(r->imatrix.data(), r->imatrix.size() * 4);
    }
    ok = ok && take(r->qout.data(), r->qout.size());
  }
  return ok && off == all.size();
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bound on the float rounding of a dot product: a small multiple of sum |w_i a_i| (both sides
// dequantized), which bounds any summation order's error.
double dot_tolerance(const float* w, const float* a, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(double(w[i]) * double(a[i]));
  return 4e-6 * s + 1e-30;
}

class SmallTypesVsGgml : public ::testing::TestWithParam<std::string> {};

TEST_P(SmallTypesVsGgml, MatchesGgml) {
  for (const SmallType& t : small_types()) {
    SCOPED_TRACE(t.name);
    QRef r;
    const std::string file = std::string(t.name) + GetParam() + ".qref";
    ASSERT_TRUE(read_qref(data_path(file), &r)) << "cannot read " << file;
    ASSERT_EQ(r.hdr[2], uint32_t(t.type));
    ASSERT_EQ(r.hdr[3], uint32_t(t.act)) << "ggml pairs the type with another activation format";
    ASSERT_EQ(r.hdr[4], uint32_t(t.block));
    ASSERT_EQ(r.hdr[5], uint32_t(t.bytes));
    const int64_t n = r.n();
    const size_t row = size_t(n / t.block * t.bytes);
    const size_t arow = size_t(row_bytes(t.act, n));

    // to_float, bit for bit.
    std::vector<float> deq(static_cast<size_t>(n));
    for (int64_t w = 0; w < r.w_rows(); ++w) {
      t.dequantize(r.weights.data() + size_t(w) * row, deq.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits_of(deq[size_t(i)]), bits_of(r.dequant[size_t(w * n + i)]))
            << "row " << w << " element " << i << ": " << deq[size_t(i)] << " vs " << r.dequant[size_t(w * n + i)];
      }
    }

    // The activations: loom's quantizer of the activation format gives ggml's bytes.
    std::vector<uint8_t> aq(arow);
    std::vector<float> adeq(size_t(r.a_rows() * n));
    for (int64_t k = 0; k < r.a_rows(); ++k) {
      ref::quantize_row(t.act, r.act.data() + k * n, aq.data(), n);
      ASSERT_EQ(0, std::memcmp(aq.data(), r.act_q.data() + size_t(k) * arow, arow)) << "act row " << k;
      ref::dequantize_row(t.act, r.act_q.data() + size_t(k) * arow, adeq.data() + k * n, n);
    }

    // Dot products: ggml's scalar code (and its SIMD kernel) within float rounding.
    for (int64_t k = 0; k < r.a_rows(); ++k) {
      for (int64_t w = 0; w < r.w_rows(); ++w) {
        const float got = t.dot(n, r.weights.data() + size_t(w) * row, r.act_q.data() + size_t(k) * arow);
        const double tol = dot_tolerance(r.dequant.data() + w * n, adeq.data() + k * n, n);
        const float want = r.dot_generic[size_t(k * r.w_rows() + w)];
        const float want_simd = r.dot[size_t(k * r.w_rows() + w)];
        if (std::isinf(want)) {
          EXPECT_EQ(got, want);
          continue;
        }
        EXPECT_NEAR(got, want, tol) << "act " << k << " weight row " << w;
        EXPECT_NEAR(got, want_simd, tol) << "act " << k << " weight row " << w;
      }
    }

    // The reference quantizer, byte for byte.
    std::vector<uint8_t> q(row);
    for (int64_t j = 0; j < r.q_rows(); ++j) {
      t.quantize(r.qsrc.data() + j * n, q.data(), n);
      const uint8_t* want = r.qout.data() + size_t(j) * row;
      for (size_t b = 0; b < row; ++b) {
        ASSERT_EQ(int(q[b]), int(want[b]))
            << "quantizer row " << j << " byte " << b << " (block " << b / size_t(t.bytes) << ")";
      }
    }
  }
}

// "": random weight blocks, the quantizer's ten built-in row patterns; "-codes": blocks holding
// every code of the format with extreme scales, the quantizer's edge rows (exact ties, powers of
// two, subnormal maxima, f16-limit and float-limit magnitudes, signed zeros).
INSTANTIATE_TEST_SUITE_P(Files, SmallTypesVsGgml, ::testing::Values("", "-codes"),
                         [](const auto& info) { return info.param.empty() ? std::string("random") : std::string("codes"); });

// The "-codes" weights hold every byte value of the code bytes (so every code at every position;
// for Q1_0 both signs at every position).
TEST(SmallTypes, CodeFilesCoverEveryCode) {
  struct Cover {
    const char* name;
    int first;
    int count;
  };  // code bytes within a block
  const Cover covers[] = {{"tq1_0", 0, 48}, {"tq2_0", 0, 64}, {"mxfp4", 1, 16}, {"q2_0", 2, 16}, {"q1_0", 2, 16}};
  for (const Cover& c : covers) {
    QRef r;
    ASSERT_TRUE(read_qref(data_path(std::string(c.name) + "-codes.qref"), &r)) << c.name;
    std::set<int> seen;
    uint8_t ones[64] = {}, zeros[64] = {};
    const size_t bytes = r.hdr[5];
    for (size_t b = 0; b + bytes <= r.weights.size(); b += bytes) {
      for (int j = 0; j < c.count; ++j) {
        const uint8_t v = r.weights[b + size_t(c.first + j)];
        seen.insert(v);
        ones[j] |= v;
        zeros[j] |= uint8_t(~v);
      }
    }
    if (std::string(c.name) == "q1_0") {
      for (int j = 0; j < 16; ++j) EXPECT_TRUE(ones[j] == 0xff && zeros[j] == 0xff) << j;
    } else {
      EXPECT_EQ(seen.size(), 256u) << c.name;
    }
  }
}

// ---- format facts ---------------------------------------------------------------------------

TEST(SmallTypes, Fp4TableIsTwiceE2M1) {
  for (int c = 0; c < 16; ++c) {
    const int sign = c >> 3, exp = (c >> 1) & 3, man = c & 1;
    // E2M1: exponent bias 1, subnormal (exp 0) = man * 0.5.
    const double v = exp == 0 ? man * 0.5 : std::ldexp(1.0 + man * 0.5, exp - 1);
    EXPECT_EQ(double(detail::kMxfp4Values[c]), (sign ? -2.0 : 2.0) * v) << c;
  }
}

TEST(SmallTypes, E8M0HalfIsPowerOfTwo) {
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(detail::e8m0_half(uint8_t(e)), float(std::ldexp(1.0, e - 128))) << e;
  }
}

// Every base-3 number of five (four) trits survives TQ1_0's byte encoding and the trit decoder.
TEST(SmallTypes, TernaryPackingRoundTrips) {
  for (int v = 0; v < 243; ++v) {
    const uint8_t byte = uint8_t((v * 256 + 242) / 243);
    int digits[5], x = v;
    for (int k = 4; k >= 0; --k) {
      digits[k] = x % 3;
      x /= 3;
    }
    for (int k = 0; k < 5; ++k) EXPECT_EQ(detail::tq1_trit(byte, k), digits[k]) << v << " " << k;
  }
  // Round trip through the quantizer for exact ternary rows, every digit at every position.
  std::mt19937 rng(5);
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<float> x(256), y(256);
    for (auto& v : x) v = float(int(rng() % 3) - 1) * 0.5f;
    x[rng() % 256] = 0.5f;  // the scale is exactly 0.5
    std::vector<uint8_t> q(54);
    ref::quantize_row_tq1_0(x.data(), q.data(), 256);
    ref::dequantize_row_tq1_0(q.data(), y.data(), 256);
    EXPECT_EQ(x, y);
    std::vector<uint8_t> q2(66);
    ref::quantize_row_tq2_0(x.data(), q2.data(), 256);
    ref::dequantize_row_tq2_0(q2.data(), y.data(), 256);
    EXPECT_EQ(x, y);
  }
}

TEST(SmallTypes, ExactValuesRoundTrip) {
  // MXFP4: every FP4 value at scale 2^-1 (max |x| = 6 -> e = 127).
  std::vector<float> x(32), y(32);
  for (int j = 0; j < 32; ++j) x[size_t(j)] = float(detail::kMxfp4Values[j % 16]) * 0.5f;
  x[7] = 6.0f;
  uint8_t b[17];
  ref::quantize_row_mxfp4(x.data(), b, 32);
  EXPECT_EQ(b[0], 127);
  ref::dequantize_row_mxfp4(b, y.data(), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(std::fabs(y[size_t(j)]), std::fabs(x[size_t(j)])) << j;
  // Q2_0: levels -1, 0, 1 of the absolute maximum.
  std::vector<float> x2(64), y2(64);
  for (int j = 0; j < 64; ++j) x2[size_t(j)] = float(j % 3 - 1) * 0.25f;
  uint8_t b2[18];
  ref::quantize_row_q2_0(x2.data(), b2, 64);
  ref::dequantize_row_q2_0(b2, y2.data(), 64);
  EXPECT_EQ(x2, y2);
  // Q1_0: signs of a row of equal magnitudes.
  std::vector<float> x1(128), y1(128);
  for (int j = 0; j < 128; ++j) x1[size_t(j)] = (j * 7 % 5 < 2) ? -0.375f : 0.375f;
  uint8_t b1[18];
  ref::quantize_row_q1_0(x1.data(), b1, 128);
  ref::dequantize_row_q1_0(b1, y1.data(), 128);
  EXPECT_EQ(x1, y1);
}

// ---- SIMD kernels against the references ----------------------------------------------------

#if defined(__x86_64__)

struct SimdDot {
  const char* name;
  int type_index;  // into small_types()
  DotFn fn;
  bool (*available)();
};

bool have_avx2() { return cpu_features().has_avx2_set(); }
bool have_avx512() { return cpu_features().has_avx512_vnni_set(); }

// Random weight rows: random code bytes, scales from a set of finite values including
// subnormal and the largest f16 (or E8M0 exponents 0..200), and per row optionally every code
// at its extreme (mode 1 / 2: all bytes 0x00 / 0xff). Mode 3 (timing): scales as in models
// (f16 0.01..0.02, E8M0 117..124), whose products never meet the slow subnormal arithmetic.
void random_weights(const SmallType& t, std::mt19937& rng, int64_t nb, uint8_t* out, int mode) {
  static const uint16_t kF16[] = {0x3c00, 0x0001, 0x7bff, 0xbc00, 0x0000, 0x2e66, 0xfbff, 0x1400};
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* b = out + i * t.bytes;
    for (int j = 0; j < t.bytes; ++j) {
      b[j] = mode == 1 ? 0x00 : mode == 2 ? 0xff : uint8_t(rng());
    }
    const uint16_t d = mode == 3 ? uint16_t(0x2100 + rng() % 0x400) : kF16[rng() % 8];
    switch (t.type) {
      case TensorType::TQ1_0: std::memcpy(b + 52, &d, 2); break;
      case TensorType::TQ2_0: std::memcpy(b + 64, &d, 2); break;
      case TensorType::MXFP4: b[0] = uint8_t(mode == 3 ? 117 + rng() % 8 : rng() % 201); break;
      default: std::memcpy(b, &d, 2); break;
    }
  }
}

// Activations quantized by the reference quantizer (Q8_0 / Q8_K) from random rows, optionally
// with the extremes -127 / 127 everywhere (mode 1 / 2).
void random_acts(const SmallType& t, std::mt19937& rng, int64_t n, uint8_t* out, int mode) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = mode == 1 ? -3.0f : mode == 2 ? 3.0f : g(rng) * 4.0f;
  if (mode == 3) {
    for (auto& v : x) v = (rng() & 1) ? 3.0f : -3.0f;
  }
  ref::quantize_row(t.act, x.data(), out, n);
}

const std::vector<SimdDot>& simd_dots() {
  static const std::vector<SimdDot> v = {
      {"tq1_0_avx2", 0, detail::small_simd::vec_dot_tq1_0_avx2, have_avx2},
      {"tq2_0_avx2", 1, detail::small_simd::vec_dot_tq2_0_avx2, have_avx2},
      {"mxfp4_avx2", 2, detail::small_simd::vec_dot_mxfp4_avx2, have_avx2},
      {"q1_0_avx2", 3, detail::small_simd::vec_dot_q1_0_avx2, have_avx2},
      {"q2_0_avx2", 4, detail::small_simd::vec_dot_q2_0_avx2, have_avx2},
      {"tq1_0_avx512", 0, detail::small_simd::vec_dot_tq1_0_avx512, have_avx512},
      {"tq2_0_avx512", 1, detail::small_simd::vec_dot_tq2_0_avx512, have_avx512},
      {"mxfp4_avx512", 2, detail::small_simd::vec_dot_mxfp4_avx512, have_avx512},
      {"q1_0_avx512", 3, detail::small_simd::vec_dot_q1_0_avx512, have_avx512},
      {"q2_0_avx512", 4, detail::small_simd::vec_dot_q2_0_avx512, have_avx512},
      {"tq1_0_x86", 0, detail::small_simd::vec_dot_tq1_0_x86, have_avx2},
      {"tq2_0_x86", 1, detail::small_simd::vec_dot_tq2_0_x86, have_avx2},
      {"mxfp4_x86", 2, detail::small_simd::vec_dot_mxfp4_x86, have_avx2},
      {"q1_0_x86", 3, detail::small_simd::vec_dot_q1_0_x86, have_avx2},
      {"q2_0_x86", 4, detail::small_simd::vec_dot_q2_0_x86, have_avx2},
  };
  return v;
}

class SmallTypesSimd : public ::testing::TestWithParam<int> {};

// The kernels on ggml's files: within rounding of ggml's dot products, dequantization bit-exact.
TEST_P(SmallTypesSimd, MatchesGgmlFiles) {
  const SimdDot& s = simd_dots()[size_t(GetParam())];
  if (!s.available()) GTEST_SKIP() << "CPU lacks the ISA of " << s.name;
  const SmallType& t = small_types()[size_t(s.type_index)];
  for (const char* suffix : {"", "-codes"}) {
    QRef r;
    ASSERT_TRUE(read_qref(data_path(std::string(t.name) + suffix + ".qref"), &r));
    const int64_t n = r.n();
    const size_t row = size_t(n / t.block * t.bytes), arow = size_t(row_bytes(t.act, n));
    std::vector<float> adeq(static_cast<size_t>(n));
    for (int64_t k = 0; k < r.a_rows(); ++k) {
      ref::dequantize_row(t.act, r.act_q.data() + size_t(k) * arow, adeq.data(), n);
      for (int64_t w = 0; w < r.w_rows(); ++w) {
        const float want = r.dot_generic[size_t(k * r.w_rows() + w)];
        const float got = s.fn(n, r.weights.data() + size_t(w) * row, r.act_q.data() + size_t(k) * arow);
        if (std::isinf(want)) {
          EXPECT_EQ(got, want);
        } else {
          EXPECT_NEAR(got, want, dot_tolerance(r.dequant.data() + w * n, adeq.data(), n))
              << s.name << suffix << " act " << k << " row " << w;
        }
      }
    }
  }
}

TEST_P(SmallTypesSimd, VecDotMatchesReference) {
  const SimdDot& s = simd_dots()[size_t(GetParam())];
  if (!s.available()) GTEST_SKIP() << "CPU lacks the ISA of " << s.name;
  const SmallType& t = small_types()[size_t(s.type_index)];
  std::mt19937 rng(1234u + unsigned(GetParam()));
  for (int64_t nb = 1; nb <= 64; ++nb) {
    const int64_t n = nb * t.block;
    const size_t wbytes = size_t(nb * t.bytes), abytes = size_t(row_bytes(t.act, n));
    std::vector<uint8_t> wbuf(wbytes + 8), abuf(abytes + 8);
    std::vector<float> wd(static_cast<size_t>(n)), ad(static_cast<size_t>(n));
    for (int mode = 0; mode < 4; ++mode) {
      const int wmode = mode < 3 ? mode : 0;
      // Offsets 0..8: misaligned, and at 8 the rows end exactly at the buffers' ends (overreads
      // show under ASan).
      const int off_w = int(rng() % 9), off_a = int(rng() % 9);
      uint8_t* w = wbuf.data() + off_w;
      uint8_t* a = abuf.data() + off_a;
      random_weights(t, rng, nb, w, wmode);
      random_acts(t, rng, n, a, mode);
      t.dequantize(w, wd.data(), n);
      ref::dequantize_row(t.act, a, ad.data(), n);
      const float want = t.dot(n, w, a);
      const float got = s.fn(n, w, a);
      EXPECT_NEAR(got, want, dot_tolerance(wd.data(), ad.data(), n))
          << s.name << " blocks " << nb << " mode " << mode << " offsets " << off_w << "/" << off_a;
    }
  }
}

// The AVX-512 dots of MXFP4, Q1_0 and TQ2_0 add exact block (unit) sums in a fixed order, which
// their tile kernels reproduce bit for bit (small_types.h kUnitSlotOf16, unit_tree_sum): a scalar
// twin of that order equals them bit for bit, and the several-row forms (vec_dots_*) equal the
// one-row dot of each row.
int8_t q8_at(const uint8_t* a, int64_t e) { return int8_t(a[(e / 32) * 34 + 2 + e % 32]); }
float f16_field(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
float f32_field(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
bool same_bits(float x, float y) {
  if (std::isnan(x) && std::isnan(y)) return true;
  uint32_t a, b;
  std::memcpy(&a, &x, 4);
  std::memcpy(&b, &y, 4);
  return a == b;
}

// Units of 32 elements: isum[u], s[u] = d_a(u) * d_w(u) -> slots -> tree.
float unit_order_model(const std::vector<int32_t>& isum, const std::vector<float>& s) {
  float slot[16] = {};
  for (size_t u = 0; u < isum.size(); ++u) {
    int l = 0;
    while (detail::kUnitSlotOf16[l] != int(u % 16)) ++l;
    slot[l] = std::fma(float(isum[u]), s[u], slot[l]);
  }
  return detail::unit_tree_sum(slot);
}
float model_mxfp4(int64_t nb, const uint8_t* w, const uint8_t* a) {
  std::vector<int32_t> isum(static_cast<size_t>(nb));
  std::vector<float> s(static_cast<size_t>(nb));
  for (int64_t u = 0; u < nb; ++u) {
    const uint8_t* b = w + u * 17;
    int32_t t = 0;
    for (int j = 0; j < 16; ++j) {
      t += detail::kMxfp4Values[b[1 + j] & 15] * q8_at(a, 32 * u + j) +
           detail::kMxfp4Values[b[1 + j] >> 4] * q8_at(a, 32 * u + 16 + j);
    }
    isum[size_t(u)] = t;
    s[size_t(u)] = f16_field(a + u * 34) * detail::e8m0_half(b[0]);
  }
  return unit_order_model(isum, s);
}
float model_q1_0(int64_t nb, const uint8_t* w, const uint8_t* a) {
  std::vector<int32_t> isum(static_cast<size_t>(4 * nb));
  std::vector<float> s(static_cast<size_t>(4 * nb));
  for (int64_t u = 0; u < 4 * nb; ++u) {
    const uint8_t* b = w + (u / 4) * 18;
    int32_t t = 0;
    for (int j = 0; j < 32; ++j) {
      const int e = int(u % 4) * 32 + j;
      t += ((b[2 + e / 8] >> (e % 8)) & 1 ? 1 : -1) * q8_at(a, 32 * u + j);
    }
    isum[size_t(u)] = t;
    s[size_t(u)] = f16_field(a + u * 34) * f16_field(b);
  }
  return unit_order_model(isum, s);
}
// TQ2_0: block by block, one FMA each.
float model_tq2_0(int64_t nb, const uint8_t* w, const uint8_t* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = w + i * 66;
    const uint8_t* ba = a + i * 292;
    int32_t t = 0;
    for (int e = 0; e < 256; ++e) {
      const int q = (b[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      t += (q - 1) * int8_t(ba[4 + e]);
    }
    sum = std::fma(float(t), f32_field(ba) * f16_field(b + 64), sum);
  }
  return sum;
}

TEST(SmallTypesSimd, Avx512AccumulationOrderIsTheScalarModel) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 kernels";
#else
  if (!have_avx512()) GTEST_SKIP() << "CPU lacks AVX-512 VNNI";
  using MultiFn = void (*)(int64_t, const void*, size_t, int, const void*, float*);
  struct Case {
    int type_index;
    DotFn dot;
    float (*model)(int64_t, const uint8_t*, const uint8_t*);
    MultiFn multi;
  };
  const Case cases[] = {
      {2, detail::small_simd::vec_dot_mxfp4_avx512, model_mxfp4, detail::small_simd::vec_dots_mxfp4_avx512},
      {3, detail::small_simd::vec_dot_q1_0_avx512, model_q1_0, detail::small_simd::vec_dots_q1_0_avx512},
      {1, detail::small_simd::vec_dot_tq2_0_avx512, model_tq2_0, nullptr},
  };
  std::mt19937 rng(77);
  for (const Case& c : cases) {
    const SmallType& t = small_types()[size_t(c.type_index)];
    for (int64_t nb : {1, 2, 3, 4, 5, 7, 15, 16, 17, 31, 32, 33, 47, 88, 100}) {
      const int64_t n = nb * t.block;
      const size_t wbytes = size_t(nb * t.bytes), abytes = size_t(row_bytes(t.act, n));
      constexpr int kRows = 5;
      const size_t ws = wbytes + 1 + rng() % 5;
      std::vector<uint8_t> wbuf(ws * kRows + 8), abuf(abytes + 8);
      for (int mode = 0; mode < 4; ++mode) {
        uint8_t* w = wbuf.data() + rng() % 8;
        uint8_t* a = abuf.data() + rng() % 8;
        for (int j = 0; j < kRows; ++j) random_weights(t, rng, nb, w + ws * size_t(j), mode < 3 ? mode : 0);
        random_acts(t, rng, n, a, mode);
        float multi[kRows];
        if (c.multi) c.multi(n, w, ws, kRows, a, multi);
        for (int j = 0; j < kRows; ++j) {
          const uint8_t* wj = w + ws * size_t(j);
          const float got = c.dot(n, wj, a), want = c.model(nb, wj, a);
          ASSERT_TRUE(same_bits(got, want))
              << t.name << " blocks " << nb << " mode " << mode << ": " << got << " vs the model's " << want;
          if (c.multi) {
            ASSERT_TRUE(same_bits(multi[j], got)) << t.name << " vec_dots row " << j << " blocks " << nb;
          }
        }
      }
    }
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(Kernels, SmallTypesSimd, ::testing::Range(0, int(simd_dots().size())),
                         [](const auto& info) { return std::string(simd_dots()[size_t(info.param)].name); });

struct SimdDequant {
  const char* name;
  int type_index;
  DequantFn fn;
  bool (*available)();
};

const std::vector<SimdDequant>& simd_dequants() {
  static const std::vector<SimdDequant> v = {
      {"tq1_0_avx2", 0, detail::small_simd::dequantize_row_tq1_0_avx2, have_avx2},
      {"tq2_0_avx2", 1, detail::small_simd::dequantize_row_tq2_0_avx2, have_avx2},
      {"mxfp4_avx2", 2, detail::small_simd::dequantize_row_mxfp4_avx2, have_avx2},
      {"q1_0_avx2", 3, detail::small_simd::dequantize_row_q1_0_avx2, have_avx2},
      {"q2_0_avx2", 4, detail::small_simd::dequantize_row_q2_0_avx2, have_avx2},
  };
  return v;
}

class SmallTypesSimdDequant : public ::testing::TestWithParam<int> {};

TEST_P(SmallTypesSimdDequant, MatchesGgmlFiles) {
  const SimdDequant& s = simd_dequants()[size_t(GetParam())];
  if (!s.available()) GTEST_SKIP() << "CPU lacks the ISA of " << s.name;
  const SmallType& t = small_types()[size_t(s.type_index)];
  for (const char* suffix : {"", "-codes"}) {
    QRef r;
    ASSERT_TRUE(read_qref(data_path(std::string(t.name) + suffix + ".qref"), &r));
    std::vector<float> got(r.dequant.size());
    s.fn(r.weights.data(), got.data(), int64_t(got.size()));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(bits_of(got[i]), bits_of(r.dequant[i])) << s.name << suffix << " element " << i;
    }
  }
}

TEST_P(SmallTypesSimdDequant, BitIdentical) {
  const SimdDequant& s = simd_dequants()[size_t(GetParam())];
  if (!s.available()) GTEST_SKIP() << "CPU lacks the ISA of " << s.name;
  const SmallType& t = small_types()[size_t(s.type_index)];
  std::mt19937 rng(99u + unsigned(GetParam()));
  for (int64_t nb = 1; nb <= 64; ++nb) {
    const int64_t n = nb * t.block;
    std::vector<uint8_t> wbuf(size_t(nb * t.bytes) + 8);
    std::vector<uint8_t> obuf(size_t(n) * 4 + 8);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    for (int mode = 0; mode < 3; ++mode) {
      uint8_t* w = wbuf.data() + rng() % 9;
      uint8_t* o = obuf.data() + rng() % 9;
      random_weights(t, rng, nb, w, mode);
      t.dequantize(w, want.data(), n);
      s.fn(w, reinterpret_cast<float*>(o), n);
      std::memcpy(got.data(), o, size_t(n) * 4);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits_of(got[size_t(i)]), bits_of(want[size_t(i)])) << s.name << " blocks " << nb << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SmallTypesSimdDequant, ::testing::Range(0, int(simd_dequants().size())),
                         [](const auto& info) { return std::string(simd_dequants()[size_t(info.param)].name); });

#endif  // __x86_64__

}  // namespace
}  // namespace loom::quant
