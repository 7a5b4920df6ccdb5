// Finer-grained checks of the C API from C++: adapters against llama.cpp's goldens, embeddings
// and pooling, multi-sequence batches, input embeddings, callbacks, metadata and buffer
// negotiation. (test_capi.c covers the C-language view and the generation golden.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/loom.h"
#include "test_util.h"

namespace {

using loom::test::max_abs;
using loom::test::max_abs_diff;
using loom::test::read_f32_file;
using loom::test::shared_path;

struct ModelDeleter {
  void operator()(loom_model* m) const { loom_model_free(m); }
};
struct ContextDeleter {
  void operator()(loom_context* c) const { loom_context_free(c); }
};
struct LoraDeleter {
  void operator()(loom_lora_adapter* a) const { loom_lora_adapter_free(a); }
};
struct CvecDeleter {
  void operator()(loom_control_vector* c) const { loom_control_vector_free(c); }
};
using ModelPtr = std::unique_ptr<loom_model, ModelDeleter>;
using ContextPtr = std::unique_ptr<loom_context, ContextDeleter>;
using LoraPtr = std::unique_ptr<loom_lora_adapter, LoraDeleter>;
using CvecPtr = std::unique_ptr<loom_control_vector, CvecDeleter>;

const std::vector<loom_token> kPrompt = {1, 403, 407, 261, 378};

ModelPtr load(const std::string& rel) {
  ModelPtr m(loom_model_load_from_file(shared_path(rel).c_str(), nullptr));
  EXPECT_TRUE(m) << loom_last_error();
  return m;
}

ContextPtr context(const loom_model* m, int n_ctx = 128, int n_seq_max = 4, bool embeddings = false,
                   int pooling = LOOM_POOLING_UNSPECIFIED) {
  loom_context_params cp = loom_context_default_params();
  cp.n_ctx = n_ctx;
  cp.n_batch = n_ctx;
  cp.n_ubatch = n_ctx;
  cp.n_seq_max = n_seq_max;
  cp.n_threads = 2;
  cp.embeddings = embeddings;
  cp.pooling_type = pooling;
  ContextPtr c(loom_context_new(m, &cp));
  EXPECT_TRUE(c) << loom_last_error();
  return c;
}

// A batch owning its arrays, filled token by token.
struct Batch {
  explicit Batch(int n, int embd = 0, int n_seq = 4) : b(loom_batch_init(n, embd, n_seq)) {}
  ~Batch() { loom_batch_free(&b); }
  void add(loom_token t, loom_pos p, std::initializer_list<loom_seq_id> seqs, bool out) {
    const int i = b.n_tokens++;
    if (b.token) b.token[i] = t;
    b.pos[i] = p;
    b.n_seq_id[i] = int32_t(seqs.size());
    std::copy(seqs.begin(), seqs.end(), b.seq_id[i]);
    b.logits[i] = out ? 1 : 0;
  }
  loom_batch b;
};

std::vector<float> feed(loom_context* ctx, const std::vector<loom_token>& ids, int start, loom_seq_id seq = 0) {
  Batch batch(int(ids.size()));
  for (size_t i = 0; i < ids.size(); ++i) batch.add(ids[i], start + int(i), {seq}, i + 1 == ids.size());
  const int32_t rc = loom_decode(ctx, &batch.b);
  EXPECT_EQ(rc, LOOM_DECODE_OK) << loom_last_error();
  const float* l = loom_get_logits_ith(ctx, -1);
  return l ? std::vector<float>(l, l + loom_n_vocab(ctx)) : std::vector<float>{};
}

TEST(CApi, MetadataAndStringNegotiation) {
  auto m = load("models/stories260K.gguf");
  ASSERT_TRUE(m);
  char small[4];
  const int32_t n = loom_model_meta_val_str(m.get(), "general.architecture", small, sizeof small);
  EXPECT_EQ(n, 5);
  EXPECT_STREQ(small, "lla");  // truncated, NUL-terminated
  bool found_tokens = false;
  for (int32_t i = 0; i < loom_model_meta_count(m.get()); ++i) {
    std::string key(size_t(loom_model_meta_key_by_index(m.get(), i, nullptr, 0)) + 1, '\0');
    loom_model_meta_key_by_index(m.get(), i, key.data(), key.size());
    key.pop_back();
    if (key == "tokenizer.ggml.tokens") {
      const int32_t len = loom_model_meta_val_str_by_index(m.get(), i, nullptr, 0);
      std::string val(size_t(len) + 1, '\0');
      EXPECT_EQ(loom_model_meta_val_str_by_index(m.get(), i, val.data(), val.size()), len);
      EXPECT_EQ(val.front(), '[');
      found_tokens = true;
    }
  }
  EXPECT_TRUE(found_tokens);
  EXPECT_EQ(loom_model_n_embd(m.get()), 64);
  EXPECT_GT(loom_model_n_head(m.get()), 0);
  EXPECT_GT(loom_model_n_head_kv(m.get()), 0);
  EXPECT_EQ(loom_vocab_n_tokens(m.get()), 512);
  char piece[16];
  EXPECT_EQ(loom_token_to_piece(m.get(), 403, piece, sizeof piece, 0, false), 5);
  EXPECT_EQ(std::string(piece, 5), " Once");
  EXPECT_EQ(loom_token_to_piece(m.get(), 403, nullptr, 0, 0, false), -5);
}

TEST(CApi, TokenizeSpecialAndLstrip) {
  auto m = load("models/stories260K.gguf");
  ASSERT_TRUE(m);
  loom_token toks[16];
  // parse_special lets "<s>" become BOS.
  EXPECT_EQ(loom_tokenize(m.get(), "<s>", -1, toks, 16, false, true), 1);
  EXPECT_EQ(toks[0], loom_token_bos(m.get()));
  EXPECT_GT(loom_tokenize(m.get(), "<s>", -1, toks, 16, false, false), 1);
  char buf[16];
  const int32_t n = loom_token_to_piece(m.get(), 403, buf, sizeof buf, 0, false);
  ASSERT_GT(n, 0);
  ASSERT_EQ(buf[0], ' ');
  EXPECT_EQ(loom_token_to_piece(m.get(), 403, buf, sizeof buf, 1, false), n - 1);
  EXPECT_EQ(loom_tokenize(m.get(), "", 0, toks, 0, false, false), 0);
  EXPECT_EQ(loom_tokenize(m.get(), nullptr, 3, toks, 16, false, false), LOOM_SIZE_ERROR);
}

TEST(CApi, MultiSequenceBatchMatchesSeparateDecodes) {
  auto m = load("models/stories260K.gguf");
  ASSERT_TRUE(m);
  auto a = context(m.get());
  auto want0 = feed(a.get(), kPrompt, 0, 0);
  const std::vector<loom_token> other = {1, 450, 300, 290};
  loom_kv_clear(a.get());
  auto want1 = feed(a.get(), other, 0, 0);

  auto ctx = context(m.get());
  Batch b(16);
  for (size_t i = 0; i < kPrompt.size(); ++i) b.add(kPrompt[i], int(i), {0}, i + 1 == kPrompt.size());
  for (size_t i = 0; i < other.size(); ++i) b.add(other[i], int(i), {2}, true);
  ASSERT_EQ(loom_decode(ctx.get(), &b.b), LOOM_DECODE_OK) << loom_last_error();
  ASSERT_EQ(loom_n_outputs(ctx.get()), 1 + int(other.size()));
  const int nv = loom_n_vocab(ctx.get());
  const float* all = loom_get_logits(ctx.get());
  ASSERT_NE(all, nullptr);
  // Rows in batch order: row 0 is the prompt's last token, then the four of sequence 2.
  EXPECT_LE(max_abs_diff(std::vector<float>(all, all + nv), want0), 1e-4f * max_abs(want0));
  const float* last = loom_get_logits_ith(ctx.get(), -1);
  EXPECT_EQ(last, all + size_t(other.size()) * size_t(nv));
  EXPECT_LE(max_abs_diff(std::vector<float>(last, last + nv), want1), 1e-4f * max_abs(want1));
  EXPECT_EQ(loom_get_logits_ith(ctx.get(), int(kPrompt.size()) - 1), all);
  EXPECT_EQ(loom_get_logits_ith(ctx.get(), 9), nullptr);
  EXPECT_EQ(loom_get_logits_ith(ctx.get(), -6), nullptr);
  EXPECT_EQ(loom_kv_seq_pos_max(ctx.get(), 2), 3);
  EXPECT_EQ(loom_kv_seq_pos_max(ctx.get(), 1), -1);
  EXPECT_EQ(loom_kv_seq_pos_max(ctx.get(), -1), 4);

  // A token shared by two sequences occupies one cell.
  Batch shared(1);
  shared.add(300, 10, {0, 1}, true);
  ASSERT_EQ(loom_decode(ctx.get(), &shared.b), LOOM_DECODE_OK) << loom_last_error();
  EXPECT_EQ(loom_kv_used_cells(ctx.get()), int(kPrompt.size() + other.size()) + 1);
  EXPECT_EQ(loom_kv_seq_pos_max(ctx.get(), 1), 10);

  // n_seq_id larger than n_seq_max is refused before reading the ids.
  Batch bad(1);
  bad.add(300, 11, {0}, true);
  bad.b.n_seq_id[0] = 1000;
  EXPECT_EQ(loom_decode(ctx.get(), &bad.b), LOOM_DECODE_INVALID);
  EXPECT_NE(std::string(loom_last_error()).find("n_seq_id"), std::string::npos);
}

TEST(CApi, EmbeddingsAndMeanPooling) {
  auto m = load("models/stories260K.gguf");
  ASSERT_TRUE(m);
  auto ctx = context(m.get(), 64, 2, true, LOOM_POOLING_MEAN);
  ASSERT_TRUE(ctx);
  EXPECT_EQ(loom_pooling_type(ctx.get()), LOOM_POOLING_MEAN);
  Batch b(8);
  for (size_t i = 0; i < kPrompt.size(); ++i) b.add(kPrompt[i], int(i), {1}, true);
  ASSERT_EQ(loom_decode(ctx.get(), &b.b), LOOM_DECODE_OK) << loom_last_error();
  const int ne = loom_n_embd(ctx.get());
  const float* all = loom_get_embeddings(ctx.get());
  ASSERT_NE(all, nullptr) << loom_last_error();
  EXPECT_EQ(loom_get_embeddings_ith(ctx.get(), 2), all + 2 * ne);
  const float* pooled = loom_get_embeddings_seq(ctx.get(), 1);
  ASSERT_NE(pooled, nullptr) << loom_last_error();
  for (int d = 0; d < ne; ++d) {
    float mean = 0;
    for (size_t i = 0; i < kPrompt.size(); ++i) mean += all[i * size_t(ne) + size_t(d)];
    mean /= float(kPrompt.size());
    EXPECT_NEAR(pooled[d], mean, 1e-5f * std::max(1.0f, std::fabs(mean)));
  }
  EXPECT_EQ(loom_get_embeddings_seq(ctx.get(), 0), nullptr);  // no tokens of sequence 0
  EXPECT_EQ(loom_get_embeddings_seq(ctx.get(), 7), nullptr);
  EXPECT_EQ(loom_get_logits(ctx.get()), nullptr);  // embeddings mode

  // Back to logits at run time.
  EXPECT_EQ(loom_set_embeddings(ctx.get(), false), LOOM_OK);
  loom_kv_clear(ctx.get());
  auto l = feed(ctx.get(), kPrompt, 0, 0);
  ASSERT_EQ(l.size(), size_t(loom_n_vocab(ctx.get())));
  EXPECT_EQ(std::max_element(l.begin(), l.end()) - l.begin(), 432);
}

TEST(CApi, EncodeLeavesTheCacheAsItWas) {
  auto m = load("models/stories260K.gguf");
  ASSERT_TRUE(m);
  auto ctx = context(m.get(), 64, 2, true, LOOM_POOLING_LAST);
  ASSERT_TRUE(ctx);
  Batch prefix(2);
  prefix.add(1, 0, {0}, true);
  prefix.add(403, 1, {0}, true);
  ASSERT_EQ(loom_decode(ctx.get(), &prefix.b), LOOM_DECODE_OK) << loom_last_error();
  Batch b(8);
  for (size_t i = 0; i < kPrompt.size(); ++i) b.add(kPrompt[i], int(i), {1}, true);
  ASSERT_EQ(loom_encode(ctx.get(), &b.b), LOOM_DECODE_OK) << loom_last_error();
  EXPECT_EQ(loom_kv_used_cells(ctx.get()), 2);
  EXPECT_EQ(loom_kv_seq_pos_max(ctx.get(), 1), -1);
  const int ne = loom_n_embd(ctx.get());
  const float* last = loom_get_embeddings_ith(ctx.get(), -1);
  const float* pooled = loom_get_embeddings_seq(ctx.get(), 1);
  ASSERT_TRUE(last && pooled) << loom_last_error();
  EXPECT_EQ(std::vector<float>(last, last + ne), std::vector<float>(pooled, pooled + ne));  // last pooling
  EXPECT_EQ(loom_encode(ctx.get(), nullptr), LOOM_DECODE_INVALID);
  loom_perf_print(ctx.get());
  char report[8];
  EXPECT_GT(loom_perf_report(ctx.get(), report, sizeof report), int32_t(sizeof report));
  EXPECT_EQ(std::strlen(report), sizeof report - 1);
}

// A reranker (tests/data/synth-bert-rank-tiny-f32): under rank pooling loom_get_embeddings_seq
// gives loom_model_n_cls_out raw scores per sequence, llama.cpp's (tests/data/README.md).
TEST(CApi, RankPoolingReturnsTheRawScores) {
  ModelPtr m(loom_model_load_from_file((loom::test::data_dir() + "/synth-bert-rank-tiny-f32.gguf").c_str(), nullptr));
  ASSERT_TRUE(m) << loom_last_error();
  EXPECT_EQ(loom_model_n_cls_out(m.get()), 1);
  EXPECT_EQ(loom_model_n_cls_out(nullptr), 0);
  ModelPtr plain = load("models/stories260K.gguf");
  ASSERT_TRUE(plain);
  EXPECT_EQ(loom_model_n_cls_out(plain.get()), 1);  // llama.cpp's default without labels
  auto g = nlohmann::json::parse(loom::test::read_text_file(loom::test::data_dir() + "/synth-bert-rank-tiny-f32.json"));
  loom_context_params cp = loom_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = 256;
  cp.n_seq_max = 8;
  cp.n_threads = 2;
  cp.type_k = cp.type_v = LOOM_TYPE_F32;  // llama.cpp's BERT attention is F32 (no KV cache)
  ContextPtr ctx(loom_context_new(m.get(), &cp));
  ASSERT_TRUE(ctx) << loom_last_error();
  EXPECT_EQ(loom_pooling_type(ctx.get()), LOOM_POOLING_RANK);  // the model's
  Batch b(256, 0, 8);
  int seq = 0;
  for (const auto& run : g["runs"]) {
    const auto ids = run["ids"].get<std::vector<int32_t>>();
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], int(i), {seq}, true);
    ++seq;
  }
  ASSERT_EQ(loom_encode(ctx.get(), &b.b), LOOM_DECODE_OK) << loom_last_error();
  for (int s = 0; s < seq; ++s) {
    const float* score = loom_get_embeddings_seq(ctx.get(), s);
    ASSERT_NE(score, nullptr) << loom_last_error();
    EXPECT_NEAR(score[0], g["runs"][size_t(s)]["score_raw"][0].get<float>(), 5e-4f) << s;
  }
  EXPECT_EQ(loom_get_embeddings_seq(ctx.get(), seq), nullptr);
  // A model without a head cannot have rank pooling.
  cp.pooling_type = LOOM_POOLING_RANK;
  EXPECT_EQ(loom_context_new(plain.get(), &cp), nullptr);
  EXPECT_NE(std::string(loom_last_error()).find("classification head"), std::string::npos) << loom_last_error();
}

