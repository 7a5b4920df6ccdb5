// Models whose weights are IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0,
// MXFP4, Q1_0 or Q2_0, made in memory (no llama.cpp needed): the synthetic kq llama of
// ../shared/golden/kq (n_embd 256, 3 layers, rows of 256 and 768) with every matrix requantized
// by loom to one type (IQ2_XXS, IQ2_XS and IQ1_S, which need an importance matrix, with a uniform
// one through quantize_chunk).
//
// - QuantTypesModel.LoadsAndDecodes: the model loads, its prompt logits (a batch: the matrix path)
//   and a few greedy steps (single tokens: the vector path) are finite and within 5e-2 *
//   max|logit| of its F32 twin (the same weights dequantized by loom: what is left is the
//   activations' 8-bit quantization, Q8_K / Q8_0).
// - QuantTypesModel.BadInputIsRefusedByName: truncated tensor data, rows that are not whole blocks,
//   type ids beyond the known ones, NVFP4 (read, not computed) are refused with a message naming
//   the tensor; random bytes in every block (any grid index, sign, trit or E2M1 code is valid;
//   scales of any value, non-finite included) load and decode without a crash.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "gguf/gguf_writer.h"
#include "model_test_util.h"
#include "model/packing.h"
#include "quant/iq_quantize.h"
#include "quant/packed.h"
#include "quant/quant.h"
#include "quant/type_traits.h"

