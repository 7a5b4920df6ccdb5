// Dispatching (SIMD) functions against their scalar reference twins, over many lengths and all
// byte misalignments 0..7 of both pointers. Dequantization and quantization must agree bit for
// bit; dot products to float rounding. On CPUs without the AVX2 set (or with
// LOOM_FORCE_SCALAR=1) both sides are the reference and the tests pass trivially.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/cpu.h"
#include "quant_test_util.h"

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

bool same_bits(float a, float b) {
  return f32_bits(a) == f32_bits(b) || (std::isnan(a) && std::isnan(b));
}

TEST(QuantSimd, ReportsKernelSet) {
  const CpuFeatures& f = cpu_features();
  std::printf("cpu: avx2=%d fma=%d f16c=%d -> %s kernels\n", f.avx2, f.fma, f.f16c,
              f.has_avx2_set() ? "AVX2" : "scalar reference");
}

// Random bytes in the level fields, random finite f16 scales: covers every nibble/qh pattern and
// Q8 weight levels of -128, which the dot kernels must accept (only activations are limited to
// [-127, 127], see kernels_avx2.cpp).
std::vector<uint8_t> random_bytes_row(TensorType t, int64_t n, std::mt19937& rng) {
  if (is_kquant(t)) return random_kq_row(t, n, rng);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> v(size_t(row_bytes(t, n)));
  for (auto& b : v) b = uint8_t(byte(rng));
  auto finite16 = [&](auto to_f32) {
    uint16_t h;
    do { h = uint16_t(byte(rng) | byte(rng) << 8); } while (!std::isfinite(to_f32(h)));
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
            ASSERT_TRUE(same_bits(got, expect[size_t(i)]))
                << type_name(t) << " n=" << n << " i=" << i << " misalign " << ms << "/" << md
                << ": " << got << " vs " << expect[size_t(i)];
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
    const float specials[] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65520.0f, 65519.99f,
                              1e-8f, 3e-8f, -2.98023224e-8f, 5.96046448e-8f,
                              1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1e38f, -0.0f};
    // Keep specials out of the block formats' rows: they only make sense for F16/BF16.
    for (size_t i = 0; i < std::size(specials) && i < size_t(n); ++i) x[i] = specials[i];
  }
  return x;
}

