// SIMD kernels against their scalar reference twins, over many lengths and byte misalignments
// of both pointers. Dequantization and quantization must agree bit for bit; dot products to
// float rounding.
//  - QuantSimd.*: the dispatching entry points (quant.h), all misalignments 0..7. Under
//    LOOM_FORCE_SCALAR=1 both sides are the reference and these pass trivially.
//  - QuantSimdHighway.*: the Highway kernels (detail::highway), called directly under every
//    Highway target the CPU supports, since the intrinsic kernels win the dispatch where they
//    exist; extreme inputs included.
//  - QuantSimdNeon.*: the AArch64 dotprod kernels (detail::neon), compiled only on AArch64.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "base/cpu.h"
#include "base/simd.h"
#include "quant/kernels.h"
#include "quant/type_traits.h"
#include "quant_test_util.h"
#include "test_util.h"

namespace loom::quant::test {
namespace {

// Lengths 0..2N blocks (N = 8), plus for the float formats lengths that are not a multiple of
// the 8- or 32-element SIMD steps.
std::vector<int64_t> lengths(TensorType t) {
  std::vector<int64_t> v;
  const int64_t bs = block_size(t);
  for (int64_t b = 0; b <= 16; ++b) v.push_back(b * (bs == 1 ? 1 : bs));
  if (bs == 1) {
    for (int64_t n : {31, 33, 47, 63, 65, 100, 255, 257, 1000, 4096}) v.push_back(n);
  } else {
    v.push_back((bs == 32 ? 128 : 16) * bs);
  }
  return v;
}

bool same_bits(float a, float b) { return f32_bits(a) == f32_bits(b) || (std::isnan(a) && std::isnan(b)); }

// Prints the kernel set this CPU gets, and checks that the three reports of it agree: the
// dispatch switch (simd_enabled), the level `loom bench` prints (isa_level) and Highway's choice,
// which must be one of the targets this build generated for this CPU.
TEST(QuantSimd, ReportsKernelSet) {
  const CpuFeatures& f = cpu_features();
  std::printf("cpu: avx2=%d fma=%d f16c=%d neon_dotprod=%d sve=%d -> %s%s kernels (level %s)\n", f.avx2, f.fma, f.f16c,
              f.neon_dotprod, f.sve,
              f.has_avx2_set() ? "AVX2 int8 + "
              : f.neon_dotprod ? "NEON dotprod + "
                               : "",
              simd_enabled() ? ("Highway " + hwy_target_name()).c_str() : "scalar reference", f.isa_level());
  EXPECT_EQ(simd_enabled(), f.simd);
  const std::string level = f.isa_level();
  if (!f.simd) {
    EXPECT_EQ(level, "scalar");
    return;
  }
#if defined(__x86_64__)
  const bool avx2_family = level == "amx" || level == "avx512-vnni" || level == "avx-vnni" || level == "avx2";
  EXPECT_EQ(avx2_family, f.has_avx2_set()) << level;
  if (!f.has_avx2_set()) {
    EXPECT_EQ(level, "sse4");
  }
#elif defined(__aarch64__)
  EXPECT_EQ(level.rfind("neon", 0), 0u) << level;
  EXPECT_EQ(level == "neon-dotprod" || level == "neon-i8mm", f.neon_dotprod) << level;
#endif
  const std::string chosen = hwy_target_name();
  std::vector<std::string> targets;
  for_each_hwy_target([&](const std::string& t) { targets.push_back(t); });
  EXPECT_NE(std::find(targets.begin(), targets.end(), chosen), targets.end())
      << "Highway would pick " << chosen << ", not a target generated for this CPU";
}

// Random bytes in the level fields, random finite f16 scales: covers every nibble/qh pattern and
// Q8 weight levels of -128, which the dot kernels must accept (only activations are limited to
// [-127, 127], see kernels_avx2.cpp).
std::vector<uint8_t> random_bytes_row(TensorType t, int64_t n, std::mt19937& rng) {
  if (is_kquant(t) || is_new_type(t)) return random_kq_row(t, n, rng);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> v(size_t(row_bytes(t, n)));
  for (auto& b : v) b = uint8_t(byte(rng));
  auto finite16 = [&](auto to_f32) {
    uint16_t h;
    do {
      h = uint16_t(byte(rng) | byte(rng) << 8);
    } while (!std::isfinite(to_f32(h)));
    return h;
  };
  if (t == TensorType::F16 || t == TensorType::BF16) {
    const auto conv = t == TensorType::F16 ? f16_to_f32 : bf16_to_f32;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = finite16(conv);
      std::memcpy(v.data() + 2 * i, &h, 2);
    }
  } else if (t == TensorType::F32) {
    v = std::vector<uint8_t>(size_t(n) * 4);
    const std::vector<float> x = random_floats(n, rng);
    if (n) std::memcpy(v.data(), x.data(), size_t(n) * 4);
  } else {
    const int n_scales = has_min(t) || t == TensorType::Q8_1 ? 2 : 1;
    for (int64_t b = 0; b < n / 32; ++b) {
      for (int s = 0; s < n_scales; ++s) {
        const uint16_t h = finite16(f16_to_f32);
        std::memcpy(v.data() + b * block_bytes(t) + 2 * s, &h, 2);
      }
    }
  }
  return v;
}

TEST(QuantSimd, DequantizeBitExact) {
  std::mt19937 rng(11);
  for (TensorType t : every_supported_type()) {
    for (int64_t n : lengths(t)) {
      const std::vector<uint8_t> src = random_bytes_row(t, n, rng);
      std::vector<float> expect(size_t(n) + 1);
      ref::dequantize_row(t, src.data(), expect.data(), n);
      for (size_t ms = 0; ms < 8; ++ms) {
        for (size_t md = 0; md < 8; ++md) {
          Misaligned in(src.size(), ms), out(size_t(n) * 4 + 4, md);
          if (!src.empty()) std::memcpy(in.data(), src.data(), src.size());
          std::memset(out.data(), 0xcd, size_t(n) * 4 + 4);
          dequantize_row(t, in.data(), out.f32(), n);
          for (int64_t i = 0; i < n; ++i) {
            float got;
            std::memcpy(&got, out.data() + 4 * i, 4);
            ASSERT_TRUE(same_bits(got, expect[size_t(i)])) << type_name(t) << " n=" << n << " i=" << i << " misalign " << ms
                                                           << "/" << md << ": " << got << " vs " << expect[size_t(i)];
          }
          ASSERT_EQ(out.data()[4 * n], 0xcd) << "wrote past the end: " << type_name(t);
        }
      }
    }
  }
}

// Inputs that stress rounding: random data plus exact .5 ties of x/d (amax 127 gives d = 1),
// values just below a tie, and for F16/BF16 midpoints, subnormals, overflow, inf and nan.
std::vector<float> tricky_floats(int64_t n, std::mt19937& rng) {
  std::vector<float> x = random_floats(n, rng);
  std::uniform_int_distribution<int> pick(0, 9), level(-126, 126);
  for (int64_t b = 0; b + 32 <= n; b += 32) {
    if (pick(rng) < 3) {
      x[size_t(b)] = 127.0f;
      for (int j = 1; j < 32; ++j) {
        const float tie = float(level(rng)) + 0.5f;
        x[size_t(b + j)] = pick(rng) < 5 ? tie : std::nextafter(tie, 0.0f);
      }
    }
  }
  if (n >= 16) {
    const float specials[] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65520.0f,          65519.99f,         1e-8f, 3e-8f,
                              -2.98023224e-8f,    5.96046448e-8f,     1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1e38f, -0.0f};
    // Keep specials out of the block formats' rows: they only make sense for F16/BF16.
    for (size_t i = 0; i < std::size(specials) && i < size_t(n); ++i) x[i] = specials[i];
  }
  return x;
}

