// The vec_dot_tile kernels of the issue-27 types (src/quant/new_tile_kernels.h): every tile shape
// (1..17 weight rows x 1..9 activation rows), row lengths of 1..16 blocks and a few longer ones,
// misaligned rows and strides, extreme blocks and activations. Every output must be bit-identical
// with quant::vec_dot of its pair (the dispatched dot: batch invariance), both through the kernel
// called directly and through quant::vec_dot_tile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/half.h"
#include "gguf/tensor_type.h"
#include "quant/new_tile_kernels.h"
#include "quant/quant.h"

namespace loom::quant {
namespace {

using TileFn = void (*)(int64_t, const void*, size_t, int, const void*, size_t, int, float*, size_t);

struct Case {
  TensorType type;
  TileFn fn;
  const char* name;
};

#if defined(__x86_64__)
const Case kCases[] = {
    {TensorType::IQ2_XXS, detail::new_tile::vec_dot_tile_iq2_xxs, "IQ2_XXS"},
    {TensorType::IQ2_XS, detail::new_tile::vec_dot_tile_iq2_xs, "IQ2_XS"},
    {TensorType::IQ2_S, detail::new_tile::vec_dot_tile_iq2_s, "IQ2_S"},
    {TensorType::IQ3_XXS, detail::new_tile::vec_dot_tile_iq3_xxs, "IQ3_XXS"},
    {TensorType::IQ3_S, detail::new_tile::vec_dot_tile_iq3_s, "IQ3_S"},
    {TensorType::IQ1_S, detail::new_tile::vec_dot_tile_iq1_s, "IQ1_S"},
    {TensorType::IQ1_M, detail::new_tile::vec_dot_tile_iq1_m, "IQ1_M"},
    {TensorType::TQ1_0, detail::new_tile::vec_dot_tile_tq1_0, "TQ1_0"},
    {TensorType::TQ2_0, detail::new_tile::vec_dot_tile_tq2_0, "TQ2_0"},
    {TensorType::MXFP4, detail::new_tile::vec_dot_tile_mxfp4, "MXFP4"},
    {TensorType::Q1_0, detail::new_tile::vec_dot_tile_q1_0, "Q1_0"},
    {TensorType::Q2_0, detail::new_tile::vec_dot_tile_q2_0, "Q2_0"},
};
#endif

int64_t block_elems(TensorType t) { return tensor_type_info(t)->block_size; }
int64_t block_bytes(TensorType t) { return tensor_type_info(t)->block_bytes; }

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// A finite f16 scale: random sign, magnitude 2^-14..2^4, sometimes 0 or the largest f16.
uint16_t f16_scale(std::mt19937& rng, bool extreme) {
  if (extreme) {
    const int k = int(rng() % 4);
    if (k == 0) return 0x7bff;  // 65504
    if (k == 1) return 0x0000;
    if (k == 2) return 0x0001;  // smallest subnormal
    return 0xfbff;
  }
  const float v = std::ldexp(1.0f + float(rng() % 1024) / 1024.0f, int(rng() % 19) - 14) * (rng() % 2 ? -1.0f : 1.0f);
  return f32_to_f16(v);
}

// A weight row of nb blocks of random bytes with finite scales (extreme ones in extreme blocks).
std::vector<uint8_t> weight_row(TensorType t, int64_t nb, std::mt19937& rng, bool extreme_row) {
  const int64_t bb = block_bytes(t);
  std::vector<uint8_t> row(size_t(nb * bb));
  for (auto& b : row) b = uint8_t(rng());
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* b = row.data() + i * bb;
    const bool ext = extreme_row && rng() % 2;
    if (ext && rng() % 2) {  // all levels at an extreme: every byte 0x00 or 0xff
      const uint8_t v = rng() % 2 ? 0xff : 0x00;
      std::memset(b, v, size_t(bb));
    }
    const uint16_t d = f16_scale(rng, ext);
    switch (t) {
      case TensorType::IQ1_M: {  // d: the top nibbles of the four scale words at 48
        for (int k = 0; k < 4; ++k) {
          uint16_t w;
          std::memcpy(&w, b + 48 + 2 * k, 2);
          w = uint16_t((w & 0x0fff) | (((d >> (4 * k)) & 0xf) << 12));
          put_u16(b + 48 + 2 * k, w);
        }
        break;
      }
      case TensorType::MXFP4: b[0] = ext ? uint8_t(rng() % 2 ? 254 : 1) : uint8_t(110 + rng() % 26); break;
      case TensorType::TQ1_0: put_u16(b + 52, d); break;
      case TensorType::TQ2_0: put_u16(b + 64, d); break;
      default:  // d first
        put_u16(b, d);
        break;
    }
  }
  return row;
}

// An activation row of n elements in its Q8_K or Q8_0 format: int8 values in [-127, 127] with
// consistent Q8_K bsums; extreme rows have blocks of all +-127 and huge or tiny scales.
std::vector<uint8_t> act_row(TensorType at, int64_t n, std::mt19937& rng, bool extreme_row) {
  const int64_t be = block_elems(at), bb = block_bytes(at), nb = n / be;
  std::vector<uint8_t> row(size_t(nb * bb));
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* b = row.data() + i * bb;
    const bool ext = extreme_row && rng() % 2;
    const int mode = ext ? int(rng() % 3) : 3;
    int8_t q[256];
    for (int e = 0; e < be; ++e) {
      int v = int(rng() % 255) - 127;
      if (mode == 0) v = 127;
      if (mode == 1) v = -127;
      if (mode == 2) v = rng() % 2 ? 127 : -127;
      q[e] = int8_t(v);
    }
    if (at == TensorType::Q8_K) {
      float d = std::ldexp(1.0f + float(rng() % 100) / 100.0f, int(rng() % 20) - 16);
      if (ext) d = rng() % 2 ? 1e30f : 1e-30f;
      std::memcpy(b, &d, 4);
      std::memcpy(b + 4, q, 256);
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int e = 0; e < 16; ++e) s += q[16 * g + e];
        put_u16(b + 260 + 2 * g, uint16_t(int16_t(s)));
      }
    } else {  // Q8_0
      put_u16(b, f16_scale(rng, ext));
      std::memcpy(b + 2, q, 32);
    }
  }
  return row;
}

