// GgufFile against the shared models: known facts, typed accessors and their errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "gguf/gguf.h"
#include "test_util.h"

namespace loom::gguf {
namespace {

GgufFile open_or_die(const std::string& rel) {
  const std::string path = test::shared_path(rel);
  auto f = GgufFile::open(path);
  if (!f) ADD_FAILURE() << f.status().message();
  return f ? std::move(f).value() : GgufFile();
}

TEST(GgufReader, Stories260KHeaderAndMetadata) {
  GgufFile f = open_or_die("models/stories260K.gguf");
  ASSERT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.file_size(), 1185504u);
  EXPECT_EQ(f.data_offset(), 14304u);
  EXPECT_EQ(f.metadata().size(), 23u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.metadata().front().key, "general.architecture");

  EXPECT_EQ(f.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f.get_string("general.name").value(), "stories260K");
  EXPECT_EQ(f.get_int("llama.block_count").value(), 5);
  EXPECT_EQ(f.get_uint("llama.embedding_length").value(), 64u);
  EXPECT_EQ(f.get_int("llama.attention.head_count").value(), 8);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv").value(), 4);
  EXPECT_EQ(f.get_int("llama.feed_forward_length").value(), 172);
  EXPECT_EQ(f.get_int("llama.context_length").value(), 512);
  EXPECT_NEAR(f.get_float("llama.attention.layer_norm_rms_epsilon").value(), 1e-5, 1e-11);
  EXPECT_EQ(f.get_float("llama.rope.freq_base").value(), 10000.0);
  // Integers are accepted where a float is wanted.
  EXPECT_EQ(f.get_float("llama.block_count").value(), 5.0);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token").value());
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_eos_token").value());
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id").value(), 2);

  auto tokens = f.get_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens) << tokens.status().message();
  const Array* t = tokens.value();
  EXPECT_EQ(t->elem_type, ValueType::kString);
  ASSERT_EQ(t->count, 512u);
  ASSERT_EQ(t->strings.size(), 512u);
  EXPECT_EQ(t->strings[0], "<unk>");
  EXPECT_EQ(t->strings[1], "<s>");
  EXPECT_EQ(t->strings[2], "</s>");
  EXPECT_EQ(t->strings[3], "<0x00>");

  const Array* scores = f.get_array("tokenizer.ggml.scores").value();
  EXPECT_EQ(scores->elem_type, ValueType::kFloat32);
  EXPECT_EQ(scores->count, 512u);
  EXPECT_EQ(scores->raw.size(), 512u * 4);
  EXPECT_TRUE(scores->is_numeric());
  const Array* types = f.get_array("tokenizer.ggml.token_type").value();
  EXPECT_EQ(types->elem_type, ValueType::kInt32);
  EXPECT_EQ(types->int_at(1), 3);  // <s> is a control token
}

TEST(GgufReader, Stories260KTensors) {
  GgufFile f = open_or_die("models/stories260K.gguf");
  const TensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, TensorType::F32);
  EXPECT_EQ(emb->n_dims, 2);
  EXPECT_EQ(emb->ne[0], 64);
  EXPECT_EQ(emb->ne[1], 512);
  EXPECT_EQ(emb->ne[2], 1);
  EXPECT_EQ(emb->n_elements(), 64 * 512);
  EXPECT_EQ(emb->n_rows(), 512);
  EXPECT_EQ(emb->offset, 0u);
  EXPECT_EQ(emb->nbytes, 64u * 512 * 4);
  ASSERT_NE(emb->data, nullptr);
  float first[2];
  std::memcpy(first, emb->data, sizeof first);
  EXPECT_FLOAT_EQ(first[0], -0.29474878f);
  EXPECT_FLOAT_EQ(first[1], 0.56189561f);

  const TensorInfo* norm = f.find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->n_dims, 1);
  EXPECT_EQ(norm->ne[0], 64);
  EXPECT_EQ(norm->offset, 131072u);

  const TensorInfo* down = f.find_tensor("blk.4.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->ne[0], 172);
  EXPECT_EQ(down->ne[1], 64);
  EXPECT_EQ(f.find_tensor("blk.5.ffn_down.weight"), nullptr);

  int attn_q = 0;
  for (const auto& ti : f.tensors()) {
    if (ti.name.ends_with("attn_q.weight")) ++attn_q;
    // The mapping is page aligned, so data pointers are aligned to general.alignment.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ti.data) % f.alignment(), 0u) << ti.name;
    EXPECT_EQ(ti.offset % f.alignment(), 0u) << ti.name;
    EXPECT_LE(f.data_offset() + ti.offset + ti.nbytes, f.file_size()) << ti.name;
  }
  EXPECT_EQ(attn_q, 5);
}