// The inputs QuantizeByteIdentical feeds a quantizer of type t: tricky_floats plus, for Q8_K,
// whole super-blocks of ties and degenerate super-blocks, for F16/BF16 infinities and NaNs.
std::vector<float> quantize_inputs(TensorType t, int64_t n, std::mt19937& rng) {
  std::vector<float> x = tricky_floats(n, rng);
  if (t == TensorType::Q8_K) {
    // Whole super-blocks of ties (d = +-1 from +-127, placed anywhere, sometimes twice with
    // both signs: the first wins) and of magnitude ties.
    std::uniform_int_distribution<int> pos(0, 255), level(-126, 126), coin(0, 1);
    for (int64_t b = 0; b + 256 <= n; b += 512) {
      for (int j = 0; j < 256; ++j) {
        const float tie = float(level(rng)) + 0.5f;
        x[size_t(b + j)] = coin(rng) ? tie : std::nextafter(tie, 0.0f);
      }
      x[size_t(b + pos(rng))] = coin(rng) ? 127.0f : -127.0f;
      x[size_t(b + pos(rng))] = coin(rng) ? 127.0f : -127.0f;
    }
    // Degenerate super-blocks: subnormals only (the scale overflows to infinity), NaNs among
    // normal values, infinities.
    if (n >= 1024) {
      for (int j = 0; j < 256; ++j) x[size_t(256 + j)] = float(j - 128) * 1e-45f;
      x[size_t(768 + 5)] = std::numeric_limits<float>::quiet_NaN();
      x[size_t(768 + 77)] = -std::numeric_limits<float>::quiet_NaN();
      x[size_t(768 + 255)] = std::numeric_limits<float>::quiet_NaN();  // last lane
    }
    if (n >= 2048) {
      x[size_t(1280 + 9)] = std::numeric_limits<float>::infinity();
      x[size_t(1792 + 3)] = -std::numeric_limits<float>::infinity();
      x[size_t(1792 + 4)] = std::numeric_limits<float>::infinity();
    }
  }
  if (block_size(t) == 1 && n >= 20) {
    x[16] = std::numeric_limits<float>::infinity();
    x[17] = -std::numeric_limits<float>::infinity();
    x[18] = std::numeric_limits<float>::quiet_NaN();
    x[19] = -std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

TEST(QuantSimd, QuantizeByteIdentical) {
  std::mt19937 rng(12);
  std::vector<TensorType> types = all_types();
  types.push_back(TensorType::Q8_K);
  for (TensorType t : types) {
    for (int64_t n : lengths(t)) {
      const std::vector<float> x = quantize_inputs(t, n, rng);
      const size_t bytes = size_t(row_bytes(t, n));
      std::vector<uint8_t> expect(bytes + 1);
      ref::quantize_row(t, x.data(), expect.data(), n);
      expect.resize(bytes);
      for (size_t ms = 0; ms < 8; ++ms) {
        for (size_t md = 0; md < 8; ++md) {
          Misaligned in(size_t(n) * 4, ms), out(bytes + 1, md);
          if (n) std::memcpy(in.data(), x.data(), size_t(n) * 4);
          std::memset(out.data(), 0xcd, bytes + 1);
          quantize_row(t, in.f32(), out.data(), n);
          ASSERT_EQ(std::vector<uint8_t>(out.data(), out.data() + bytes), expect)
              << type_name(t) << " n=" << n << " misalign " << ms << "/" << md;
          ASSERT_EQ(out.data()[bytes], 0xcd) << "wrote past the end: " << type_name(t);
        }
      }
    }
  }
}

TEST(QuantSimd, VecDotMatchesReference) {
  std::mt19937 rng(13);
  for (TensorType t : every_supported_type()) {
    const TensorType at = vec_dot_type(t);
    for (int64_t n : lengths(t)) {
      // Variant 1 (random bytes) only for block formats: random F16/BF16 bit patterns span the
      // whole exponent range and their products overflow.
      for (int variant = 0; variant < (block_size(t) > 1 ? 2 : 1); ++variant) {
        const std::vector<uint8_t> w = variant == 0 ? any_random_row(t, n, rng) : random_bytes_row(t, n, rng);
        const std::vector<uint8_t> a = random_row(at, n, rng);
        const float expect = ref::vec_dot(t, n, w.data(), a.data());
        const double tol = 2e-6 * dot_magnitude(t, n, w.data(), a.data()) + 1e-30;
        for (size_t mw = 0; mw < 8; ++mw) {
          for (size_t ma = 0; ma < 8; ++ma) {
            Misaligned wb(w.size(), mw), ab(a.size(), ma);
            if (!w.empty()) std::memcpy(wb.data(), w.data(), w.size());
            if (!a.empty()) std::memcpy(ab.data(), a.data(), a.size());
            const float got = vec_dot(t, n, wb.data(), ab.data());
            ASSERT_NEAR(got, expect, tol) << type_name(t) << " n=" << n << " variant " << variant << " misalign " << mw
                                          << "/" << ma;
          }
        }
      }
    }
  }
}

// The tile kernel (matrix x matrix) against ref::vec_dot per pair: full and partial tiles,
// row strides with odd padding and misaligned bases, cells outside the tile left untouched.
TEST(QuantSimd, VecDotTileMatchesReference) {
  std::mt19937 rng(17);
  const std::pair<int, int> shapes[] = {{1, 1}, {2, 1},  {1, 2}, {2, 4}, {3, 5},  {4, 8}, {5, 9},
                                        {7, 3}, {16, 6}, {4, 1}, {9, 1}, {16, 1}, {0, 3}, {3, 0}};
  for (TensorType t : every_supported_type()) {
    const TensorType at = vec_dot_type(t);
    const int64_t bs = block_size(t);
    std::vector<int64_t> ks = {0, bs, 2 * bs, 3 * bs, 5 * bs, 8 * bs, 17 * bs};
    if (bs == 1) ks.insert(ks.end(), {7, 9, 31, 100, 515});
    for (int64_t k : ks) {
      for (auto [nw, na] : shapes) {
        for (size_t mis = 0; mis < 4; ++mis) {
          const size_t mw = (mis * 3) % 8, ma = (mis * 5) % 8;
          const size_t wrb = size_t(row_bytes(t, k)), arb = size_t(row_bytes(at, k));
          const size_t ws = wrb + 3 + mis, as = arb + 1 + 2 * mis;
          std::vector<std::vector<uint8_t>> wr, ar;
          Misaligned wb(ws * size_t(std::max(nw, 1)), mw), ab(as * size_t(std::max(na, 1)), ma);
          for (int j = 0; j < nw; ++j) {
            wr.push_back(any_random_row(t, k, rng));
            if (wrb) std::memcpy(wb.data() + size_t(j) * ws, wr.back().data(), wrb);
          }
          for (int i = 0; i < na; ++i) {
            ar.push_back(random_row(at, k, rng));
            if (arb) std::memcpy(ab.data() + size_t(i) * as, ar.back().data(), arb);
          }
          const size_t os = size_t(nw) + 2;
          std::vector<float> out(os * size_t(na) + 1, -7.0f);
          vec_dot_tile(t, k, wb.data(), ws, nw, ab.data(), as, na, out.data(), os);
          std::vector<float> rout(out.size(), -7.0f);
          ref::vec_dot_tile(t, k, wr.empty() ? nullptr : wb.data(), ws, nw, ar.empty() ? nullptr : ab.data(), as, na,
                            rout.data(), os);
          for (int i = 0; i < na; ++i) {
            for (int j = 0; j < nw; ++j) {
              const float expect = ref::vec_dot(t, k, wr[size_t(j)].data(), ar[size_t(i)].data());
              const double tol = 2e-6 * dot_magnitude(t, k, wr[size_t(j)].data(), ar[size_t(i)].data()) + 1e-30;
              const size_t c = size_t(i) * os + size_t(j);
              ASSERT_TRUE(same_bits(rout[c], expect)) << type_name(t) << " k=" << k;
              ASSERT_NEAR(out[c], expect, tol)
                  << type_name(t) << " k=" << k << " tile " << nw << "x" << na << " cell " << j << "," << i;
              // Batch invariance: bit for bit the dispatched vec_dot of the pair.
              ASSERT_TRUE(same_bits(out[c], vec_dot(t, k, wb.data() + size_t(j) * ws, ab.data() + size_t(i) * as)))
                  << type_name(t) << " k=" << k << " tile " << nw << "x" << na << " cell " << j << "," << i;
            }
          }
          for (size_t c = 0; c < out.size(); ++c) {
            if (c == out.size() - 1 || c % os >= size_t(nw)) {
              ASSERT_EQ(out[c], -7.0f) << "wrote outside the tile: " << type_name(t);
            }
          }
        }
      }
    }
  }
}

// ---- the Highway kernels, called directly under every Highway target ------------------------
//
// quant.cpp prefers the x86 AVX2 intrinsics (and AArch64's dotprod kernels) where they exist, so
// these tests call detail::highway's entry points themselves, once per target the CPU supports
// (test::for_each_simd_target), against the references.

namespace hwk = detail::highway;

// Types each Highway entry point has a kernel for (it must return true for them).
const std::vector<TensorType>& hwy_dequant_types() {
  static const std::vector<TensorType> v = {TensorType::F16,  TensorType::BF16, TensorType::Q4_0,
                                            TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                            TensorType::Q8_0, TensorType::Q8_1, TensorType::IQ4_NL};
  return v;
}
const std::vector<TensorType>& hwy_quant_types() {
  static const std::vector<TensorType> v = {TensorType::Q8_0, TensorType::Q8_1, TensorType::Q8_K, TensorType::F16,
                                            TensorType::BF16};
  return v;
}
const std::vector<TensorType>& hwy_tile_types() {
  static const std::vector<TensorType> v = {TensorType::F16, TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0,
                                            TensorType::IQ4_NL};
  return v;
}
// vec_dot: every type whose table row has a Highway vec_dot (all but the IQ and small types).

// Pairs of misalignments (weights or source, activations or destination).
constexpr std::pair<size_t, size_t> kMisalign[] = {{0, 0}, {1, 3}, {2, 7}, {5, 1}};

// Every f16 (or bf16) bit pattern once: subnormals, infinities, NaNs included.
std::vector<uint8_t> every_half_pattern() {
  std::vector<uint8_t> v(65536 * 2);
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t u = uint16_t(h);
    std::memcpy(v.data() + 2 * h, &u, 2);
  }
  return v;
}

TEST(QuantSimdHighway, DequantizeBitExact) {
  loom::test::for_each_simd_target([] {
    std::mt19937 rng(21);
    for (TensorType t : hwy_dequant_types()) {
      std::vector<std::vector<uint8_t>> rows;
      for (int64_t n : lengths(t)) rows.push_back(random_bytes_row(t, n, rng));
      if (block_size(t) == 1) rows.push_back(every_half_pattern());
      for (const std::vector<uint8_t>& src : rows) {
        const int64_t n = int64_t(src.size()) / block_bytes(t) * block_size(t);
        std::vector<float> expect(size_t(n) + 1);
        ref::dequantize_row(t, src.data(), expect.data(), n);
        for (auto [ms, md] : kMisalign) {
          Misaligned in(src.size(), ms), out(size_t(n) * 4 + 4, md);
          if (!src.empty()) std::memcpy(in.data(), src.data(), src.size());
          std::memset(out.data(), 0xcd, size_t(n) * 4 + 4);
          ASSERT_TRUE(hwk::dequantize_row(t, in.data(), out.f32(), n)) << type_name(t);
          for (int64_t i = 0; i < n; ++i) {
            float got;
            std::memcpy(&got, out.data() + 4 * i, 4);
            ASSERT_TRUE(same_bits(got, expect[size_t(i)])) << type_name(t) << " n=" << n << " i=" << i << " misalign " << ms
                                                           << "/" << md << ": " << got << " vs " << expect[size_t(i)];
          }
          ASSERT_EQ(out.data()[4 * n], 0xcd) << "wrote past the end: " << type_name(t);
        }
      }
    }
  });
}

// Floats at and around every f16 rounding boundary: each f16 value, the midpoints to its
// neighbours (ties to even) and the floats one ulp either side of them, over the whole range
// (subnormals, the overflow threshold 65520 and beyond included).
std::vector<float> f16_boundaries() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float lo = f16_to_f32(uint16_t(h));
    const float hi = h + 1 < 0x7c00 ? f16_to_f32(uint16_t(h + 1)) : 65536.0f;
    const float mid = lo + (hi - lo) / 2;  // exact in f32
    for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  for (float x : {65520.0f, 65519.996f, 1e5f, 3.4e38f, 1e-30f, 1.4e-45f}) {
    v.push_back(x);
    v.push_back(-x);
  }
  return v;
}

