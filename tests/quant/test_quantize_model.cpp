// The model quantizer (src/model/quantize_model.h, quantize_rules.h) and `loom quantize`.
//
// Against llama-quantize: golden/kq/synth-llama-kq-f32.gguf is quantized in memory to every mix
// of golden/kq/ and the result must be the golden file byte for byte (metadata, tensor order in
// llama.cpp's order, types, data, padding), its tensor types must add up to the README's table,
// and the model must load and decode prompt 0 within 3e-2 * max|golden| of llama.cpp's logits.
// The default (input) tensor order is checked tensor by tensor. Then the rules on synthetic
// models (32 layers: llama.cpp's well-known 7B Q4_K_M mix of 33 Q6_K tensors; GQA; tied
// embeddings; fallbacks for row lengths that do not split into blocks), re-quantization, and the
// command line (exit codes, messages, no partial output).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "base/half.h"
#include "context/context.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "quant/quant.h"
#include "model/imatrix.h"
#include "model/quantize_model.h"
#include "quant/iq_quantize.h"
#include "test_util.h"

namespace loom::quant {
namespace {

using model::file_type_info;
using model::file_types;
using model::FileType;
using model::parse_file_type;
using model::plan_tensor_types;
using model::quantize_model;
using model::QuantizeParams;
using model::QuantizeStats;
using model::TensorPlan;

namespace fs = std::filesystem;
using loom::test::quote;
using loom::test::run_loom;
using loom::test::shared_path;

const gguf::GgufFile* source_model() {
  static const gguf::GgufFile* f = []() -> const gguf::GgufFile* {
    const std::string path = shared_path("golden/kq/synth-llama-kq-f32.gguf");
    if (path.empty()) return nullptr;
    auto g = gguf::GgufFile::open(path);
    EXPECT_TRUE(g.has_value()) << g.status().message();
    return g ? new gguf::GgufFile(std::move(*g)) : nullptr;
  }();
  return f;
}

// A scratch folder removed when the program ends.
const fs::path& scratch_dir() { return test::scratch_dir("loom_quantize_test"); }

gguf::GgufFile parse(const std::vector<uint8_t>& bytes) {
  auto f = gguf::GgufFile::from_bytes(bytes);
  EXPECT_TRUE(f.has_value()) << f.status().message();
  return f ? std::move(*f) : gguf::GgufFile{};
}

// "q4_k:20 q6_k:3 f32:7" (types in ascending id order).
std::string type_counts(const gguf::GgufFile& f) {
  std::map<uint32_t, int> n;
  for (const auto& t : f.tensors()) ++n[uint32_t(t.type)];
  std::string s;
  for (const auto& [id, c] : n) {
    if (!s.empty()) s += ' ';
    s.append(tensor_type_name(TensorType(id)));
    s += ':';
    s += std::to_string(c);
  }
  return s;
}

// Every tensor of `got` has the type and bytes of the tensor of the same name in `want`.
void expect_same_tensors(const gguf::GgufFile& got, const gguf::GgufFile& want, const std::string& label) {
  ASSERT_EQ(got.tensors().size(), want.tensors().size()) << label;
  for (const auto& t : got.tensors()) {
    const gguf::TensorInfo* w = want.find_tensor(t.name);
    ASSERT_NE(w, nullptr) << label << " " << t.name;
    EXPECT_EQ(t.type, w->type) << label << " " << t.name << ": " << tensor_type_name(t.type) << " vs "
                               << tensor_type_name(w->type);
    EXPECT_EQ(t.ne, w->ne) << label << " " << t.name;
    if (t.type == w->type && t.nbytes == w->nbytes) {
      const int differ = std::memcmp(t.data, w->data, size_t(t.nbytes));
      EXPECT_EQ(differ, 0) << label << " " << t.name << " (" << tensor_type_name(t.type) << "): bytes differ";
    }
  }
}

std::vector<float> last_logits(const std::shared_ptr<const Model>& m, const std::vector<int32_t>& ids) {
  ContextParams cp;
  cp.n_ctx = 128;
  cp.n_batch = 128;
  cp.n_ubatch = 128;
  cp.n_threads = 2;
  auto ctx = Context::create(m, cp);
  EXPECT_TRUE(ctx.has_value()) << ctx.status().message();
  if (!ctx) return {};
  Status st = (*ctx)->decode(Batch::from_tokens(ids, 0));
  EXPECT_TRUE(st.is_ok()) << st.message();
  auto l = (*ctx)->logits(-1);
  EXPECT_TRUE(l.has_value());
  return l ? std::vector<float>(l->begin(), l->end()) : std::vector<float>{};
}

// Loads `path` with Model::load and compares prompt 0's last logits with golden/kq/<golden>.json.
void check_logits(const std::string& path, const std::string& golden, float rel_tol) {
  auto m = Model::load(path);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  const std::string json_path = shared_path("golden/kq/" + golden + ".json");
  ASSERT_FALSE(json_path.empty());
  const auto g = nlohmann::json::parse(loom::test::read_text_file(json_path));
  const auto& run = g["runs"][0];
  const auto want = loom::test::read_f32_file(shared_path("golden/kq/" + run["last_logits_file"].get<std::string>()));
  const auto got = last_logits(*m, run["prompt_ids"].get<std::vector<int32_t>>());
  ASSERT_EQ(got.size(), want.size());
  const float rel = loom::test::max_abs_diff(got, want) / loom::test::max_abs(want);
  EXPECT_LE(rel, rel_tol) << golden;
  std::printf("%-8s prompt 0 last logits: max|d|/max|golden| = %.3g\n", golden.c_str(), double(rel));
}

Expected<gguf::GgufWriter> quantize(const gguf::GgufFile& in, FileType ftype, bool llama_order, int threads = 2,
                                    bool allow_requantize = false) {
  QuantizeParams p;
  p.ftype = ftype;
  p.n_threads = threads;
  p.llama_cpp_order = llama_order;
  p.allow_requantize = allow_requantize;
  return quantize_model(in, p);
}

// ---- file types ----

TEST(QuantizeModel, FileTypeNames) {
  EXPECT_EQ(file_types().size(), 35u);  // llama-quantize's list less COPY and the Q3_K/Q4_K/Q5_K aliases
  EXPECT_EQ(parse_file_type("Q4_K_M"), FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(parse_file_type("q4_k_m"), FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(parse_file_type("bf16"), FileType::MOSTLY_BF16);
  EXPECT_EQ(parse_file_type("F32"), FileType::ALL_F32);
  EXPECT_FALSE(parse_file_type("q4_k").has_value());
  EXPECT_EQ(parse_file_type("IQ2_XXS"), FileType::MOSTLY_IQ2_XXS);
  EXPECT_EQ(parse_file_type("mxfp4_moe"), FileType::MOSTLY_MXFP4_MOE);
  EXPECT_EQ(parse_file_type("15"), FileType::MOSTLY_Q4_K_M);  // llama-quantize's numbers too
  EXPECT_FALSE(parse_file_type("39").has_value());            // NVFP4: not a llama-quantize type
  EXPECT_FALSE(parse_file_type("nvfp4").has_value());
  EXPECT_FALSE(parse_file_type("").has_value());
  for (const auto& f : file_types()) {
    EXPECT_EQ(parse_file_type(f.name), f.ftype) << f.name;
    EXPECT_EQ(file_type_info(f.ftype).base, f.base) << f.name;
    EXPECT_TRUE(model::can_quantize_to(f.base)) << f.name;
  }
}

// ---- against llama-quantize ----

struct MixCase {
  const char* name;
  uint32_t file_type;
  const char* counts;  // the README's table, plus the 7 F32 norms
};
void PrintTo(const MixCase& c, std::ostream* os) { *os << c.name; }

const MixCase kMixes[] = {
    {"q4_k_m", 15, "f32:7 q4_k:20 q6_k:3"},
    {"q5_k_m", 17, "f32:7 q5_k:20 q6_k:3"},
    {"q6_k", 18, "f32:7 q6_k:23"},
    {"q3_k_m", 12, "f32:7 q3_k:13 q4_k:7 q5_k:2 q6_k:1"},
    {"q2_k", 10, "f32:7 q2_k:13 q3_k:9 q6_k:1"},
    {"q4_k_s", 14, "f32:7 q4_k:19 q5_k:3 q6_k:1"},
    {"iq4_nl", 25, "f32:7 q6_k:1 iq4_nl:22"},
    {"q4_1", 3, "f32:7 q4_1:22 q6_k:1"},
    {"q5_0", 8, "f32:7 q5_0:22 q6_k:1"},
    {"q5_1", 9, "f32:7 q5_1:22 q6_k:1"},
    {"q8_0", 7, "f32:7 q8_0:23"},
    {"bf16", 32, "f32:7 bf16:23"},
    {"iq4_xs", 30, "f32:7 q6_k:1 iq4_xs:22"},
    {"q5_k_s", 16, "f32:7 q5_k:22 q6_k:1"},
    {"q3_k_s", 11, "f32:7 q3_k:22 q6_k:1"},
    {"q3_k_l", 13, "f32:7 q3_k:13 q5_k:9 q6_k:1"},
    {"q4_0", 2, "f32:7 q4_0:22 q6_k:1"},
};

class QuantizeMix : public ::testing::TestWithParam<MixCase> {};

TEST_P(QuantizeMix, ByteIdenticalWithLlamaQuantizeAndDecodes) {
  const MixCase& mc = GetParam();
  const gguf::GgufFile* src = source_model();
  ASSERT_NE(src, nullptr);
  const auto ftype = parse_file_type(mc.name);
  ASSERT_TRUE(ftype.has_value());
  ASSERT_EQ(uint32_t(*ftype), mc.file_type);
  const std::string golden_name = std::string("synth-llama-kq-") + mc.name;
  const std::string golden_path = shared_path("golden/kq/" + golden_name + ".gguf");
  ASSERT_FALSE(golden_path.empty());
  const std::vector<uint8_t> golden = loom::test::read_file(golden_path);

  auto w = quantize(*src, *ftype, /*llama_order=*/true);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  const std::vector<uint8_t> got = w->to_bytes();
  EXPECT_EQ(got.size(), golden.size()) << mc.name;
  EXPECT_TRUE(got == golden) << mc.name << ": the file differs from llama-quantize's";

  const gguf::GgufFile gf = parse(got);
  auto want = gguf::GgufFile::from_bytes(golden);
  ASSERT_TRUE(want.has_value());
  expect_same_tensors(gf, *want, mc.name);
  EXPECT_EQ(type_counts(gf), mc.counts);
  EXPECT_EQ(*gf.get_int("general.file_type"), int64_t(mc.file_type));
  EXPECT_EQ(*gf.get_int("general.quantization_version"), 2);

  const fs::path out = scratch_dir() / (golden_name + ".gguf");
  ASSERT_TRUE(w->write_file(out.string()).is_ok());
  check_logits(out.string(), golden_name, 3e-2f);
}

INSTANTIATE_TEST_SUITE_P(Mixes, QuantizeMix, ::testing::ValuesIn(kMixes),
                         [](const auto& info) { return std::string(info.param.name); });

// The default keeps the input's tensor order; types and bytes are the same, the metadata too.
TEST(QuantizeModel, DefaultOrderKeepsInputOrder) {
  const gguf::GgufFile* src = source_model();
  ASSERT_NE(src, nullptr);
  for (const char* name : {"q3_k_m", "q4_0"}) {
    auto w = quantize(*src, *parse_file_type(name), /*llama_order=*/false, /*threads=*/1);
    ASSERT_TRUE(w.has_value()) << w.status().message();
    const gguf::GgufFile gf = parse(w->to_bytes());
    ASSERT_EQ(gf.tensors().size(), src->tensors().size());
    for (size_t i = 0; i < gf.tensors().size(); ++i) EXPECT_EQ(gf.tensors()[i].name, src->tensors()[i].name);
    auto want = gguf::GgufFile::open(shared_path(std::string("golden/kq/synth-llama-kq-") + name + ".gguf"));
    ASSERT_TRUE(want.has_value());
    expect_same_tensors(gf, *want, name);
    ASSERT_EQ(gf.metadata().size(), want->metadata().size());
    for (size_t i = 0; i < gf.metadata().size(); ++i) {
      EXPECT_EQ(gf.metadata()[i].key, want->metadata()[i].key);
      EXPECT_EQ(gguf::to_string(gf.metadata()[i].value, 1u << 20), gguf::to_string(want->metadata()[i].value, 1u << 20));
    }
    EXPECT_EQ(gf.alignment(), want->alignment());
  }
}

// F16 and F32 targets (not in golden/kq): every 2-D weight converted exactly, norms kept.
TEST(QuantizeModel, FloatTargets) {
  const gguf::GgufFile* src = source_model();
  ASSERT_NE(src, nullptr);
  auto w32 = quantize(*src, FileType::ALL_F32, false);
  ASSERT_TRUE(w32.has_value()) << w32.status().message();
  const gguf::GgufFile f32 = parse(w32->to_bytes());
  expect_same_tensors(f32, *src, "f32");
  EXPECT_EQ(*f32.get_int("general.file_type"), 0);

  auto w16 = quantize(*src, FileType::MOSTLY_F16, false);
  ASSERT_TRUE(w16.has_value()) << w16.status().message();
  const gguf::GgufFile f16 = parse(w16->to_bytes());
  EXPECT_EQ(type_counts(f16), "f32:7 f16:23");
  EXPECT_EQ(*f16.get_int("general.file_type"), 1);
  for (const auto& t : f16.tensors()) {
    const gguf::TensorInfo* s = src->find_tensor(t.name);
    ASSERT_NE(s, nullptr);
    if (t.type == TensorType::F32) {
      EXPECT_EQ(std::memcmp(t.data, s->data, size_t(t.nbytes)), 0) << t.name;
      continue;
    }
    int bad = 0;
    for (int64_t i = 0; i < t.n_elements(); ++i) {
      float x;
      uint16_t h;
      std::memcpy(&x, s->data + 4 * i, 4);
      std::memcpy(&h, t.data + 2 * i, 2);
      bad += h != f32_to_f16(x);
    }
    EXPECT_EQ(bad, 0) << t.name;
  }
  const fs::path out = scratch_dir() / "f16.gguf";
  ASSERT_TRUE(w16->write_file(out.string()).is_ok());
  check_logits(out.string(), "synth-llama-kq-f32", 1e-2f);
}

// ---- re-quantization ----

TEST(QuantizeModel, RequantizeNeedsPermission) {
  auto q8 = gguf::GgufFile::open(shared_path("golden/kq/synth-llama-kq-q8_0.gguf"));
  ASSERT_TRUE(q8.has_value());
  auto refused = quantize(*q8, FileType::MOSTLY_Q4_K_M, false);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--allow-requantize"), std::string::npos) << refused.status().message();

  auto w = quantize(*q8, FileType::MOSTLY_Q4_K_M, false, 2, /*allow_requantize=*/true);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  const gguf::GgufFile gf = parse(w->to_bytes());
  auto km = gguf::GgufFile::open(shared_path("golden/kq/synth-llama-kq-q4_k_m.gguf"));
  ASSERT_TRUE(km.has_value());
  for (const auto& t : gf.tensors()) EXPECT_EQ(t.type, km->find_tensor(t.name)->type) << t.name;
  // Requantized = quantize(dequantize(Q8_0)).
  const gguf::TensorInfo* in = q8->find_tensor("blk.1.ffn_down.weight");
  const gguf::TensorInfo* out = gf.find_tensor("blk.1.ffn_down.weight");
  ASSERT_TRUE(in && out);
  ASSERT_EQ(out->type, TensorType::Q4_K);
  const int64_t n0 = in->ne[0];
  std::vector<float> row(static_cast<size_t>(n0));
  std::vector<uint8_t> q(size_t(row_bytes(TensorType::Q4_K, n0)));
  for (int64_t r = 0; r < in->n_rows(); ++r) {
    dequantize_row(TensorType::Q8_0, in->data + r * row_bytes(TensorType::Q8_0, n0), row.data(), n0);
    quantize_row(TensorType::Q4_K, row.data(), q.data(), n0);
    ASSERT_EQ(std::memcmp(q.data(), out->data + r * int64_t(q.size()), q.size()), 0) << "row " << r;
  }

  // Nothing to convert when every tensor already has its target type: no permission needed.
  auto same = quantize(*km, FileType::MOSTLY_Q4_K_M, false);
  ASSERT_TRUE(same.has_value()) << same.status().message();
  expect_same_tensors(parse(same->to_bytes()), *km, "q4_k_m -> q4_k_m");
}

// F16 and BF16 are not "quantized": they convert without --allow-requantize.
TEST(QuantizeModel, Bf16InputConvertsWithoutPermission) {
  auto bf = gguf::GgufFile::open(shared_path("golden/kq/synth-llama-kq-bf16.gguf"));
  ASSERT_TRUE(bf.has_value());
  auto w = quantize(*bf, FileType::MOSTLY_Q8_0, false);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  const gguf::GgufFile gf = parse(w->to_bytes());
  EXPECT_EQ(type_counts(gf), "f32:7 q8_0:23");
  const gguf::TensorInfo* in = bf->find_tensor("blk.0.attn_q.weight");
  const gguf::TensorInfo* out = gf.find_tensor("blk.0.attn_q.weight");
  ASSERT_TRUE(in && out);
  std::vector<float> x(size_t(in->n_elements()));
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, in->data + 2 * i, 2);
    x[i] = bf16_to_f32(h);
  }
  std::vector<uint8_t> q(size_t(out->nbytes));
  const int64_t n0 = in->ne[0], rb = row_bytes(TensorType::Q8_0, n0);
  for (int64_t r = 0; r < in->n_rows(); ++r) ref::quantize_row(TensorType::Q8_0, x.data() + r * n0, q.data() + r * rb, n0);
  EXPECT_EQ(std::memcmp(q.data(), out->data, q.size()), 0);
}

// ---- the rules on synthetic models ----

struct SynthSpec {
  int n_layer = 32;
  int n_head = 32;
  int n_head_kv = 32;
  int64_t n_row = 256;    // row length of the weights
  bool tied = false;      // no output.weight
  bool reversed = false;  // tensors in reverse order
  int64_t extra_row = 0;  // > 0: adds blk.0.extra_proj.weight with rows of this length
};

// A llama-shaped model with tiny 2-row weights (enough for the type rules).
gguf::GgufFile synth_model(const SynthSpec& s) {
  gguf::GgufWriter w;
  EXPECT_TRUE(w.set_string("general.architecture", "llama").is_ok());
  EXPECT_TRUE(w.set_u32("llama.block_count", uint32_t(s.n_layer)).is_ok());
  EXPECT_TRUE(w.set_u32("llama.attention.head_count", uint32_t(s.n_head)).is_ok());
  EXPECT_TRUE(w.set_u32("llama.attention.head_count_kv", uint32_t(s.n_head_kv)).is_ok());
  struct T {
    std::string name;
    std::vector<int64_t> ne;
  };
  std::vector<T> ts{{"token_embd.weight", {s.n_row, 4}}, {"output_norm.weight", {s.n_row}}};
  if (!s.tied) ts.push_back({"output.weight", {s.n_row, 4}});
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* n : {"attn_norm", "ffn_norm"}) ts.push_back({p + n + ".weight", {s.n_row}});
    for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
      ts.push_back({p + n + ".weight", {s.n_row, 2}});
    }
  }
  if (s.extra_row > 0) ts.push_back({"blk.0.extra_proj.weight", {s.extra_row, 2}});
  if (s.reversed) std::reverse(ts.begin(), ts.end());
  for (const T& t : ts) {
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 7919) % 97) / 97.0f - 0.5f;
    const auto* b = reinterpret_cast<const uint8_t*>(v.data());
    EXPECT_TRUE(w.add_tensor(t.name, TensorType::F32, t.ne, std::span<const uint8_t>(b, v.size() * 4)).is_ok());
  }
  return parse(w.to_bytes());
}

