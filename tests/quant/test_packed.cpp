// Packed (row-interleaved) weights: the scalar reference GEMM against quant::ref::vec_dot on the
// original rows (checks the layout and packing), and every SIMD variant this CPU can run against
// the reference, over many shapes, activation counts and misaligned buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/cpu.h"
#include "base/half.h"
#include "quant/packed.h"
#include "quant/packed_act_panels.h"
#include "quant/packed_layout.h"
#include "quant/small_types.h"
#include "quant/type_traits.h"
#include "quant_test_util.h"

namespace loom::quant {
namespace {

using test::Misaligned;

struct Problem {
  TensorType t;
  int64_t rows, cols;
  int n;
  std::vector<uint8_t> w;  // rows in the GGUF layout
  std::vector<float> x;    // n activation rows
  std::vector<uint8_t> packed;
  std::vector<uint8_t> act;       // n packed activation rows
  std::vector<uint8_t> act_q8;    // n rows in vec_dot_type(t), for the vec_dot comparison
  std::vector<double> magnitude;  // Σ|w·a| per (i, r): the rounding scale
};

Problem make(TensorType t, int64_t rows, int64_t cols, int n, std::mt19937& rng) {
  Problem p{t, rows, cols, n, {}, {}, {}, {}, {}, {}};
  const size_t rb = size_t(row_bytes(t, cols));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint8_t> row = test::any_random_row(t, cols, rng);  // k-quants: random bytes half the time
    p.w.insert(p.w.end(), row.begin(), row.end());
  }
  p.x = test::random_floats(int64_t(n) * cols, rng);
  p.packed.assign(packed_size(t, rows, cols), 0xcd);
  pack_weights(t, p.w.data(), rb, rows, cols, p.packed.data(), 0, (rows + kPackRows - 1) / kPackRows);
  const size_t ab = packed_act_row_bytes(t, cols);
  p.act.assign(ab * size_t(n), 0);
  const TensorType dt = vec_dot_type(t);
  const size_t qb = size_t(row_bytes(dt, cols));
  p.act_q8.assign(qb * size_t(n) + 1, 0);
  // The batch layout (panels on AArch64) in two pieces, split inside a panel where there is one.
  quantize_packed_act_rows(p.t, p.x.data(), cols, n, 0, n / 2 + n % 2, p.act.data());
  quantize_packed_act_rows(p.t, p.x.data(), cols, n, n / 2 + n % 2, n, p.act.data());
  for (int i = 0; i < n; ++i) {
    ref::quantize_row(dt, p.x.data() + size_t(i) * size_t(cols), p.act_q8.data() + size_t(i) * qb, cols);
    for (int64_t r = 0; r < rows; ++r) {
      p.magnitude.push_back(test::dot_magnitude(t, cols, p.w.data() + size_t(r) * rb, p.act_q8.data() + size_t(i) * qb));
    }
  }
  return p;
}

void expect_close(const Problem& p, const float* out, size_t out_stride, const char* what) {
  const size_t qb = size_t(row_bytes(vec_dot_type(p.t), p.cols));
  const size_t rb = size_t(row_bytes(p.t, p.cols));
  for (int i = 0; i < p.n; ++i) {
    for (int64_t r = 0; r < p.rows; ++r) {
      const float want = ref::vec_dot(p.t, p.cols, p.w.data() + size_t(r) * rb, p.act_q8.data() + size_t(i) * qb);
      const double tol = 1e-5 * p.magnitude[size_t(i) * size_t(p.rows) + size_t(r)] + 1e-6;
      ASSERT_NEAR(out[size_t(i) * out_stride + size_t(r)], want, tol)
          << what << " " << test::type_name(p.t) << " rows=" << p.rows << " cols=" << p.cols << " n=" << p.n << " i=" << i
          << " r=" << r;
    }
  }
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

using Gemm = void (*)(TensorType, int64_t, int64_t, const void*, int64_t, int64_t, const void*, size_t, int, float*, size_t);

// Batch invariance: every activation row's outputs are bit-identical whether the row is computed
// alone, with the n - 1 others (got: all rows in one call), or in a call of a few rows starting
// at it (so that it falls at another place of the kernels' runs of 16, 8, 4, 2, 1 rows, and of
// the activation panels: each call's rows quantized as their own batch); each single-row call
// over one group at a time too (the 1-row kernels take several groups at once).
void expect_rows_invariant(Gemm gemm, const Problem& p, const uint8_t* packed, size_t ab, const float* got,
                           size_t out_stride, const char* what) {
  const int64_t groups = (p.rows + kPackRows - 1) / kPackRows;
  std::vector<float> one(size_t(p.rows) * 3 + 3);
  std::vector<uint8_t> act(ab * 3);
  for (int i = 0; i < p.n; ++i) {
    const int sub = std::min(3, p.n - i);
    std::fill(one.begin(), one.end(), 555.0f);
    quantize_packed_act_rows(p.t, p.x.data() + size_t(i) * size_t(p.cols), p.cols, sub, 0, sub, act.data());
    gemm(p.t, p.rows, p.cols, packed, 0, groups, act.data(), ab, sub, one.data(), size_t(p.rows));
    for (int s = 0; s < sub; ++s) {
      for (int64_t r = 0; r < p.rows; ++r) {
        ASSERT_TRUE(same_bits(one[size_t(s) * size_t(p.rows) + size_t(r)], got[size_t(i + s) * out_stride + size_t(r)]))
            << what << " " << test::type_name(p.t) << " rows=" << p.rows << " cols=" << p.cols << " n=" << p.n << ": row "
            << i + s << " in a call of " << sub << " from row " << i << " differs at r=" << r;
      }
    }
    if (i % 7 != 0) continue;
    quantize_packed_act(p.t, p.x.data() + size_t(i) * size_t(p.cols), p.cols, act.data());
    for (int64_t g = 0; g < groups; ++g) {
      std::fill(one.begin(), one.end(), 555.0f);
      gemm(p.t, p.rows, p.cols, packed, g, g + 1, act.data(), ab, 1, one.data(), size_t(p.rows));
      for (int64_t r = g * kPackRows; r < std::min(p.rows, (g + 1) * kPackRows); ++r) {
        ASSERT_TRUE(same_bits(one[size_t(r)], got[size_t(i) * out_stride + size_t(r)]))
            << what << " " << test::type_name(p.t) << " rows=" << p.rows << " cols=" << p.cols << " n=" << p.n << ": row "
            << i << " alone over group " << g << " differs at r=" << r;
      }
    }
  }
}

int64_t block_size_of_type(TensorType t) { return tensor_type_info(t)->block_size; }

// Every type with a packed layout; the 32-column block types of the AVX-512 kernel.
const std::vector<TensorType> kAllPacked = {TensorType::Q4_0, TensorType::Q4_1,   TensorType::Q5_0, TensorType::Q5_1,
                                            TensorType::Q8_0, TensorType::IQ4_NL, TensorType::F16,  TensorType::BF16,
                                            TensorType::Q2_K, TensorType::Q3_K,   TensorType::Q4_K, TensorType::Q5_K,
                                            TensorType::Q6_K, TensorType::IQ4_XS, TensorType::MXFP4};
const std::vector<TensorType> kBlocks32 = {TensorType::Q4_0, TensorType::Q4_1,   TensorType::Q5_0, TensorType::Q5_1,
                                           TensorType::Q8_0, TensorType::IQ4_NL, TensorType::MXFP4};

// Runs gemm over all groups, split in two calls, with misaligned inputs and an output stride
// wider than rows; checks every output, that padding columns beyond rows are untouched, and that
// each activation row's outputs do not depend on the other rows of the call.
void check_variant(Gemm gemm, const char* what, std::vector<TensorType> types = kAllPacked) {
  std::mt19937 rng(1234);
  for (TensorType t : types) {
    for (int64_t rows : {1, 5, 16, 17, 31, 48, 70}) {
      for (int64_t cols : {32, 64, 96, 256, 1024}) {
        if (cols % block_size_of_type(t) != 0) continue;
        for (int n : {1, 2, 3, 5, 8, 13, 16, 20, 35, 48}) {
          if (cols == 1024 && (rows > 17 || (n > 3 && n != 16))) continue;  // keep the test fast
          Problem p = make(t, rows, cols, n, rng);
          const size_t mis = size_t(rows + n + cols / 32) % 61;
          Misaligned packed(p.packed.size(), mis), act(p.act.size(), (mis * 7) % 64);
          std::memcpy(packed.data(), p.packed.data(), p.packed.size());
          std::memcpy(act.data(), p.act.data(), p.act.size());
          const size_t out_stride = size_t(rows) + 3;
          Misaligned out(sizeof(float) * out_stride * size_t(n), (mis * 4) % 64);
          for (size_t k = 0; k < out_stride * size_t(n); ++k) out.f32()[k] = 777.0f;
          const int64_t groups = (rows + kPackRows - 1) / kPackRows, half = groups / 2;
          const size_t ab = packed_act_row_bytes(t, cols);
          gemm(t, rows, cols, packed.data(), 0, half, act.data(), ab, n, out.f32(), out_stride);
          gemm(t, rows, cols, packed.data(), half, groups, act.data(), ab, n, out.f32(), out_stride);
          expect_close(p, out.f32(), out_stride, what);
          expect_rows_invariant(gemm, p, packed.data(), ab, out.f32(), out_stride, what);
          for (int i = 0; i < n; ++i) {
            for (size_t c = size_t(rows); c < out_stride; ++c) {
              ASSERT_EQ(out.f32()[size_t(i) * out_stride + c], 777.0f) << what << " wrote past rows";
            }
          }
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(Packed, LayoutSizes) {
  EXPECT_TRUE(can_pack(TensorType::Q4_0));
  EXPECT_TRUE(can_pack(TensorType::Q8_0));
  EXPECT_TRUE(can_pack(TensorType::Q4_K));
  EXPECT_TRUE(can_pack(TensorType::Q6_K));
  EXPECT_TRUE(can_pack(TensorType::Q5_K));
  EXPECT_FALSE(can_pack(TensorType::Q8_K));
  EXPECT_FALSE(can_pack(TensorType::F32));
  for (TensorType t : kAllPacked) EXPECT_TRUE(can_pack(t)) << test::type_name(t);
  // The 32-column block types keep the file's bytes: 16 blocks per tile.
  for (TensorType t : {TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL}) {
    EXPECT_EQ(packed_size(t, 16, 64), size_t(2 * 16 * row_bytes(t, 32))) << test::type_name(t);
    EXPECT_EQ(packed_act_row_bytes(t, 96), size_t(3 * 40)) << test::type_name(t);
  }
  EXPECT_EQ(packed_size(TensorType::Q2_K, 17, 512), size_t(2 * 2 * 1344));  // the file's 84 bytes per row
  EXPECT_EQ(packed_size(TensorType::Q3_K, 16, 256), size_t(1824));
  EXPECT_EQ(packed_size(TensorType::IQ4_XS, 16, 256), size_t(2208));
  EXPECT_EQ(packed_act_row_bytes(TensorType::Q3_K, 512), size_t(2 * 292));
  EXPECT_EQ(packed_size(TensorType::Q5_K, 17, 512), size_t(2 * 2 * 2880));
  EXPECT_EQ(packed_act_row_bytes(TensorType::Q5_K, 512), size_t(2 * 292));
  EXPECT_EQ(packed_size(TensorType::Q6_K, 16, 256), size_t(4384));
  EXPECT_EQ(packed_size(TensorType::Q4_K, 17, 512), size_t(2 * 2 * 2368));
  EXPECT_EQ(packed_act_row_bytes(TensorType::Q4_K, 512), size_t(2 * 292));
  EXPECT_TRUE(can_pack(TensorType::F16));
  EXPECT_EQ(packed_size(TensorType::BF16, 17, 64), size_t(2 * 64 * 16 * 2));
  // Q4_0: 16 rows x (32 bytes of scales + 256 of nibbles) per 32 columns; same bytes as GGUF.
  EXPECT_EQ(packed_size(TensorType::Q4_0, 16, 64), size_t(2 * 288));
  EXPECT_EQ(packed_size(TensorType::Q4_0, 17, 64), size_t(4 * 288));
  EXPECT_EQ(packed_size(TensorType::Q8_0, 32, 32), size_t(2 * 544));
  EXPECT_EQ(packed_act_row_bytes(TensorType::Q4_0, 96), size_t(3 * 40));
  EXPECT_EQ(packed_act_row_bytes(TensorType::F16, 96), size_t(96 * 4));
  EXPECT_EQ(packed_size(TensorType::F16, 17, 64), size_t(2 * 64 * 16 * 2));
}

// The activation format byte for byte: the reference Q8_0 quantization's d (through f16) and
// quants, plus their sum, whichever quantizer the dispatch picks.
TEST(Packed, ActivationsAreTheQ8_0QuantizationWithSums) {
  std::mt19937 rng(99);
  for (int64_t cols : {32, 64, 96, 512, 4096}) {
    std::vector<float> x = test::random_floats(cols, rng);
    if (cols == 96) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block
    std::vector<uint8_t> got(packed_act_row_bytes(TensorType::Q8_0, cols));
    quantize_packed_act(TensorType::Q8_0, x.data(), cols, got.data());
    std::vector<uint8_t> q8(size_t(row_bytes(TensorType::Q8_0, cols)));
    ref::quantize_row(TensorType::Q8_0, x.data(), q8.data(), cols);
    for (int64_t b = 0; b < cols / 32; ++b) {
      const uint8_t* want = q8.data() + b * 34;
      const uint8_t* blk = got.data() + b * 40;
      float d;
      int32_t sum, want_sum = 0;
      std::memcpy(&d, blk, 4);
      std::memcpy(&sum, blk + 4, 4);
      ASSERT_EQ(d, test::get_f16(want)) << cols << " block " << b;
      ASSERT_EQ(std::memcmp(blk + 8, want + 2, 32), 0) << cols << " block " << b;
      for (int k = 0; k < 32; ++k) want_sum += int8_t(want[2 + k]);
      ASSERT_EQ(sum, want_sum) << cols << " block " << b;
    }
  }
}

// The types with a block minimum (Q4_1, Q5_1) take Q8_1's quantization: d and the quants as
// Q8_0's, and s (f16 of d · Σ q with the unrounded d) in place of the sum.
TEST(Packed, ActivationsOfTypesWithAMinimumCarryQ8_1s) {
  std::mt19937 rng(98);
  for (TensorType t : {TensorType::Q4_1, TensorType::Q5_1}) {
    for (int64_t cols : {32, 96, 4096}) {
      std::vector<float> x = test::random_floats(cols, rng);
      std::vector<uint8_t> got(packed_act_row_bytes(t, cols));
      quantize_packed_act(t, x.data(), cols, got.data());
      std::vector<uint8_t> q81(size_t(row_bytes(TensorType::Q8_1, cols)));
      ref::quantize_row(TensorType::Q8_1, x.data(), q81.data(), cols);
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* want = q81.data() + b * 36;
        const uint8_t* blk = got.data() + b * 40;
        float d, s_val;
        std::memcpy(&d, blk, 4);
        std::memcpy(&s_val, blk + 4, 4);
        ASSERT_EQ(d, test::get_f16(want)) << cols << " block " << b;
        ASSERT_EQ(s_val, test::get_f16(want + 2)) << cols << " block " << b;
        ASSERT_EQ(std::memcmp(blk + 8, want + 4, 32), 0) << cols << " block " << b;
      }
    }
  }
}

// A batch of activation rows holds each row's own quantization (quantize_packed_act's bytes),
// whatever the split of the rows into calls: in place on x86-64, in panels of 4 and 2 on AArch64
// for the 32-column block types (packed_act_panels.h), the last of an odd count alone.
TEST(Packed, ActivationBatchLayoutHoldsEachRowsQuantization) {
  std::mt19937 rng(97);
  for (TensorType t : kAllPacked) {
    const int64_t cols = block_size_of_type(t) == 256 ? 512 : 96;
    const size_t ab = packed_act_row_bytes(t, cols);
    for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13}) {
      const std::vector<float> x = test::random_floats(int64_t(n) * cols, rng);
      std::vector<uint8_t> batch(ab * size_t(n), 0xcd), row(ab), got(ab);
      for (int i0 = 0; i0 < n; i0 += 3)
        quantize_packed_act_rows(t, x.data(), cols, n, i0, std::min(n, i0 + 3), batch.data());
      for (int i = 0; i < n; ++i) {
        quantize_packed_act(t, x.data() + size_t(i) * size_t(cols), cols, row.data());
        if (detail::act_panels(t)) {
          detail::act_panel_row(batch.data(), ab, n, i, cols / 32, got.data());
        } else {
          std::memcpy(got.data(), batch.data() + size_t(i) * ab, ab);
        }
        ASSERT_EQ(got, row) << test::type_name(t) << " n=" << n << " row " << i;
      }
      if (n % 2 == 1) {  // the last row of an odd batch is in the per-row format in place
        quantize_packed_act(t, x.data() + size_t(n - 1) * size_t(cols), cols, row.data());
        ASSERT_EQ(std::memcmp(batch.data() + size_t(n - 1) * ab, row.data(), ab), 0) << test::type_name(t) << " n=" << n;
      }
    }
  }
}

// The panels' arithmetic (compiled everywhere, used on AArch64): the K rows of a panel fill its
// 40 K bytes per block exactly once and read back unchanged; rows go to panels of 4, then 2, then 1.
TEST(Packed, ActivationPanelsPlaceEveryByteOnce) {
  for (int K : {1, 2, 4}) {
    std::vector<uint8_t> panel(40 * size_t(K) * 3, 0);
    for (int64_t b = 0; b < 3; ++b) {
      for (int j = 0; j < K; ++j) {
        detail::PackedActBlock blk;
        blk.d = float(100 * b + j);
        blk.sum = int32_t(-7 * j - int(b));
        for (int k = 0; k < 32; ++k) blk.q[k] = int8_t(k + 32 * j + int(b));
        detail::act_panel_put(panel.data(), K, j, b, blk);
        const detail::PackedActBlock back = detail::act_panel_get(panel.data(), K, j, b);
        ASSERT_EQ(std::memcmp(&back, &blk, sizeof blk), 0) << K << " " << j << " " << b;
      }
    }
    std::vector<int> hits(panel.size(), 0);
    for (int64_t b = 0; b < 3; ++b) {
      for (int j = 0; j < K; ++j) {
        const size_t base = detail::ActPanel::block(K, b);
        for (int k = 0; k < 4; ++k) ++hits[base + detail::ActPanel::d(j) + size_t(k)];
        for (int k = 0; k < 4; ++k) ++hits[base + detail::ActPanel::sum(K, j) + size_t(k)];
        for (int m = 0; m < 4; ++m) {
          for (int k = 0; k < 8; ++k) ++hits[base + detail::ActPanel::q8(K, j, m) + size_t(k)];
        }
      }
    }
    for (int h : hits) ASSERT_EQ(h, 1) << "K=" << K;
  }
  for (int n = 1; n <= 11; ++n) {
    for (int i = 0; i < n; ++i) {
      const detail::ActPanelOf at = detail::act_panel_of(n, i);
      EXPECT_TRUE(at.i0 <= i && i < at.i0 + at.rows && at.i0 + at.rows <= n) << n << " " << i;
      EXPECT_EQ(at.rows, i < n / 4 * 4 ? 4 : (n % 4 >= 2 && i < n / 4 * 4 + 2) ? 2 : 1) << n << " " << i;
    }
  }
}

TEST(Packed, ReferenceMatchesVecDotOnOriginalRows) { check_variant(&ref::packed_gemm, "ref"); }

TEST(Packed, DispatchedMatchesReference) { check_variant(&packed_gemm, "dispatched"); }

// The x86 kernels exist only in x86-64 builds (on AArch64 packed_gemm is the reference).
#if defined(__x86_64__)
TEST(Packed, Avx512VnniMatchesReference) {
  if (!cpu_features().has_avx512_vnni_set()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_variant(&detail::packed_gemm_avx512, "avx512", kBlocks32);
}

// The F16, Q4_K, Q5_K and Q6_K kernels take no type argument: adapt them to the Gemm signature.
template <void (*Gemm1)(int64_t, int64_t, const void*, int64_t, int64_t, const void*, size_t, int, float*, size_t)>
void typed(TensorType, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act, size_t as,
           int n, float* out, size_t os) {
  Gemm1(rows, cols, packed, g0, g1, act, as, n, out, os);
}

TEST(Packed, F16Avx512MatchesReference) {
  if (!cpu_features().has_avx512_vnni_set()) GTEST_SKIP() << "no AVX-512 on this CPU";
  check_variant(&typed<&detail::packed_gemm_f16_avx512>, "f16-avx512", {TensorType::F16});
  check_variant(&typed<&detail::packed_gemm_bf16_avx512>, "bf16-avx512", {TensorType::BF16});
}

TEST(Packed, Q4KAvx512MatchesReference) {
  if (!cpu_features().has_avx512_vnni_set()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_variant(&typed<&detail::packed_gemm_q4k_avx512>, "q4k-avx512", {TensorType::Q4_K});
}

TEST(Packed, Q5KAvx512MatchesReference) {
  if (!cpu_features().has_avx512_vnni_set()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_variant(&typed<&detail::packed_gemm_q5k_avx512>, "q5k-avx512", {TensorType::Q5_K});
}

TEST(Packed, Q2KAvx512MatchesReference) {
  if (!cpu_features().has_avx512_vnni_set()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_variant(&typed<&detail::packed_gemm_q2k_avx512>, "q2k-avx512", {TensorType::Q2_K});
}

TEST(Packed, Q3KAvx512MatchesReference) {
  if (!cpu_features().has_avx512_vnni_set()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_variant(&typed<&detail::packed_gemm_q3k_avx512>, "q3k-avx512", {TensorType::Q3_K});
}

TEST(Packed, IQ4XSAvx512MatchesReference) {
  if (!cpu_features().has_avx512_vnni_set()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_variant(&typed<&detail::packed_gemm_iq4xs_avx512>, "iq4xs-avx512", {TensorType::IQ4_XS});
}

TEST(Packed, Q6KAvx512MatchesReference) {
  if (!cpu_features().has_avx512_vnni_set()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_variant(&typed<&detail::packed_gemm_q6k_avx512>, "q6k-avx512", {TensorType::Q6_K});
}

TEST(Packed, AmxMatchesReference) {
  if (!cpu_features().has_amx_int8_set()) GTEST_SKIP() << "no AMX-INT8 on this CPU (or not granted)";
  std::vector<TensorType> amx_types;  // the types whose table names the AMX kernel (not MXFP4)
  for (TensorType t : kBlocks32) {
    if (type_traits(t).packed.amx) amx_types.push_back(t);
  }
  check_variant(&detail::packed_gemm_amx, "amx", amx_types);
}

TEST(Packed, AmxQ4KMatchesReference) {
  if (!cpu_features().has_amx_int8_set()) GTEST_SKIP() << "no AMX-INT8 on this CPU (or not granted)";
  check_variant(&detail::packed_gemm_amx_q4k, "amx-q4k", {TensorType::Q4_K, TensorType::Q5_K, TensorType::IQ4_XS});
}

// The types with 256-bit kernels (packed_avx2.cpp), as the table says.
std::vector<TensorType> ymm_types() {
  std::vector<TensorType> types;
  for (TensorType t : kAllPacked) {
    if (detail::packed_avx2_has_kernel(t)) types.push_back(t);
  }
  return types;
}

TEST(Packed, AvxVnniMatchesReference) {
  if (!cpu_features().has_avx_vnni_set()) GTEST_SKIP() << "no AVX-VNNI on this CPU";
  check_variant(&detail::packed_gemm_avxvnni, "avxvnni", ymm_types());
}

// The plain AVX2 kernels (VPMADDUBSW) run on any AVX2 CPU, this one too whatever else it has.
TEST(Packed, Avx2MatchesReference) {
  if (!cpu_features().has_avx2_set()) GTEST_SKIP() << "no AVX2 on this CPU";
  check_variant(&detail::packed_gemm_avx2, "avx2", ymm_types());
}

// The table names a 256-bit kernel exactly for the types packed_avx2.cpp has one for, and the
// first 256-bit types (the most used ones) stay covered.
TEST(Packed, YmmKernelsInTheTable) {
  for (TensorType t : kAllPacked) {
    const PackedTraits& p = type_traits(t).packed;
    EXPECT_EQ(p.avx2 != nullptr, detail::packed_avx2_has_kernel(t)) << test::type_name(t);
    EXPECT_EQ(p.avxvnni != nullptr, detail::packed_avx2_has_kernel(t)) << test::type_name(t);
  }
  for (TensorType t : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    EXPECT_TRUE(detail::packed_avx2_has_kernel(t)) << test::type_name(t);
  }
}
#endif  // __x86_64__

#if defined(__aarch64__)
// The types with AArch64 kernels (packed_neon.cpp), as the table says.
std::vector<TensorType> neon_types() {
  std::vector<TensorType> types;
  for (TensorType t : kAllPacked) {
    if (detail::packed_neon_has_kernel(t)) types.push_back(t);
  }
  return types;
}

// What the dispatch picks for this CPU (and under LOOM_NO_I8MM / LOOM_NO_DOTPROD, tests/quant/CMakeLists.txt).
TEST(Packed, DispatchedNeonTypesMatchReference) { check_variant(&packed_gemm, "dispatched", neon_types()); }

// Plain NEON (SMULL + SADALP) runs on every AArch64 core.
TEST(Packed, NeonMatchesReference) { check_variant(&detail::packed_gemm_neon, "neon", neon_types()); }

TEST(Packed, NeonDotMatchesReference) {
  if (!cpu_features().neon_dotprod) GTEST_SKIP() << "no dotprod on this CPU";
  check_variant(&detail::packed_gemm_neon_dot, "neon-dot", neon_types());
}

TEST(Packed, NeonI8mmMatchesReference) {
  if (!cpu_features().neon_i8mm) GTEST_SKIP() << "no i8mm on this CPU";
  check_variant(&detail::packed_gemm_neon_i8mm, "neon-i8mm", neon_types());
}

// The three copies compute the same integer sums and the same float operations per output: the
// same bits, whichever the CPU picks (and SMMLA's runs of 2 and 4 rows equal SDOT's single rows,
// which check_variant's invariance test covers within each copy).
TEST(Packed, NeonKernelsAgreeBitForBit) {
  std::vector<Gemm> gemms = {&detail::packed_gemm_neon};
  if (cpu_features().neon_dotprod) gemms.push_back(&detail::packed_gemm_neon_dot);
  if (cpu_features().neon_i8mm) gemms.push_back(&detail::packed_gemm_neon_i8mm);
  std::mt19937 rng(4321);
  for (TensorType t : neon_types()) {
    for (int64_t rows : {7, 33}) {
      for (int n : {1, 2, 4, 7, 11}) {
        const int64_t cols = block_size_of_type(t) == 256 ? 512 : 160;
        Problem p = make(t, rows, cols, n, rng);
        const size_t ab = packed_act_row_bytes(t, cols);
        const int64_t groups = (rows + kPackRows - 1) / kPackRows;
        std::vector<float> want(size_t(rows) * size_t(n)), got(want.size());
        gemms[0](t, rows, cols, p.packed.data(), 0, groups, p.act.data(), ab, n, want.data(), size_t(rows));
        for (size_t k = 1; k < gemms.size(); ++k) {
          gemms[k](t, rows, cols, p.packed.data(), 0, groups, p.act.data(), ab, n, got.data(), size_t(rows));
          for (size_t e = 0; e < want.size(); ++e) {
            ASSERT_TRUE(same_bits(want[e], got[e])) << test::type_name(t) << " kernel " << k << " rows=" << rows
                                                    << " n=" << n << " at " << e << ": " << got[e] << " vs " << want[e];
          }
        }
      }
    }
  }
}

// F16 weights by FMLAL (FEAT_FHM) and by FCVTL + FMLA: both are the chain acc = fma(w, x, acc)
// over the columns in order from +0 (the f16 product is exact in f32), so both give the bits of
// this reference, whatever the values; NaN results only need to be NaN (payloads aside).
template <void (*F16Gemm)(int64_t, int64_t, const void*, int64_t, int64_t, const void*, size_t, int, float*, size_t)>
void f16_typed(TensorType, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
               size_t as, int n, float* out, size_t os) {
  F16Gemm(rows, cols, packed, g0, g1, act, as, n, out, os);
}

std::vector<std::pair<Gemm, const char*>> f16_gemms() {
  std::vector<std::pair<Gemm, const char*>> gemms = {{&f16_typed<&detail::packed_gemm_f16_neon_fcvtl>, "fcvtl"},
                                                     {&packed_gemm, "dispatched"},
                                                     {&detail::packed_gemm_neon, "neon"}};
  if (cpu_features().neon_dotprod) gemms.emplace_back(&detail::packed_gemm_neon_dot, "neon-dot");
  if (cpu_features().neon_i8mm) gemms.emplace_back(&detail::packed_gemm_neon_i8mm, "neon-i8mm");
  if (cpu_features().neon_fhm) gemms.emplace_back(&f16_typed<&detail::packed_gemm_f16_neon_fhm>, "fmlal");
  return gemms;
}

// out[i][r] of the fma chain on the GGUF rows (w) and the f32 activation rows (x, f16 values).
std::vector<float> f16_fma_reference(const uint16_t* w, const float* x, int64_t rows, int64_t cols, int n) {
  std::vector<float> out(size_t(rows) * size_t(n));
  for (int i = 0; i < n; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < cols; ++c) {
        acc = std::fma(f16_to_f32(w[size_t(r) * size_t(cols) + size_t(c)]), x[size_t(i) * size_t(cols) + size_t(c)], acc);
      }
      out[size_t(i) * size_t(rows) + size_t(r)] = acc;
    }
  }
  return out;
}

void expect_f16_bits(const std::vector<float>& want, const float* got, int64_t rows, int n, size_t out_stride,
                     const std::string& what) {
  for (int i = 0; i < n; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      const float w = want[size_t(i) * size_t(rows) + size_t(r)], g = got[size_t(i) * out_stride + size_t(r)];
      if (std::isnan(w)) {
        ASSERT_TRUE(std::isnan(g)) << what << " i=" << i << " r=" << r << ": " << g << ", want NaN";
      } else {
        ASSERT_TRUE(same_bits(w, g)) << what << " i=" << i << " r=" << r << ": " << g << " vs " << w;
      }
    }
  }
}

// Random F16 problems (check_variant's sizes, misaligned buffers): every F16 kernel this CPU runs,
// FMLAL's among them where it has FEAT_FHM, gives the fma chain's bits.
TEST(Packed, F16KernelsGiveTheFmaChainBits) {
  std::mt19937 rng(99);
  const auto gemms = f16_gemms();
  for (int64_t rows : {1, 5, 16, 17, 31, 48, 70}) {
    for (int64_t cols : {32, 64, 96, 256, 1024}) {
      for (int n : {1, 2, 3, 4, 5, 8, 13}) {
        if (cols == 1024 && rows > 17) continue;
        Problem p = make(TensorType::F16, rows, cols, n, rng);
        const size_t ab = packed_act_row_bytes(TensorType::F16, cols);
        const std::vector<float> want = f16_fma_reference(reinterpret_cast<const uint16_t*>(p.w.data()),
                                                          reinterpret_cast<const float*>(p.act.data()), rows, cols, n);
        const size_t mis = size_t(rows + n + cols / 32) % 61;
        Misaligned packed(p.packed.size(), mis), act(p.act.size(), (mis * 5) % 64);
        std::memcpy(packed.data(), p.packed.data(), p.packed.size());
        std::memcpy(act.data(), p.act.data(), p.act.size());
        const size_t os = size_t(rows) + 1;
        std::vector<float> out(os * size_t(n));
        for (const auto& [gemm, name] : gemms) {
          gemm(TensorType::F16, rows, cols, packed.data(), 0, (rows + kPackRows - 1) / kPackRows, act.data(), ab, n,
               out.data(), os);
          expect_f16_bits(want, out.data(), rows, n, os,
                          std::string(name) + " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                              " n=" + std::to_string(n));
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
  if (!cpu_features().neon_fhm) std::printf("(no FEAT_FHM on this CPU: the FMLAL kernel was not run)\n");
}

// FMLAL by name against FCVTL + FMLA with check_variant's own checks (tolerance to the reference,
// batch invariance, untouched padding).
TEST(Packed, F16FmlalMatchesReference) {
  if (!cpu_features().neon_fhm) GTEST_SKIP() << "no FEAT_FHM (FMLAL) on this CPU";
  check_variant(&f16_typed<&detail::packed_gemm_f16_neon_fhm>, "f16-fmlal", {TensorType::F16});
  check_variant(&f16_typed<&detail::packed_gemm_f16_neon_fcvtl>, "f16-fcvtl", {TensorType::F16});
}

// Weights and activations at the edges of f16: subnormals (the smallest, 2^-24, and the largest),
// ±65504, ±0, ±inf and NaN, among ordinary values: the same bits as the fma chain in every kernel
// (f16 subnormals are operands like the others with the default FPCR; inf · 0 and inf - inf NaN).
TEST(Packed, F16KernelsAtTheEdgesOfF16) {
  const uint16_t kFinite[] = {0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x0000,
                              0x8000, 0x3c00, 0xbc00, 0x3555, 0x1234, 0x0200, 0x4000, 0xc900};
  const uint16_t kSpecial[] = {0x7c00, 0xfc00, 0x7e00};
  std::mt19937 rng(5);
  for (bool special : {false, true}) {
    for (int n : {1, 2, 4, 3}) {
      const int64_t rows = 33, cols = 96;
      std::vector<uint16_t> w(size_t(rows) * size_t(cols));
      std::vector<float> x(size_t(n) * size_t(cols));
      for (size_t k = 0; k < w.size(); ++k) {
        w[k] = rng() % 3 == 0 ? uint16_t(rng() & 0x7bff) : kFinite[rng() % std::size(kFinite)];
        if (special && rng() % 97 == 0) w[k] = kSpecial[rng() % std::size(kSpecial)];
      }
      for (size_t k = 0; k < x.size(); ++k) {
        uint16_t h = rng() % 2 == 0 ? kFinite[rng() % std::size(kFinite)] : uint16_t(rng() & 0xfbff);
        if (special && rng() % 101 == 0) h = kSpecial[rng() % std::size(kSpecial)];
        x[k] = f16_to_f32(h);
      }
      // Row 0 all subnormal products, row 1 at the largest magnitudes (no overflow in f32).
      for (int64_t c = 0; c < cols; ++c) {
        w[size_t(c)] = c % 2 ? 0x0001 : 0x83ff;
        w[size_t(cols + c)] = c % 2 ? 0x7bff : 0xfbff;
        x[size_t(c)] = f16_to_f32(c % 3 ? 0x03ff : 0x8001);
      }
      std::vector<uint8_t> packed(packed_size(TensorType::F16, rows, cols));
      pack_weights(TensorType::F16, w.data(), size_t(cols) * 2, rows, cols, packed.data(), 0,
                   (rows + kPackRows - 1) / kPackRows);
      const std::vector<float> want = f16_fma_reference(w.data(), x.data(), rows, cols, n);
      std::vector<float> out(size_t(rows) * size_t(n));
      for (const auto& [gemm, name] : f16_gemms()) {
        gemm(TensorType::F16, rows, cols, packed.data(), 0, (rows + kPackRows - 1) / kPackRows, x.data(), size_t(cols) * 4,
             n, out.data(), size_t(rows));
        expect_f16_bits(want, out.data(), rows, n, size_t(rows),
                        std::string(name) + (special ? " inf/NaN" : " finite") + " n=" + std::to_string(n));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// The table names the AArch64 kernels exactly for the types packed_neon.cpp has, and the most used
// ones stay covered.
TEST(Packed, NeonKernelsInTheTable) {
  for (TensorType t : kAllPacked) {
    const PackedTraits& p = type_traits(t).packed;
    const bool has = detail::packed_neon_has_kernel(t);
    EXPECT_EQ(p.neon != nullptr, has) << test::type_name(t);
    EXPECT_EQ(p.neon_dot != nullptr, has) << test::type_name(t);
    EXPECT_EQ(p.neon_i8mm != nullptr, has) << test::type_name(t);
    EXPECT_EQ(packed_kernels_available(t), has && cpu_features().simd) << test::type_name(t);
  }
  for (TensorType t : {TensorType::Q4_0, TensorType::Q8_0}) EXPECT_TRUE(detail::packed_neon_has_kernel(t));
}
#endif  // __aarch64__

// Extreme levels: every Q8_0 weight byte -127..127 and -128 (the GGUF format allows it), every
// other type's quant and scale bytes all ones (the highest level, scale and min everywhere), with
// activations at ±127, must not overflow or saturate anywhere.
void check_extreme_levels(Gemm gemm, const char* what, const std::vector<TensorType>& types) {
  std::mt19937 rng(7);
  const int64_t rows = 16, cols = 256;
  for (TensorType t : types) {
    if (t == TensorType::F16 || t == TensorType::BF16) continue;
    Problem p = make(t, rows, cols, 11, rng);  // runs of 8, 2 and 1 rows
    const size_t bb = size_t(test::block_bytes(t));
    if (t == TensorType::Q4_0 || t == TensorType::Q8_0) {
      for (size_t off = 0; off < p.w.size(); off += bb) {
        for (size_t k = 2; k < bb; ++k) p.w[off + k] = (k & 1) ? 0x80 : (t == TensorType::Q4_0 ? 0xff : 0x7f);
      }
    } else {
      // All ones but the f16 scales (d, and m / dmin), which stay finite.
      std::vector<int> keep = test::kq_scale_offsets(t);
      if (keep.empty()) keep = test::has_min(t) ? std::vector<int>{0, 2} : std::vector<int>{0};
      for (size_t off = 0; off < p.w.size(); off += bb) {
        for (size_t k = 0; k < bb; ++k) {
          bool scale = false;
          for (int o : keep) scale = scale || k == size_t(o) || k == size_t(o) + 1;
          if (!scale) p.w[off + k] = 0xff;
        }
      }
    }
    // Even rows mixed signs, odd rows all +1 (every product of a sum at its largest: the int16
    // sums of the AVX2 kernels at their limit), row 7 (in the run of 8) all -1.
    for (size_t k = 0; k < p.x.size(); ++k) {
      const size_t row = k / size_t(cols);
      p.x[k] = row == 7 ? -1.0f : row % 2 == 0 && k % 3 == 0 ? -1.0f : 1.0f;
    }
    pack_weights(t, p.w.data(), size_t(row_bytes(t, cols)), rows, cols, p.packed.data(), 0, 1);
    const TensorType dt = vec_dot_type(t);
    const size_t qb = size_t(row_bytes(dt, cols)), ab = packed_act_row_bytes(t, cols);
    p.magnitude.clear();
    quantize_packed_act_rows(p.t, p.x.data(), cols, p.n, 0, p.n, p.act.data());
    for (int i = 0; i < p.n; ++i) {
      ref::quantize_row(dt, p.x.data() + size_t(i) * size_t(cols), p.act_q8.data() + size_t(i) * qb, cols);
      for (int64_t r = 0; r < rows; ++r) {
        p.magnitude.push_back(test::dot_magnitude(t, cols, p.w.data() + size_t(r) * size_t(row_bytes(t, cols)),
                                                  p.act_q8.data() + size_t(i) * qb));
      }
    }
    std::vector<float> out(size_t(rows) * size_t(p.n));
    gemm(t, rows, cols, p.packed.data(), 0, 1, p.act.data(), ab, p.n, out.data(), size_t(rows));
    expect_close(p, out.data(), size_t(rows), what);
  }
}

TEST(Packed, ExtremeLevels) { check_extreme_levels(&packed_gemm, "extreme", kAllPacked); }

#if defined(__x86_64__)
// The 256-bit kernels at the levels where VPMADDUBSW's int16 sums would saturate first.
TEST(Packed, ExtremeLevelsYmm) {
  if (cpu_features().has_avx2_set()) check_extreme_levels(&detail::packed_gemm_avx2, "extreme avx2", ymm_types());
  if (cpu_features().has_avx_vnni_set()) {
    check_extreme_levels(&detail::packed_gemm_avxvnni, "extreme avxvnni", ymm_types());
  }
}
#endif

#if defined(__aarch64__)
TEST(Packed, ExtremeLevelsNeon) {
  check_extreme_levels(&detail::packed_gemm_neon, "extreme neon", neon_types());
  if (cpu_features().neon_dotprod) check_extreme_levels(&detail::packed_gemm_neon_dot, "extreme neon-dot", neon_types());
  if (cpu_features().neon_i8mm) check_extreme_levels(&detail::packed_gemm_neon_i8mm, "extreme neon-i8mm", neon_types());
}
#endif

// MXFP4's tile keeps each E8M0 scale as an f16: rows whose scales f16 cannot hold exactly stay
// unpacked (can_pack_data says so), except blocks of zeros, whose scale does not matter; a row of
// such blocks packs and computes like the rest.
TEST(Packed, Mxfp4ScalesOutsideF16AreRefused) {
  std::mt19937 rng(11);
  const int64_t cols = 128;
  const size_t rb = size_t(row_bytes(TensorType::MXFP4, cols));
  std::vector<uint8_t> rows = test::random_row(TensorType::MXFP4, cols, rng);
  EXPECT_TRUE(can_pack_data(TensorType::MXFP4, rows.data(), rb, 1, cols));
  for (uint8_t e : {uint8_t(104), uint8_t(143)}) {
    rows[17] = e;
    EXPECT_TRUE(can_pack_data(TensorType::MXFP4, rows.data(), rb, 1, cols)) << int(e);
  }
  for (uint8_t e : {uint8_t(0), uint8_t(103), uint8_t(144), uint8_t(255)}) {
    std::vector<uint8_t> bad = rows;
    bad[17] = e;
    bad[18] = 0x31;  // a non-zero level in that block
    EXPECT_FALSE(can_pack_data(TensorType::MXFP4, bad.data(), rb, 1, cols)) << int(e);
    // Levels 0 and 8 (+0 and -0) only: any scale.
    for (int k = 0; k < 16; ++k) bad[18 + k] = uint8_t(k & 1 ? 0x80 : 0x08);
    EXPECT_TRUE(can_pack_data(TensorType::MXFP4, bad.data(), rb, 1, cols)) << int(e);
  }
  EXPECT_FALSE(can_pack_data(TensorType::MXFP4, rows.data(), rb, 1, 48));  // not whole blocks of 32
  for (int e = 104; e <= 143; ++e) {                                       // the tile's f16 is the scale, exactly
    const uint8_t blk[17] = {uint8_t(e), 0x12};
    EXPECT_EQ(detail::mxfp4_tile_scale(blk), int32_t(f32_to_f16(detail::e8m0_half(uint8_t(e))))) << e;
    EXPECT_EQ(f16_to_f32(uint16_t(detail::mxfp4_tile_scale(blk))), detail::e8m0_half(uint8_t(e))) << e;
  }
  EXPECT_FALSE(can_pack_data(TensorType::Q8_K, rows.data(), rb, 1, cols));
  // A zero block with exponent 255 among ordinary ones: packed and computed as the reference.
  rows[17] = 255;
  for (int k = 0; k < 16; ++k) rows[18 + k] = 0x88;
  ASSERT_TRUE(can_pack_data(TensorType::MXFP4, rows.data(), rb, 1, cols));
  std::vector<uint8_t> packed(packed_size(TensorType::MXFP4, 1, cols));
  pack_weights(TensorType::MXFP4, rows.data(), rb, 1, cols, packed.data(), 0, 1);
  const std::vector<float> x = test::random_floats(cols, rng);
  std::vector<uint8_t> act(packed_act_row_bytes(TensorType::MXFP4, cols)), q8(size_t(row_bytes(TensorType::Q8_0, cols)));
  quantize_packed_act(TensorType::MXFP4, x.data(), cols, act.data());
  ref::quantize_row(TensorType::Q8_0, x.data(), q8.data(), cols);
  float got = 0.0f;
  packed_gemm(TensorType::MXFP4, 1, cols, packed.data(), 0, 1, act.data(), act.size(), 1, &got, 1);
  const float want = ref::vec_dot(TensorType::MXFP4, cols, rows.data(), q8.data());
  EXPECT_NEAR(got, want, 1e-5 * test::dot_magnitude(TensorType::MXFP4, cols, rows.data(), q8.data()) + 1e-6);
}

// MXFP4 blocks at the extreme scales that still pack (E8M0 104 and 143: the tile's f16 d 2^-24, a
// subnormal, and 2^15), at their extreme levels (nibbles 7 and 15: ±12 in the doubled table) and
// mixed, among blocks of zeros whose exponent f16 cannot hold (packed with d 0; not 255, which E8M0
// reads as NaN, and the row dot's 0 · NaN is NaN): every kernel this CPU has within the rounding of
// the reference over runs of 1, 2, 4 and 8 activation rows, and on AArch64 the three copies (and
// the dispatched one) bit-identical.
TEST(Packed, Mxfp4ExtremeScales) {
  const TensorType t = TensorType::MXFP4;
  std::vector<std::pair<Gemm, const char*>> gemms = {{&ref::packed_gemm, "ref"}, {&packed_gemm, "dispatched"}};
#if defined(__aarch64__)
  gemms.emplace_back(&detail::packed_gemm_neon, "neon");
  if (cpu_features().neon_dotprod) gemms.emplace_back(&detail::packed_gemm_neon_dot, "neon-dot");
  if (cpu_features().neon_i8mm) gemms.emplace_back(&detail::packed_gemm_neon_i8mm, "neon-i8mm");
#endif
  std::mt19937 rng(17);
  const int64_t rows = 35, cols = 320;
  const size_t rb = size_t(row_bytes(t, cols)), qb = size_t(row_bytes(TensorType::Q8_0, cols));
  for (int n : {1, 2, 4, 8, 11}) {
    Problem p = make(t, rows, cols, n, rng);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / 32; ++b) {
        uint8_t* blk = p.w.data() + size_t(r) * rb + 17 * size_t(b);
        const int kind = int(r + 3 * b) % 5;
        blk[0] = kind == 4 ? uint8_t(r % 2 ? 200 : 0) : (r + b) % 2 ? 143 : 104;
        for (int k = 1; k < 17; ++k) {
          if (kind == 0) blk[k] = 0x77;  // +12 everywhere
          if (kind == 1) blk[k] = 0xff;  // -12 everywhere
          if (kind == 2) blk[k] = k % 3 ? 0x7f : 0xf7;
          if (kind == 4) blk[k] = uint8_t(k % 2 ? 0x08 : 0x80);  // +0 and -0
        }
      }
    }
    if (n == 1) std::fill(p.x.begin(), p.x.end(), 1.0f);  // every product at its largest
    ASSERT_TRUE(can_pack_data(t, p.w.data(), rb, rows, cols));
    pack_weights(t, p.w.data(), rb, rows, cols, p.packed.data(), 0, (rows + kPackRows - 1) / kPackRows);
    quantize_packed_act_rows(t, p.x.data(), cols, n, 0, n, p.act.data());
    p.magnitude.clear();
    for (int i = 0; i < n; ++i) {
      ref::quantize_row(TensorType::Q8_0, p.x.data() + size_t(i) * size_t(cols), p.act_q8.data() + size_t(i) * qb, cols);
      for (int64_t r = 0; r < rows; ++r) {
        p.magnitude.push_back(test::dot_magnitude(t, cols, p.w.data() + size_t(r) * rb, p.act_q8.data() + size_t(i) * qb));
      }
    }
    const int64_t groups = (rows + kPackRows - 1) / kPackRows;
    const size_t ab = packed_act_row_bytes(t, cols);
    std::vector<float> first;
    for (const auto& [gemm, what] : gemms) {
      std::vector<float> out(size_t(rows) * size_t(n), 777.0f);
      gemm(t, rows, cols, p.packed.data(), 0, groups, p.act.data(), ab, n, out.data(), size_t(rows));
      expect_close(p, out.data(), size_t(rows), what);
      if (::testing::Test::HasFatalFailure()) return;
#if defined(__aarch64__)
      if (std::string(what) == "ref") continue;  // the dispatched kernel is one of the copies
      if (first.empty()) first = out;
      for (size_t e = 0; e < out.size(); ++e) {
        ASSERT_TRUE(same_bits(out[e], first[e]))
            << what << " n=" << n << " at " << e << ": " << out[e] << " vs " << first[e];
      }
#endif
    }
  }
}

// kAllPacked names every packable type of the table, so a new layout is tested.
TEST(Packed, TestListCoversEveryPackableType) {
  std::vector<TensorType> listed = kAllPacked, packable;
  for (const TypeTraits& tt : all_type_traits()) {
    if (tt.packable()) packable.push_back(tt.type);
  }
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, packable);
}

}  // namespace
}  // namespace loom::quant
