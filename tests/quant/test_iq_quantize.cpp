// The IQ quantizers (quant/iq_quantize.h) against real ggml: tests/data/quant-ref/iqq_*.qref hold
// rows (Gaussian, all zero, one huge value, tiny, f16-range, exact ties, constant, sparse, scale
// sweep, uniform), the importance matrix (random, or with zeros and denormal-small values, or
// none) and ggml_quantize_chunk's bytes for them, made by loom-quant-ref
// (tools/dev/llama-ref/quant_ref.cpp; commands in tests/data/quant-ref/README.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "quant/iq_quantize.h"

namespace loom::quant {
namespace {

std::string data_path(const std::string& name) { return std::string(LOOM_SOURCE_DIR) + "/tests/data/quant-ref/" + name; }

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The quantizer section of a .qref file (layout: tests/data/quant-ref/README.md).
struct QuantCase {
  uint32_t type = 0;
  int64_t n = 0, rows = 0;
  std::vector<float> src;
  std::vector<float> imatrix;  // empty: none
  std::vector<uint8_t> out;
};

bool load_case(const std::string& name, QuantCase& c, std::string* why) {
  const std::vector<uint8_t> f = read_file(data_path(name));
  uint32_t h[16];
  if (f.size() < sizeof h) {
    *why = "missing or short file";
    return false;
  }
  std::memcpy(h, f.data(), sizeof h);
  if (h[0] != 0x46525141u || h[1] != 1) {
    *why = "bad magic/version";
    return false;
  }
  c.type = h[2];
  c.n = h[8];
  const uint64_t w = h[9], k = h[10];
  c.rows = h[11];
  const uint64_t row_bytes = uint64_t(c.n) / h[4] * h[5];
  const uint64_t act_bytes = uint64_t(c.n) / h[6] * h[7];
  uint64_t pos = sizeof h + w * row_bytes + w * uint64_t(c.n) * 4 + k * uint64_t(c.n) * 4 + k * act_bytes + 2 * k * w * 4;
  auto take = [&](void* dst, uint64_t n) {
    if (pos + n > f.size()) return false;
    std::memcpy(dst, f.data() + pos, n);
    pos += n;
    return true;
  };
  c.src.resize(size_t(c.rows * c.n));
  if (!take(c.src.data(), c.src.size() * 4)) {
    *why = "truncated qsrc";
    return false;
  }
  if (h[12] & 2) {
    c.imatrix.resize(size_t(c.n));
    if (!take(c.imatrix.data(), c.imatrix.size() * 4)) {
      *why = "truncated imatrix";
      return false;
    }
  }
  c.out.resize(size_t(uint64_t(c.rows) * row_bytes));
  if (!take(c.out.data(), c.out.size()) || pos != f.size()) {
    *why = "bad qout size";
    return false;
  }
  return c.rows > 0;
}

struct TypeCase {
  const char* name;
  TensorType type;
  size_t block_bytes;
  int block_elems;
  size_t (*fn)(const float*, void*, int64_t, int64_t, const float*);
  bool needs_imatrix;  // ggml cannot quantize it without one
};

const TypeCase kTypes[] = {
    {"iq2_xxs", TensorType::IQ2_XXS, 66, 256, quantize_iq2_xxs, true},
    {"iq2_xs", TensorType::IQ2_XS, 74, 256, quantize_iq2_xs, true},
    {"iq2_s", TensorType::IQ2_S, 82, 256, quantize_iq2_s, false},
    {"iq3_xxs", TensorType::IQ3_XXS, 98, 256, quantize_iq3_xxs, false},
    {"iq3_s", TensorType::IQ3_S, 110, 256, quantize_iq3_s, false},
    {"iq1_s", TensorType::IQ1_S, 50, 256, quantize_iq1_s, true},
    {"iq1_m", TensorType::IQ1_M, 56, 256, quantize_iq1_m, false},
};

class IqQuantize : public ::testing::TestWithParam<TypeCase> {};

void check_file(const TypeCase& t, const std::string& file) {
  QuantCase c;
  std::string why;
  ASSERT_TRUE(load_case(file, c, &why)) << file << ": " << why;
  ASSERT_EQ(c.type, uint32_t(t.type)) << file;
  const size_t row_bytes = size_t(c.n / t.block_elems) * t.block_bytes;
  ASSERT_EQ(c.out.size(), size_t(c.rows) * row_bytes);
  std::vector<uint8_t> got(c.out.size() + 1, 0xA5);
  const size_t n = t.fn(c.src.data(), got.data(), c.rows, c.n, c.imatrix.empty() ? nullptr : c.imatrix.data());
  EXPECT_EQ(n, c.out.size());
  EXPECT_EQ(got.back(), 0xA5) << "wrote past the end";
  for (int64_t r = 0; r < c.rows; ++r) {
    const uint8_t* want = c.out.data() + size_t(r) * row_bytes;
    const uint8_t* have = got.data() + size_t(r) * row_bytes;
    if (std::memcmp(want, have, row_bytes) != 0) {
      size_t at = 0;
      while (want[at] == have[at]) ++at;
      ADD_FAILURE() << file << " row " << r << " (pattern " << r % 10 << "): first difference at byte " << at << " (block "
                    << at / t.block_bytes << ", offset " << at % t.block_bytes << "): ggml " << int(want[at]) << ", loom "
                    << int(have[at]);
    }
  }
  // The importance matrix matters: without it the bytes differ.
  if (!c.imatrix.empty() && !t.needs_imatrix) {
    std::vector<uint8_t> plain(c.out.size());
    ASSERT_EQ(t.fn(c.src.data(), plain.data(), c.rows, c.n, nullptr), plain.size());
    EXPECT_NE(std::memcmp(plain.data(), c.out.data(), plain.size()), 0) << file << ": the imatrix changed nothing";
  }
  // One row at a time (and with a misaligned source and destination) gives the same bytes.
  std::vector<uint8_t> buf(c.n * 4 + 1), one(row_bytes + 1);
  const float* im = c.imatrix.empty() ? nullptr : c.imatrix.data();
  for (int64_t r = 0; r < c.rows; r += 3) {
    std::memcpy(buf.data() + 1, c.src.data() + r * c.n, size_t(c.n) * 4);
    ASSERT_EQ(t.fn(reinterpret_cast<const float*>(buf.data() + 1), one.data() + 1, 1, c.n, im), row_bytes);
    EXPECT_EQ(std::memcmp(one.data() + 1, c.out.data() + size_t(r) * row_bytes, row_bytes), 0)
        << file << " row " << r << " alone, misaligned";
  }
}

TEST_P(IqQuantize, MatchesGgmlWithImatrix) {
  check_file(GetParam(), std::string("iqq_") + GetParam().name + "_im_256.qref");
  check_file(GetParam(), std::string("iqq_") + GetParam().name + "_im_1024.qref");
}

TEST_P(IqQuantize, MatchesGgmlWithZerosInImatrix) {
  check_file(GetParam(), std::string("iqq_") + GetParam().name + "_imz_256.qref");
}

TEST_P(IqQuantize, MatchesGgmlWithoutImatrix) {
  const TypeCase& t = GetParam();
  if (t.needs_imatrix) {
    std::vector<float> x(256, 1.0f);
    std::vector<uint8_t> out(t.block_bytes, 0x5A);
    EXPECT_EQ(t.fn(x.data(), out.data(), 1, 256, nullptr), 0u);
    EXPECT_EQ(out[0], 0x5A) << "wrote without an imatrix";
    EXPECT_TRUE(iq_requires_imatrix(t.type));
    return;
  }
  EXPECT_FALSE(iq_requires_imatrix(t.type));
  check_file(t, std::string("iqq_") + t.name + "_noim_256.qref");
  check_file(t, std::string("iqq_") + t.name + "_noim_1024.qref");
}

void check_bad_lengths(const TypeCase& t) {
  std::vector<float> x(512, 0.5f), im(512, 1.0f);
  std::vector<uint8_t> out(16 * t.block_bytes, 0);
  EXPECT_EQ(t.fn(x.data(), out.data(), 1, t.block_elems - 1, im.data()), 0u);
  EXPECT_EQ(t.fn(x.data(), out.data(), 1, 0, im.data()), 0u);
  EXPECT_EQ(t.fn(x.data(), out.data(), 1, -256, im.data()), 0u);
  EXPECT_EQ(t.fn(x.data(), out.data(), 0, 256, im.data()), 0u);
  EXPECT_EQ(quantize_chunk(t.type, x.data(), out.data(), 2, 256, im.data()), 2 * 256 / t.block_elems * t.block_bytes);
}

TEST_P(IqQuantize, RefusesBadRowLengths) {
  check_bad_lengths(GetParam());
  EXPECT_EQ(quantize_iq(GetParam().type, std::vector<float>(256, 1.0f).data(), std::vector<uint8_t>(128).data(), 1, 256,
                        std::vector<float>(256, 1.0f).data()),
            GetParam().block_bytes);
}

// Non-finite and extreme inputs (which ggml may abort on) give blocks, never a crash.
TEST_P(IqQuantize, SurvivesNonFiniteInput) {
  const TypeCase& t = GetParam();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {nan, inf, -inf, 3e38f, -3e38f, 1e-45f};
  std::vector<float> im(256, 1.0f);
  std::vector<uint8_t> out(t.block_bytes + 1, 0xA5);
  for (float s : specials) {
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<float> x(256);
      for (int i = 0; i < 256; ++i) x[i] = mode == 0 ? s : (mode == 1 && i % 7 == 0 ? s : std::sin(float(i)));
      if (mode == 2) im[17] = s;
      else im[17] = 1.0f;
      EXPECT_EQ(t.fn(x.data(), out.data(), 1, 256, im.data()), t.block_bytes);
      EXPECT_EQ(out.back(), 0xA5);
    }
  }
}

// The lazily built search tables are safe to build from several threads at once.
TEST(IqQuantizeThreads, ConcurrentFirstUse) {
  std::vector<float> x(256), im(256, 1.0f);
  for (int i = 0; i < 256; ++i) x[i] = std::cos(0.37f * float(i));
  std::vector<std::vector<uint8_t>> outs(8, std::vector<uint8_t>(110));
  std::vector<std::thread> th;
  for (int i = 0; i < 8; ++i) {
    th.emplace_back([&, i] { quantize_iq(kTypes[i % 7].type, x.data(), outs[i].data(), 1, 256, im.data()); });
  }
  for (auto& t : th) t.join();
  EXPECT_EQ(std::memcmp(outs[0].data(), outs[7].data(), 66), 0);  // both IQ2_XXS
}

TEST(IqQuantizeRules, LlamaQuantizeRefusals) {
  for (TensorType t : {TensorType::IQ2_XXS, TensorType::IQ2_XS, TensorType::IQ2_S, TensorType::IQ3_XXS, TensorType::IQ1_S,
                       TensorType::IQ1_M}) {
    EXPECT_TRUE(llama_quantize_requires_imatrix(t));
  }
  EXPECT_FALSE(llama_quantize_requires_imatrix(TensorType::IQ3_S));
  EXPECT_FALSE(llama_quantize_requires_imatrix(TensorType::Q4_K));
}

// ---- the importance-weighted older types -------------------------------------------------------

const TypeCase kWeighted[] = {
    {"q2_k", TensorType::Q2_K, 84, 256, quantize_q2_k, false},
    {"q3_k", TensorType::Q3_K, 110, 256, quantize_q3_k, false},
    {"q4_k", TensorType::Q4_K, 144, 256, quantize_q4_k, false},
    {"q5_k", TensorType::Q5_K, 176, 256, quantize_q5_k, false},
    {"q6_k", TensorType::Q6_K, 210, 256, quantize_q6_k, false},
    {"q4_0", TensorType::Q4_0, 18, 32, quantize_q4_0, false},
    {"q4_1", TensorType::Q4_1, 20, 32, quantize_q4_1, false},
    {"q5_0", TensorType::Q5_0, 22, 32, quantize_q5_0, false},
    {"q5_1", TensorType::Q5_1, 24, 32, quantize_q5_1, false},
    {"iq4_nl", TensorType::IQ4_NL, 18, 32, quantize_iq4_nl, false},
    {"iq4_xs", TensorType::IQ4_XS, 136, 256, quantize_iq4_xs, false},
};

class WeightedQuantize : public ::testing::TestWithParam<TypeCase> {};

TEST_P(WeightedQuantize, MatchesGgmlWithImatrix) {
  check_file(GetParam(), std::string("iqq_") + GetParam().name + "_im_256.qref");
  check_file(GetParam(), std::string("iqq_") + GetParam().name + "_im_1024.qref");
  check_file(GetParam(), std::string("iqq_") + GetParam().name + "_imz_256.qref");
}

// Without an importance matrix: what ggml_quantize_chunk writes then (the reference quantizers).
TEST_P(WeightedQuantize, MatchesGgmlWithoutImatrix) {
  check_file(GetParam(), std::string("iqq_") + GetParam().name + "_noim_256.qref");
}

TEST_P(WeightedQuantize, RefusesBadRowLengths) { check_bad_lengths(GetParam()); }

TEST_P(WeightedQuantize, SurvivesNonFiniteInput) {
  const TypeCase& t = GetParam();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> im(256, 1.0f);
  const size_t bytes = 256 / size_t(t.block_elems) * t.block_bytes;
  std::vector<uint8_t> out(bytes + 1, 0xA5);
  for (float s : {nan, inf, -inf, 3e38f, 1e-45f}) {
    std::vector<float> x(256);
    for (int i = 0; i < 256; ++i) x[i] = i % 5 == 0 ? s : std::sin(float(i));
    EXPECT_EQ(t.fn(x.data(), out.data(), 1, 256, im.data()), bytes);
    EXPECT_EQ(out.back(), 0xA5);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, WeightedQuantize, ::testing::ValuesIn(kWeighted),
                         [](const ::testing::TestParamInfo<TypeCase>& i) { return std::string(i.param.name); });

INSTANTIATE_TEST_SUITE_P(Types, IqQuantize, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<TypeCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace loom::quant