std::map<std::string, TensorType> plan_of(const gguf::GgufFile& f, FileType ftype) {
  QuantizeParams p;
  p.ftype = ftype;
  auto plans = plan_tensor_types(f, p);
  EXPECT_TRUE(plans.has_value()) << plans.status().message();
  std::map<std::string, TensorType> m;
  if (!plans) return m;
  for (size_t i = 0; i < f.tensors().size(); ++i) m[f.tensors()[i].name] = (*plans)[i].type;
  return m;
}

int count(const std::map<std::string, TensorType>& m, TensorType t) {
  return int(std::count_if(m.begin(), m.end(), [&](const auto& e) { return e.second == t; }));
}

std::string layers_with(const std::map<std::string, TensorType>& m, const std::string& tensor, TensorType t, int n_layer) {
  std::string s;
  for (int l = 0; l < n_layer; ++l) {
    if (m.at("blk." + std::to_string(l) + "." + tensor + ".weight") == t) s += (s.empty() ? "" : ",") + std::to_string(l);
  }
  return s;
}

// llama.cpp's 7B (32 layers, no GQA) Q4_K_M: 193 Q4_K, 33 Q6_K (output, 16 attn_v, 16 ffn_down).
TEST(QuantizeRules, Q4KMOn32Layers) {
  for (bool reversed : {false, true}) {
    SynthSpec s;
    s.reversed = reversed;
    const auto m = plan_of(synth_model(s), FileType::MOSTLY_Q4_K_M);
    EXPECT_EQ(count(m, TensorType::Q4_K), 193);
    EXPECT_EQ(count(m, TensorType::Q6_K), 33);
    EXPECT_EQ(count(m, TensorType::F32), 65);
    const std::string more_bits = "0,1,2,3,6,9,12,15,18,21,24,27,28,29,30,31";
    EXPECT_EQ(layers_with(m, "attn_v", TensorType::Q6_K, 32), more_bits) << "reversed " << reversed;
    EXPECT_EQ(layers_with(m, "ffn_down", TensorType::Q6_K, 32), more_bits) << "reversed " << reversed;
    EXPECT_EQ(m.at("output.weight"), TensorType::Q6_K);
    EXPECT_EQ(m.at("token_embd.weight"), TensorType::Q4_K);
  }
}

