// Dequantization against llama.cpp's own (golden/kq/dequant/: ggml's to_float of
// blk.0.attn_k.weight, ne = [256, 128], taken from each model file), compared bit for bit; and
// the reference quantizers against llama-quantize: every tensor of every golden/kq model is
// re-quantized from the F32 source model and compared byte for byte.
//
// The tensor bytes come from a minimal GGUF locator below (header, metadata skipped by type,
// tensor infos, data section aligned to general.alignment or 32), so this test does not depend
// on the gguf reader.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "quant_test_util.h"
#include "test_util.h"

namespace loom::quant::test {
namespace {

struct LocatedTensor {
  uint32_t type = 0;
  std::vector<int64_t> ne;
  uint64_t offset = 0;  // absolute offset of the tensor's data in the file
};

class Cursor {
 public:
  explicit Cursor(const std::vector<uint8_t>& b) : b_(b) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str() {
    const uint64_t n = get<uint64_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), size_t(n));
    pos_ += n;
    return s;
  }
  void skip(uint64_t n) {
    need(n);
    pos_ += n;
  }
  uint64_t pos() const { return pos_; }

  // Skips one metadata value of GGUF value type `type`.
  void skip_value(uint32_t type) {
    static const int kSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
      str();
      return;
    }
    if (type == 9) {
      const uint32_t elem = get<uint32_t>();
      const uint64_t count = get<uint64_t>();
      if (elem == 8 || elem == 9) {
        for (uint64_t i = 0; i < count; ++i) skip_value(elem);
      } else {
        if (elem > 12) throw std::runtime_error("bad array element type");
        skip(count * uint64_t(kSizes[elem]));
      }
      return;
    }
    if (type > 12) throw std::runtime_error("bad value type");
    skip(uint64_t(kSizes[type]));
  }

 private:
  void need(uint64_t n) const {
    if (n > b_.size() - pos_) throw std::runtime_error("truncated GGUF");
  }
  const std::vector<uint8_t>& b_;
  uint64_t pos_ = 0;
};

std::vector<std::pair<std::string, LocatedTensor>> list_tensors(const std::vector<uint8_t>& file) {
  Cursor c(file);
  if (c.get<uint32_t>() != 0x46554747u) throw std::runtime_error("not a GGUF file");
  const uint32_t version = c.get<uint32_t>();
  if (version < 2) throw std::runtime_error("GGUF v1 not handled");
  const uint64_t n_tensors = c.get<uint64_t>();
  const uint64_t n_kv = c.get<uint64_t>();
  uint64_t alignment = 32;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = c.str();
    const uint32_t type = c.get<uint32_t>();
    if (key == "general.alignment" && type == 4) alignment = c.get<uint32_t>();
    else c.skip_value(type);
  }
  std::vector<std::pair<std::string, LocatedTensor>> all;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    LocatedTensor t;
    const std::string tname = c.str();
    const uint32_t n_dims = c.get<uint32_t>();
    for (uint32_t d = 0; d < n_dims; ++d) t.ne.push_back(int64_t(c.get<uint64_t>()));
    t.type = c.get<uint32_t>();
    t.offset = c.get<uint64_t>();
    all.emplace_back(tname, t);
  }
  const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  for (auto& e : all) e.second.offset += data_start;
  return all;
}

std::optional<LocatedTensor> locate_tensor(const std::vector<uint8_t>& file, const std::string& name) {
  for (const auto& e : list_tensors(file)) {
    if (e.first == name) return e.second;
  }
  return std::nullopt;
}

struct GoldenCase {
  const char* type;    // ggml type name as in index.json
  const char* source;  // model file
  const char* file;    // golden floats
};