// A recurrent model through the C API: the KV functions do what llama.cpp's recurrent memory
// does (loom.h), an invalid batch is refused, and seq state round-trips.
TEST(CApi, RecurrentModelStateOperations) {
  ModelPtr m(loom_model_load_from_file((loom::test::data_dir() + "/synth-mamba-tiny-f32.gguf").c_str(), nullptr));
  ASSERT_TRUE(m) << loom_last_error();
  ContextPtr ctx = context(m.get(), 128, 2);
  ASSERT_TRUE(ctx);
  const auto want = feed(ctx.get(), kPrompt, 0, 0);
  EXPECT_EQ(loom_kv_used_cells(ctx.get()), 1);
  EXPECT_EQ(loom_kv_seq_pos_min(ctx.get(), 0), 4);
  EXPECT_EQ(loom_kv_seq_rm(ctx.get(), 0, 2, -1), LOOM_ERR_UNSUPPORTED);  // the end of a state alone
  EXPECT_EQ(loom_kv_seq_rm(ctx.get(), 0, 0, 3), LOOM_OK);                // misses the state: kept
  EXPECT_EQ(loom_kv_seq_pos_max(ctx.get(), 0), 4);
  EXPECT_TRUE(loom_kv_can_shift(ctx.get()));
  EXPECT_EQ(loom_kv_seq_cp(ctx.get(), 0, 1, -1, -1), LOOM_OK);
  EXPECT_EQ(loom_kv_n_tokens(ctx.get()), 2);  // one shared state, two sequences
  Batch gap(1);
  gap.add(kPrompt[1], 7, {1}, true);  // sequence 1 continues at 5, not 7
  EXPECT_LT(loom_decode(ctx.get(), &gap.b), 0);
  const size_t n = loom_state_seq_get_size(ctx.get(), 1);
  std::vector<uint8_t> buf(n);
  ASSERT_EQ(loom_state_seq_get_data(ctx.get(), buf.data(), n, 1), n);
  EXPECT_EQ(loom_kv_seq_rm(ctx.get(), -1, -1, -1), LOOM_ERR_UNSUPPORTED);  // as llama.cpp: clear instead
  loom_kv_clear(ctx.get());
  EXPECT_EQ(loom_kv_used_cells(ctx.get()), 0);
  ASSERT_EQ(loom_state_seq_set_data(ctx.get(), buf.data(), n, 0), LOOM_OK) << loom_last_error();
  EXPECT_EQ(loom_kv_seq_pos_max(ctx.get(), 0), 4);
  ContextPtr fresh = context(m.get(), 128, 2);
  feed(fresh.get(), kPrompt, 0, 0);
  EXPECT_EQ(feed(ctx.get(), {kPrompt[1]}, 5, 0), feed(fresh.get(), {kPrompt[1]}, 5, 0));
  (void)want;
}