TEST(QuantizeRules, OtherMixesOn32Layers) {
  const gguf::GgufFile f = synth_model({});
  auto m = plan_of(f, FileType::MOSTLY_Q3_K_M);
  EXPECT_EQ(layers_with(m, "attn_v", TensorType::Q5_K, 32), "0,1");
  EXPECT_EQ(layers_with(m, "ffn_down", TensorType::Q5_K, 32), "0,1");  // n_layer/16
  EXPECT_EQ(count(m, TensorType::Q4_K), 30 + 30 + 32);                 // attn_v, ffn_down, attn_output
  m = plan_of(f, FileType::MOSTLY_Q4_K_S);
  EXPECT_EQ(layers_with(m, "attn_v", TensorType::Q5_K, 32), "0,1,2,3");
  EXPECT_EQ(layers_with(m, "ffn_down", TensorType::Q5_K, 32), "0,1,2,3");  // n_layer/8
  m = plan_of(f, FileType::MOSTLY_IQ4_XS);
  EXPECT_EQ(layers_with(m, "ffn_down", TensorType::Q5_K, 32), "0,1,2,3");
  EXPECT_EQ(count(m, TensorType::IQ4_XS), 32 * 7 + 1 - 4);
  m = plan_of(f, FileType::MOSTLY_Q2_K);
  EXPECT_EQ(count(m, TensorType::Q3_K), 3 * 32);  // attn_v, ffn_down, attn_output
  EXPECT_EQ(m.at("blk.5.attn_v.weight"), TensorType::Q3_K);
  m = plan_of(f, FileType::MOSTLY_Q8_0);
  EXPECT_EQ(m.at("output.weight"), TensorType::Q8_0);
  m = plan_of(f, FileType::MOSTLY_BF16);
  EXPECT_EQ(m.at("output.weight"), TensorType::BF16);
}