TEST(QuantSimdHighway, QuantizeByteIdentical) {
  loom::test::for_each_simd_target([] {
    std::mt19937 rng(22);
    for (TensorType t : hwy_quant_types()) {
      std::vector<std::vector<float>> inputs;
      for (int64_t n : lengths(t)) inputs.push_back(quantize_inputs(t, n, rng));
      if (t == TensorType::F16 || t == TensorType::BF16) {
        inputs.push_back(f16_boundaries());
        // bf16 boundaries: every bf16 value of one exponent range and its midpoints.
        std::vector<float> b;
        for (uint32_t h = 0x3f00; h < 0x4100; ++h) {
          const uint32_t u = h << 16;
          for (uint32_t d : {0x0000u, 0x7fffu, 0x8000u, 0x8001u}) {
            b.push_back(bits_f32(u + d));
            b.push_back(-bits_f32(u + d));
          }
        }
        inputs.push_back(b);
      } else {
        // Extremes: huge magnitudes (no inf), a zero block, a block of one repeated tiny value
        // (tiny enough for a subnormal d, not so tiny that 1 / d overflows: the references
        // convert an infinite x / d to int, which C++ leaves undefined).
        const int64_t bs = block_size(t);
        std::vector<float> x(size_t(4 * bs));
        for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 ? 3.0e38f : -3.4e38f) / float(1 + i % 7);
        for (int64_t i = bs; i < 2 * bs; ++i) x[size_t(i)] = 0.0f;
        for (int64_t i = 2 * bs; i < 3 * bs; ++i) x[size_t(i)] = -1.5e-36f;
        inputs.push_back(x);
      }
      for (const std::vector<float>& x : inputs) {
        const int64_t n = int64_t(x.size()) / block_size(t) * block_size(t);
        const size_t bytes = size_t(row_bytes(t, n));
        std::vector<uint8_t> expect(bytes + 1);
        ref::quantize_row(t, x.data(), expect.data(), n);
        expect.resize(bytes);
        for (auto [ms, md] : kMisalign) {
          Misaligned in(size_t(n) * 4, ms), out(bytes + 1, md);
          if (n) std::memcpy(in.data(), x.data(), size_t(n) * 4);
          std::memset(out.data(), 0xcd, bytes + 1);
          ASSERT_TRUE(hwk::quantize_row(t, in.f32(), out.data(), n)) << type_name(t);
          if (bytes && std::memcmp(out.data(), expect.data(), bytes) != 0) {
            size_t i = 0;
            while (out.data()[i] == expect[i]) ++i;
            const size_t e = block_size(t) == 1 ? i / 2 : i / size_t(block_bytes(t)) * size_t(block_size(t));
            FAIL() << type_name(t) << " n=" << n << " byte " << i << " misalign " << ms << "/" << md << ": "
                   << int(out.data()[i]) << " vs " << int(expect[i]) << " (input " << e << " = " << x[e] << ")";
          }
          ASSERT_EQ(out.data()[bytes], 0xcd) << "wrote past the end: " << type_name(t);
        }
      }
    }
  });
}