// Mixture of experts: loom_perf_expert_counts counts every token's chosen experts per layer
// (n_layer x n_expert entries; each token adds n_expert_used in every layer it runs through: the
// last one only for the output rows, here the prompt's last token), loom_perf_reset
// zeroes them, and a model without experts has none.
TEST(CApi, ExpertCountsOfAMixtureOfExpertsModel) {
  ModelPtr m(loom_model_load_from_file((loom::test::data_dir() + "/synth-qwen3moe-tiny-f32.gguf").c_str(), nullptr));
  ASSERT_TRUE(m) << loom_last_error();
  ContextPtr ctx = context(m.get(), 128, 1);
  ASSERT_TRUE(ctx);
  const int64_t n = loom_perf_expert_counts(ctx.get(), nullptr, 0);
  ASSERT_GT(n, 0);
  std::vector<uint64_t> c(size_t(n), 7);
  ASSERT_EQ(loom_perf_expert_counts(ctx.get(), c.data(), c.size()), n);
  EXPECT_EQ(std::count(c.begin(), c.end(), uint64_t(0)), n);  // nothing decoded yet
  feed(ctx.get(), kPrompt, 0, 0);
  ASSERT_EQ(loom_perf_expert_counts(ctx.get(), c.data(), c.size()), n);
  const uint64_t total = std::accumulate(c.begin(), c.end(), uint64_t(0));
  // synth-qwen3moe-tiny: 2 layers of 8 experts, 2 chosen per token.
  EXPECT_EQ(n, 2 * 8);
  EXPECT_EQ(total, uint64_t(kPrompt.size()) * 2 + 1 * 2);
  EXPECT_EQ(std::accumulate(c.begin(), c.begin() + 8, uint64_t(0)), uint64_t(kPrompt.size()) * 2);
  std::vector<uint64_t> head(3, 9);
  EXPECT_EQ(loom_perf_expert_counts(ctx.get(), head.data(), head.size()), n);  // copies 3, says how many there are
  EXPECT_TRUE(std::equal(head.begin(), head.end(), c.begin()));
  char report[2048];
  ASSERT_GT(loom_perf_report(ctx.get(), report, sizeof report), 0);
  EXPECT_NE(std::string(report).find("experts     = 2 of 8 per token"), std::string::npos) << report;
  loom_perf_reset(ctx.get());
  ASSERT_EQ(loom_perf_expert_counts(ctx.get(), c.data(), c.size()), n);
  EXPECT_EQ(std::accumulate(c.begin(), c.end(), uint64_t(0)), 0u);
  ModelPtr dense = load("models/stories260K.gguf");
  ASSERT_TRUE(dense);
  ContextPtr dctx = context(dense.get(), 128, 1);
  EXPECT_EQ(loom_perf_expert_counts(dctx.get(), c.data(), c.size()), 0);
  EXPECT_EQ(loom_perf_expert_counts(nullptr, c.data(), c.size()), -1);
}

