// Sliding-window attention as a context parameter (ContextParams::n_swa): the mask it builds, the
// reference's default for llama/Mistral files (no window, even when the file names one), and the
// opt-in window on every layer of a family without sliding layers.
#include <gtest/gtest.h>

#include <cmath>

#include "context_test_util.h"
#include "gguf/gguf_writer.h"
#include "kv/kv_cache.h"

namespace loom::test {
namespace {

constexpr const char* kModel = "models/synth-llama-tiny-f32.gguf";

// BOS and n - 1 ordinary tokens.
std::vector<int32_t> prompt_of(int n) {
  std::vector<int32_t> ids = {1};
  for (int i = 1; i < n; ++i) ids.push_back(int32_t(300 + 7 * i));
  return ids;
}

std::vector<float> logits_with_window(std::shared_ptr<const Model> model, const std::vector<int32_t>& ids, int n_swa) {
  ContextParams cp = small_params(128, 1);
  cp.n_swa = n_swa;
  auto ctx = new_context(std::move(model), cp);
  if (!ctx) return {};
  return feed(*ctx, ids, 0);
}

TEST(SlidingWindowMask, TokenAtPSeesExactlyTheLastNPositionsOfItsSequence) {
  KvCacheParams kp;
  kp.n_layer = 1;
  kp.n_cells = 64;
  kp.n_embd_k = kp.n_embd_v = kp.head_dim = 4;
  kp.type_k = kp.type_v = TensorType::F32;
  auto kv = KvCache::create(kp);
  ASSERT_TRUE(kv.has_value()) << kv.status().message();
  // Sequence 0 at positions 0..19 and sequence 1 at 0..9, interleaved over the cells.
  std::vector<int32_t> cell_pos, cell_seq;
  for (int p = 0; p < 20; ++p) {
    for (int32_t s : {0, 1}) {
      if (s == 1 && p >= 10) continue;
      const int c = int(cell_pos.size());
      (*kv)->occupy(c, p, std::span<const int32_t>(&s, 1));
      cell_pos.push_back(p);
      cell_seq.push_back(s);
    }
  }
  const int n_kv = (*kv)->n_kv();
  ASSERT_EQ(n_kv, int(cell_pos.size()));
  for (int window : {1, 3, 8, 25}) {
    const std::vector<int32_t> pos = {19, 7, 0, 9}, seq = {0, 0, 0, 1};
    std::vector<float> mask(pos.size() * size_t(n_kv));
    MaskParams mp;
    mp.swa_window = window;
    (*kv)->build_mask(int(pos.size()), pos.data(), seq.data(), n_kv, mp, mask.data());
    for (size_t t = 0; t < pos.size(); ++t) {
      int seen = 0;
      for (int c = 0; c < n_kv; ++c) {
        const bool want = cell_seq[size_t(c)] == seq[t] && cell_pos[size_t(c)] <= pos[t] && cell_pos[size_t(c)] > pos[t] - window;
        const float m = mask[t * size_t(n_kv) + size_t(c)];
        EXPECT_EQ(m == 0.0f, want) << "window " << window << " token pos " << pos[t] << " cell pos " << cell_pos[size_t(c)];
        if (!want) {
          EXPECT_TRUE(std::isinf(m) && m < 0);
        }
        seen += want;
      }
      EXPECT_EQ(seen, std::min(window, pos[t] + 1)) << "window " << window << " pos " << pos[t];
    }
  }
}

TEST(SlidingWindow, ParametersResolveAndBadOnesAreRefused) {
  auto model = load_shared_model(kModel);
  ASSERT_TRUE(model);
  for (auto [given, resolved] : {std::pair{-1, 0}, std::pair{0, 0}, std::pair{12, 12}}) {
    ContextParams cp = small_params(64, 1);
    cp.n_swa = given;
    auto ctx = new_context(model, cp);
    ASSERT_TRUE(ctx);
    EXPECT_EQ(ctx->params().n_swa, resolved) << given;
  }
  ContextParams bad = small_params(64, 1);
  bad.n_swa = -2;
  auto r = Context::create(model, bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // gemma2 slides on its even layers (window 16 in the file): -1 keeps it, N replaces it.
  auto gemma2 = load_shared_model("models/synth-gemma2-tiny-f32.gguf");
  ASSERT_TRUE(gemma2);
  for (auto [given, resolved] : {std::pair{-1, 16}, std::pair{0, 0}, std::pair{5, 5}}) {
    ContextParams cp = small_params(64, 1);
    cp.n_swa = given;
    auto ctx = new_context(gemma2, cp);
    ASSERT_TRUE(ctx);
    EXPECT_EQ(ctx->params().n_swa, resolved) << given;
  }
  // Encoders attend in both directions: a window is refused.
  auto bert = load_shared_model("models/synth-bert-tiny-f32.gguf");
  ASSERT_TRUE(bert);
  ContextParams enc = small_params(64, 1);
  enc.n_swa = 4;
  auto e = Context::create(bert, enc);
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.status().code(), StatusCode::kUnsupported);
}

TEST(SlidingWindow, LlamaFileWindowIsIgnoredByDefaultAsTheReferenceDoes) {
  // A Mistral-style llama file carrying llama.attention.sliding_window = 4 attends fully unless
  // the context asks for a window.
  auto src = gguf::GgufFile::open(shared_path(kModel));
  ASSERT_TRUE(src.has_value()) << src.status().message();
  auto w = gguf::GgufWriter::from_file(*src);
  ASSERT_TRUE(w.has_value());
  ASSERT_TRUE(w->set_u32("llama.attention.sliding_window", 4).is_ok());
  auto f = gguf::GgufFile::from_bytes(w->to_bytes());
  ASSERT_TRUE(f.has_value()) << f.status().message();
  auto with_key = Model::from_gguf(std::move(*f));
  ASSERT_TRUE(with_key.has_value()) << with_key.status().message();
  EXPECT_EQ((*with_key)->hparams().swa_window, 0);
  auto plain = load_shared_model(kModel);
  ASSERT_TRUE(plain);
  const auto ids = prompt_of(24);
  const auto want = logits_with_window(plain, ids, -1);
  EXPECT_EQ(logits_with_window(*with_key, ids, -1), want);
  EXPECT_NE(logits_with_window(*with_key, ids, 4), want);
}

TEST(SlidingWindow, WindowSmallerThanThePromptChangesLogitsAndOneCoveringItDoesNot) {
  auto model = load_shared_model(kModel);
  ASSERT_TRUE(model);
  const int n = 24;
  const auto ids = prompt_of(n);
  const auto full = logits_with_window(model, ids, 0);
  ASSERT_EQ(full.size(), size_t(model->hparams().n_vocab));
  // A window of at least the prompt length hides nothing: bit-identical logits.
  EXPECT_EQ(logits_with_window(model, ids, -1), full);
  EXPECT_EQ(logits_with_window(model, ids, n), full);
  EXPECT_EQ(logits_with_window(model, ids, 1000), full);
  // One position less already hides BOS from the last token.
  for (int window : {n - 1, 8, 2}) {
    const auto got = logits_with_window(model, ids, window);
    EXPECT_GT(rel_diff(got, full), 1e-3f) << "window " << window;
  }
}

TEST(SlidingWindow, TokenByTokenDecodingMatchesOneBatch) {
  // The window follows each token's own position, also across decode calls (KV cache reuse).
  auto model = load_shared_model(kModel);
  ASSERT_TRUE(model);
  const auto ids = prompt_of(20);
  const auto batch = logits_with_window(model, ids, 6);
  ContextParams cp = small_params(128, 1);
  cp.n_swa = 6;
  auto ctx = new_context(model, cp);
  ASSERT_TRUE(ctx);
  std::vector<float> got;
  for (size_t i = 0; i < ids.size(); ++i) got = feed(*ctx, {ids[i]}, int(i));
  EXPECT_LE(rel_diff(got, batch), 1e-5f);
}

TEST(SlidingWindow, OverridesTheWindowOfGemma2SlidingLayers) {
  auto model = load_shared_model("models/synth-gemma2-tiny-f32.gguf");
  ASSERT_TRUE(model);
  const auto ids = prompt_of(30);  // longer than gemma2's window of 16
  const auto own = logits_with_window(model, ids, -1);
  EXPECT_EQ(logits_with_window(model, ids, 16), own);
  EXPECT_GT(rel_diff(logits_with_window(model, ids, 0), own), 1e-4f);  // off: full attention on every layer
  EXPECT_GT(rel_diff(logits_with_window(model, ids, 4), own), 1e-4f);
  EXPECT_EQ(logits_with_window(model, ids, 30), logits_with_window(model, ids, 0));
}

}  // namespace
}  // namespace loom::test
