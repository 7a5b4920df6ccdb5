/* The C API exercised from C: tokenize, decode, greedy generation against llama.cpp's golden ids
 * for stories260K, sequence operations, state round trips and error paths.
 * Usage: test_capi MODEL.gguf   ($LOOM_SHARED/models/stories260K.gguf wins when LOOM_SHARED is set)
 * Prints "N passed, M failed" last; exits non-zero on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/loom.h"

static int g_passed = 0;
static int g_failed = 0;

#define CHECK(cond)                                                                                                \
  do {                                                                                                             \
    if (cond) {                                                                                                    \
      ++g_passed;                                                                                                  \
    } else {                                                                                                       \
      ++g_failed;                                                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, loom_last_error()); \
    }                                                                                                              \
  } while (0)

static const loom_token kPrompt[] = {1, 403, 407, 261, 378};
static const loom_token kGreedy[] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337};
#define N_PROMPT 5
#define N_GREEDY 16

static int argmax(const float* v, int n) {
  int best = 0;
  int i;
  for (i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

static int equal_floats(const float* a, const float* b, int n) { return memcmp(a, b, (size_t)n * sizeof(float)) == 0; }

static loom_context* new_context(const loom_model* model, int n_ctx, int n_seq_max) {
  loom_context_params cp = loom_context_default_params();
  cp.n_ctx = n_ctx;
  cp.n_batch = n_ctx;
  cp.n_ubatch = n_ctx;
  cp.n_seq_max = n_seq_max;
  cp.n_threads = 2;
  return loom_context_new(model, &cp);
}

/* Decodes tokens at positions start.. into seq; output for the last one. */
static int32_t feed(loom_context* ctx, const loom_token* ids, int n, int start, loom_seq_id seq) {
  loom_batch b = loom_batch_init(n, 0, 1);
  int32_t rc;
  int i;
  if (!b.token) return -100;
  for (i = 0; i < n; ++i) {
    b.token[i] = ids[i];
    b.pos[i] = start + i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = seq;
    b.logits[i] = (int8_t)(i == n - 1);
  }
  b.n_tokens = n;
  rc = loom_decode(ctx, &b);
  loom_batch_free(&b);
  return rc;
}

