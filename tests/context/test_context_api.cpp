// Parameters, invalid input (every case the reference aborts on returns an error here), outputs
// addressing, embeddings and pooling, encode, perf counters.
#include <cmath>

#include "context_test_util.h"

namespace loom::test {
namespace {

constexpr const char* kModel = "models/synth-llama-tiny-f32.gguf";

TEST(ContextParamsTest, DerivedValuesFollowTheReference) {
  auto model = load_shared_model(kModel);
  ContextParams cp;  // defaults: n_ctx 512, n_batch 2048, n_ubatch 512
  auto ctx = new_context(model, cp);
  EXPECT_EQ(ctx->n_ctx(), 512);
  EXPECT_EQ(ctx->n_batch(), 512);  // clamped to n_ctx for causal attention
  EXPECT_EQ(ctx->n_ubatch(), 512);
  EXPECT_EQ(ctx->n_seq_max(), 1);
  cp.n_ctx = 0;  // training context (2048 for this model)
  cp.n_ubatch = 0;
  cp.n_batch = 100;
  cp.n_seq_max = 0;  // treated as 1
  ctx = new_context(model, cp);
  EXPECT_EQ(ctx->n_ctx(), int(model->hparams().n_ctx_train));
  EXPECT_EQ(ctx->n_batch(), 100);
  EXPECT_EQ(ctx->n_ubatch(), 100);
  EXPECT_EQ(ctx->n_seq_max(), 1);
  EXPECT_EQ(ctx->params().rope_freq_base, model->hparams().rope_freq_base);
  EXPECT_EQ(ctx->params().rope_freq_scale, 1.0f);
  EXPECT_EQ(ctx->pooling(), Pooling::kNone);  // unspecified -> model's -> none
  // YaRN: ext_factor < 0 resolves to 1 with YaRN scaling, 0 otherwise.
  cp = ContextParams{};
  cp.rope_scaling = context::RopeScaling::kYarn;
  cp.rope_freq_scale = 0.25f;
  EXPECT_EQ(new_context(model, cp)->params().yarn_ext_factor, 1.0f);
  cp.rope_scaling = context::RopeScaling::kNone;  // none forces freq_scale 1
  EXPECT_EQ(new_context(model, cp)->params().rope_freq_scale, 1.0f);
  EXPECT_EQ(new_context(model, cp)->params().yarn_ext_factor, 0.0f);
}

TEST(ContextParamsTest, InvalidParametersAreErrors) {
  auto model = load_shared_model(kModel);
  EXPECT_FALSE(Context::create(nullptr, ContextParams{}).has_value());
  ContextParams cp;
  cp.n_batch = 0;
  cp.n_ubatch = 0;
  EXPECT_FALSE(Context::create(model, cp).has_value());
  cp = ContextParams{};
  cp.n_seq_max = 100000;
  EXPECT_FALSE(Context::create(model, cp).has_value());
  cp = ContextParams{};
  cp.n_ctx = -1;
  EXPECT_FALSE(Context::create(model, cp).has_value());
  cp = ContextParams{};
  cp.type_k = TensorType::Q4_K;
  EXPECT_FALSE(Context::create(model, cp).has_value());
  cp = ContextParams{};
  cp.pooling = Pooling::kRank;  // needs a classifier head
  auto r = Context::create(model, cp);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
}

TEST(ContextInvalidInput, DecodeRefusesBadBatchesWithoutChangingTheCache) {
  auto model = load_shared_model(kModel);
  ContextParams cp = small_params(64, 2);
  cp.n_batch = 16;
  auto ctx = new_context(model, cp);
  feed(*ctx, {1, 2, 3}, 0);
  const auto before = ctx->state_save();
  auto expect_invalid = [&](const Batch& b, const char* what) {
    Status st = ctx->decode(b);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what << ": " << st.message();
    EXPECT_LT(context::decode_result_code(st), 0) << what;
    EXPECT_EQ(ctx->state_save(), before) << what;
  };
  expect_invalid(Batch{}, "empty batch");
  expect_invalid(Batch::from_tokens(std::vector<int32_t>{5, -1}, 3), "negative token");
  expect_invalid(Batch::from_tokens(std::vector<int32_t>{32000}, 3), "token == n_vocab");
  expect_invalid(Batch::from_tokens(std::vector<int32_t>(17, 5), 3), "n_tokens > n_batch");
  expect_invalid(Batch::from_tokens(std::vector<int32_t>{5}, 3, 2), "seq id == n_seq_max");
  expect_invalid(Batch::from_tokens(std::vector<int32_t>{5}, 3, -1), "negative seq id");
  Batch b = Batch::from_tokens(std::vector<int32_t>{5, 6}, 3);
  b.pos.pop_back();
  expect_invalid(b, "pos size mismatch");
  b = Batch::from_tokens(std::vector<int32_t>{5}, 3);
  b.seq_ids[0].clear();
  expect_invalid(b, "token in no sequence");
  b = Batch::from_tokens(std::vector<int32_t>{5}, 3);
  b.pos[0] = -4;
  expect_invalid(b, "negative position");
  b = Batch{};
  b.embd.assign(10, 0.0f);
  b.embd_dim = 10;
  expect_invalid(b, "embeddings of the wrong width");
  // Non-causal batches must fit one micro-batch.
  ContextParams nc = small_params(64, 1);
  nc.attention = context::AttentionType::kNonCausal;
  nc.n_ubatch = 4;
  auto nctx = new_context(model, nc);
  EXPECT_EQ(nctx->decode(Batch::from_tokens(std::vector<int32_t>(5, 7), 0)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(nctx->decode(Batch::from_tokens(std::vector<int32_t>(4, 7), 0)).is_ok());
}

TEST(ContextInvalidInput, KvOperationsCheckSequenceIds) {
  auto model = load_shared_model(kModel);
  auto ctx = new_context(model, small_params(64, 2));
  EXPECT_FALSE(ctx->seq_cp(0, 2, -1, -1).is_ok());
  EXPECT_FALSE(ctx->seq_cp(-1, 1, -1, -1).is_ok());
  EXPECT_FALSE(ctx->seq_keep(5).is_ok());
  EXPECT_FALSE(ctx->seq_rm(2, -1, -1).is_ok());
  EXPECT_TRUE(ctx->seq_rm(-1, -1, -1).is_ok());
  EXPECT_FALSE(ctx->seq_add(9, 0, 1, 1).is_ok());
  EXPECT_FALSE(ctx->seq_pos_max(9).has_value());
  EXPECT_EQ(*ctx->seq_pos_max(1), -1);
  EXPECT_FALSE(ctx->seq_state_save(7).has_value());
}

TEST(ContextOutputs, AddressingByBatchIndexAndNegativeIndex) {
  auto model = load_shared_model(kModel);
  auto ctx = new_context(model, small_params());
  Batch b;
  for (int i = 0; i < 6; ++i) b.add(100 + i, i, {0}, i == 1 || i == 4);
  ASSERT_TRUE(ctx->decode(b).is_ok());
  EXPECT_EQ(ctx->n_outputs(), 2);
  auto r1 = last_logits(*ctx, 1), r4 = last_logits(*ctx, 4);
  EXPECT_EQ(last_logits(*ctx, -1), r4);
  EXPECT_EQ(last_logits(*ctx, -2), r1);
  EXPECT_FALSE(ctx->logits(-3).has_value());     // negative index out of range
  EXPECT_FALSE(ctx->logits(2).has_value());      // not flagged
  EXPECT_FALSE(ctx->logits(6).has_value());      // past the batch
  EXPECT_FALSE(ctx->embeddings(1).has_value());  // a logits context
  EXPECT_EQ(ctx->all_logits().size(), size_t(2 * ctx->n_vocab()));
  // Default: only the last token.
  Batch d;
  d.tokens = {7, 8, 9};
  ASSERT_TRUE(ctx->decode(d).is_ok());
  EXPECT_EQ(ctx->n_outputs(), 1);
  EXPECT_TRUE(ctx->logits(2).has_value());
  EXPECT_FALSE(ctx->logits(0).has_value());
}

// The output layer applied to an embedding row reproduces the logits: embeddings are the
// final-norm hidden states (the reference's result_norm).
TEST(ContextOutputs, OutputsMaxBoundsTheLogitsBuffer) {
  auto model = load_shared_model(kModel);
  ContextParams cp = small_params(128, 4);
  cp.n_outputs_max = 2;
  auto ctx = new_context(model, cp);
  EXPECT_EQ(ctx->params().n_outputs_max, 2);
  Batch b;
  for (int s = 0; s < 3; ++s) b.add(1, 0, {s}, true);
  Status st = ctx->decode(b);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("n_outputs_max"), std::string::npos) << st.message();
  EXPECT_EQ(ctx->kv().used(), 0);
  b.output[2] = 0;
  ASSERT_TRUE(ctx->decode(b).is_ok());
  EXPECT_EQ(ctx->n_outputs(), 2);
  // The default is n_batch.
  EXPECT_EQ(new_context(model, small_params(128, 4))->params().n_outputs_max, 128);
}

TEST(ContextEmbeddings, PerTokenEmbeddingsAreTheFinalNormHiddenStates) {
  auto model = load_shared_model(kModel);  // tied output: logits = tok_embd · h
  ASSERT_TRUE(model->weights().tied_output);
  const std::vector<int32_t> ids = {1, 450, 4996, 17354};
  auto lctx = new_context(model, small_params());
  auto logits = feed(*lctx, ids, 0);
  ContextParams cp = small_params();
  cp.embeddings = true;
  auto ectx = new_context(model, cp);
  ASSERT_TRUE(ectx->decode(Batch::from_tokens(ids, 0)).is_ok());
  EXPECT_FALSE(ectx->logits(-1).has_value());
  auto e = ectx->embeddings(-1);
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ(e->size(), size_t(64));
  const TensorView& out = model->weights().output;
  std::vector<float> row(64);
  for (int tok : {0, 931, 25013, 31999}) {
    ops::get_row(out, tok, row.data());
    double s = 0;
    for (int i = 0; i < 64; ++i) s += double(row[size_t(i)]) * (*e)[size_t(i)];
    EXPECT_NEAR(s, logits[size_t(tok)], 1e-4 * (1 + std::fabs(s)));
  }
}

TEST(ContextEmbeddings, PoolingMeanClsLastPerSequence) {
  auto model = load_shared_model(kModel);
  const std::vector<int32_t> a = {1, 450, 4996, 17354, 1701}, b = {1, 9038, 2501};
  ContextParams none = small_params();
  none.embeddings = true;
  auto per_token = [&](const std::vector<int32_t>& ids) {
    auto ctx = new_context(model, none);
    EXPECT_TRUE(ctx->decode(Batch::from_tokens(ids, 0, 0, true)).is_ok());
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i < ids.size(); ++i) {
      auto e = ctx->embeddings(int(i));
      rows.emplace_back(e->begin(), e->end());
    }
    return rows;
  };
  const auto ra = per_token(a), rb = per_token(b);
  for (Pooling pooling : {Pooling::kMean, Pooling::kCls, Pooling::kLast}) {
    ContextParams cp = small_params();
    cp.embeddings = true;
    cp.pooling = pooling;
    auto ctx = new_context(model, cp);
    Batch batch;
    for (size_t i = 0; i < a.size(); ++i) batch.add(a[i], int32_t(i), {0}, false);
    for (size_t i = 0; i < b.size(); ++i) batch.add(b[i], int32_t(i), {1}, false);
    ASSERT_TRUE(ctx->decode(batch).is_ok());
    for (int s = 0; s < 2; ++s) {
      const auto& rows = s == 0 ? ra : rb;
      std::vector<float> want(64, 0.0f);
      if (pooling == Pooling::kMean) {
        for (const auto& r : rows)
          for (size_t d = 0; d < 64; ++d) want[d] += r[d] / float(rows.size());
      } else {
        want = pooling == Pooling::kCls ? rows.front() : rows.back();
      }
      auto got = ctx->embeddings_seq(s);
      ASSERT_TRUE(got.has_value()) << got.status().message();
      EXPECT_LE(max_abs_diff(std::vector<float>(got->begin(), got->end()), want), 1e-4f) << int(pooling) << " seq " << s;
    }
    EXPECT_FALSE(ctx->embeddings_seq(2).has_value());  // not in the last batch
  }
}

TEST(ContextEmbeddings, EncodeIsNonCausalAndLeavesTheCacheAlone) {
  auto model = load_shared_model(kModel);
  ContextParams cp = small_params();
  cp.embeddings = true;
  cp.pooling = Pooling::kMean;
  auto ctx = new_context(model, cp);
  ASSERT_TRUE(ctx->decode(Batch::from_tokens(std::vector<int32_t>{1, 2}, 0, 1)).is_ok());  // another sequence's cells
  const int used = ctx->kv().used();
  const std::vector<int32_t> ids = {1, 450, 4996, 17354};
  ASSERT_TRUE(ctx->encode(Batch::from_tokens(ids, 0)).is_ok());
  EXPECT_EQ(ctx->kv().used(), used);
  auto enc = ctx->embeddings_seq(0);
  ASSERT_TRUE(enc.has_value());
  std::vector<float> encv(enc->begin(), enc->end());
  ASSERT_TRUE(ctx->decode(Batch::from_tokens(ids, 0)).is_ok());
  auto dec = ctx->embeddings_seq(0);
  std::vector<float> decv(dec->begin(), dec->end());
  EXPECT_GT(max_abs_diff(encv, decv), 1e-3f);  // earlier tokens saw later ones
  // A non-causal context decodes the same way as encode does.
  ContextParams nc = cp;
  nc.attention = context::AttentionType::kNonCausal;
  auto nctx = new_context(model, nc);
  ASSERT_TRUE(nctx->decode(Batch::from_tokens(ids, 0)).is_ok());
  auto ncv = nctx->embeddings_seq(0);
  EXPECT_LE(max_abs_diff(std::vector<float>(ncv->begin(), ncv->end()), encv), 1e-5f);
  // Too many tokens for one micro-batch.
  ContextParams small = cp;
  small.n_ubatch = 2;
  EXPECT_FALSE(new_context(model, small)->encode(Batch::from_tokens(ids, 0)).is_ok());
}

TEST(ContextEmbeddings, InputEmbeddingsInsteadOfTokens) {
  auto model = load_shared_model(kModel);
  const std::vector<int32_t> ids = {1, 450, 4996};
  auto ref = feed(*new_context(model, small_params()), ids, 0);
  Batch b;
  b.embd_dim = 64;
  std::vector<float> row(64);
  for (int32_t id : ids) {
    ops::get_row(model->weights().tok_embd, id, row.data());
    b.embd.insert(b.embd.end(), row.begin(), row.end());
  }
  auto ctx = new_context(model, small_params());
  ASSERT_TRUE(ctx->decode(b).is_ok());
  EXPECT_LE(rel_diff(last_logits(*ctx), ref), 1e-6f);
}

TEST(ContextPerf, CountersSeparatePromptAndGeneration) {
  auto model = load_shared_model(kModel);
  auto ctx = new_context(model, small_params());
  feed(*ctx, {1, 2, 3, 4}, 0);
  feed(*ctx, {5}, 4);
  feed(*ctx, {6}, 5);
  EXPECT_EQ(ctx->perf().n_prompt_tokens, 4);
  EXPECT_EQ(ctx->perf().n_gen_tokens, 2);
  EXPECT_GT(ctx->perf().t_load_us, 0);
  EXPECT_NE(ctx->perf_report().find("prompt eval"), std::string::npos);
  ctx->reset_perf();
  EXPECT_EQ(ctx->perf().n_gen_tokens, 0);
  EXPECT_GT(ctx->perf().t_load_us, 0);  // kept
  ASSERT_TRUE(ctx->warmup().is_ok());
  EXPECT_EQ(ctx->kv().used(), 0);
  EXPECT_EQ(ctx->perf().n_prompt_tokens + ctx->perf().n_gen_tokens, 0);
}

TEST(ContextThreads, SingleAndBatchThreadCountsGiveIdenticalResults) {
  auto model = load_shared_model(kModel);
  const std::vector<int32_t> ids = {1, 450, 4996, 17354, 1701};
  ContextParams a = small_params();
  a.n_threads = 1;
  a.n_threads_batch = 1;
  ContextParams b = small_params();
  b.n_threads = 1;
  b.n_threads_batch = 3;
  auto ca = new_context(model, a), cb = new_context(model, b);
  EXPECT_EQ(feed(*ca, ids, 0), feed(*cb, ids, 0));
  EXPECT_EQ(feed(*ca, {7}, 5), feed(*cb, {7}, 5));
  cb->set_n_threads(2, 2);
  EXPECT_EQ(feed(*ca, {8}, 6), feed(*cb, {8}, 6));
}

}  // namespace
}  // namespace loom::test