bool same_bits(float x, float y) {
  if (std::isnan(x) && std::isnan(y)) return true;
  uint32_t a, b;
  std::memcpy(&a, &x, 4);
  std::memcpy(&b, &y, 4);
  return a == b;
}

class NewTiles : public ::testing::TestWithParam<int> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NewTiles);

TEST_P(NewTiles, EveryShapeBitIdenticalWithVecDot) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 kernels";
#else
  if (!cpu_features().has_avx2_set()) GTEST_SKIP() << "CPU lacks AVX2";
  const Case& c = kCases[GetParam()];
  if (!is_supported(c.type)) GTEST_SKIP() << c.name << " is not computable in this build's type table";
  const TensorType at = vec_dot_type(c.type);
  std::mt19937 rng(1234 + GetParam());
  constexpr int kW = 17, kA = 9;
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b <= 16; ++b) sizes.push_back(b);
  for (int64_t b : {17, 31, 33, 48, 88}) sizes.push_back(b);
  int checked = 0;
  for (int64_t nb : sizes) {
    for (int extreme = 0; extreme < 2; ++extreme) {
      const int64_t n = nb * block_elems(c.type);
      const size_t wrow = size_t(nb * block_bytes(c.type));
      const size_t arow = size_t(n / block_elems(at) * block_bytes(at));
      // Strides with an odd extra and a base offset: rows at every alignment.
      const size_t ws = wrow + 1 + size_t(rng() % 7), as = arow + 3 + size_t(rng() % 5);
      const size_t woff = 1 + rng() % 63, aoff = 1 + rng() % 63;
      std::vector<uint8_t> wbuf(woff + ws * kW), abuf(aoff + as * kA);
      for (int j = 0; j < kW; ++j) {
        const auto r = weight_row(c.type, nb, rng, extreme != 0);
        std::memcpy(wbuf.data() + woff + ws * j, r.data(), r.size());
      }
      for (int i = 0; i < kA; ++i) {
        const auto r = act_row(at, n, rng, extreme != 0);
        std::memcpy(abuf.data() + aoff + as * i, r.data(), r.size());
      }
      const uint8_t* w = wbuf.data() + woff;
      const uint8_t* a = abuf.data() + aoff;
      float want[kA][kW];
      for (int i = 0; i < kA; ++i) {
        for (int j = 0; j < kW; ++j) want[i][j] = vec_dot(c.type, n, w + ws * j, a + as * i);
      }
      for (int nw = 1; nw <= kW; ++nw) {
        for (int na = 1; na <= kA; ++na) {
          // A sub-tile not at the origin, so that row offsets are exercised too.
          const int j0 = int(rng() % (kW - nw + 1)), i0 = int(rng() % (kA - na + 1));
          const size_t os = size_t(nw) + rng() % 3;
          for (int via = 0; via < 2; ++via) {
            std::vector<float> out(os * size_t(na), -7.0f);
            if (via == 0) {
              c.fn(n, w + ws * j0, ws, nw, a + as * i0, as, na, out.data(), os);
            } else {
              vec_dot_tile(c.type, n, w + ws * j0, ws, nw, a + as * i0, as, na, out.data(), os);
            }
            for (int i = 0; i < na; ++i) {
              for (int j = 0; j < nw; ++j) {
                const float got = out[size_t(i) * os + size_t(j)], exp = want[i0 + i][j0 + j];
                ASSERT_TRUE(same_bits(got, exp))
                    << c.name << (via ? " quant::vec_dot_tile" : " kernel") << " blocks " << nb << " extreme " << extreme
                    << " tile " << nw << "x" << na << " pair (" << i << "," << j << "): " << got << " vs vec_dot " << exp;
                ++checked;
              }
              for (size_t j = size_t(nw); j < os; ++j) ASSERT_EQ(out[size_t(i) * os + j], -7.0f) << "wrote past the tile";
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
#endif
}

#if defined(__x86_64__)
INSTANTIATE_TEST_SUITE_P(Types, NewTiles, ::testing::Range(0, int(std::size(kCases))),
                         [](const ::testing::TestParamInfo<int>& i) { return std::string(kCases[i.param].name); });
#endif

}  // namespace
}  // namespace loom::quant