static void test_model_and_vocab(const loom_model* model) {
  char buf[256];
  loom_token toks[64];
  int32_t n, i;
  CHECK(strlen(loom_version()) > 0);
  CHECK(strcmp(loom_model_arch_name(model), "llama") == 0);
  CHECK(loom_model_n_vocab(model) == 512);
  CHECK(loom_model_n_embd(model) > 0);
  CHECK(loom_model_n_layer(model) > 0);
  CHECK(loom_model_n_ctx_train(model) > 0);
  CHECK(loom_model_size(model) > 0);
  CHECK(loom_model_n_params(model) > 0);
  n = loom_model_desc(model, buf, sizeof buf);
  CHECK(n > 0 && strncmp(buf, "llama ", 6) == 0);
  CHECK(loom_model_desc(model, NULL, 0) == n);
  CHECK(loom_model_meta_val_str(model, "general.architecture", buf, sizeof buf) == 5 && strcmp(buf, "llama") == 0);
  CHECK(loom_model_meta_val_str(model, "no.such.key", buf, sizeof buf) == -1);
  CHECK(loom_model_meta_count(model) > 0);
  CHECK(loom_model_meta_key_by_index(model, 0, buf, sizeof buf) > 0);
  CHECK(loom_model_meta_val_str_by_index(model, loom_model_meta_count(model), buf, sizeof buf) == -1);
  CHECK(loom_vocab_type(model) == LOOM_VOCAB_TYPE_SPM);

  /* tokenize with size negotiation */
  n = loom_tokenize(model, "Once upon a time", -1, toks, 2, true, false);
  CHECK(n == -N_PROMPT);
  n = loom_tokenize(model, "Once upon a time", -1, toks, 64, true, false);
  CHECK(n == N_PROMPT);
  for (i = 0; i < N_PROMPT && n == N_PROMPT; ++i) CHECK(toks[i] == kPrompt[i]);
  n = loom_tokenize(model, "Once upon a time", 4, toks, 64, false, false); /* "Once" */
  CHECK(n >= 1);

  /* pieces and detokenize */
  CHECK(loom_token_bos(model) == 1);
  CHECK(loom_token_eos(model) == 2);
  CHECK(loom_add_bos_token(model));
  CHECK(loom_token_is_eog(model, loom_token_eos(model)));
  CHECK(!loom_token_is_eog(model, 403));
  CHECK(loom_token_is_control(model, loom_token_bos(model)));
  CHECK(strlen(loom_token_get_text(model, 403)) > 0);
  CHECK(strcmp(loom_token_get_text(model, 99999), "") == 0);
  CHECK((loom_token_get_attr(model, 403) & LOOM_TOKEN_ATTR_NORMAL) != 0);
  n = loom_token_to_piece(model, 403, buf, sizeof buf, 0, false);
  CHECK(n > 0);
  CHECK(loom_token_to_piece(model, 403, buf, 0, 0, false) == -n);
  CHECK(loom_token_to_piece(model, 1, buf, sizeof buf, 0, false) == 0); /* BOS renders as nothing */
  CHECK(loom_token_to_piece(model, 1, buf, sizeof buf, 0, true) == 3);  /* "<s>" */
  n = loom_detokenize(model, kPrompt + 1, N_PROMPT - 1, buf, sizeof buf, false, false);
  CHECK(n == 16 && strncmp(buf, "Once upon a time", 16) == 0);
  CHECK(loom_detokenize(model, kPrompt + 1, N_PROMPT - 1, buf, 3, false, false) == -16);
  /* llama.cpp's rule: after a removed BOS the space prefix stays */
  n = loom_detokenize(model, kPrompt, N_PROMPT, buf, sizeof buf, true, false);
  CHECK(n == 17 && strncmp(buf, " Once upon a time", 17) == 0);

  /* vocab errors */
  loom_clear_last_error();
  CHECK(loom_token_to_piece(model, 99999, buf, sizeof buf, 0, false) == LOOM_SIZE_ERROR);
  CHECK(strlen(loom_last_error()) > 0);
  toks[0] = -5;
  loom_clear_last_error();
  CHECK(loom_detokenize(model, toks, 1, buf, sizeof buf, false, false) == LOOM_SIZE_ERROR);
  CHECK(strlen(loom_last_error()) > 0);
  CHECK(loom_tokenize(NULL, "x", -1, toks, 64, true, false) == LOOM_SIZE_ERROR);
}