// round_row_half (the packed F16 / BF16 GEMM's activations in one pass) gives the bits of the
// references' quantize_row then dequantize_row, for every length, misalignment and rounding
// boundary (NaN, inf, overflow to inf, subnormals).
TEST(QuantSimdHighway, RoundRowHalfIsQuantizeThenDequantize) {
  loom::test::for_each_simd_target([] {
    std::mt19937 rng(23);
    for (TensorType t : {TensorType::F16, TensorType::BF16}) {
      std::vector<std::vector<float>> inputs;
      for (int64_t n : lengths(t)) inputs.push_back(quantize_inputs(t, n, rng));
      inputs.push_back(f16_boundaries());
      std::vector<float> b;  // bf16 midpoints of one exponent range
      for (uint32_t h = 0x3f00; h < 0x4100; ++h) {
        for (uint32_t d : {0x0000u, 0x7fffu, 0x8000u, 0x8001u}) {
          b.push_back(bits_f32((h << 16) + d));
          b.push_back(-bits_f32((h << 16) + d));
        }
      }
      for (uint32_t u : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x7f7fffffu})
        b.push_back(bits_f32(u));
      inputs.push_back(b);
      for (const std::vector<float>& x : inputs) {
        const int64_t n = int64_t(x.size());
        std::vector<uint8_t> half(size_t(row_bytes(t, n)) + 1);
        std::vector<float> expect(size_t(n) + 1);
        ref::quantize_row(t, x.data(), half.data(), n);
        ref::dequantize_row(t, half.data(), expect.data(), n);
        for (auto [ms, md] : kMisalign) {
          Misaligned in(size_t(n) * 4, ms), out(size_t(n) * 4 + 4, md);
          if (n) std::memcpy(in.data(), x.data(), size_t(n) * 4);
          std::memset(out.data(), 0xcd, size_t(n) * 4 + 4);
          hwk::round_row_half(t, in.f32(), out.f32(), n);
          for (int64_t i = 0; i < n; ++i) {
            float got;
            std::memcpy(&got, out.data() + 4 * i, 4);
            ASSERT_EQ(f32_bits(got), f32_bits(expect[size_t(i)]))
                << type_name(t) << " n=" << n << " i=" << i << " misalign " << ms << "/" << md << ": input " << x[size_t(i)]
                << " gives " << got << " vs " << expect[size_t(i)];
          }
          ASSERT_EQ(out.data()[4 * n], 0xcd) << "wrote past the end: " << type_name(t);
        }
      }
    }
  });
}