// T5 through the C API: the Unigram vocabulary, loom_encode then loom_decode from the decoder
// start token, against llama.cpp's golden (F32 K/V as the golden).
TEST(CApi, T5EncodeThenDecodeMatchesTheGolden) {
  const std::string dir = loom::test::data_dir() + "/";
  ModelPtr m(loom_model_load_from_file((dir + "synth-flan-t5-tiny-f32.gguf").c_str(), nullptr));
  ASSERT_TRUE(m) << loom_last_error();
  EXPECT_EQ(loom_vocab_type(m.get()), LOOM_VOCAB_TYPE_UGM);
  EXPECT_TRUE(loom_model_has_encoder(m.get()));
  EXPECT_TRUE(loom_model_has_decoder(m.get()));
  auto g = nlohmann::json::parse(loom::test::read_text_file(dir + "synth-flan-t5-tiny-f32.json"));
  EXPECT_EQ(loom_model_decoder_start_token(m.get()), g["decoder_start"].get<int>());
  const auto& run = g["runs"][0];
  const std::string prompt = run["prompt"];
  std::vector<loom_token> ids(64);
  const int32_t n = loom_tokenize(m.get(), prompt.c_str(), int32_t(prompt.size()), ids.data(), 64, true, false);
  ASSERT_GT(n, 0);
  ids.resize(size_t(n));
  EXPECT_EQ(ids, run["prompt_ids"].get<std::vector<loom_token>>());
  loom_context_params cp = loom_context_default_params();
  cp.n_ctx = 128;
  cp.n_threads = 2;
  cp.type_k = cp.type_v = LOOM_TYPE_F32;
  ContextPtr ctx(loom_context_new(m.get(), &cp));
  ASSERT_TRUE(ctx) << loom_last_error();
  std::vector<loom_token> start = {loom_model_decoder_start_token(m.get())};
  loom_batch one = loom_batch_get_one(start.data(), 1);
  EXPECT_LT(loom_decode(ctx.get(), &one), 0);  // the encoder's output is needed first
  loom_batch enc = loom_batch_get_one(ids.data(), int32_t(ids.size()));
  ASSERT_EQ(loom_encode(ctx.get(), &enc), LOOM_DECODE_OK) << loom_last_error();
  one = loom_batch_get_one(start.data(), 1);
  ASSERT_EQ(loom_decode(ctx.get(), &one), LOOM_DECODE_OK) << loom_last_error();
  const float* l = loom_get_logits_ith(ctx.get(), -1);
  ASSERT_TRUE(l);
  const auto want = read_f32_file(dir + run["last_logits_file"].get<std::string>());
  std::vector<float> got(l, l + want.size());
  EXPECT_LE(max_abs_diff(got, want), 1e-3f * max_abs(want));

  ModelPtr e(loom_model_load_from_file((dir + "synth-t5encoder-tiny-f32.gguf").c_str(), nullptr));
  ASSERT_TRUE(e) << loom_last_error();
  EXPECT_TRUE(loom_model_has_encoder(e.get()));
  EXPECT_FALSE(loom_model_has_decoder(e.get()));
  EXPECT_EQ(loom_model_decoder_start_token(e.get()), LOOM_TOKEN_NULL);
}