TEST(QuantizeRules, GroupedQueryAttention) {
  SynthSpec s;
  s.n_layer = 4;
  s.n_head = 8;
  s.n_head_kv = 2;  // n_gqa 4
  const gguf::GgufFile f = synth_model(s);
  auto m = plan_of(f, FileType::MOSTLY_Q2_K);
  EXPECT_EQ(layers_with(m, "attn_v", TensorType::Q4_K, 4), "0,1,2,3");
  m = plan_of(f, FileType::MOSTLY_IQ4_NL);
  EXPECT_EQ(layers_with(m, "attn_v", TensorType::Q5_K, 4), "0,1,2,3");
}

// Without output.weight the token embeddings are the output and get its type.
TEST(QuantizeRules, TiedEmbeddings) {
  SynthSpec s;
  s.n_layer = 2;
  s.tied = true;
  auto m = plan_of(synth_model(s), FileType::MOSTLY_Q4_0);
  EXPECT_EQ(m.at("token_embd.weight"), TensorType::Q6_K);
  m = plan_of(synth_model(s), FileType::MOSTLY_Q8_0);
  EXPECT_EQ(m.at("token_embd.weight"), TensorType::Q8_0);
}

// Rows that do not split into the chosen type's blocks.
TEST(QuantizeRules, RowLengthFallbacks) {
  SynthSpec s;
  s.n_layer = 2;
  s.n_row = 96;  // 3 x 32: not a multiple of 256
  const gguf::GgufFile f = synth_model(s);
  auto m = plan_of(f, FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(m.at("output.weight"), TensorType::Q8_0);
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), TensorType::Q5_0);  // Q4_K -> Q5_0
  EXPECT_EQ(m.at("blk.1.attn_v.weight"), TensorType::Q8_0);  // Q6_K -> Q8_0
  EXPECT_EQ(m.at("blk.0.attn_norm.weight"), TensorType::F32);
  m = plan_of(f, FileType::MOSTLY_Q5_K_S);
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), TensorType::Q5_1);
  m = plan_of(f, FileType::MOSTLY_Q2_K);
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), TensorType::Q4_0);  // current llama.cpp (older ones: IQ4_NL)
  m = plan_of(f, FileType::MOSTLY_TQ1_0);
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), TensorType::Q4_0);
  m = plan_of(f, FileType::MOSTLY_Q2_0);
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), TensorType::Q4_0);  // 96 is not a multiple of 64
  m = plan_of(f, FileType::MOSTLY_IQ4_XS);
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), TensorType::IQ4_NL);
  m = plan_of(f, FileType::MOSTLY_Q4_0);
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), TensorType::Q4_0);

  // The fallbacks are written and read back.
  QuantizeParams p;
  p.ftype = FileType::MOSTLY_Q3_K_M;
  QuantizeStats stats;
  auto w = quantize_model(f, p, {}, &stats);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  EXPECT_EQ(stats.n_fallback, 2 * 7 + 1);  // every 2-D block weight and token_embd; output is Q8_0 by rule
  const gguf::GgufFile gf = parse(w->to_bytes());
  EXPECT_EQ(gf.find_tensor("blk.0.attn_q.weight")->type, TensorType::Q4_0);
  EXPECT_EQ(gf.find_tensor("blk.0.attn_output.weight")->type, TensorType::Q5_0);

  // Rows of 48 are not even a multiple of 32: F16 after the fallback, also for the 32-element
  // types (legacy types; output.weight, whose rule picks Q8_0), as in current llama.cpp; an error
  // for a type with larger blocks and no fallback (Q1_0).
  s.extra_row = 48;
  s.n_row = 256;
  const gguf::GgufFile g = synth_model(s);
  m = plan_of(g, FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(m.at("blk.0.extra_proj.weight"), TensorType::F16);
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), TensorType::Q4_K);
  m = plan_of(g, FileType::MOSTLY_Q4_0);
  EXPECT_EQ(m.at("blk.0.extra_proj.weight"), TensorType::F16);
  p.ftype = FileType::MOSTLY_Q1_0;
  auto bad = plan_tensor_types(g, p);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(bad.status().message().find("extra_proj"), std::string::npos) << bad.status().message();
  s.extra_row = 0;
  s.n_row = 48;
  m = plan_of(synth_model(s), FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(m.at("output.weight"), TensorType::F16);
}

