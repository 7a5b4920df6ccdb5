// Decoding a prompt in pieces through the KV cache must give the logits of one batch: RoPE is
// relative, so a position off-by-one is invisible in one-batch logits but not here.
#include "model_test_util.h"

namespace loom::test {
namespace {

void check_chunked(const std::string& model_rel, const std::string& golden_rel, float rel_tol) {
  auto model = load_shared_model(model_rel);
  ASSERT_TRUE(model);
  const std::string golden_path = shared_path(golden_rel);
  auto g = load_json(golden_path);
  const std::string dir = golden_path.substr(0, golden_path.rfind('/') + 1);
  for (const auto& run : g["runs"]) {
    auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
    auto want = read_f32_file(dir + run["last_logits_file"].get<std::string>());
    auto one = make_context(model);
    ASSERT_TRUE(one);
    auto whole = prompt_logits(*one, ids);
    for (size_t chunk : {size_t(1), size_t(2), size_t(3), size_t(7)}) {
      auto ctx = make_context(model);
      ASSERT_TRUE(ctx);
      for (size_t i = 0; i < ids.size(); i += chunk) {
        const size_t n = std::min(chunk, ids.size() - i);
        std::vector<int32_t> part(ids.begin() + long(i), ids.begin() + long(i + n));
        Status st = ctx->decode(Batch::from_tokens(part, int32_t(i)));
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
      auto l = ctx->logits(-1);
      ASSERT_TRUE(l.has_value());
      std::vector<float> got(l->begin(), l->end());
      EXPECT_LE(max_abs_diff(got, whole), 1e-4f * max_abs(whole)) << "chunk " << chunk;
      EXPECT_LE(max_abs_diff(got, want), rel_tol * max_abs(want)) << "chunk " << chunk;
    }
  }
}

TEST(ChunkedDecode, SynthLlamaF32MatchesOneBatchAndGolden) {
  check_chunked("models/synth-llama-tiny-f32.gguf", "golden/synth-llama-tiny-f32.json", 1e-3f);
}

TEST(ChunkedDecode, Stories260KMatchesOneBatchAndGolden) {
  check_chunked("models/stories260K.gguf", "golden/stories260K.json", 5e-3f);
}

TEST(ChunkedDecode, SmallMicroBatchesMatchOneBatch) {
  // n_ubatch smaller than the prompt: decode() splits one call into several forward passes.
  auto model = load_shared_model("models/synth-llama-tiny-f32.gguf");
  ASSERT_TRUE(model);
  auto g = load_json(shared_path("golden/synth-llama-tiny-f32.json"));
  auto ids = g["runs"][1]["prompt_ids"].get<std::vector<int32_t>>();
  auto whole_ctx = make_context(model);
  auto whole = prompt_logits(*whole_ctx, ids);
  auto ctx = make_context(model, 512, 2, /*n_ubatch=*/5);
  ASSERT_TRUE(ctx);
  auto got = prompt_logits(*ctx, ids);
  EXPECT_LE(max_abs_diff(got, whole), 1e-4f * max_abs(whole));
}

TEST(ChunkedDecode, ThreadCountDoesNotChangeResults) {
  auto model = load_shared_model("models/synth-llama-tiny-q4_0.gguf");
  ASSERT_TRUE(model);
  auto g = load_json(shared_path("golden/synth-llama-tiny-q4_0.json"));
  auto ids = g["runs"][1]["prompt_ids"].get<std::vector<int32_t>>();
  auto c1 = make_context(model, 512, 1);
  auto c2 = make_context(model, 512, 2);
  auto c3 = make_context(model, 512, 3);
  auto l1 = prompt_logits(*c1, ids), l2 = prompt_logits(*c2, ids), l3 = prompt_logits(*c3, ids);
  EXPECT_EQ(max_abs_diff(l1, l2), 0.0f);
  EXPECT_EQ(max_abs_diff(l1, l3), 0.0f);
}

}  // namespace
}  // namespace loom::test