static void test_generate(const loom_model* model) {
  loom_context* ctx = new_context(model, 128, 4);
  loom_token tok;
  int k, pos, ok = 1;
  const int n_vocab = loom_model_n_vocab(model);
  CHECK(ctx != NULL);
  if (!ctx) return;
  CHECK(loom_n_ctx(ctx) == 128);
  CHECK(loom_n_seq_max(ctx) == 4);
  CHECK(loom_n_batch(ctx) == 128 && loom_n_ubatch(ctx) == 128);
  CHECK(loom_n_threads(ctx) == 2);
  CHECK(loom_kv_can_shift(ctx));
  CHECK(loom_warmup(ctx) == LOOM_OK);
  CHECK(loom_kv_used_cells(ctx) == 0);

  CHECK(feed(ctx, kPrompt, N_PROMPT, 0, 0) == LOOM_DECODE_OK);
  CHECK(loom_n_outputs(ctx) == 1);
  CHECK(loom_get_logits(ctx) == loom_get_logits_ith(ctx, -1));
  CHECK(loom_get_logits_ith(ctx, N_PROMPT - 1) == loom_get_logits_ith(ctx, -1));
  loom_clear_last_error();
  CHECK(loom_get_logits_ith(ctx, 0) == NULL); /* row 0 produced no output */
  CHECK(strlen(loom_last_error()) > 0);
  pos = N_PROMPT;
  for (k = 0; k < N_GREEDY; ++k) {
    const float* l = loom_get_logits_ith(ctx, -1);
    if (!l) {
      ok = 0;
      break;
    }
    tok = (loom_token)argmax(l, n_vocab);
    if (tok != kGreedy[k]) {
      fprintf(stderr, "greedy step %d: got %d, want %d\n", k, (int)tok, (int)kGreedy[k]);
      ok = 0;
      break;
    }
    {
      loom_batch one = loom_batch_get_one(&tok, 1); /* continues sequence 0 */
      if (loom_decode(ctx, &one) != LOOM_DECODE_OK) {
        ok = 0;
        break;
      }
    }
    ++pos;
  }
  CHECK(ok);
  CHECK(loom_kv_seq_pos_max(ctx, 0) == N_PROMPT + N_GREEDY - 1);
  CHECK(loom_kv_seq_pos_min(ctx, 0) == 0);
  CHECK(loom_kv_n_tokens(ctx) == N_PROMPT + N_GREEDY);

  {
    loom_perf_data pd = loom_perf_get(ctx);
    char report[1024];
    CHECK(pd.n_prompt_tokens >= N_PROMPT);
    CHECK(pd.n_gen_tokens >= N_GREEDY);
    CHECK(pd.n_reused == 0); /* every token computed */
    CHECK(loom_perf_report(ctx, report, sizeof report) > 0 && strstr(report, "eval") != NULL);
    loom_perf_reset(ctx);
    pd = loom_perf_get(ctx);
    CHECK(pd.n_gen_tokens == 0);
  }
  loom_context_free(ctx);
}

/* seq_cp shares the prompt with sequence 1; both continue identically; seq_rm drops it again. */
static void test_sequences(const loom_model* model) {
  loom_context* ctx = new_context(model, 128, 4);
  const int n_vocab = loom_model_n_vocab(model);
  float* a;
  loom_token next = kGreedy[0];
  CHECK(ctx != NULL);
  if (!ctx) return;
  CHECK(feed(ctx, kPrompt, N_PROMPT, 0, 0) == LOOM_DECODE_OK);
  CHECK(loom_kv_seq_cp(ctx, 0, 1, -1, -1) == LOOM_OK);
  CHECK(loom_kv_used_cells(ctx) == N_PROMPT); /* shared cells */
  CHECK(loom_kv_n_tokens(ctx) == 2 * N_PROMPT);
  CHECK(loom_kv_seq_pos_max(ctx, 1) == N_PROMPT - 1);
  a = (float*)malloc((size_t)n_vocab * sizeof(float));
  CHECK(feed(ctx, &next, 1, N_PROMPT, 0) == LOOM_DECODE_OK);
  memcpy(a, loom_get_logits_ith(ctx, -1), (size_t)n_vocab * sizeof(float));
  CHECK(feed(ctx, &next, 1, N_PROMPT, 1) == LOOM_DECODE_OK);
  CHECK(equal_floats(a, loom_get_logits_ith(ctx, -1), n_vocab));
  CHECK(argmax(a, n_vocab) == kGreedy[1]);

  CHECK(loom_kv_seq_rm(ctx, 1, -1, -1) == LOOM_OK);
  CHECK(loom_kv_seq_pos_max(ctx, 1) == -1);
  CHECK(loom_kv_seq_pos_max(ctx, 0) == N_PROMPT);
  CHECK(loom_kv_seq_rm(ctx, 0, N_PROMPT, -1) == LOOM_OK);
  CHECK(loom_kv_seq_pos_max(ctx, 0) == N_PROMPT - 1);
  CHECK(loom_kv_seq_keep(ctx, 0) == LOOM_OK);
  CHECK(loom_kv_seq_add(ctx, 0, 0, -1, 3) == LOOM_OK);
  CHECK(loom_kv_seq_pos_max(ctx, 0) == N_PROMPT + 2);
  CHECK(loom_kv_update(ctx) == LOOM_OK);
  CHECK(loom_kv_seq_div(ctx, 0, 0, -1, 2) == LOOM_OK);
  loom_kv_defrag(ctx);
  loom_kv_clear(ctx);
  CHECK(loom_kv_used_cells(ctx) == 0);

  /* errors */
  CHECK(loom_kv_seq_cp(ctx, 0, 9, -1, -1) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_kv_seq_div(ctx, 0, 0, -1, 0) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_kv_seq_pos_max(ctx, 4) == LOOM_SIZE_ERROR);
  free(a);
  loom_context_free(ctx);
}