// Tensors llama-quantize leaves alone whatever the type: 1-D, norms, 2-D tensors not named
// *weight, expert gating, position embeddings; tensors that collapse to 1-D (ne[1] == 1).
TEST(QuantizeRules, TensorsThatStay) {
  gguf::GgufWriter w;
  ASSERT_TRUE(w.set_string("general.architecture", "llama").is_ok());
  ASSERT_TRUE(w.set_u32("llama.block_count", 1).is_ok());
  const std::vector<std::pair<std::string, std::vector<int64_t>>> ts = {
      {"blk.0.attn_q.weight", {256, 2}},       {"blk.0.attn_q.bias", {256, 2}},    {"blk.0.attn_norm.weight", {256, 2}},
      {"blk.0.ffn_gate_inp.weight", {256, 2}}, {"position_embd.weight", {256, 2}}, {"blk.0.ffn_up.weight", {256, 1}},
      {"blk.0.attn_k.weight", {256}}};
  for (const auto& [name, ne] : ts) {
    std::vector<uint8_t> b(size_t(ne[0] * (ne.size() > 1 ? ne[1] : 1) * 4));
    ASSERT_TRUE(w.add_tensor(name, TensorType::F32, ne, b).is_ok());
  }
  const auto m = plan_of(parse(w.to_bytes()), FileType::MOSTLY_Q8_0);
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), TensorType::Q8_0);
  EXPECT_EQ(count(m, TensorType::F32), 6);
}