// Rows at the extremes of each format: every level byte set to one pattern (all-max levels,
// all-min levels, ...), scales zero, large (f16 max for the block formats) or subnormal, and
// activations of all-max magnitude with either sign (-128 included where the format allows).
// Magnitudes stay far from float overflow.
std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> extreme_pairs(TensorType t, int64_t n) {
  const TensorType at = vec_dot_type(t);
  std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> out;
  std::mt19937 rng(uint32_t(t) * 7 + uint32_t(n));
  auto set_scales = [&](std::vector<uint8_t>& row, TensorType tt, uint16_t h16, float f32) {
    const int64_t nblk = n / block_size(tt);
    for (int64_t b = 0; b < nblk; ++b) {
      uint8_t* blk = row.data() + b * block_bytes(tt);
      if (tt == TensorType::Q8_K) {
        std::memcpy(blk, &f32, 4);
      } else if (is_kquant(tt)) {
        for (int off : kq_scale_offsets(tt)) std::memcpy(blk + off, &h16, 2);
      } else {
        const int n_scales = has_min(tt) || tt == TensorType::Q8_1 ? 2 : 1;
        for (int s = 0; s < n_scales; ++s) std::memcpy(blk + 2 * s, &h16, 2);
      }
    }
  };
  if (block_size(t) == 1) {
    // Float rows: large magnitudes (products ~1e12) of alternating sign in the activations, so
    // that the reference's own sequential rounding stays within the tolerance.
    for (uint16_t pat : {uint16_t(0x7bff), uint16_t(0xfbff), uint16_t(0x0001), uint16_t(0)}) {
      std::vector<uint8_t> w(size_t(row_bytes(t, n))), a(size_t(row_bytes(at, n)));
      for (int64_t i = 0; i < n; ++i) {
        if (t == TensorType::F32) {
          const float v = pat == 0x7bff ? 1e6f : pat == 0xfbff ? -1e6f : pat ? 1e-40f : 0.0f;
          const float va = i % 2 ? -v : v;
          std::memcpy(w.data() + 4 * i, &v, 4);
          std::memcpy(a.data() + 4 * i, &va, 4);
        } else {
          const uint16_t h = t == TensorType::BF16 ? uint16_t(pat == 0x7bff ? 0x4974 : pat == 0xfbff ? 0xc974 : pat) : pat;
          const uint16_t ha = i % 2 ? uint16_t(h ^ 0x8000) : h;
          std::memcpy(w.data() + 2 * i, &h, 2);
          std::memcpy(a.data() + 2 * i, &ha, 2);
        }
      }
      out.emplace_back(w, a);
    }
    return out;
  }
  const uint8_t level_bytes[] = {0xff, 0x00, 0x80, 0x7f, 0x88, 0x77};
  const int8_t act_levels[] = {127, -127, -128};
  const uint16_t scales16[] = {0x7bff /* 65504 */, 0xfbff, 0x0000, 0x0001 /* subnormal */, 0x3c00};
  for (size_t k = 0; k < std::size(level_bytes); ++k) {
    std::vector<uint8_t> w(size_t(row_bytes(t, n)), level_bytes[k]);
    const uint16_t ws = scales16[k % std::size(scales16)];
    set_scales(w, t, ws, t == TensorType::Q8_K ? 1e4f : 0.0f);
    if (is_kquant(t) && t != TensorType::Q8_K && t != TensorType::IQ4_NL && ws == 0x7bff) {
      set_scales(w, t, 0x5c00 /* 256: k-quant sub-scales multiply further */, 0.0f);
    }
    for (int8_t al : act_levels) {
      if (al == -128 && at != TensorType::Q8_K && at != TensorType::Q8_0 && at != TensorType::Q8_1) continue;
      std::vector<uint8_t> a(size_t(row_bytes(at, n)));
      const int64_t nab = n / block_size(at);
      for (int64_t b = 0; b < nab; ++b) {
        uint8_t* blk = a.data() + b * block_bytes(at);
        if (at == TensorType::Q8_K) {
          const float d = 100.0f;
          std::memcpy(blk, &d, 4);
          std::memset(blk + 4, uint8_t(al), 256);
          for (int s = 0; s < 16; ++s) {
            const int16_t bsum = int16_t(16 * al);
            std::memcpy(blk + 4 + 256 + 2 * s, &bsum, 2);
          }
        } else {
          const int off = at == TensorType::Q8_1 ? 4 : 2;
          const uint16_t d = f32_to_f16(1.0f), s = f32_to_f16(32.0f * al);
          std::memcpy(blk, &d, 2);
          if (at == TensorType::Q8_1) std::memcpy(blk + 2, &s, 2);
          std::memset(blk + off, uint8_t(al), 32);
        }
      }
      out.emplace_back(w, a);
    }
  }
  // Random level bytes with random scales of either sign against -128/127 activations.
  std::vector<uint8_t> w = random_bytes_row(t, n, rng);
  std::vector<uint8_t> a = random_row(at, n, rng);
  const size_t qoff = at == TensorType::Q8_K ? 4 : at == TensorType::Q8_1 ? 4 : 2;
  for (int64_t b = 0; b < n / block_size(at); ++b) {
    a[size_t(b * block_bytes(at)) + qoff] = uint8_t(int8_t(-128));
    a[size_t(b * block_bytes(at)) + qoff + 31] = uint8_t(int8_t(-128));
  }
  out.emplace_back(w, a);
  return out;
}