static void test_state(const loom_model* model) {
  loom_context* ctx = new_context(model, 64, 2);
  loom_context* other = new_context(model, 64, 2);
  const int n_vocab = loom_model_n_vocab(model);
  const char* path = "loom_capi_test_state.bin";
  float* want = (float*)malloc((size_t)n_vocab * sizeof(float));
  uint8_t* data;
  size_t size, n_tok = 0;
  loom_token toks[8];
  loom_token next = kGreedy[0];
  CHECK(ctx != NULL && other != NULL);
  if (!ctx || !other) return;
  CHECK(feed(ctx, kPrompt, N_PROMPT, 0, 0) == LOOM_DECODE_OK);
  size = loom_state_get_size(ctx);
  CHECK(size > 0);
  data = (uint8_t*)malloc(size);
  CHECK(loom_state_get_data(ctx, data, size - 1) == 0); /* too small */
  CHECK(loom_state_get_data(ctx, data, size) == size);
  CHECK(feed(ctx, &next, 1, N_PROMPT, 0) == LOOM_DECODE_OK);
  memcpy(want, loom_get_logits_ith(ctx, -1), (size_t)n_vocab * sizeof(float));

  /* memory round trip into another context: same next-step logits */
  CHECK(loom_state_set_data(other, data, size) == LOOM_OK);
  CHECK(loom_kv_seq_pos_max(other, 0) == N_PROMPT - 1);
  CHECK(feed(other, &next, 1, N_PROMPT, 0) == LOOM_DECODE_OK);
  CHECK(equal_floats(want, loom_get_logits_ith(other, -1), n_vocab));

  /* a corrupt state is refused and changes nothing */
  data[size / 2] ^= 0x5a;
  CHECK(loom_state_set_data(other, data, size) < 0);
  CHECK(loom_kv_seq_pos_max(other, 0) == N_PROMPT);
  data[size / 2] ^= 0x5a;

  /* file round trip with tokens; too little capacity loads nothing */
  loom_kv_clear(other);
  CHECK(loom_state_set_data(ctx, data, size) == LOOM_OK);
  CHECK(loom_state_save_file(ctx, path, kPrompt, N_PROMPT) == LOOM_OK);
  CHECK(loom_state_load_file(other, path, toks, 2, &n_tok) == LOOM_ERR_RESOURCE_EXHAUSTED);
  CHECK(n_tok == N_PROMPT);
  CHECK(loom_kv_used_cells(other) == 0);
  n_tok = 0;
  CHECK(loom_state_load_file(other, path, toks, 8, &n_tok) == LOOM_OK);
  CHECK(n_tok == N_PROMPT && memcmp(toks, kPrompt, sizeof kPrompt) == 0);
  /* the file's tokens come back with their KV: reused, not computed (the memory state above had none) */
  CHECK(loom_perf_get(other).n_reused == N_PROMPT);
  CHECK(feed(other, &next, 1, N_PROMPT, 0) == LOOM_DECODE_OK);
  CHECK(equal_floats(want, loom_get_logits_ith(other, -1), n_vocab));
  remove(path);

  /* sequence state restored into another sequence id */
  free(data);
  size = loom_state_seq_get_size(ctx, 0);
  CHECK(size > 0);
  data = (uint8_t*)malloc(size);
  CHECK(loom_state_seq_get_data(ctx, data, size, 0) == size);
  loom_kv_clear(other);
  CHECK(loom_state_seq_set_data(other, data, size, 1) == LOOM_OK);
  CHECK(loom_kv_seq_pos_max(other, 1) == N_PROMPT - 1);
  CHECK(loom_kv_seq_pos_max(other, 0) == -1);
  CHECK(feed(other, &next, 1, N_PROMPT, 1) == LOOM_DECODE_OK);
  CHECK(equal_floats(want, loom_get_logits_ith(other, -1), n_vocab));
  CHECK(loom_state_seq_save_file(ctx, path, 0, kPrompt, N_PROMPT) == LOOM_OK);
  n_tok = 0;
  CHECK(loom_state_seq_load_file(other, path, 0, toks, 8, &n_tok) == LOOM_OK);
  CHECK(n_tok == N_PROMPT);
  CHECK(loom_kv_seq_pos_max(other, 0) == N_PROMPT - 1);
  CHECK(loom_state_set_data(other, data, size) < 0); /* a sequence state is not a whole state */
  CHECK(loom_state_load_file(other, "/nonexistent/state.bin", NULL, 0, NULL) < 0);
  remove(path);

  free(data);
  free(want);
  loom_context_free(other);
  loom_context_free(ctx);
}