TEST(QuantSimd, QuantizeByteIdentical) {
  std::mt19937 rng(12);
  std::vector<TensorType> types = all_types();
  types.push_back(TensorType::Q8_K);
  for (TensorType t : types) {
    for (int64_t n : lengths(t)) {
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
        const std::vector<uint8_t> w =
            variant == 0 ? any_random_row(t, n, rng) : random_bytes_row(t, n, rng);
        const std::vector<uint8_t> a = random_row(at, n, rng);
        const float expect = ref::vec_dot(t, n, w.data(), a.data());
        const double tol = 2e-6 * dot_magnitude(t, n, w.data(), a.data()) + 1e-30;
        for (size_t mw = 0; mw < 8; ++mw) {
          for (size_t ma = 0; ma < 8; ++ma) {
            Misaligned wb(w.size(), mw), ab(a.size(), ma);
            if (!w.empty()) std::memcpy(wb.data(), w.data(), w.size());
            if (!a.empty()) std::memcpy(ab.data(), a.data(), a.size());
            const float got = vec_dot(t, n, wb.data(), ab.data());
            ASSERT_NEAR(got, expect, tol) << type_name(t) << " n=" << n << " variant " << variant
                                          << " misalign " << mw << "/" << ma;
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
  const std::pair<int, int> shapes[] = {{1, 1}, {2, 1}, {1, 2}, {2, 4}, {3, 5}, {4, 8},
                                        {5, 9}, {7, 3}, {16, 6}, {0, 3}, {3, 0}};
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
          ref::vec_dot_tile(t, k, wr.empty() ? nullptr : wb.data(), ws, nw,
                            ar.empty() ? nullptr : ab.data(), as, na, rout.data(), os);
          for (int i = 0; i < na; ++i) {
            for (int j = 0; j < nw; ++j) {
              const float expect = ref::vec_dot(t, k, wr[size_t(j)].data(), ar[size_t(i)].data());
              const double tol =
                  2e-6 * dot_magnitude(t, k, wr[size_t(j)].data(), ar[size_t(i)].data()) + 1e-30;
              const size_t c = size_t(i) * os + size_t(j);
              ASSERT_TRUE(same_bits(rout[c], expect)) << type_name(t) << " k=" << k;
              ASSERT_NEAR(out[c], expect, tol) << type_name(t) << " k=" << k << " tile " << nw
                                               << "x" << na << " cell " << j << "," << i;
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

}  // namespace
}  // namespace loom::quant::test

namespace loom::quant::test {
namespace {

// Timing of one 4096-element dot per type, dispatch (SIMD) vs reference. Disabled: run with
// --gtest_also_run_disabled_tests --gtest_filter='*VecDotSpeed*'.
TEST(QuantSimd, DISABLED_VecDotSpeed) {
  std::mt19937 rng(5);
  constexpr int64_t n = 4096;
  for (TensorType t : every_supported_type()) {
    const std::vector<uint8_t> w = any_random_row(t, n, rng);
    const std::vector<uint8_t> a = random_row(vec_dot_type(t), n, rng);
    auto time_ns = [&](auto fn) {
      volatile float sink = 0.0f;
      int iters = 0;
      const auto t0 = std::chrono::steady_clock::now();
      auto t1 = t0;
      do {
        for (int k = 0; k < 64; ++k) sink = sink + fn(t, n, w.data(), a.data());
        iters += 64;
        t1 = std::chrono::steady_clock::now();
      } while (t1 - t0 < std::chrono::milliseconds(100));
      (void)sink;
      return double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) / iters;
    };
    const double simd = time_ns([](TensorType tt, int64_t nn, const void* ww, const void* aa) {
      return vec_dot(tt, nn, ww, aa);
    });
    const double scalar = time_ns([](TensorType tt, int64_t nn, const void* ww, const void* aa) {
      return ref::vec_dot(tt, nn, ww, aa);
    });
    std::vector<float> out(static_cast<size_t>(n));
    const double deq_simd = time_ns([&](TensorType tt, int64_t nn, const void* ww, const void*) {
      dequantize_row(tt, ww, out.data(), nn);
      return out[0];
    });
    const double deq_scalar = time_ns([&](TensorType tt, int64_t nn, const void* ww, const void*) {
      ref::dequantize_row(tt, ww, out.data(), nn);
      return out[0];
    });
    std::printf("%-7s n=4096: vec_dot dispatch %7.1f ns ref %8.1f ns | dequantize dispatch %7.1f ns ref %8.1f ns\n",
                type_name(t).c_str(), simd, scalar, deq_simd, deq_scalar);
  }
  {
    const std::vector<float> x = random_floats(n, rng);
    std::vector<uint8_t> q(size_t(row_bytes(TensorType::Q8_K, n)));
    for (int pass = 0; pass < 2; ++pass) {
      int iters = 0;
      const auto t0 = std::chrono::steady_clock::now();
      auto t1 = t0;
      do {
        for (int k = 0; k < 64; ++k) {
          if (pass == 0) quantize_row(TensorType::Q8_K, x.data(), q.data(), n);
          else ref::quantize_row(TensorType::Q8_K, x.data(), q.data(), n);
        }
        iters += 64;
        t1 = std::chrono::steady_clock::now();
      } while (t1 - t0 < std::chrono::milliseconds(100));
      std::printf("quantize_row q8_K n=4096: %s %8.1f ns\n", pass == 0 ? "dispatch" : "ref",
                  double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) / iters);
    }
  }
}

}  // namespace
}  // namespace loom::quant::test