// The IQ1/IQ2/IQ3 mixes, TQ and MXFP4_MOE on 32 layers (with an importance matrix where llama-quantize
// needs one; its contents do not matter to the plan).
model::Imatrix dummy_imatrix() {
  model::Imatrix im;
  im.entries["blk.0.attn_q.weight"] = std::vector<float>(256, 1.0f);
  return im;
}

std::map<std::string, TensorType> plan_with(const gguf::GgufFile& f, FileType ftype, const model::Imatrix* im,
                                            bool pure = false) {
  QuantizeParams p;
  p.ftype = ftype;
  p.imatrix = im;
  p.pure = pure;
  auto plans = plan_tensor_types(f, p);
  EXPECT_TRUE(plans.has_value()) << plans.status().message();
  std::map<std::string, TensorType> m;
  if (!plans) return m;
  for (size_t i = 0; i < f.tensors().size(); ++i) m[f.tensors()[i].name] = (*plans)[i].type;
  return m;
}

TEST(QuantizeRules, IqMixesOn32Layers) {
  const gguf::GgufFile f = synth_model({});
  const model::Imatrix im = dummy_imatrix();
  auto m = plan_with(f, FileType::MOSTLY_IQ2_XXS, &im);
  EXPECT_EQ(m.at("output.weight"), TensorType::Q5_K);
  EXPECT_EQ(m.at("token_embd.weight"), TensorType::Q2_K);
  EXPECT_EQ(layers_with(m, "attn_v", TensorType::Q2_K, 32),
            "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31");
  EXPECT_EQ(layers_with(m, "ffn_down", TensorType::Q2_K, 32), "0,1,2,3");
  EXPECT_EQ(m.at("blk.9.attn_output.weight"), TensorType::IQ2_XXS);
  m = plan_with(f, FileType::MOSTLY_IQ1_S, &im);
  EXPECT_EQ(m.at("blk.9.attn_output.weight"), TensorType::IQ2_XXS);
  EXPECT_EQ(m.at("blk.9.attn_q.weight"), TensorType::IQ1_S);
  m = plan_with(f, FileType::MOSTLY_IQ2_M, &im);
  EXPECT_EQ(m.at("token_embd.weight"), TensorType::IQ3_S);
  EXPECT_EQ(m.at("blk.9.attn_v.weight"), TensorType::IQ3_S);
  EXPECT_EQ(m.at("blk.9.ffn_up.weight"), TensorType::IQ2_S);
  m = plan_with(f, FileType::MOSTLY_IQ2_S, &im);
  EXPECT_EQ(m.at("blk.9.ffn_up.weight"), TensorType::IQ2_XS);
  m = plan_with(f, FileType::MOSTLY_IQ3_XS, &im);
  EXPECT_EQ(m.at("blk.9.attn_q.weight"), TensorType::IQ3_XXS);
  EXPECT_EQ(m.at("blk.9.attn_k.weight"), TensorType::IQ3_XXS);
  EXPECT_EQ(layers_with(m, "ffn_gate", TensorType::IQ3_S, 32), "0,1,2,3,28,29,30,31");
  EXPECT_EQ(layers_with(m, "ffn_up", TensorType::IQ3_XXS, 32).substr(0, 6), "4,5,6,");
  m = plan_with(f, FileType::MOSTLY_IQ3_XXS, &im);
  EXPECT_EQ(m.at("blk.9.attn_v.weight"), TensorType::IQ3_XXS);  // IQ3_S without an imatrix
  EXPECT_EQ(m.at("blk.9.attn_q.weight"), TensorType::IQ2_S);
  EXPECT_EQ(m.at("blk.9.ffn_down.weight"), TensorType::IQ3_XXS);
  m = plan_with(f, FileType::MOSTLY_IQ3_M, nullptr);
  EXPECT_EQ(m.at("blk.9.attn_v.weight"), TensorType::Q4_K);
  EXPECT_EQ(m.at("blk.9.attn_output.weight"), TensorType::Q4_K);
  EXPECT_EQ(layers_with(m, "ffn_down", TensorType::Q4_K, 32), "0,1,2,3");
  m = plan_with(f, FileType::MOSTLY_TQ2_0, nullptr);
  EXPECT_EQ(m.at("token_embd.weight"), TensorType::Q4_K);
  EXPECT_EQ(m.at("output.weight"), TensorType::Q6_K);
  EXPECT_EQ(m.at("blk.9.ffn_down.weight"), TensorType::TQ2_0);
  m = plan_with(f, FileType::MOSTLY_TQ2_0, nullptr, /*pure=*/true);
  EXPECT_EQ(m.at("token_embd.weight"), TensorType::TQ2_0);
  EXPECT_EQ(m.at("output.weight"), TensorType::TQ2_0);
  m = plan_with(f, FileType::MOSTLY_MXFP4_MOE, nullptr);
  EXPECT_EQ(m.at("output.weight"), TensorType::Q8_0);
  EXPECT_EQ(m.at("token_embd.weight"), TensorType::Q8_0);
  EXPECT_EQ(m.at("blk.9.ffn_down.weight"), TensorType::Q8_0);  // not an expert tensor
  // Without an imatrix the types that need one are refused.
  QuantizeParams p;
  p.ftype = FileType::MOSTLY_IQ2_XXS;
  auto refused = plan_tensor_types(f, p);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("importance matrix"), std::string::npos) << refused.status().message();
  // Q4_0 with an imatrix: Q4_1 for the first eighth of ffn_down.
  m = plan_with(f, FileType::MOSTLY_Q4_0, &im);
  EXPECT_EQ(layers_with(m, "ffn_down", TensorType::Q4_1, 32), "0,1,2,3");
  m = plan_with(f, FileType::MOSTLY_IQ4_XS, &im);  // no Q5_K ffn_down with an imatrix
  EXPECT_EQ(layers_with(m, "ffn_down", TensorType::Q5_K, 32), "");
}