TEST(CApi, InputEmbeddingsBatch) {
  auto m = load("models/stories260K.gguf");
  ASSERT_TRUE(m);
  auto ctx = context(m.get());
  const int ne = loom_n_embd(ctx.get());
  Batch b(3, ne, 1);
  ASSERT_NE(b.b.embd, nullptr);
  ASSERT_EQ(b.b.token, nullptr);
  for (int i = 0; i < 3; ++i) {
    b.add(0, i, {0}, i == 2);
    for (int d = 0; d < ne; ++d) b.b.embd[i * ne + d] = 0.01f * float((i * 7 + d) % 13) - 0.05f;
  }
  ASSERT_EQ(loom_decode(ctx.get(), &b.b), LOOM_DECODE_OK) << loom_last_error();
  const float* l = loom_get_logits_ith(ctx.get(), -1);
  ASSERT_NE(l, nullptr);
  for (int i = 0; i < loom_n_vocab(ctx.get()); ++i) ASSERT_TRUE(std::isfinite(l[i]));
  EXPECT_EQ(loom_kv_seq_pos_max(ctx.get(), 0), 2);
}

struct EvalCount {
  int calls = 0;
  bool saw_layer = false;
};
bool count_eval(const char* name, int layer, const float* data, int64_t cols, int64_t rows, void* user) {
  auto* c = static_cast<EvalCount*>(user);
  ++c->calls;
  if (layer >= 0 && name && data && cols > 0 && rows > 0) c->saw_layer = true;
  return true;
}