namespace loom::test {
namespace {

const TensorType kNewTypes[] = {TensorType::IQ1_S, TensorType::IQ1_M,   TensorType::IQ2_XXS, TensorType::IQ2_XS,
                                TensorType::IQ2_S, TensorType::IQ3_XXS, TensorType::IQ3_S,   TensorType::TQ1_0,
                                TensorType::TQ2_0, TensorType::MXFP4,   TensorType::Q1_0,    TensorType::Q2_0};

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};  // "Once upon a time"

std::string lower_name(TensorType t) { return std::string(tensor_type_name(t)); }

// Rows of floats quantized to t: quantize_row where the type has it, else quantize_chunk with a
// uniform importance matrix.
std::vector<uint8_t> quantize_matrix(TensorType t, const float* x, int64_t cols, int64_t rows) {
  const size_t rb = size_t(row_bytes(t, cols));
  std::vector<uint8_t> q(rb * size_t(rows));
  if (quant::type_traits(t).ref.quantize_row) {
    for (int64_t r = 0; r < rows; ++r) quant::quantize_row(t, x + r * cols, q.data() + size_t(r) * rb, cols);
  } else {
    const std::vector<float> ones(size_t(cols), 1.0f);
    EXPECT_EQ(quant::quantize_chunk(t, x, q.data(), rows, cols, ones.data()), q.size()) << lower_name(t);
  }
  return q;
}

// The kq llama's GGUF image with every matrix in type t (bytes_of: its blocks, from the F32
// rows) and the tensors' final names.
template <class BytesOf>
std::vector<uint8_t> kq_model_image(BytesOf bytes_of) {
  const std::string path = shared_path("golden/kq/synth-llama-kq-f32.gguf");
  if (path.empty()) return {};
  auto src = gguf::GgufFile::open(path);
  EXPECT_TRUE(src.has_value()) << src.status().message();
  if (!src) return {};
  auto w = gguf::GgufWriter::from_file(*src);
  EXPECT_TRUE(w.has_value()) << w.status().message();
  if (!w) return {};
  for (const gguf::TensorInfo& t : src->tensors()) {
    if (t.n_dims != 2) continue;
    EXPECT_EQ(t.type, TensorType::F32) << t.name;
    const auto* x = reinterpret_cast<const float*>(t.data);
    std::vector<float> f(x, x + t.n_elements());  // aligned copy
    const auto [type, bytes] = bytes_of(t.name, f.data(), t.ne[0], t.ne[1]);
    EXPECT_TRUE(w->remove_tensor(t.name));
    const Status st = w->add_tensor(t.name, type, {t.ne[0], t.ne[1]}, bytes);
    EXPECT_TRUE(st.is_ok()) << t.name << ": " << st.message();
  }
  return w->to_bytes();
}

// Made once per type (the IQ searches take seconds) and shared by the tests.
const std::vector<uint8_t>& model_of_type(TensorType t) {
  static std::map<TensorType, std::vector<uint8_t>> made;
  auto it = made.find(t);
  if (it == made.end() || it->second.empty()) {
    it = made.insert_or_assign(t, kq_model_image([t](const std::string&, const float* x, int64_t cols, int64_t rows) {
                                 return std::make_pair(t, quantize_matrix(t, x, cols, rows));
                               }))
             .first;
  }
  return it->second;
}

// The same model with every matrix the F32 dequantization of image's blocks.
std::vector<uint8_t> f32_twin(const std::vector<uint8_t>& image) {
  auto q = gguf::GgufFile::from_bytes(image);
  EXPECT_TRUE(q.has_value());
  if (!q) return {};
  auto w = gguf::GgufWriter::from_file(*q);
  EXPECT_TRUE(w.has_value());
  if (!w) return {};
  for (const gguf::TensorInfo& t : q->tensors()) {
    if (t.n_dims != 2) continue;
    std::vector<float> f(size_t(t.n_elements()));
    const int64_t rb = row_bytes(t.type, t.ne[0]);
    for (int64_t r = 0; r < t.n_rows(); ++r) quant::dequantize_row(t.type, t.data + r * rb, f.data() + r * t.ne[0], t.ne[0]);
    EXPECT_TRUE(w->remove_tensor(t.name));
    const auto* b = reinterpret_cast<const uint8_t*>(f.data());
    EXPECT_TRUE(
        w->add_tensor(t.name, TensorType::F32, {t.ne[0], t.ne[1]}, std::span<const uint8_t>(b, f.size() * 4)).is_ok());
  }
  return w->to_bytes();
}

Expected<std::shared_ptr<const Model>> load_image(const std::vector<uint8_t>& image) {
  auto f = gguf::GgufFile::from_bytes(image);
  if (!f) return f.status();
  return Model::from_gguf(std::move(*f));
}

// Prompt logits then `steps` greedy single-token steps; every logit vector, in order.
std::vector<std::vector<float>> run_greedy(const std::shared_ptr<const Model>& m, int steps,
                                           const std::vector<int32_t>* forced = nullptr) {
  std::vector<std::vector<float>> out;
  auto ctx = make_context(m, 128, 2);
  if (!ctx) return out;
  out.push_back(prompt_logits(*ctx, kPrompt));
  int32_t pos = int32_t(kPrompt.size());
  for (int s = 0; s < steps; ++s) {
    const std::vector<float>& last = out.back();
    const int32_t next = forced ? (*forced)[size_t(s)] : int32_t(std::max_element(last.begin(), last.end()) - last.begin());
    const int32_t one[1] = {next};
    const Status st = ctx->decode(Batch::from_tokens(one, pos++));
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st.is_ok()) break;
    auto l = ctx->logits(-1);
    EXPECT_TRUE(l.has_value());
    if (!l) break;
    out.emplace_back(l->begin(), l->end());
  }
  return out;
}

class QuantTypesModel : public ::testing::TestWithParam<TensorType> {};

