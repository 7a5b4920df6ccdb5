// base/half.h conversions: exhaustive over all 65536 f16 and bf16 patterns, round-to-nearest-even
// checked against double arithmetic, and f32 -> f16 against the F16C instructions when present.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "base/half.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace loom {
namespace {

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) { return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
// CPUID leaf 1, ECX bit 29 (read directly: independent of LOOM_FORCE_SCALAR, and clang's
// __builtin_cpu_supports does not know "f16c").
bool have_f16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}
#else
bool have_f16c() { return false; }
uint16_t hw_f32_to_f16(float) { return 0; }
float hw_f16_to_f32(uint16_t) { return 0; }
#endif

bool is_nan16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(Half, F16AllPatternsRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float f = f16_to_f32(h);
    if (is_nan16(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      const uint16_t back = f32_to_f16(f);
      ASSERT_TRUE(is_nan16(back)) << std::hex << i;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << i;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << i;
    // The value itself: sign * 2^(e-15) * 1.m or 2^-14 * 0.m.
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double mag = e == 0x1f ? std::numeric_limits<double>::infinity()
                       : e == 0  ? std::ldexp(double(m), -24)
                                 : std::ldexp(1.0 + m / 1024.0, e - 15);
    ASSERT_EQ(double(f), (h & 0x8000) ? -mag : mag) << std::hex << i;
  }
}

TEST(Half, Bf16AllPatternsRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float f = bf16_to_f32(h);
    ASSERT_EQ(f32_bits(f), uint32_t(h) << 16);
    const uint16_t back = f32_to_bf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(back))) << std::hex << i;
    } else {
      ASSERT_EQ(back, h) << std::hex << i;
    }
  }
}

// The nearest representable value, ties to the even pattern: checked with exact double
// arithmetic against the two neighbours of the result.
template <class ToF32, class FromF32>
void check_nearest_even(float f, ToF32 to_f32, FromF32 from_f32, double max_finite) {
  const uint16_t h = from_f32(f);
  const double x = f;
  if (std::isnan(f)) {
    ASSERT_TRUE(std::isnan(to_f32(h)));
    return;
  }
  const double r = to_f32(h);
  if (std::isinf(r)) {
    // Overflow: |x| at or above the midpoint between max_finite and the next (virtual) step.
    ASSERT_TRUE(std::isinf(x) || std::fabs(x) >= max_finite) << f;
    ASSERT_EQ(std::signbit(r), std::signbit(x));
    return;
  }
  ASSERT_EQ(std::signbit(r), std::signbit(x)) << f;
  // Compare with the neighbour on x's side of r (spacing changes at powers of two).
  const uint16_t mag = h & 0x7fff;
  const double ax = std::fabs(x), ar = std::fabs(r), err = std::fabs(ax - ar);
  if (err == 0) return;
  const double neighbour =
      ax > ar ? std::fabs(double(to_f32(uint16_t(mag + 1)))) : std::fabs(double(to_f32(uint16_t(mag - 1))));
  const double half_gap = std::fabs(neighbour - ar) / 2;
  ASSERT_LE(err, half_gap) << f;
  if (err == half_gap) {
    ASSERT_EQ(h & 1, 0) << "tie not to even " << f;
  }
}

std::vector<float> sample_floats() {
  std::vector<float> v;
  std::mt19937 rng(2024);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) v.push_back(bits_f32(bits(rng)));
  // Concentrate on the f16 range, and on exact ties and their neighbours.
  std::uniform_int_distribution<uint32_t> near(0x33000000u - 0x100000u, 0x47800000u + 0x100000u);
  for (int i = 0; i < 200000; ++i) v.push_back(bits_f32(near(rng) | (bits(rng) & 0x80000000u)));
  for (uint32_t h = 0; h < 0x7c00; h += 7) {
    const float a = f16_to_f32(uint16_t(h)), b = f16_to_f32(uint16_t(h + 1));
    const float mid = float((double(a) + b) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      v.push_back(f);
      v.push_back(-f);
    }
  }
  for (uint32_t u : {0x477ff000u, 0x477fefffu, 0x477fe000u, 0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x33000000u, 0x33000001u,
                     0x32ffffffu, 0x387fe000u, 0x38800000u, 0u}) {
    v.push_back(bits_f32(u));
    v.push_back(bits_f32(u | 0x80000000u));
  }
  return v;
}

TEST(Half, F32ToF16RoundsToNearestEven) {
  for (float f : sample_floats()) check_nearest_even(f, f16_to_f32, f32_to_f16, 65520.0);
}

TEST(Half, F32ToBf16RoundsToNearestEven) {
  // bf16 overflows at or above max + half a step: 0x7f7f8000 as f32.
  const double limit = double(bits_f32(0x7f7f8000u));
  for (float f : sample_floats()) check_nearest_even(f, bf16_to_f32, f32_to_bf16, limit);
  // Explicit ties.
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80);  // rounds up to inf
}

TEST(Half, MatchesF16cHardware) {
  if (!have_f16c()) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float sw = f16_to_f32(h), hw = hw_f16_to_f32(h);
    if (is_nan16(h)) {
      ASSERT_TRUE(std::isnan(sw) && std::isnan(hw));
    } else {
      ASSERT_EQ(f32_bits(sw), f32_bits(hw)) << std::hex << i;
    }
  }
  for (float f : sample_floats()) {
    ASSERT_EQ(f32_to_f16(f), hw_f32_to_f16(f)) << std::hex << f32_bits(f);
  }
}

}  // namespace
}  // namespace loom
