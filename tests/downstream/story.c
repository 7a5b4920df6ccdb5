/* A program that uses an installed loom and nothing from its source tree: greedy generation with
 * the C API. Built by tests/downstream/CMakeLists.txt (find_package) and by run.sh with
 * pkg-config; run on stories260K it must print llama.cpp's golden story.
 *   story MODEL.gguf "PROMPT" N_TOKENS */
#include <loom/loom.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL PROMPT N\n", argv[0]);
    return 2;
  }
  const int n_predict = atoi(argv[3]);
  loom_model* model = loom_model_load_from_file(argv[1], NULL);
  if (!model) {
    fprintf(stderr, "load: %s\n", loom_last_error());
    return 1;
  }
  loom_context_params cp = loom_context_default_params();
  cp.n_ctx = 512;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  loom_context* ctx = loom_context_new(model, &cp);
  if (!ctx) {
    fprintf(stderr, "context: %s\n", loom_last_error());
    return 1;
  }
  loom_token tokens[512];
  const int32_t n = loom_tokenize(model, argv[2], -1, tokens, 512, true, false);
  if (n <= 0 || n + n_predict > 512) return 1;
  loom_batch batch = loom_batch_get_one(tokens, n);
  const int32_t n_vocab = loom_model_n_vocab(model);
  for (int i = 0; i < n_predict; ++i) {
    if (loom_decode(ctx, &batch) != LOOM_DECODE_OK) {
      fprintf(stderr, "decode: %s\n", loom_last_error());
      return 1;
    }
    const float* logits = loom_get_logits_ith(ctx, -1);
    loom_token best = 0;
    for (loom_token t = 1; t < n_vocab; ++t)
      if (logits[t] > logits[best]) best = t;
    if (loom_token_is_eog(model, best)) break;
    char piece[64];
    const int32_t k = loom_token_to_piece(model, best, piece, sizeof piece, 0, false);
    if (k > 0) fwrite(piece, 1, (size_t)k, stdout);
    tokens[n + i] = best;
    batch = loom_batch_get_one(&tokens[n + i], 1);
  }
  printf("\n");
  fprintf(stderr, "%s\n", loom_version());
  loom_context_free(ctx);
  loom_model_free(model);
  return 0;
}