// Compares one dot kernel (fn) with the reference over the usual lengths and misalignments,
// random rows, random bytes and extremes.
template <class Fn>
void check_vec_dot(TensorType t, Fn fn, uint32_t seed) {
  std::mt19937 rng(seed);
  const TensorType at = vec_dot_type(t);
  for (int64_t n : lengths(t)) {
    std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> cases;
    cases.emplace_back(any_random_row(t, n, rng), random_row(at, n, rng));
    if (block_size(t) > 1) cases.emplace_back(random_bytes_row(t, n, rng), random_row(at, n, rng));
    if (n <= 4 * block_size(t) * (block_size(t) == 1 ? 64 : 1)) {
      for (auto& c : extreme_pairs(t, n)) cases.push_back(std::move(c));
    }
    for (size_t c = 0; c < cases.size(); ++c) {
      const std::vector<uint8_t>& w = cases[c].first;
      const std::vector<uint8_t>& a = cases[c].second;
      const float expect = ref::vec_dot(t, n, w.data(), a.data());
      ASSERT_TRUE(std::isfinite(expect)) << type_name(t) << " case " << c;
      const double tol = 2e-6 * dot_magnitude(t, n, w.data(), a.data()) + 1e-30;
      for (auto [mw, ma] : kMisalign) {
        Misaligned wb(w.size(), mw), ab(a.size(), ma);
        if (!w.empty()) std::memcpy(wb.data(), w.data(), w.size());
        if (!a.empty()) std::memcpy(ab.data(), a.data(), a.size());
        float got = -1.0f;
        ASSERT_TRUE(fn(t, n, wb.data(), ab.data(), &got)) << type_name(t);
        ASSERT_NEAR(got, expect, tol) << type_name(t) << " n=" << n << " case " << c << " misalign " << mw << "/" << ma;
      }
    }
  }
}