// Flags: --output-tensor-type, --token-embedding-type, --leave-output-tensor.
TEST(QuantizeRules, TypeOverrides) {
  SynthSpec s;
  s.n_layer = 2;
  const gguf::GgufFile f = synth_model(s);
  QuantizeParams p;
  p.ftype = FileType::MOSTLY_Q4_K_M;
  p.output_tensor_type = TensorType::Q8_0;
  p.token_embedding_type = TensorType::Q2_K;
  auto plans = plan_tensor_types(f, p);
  ASSERT_TRUE(plans.has_value()) << plans.status().message();
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    if (f.tensors()[i].name == "output.weight") {
      EXPECT_EQ((*plans)[i].type, TensorType::Q8_0);
    }
    if (f.tensors()[i].name == "token_embd.weight") {
      EXPECT_EQ((*plans)[i].type, TensorType::Q2_K);
    }
  }
  p = {};
  p.ftype = FileType::MOSTLY_Q4_K_M;
  p.quantize_output_tensor = false;
  plans = plan_tensor_types(f, p);
  ASSERT_TRUE(plans.has_value());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    if (f.tensors()[i].name == "output.weight") {
      EXPECT_FALSE((*plans)[i].convert);
    }
  }
}

// MXFP4_MOE on a mixture-of-experts model: the 3-D expert tensors MXFP4, their importance values
// per expert.
TEST(QuantizeRules, Mxfp4MoeExperts) {
  gguf::GgufWriter w;
  ASSERT_TRUE(w.set_string("general.architecture", "llama").is_ok());
  ASSERT_TRUE(w.set_u32("llama.block_count", 1).is_ok());
  ASSERT_TRUE(w.set_u32("llama.expert_count", 4).is_ok());
  const std::vector<std::pair<std::string, std::vector<int64_t>>> ts = {{"token_embd.weight", {64, 4}},
                                                                        {"output.weight", {64, 4}},
                                                                        {"blk.0.attn_q.weight", {64, 64}},
                                                                        {"blk.0.ffn_down_exps.weight", {64, 2, 4}},
                                                                        {"blk.0.ffn_gate_inp.weight", {64, 4}}};
  for (const auto& [name, ne] : ts) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 7919) % 97) / 97.0f - 0.5f;
    const auto* b = reinterpret_cast<const uint8_t*>(v.data());
    ASSERT_TRUE(w.add_tensor(name, TensorType::F32, ne, std::span<const uint8_t>(b, v.size() * 4)).is_ok());
  }
  const gguf::GgufFile f = parse(w.to_bytes());
  const auto m = plan_with(f, FileType::MOSTLY_MXFP4_MOE, nullptr);
  EXPECT_EQ(m.at("blk.0.ffn_down_exps.weight"), TensorType::MXFP4);
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), TensorType::Q8_0);
  EXPECT_EQ(m.at("output.weight"), TensorType::Q8_0);
  EXPECT_EQ(m.at("blk.0.ffn_gate_inp.weight"), TensorType::F32);

  // Q4_0 with per-expert importance values: expert e's rows quantized with expert e's values.
  model::Imatrix im;
  std::vector<float> vals(64 * 4);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = float(1 + (i * 31) % 17) * (i / 64 == 2 ? 100.0f : 1.0f);
  im.entries["blk.0.ffn_down_exps.weight"] = vals;
  QuantizeParams p;
  p.ftype = FileType::MOSTLY_Q4_0;
  p.imatrix = &im;
  p.imatrix_path = "x.imatrix";
  auto q = quantize_model(f, p);
  ASSERT_TRUE(q.has_value()) << q.status().message();
  const gguf::GgufFile gf = parse(q->to_bytes());
  const gguf::TensorInfo* in = f.find_tensor("blk.0.ffn_down_exps.weight");
  const gguf::TensorInfo* out = gf.find_tensor("blk.0.ffn_down_exps.weight");
  ASSERT_TRUE(in && out);
  ASSERT_EQ(out->type, TensorType::Q4_0);
  const int64_t rb = row_bytes(TensorType::Q4_0, 64);
  std::vector<uint8_t> want(size_t(rb * 2));
  for (int e = 0; e < 4; ++e) {
    quantize_chunk(TensorType::Q4_0, reinterpret_cast<const float*>(in->data) + e * 128, want.data(), 2, 64,
                   vals.data() + e * 64);
    EXPECT_EQ(std::memcmp(want.data(), out->data + e * 2 * rb, want.size()), 0) << "expert " << e;
  }
  EXPECT_EQ(*gf.get_int("quantize.imatrix.entries_count"), 1);
  EXPECT_EQ(gf.find("quantize.imatrix.chunks_count"), nullptr);  // chunk_count 0
}