TEST(CApi, EvalCallbackThreadsAndCausalToggle) {
  auto m = load("models/stories260K.gguf");
  ASSERT_TRUE(m);
  EvalCount count;
  loom_context_params cp = loom_context_default_params();
  cp.n_ctx = 64;
  cp.n_threads = 2;
  cp.eval_callback = count_eval;
  cp.eval_callback_data = &count;
  ContextPtr ctx(loom_context_new(m.get(), &cp));
  ASSERT_TRUE(ctx) << loom_last_error();
  auto base = feed(ctx.get(), kPrompt, 0);
  EXPECT_GT(count.calls, 0);
  EXPECT_TRUE(count.saw_layer);
  EXPECT_EQ(loom_set_n_threads(ctx.get(), 1, 1), LOOM_OK);
  EXPECT_EQ(loom_n_threads(ctx.get()), 1);
  EXPECT_EQ(loom_n_threads_batch(ctx.get()), 1);
  loom_kv_clear(ctx.get());
  EXPECT_LE(max_abs_diff(feed(ctx.get(), kPrompt, 0), base), 1e-4f * max_abs(base));
  EXPECT_EQ(loom_set_causal_attn(ctx.get(), false), LOOM_OK);
  loom_kv_clear(ctx.get());
  auto non_causal = feed(ctx.get(), kPrompt, 0);
  EXPECT_GT(max_abs_diff(non_causal, base), 1e-3f);
  EXPECT_EQ(loom_set_causal_attn(ctx.get(), true), LOOM_OK);
}