// The entries of dequant/index.json (every type it lists).
const GoldenCase kCases[] = {
    {"Q4_0", "synth-llama-kq-q4_0.gguf", "Q4_0.q4_0.blk.0.attn_k.weight.f32"},
    {"Q4_1", "synth-llama-kq-q4_1.gguf", "Q4_1.q4_1.blk.0.attn_k.weight.f32"},
    {"Q5_0", "synth-llama-kq-q5_0.gguf", "Q5_0.q5_0.blk.0.attn_k.weight.f32"},
    {"Q5_1", "synth-llama-kq-q5_1.gguf", "Q5_1.q5_1.blk.0.attn_k.weight.f32"},
    {"Q8_0", "synth-llama-kq-q8_0.gguf", "Q8_0.q8_0.blk.0.attn_k.weight.f32"},
    {"BF16", "synth-llama-kq-bf16.gguf", "BF16.bf16.blk.0.attn_k.weight.f32"},
    {"Q2_K", "synth-llama-kq-q2_k.gguf", "Q2_K.q2_k.blk.0.attn_k.weight.f32"},
    {"Q3_K", "synth-llama-kq-q3_k_s.gguf", "Q3_K.q3_k_s.blk.0.attn_k.weight.f32"},
    {"Q4_K", "synth-llama-kq-q4_k_m.gguf", "Q4_K.q4_k_m.blk.0.attn_k.weight.f32"},
    {"Q5_K", "synth-llama-kq-q5_k_s.gguf", "Q5_K.q5_k_s.blk.0.attn_k.weight.f32"},
    {"Q6_K", "synth-llama-kq-q6_k.gguf", "Q6_K.q6_k.blk.0.attn_k.weight.f32"},
    {"IQ4_NL", "synth-llama-kq-iq4_nl.gguf", "IQ4_NL.iq4_nl.blk.0.attn_k.weight.f32"},
    {"IQ4_XS", "synth-llama-kq-iq4_xs.gguf", "IQ4_XS.iq4_xs.blk.0.attn_k.weight.f32"},
};

TEST(QuantGolden, IndexListsTheCases) {
  const std::string index = loom::test::read_text_file(loom::test::shared_path("golden/kq/dequant/index.json"));
  ASSERT_FALSE(index.empty());
  for (const GoldenCase& gc : kCases) {
    EXPECT_NE(index.find(gc.file), std::string::npos) << gc.file;
    EXPECT_NE(index.find(gc.source), std::string::npos) << gc.source;
  }
}

class QuantGoldenDequant : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(QuantGoldenDequant, BitExact) {
  const GoldenCase& gc = GetParam();
  const auto type = gguf::parse_tensor_type(gc.type);
  ASSERT_TRUE(type.has_value()) << gc.type;
  const std::string model_path = loom::test::shared_path(std::string("golden/kq/") + gc.source);
  const std::string golden_path = loom::test::shared_path(std::string("golden/kq/dequant/") + gc.file);
  ASSERT_FALSE(model_path.empty() || golden_path.empty());
  const std::vector<uint8_t> model = loom::test::read_file(model_path);
  const std::vector<float> golden = loom::test::read_f32_file(golden_path);

  const auto t = locate_tensor(model, "blk.0.attn_k.weight");
  ASSERT_TRUE(t.has_value());
  ASSERT_EQ(t->type, static_cast<uint32_t>(*type));
  ASSERT_EQ(t->ne, (std::vector<int64_t>{256, 128}));
  const int64_t n = 256 * 128;
  ASSERT_EQ(golden.size(), size_t(n));
  const int64_t bytes = gguf::row_bytes(*type, n);
  ASSERT_LE(t->offset + uint64_t(bytes), model.size());
  const uint8_t* data = model.data() + t->offset;