// ---- the command line ----

// No stray temporary or output files in `dir` except the `allowed` names.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(QuantizeCli, WritesLlamaQuantizesFile) {
  const std::string src = shared_path("golden/kq/synth-llama-kq-f32.gguf");
  ASSERT_FALSE(src.empty());
  const fs::path dir = scratch_dir() / "cli_ok";
  fs::create_directories(dir);
  const std::string out = (dir / "q8.gguf").string();
  auto r = run_loom("quantize " + quote(src) + " " + quote(out) + " Q8_0 -t 2 --llama-order");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(loom::test::read_file(out) == loom::test::read_file(shared_path("golden/kq/synth-llama-kq-q8_0.gguf")));
  // Progress on stderr, one line per tensor; the summary on stdout.
  EXPECT_NE(r.err.find("[   1/  30] output.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[  30/  30] blk.2.ffn_up.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("f32    -> q8_0"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("MiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("general.file_type 7"), std::string::npos) << r.out;
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"q8.gguf"});

  // Input order by default; -q silences the progress.
  r = run_loom("quantize -q " + quote(src) + " " + quote(out) + " q4_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  auto f = gguf::GgufFile::open(out);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->tensors().front().name, "token_embd.weight");
  EXPECT_EQ(type_counts(*f), "f32:7 q4_0:22 q6_k:1");
}

TEST(QuantizeCli, ErrorsExitWithOneLineAndNoOutput) {
  const std::string src = shared_path("golden/kq/synth-llama-kq-f32.gguf");
  const std::string q8 = shared_path("golden/kq/synth-llama-kq-q8_0.gguf");
  ASSERT_FALSE(src.empty() || q8.empty());
  const fs::path dir = scratch_dir() / "cli_err";
  fs::create_directories(dir);
  const std::string out = (dir / "out.gguf").string();
  struct Case {
    std::string args;
    int code;
    std::string needle;
  };
  const Case cases[] = {
      {"quantize " + quote((dir / "missing.gguf").string()) + " " + quote(out) + " q4_0", 1, "missing.gguf"},
      {"quantize " + quote(src) + " " + quote(out) + " q4_k", 1, "unknown quantization type 'q4_k'"},
      {"quantize " + quote(src) + " " + quote(out) + " iq5_xxs", 1, "unknown quantization type"},
      {"quantize " + quote(src) + " " + quote(out) + " iq2_xxs", 1, "requires an importance matrix"},
      {"quantize " + quote(q8) + " " + quote(out) + " q4_k_m", 1, "--allow-requantize"},
      {"quantize " + quote(src) + " " + quote((dir / "no_such_dir" / "out.gguf").string()) + " q8_0", 1, "no_such_dir"},
      {"quantize " + quote(src) + " " + quote(out) + " q4_0 -t 0", 2, ""},
      {"quantize " + quote(src) + " " + quote(out), 2, ""},
  };
  for (const Case& c : cases) {
    auto r = run_loom(c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("loom: ", 0), 0u) << c.args << "\n" << r.err;
    if (c.code == 1) {
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << "\n" << r.err;
      EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    }
    EXPECT_TRUE(files_in(dir).empty()) << c.args;
  }

  // A failing run leaves an existing OUT untouched.
  {
    FILE* fp = std::fopen(out.c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    std::fputs("old", fp);
    std::fclose(fp);
  }
  auto r = run_loom("quantize -q " + quote(q8) + " " + quote(out) + " q2_k");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(loom::test::read_text_file(out), "old");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"out.gguf"});
}

}  // namespace
}  // namespace loom::quant
