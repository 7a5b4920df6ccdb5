// The IQ1/IQ2/IQ3 weight formats (src/quant/iq_*): the grids and sign tables against their
// construction and against ggml's own tables, the scalar references against real ggml
// (tests/data/quant-ref/iq*.bin, made by tools/dev/llama-ref/iq_ref_dump.cpp), extreme values, and
// the SIMD kernels against the references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/half.h"
#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "quant/iq_kernels.h"
#include "quant/iq_ref.h"
#include "quant/quant.h"

namespace loom::quant {
namespace {

using namespace iq;

constexpr int kQ8KBytes = 292;

uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<const uint8_t*>(p)[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

using Dequant = void (*)(const void*, float*, int64_t);
using Dot = float (*)(int64_t, const void*, const void*);

struct IqType {
  const char* name;
  int ggml_id;
  int bytes;
  Dequant dequant;
  Dot dot;
  Dot avx2;    // nullptr: no kernel
  Dot avx512;  // nullptr: no kernel
  Dequant avx2_dequant;
};

// The x86 kernels exist only in x86-64 builds (elsewhere their entries are null: skipped).
#if defined(__x86_64__)
#define LOOM_X86_KERNEL(f) f
#else
#define LOOM_X86_KERNEL(f) nullptr
#endif

const IqType kIqTypes[] = {
    {"iq2_xxs", 16, 66, ref::dequantize_row_iq2_xxs, ref::vec_dot_iq2_xxs_q8_k, LOOM_X86_KERNEL(avx2::vec_dot_iq2_xxs_q8_k),
     LOOM_X86_KERNEL(avx512::vec_dot_iq2_xxs_q8_k), LOOM_X86_KERNEL(avx2::dequantize_row_iq2_xxs)},
    {"iq2_xs", 17, 74, ref::dequantize_row_iq2_xs, ref::vec_dot_iq2_xs_q8_k, LOOM_X86_KERNEL(avx2::vec_dot_iq2_xs_q8_k),
     LOOM_X86_KERNEL(avx512::vec_dot_iq2_xs_q8_k), LOOM_X86_KERNEL(avx2::dequantize_row_iq2_xs)},
    {"iq2_s", 22, 82, ref::dequantize_row_iq2_s, ref::vec_dot_iq2_s_q8_k, LOOM_X86_KERNEL(avx2::vec_dot_iq2_s_q8_k),
     LOOM_X86_KERNEL(avx512::vec_dot_iq2_s_q8_k), LOOM_X86_KERNEL(avx2::dequantize_row_iq2_s)},
    {"iq3_xxs", 18, 98, ref::dequantize_row_iq3_xxs, ref::vec_dot_iq3_xxs_q8_k, LOOM_X86_KERNEL(avx2::vec_dot_iq3_xxs_q8_k),
     LOOM_X86_KERNEL(avx512::vec_dot_iq3_xxs_q8_k), LOOM_X86_KERNEL(avx2::dequantize_row_iq3_xxs)},
    {"iq3_s", 21, 110, ref::dequantize_row_iq3_s, ref::vec_dot_iq3_s_q8_k, LOOM_X86_KERNEL(avx2::vec_dot_iq3_s_q8_k),
     LOOM_X86_KERNEL(avx512::vec_dot_iq3_s_q8_k), LOOM_X86_KERNEL(avx2::dequantize_row_iq3_s)},
    {"iq1_s", 19, 50, ref::dequantize_row_iq1_s, ref::vec_dot_iq1_s_q8_k, LOOM_X86_KERNEL(avx2::vec_dot_iq1_s_q8_k),
     LOOM_X86_KERNEL(avx512::vec_dot_iq1_s_q8_k), LOOM_X86_KERNEL(avx2::dequantize_row_iq1_s)},
    {"iq1_m", 29, 56, ref::dequantize_row_iq1_m, ref::vec_dot_iq1_m_q8_k, LOOM_X86_KERNEL(avx2::vec_dot_iq1_m_q8_k),
     LOOM_X86_KERNEL(avx512::vec_dot_iq1_m_q8_k), LOOM_X86_KERNEL(avx2::dequantize_row_iq1_m)},
};

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
std::string data_path(const std::string& name) { return std::string(LOOM_SOURCE_DIR) + "/tests/data/quant-ref/" + name; }

// ---- grids ----------------------------------------------------------------------------------

uint8_t byte_of(uint64_t v, int j) { return uint8_t(v >> (8 * j)); }

// Entries strictly ascending when compared element by element from the last element down, with
// the elements ordered as `rank` says (for IQ1's signed levels -1 < 0 < 1).
// even_parity: the sum of the entries' level positions is even (the IQ2 grids and IQ3_XXS's hold
// lattice points of even parity).
template <class T, class Rank>
void expect_grid(const char* name, const T* grid, int size, int width, Rank rank, const std::vector<int>& levels,
                 bool even_parity) {
  for (int k = 0; k < size; ++k) {
    int level_sum = 0;
    for (int j = 0; j < width; ++j) {
      const int b = byte_of(grid[k], j);
      int pos = -1;
      for (size_t i = 0; i < levels.size(); ++i) {
        if (levels[i] == b) pos = int(i);
      }
      ASSERT_GE(pos, 0) << name << "[" << k << "] byte " << j << " = " << b;
      level_sum += pos;
    }
    if (k + 1 < size) {
      bool less = false;
      for (int j = width - 1; j >= 0; --j) {
        const int a = rank(byte_of(grid[k], j)), b = rank(byte_of(grid[k + 1], j));
        if (a != b) {
          less = a < b;
          break;
        }
      }
      ASSERT_TRUE(less) << name << "[" << k << "] is not below entry " << k + 1;
    }
    if (even_parity) {
      ASSERT_EQ(level_sum % 2, 0) << name << "[" << k << "]";
    }
  }
}

TEST(IqGrids, EveryEntryFollowsTheConstruction) {
  const auto id = [](uint8_t b) { return int(b); };
  const auto signed_rank = [](uint8_t b) { return int(int8_t(b)); };
  const std::vector<int> iq2 = {0x08, 0x19, 0x2b};
  expect_grid("iq2xxs", kIq2xxsGrid, 256, 8, id, iq2, true);
  expect_grid("iq2xs", kIq2xsGrid, 512, 8, id, iq2, true);
  expect_grid("iq2s", kIq2sGrid, 1024, 8, id, iq2, true);
  expect_grid("iq3xxs", kIq3xxsGrid, 256, 4, id, {4, 12, 20, 28, 36, 44, 52, 62}, true);
  expect_grid("iq3s", kIq3sGrid, 512, 4, id, {1, 3, 5, 7, 9, 11, 13, 15}, false);
  expect_grid("iq1s", kIq1sGrid, 2048, 8, signed_rank, {0xff, 0x00, 0x01}, false);
  // The first entries are the lattice's smallest points (all lowest level).
  EXPECT_EQ(kIq2xxsGrid[0], 0x0808080808080808ull);
  EXPECT_EQ(kIq1sGrid[0], 0xffffffffffffffffull);
  EXPECT_EQ(kIq3sGrid[0], 0x01010101u);
  for (int i = 0; i < 128; ++i) {
    const uint8_t s = kSignsIq2xs.v[i];
    EXPECT_EQ(s & 127, i);
    EXPECT_EQ(__builtin_popcount(s) % 2, 0) << i;  // an even number of negated elements
  }
  for (int j = 0; j < 8; ++j) EXPECT_EQ(kMaskIq2xs[j], 1 << j);
  EXPECT_EQ(kIq1sDelta, 0.125f);
  EXPECT_EQ(kIq1mDelta, 0.125f);
}

TEST(IqGrids, SameBytesAsGgml) {
  const std::vector<uint8_t> f = read_file(data_path("iq_grids.bin"));
  ASSERT_EQ(f.size(), 4u + 8 * 8) << data_path("iq_grids.bin");
  ASSERT_EQ(std::memcmp(f.data(), "LQIG", 4), 0);
  uint64_t h[8];
  std::memcpy(h, f.data() + 4, sizeof h);
  EXPECT_EQ(fnv1a(kIq2xxsGrid, sizeof kIq2xxsGrid), h[0]);
  EXPECT_EQ(fnv1a(kIq2xsGrid, sizeof kIq2xsGrid), h[1]);
  EXPECT_EQ(fnv1a(kIq2sGrid, sizeof kIq2sGrid), h[2]);
  EXPECT_EQ(fnv1a(kIq3xxsGrid, sizeof kIq3xxsGrid), h[3]);
  EXPECT_EQ(fnv1a(kIq3sGrid, sizeof kIq3sGrid), h[4]);
  EXPECT_EQ(fnv1a(kIq1sGrid, sizeof kIq1sGrid), h[5]);
  EXPECT_EQ(fnv1a(kSignsIq2xs.v, sizeof kSignsIq2xs.v), h[6]);
  EXPECT_EQ(fnv1a(kMaskIq2xs, sizeof kMaskIq2xs), h[7]);
}

// ---- references against ggml ------------------------------------------------------------------

struct RefData {
  int nb = 0, bytes = 0, n_act = 0, n_row = 0;
  std::vector<uint8_t> blocks, acts;
  std::vector<uint64_t> hashes;
  std::vector<float> first_block;
  std::vector<float> dots;  // {simd, generic} per block
  float row_simd = 0, row_generic = 0;

  const uint8_t* block(int i) const { return blocks.data() + size_t(i) * bytes; }
  const uint8_t* act(int i) const { return acts.data() + size_t(i % n_act) * kQ8KBytes; }
};

bool load_ref(const IqType& t, RefData& d) {
  const std::vector<uint8_t> f = read_file(data_path(std::string(t.name) + ".bin"));
  if (f.size() < 28 || std::memcmp(f.data(), "LQIQ", 4) != 0) return false;
  uint32_t h[6];
  std::memcpy(h, f.data() + 4, sizeof h);
  if (h[0] != 1 || int(h[1]) != t.ggml_id || int(h[3]) != t.bytes) return false;
  d.nb = int(h[2]);
  d.bytes = int(h[3]);
  d.n_act = int(h[4]);
  d.n_row = int(h[5]);
  size_t pos = 28;
  const auto take = [&](void* dst, size_t n) {
    if (pos + n > f.size()) return false;
    std::memcpy(dst, f.data() + pos, n);
    pos += n;
    return true;
  };
  d.blocks.resize(size_t(d.nb) * d.bytes);
  d.acts.resize(size_t(d.n_act) * kQ8KBytes);
  d.hashes.resize(size_t(d.nb));
  d.first_block.resize(256);
  d.dots.resize(size_t(d.nb) * 2);
  return take(d.blocks.data(), d.blocks.size()) && take(d.acts.data(), d.acts.size()) &&
         take(d.hashes.data(), d.hashes.size() * 8) && take(d.first_block.data(), 256 * 4) &&
         take(d.dots.data(), d.dots.size() * 4) && take(&d.row_simd, 4) && take(&d.row_generic, 4) && pos == f.size();
}

class IqRef : public ::testing::TestWithParam<IqType> {};

double double_dot(const IqType& t, int64_t nb, const uint8_t* w, const uint8_t* a, double* mag);

TEST_P(IqRef, DequantizeIsBitExactWithGgml) {
  const IqType& t = GetParam();
  RefData d;
  ASSERT_TRUE(load_ref(t, d)) << data_path(std::string(t.name) + ".bin");
  std::vector<float> y(256);
  t.dequant(d.block(0), y.data(), 256);
  for (int e = 0; e < 256; ++e) {
    ASSERT_EQ(std::memcmp(&y[e], &d.first_block[e], 4), 0)
        << t.name << " element " << e << ": " << y[e] << " vs ggml " << d.first_block[e];
  }
  for (int i = 0; i < d.nb; ++i) {
    t.dequant(d.block(i), y.data(), 256);
    EXPECT_EQ(fnv1a(y.data(), 256 * 4), d.hashes[i]) << t.name << " block " << i;
  }
  // The whole row at once, from a misaligned address, to a misaligned destination.
  std::vector<uint8_t> src(d.blocks.size() + 3), dst(size_t(d.nb) * 1024 + 5);
  std::memcpy(src.data() + 3, d.blocks.data(), d.blocks.size());
  t.dequant(src.data() + 3, reinterpret_cast<float*>(dst.data() + 5), int64_t(d.nb) * 256);
  for (int i = 0; i < d.nb; ++i) {
    EXPECT_EQ(fnv1a(dst.data() + 5 + size_t(i) * 1024, 1024), d.hashes[i]) << t.name << " row block " << i;
  }
}

// Per block: one float product (d_w * d_a) * isum (* the row factor), the same operations as
// ggml's generic dot, so the reference gives its bits exactly. ggml's SIMD kernels sum partial
// results in float (per sub-block or per lane), so there the bound is float rounding of the
// terms: 1e-5 of sum_e |w_e a_e| (a block's dot can cancel to far below that sum: IQ3_S and
// IQ1_S blocks differ by up to 2.5e-5 of their result). Whole rows: 1e-6 of the blocks' sum of
// magnitudes.
TEST_P(IqRef, VecDotMatchesGgml) {
  const IqType& t = GetParam();
  RefData d;
  ASSERT_TRUE(load_ref(t, d));
  double mag = 0.0;
  std::vector<uint8_t> arow(size_t(d.nb) * kQ8KBytes);
  for (int i = 0; i < d.nb; ++i) {
    const float r = t.dot(256, d.block(i), d.act(i));
    const float simd = d.dots[2 * i], generic = d.dots[2 * i + 1];
    EXPECT_EQ(r, generic) << t.name << " block " << i;
    double bmag = 0.0;
    double_dot(t, 1, d.block(i), d.act(i), &bmag);
    EXPECT_NEAR(r, simd, 1e-5 * bmag) << t.name << " block " << i;
    std::memcpy(arow.data() + size_t(i) * kQ8KBytes, d.act(i), kQ8KBytes);
    if (i < d.n_row) mag += bmag;
  }
  const float row = t.dot(256 * int64_t(d.n_row), d.blocks.data(), arow.data());
  EXPECT_NEAR(row, d.row_generic, 1e-6 * mag) << t.name;
  EXPECT_NEAR(row, d.row_simd, 1e-6 * mag) << t.name;
}

INSTANTIATE_TEST_SUITE_P(Types, IqRef, ::testing::ValuesIn(kIqTypes),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- extreme values -------------------------------------------------------------------------

// Sets the f16 block scale (IQ1_M: the top nibbles of its 4 scale words).
void set_d(const IqType& t, uint8_t* b, uint16_t d) {
  if (std::string(t.name) == "iq1_m") {
    for (int k = 0; k < 4; ++k) b[49 + 2 * k] = uint8_t((b[49 + 2 * k] & 0x0f) | ((d >> (4 * k)) & 0xf) << 4);
  } else {
    std::memcpy(b, &d, 2);
  }
}

// Q8_K activations: d and 256 levels (bsums computed).
std::vector<uint8_t> q8k_block(float d, const int8_t* qs) {
  std::vector<uint8_t> b(kQ8KBytes);
  std::memcpy(b.data(), &d, 4);
  std::memcpy(b.data() + 4, qs, 256);
  for (int k = 0; k < 16; ++k) {
    int16_t s = 0;
    for (int j = 0; j < 16; ++j) s = int16_t(s + qs[16 * k + j]);
    std::memcpy(b.data() + 260 + 2 * k, &s, 2);
  }
  return b;
}

// sum_e w_e a_e in double from the dequantized weights and activations.
double double_dot(const IqType& t, int64_t nb, const uint8_t* w, const uint8_t* a, double* mag) {
  std::vector<float> wf(size_t(nb) * 256);
  t.dequant(w, wf.data(), nb * 256);
  double s = 0.0, m = 0.0;
  for (int64_t i = 0; i < nb; ++i) {
    float da;
    std::memcpy(&da, a + i * kQ8KBytes, 4);
    for (int e = 0; e < 256; ++e) {
      const double v = double(wf[size_t(i * 256 + e)]) * da * int8_t(a[i * kQ8KBytes + 4 + e]);
      s += v;
      m += std::fabs(v);
    }
  }
  *mag = m;
  return s;
}

// Every bit set (largest scales, the last grid entries, all signs, negative deltas) with
// d = +-65504, against activations of +-127 with d = 1 (and a block of -128, which the Q8_K
// quantizer never writes for finite inputs but the references take): the integer sums stay far
// inside int32 and the result is the exact dot to float rounding.
TEST_P(IqRef, ExtremeBlocksDoNotOverflow) {
  const IqType& t = GetParam();
  constexpr int kNb = 4;
  std::vector<uint8_t> w(size_t(kNb) * t.bytes, 0xff);
  for (int i = 0; i < kNb; ++i) {
    uint8_t* b = w.data() + size_t(i) * t.bytes;
    set_d(t, b, i % 2 ? 0xfbff : 0x7bff);  // -65504, 65504
  }
  std::vector<uint8_t> a;
  for (int i = 0; i < kNb; ++i) {
    int8_t qs[256];
    for (int e = 0; e < 256; ++e) qs[e] = int8_t(i == 3 ? -128 : (e * 7 + i) % 3 ? 127 : -127);
    const auto blk = q8k_block(1.0f, qs);
    a.insert(a.end(), blk.begin(), blk.end());
  }
  double mag = 0.0;
  const double want = double_dot(t, kNb, w.data(), a.data(), &mag);
  const float got = t.dot(256 * kNb, w.data(), a.data());
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, want, 1e-6 * mag) << t.name;
  // Same magnitudes with the Q8_K quantizer's own output: activations from floats.
  std::vector<float> x(256 * kNb);
  for (size_t e = 0; e < x.size(); ++e) x[e] = e % 5 ? 3.0e4f : -3.0e4f;
  std::vector<uint8_t> aq(size_t(kNb) * kQ8KBytes);
  quantize_row(TensorType::Q8_K, x.data(), aq.data(), 256 * kNb);
  const double want2 = double_dot(t, kNb, w.data(), aq.data(), &mag);
  EXPECT_NEAR(t.dot(256 * kNb, w.data(), aq.data()), want2, 1e-6 * mag) << t.name;
}

// ---- SIMD kernels against the references -------------------------------------------------------

bool has_isa(int isa) {
  const CpuFeatures& f = cpu_features();
  return isa == 0 ? f.has_avx2_set() : f.has_avx512_vnni_set();
}
const char* isa_name(int isa) { return isa == 0 ? "AVX2" : "AVX-512"; }
Dot kernel(const IqType& t, int isa) { return isa == 0 ? t.avx2 : t.avx512; }

// Random blocks (every bit pattern) with finite f16 scales of random sign, magnitude 2^-14..2^4;
// for IQ1_M the scale lives in the top nibbles of its 4 scale words.
std::vector<uint8_t> random_blocks(const IqType& t, int nb, std::mt19937& rng) {
  std::vector<uint8_t> w(size_t(nb) * t.bytes);
  for (auto& b : w) b = uint8_t(rng());
  for (int i = 0; i < nb; ++i) {
    uint8_t* b = w.data() + size_t(i) * t.bytes;
    set_d(t, b, uint16_t((rng() & 1) << 15 | (1 + rng() % 19) << 10 | (rng() & 0x3ff)));
  }
  return w;
}

// Q8_K activations from random floats (the quantizer's output: levels within [-127, 127]).
std::vector<uint8_t> random_acts(int nb, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(nb) * 256);
  for (auto& v : x) v = nd(rng);
  std::vector<uint8_t> a(size_t(nb) * kQ8KBytes);
  quantize_row(TensorType::Q8_K, x.data(), a.data(), int64_t(nb) * 256);
  return a;
}

class IqSimd : public ::testing::TestWithParam<std::tuple<IqType, int>> {};

// Bit-identical with the reference over 1..64 blocks, weights and activations at every
// misalignment 0..7, random blocks, the ggml conformance blocks and extreme blocks.
TEST_P(IqSimd, VecDotEqualsReference) {
  const IqType& t = std::get<0>(GetParam());
  const int isa = std::get<1>(GetParam());
  if (!has_isa(isa)) GTEST_SKIP() << "CPU lacks " << isa_name(isa);
  const Dot k = kernel(t, isa);
  if (!k) GTEST_SKIP() << "no " << isa_name(isa) << " kernel for " << t.name;
  std::mt19937 rng(1234);
  for (int nb = 1; nb <= 64; ++nb) {
    const std::vector<uint8_t> w = random_blocks(t, nb, rng), a = random_acts(nb, rng);
    const int mw = nb % 8, ma = (nb * 3) % 8;
    std::vector<uint8_t> wbuf(w.size() + 8), abuf(a.size() + 8);
    std::memcpy(wbuf.data() + mw, w.data(), w.size());
    std::memcpy(abuf.data() + ma, a.data(), a.size());
    const float want = t.dot(256 * int64_t(nb), w.data(), a.data());
    const float got = k(256 * int64_t(nb), wbuf.data() + mw, abuf.data() + ma);
    ASSERT_EQ(std::memcmp(&want, &got, 4), 0)
        << t.name << " " << isa_name(isa) << " nb " << nb << ": " << got << " vs " << want;
    // Rows ending exactly at their buffers' ends (ASan builds catch a kernel reading past them).
    const float exact = k(256 * int64_t(nb), w.data(), a.data());
    ASSERT_EQ(std::memcmp(&want, &exact, 4), 0) << t.name << " " << isa_name(isa) << " nb " << nb;
  }
  RefData d;
  ASSERT_TRUE(load_ref(t, d));
  for (int i = 0; i < d.nb; ++i) {
    const float want = t.dot(256, d.block(i), d.act(i));
    EXPECT_EQ(k(256, d.block(i), d.act(i)), want) << t.name << " ggml block " << i;
  }
  // All bits set and d = +-65504 against +-127.
  std::vector<uint8_t> w(size_t(4) * t.bytes, 0xff), a;
  for (int i = 0; i < 4; ++i) {
    int8_t qs[256];
    for (int e = 0; e < 256; ++e) qs[e] = int8_t((e + i) % 3 ? 127 : -127);
    const auto blk = q8k_block(1.0f, qs);
    a.insert(a.end(), blk.begin(), blk.end());
    set_d(t, w.data() + size_t(i) * t.bytes, i % 2 ? 0xfbff : 0x7bff);
  }
  const float want = t.dot(1024, w.data(), a.data());
  EXPECT_TRUE(std::isfinite(want));
  EXPECT_EQ(k(1024, w.data(), a.data()), want) << t.name << " extreme";
}

// The AVX-512 multi-row decode dots (iq_kernels.h vec_dot_rows_*): every one of nw weight rows
// bit-identical with the scalar reference's dot of that row, for 0..40 rows (several groups of
// 16 and partial ones), 1..64 blocks, row strides with odd extras, weights and activations at
// every misalignment, random blocks, all-bits-set blocks with d = +-65504 against activations
// of +-127 (and 1e30 / 1e-30 scales), and nothing written past out[nw - 1].
#if defined(__x86_64__)
using Rows = void (*)(int64_t, const void*, size_t, int, const void*, float*);
Rows rows_kernel(const IqType& t) {
  const std::string n = t.name;
  if (n == "iq2_xxs") return avx512::vec_dot_rows_iq2_xxs_q8_k;
  if (n == "iq2_xs") return avx512::vec_dot_rows_iq2_xs_q8_k;
  if (n == "iq2_s") return avx512::vec_dot_rows_iq2_s_q8_k;
  if (n == "iq3_xxs") return avx512::vec_dot_rows_iq3_xxs_q8_k;
  if (n == "iq3_s") return avx512::vec_dot_rows_iq3_s_q8_k;
  if (n == "iq1_s") return avx512::vec_dot_rows_iq1_s_q8_k;
  if (n == "iq1_m") return avx512::vec_dot_rows_iq1_m_q8_k;
  return nullptr;
}
#endif

class IqSimdRows : public ::testing::TestWithParam<IqType> {};

TEST_P(IqSimdRows, EveryRowEqualsReference) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 kernels";
#else
  const IqType& t = GetParam();
  if (!has_isa(1)) GTEST_SKIP() << "CPU lacks AVX-512 VNNI";
  const Rows k = rows_kernel(t);
  ASSERT_NE(k, nullptr) << t.name;
  std::mt19937 rng(4321);
  const int sizes[] = {1, 2, 3, 4, 5, 7, 8, 11, 16, 17, 33, 64};
  const int counts[] = {0, 1, 2, 3, 5, 8, 15, 16, 17, 24, 31, 32, 33, 40};
  int checked = 0;
  for (int nb : sizes) {
    for (int extreme = 0; extreme < 2; ++extreme) {
      const size_t row = size_t(nb) * size_t(t.bytes);
      const size_t ws = row + size_t(rng() % 8), woff = rng() % 64, aoff = rng() % 64;
      constexpr int kMax = 40;
      std::vector<uint8_t> wbuf(woff + ws * kMax), abuf(aoff + size_t(nb) * kQ8KBytes);
      for (int j = 0; j < kMax; ++j) {
        std::vector<uint8_t> r = random_blocks(t, nb, rng);
        if (extreme && j % 3 == 0) {  // all bits set, d = +-65504 (every other block)
          std::fill(r.begin(), r.end(), uint8_t(0xff));
          for (int i = 0; i < nb; ++i) set_d(t, r.data() + size_t(i) * t.bytes, (i + j) % 2 ? 0xfbff : 0x7bff);
        }
        std::memcpy(wbuf.data() + woff + ws * size_t(j), r.data(), r.size());
      }
      std::vector<uint8_t> a;
      if (extreme) {
        for (int i = 0; i < nb; ++i) {
          int8_t qs[256];
          const int mode = int(rng() % 3);
          for (int e = 0; e < 256; ++e) qs[e] = int8_t(mode == 0 ? 127 : mode == 1 ? -127 : (rng() % 2 ? 127 : -127));
          const auto blk = q8k_block(i % 3 == 0 ? 1e30f : i % 3 == 1 ? 1e-30f : 1.0f, qs);
          a.insert(a.end(), blk.begin(), blk.end());
        }
      } else {
        a = random_acts(nb, rng);
      }
      std::memcpy(abuf.data() + aoff, a.data(), a.size());
      const uint8_t* w = wbuf.data() + woff;
      const uint8_t* ap = abuf.data() + aoff;
      for (int nw : counts) {
        const int j0 = int(rng() % size_t(kMax - nw + 1));
        std::vector<float> out(size_t(nw) + 3, -7.0f);
        k(256 * int64_t(nb), w + ws * size_t(j0), ws, nw, ap, out.data());
        for (int j = 0; j < nw; ++j) {
          const float want = t.dot(256 * int64_t(nb), w + ws * size_t(j0 + j), ap);
          ASSERT_EQ(std::memcmp(&want, &out[size_t(j)], 4), 0)
              << t.name << " blocks " << nb << " extreme " << extreme << " rows " << nw << " row " << j << ": "
              << out[size_t(j)] << " vs reference " << want;
          ++checked;
        }
        for (size_t j = size_t(nw); j < out.size(); ++j) ASSERT_EQ(out[j], -7.0f) << t.name << " wrote past row " << nw;
      }
    }
  }
  // The ggml conformance blocks as rows of one block each.
  RefData d;
  ASSERT_TRUE(load_ref(t, d));
  for (int i = 0; i < d.nb; ++i) {
    float got = 0.0f;
    k(256, d.block(i), size_t(t.bytes), 1, d.act(i), &got);
    EXPECT_EQ(got, t.dot(256, d.block(i), d.act(i))) << t.name << " ggml block " << i;
  }
  EXPECT_GT(checked, 0);
#endif
}

INSTANTIATE_TEST_SUITE_P(Types, IqSimdRows, ::testing::ValuesIn(kIqTypes),
                         [](const auto& info) { return std::string(info.param.name); });

// AVX2 dequantization: bit-identical with the reference (and so with ggml's to_float) over
// 1..64 blocks at every misalignment of source and destination, and on the ggml blocks.
class IqSimdDequant : public ::testing::TestWithParam<IqType> {};

TEST_P(IqSimdDequant, Avx2EqualsReference) {
  const IqType& t = GetParam();
  if (!has_isa(0)) GTEST_SKIP() << "CPU lacks AVX2";
  std::mt19937 rng(99);
  for (int nb = 1; nb <= 64; ++nb) {
    const std::vector<uint8_t> w = random_blocks(t, nb, rng);
    const int ms = nb % 8, md = (nb * 5) % 8;
    std::vector<uint8_t> src(w.size() + 8), dst(size_t(nb) * 1024 + 8);
    std::memcpy(src.data() + ms, w.data(), w.size());
    std::vector<float> want(size_t(nb) * 256);
    t.dequant(w.data(), want.data(), int64_t(nb) * 256);
    t.avx2_dequant(src.data() + ms, reinterpret_cast<float*>(dst.data() + md), int64_t(nb) * 256);
    ASSERT_EQ(std::memcmp(dst.data() + md, want.data(), want.size() * 4), 0) << t.name << " nb " << nb;
    std::vector<float> exact(want.size());
    t.avx2_dequant(w.data(), exact.data(), int64_t(nb) * 256);
    ASSERT_EQ(std::memcmp(exact.data(), want.data(), want.size() * 4), 0) << t.name << " nb " << nb;
  }
  RefData d;
  ASSERT_TRUE(load_ref(t, d));
  std::vector<float> y(256);
  for (int i = 0; i < d.nb; ++i) {
    t.avx2_dequant(d.block(i), y.data(), 256);
    EXPECT_EQ(fnv1a(y.data(), 1024), d.hashes[i]) << t.name << " ggml block " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, IqSimdDequant, ::testing::ValuesIn(kIqTypes),
                         [](const auto& info) { return std::string(info.param.name); });

INSTANTIATE_TEST_SUITE_P(Kernels, IqSimd, ::testing::Combine(::testing::ValuesIn(kIqTypes), ::testing::Values(0, 1)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) == 0 ? "_avx2" : "_avx512");
                         });

}  // namespace
}  // namespace loom::quant