  // Row by row, as the engine uses it, through both the reference and the dispatching path.
  const int64_t rb = row_bytes(*type, 256);
  std::vector<float> r(256), s(256);
  int mismatches = 0;
  for (int64_t row = 0; row < 128; ++row) {
    ref::dequantize_row(*type, data + row * rb, r.data(), 256);
    dequantize_row(*type, data + row * rb, s.data(), 256);
    for (int64_t i = 0; i < 256; ++i) {
      const float g = golden[size_t(row * 256 + i)];
      if (f32_bits(r[size_t(i)]) != f32_bits(g) || f32_bits(s[size_t(i)]) != f32_bits(g)) {
        if (++mismatches <= 10) {
          ADD_FAILURE() << gc.type << " row " << row << " col " << i << ": golden " << g << " ref " << r[size_t(i)]
                        << " dispatch " << s[size_t(i)];
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << gc.type;
}

INSTANTIATE_TEST_SUITE_P(Types, QuantGoldenDequant, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.type); });

// Reference quantizers against llama-quantize: every tensor of each golden/kq model (quantized
// from synth-llama-kq-f32.gguf without an importance matrix) whose type loom can quantize is
// re-quantized from the F32 source and compared byte for byte.
bool has_weight_quantizer(uint32_t type) {
  switch (static_cast<TensorType>(type)) {
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::BF16:
    case TensorType::F16:
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS: return true;
    default: return false;
  }
}

class QuantGoldenQuantize : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantGoldenQuantize, ByteIdenticalWithLlamaQuantize) {
  const std::string name = GetParam();
  const std::string src_path = loom::test::shared_path("golden/kq/synth-llama-kq-f32.gguf");
  const std::string q_path = loom::test::shared_path("golden/kq/synth-llama-kq-" + name + ".gguf");
  ASSERT_FALSE(src_path.empty() || q_path.empty());
  const std::vector<uint8_t> src = loom::test::read_file(src_path);
  const std::vector<uint8_t> qf = loom::test::read_file(q_path);
  const auto src_tensors = list_tensors(src);
  int checked = 0;
  for (const auto& [tname, qt] : list_tensors(qf)) {
    if (qt.ne.size() != 2 || !has_weight_quantizer(qt.type)) continue;
    const auto st = locate_tensor(src, tname);
    ASSERT_TRUE(st.has_value()) << tname;
    ASSERT_EQ(st->type, 0u) << tname;
    ASSERT_EQ(st->ne, qt.ne) << tname;
    const auto type = static_cast<TensorType>(qt.type);
    const int64_t cols = qt.ne[0], rows = qt.ne[1];
    const int64_t rb = row_bytes(type, cols);
    ASSERT_LE(qt.offset + uint64_t(rb * rows), qf.size());
    ASSERT_LE(st->offset + uint64_t(cols * rows * 4), src.size());
    std::vector<uint8_t> got(static_cast<size_t>(rb));
    int64_t bad_rows = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const auto* x = reinterpret_cast<const float*>(src.data() + st->offset + uint64_t(r * cols * 4));
      ref::quantize_row(type, x, got.data(), cols);
      const uint8_t* want = qf.data() + qt.offset + uint64_t(r * rb);
      if (std::memcmp(got.data(), want, size_t(rb)) != 0 && ++bad_rows <= 3) {
        size_t k = 0;
        while (got[k] == want[k]) ++k;
        ADD_FAILURE() << name << " " << tname << " (" << tensor_type_name(type) << ") row " << r << ": first differing byte "
                      << k << " of " << rb << " (block " << k / size_t(block_bytes(type)) << ", byte "
                      << k % size_t(block_bytes(type)) << "): " << int(got[k]) << " vs " << int(want[k]);
      }
    }
    EXPECT_EQ(bad_rows, 0) << name << " " << tname << " (" << tensor_type_name(type) << ")";
    ++checked;
  }
  EXPECT_GT(checked, 0);
  std::printf("%s: %d tensors byte-identical checked\n", name.c_str(), checked);
}

INSTANTIATE_TEST_SUITE_P(Models, QuantGoldenQuantize,
                         ::testing::Values("q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m",
                                           "q6_k", "iq4_nl", "iq4_xs", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "bf16"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace loom::quant::test
