// Loading refuses broken models with a clear message: missing or mis-shaped tensors, bad
// hyperparameters, unsupported architectures or types. Variants of stories260K are built in
// memory with the GGUF writer.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "context/context.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "test_util.h"

namespace loom::test {
namespace {

using Edit = std::function<void(gguf::GgufWriter&)>;

Expected<std::shared_ptr<const Model>> load_variant(const Edit& edit, const std::string& path = "") {
  auto src = gguf::GgufFile::open(path.empty() ? shared_path("models/stories260K.gguf") : path);
  EXPECT_TRUE(src.has_value()) << src.status().message();
  if (!src) return src.status();
  auto w = gguf::GgufWriter::from_file(*src);
  EXPECT_TRUE(w.has_value());
  if (!w) return w.status();
  edit(*w);
  auto bytes = w->to_bytes();
  auto f = gguf::GgufFile::from_bytes(bytes);
  if (!f) return f.status();
  return Model::from_gguf(std::move(*f));
}

void expect_refused(const Edit& edit, StatusCode code, const std::string& fragment, const std::string& path = "") {
  auto m = load_variant(edit, path);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.status().code(), code) << m.status().message();
  EXPECT_NE(m.status().message().find(fragment), std::string::npos) << m.status().message();
}

TEST(ModelLoad, UnmodifiedCopyLoads) {
  auto m = load_variant([](gguf::GgufWriter&) {});
  ASSERT_TRUE(m.has_value()) << m.status().message();
  const ModelHparams& hp = (*m)->hparams();
  EXPECT_EQ(hp.n_layer, 5);
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.n_head, 8);
  EXPECT_EQ(hp.n_head_kv, 4);
  EXPECT_EQ(hp.head_dim, 8);
  EXPECT_EQ(hp.n_vocab, 512);
  EXPECT_FALSE((*m)->weights().tied_output);
}

TEST(ModelLoad, MissingTensorIsNamed) {
  expect_refused([](gguf::GgufWriter& w) { w.remove_tensor("blk.3.ffn_up.weight"); }, StatusCode::kNotFound,
                 "blk.3.ffn_up.weight");
}

TEST(ModelLoad, MisShapedTensorIsNamed) {
  expect_refused(
      [](gguf::GgufWriter& w) {
        w.remove_tensor("blk.0.attn_k.weight");
        std::vector<uint8_t> bytes(64 * 16 * 4, 0);
        ASSERT_TRUE(w.add_tensor("blk.0.attn_k.weight", TensorType::F32, {64, 16}, bytes).is_ok());
      },
      StatusCode::kCorrupt, "blk.0.attn_k.weight");
}

TEST(ModelLoad, MissingOutputFallsBackToTiedEmbedding) {
  auto m = load_variant([](gguf::GgufWriter& w) { w.remove_tensor("output.weight"); });
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_TRUE((*m)->weights().tied_output);
}

TEST(ModelLoad, BadHyperparametersAreRefused) {
  expect_refused([](gguf::GgufWriter& w) { w.remove("llama.block_count"); }, StatusCode::kNotFound, "block_count");
  expect_refused(
      [](gguf::GgufWriter& w) {
        w.remove("llama.attention.head_count_kv");
        ASSERT_TRUE(w.set_u32("llama.attention.head_count_kv", 3).is_ok());
      },
      StatusCode::kCorrupt, "head_count");
  expect_refused(
      [](gguf::GgufWriter& w) {
        w.remove("llama.embedding_length");
        ASSERT_TRUE(w.set_string("llama.embedding_length", "64").is_ok());
      },
      StatusCode::kCorrupt, "embedding_length");
  expect_refused(
      [](gguf::GgufWriter& w) {
        w.remove("llama.block_count");
        ASSERT_TRUE(w.set_u32("llama.block_count", 6).is_ok());  // blk.5.* do not exist
      },
      StatusCode::kNotFound, "blk.5.");
}

