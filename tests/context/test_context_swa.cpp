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
  auto kv = KvCache::create(kv::KvCacheParams::uniform(1, 64, 4, 4, 4, TensorType::F32, TensorType::F32));
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
    kv::MaskParams mp;
    mp.swa_window = window;
    (*kv)->build_mask(int(pos.size()), pos.data(), seq.data(), n_kv, mp, mask.data());
    for (size_t t = 0; t < pos.size(); ++t) {
      int seen = 0;
      for (int c = 0; c < n_kv; ++c) {
        const bool want =
            cell_seq[size_t(c)] == seq[t] && cell_pos[size_t(c)] <= pos[t] && cell_pos[size_t(c)] > pos[t] - window;
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

// ---- the window cache (iSWA): Gemma 2/3's sliding layers over a window-sized cache ----

// n tokens of a 512-token vocabulary: BOS, then a pseudo-random walk.
std::vector<int32_t> long_ids(int n, int salt = 0) {
  std::vector<int32_t> ids = {1};
  for (int i = 1; i < n; ++i) ids.push_back(int32_t(2 + (i * 37 + salt * 11) % 500));
  return ids;
}
int32_t tok(int i) { return int32_t(2 + (i * 53) % 500); }

// Runs a script on a context and returns every logits row it produced: three sequences, prompts
// longer than the window and than a micro-batch, interleaved single-token steps, a fork (seq_cp),
// a rollback of the last tokens (seq_rm), generation on.
std::vector<std::vector<float>> iswa_script(std::shared_ptr<const Model> model, bool swa_full, int n_ubatch,
                                            MemoryBreakdown* mem = nullptr) {
  ContextParams cp = small_params(1024, 4);
  cp.n_batch = 512;
  cp.n_ubatch = n_ubatch;
  cp.swa_full = swa_full;
  auto ctx = new_context(std::move(model), cp);
  std::vector<std::vector<float>> out;
  if (!ctx) return out;
  if (mem) *mem = ctx->memory().breakdown();
  auto step = [&](const Batch& b) {
    Status st = ctx->decode(b);
    EXPECT_TRUE(st.is_ok()) << st.message();
    for (int i = 0; i < ctx->n_outputs(); ++i) out.push_back(last_logits(*ctx, -ctx->n_outputs() + i));
  };
  const auto a = long_ids(300), b = long_ids(90, 1);
  step(Batch::from_tokens(a, 0, 0));
  step(Batch::from_tokens(b, 0, 1));
  for (int t = 0; t < 40; ++t) {
    Batch s;
    s.add(tok(t), int32_t(300 + t), {0}, true);
    s.add(tok(t + 100), int32_t(90 + t), {1}, true);
    step(s);
  }
  EXPECT_TRUE(ctx->seq_cp(0, 2, -1, -1).is_ok());
  EXPECT_TRUE(ctx->seq_rm(1, 120, -1).is_ok());  // sequence 1 forgets its last 10 tokens
  for (int t = 0; t < 30; ++t) {
    Batch s;
    s.add(tok(t + 200), int32_t(340 + t), {0}, true);
    s.add(tok(t + 300), int32_t(340 + t), {2}, true);
    s.add(tok(t + 400), int32_t(120 + t), {1}, true);
    step(s);
  }
  return out;
}

TEST(WindowCache, GivesTheFullCachesLogitsBitForBit) {
  // gemma2 (shared models: a window of 16 on even layers) and gemma3 (tests/data: five sliding
  // layers per global one, their own RoPE base).
  for (const std::string& m :
       {shared_path("models/synth-gemma2-tiny-f32.gguf"), data_dir() + "/synth-gemma3-tiny-f32.gguf"}) {
    auto loaded = Model::load(m);
    ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
    std::shared_ptr<const Model> model = *loaded;
    MemoryBreakdown small, full;
    const auto want = iswa_script(model, /*swa_full=*/true, 64, &full);
    const auto got = iswa_script(model, /*swa_full=*/false, 64, &small);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << m << " output " << i;
    // The window layers keep window * sequences + n_ubatch cells, padded to 256, not n_ctx.
    const int window = model->hparams().swa_window;
    EXPECT_EQ(small.kv_swa_cells, kv::swa_cache_cells(1024, window, 4, 64)) << m;
    EXPECT_LT(small.kv_swa_cells, 1024) << m;
    EXPECT_GT(small.kv_swa_layers, 0);
    EXPECT_EQ(small.kv_layers + small.kv_swa_layers, int(model->hparams().n_layer));
    EXPECT_LT(small.total(), full.total()) << m;
    EXPECT_EQ(full.kv_swa_cells, 0);  // swa_full: one cache over every layer
    // Micro-batches of another size give the same tokens' logits (batch invariance).
    const auto other = iswa_script(model, /*swa_full=*/false, 32);
    ASSERT_EQ(other.size(), want.size());
    for (size_t i = 0; i < other.size(); ++i) ASSERT_EQ(other[i], want[i]) << m << " ubatch 32, output " << i;
  }
}

TEST(WindowCache, SequenceStateRoundTripsAndPositionsFollowTheWindow) {
  auto model = load_shared_model("models/synth-gemma2-tiny-f32.gguf");
  ASSERT_TRUE(model);
  ContextParams cp = small_params(1400, 2);  // room for the sequence twice in the full part
  cp.n_ubatch = 64;
  cp.n_batch = 512;
  auto ctx = new_context(model, cp);
  ASSERT_TRUE(ctx);
  ASSERT_TRUE(ctx->memory().kv_swa());
  // 600 tokens in two calls: more than the window cache's 256 cells, so it reuses the cells that
  // left every window, and the sequence's lowest position in memory is then the window's.
  const auto ids = long_ids(600);
  feed(*ctx, std::vector<int32_t>(ids.begin(), ids.begin() + 400), 0, 0);
  feed(*ctx, std::vector<int32_t>(ids.begin() + 400, ids.end()), 400, 0);
  const int window = model->hparams().swa_window;
  EXPECT_EQ(ctx->memory().kv_swa()->size(), 256);
  EXPECT_EQ(*ctx->seq_pos_max(0), 599);
  EXPECT_GT(*ctx->seq_pos_min(0), 0);
  EXPECT_LE(*ctx->seq_pos_min(0), 599 - window + 1);
  EXPECT_EQ(ctx->kv().seq_pos_min(0), 0);  // the full part keeps everything
  auto saved = ctx->seq_state_save(0, ids);
  ASSERT_TRUE(saved.has_value()) << saved.status().message();
  // Restored into sequence 1, the next token's logits equal sequence 0's.
  std::vector<int32_t> tokens;
  {
    Status st = ctx->seq_state_load(*saved, 1, &tokens);
    ASSERT_TRUE(st.is_ok()) << st.message();
  }
  EXPECT_EQ(tokens, ids);
  const auto a = feed(*ctx, {77}, 600, 0);
  const auto b = feed(*ctx, {77}, 600, 1);
  EXPECT_EQ(a, b);
  // A whole-context state too.
  const auto whole = ctx->state_save();
  auto other = new_context(model, cp);
  ASSERT_TRUE(other->state_load(whole).is_ok());
  EXPECT_EQ(feed(*other, {78}, 601, 1), feed(*ctx, {78}, 601, 1));
  // A state of the full-cache layout is refused with a clear message, not misread.
  ContextParams fp = cp;
  fp.swa_full = true;
  auto full = new_context(model, fp);
  Status st = full->seq_state_load(*saved, 0);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("memory parts"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace loom::test