TEST_P(QuantTypesModel, LoadsAndDecodes) {
  const TensorType t = GetParam();
  ASSERT_TRUE(quant::is_supported(t)) << lower_name(t);
  const std::vector<uint8_t>& image = model_of_type(t);
  ASSERT_FALSE(image.empty());
  auto m = load_image(image);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_EQ((*m)->weights().tok_embd.type, t);
  auto twin = load_image(f32_twin(image));
  ASSERT_TRUE(twin.has_value()) << twin.status().message();

  constexpr int kSteps = 4;
  const auto got = run_greedy(*m, kSteps);
  ASSERT_EQ(got.size(), size_t(kSteps + 1));
  std::vector<int32_t> ids;
  for (int s = 0; s < kSteps; ++s) ids.push_back(argmax_of(got[size_t(s)]));
  const auto want = run_greedy(*twin, kSteps, &ids);  // the twin fed the same tokens
  ASSERT_EQ(want.size(), got.size());
  float worst = 0.0f;
  for (size_t s = 0; s < got.size(); ++s) {
    for (float v : got[s]) ASSERT_TRUE(std::isfinite(v)) << lower_name(t) << " step " << s;
    ASSERT_EQ(got[s].size(), want[s].size());
    const float rel = max_abs_diff(got[s], want[s]) / max_abs(want[s]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 5e-2f) << lower_name(t) << " step " << s;
  }
  std::printf("%-8s model %zu bytes: max|d|/max|f32 twin| over %d steps = %.3g\n", lower_name(t).c_str(), image.size(),
              kSteps + 1, double(worst));
}

// ---- bad input ------------------------------------------------------------------------------

// Offset in image of tensor `name`'s info right after its name (n_dims, ne[], type, offset).
size_t tensor_info_pos(const std::vector<uint8_t>& image, const std::string& name) {
  std::vector<uint8_t> key(8 + name.size());
  const uint64_t len = name.size();
  std::memcpy(key.data(), &len, 8);
  std::copy(name.begin(), name.end(), key.begin() + 8);  // (memcpy here trips GCC 12's -Wstringop-overflow)
  const auto it = std::search(image.begin(), image.end(), key.begin(), key.end());
  EXPECT_NE(it, image.end()) << name;
  return it == image.end() ? 0 : size_t(it - image.begin()) + key.size();
}

void expect_refused(const std::vector<uint8_t>& image, const std::string& name, const std::string& what) {
  auto m = load_image(image);
  ASSERT_FALSE(m.has_value()) << what << ": loaded";
  EXPECT_NE(m.status().message().find("'" + name + "'"), std::string::npos) << what << ": " << m.status().message();
}

TEST_P(QuantTypesModel, BadInputIsRefusedByName) {
  const TensorType t = GetParam();
  const std::vector<uint8_t>& image = model_of_type(t);
  ASSERT_FALSE(image.empty());
  auto f = gguf::GgufFile::from_bytes(image);
  ASSERT_TRUE(f.has_value());
  // The tensor whose data ends last, and another one.
  const gguf::TensorInfo* last = nullptr;
  for (const gguf::TensorInfo& ti : f->tensors()) {
    if (!last || ti.offset > last->offset) last = &ti;
  }
  ASSERT_TRUE(last && last->type == t);
  const std::string name = last->name;
  const size_t data_pos = size_t(f->data_offset() + last->offset);
  const size_t nbytes = size_t(last->nbytes);

  // Truncated inside its last block, in its middle, at its first byte.
  for (size_t cut : {data_pos + nbytes - 1, data_pos + nbytes / 2, data_pos + 1}) {
    expect_refused(std::vector<uint8_t>(image.begin(), image.begin() + long(cut)), name,
                   "truncated at " + std::to_string(cut));
  }

  const std::string victim = "blk.1.ffn_up.weight";
  const size_t info = tensor_info_pos(image, victim);
  ASSERT_GT(info, 0u);
  uint32_t n_dims;
  std::memcpy(&n_dims, image.data() + info, 4);
  ASSERT_EQ(n_dims, 2u);
  const size_t ne0_pos = info + 4, type_pos = info + 4 + 8 * n_dims;
  uint32_t type_id;
  std::memcpy(&type_id, image.data() + type_pos, 4);
  ASSERT_EQ(type_id, uint32_t(t));

  // A row that is not a whole number of blocks (240 is not a multiple of 32, 64, 128 or 256).
  {
    std::vector<uint8_t> bad = image;
    const uint64_t ne0 = 240;
    std::memcpy(bad.data() + ne0_pos, &ne0, 8);
    expect_refused(bad, victim, "row of 240");
  }
  // Type ids beyond the known ones, and NVFP4 (read, never computed: refused at load by name).
  for (uint32_t id : {43u, 44u, 100u, 0xffffffffu, uint32_t(TensorType::NVFP4)}) {
    std::vector<uint8_t> bad = image;
    std::memcpy(bad.data() + type_pos, &id, 4);
    expect_refused(bad, victim, "type id " + std::to_string(id));
  }
  // Every new type's id on a tensor of another geometry: refused by name where its data would run
  // past the file, else loads (the blocks are read as that type) and decodes.
  for (TensorType u : kNewTypes) {
    std::vector<uint8_t> bad = image;
    const uint32_t uid = uint32_t(u);
    std::memcpy(bad.data() + type_pos, &uid, 4);
    auto m = load_image(bad);
    if (!m) {
      EXPECT_NE(m.status().message().find(victim), std::string::npos) << m.status().message();
      continue;
    }
    EXPECT_FALSE(run_greedy(*m, 1).empty());
  }

  // Random bytes in every block of every matrix: scales of any value (NaN and infinity included),
  // every code. Loads and decodes (the logits may be non-finite), never crashes.
  std::mt19937 rng{uint32_t(t)};
  std::vector<uint8_t> noisy = image;
  for (const gguf::TensorInfo& ti : f->tensors()) {
    if (ti.n_dims != 2) continue;
    uint8_t* p = noisy.data() + f->data_offset() + ti.offset;
    for (uint64_t i = 0; i < ti.nbytes; ++i) p[i] = uint8_t(rng());
  }
  auto m = load_image(noisy);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  const auto logits = run_greedy(*m, 2);
  EXPECT_EQ(logits.size(), 3u);
}