TEST(ModelLoad, UnknownArchitectureIsUnsupported) {
  expect_refused(
      [](gguf::GgufWriter& w) {
        w.remove("general.architecture");
        ASSERT_TRUE(w.set_string("general.architecture", "rwkv6").is_ok());
      },
      StatusCode::kUnsupported, "rwkv6");
}

// Broken Mamba files (tests/data's tiny one, edited): each refusal names its cause.
TEST(ModelLoad, MambaHyperparametersAndTensorsAreChecked) {
  const std::string mamba = data_dir() + "/synth-mamba-tiny-f32.gguf";
  ASSERT_TRUE(load_variant([](gguf::GgufWriter&) {}, mamba).has_value());
  auto set_u32 = [](const char* key, uint32_t v) {
    return [=](gguf::GgufWriter& w) {
      w.remove(key);
      ASSERT_TRUE(w.set_u32(key, v).is_ok());
    };
  };
  // The reference loads only d_inner = 2 * n_embd.
  expect_refused(set_u32("mamba.ssm.inner_size", 96), StatusCode::kUnsupported, "expansion factor", mamba);
  expect_refused(set_u32("mamba.ssm.conv_kernel", 1000), StatusCode::kCorrupt, "ssm.conv_kernel", mamba);
  expect_refused(set_u32("mamba.ssm.state_size", 0), StatusCode::kCorrupt, "ssm.state_size", mamba);
  expect_refused([](gguf::GgufWriter& w) { w.remove("mamba.ssm.time_step_rank"); }, StatusCode::kNotFound, "time_step_rank",
                 mamba);
  expect_refused([](gguf::GgufWriter& w) { w.remove_tensor("blk.1.ssm_a"); }, StatusCode::kNotFound, "blk.1.ssm_a", mamba);
  // A state size that does not match the tensors: ssm_x's rows are dt_rank + 2 * d_state.
  expect_refused(set_u32("mamba.ssm.state_size", 8), StatusCode::kCorrupt, "ssm_x.weight", mamba);
  // A positive decay (A must be stored negated) would let the state grow without bound.
  expect_refused(
      [](gguf::GgufWriter& w) {
        std::vector<float> a(16 * 128, -1.0f);
        a[5] = 0.5f;
        std::vector<uint8_t> bytes(a.size() * 4);
        std::memcpy(bytes.data(), a.data(), bytes.size());
        w.remove_tensor("blk.0.ssm_a");
        ASSERT_TRUE(w.add_tensor("blk.0.ssm_a", TensorType::F32, {16, 128}, bytes).is_ok());
      },
      StatusCode::kCorrupt, "blk.0.ssm_a", mamba);
}

TEST(ModelLoad, VocabularyAndEmbeddingMustAgree) {
  expect_refused(
      [](gguf::GgufWriter& w) {
        w.remove("llama.vocab_size");
        ASSERT_TRUE(w.set_u32("llama.vocab_size", 600).is_ok());
      },
      StatusCode::kCorrupt, "");
}

TEST(ModelLoad, ContextRefusesBadTokenIds) {
  auto m = load_variant([](gguf::GgufWriter&) {});
  ASSERT_TRUE(m.has_value());
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_threads = 1;
  auto ctx = Context::create(*m, cp);
  ASSERT_TRUE(ctx.has_value()) << ctx.status().message();
  std::vector<int32_t> bad = {1, 512};
  Status st = (*ctx)->decode(Batch::from_tokens(bad, 0));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("512"), std::string::npos);
  std::vector<int32_t> neg = {-1};
  EXPECT_EQ((*ctx)->decode(Batch::from_tokens(neg, 0)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*ctx)->kv().used(), 0);  // nothing was stored
  std::vector<int32_t> too_many(65, 1);
  EXPECT_FALSE((*ctx)->decode(Batch::from_tokens(too_many, 0)).is_ok());
  EXPECT_FALSE((*ctx)->logits(0).has_value());
}

}  // namespace
}  // namespace loom::test