TEST(GgufReader, LlamaTinyRandomF16) {
  GgufFile f = open_or_die("models/llama-2-tiny-random.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 18u);
  EXPECT_EQ(f.tensors().size(), 12u);
  EXPECT_EQ(f.get_string("general.name").value(), "LLaMA v2");
  EXPECT_EQ(f.get_int("llama.block_count").value(), 1);
  EXPECT_EQ(f.get_int("llama.context_length").value(), 4096);
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").value()->count, 32000u);
  const TensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, TensorType::F16);
  EXPECT_EQ(emb->ne[0], 8);
  EXPECT_EQ(emb->ne[1], 32000);
  EXPECT_EQ(emb->nbytes, 8u * 32000 * 2);
  EXPECT_EQ(f.find_tensor("output_norm.weight")->type, TensorType::F32);
}

TEST(GgufReader, SynthLlamaQ4_0) {
  GgufFile f = open_or_die("models/synth-llama-tiny-q4_0.gguf");
  EXPECT_EQ(f.tensors().size(), 20u);
  EXPECT_EQ(f.get_int("general.file_type").value(), 2);
  EXPECT_EQ(f.get_int("llama.block_count").value(), 2);
  const TensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, TensorType::Q4_0);
  EXPECT_EQ(emb->ne[0], 64);
  EXPECT_EQ(emb->ne[1], 32000);
  EXPECT_EQ(emb->nbytes, 64u * 32000 / 32 * 18);
  EXPECT_EQ(f.find_tensor("output_norm.weight")->type, TensorType::F32);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_down.weight")->ne[0], 192);
}

TEST(GgufReader, TypedAccessorErrors) {
  GgufFile f = open_or_die("models/stories260K.gguf");

  auto missing = f.get_int("llama.no_such_key");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("llama.no_such_key"), std::string::npos);
  EXPECT_EQ(f.get_string("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(f.get_array("nope").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(f.has("nope"));
  EXPECT_EQ(f.find("nope"), nullptr);

  auto s_as_int = f.get_int("general.architecture");
  ASSERT_FALSE(s_as_int);
  EXPECT_EQ(s_as_int.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(s_as_int.status().message().find("general.architecture"), std::string::npos);
  EXPECT_NE(s_as_int.status().message().find("string"), std::string::npos);

  auto i_as_string = f.get_string("llama.block_count");
  ASSERT_FALSE(i_as_string);
  EXPECT_EQ(i_as_string.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(i_as_string.status().message().find("u32"), std::string::npos);

  EXPECT_EQ(f.get_bool("llama.block_count").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(f.get_float("general.architecture").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(f.get_int("llama.rope.freq_base").status().code(), StatusCode::kCorrupt);  // f32
  EXPECT_EQ(f.get_array("general.name").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(f.get_int("tokenizer.ggml.tokens").status().code(), StatusCode::kCorrupt);

  // *_or: fallback only for a missing key; a wrong type is still an error.
  EXPECT_EQ(f.get_int_or("nope", 7).value(), 7);
  EXPECT_EQ(f.get_int_or("llama.block_count", 7).value(), 5);
  EXPECT_FALSE(f.get_int_or("general.architecture", 7));
  EXPECT_EQ(f.get_float_or("nope", 0.5).value(), 0.5);
  EXPECT_TRUE(f.get_bool_or("nope", true).value());
  EXPECT_FALSE(f.get_bool_or("llama.block_count", true));
  EXPECT_EQ(f.get_string_or("nope", "dflt").value(), "dflt");
  EXPECT_EQ(f.get_string_or("general.architecture", "dflt").value(), "llama");
}

TEST(GgufReader, OpenErrors) {
  auto missing = GgufFile::open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), StatusCode::kIo);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/model.gguf"), std::string::npos);

  auto dir = GgufFile::open(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos);

  // An empty file is mapped as nothing and refused as truncated, naming the path.
  const std::string empty =
      (std::filesystem::temp_directory_path() / ("loom_gguf_empty_" + std::to_string(::getpid()) + ".gguf")).string();
  { std::ofstream(empty, std::ios::binary); }
  auto e = GgufFile::open(empty);
  std::filesystem::remove(empty);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(e.status().message().find("truncated"), std::string::npos);
  EXPECT_NE(e.status().message().find(empty), std::string::npos);
}

TEST(GgufReader, ToStringRendersValues) {
  GgufFile f = open_or_die("models/stories260K.gguf");
  EXPECT_EQ(to_string(*f.find("general.architecture")), "\"llama\"");
  EXPECT_EQ(to_string(*f.find("llama.block_count")), "5");
  EXPECT_EQ(to_string(*f.find("tokenizer.ggml.add_bos_token")), "true");
  const std::string toks = to_string(*f.find("tokenizer.ggml.tokens"), 3);
  EXPECT_EQ(toks, "[\"<unk>\", \"<s>\", \"</s>\", ... (512 items)]");
}

}  // namespace
}  // namespace loom::gguf