// Prompt logits with adapters against llama.cpp's goldens; removal restores the base exactly.
TEST(CApi, LoraAdaptersMatchGoldens) {
  auto m = load("golden/adapters/synth-llama-lorabase-f32.gguf");
  ASSERT_TRUE(m);
  auto ctx = context(m.get(), 256, 1);
  auto golden = [](const char* file) { return read_f32_file(shared_path(std::string("golden/adapters/") + file)); };
  auto close = [](const std::vector<float>& got, const std::vector<float>& want) {
    return max_abs_diff(got, want) <= 1e-3f * std::max(1.0f, max_abs(want));
  };
  auto run = [&] {
    loom_kv_clear(ctx.get());
    return feed(ctx.get(), kPrompt, 0);
  };
  const auto base = run();
  EXPECT_TRUE(close(base, golden("lorabase.0.logits.f32")));

  LoraPtr a(loom_lora_adapter_load(m.get(), shared_path("golden/adapters/lora-A.gguf").c_str()));
  LoraPtr b(loom_lora_adapter_load(m.get(), shared_path("golden/adapters/lora-B.gguf").c_str()));
  ASSERT_TRUE(a && b) << loom_last_error();
  ASSERT_EQ(loom_set_lora(ctx.get(), a.get(), 1.0f), LOOM_OK) << loom_last_error();
  EXPECT_TRUE(close(run(), golden("lorabase-A100.0.logits.f32")));
  ASSERT_EQ(loom_set_lora(ctx.get(), a.get(), 0.5f), LOOM_OK);  // changes the scale
  EXPECT_TRUE(close(run(), golden("lorabase-A050.0.logits.f32")));
  ASSERT_EQ(loom_set_lora(ctx.get(), a.get(), 1.0f), LOOM_OK);
  ASSERT_EQ(loom_set_lora(ctx.get(), b.get(), 0.7f), LOOM_OK);
  EXPECT_TRUE(close(run(), golden("lorabase-A100-B070.0.logits.f32")));
  ASSERT_EQ(loom_remove_lora(ctx.get(), b.get()), LOOM_OK);
  EXPECT_EQ(loom_remove_lora(ctx.get(), b.get()), LOOM_ERR_NOT_FOUND);
  EXPECT_TRUE(close(run(), golden("lorabase-A100.0.logits.f32")));
  loom_clear_lora(ctx.get());
  EXPECT_EQ(run(), base);

  // An adapter stays usable by the context after its handle is freed.
  ASSERT_EQ(loom_set_lora(ctx.get(), a.get(), 1.0f), LOOM_OK);
  a.reset();
  EXPECT_TRUE(close(run(), golden("lorabase-A100.0.logits.f32")));
  loom_clear_lora(ctx.get());

  // An adapter for another model is refused.
  auto stories = load("models/stories260K.gguf");
  ASSERT_TRUE(stories);
  loom_clear_last_error();
  EXPECT_EQ(loom_lora_adapter_load(stories.get(), shared_path("golden/adapters/lora-A.gguf").c_str()), nullptr);
  EXPECT_STRNE(loom_last_error(), "");
  EXPECT_EQ(loom_set_lora(ctx.get(), nullptr, 1.0f), LOOM_ERR_INVALID_ARGUMENT);
}

TEST(CApi, ControlVectorMatchesGoldens) {
  auto m = load("golden/adapters/synth-llama-lorabase-f32.gguf");
  ASSERT_TRUE(m);
  auto ctx = context(m.get(), 256, 1);
  const std::string file = shared_path("golden/adapters/control-vector.gguf");
  auto golden = [](const char* f) { return read_f32_file(shared_path(std::string("golden/adapters/") + f)); };
  auto run = [&] {
    loom_kv_clear(ctx.get());
    return feed(ctx.get(), kPrompt, 0);
  };
  const auto base = run();

  CvecPtr cv(loom_control_vector_load(file.c_str(), 0.8f));
  ASSERT_TRUE(cv) << loom_last_error();
  EXPECT_EQ(loom_control_vector_n_embd(cv.get()), 64);
  EXPECT_EQ(loom_control_vector_n_layers(cv.get()), 3);
  const size_t len = size_t(loom_control_vector_n_layers(cv.get())) * size_t(loom_control_vector_n_embd(cv.get()));
  ASSERT_EQ(loom_apply_control_vector(ctx.get(), loom_control_vector_data(cv.get()), len, 64, 2, 3), LOOM_OK)
      << loom_last_error();
  auto want = golden("lorabase-cvec080-L2-3.0.logits.f32");
  auto got = run();
  EXPECT_LE(max_abs_diff(got, want), 1e-3f * std::max(1.0f, max_abs(want)));

  // Two files' vectors sum: 0.25 + 0.25 = 0.5, negated by -0.75 + 0.25.
  CvecPtr neg(loom_control_vector_load(file.c_str(), -0.75f));
  CvecPtr pos(loom_control_vector_load(file.c_str(), 0.25f));
  ASSERT_TRUE(neg && pos);
  ASSERT_EQ(loom_control_vector_add(neg.get(), pos.get()), LOOM_OK);
  ASSERT_EQ(loom_apply_control_vector(ctx.get(), loom_control_vector_data(neg.get()), len, 64, 1, 3), LOOM_OK);
  want = golden("lorabase-cvecm050-L1-3.0.logits.f32");
  got = run();
  EXPECT_LE(max_abs_diff(got, want), 1e-3f * std::max(1.0f, max_abs(want)));

  // NULL data clears; a wrong n_embd is refused.
  ASSERT_EQ(loom_apply_control_vector(ctx.get(), nullptr, 0, 0, 0, 0), LOOM_OK);
  EXPECT_EQ(run(), base);
  EXPECT_LT(loom_apply_control_vector(ctx.get(), loom_control_vector_data(cv.get()), len, 32, 1, 3), 0);
  EXPECT_STRNE(loom_last_error(), "");
}