static int g_abort_calls = 0;
static bool abort_now(void* data) {
  (void)data;
  ++g_abort_calls;
  return true;
}

static void test_errors(const loom_model* model, const char* model_path) {
  loom_context* ctx = new_context(model, 32, 1);
  loom_token bad[2] = {1, 99999};
  loom_batch b;
  loom_model_params mp = loom_model_default_params();
  loom_model* vocab_model;
  CHECK(ctx != NULL);
  if (!ctx) return;

  /* invalid token: negative, message, cache untouched */
  loom_clear_last_error();
  b = loom_batch_get_one(bad, 2);
  CHECK(loom_decode(ctx, &b) < 0);
  CHECK(strlen(loom_last_error()) > 0 && strstr(loom_last_error(), "99999") != NULL);
  CHECK(loom_kv_used_cells(ctx) == 0);
  b = loom_batch_get_one(bad, 0);
  CHECK(loom_decode(ctx, &b) < 0);
  CHECK(loom_decode(ctx, NULL) < 0);
  CHECK(loom_decode(NULL, &b) < 0);
  b.n_tokens = 1;
  b.token = NULL; /* neither tokens nor embeddings */
  CHECK(loom_decode(ctx, &b) < 0);
  {
    /* more tokens than the cache holds: no slot (1) */
    loom_token many[32];
    int i;
    for (i = 0; i < 32; ++i) many[i] = 300;
    CHECK(feed(ctx, many, 20, 0, 0) == LOOM_DECODE_OK);
    CHECK(feed(ctx, many, 20, 20, 0) == LOOM_DECODE_NO_KV_SLOT);
    CHECK(loom_kv_used_cells(ctx) == 20);
    loom_kv_clear(ctx);
  }
  /* seq id out of range */
  {
    loom_batch sb = loom_batch_init(1, 0, 1);
    sb.n_tokens = 1;
    sb.token[0] = 1;
    sb.pos[0] = 0;
    sb.n_seq_id[0] = 1;
    sb.seq_id[0][0] = 3;
    sb.logits[0] = 1;
    loom_clear_last_error();
    CHECK(loom_decode(ctx, &sb) == LOOM_DECODE_INVALID);
    CHECK(strlen(loom_last_error()) > 0);
    loom_batch_free(&sb);
    CHECK(sb.token == NULL);
  }
  /* abort callback */
  CHECK(loom_set_abort_callback(ctx, abort_now, NULL) == LOOM_OK);
  CHECK(feed(ctx, kPrompt, N_PROMPT, 0, 0) == LOOM_DECODE_ABORTED);
  CHECK(g_abort_calls > 0);
  CHECK(loom_kv_used_cells(ctx) == 0);
  CHECK(loom_set_abort_callback(ctx, NULL, NULL) == LOOM_OK);
  CHECK(feed(ctx, kPrompt, N_PROMPT, 0, 0) == LOOM_DECODE_OK);

  /* NULL model -> NULL context; bad path -> NULL model; bad params */
  loom_clear_last_error();
  CHECK(loom_context_new(NULL, NULL) == NULL);
  CHECK(strlen(loom_last_error()) > 0);
  loom_clear_last_error();
  CHECK(loom_model_load_from_file("/nonexistent/model.gguf", NULL) == NULL);
  CHECK(strlen(loom_last_error()) > 0);
  CHECK(loom_model_load_from_file(NULL, NULL) == NULL);
  {
    loom_context_params cp = loom_context_default_params();
    cp.pooling_type = 42;
    CHECK(loom_context_new(model, &cp) == NULL);
    cp = loom_context_default_params();
    cp.n_ctx = -1;
    CHECK(loom_context_new(model, &cp) == NULL);
  }
  CHECK(loom_set_embeddings(NULL, true) == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(loom_get_logits(NULL) == NULL);
  CHECK(loom_n_ctx(NULL) == 0);
  CHECK(loom_lora_adapter_load(model, "/nonexistent/lora.gguf") == NULL);
  CHECK(loom_control_vector_load("/nonexistent/cvec.gguf", 1.0f) == NULL);
  CHECK(strcmp(loom_status_string(LOOM_ERR_NOT_FOUND), "not found") == 0);

  /* vocab-only: tokenizes, cannot run */
  mp.vocab_only = true;
  vocab_model = loom_model_load_from_file(model_path, &mp);
  CHECK(vocab_model != NULL);
  if (vocab_model) {
    loom_token toks[16];
    CHECK(loom_model_is_vocab_only(vocab_model));
    CHECK(loom_tokenize(vocab_model, "Once upon a time", -1, toks, 16, true, false) == N_PROMPT);
    CHECK(loom_model_n_vocab(vocab_model) == 512);
    loom_clear_last_error();
    CHECK(loom_context_new(vocab_model, NULL) == NULL);
    CHECK(strstr(loom_last_error(), "vocab_only") != NULL);
    loom_model_free(vocab_model);
  }
  loom_context_free(ctx);
}

/* The context keeps its model alive after the model handle is freed. */
static void test_lifetime(const char* model_path) {
  loom_model* m = loom_model_load_from_file(model_path, NULL);
  loom_context* ctx;
  CHECK(m != NULL);
  if (!m) return;
  ctx = new_context(m, 32, 1);
  loom_model_free(m);
  CHECK(ctx != NULL);
  if (!ctx) return;
  CHECK(feed(ctx, kPrompt, N_PROMPT, 0, 0) == LOOM_DECODE_OK);
  CHECK(argmax(loom_get_logits_ith(ctx, -1), loom_n_vocab(ctx)) == kGreedy[0]);
  loom_context_free(ctx);
}

int main(int argc, char** argv) {
  char path[4096];
  const char* shared = getenv("LOOM_SHARED");
  loom_model* model;
  if (shared && *shared) {
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
  } else if (argc > 1) {
    snprintf(path, sizeof path, "%s", argv[1]);
  } else {
    fprintf(stderr, "usage: %s MODEL.gguf (or set LOOM_SHARED)\n", argv[0]);
    return 2;
  }
  model = loom_model_load_from_file(path, NULL);
  if (!model) {
    fprintf(stderr, "cannot load %s: %s\n", path, loom_last_error());
    printf("0 passed, 1 failed\n");
    return 1;
  }
  test_model_and_vocab(model);
  test_generate(model);
  test_sequences(model);
  test_state(model);
  test_errors(model, path);
  test_lifetime(path);
  loom_model_free(model);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