// One tile kernel (fn) against ref::vec_dot per pair: full and partial tiles, padded strides,
// misaligned bases, cells outside the tile untouched; and bit for bit against the same kernel
// set's vec_dot (dot) on the rows at other misalignments (batch invariance: a pair's dot does not
// depend on the tile shape or on how many rows share the call).
template <class Fn, class Dot>
void check_vec_dot_tile(TensorType t, Fn fn, Dot dot, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::pair<int, int> shapes[] = {{1, 1}, {2, 1}, {1, 2}, {2, 4}, {3, 5}, {5, 9}, {7, 3},
                                        {4, 1}, {7, 1}, {9, 1}, {6, 5}, {0, 3}, {3, 0}};
  const TensorType at = vec_dot_type(t);
  const int64_t bs = block_size(t);
  std::vector<int64_t> ks = {0, bs, 2 * bs, 3 * bs, 8 * bs, 17 * bs};
  if (bs == 1) ks.insert(ks.end(), {7, 9, 31, 100, 515});
  for (int64_t k : ks) {
    for (auto [nw, na] : shapes) {
      for (size_t mis = 0; mis < 2; ++mis) {
        const size_t mw = (mis * 3) % 8, ma = (mis * 5) % 8;
        const size_t wrb = size_t(row_bytes(t, k)), arb = size_t(row_bytes(at, k));
        const size_t ws = wrb + 3 + mis, as = arb + 1 + 2 * mis;
        std::vector<std::vector<uint8_t>> wr, ar;
        Misaligned wb(ws * size_t(std::max(nw, 1)), mw), ab(as * size_t(std::max(na, 1)), ma);
        for (int j = 0; j < nw; ++j) {
          wr.push_back(j % 2 ? random_bytes_row(t, k, rng) : any_random_row(t, k, rng));
          if (wrb) std::memcpy(wb.data() + size_t(j) * ws, wr.back().data(), wrb);
        }
        for (int i = 0; i < na; ++i) {
          ar.push_back(random_row(at, k, rng));
          if (arb) std::memcpy(ab.data() + size_t(i) * as, ar.back().data(), arb);
        }
        const size_t os = size_t(nw) + 2;
        std::vector<float> out(os * size_t(na) + 1, -7.0f);
        ASSERT_TRUE(fn(t, k, wb.data(), ws, nw, ab.data(), as, na, out.data(), os)) << type_name(t);
        for (int i = 0; i < na; ++i) {
          for (int j = 0; j < nw; ++j) {
            const float expect = ref::vec_dot(t, k, wr[size_t(j)].data(), ar[size_t(i)].data());
            const double tol = 2e-6 * dot_magnitude(t, k, wr[size_t(j)].data(), ar[size_t(i)].data()) + 1e-30;
            ASSERT_NEAR(out[size_t(i) * os + size_t(j)], expect, tol)
                << type_name(t) << " k=" << k << " tile " << nw << "x" << na << " cell " << j << "," << i;
            Misaligned w1(wr[size_t(j)].size() + 1, (mw + 1) % 8), a1(ar[size_t(i)].size() + 1, (ma + 3) % 8);
            if (wrb) std::memcpy(w1.data(), wr[size_t(j)].data(), wrb);
            if (arb) std::memcpy(a1.data(), ar[size_t(i)].data(), arb);
            float one = -1.0f;
            ASSERT_TRUE(dot(t, k, w1.data(), a1.data(), &one)) << type_name(t);
            ASSERT_TRUE(same_bits(out[size_t(i) * os + size_t(j)], one))
                << type_name(t) << " k=" << k << " tile " << nw << "x" << na << " cell " << j << "," << i << ": "
                << out[size_t(i) * os + size_t(j)] << " vs vec_dot " << one;
          }
        }
        for (size_t c = 0; c < out.size(); ++c) {
          if (c == out.size() - 1 || c % os >= size_t(nw)) {
            ASSERT_EQ(out[c], -7.0f) << "wrote outside the tile: " << type_name(t);
          }
        }
      }
    }
  }
}