// An MXFP4 matrix with one block whose E8M0 scale the packed tile's f16 cannot hold (exponent
// 100, non-zero levels) keeps the GGUF layout and goes through the row kernels, while the others
// are packed where this CPU has MXFP4 packed kernels (x86-64, AArch64); the logits stay within
// the usual distance of the F32 twin.
TEST(QuantTypesModelMxfp4, ScalesOutsideF16StayUnpacked) {
  const TensorType t = TensorType::MXFP4;
  const std::vector<uint8_t>& image = model_of_type(t);
  ASSERT_FALSE(image.empty());
  auto f = gguf::GgufFile::from_bytes(image);
  ASSERT_TRUE(f.has_value());
  std::vector<uint8_t> bad = image;
  bool found = false;
  for (const gguf::TensorInfo& ti : f->tensors()) {
    if (ti.name != "blk.1.ffn_down.weight") continue;
    ASSERT_EQ(ti.type, t);
    uint8_t* blk = bad.data() + f->data_offset() + ti.offset + 17 * 5;  // row 0, block 5
    blk[0] = 100;
    blk[1] = 0x31;
    found = true;
  }
  ASSERT_TRUE(found);
  auto m = load_image(bad);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  const model::LayerWeights& l = (*m)->weights().layers[1];
  EXPECT_EQ(l.ffn_down.packed, nullptr);
  const bool packs = model::detail::repacking_enabled() && quant::packed_kernels_available(t);
  EXPECT_EQ(l.ffn_up.packed != nullptr, packs);
  EXPECT_EQ((*m)->weights().layers[0].ffn_down.packed != nullptr, packs);
  auto twin = load_image(f32_twin(bad));
  ASSERT_TRUE(twin.has_value()) << twin.status().message();
  const auto got = run_greedy(*m, 2);
  ASSERT_EQ(got.size(), 3u);
  std::vector<int32_t> ids = {argmax_of(got[0]), argmax_of(got[1])};
  const auto want = run_greedy(*twin, 2, &ids);
  ASSERT_EQ(want.size(), got.size());
  for (size_t s = 0; s < got.size(); ++s) {
    ASSERT_EQ(got[s].size(), want[s].size());
    EXPECT_LE(max_abs_diff(got[s], want[s]) / max_abs(want[s]), 5e-2f) << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantTypesModel, ::testing::ValuesIn(kNewTypes),
                         [](const auto& info) { return lower_name(info.param); });

}  // namespace
}  // namespace loom::test