TEST(CApi, StateOfAnotherModelIsRefused) {
  auto m = load("models/stories260K.gguf");
  auto other = load("golden/adapters/synth-llama-lorabase-f32.gguf");
  ASSERT_TRUE(m && other);
  auto a = context(m.get(), 64, 1);
  auto b = context(other.get(), 64, 1);
  feed(a.get(), kPrompt, 0);
  std::vector<uint8_t> data(loom_state_get_size(a.get()));
  ASSERT_EQ(loom_state_get_data(a.get(), data.data(), data.size()), data.size());
  feed(b.get(), {1, 2, 3}, 0);
  loom_clear_last_error();
  EXPECT_LT(loom_state_set_data(b.get(), data.data(), data.size()), 0);
  EXPECT_NE(std::string(loom_last_error()).find("different model"), std::string::npos) << loom_last_error();
  EXPECT_EQ(loom_kv_used_cells(b.get()), 3);
  EXPECT_EQ(loom_state_set_data(b.get(), nullptr, 10), LOOM_ERR_INVALID_ARGUMENT);
}

TEST(CApi, ContextParamsAreResolved) {
  auto m = load("models/stories260K.gguf");
  ASSERT_TRUE(m);
  loom_context_params cp = loom_context_default_params();
  cp.n_ctx = 0;  // the model's training context
  cp.n_threads = 1;
  cp.type_k = LOOM_TYPE_F32;
  cp.type_v = LOOM_TYPE_F32;
  ContextPtr ctx(loom_context_new(m.get(), &cp));
  ASSERT_TRUE(ctx) << loom_last_error();
  EXPECT_EQ(loom_n_ctx(ctx.get()), loom_model_n_ctx_train(m.get()));
  EXPECT_LE(loom_n_batch(ctx.get()), loom_n_ctx(ctx.get()));
  EXPECT_EQ(loom_n_threads_batch(ctx.get()), 1);
  auto l = feed(ctx.get(), kPrompt, 0);
  EXPECT_EQ(std::max_element(l.begin(), l.end()) - l.begin(), 432);
  cp.type_k = 12345;
  EXPECT_EQ(loom_context_new(m.get(), &cp), nullptr);
  EXPECT_NE(std::string(loom_last_error()).find("type"), std::string::npos);
  cp.type_k = LOOM_TYPE_Q8_0;  // head_dim 8 cannot hold q8_0 blocks: refused with a message
  EXPECT_EQ(loom_context_new(m.get(), &cp), nullptr);
  EXPECT_NE(std::string(loom_last_error()).find("q8_0"), std::string::npos);
  cp = loom_context_default_params();
  cp.n_seq_max = 100000;
  EXPECT_EQ(loom_context_new(m.get(), &cp), nullptr);
  // Sliding window: -1 (the model's: none for llama) by default; a window shorter than the
  // prompt changes the logits; below -1 is refused.
  cp = loom_context_default_params();
  EXPECT_EQ(cp.n_swa, -1);
  cp.n_threads = 1;
  cp.type_k = cp.type_v = LOOM_TYPE_F32;
  cp.n_ctx = 0;
  cp.n_swa = int32_t(kPrompt.size());
  ContextPtr covering(loom_context_new(m.get(), &cp));
  ASSERT_TRUE(covering) << loom_last_error();
  EXPECT_EQ(feed(covering.get(), kPrompt, 0), l);
  cp.n_swa = 2;
  ContextPtr windowed(loom_context_new(m.get(), &cp));
  ASSERT_TRUE(windowed) << loom_last_error();
  EXPECT_NE(feed(windowed.get(), kPrompt, 0), l);
  cp.n_swa = -2;
  EXPECT_EQ(loom_context_new(m.get(), &cp), nullptr);
  EXPECT_NE(std::string(loom_last_error()).find("n_swa"), std::string::npos);
}

}  // namespace