TEST(QuantSimdHighway, VecDotMatchesReference) {
  loom::test::for_each_simd_target([] {
    for (TensorType t : every_supported_type()) {
      if (!type_traits(t).set(KernelSet::kHighway).vec_dot) continue;  // IQ and small types: none yet
      SCOPED_TRACE(type_name(t));
      check_vec_dot(t, hwk::vec_dot, 23);
    }
  });
}

TEST(QuantSimdHighway, VecDotTileMatchesReference) {
  loom::test::for_each_simd_target([] {
    for (TensorType t : hwy_tile_types()) {
      SCOPED_TRACE(type_name(t));
      check_vec_dot_tile(t, hwk::vec_dot_tile, hwk::vec_dot, 24);
    }
  });
}

// The types without a Highway kernel are left to the reference (false, nothing written).
TEST(QuantSimdHighway, DeclinesOtherTypes) {
  loom::test::for_each_simd_target([] {
    float out = -7.0f;
    std::vector<uint8_t> buf(4096, 0);
    std::vector<float> f(1024, 1.0f);
    EXPECT_FALSE(hwk::dequantize_row(TensorType::F32, buf.data(), f.data(), 32));
    EXPECT_FALSE(hwk::dequantize_row(TensorType::Q4_K, buf.data(), f.data(), 256));
    EXPECT_FALSE(hwk::quantize_row(TensorType::Q4_0, f.data(), buf.data(), 32));
    EXPECT_FALSE(hwk::quantize_row(TensorType::F32, f.data(), buf.data(), 32));
    EXPECT_FALSE(hwk::vec_dot_tile(TensorType::Q4_K, 256, buf.data(), 144, 1, buf.data(), 292, 1, &out, 1));
    EXPECT_EQ(out, -7.0f);
  });
}

#if defined(__x86_64__)
// ---- the x86 AVX2 int8 kernels, called directly ---------------------------------------------

TEST(QuantSimdAvx2, TileMatchesReferenceAndVecDotBitForBit) {
  if (!cpu_features().has_avx2_set()) GTEST_SKIP() << "no AVX2 (or LOOM_FORCE_SCALAR)";
  for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0, TensorType::IQ4_NL}) {
    SCOPED_TRACE(type_name(t));
    check_vec_dot_tile(t, detail::avx2::vec_dot_tile, detail::avx2::vec_dot, 27);
  }
}
#endif

#if defined(__aarch64__)
// ---- the AArch64 dotprod kernels ------------------------------------------------------------

TEST(QuantSimdNeon, DotprodMatchesReference) {
  if (!cpu_features().neon_dotprod) GTEST_SKIP() << "no dotprod (or LOOM_FORCE_SCALAR)";
  for (TensorType t :
       {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0, TensorType::IQ4_NL, TensorType::Q4_K, TensorType::Q6_K}) {
    SCOPED_TRACE(type_name(t));
    check_vec_dot(t, detail::neon::vec_dot, 25);
  }
  for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0, TensorType::IQ4_NL}) {
    SCOPED_TRACE(type_name(t));
    check_vec_dot_tile(t, detail::neon::vec_dot_tile, detail::neon::vec_dot, 26);
  }
  float out = -7.0f;
  std::vector<uint8_t> buf(512, 0);
  EXPECT_FALSE(detail::neon::vec_dot(TensorType::F16, 32, buf.data(), buf.data(), &out));
  EXPECT_FALSE(detail::neon::vec_dot_tile(TensorType::Q4_K, 256, buf.data(), 144, 1, buf.data(), 292, 1, &out, 1));
}
#endif

}  // namespace
}  // namespace loom::quant::test
