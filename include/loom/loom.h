/*
 * loom C API: a plain C interface (C99 and C++) to loom's model, vocabulary and inference
 * context, for language bindings. Behaviour follows llama.cpp's C API; names are loom's own.
 *
 * Error model
 *   - Nothing aborts and nothing throws across this boundary.
 *   - A function that can fail returns an int32_t status (LOOM_OK = 0, a negative LOOM_ERR_*
 *     otherwise), or a NULL handle / pointer, or the documented error value of its return type.
 *     decode/encode return their own codes (LOOM_DECODE_*).
 *   - Every failure records a message for the calling thread: loom_last_error(). Successful
 *     calls do not clear it (use loom_clear_last_error()).
 *
 * Lifetimes
 *   - A context keeps its model alive: freeing the model handle while contexts exist is safe.
 *     The same holds for LoRA adapters attached to a context.
 *   - Pointers returned by get_logits / get_embeddings stay valid until the next decode, encode,
 *     state load or free of that context. Strings returned by token / model getters live as long
 *     as the model handle.
 *   - A context is used by one thread at a time; a model may be shared by many.
 *
 * Versions and ABI (libloom.so.MAJOR)
 *   - LOOM_VERSION_MAJOR / MINOR / PATCH below are the version of these headers; loom_version()
 *     says which library is loaded.
 *   - Within one MAJOR version (one SONAME) the ABI only grows: functions, enum values and
 *     JSON fields (loom_serve.h) may be added; existing functions keep their signatures and
 *     meaning, and no struct changes size or layout. A MINOR release may add functions; a PATCH
 *     release changes no declaration.
 *   - Anything else — a struct layout (the *_params structs included), a signature, a removed
 *     function — bumps MAJOR and with it the SONAME. LOOM_C_API_VERSION counts such breaks; while
 *     MAJOR is 0 (before 1.0) a MINOR release may still break, and says so in CHANGELOG.md.
 *   - Structs are passed by pointer and made by loom_*_default_params(); fill them from those,
 *     never from a literal, so that a rebuilt program gets the defaults of new fields.
 */
#ifndef LOOM_LOOM_H
#define LOOM_LOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(LOOM_BUILD_SHARED)
#define LOOM_API __declspec(dllexport)
#elif defined(LOOM_USE_SHARED)
#define LOOM_API __declspec(dllimport)
#else
#define LOOM_API
#endif
#else
#define LOOM_API __attribute__((visibility("default")))
#endif

/* Bumped when a struct layout or a signature changes. */
#define LOOM_C_API_VERSION 3

/* The version of these headers (checked against CMake's project version at build time). */
#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 3
#define LOOM_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t loom_token;
typedef int32_t loom_pos;
typedef int32_t loom_seq_id;

#define LOOM_TOKEN_NULL (-1)

typedef struct loom_model loom_model;
typedef struct loom_context loom_context;
typedef struct loom_lora_adapter loom_lora_adapter;
typedef struct loom_control_vector loom_control_vector;

/* ---- status codes ------------------------------------------------------------------------- */

enum loom_status {
  LOOM_OK = 0,
  LOOM_ERR_INVALID_ARGUMENT = -1,   /* malformed argument: NULL handle, bad id, bad size */
  LOOM_ERR_NOT_FOUND = -2,          /* file, tensor, key or adapter missing */
  LOOM_ERR_CORRUPT = -3,            /* file content malformed or inconsistent */
  LOOM_ERR_UNSUPPORTED = -4,        /* well-formed but not implemented */
  LOOM_ERR_IO = -5,                 /* the OS refused (open, read, write) */
  LOOM_ERR_OUT_OF_RANGE = -6,       /* index past the end */
  LOOM_ERR_RESOURCE_EXHAUSTED = -7, /* no room (KV cache full, buffer too small) */
  LOOM_ERR_ABORTED = -8,            /* stopped by a callback */
  LOOM_ERR_INTERNAL = -9,
  LOOM_ERR_OUT_OF_MEMORY = -10,
  LOOM_ERR_UNAVAILABLE = -11 /* not now: a queue is full or it is shutting down (retry later) */
};

/* decode / encode results. */
enum loom_decode_result {
  LOOM_DECODE_OK = 0,
  LOOM_DECODE_NO_KV_SLOT = 1, /* no room for the batch: free cells (seq_rm) and retry */
  LOOM_DECODE_ABORTED = 2,    /* the abort callback stopped it; the KV cache is unchanged */
  LOOM_DECODE_INVALID = -1,   /* invalid input (message says which); the KV cache is unchanged */
  LOOM_DECODE_INTERNAL = -3   /* internal error or out of memory */
};

/* Returned by the size-negotiating functions (tokenize, token_to_piece, detokenize) on error;
 * any other negative value n means "buffer too small, -n needed". */
#define LOOM_SIZE_ERROR (-2147483647 - 1)

/* Message of the last failure on this thread ("" when none). Valid until the next failing call
 * on this thread. Never NULL. */
LOOM_API const char* loom_last_error(void);
LOOM_API void loom_clear_last_error(void);
/* Name of a LOOM_ERR_* code ("ok", "invalid argument", ...). */
LOOM_API const char* loom_status_string(int32_t status);

/* "MAJOR.MINOR.PATCH (git COMMIT)" of the library: the project version, then the commit it was
 * built from ("unknown" outside a git checkout, "-dirty" with uncommitted changes). */
LOOM_API const char* loom_version(void);

/* Log level of loom's stderr logging: 0 debug, 1 info, 2 warn (default), 3 error, 4 none. */
LOOM_API void loom_set_log_level(int32_t level);
/* Log messages at or above the level go to callback (level as loom_set_log_level's, the text
 * without a trailing newline) instead of stderr, from any thread; NULL restores stderr. */
typedef void (*loom_log_callback)(int32_t level, const char* text, void* user_data);
LOOM_API void loom_set_log_callback(loom_log_callback callback, void* user_data);

/* ---- model --------------------------------------------------------------------------------- */

/* Load progress: the fraction done, 0 first and 1 last, on the loading thread. */
typedef void (*loom_progress_callback)(float progress, void* user_data);

typedef struct loom_model_params {
  bool vocab_only;                          /* load only the tokenizer (no weights; contexts cannot be created) */
  loom_progress_callback progress_callback; /* NULL: none */
  void* progress_callback_user_data;
} loom_model_params;

LOOM_API loom_model_params loom_model_default_params(void);
/* params NULL: defaults. NULL on failure. */
LOOM_API loom_model* loom_model_load_from_file(const char* path, const loom_model_params* params);
LOOM_API void loom_model_free(loom_model* model);

LOOM_API bool loom_model_is_vocab_only(const loom_model* model);
LOOM_API int32_t loom_model_n_vocab(const loom_model* model);
LOOM_API int32_t loom_model_n_embd(const loom_model* model);
/* Outputs of the model's classification head (rerankers): the length of loom_get_embeddings_seq
 * under rank pooling. The number of <arch>.classifier.output_labels, 1 without labels. */
LOOM_API int32_t loom_model_n_cls_out(const loom_model* model);
LOOM_API int32_t loom_model_n_layer(const loom_model* model);
LOOM_API int32_t loom_model_n_head(const loom_model* model);
LOOM_API int32_t loom_model_n_head_kv(const loom_model* model);
LOOM_API int32_t loom_model_n_ctx_train(const loom_model* model);
/* Encoder-decoder models (T5, since 0.2): has_encoder is true for t5 and t5encoder, has_decoder
 * false for t5encoder (an embedding model). A T5 runs loom_encode on the input first, then
 * loom_decode from loom_model_decoder_start_token (t5.decoder_start_token_id, else BOS, else the
 * pad id; LOOM_TOKEN_NULL for other models); its decoder cross-attends to the last encode's
 * tokens of the same sequences. */
LOOM_API bool loom_model_has_encoder(const loom_model* model);
LOOM_API bool loom_model_has_decoder(const loom_model* model);
LOOM_API loom_token loom_model_decoder_start_token(const loom_model* model);
LOOM_API float loom_model_rope_freq_scale_train(const loom_model* model);
/* general.architecture ("llama"); "" when missing or model is NULL. */
LOOM_API const char* loom_model_arch_name(const loom_model* model);
/* Bytes of all tensors / number of weight parameters. */
LOOM_API uint64_t loom_model_size(const loom_model* model);
LOOM_API uint64_t loom_model_n_params(const loom_model* model);

/* The string functions below follow snprintf: they write at most buf_size bytes including the
 * terminating NUL and return the length of the full string (excluding NUL), or -1 on error
 * (missing key, index out of range, NULL model). buf may be NULL when buf_size is 0. */

/* "<arch> <params> <main tensor type>", e.g. "llama 292.4K Q8_0". */
LOOM_API int32_t loom_model_desc(const loom_model* model, char* buf, size_t buf_size);
LOOM_API int32_t loom_model_meta_count(const loom_model* model);
LOOM_API int32_t loom_model_meta_key_by_index(const loom_model* model, int32_t i, char* buf, size_t buf_size);
/* Values render as text: strings as they are, numbers in decimal, arrays as "[a, b, ...]". */
LOOM_API int32_t loom_model_meta_val_str_by_index(const loom_model* model, int32_t i, char* buf, size_t buf_size);
LOOM_API int32_t loom_model_meta_val_str(const loom_model* model, const char* key, char* buf, size_t buf_size);

/* ---- vocabulary ------------------------------------------------------------------------------ */

enum loom_vocab_type {
  LOOM_VOCAB_TYPE_SPM = 1, /* SentencePiece ("llama") */
  LOOM_VOCAB_TYPE_BPE = 2, /* byte-level BPE ("gpt2") */
  LOOM_VOCAB_TYPE_WPM = 3, /* WordPiece ("bert") */
  LOOM_VOCAB_TYPE_UGM = 4  /* Unigram ("t5"), since 0.2 */
};

/* Token attribute bits (llama_token_attr values). */
enum loom_token_attr {
  LOOM_TOKEN_ATTR_UNDEFINED = 0,
  LOOM_TOKEN_ATTR_UNKNOWN = 1 << 0,
  LOOM_TOKEN_ATTR_UNUSED = 1 << 1,
  LOOM_TOKEN_ATTR_NORMAL = 1 << 2,
  LOOM_TOKEN_ATTR_CONTROL = 1 << 3,
  LOOM_TOKEN_ATTR_USER_DEFINED = 1 << 4,
  LOOM_TOKEN_ATTR_BYTE = 1 << 5,
  LOOM_TOKEN_ATTR_NORMALIZED = 1 << 6,
  LOOM_TOKEN_ATTR_LSTRIP = 1 << 7,
  LOOM_TOKEN_ATTR_RSTRIP = 1 << 8,
  LOOM_TOKEN_ATTR_SINGLE_WORD = 1 << 9
};

LOOM_API int32_t loom_vocab_type(const loom_model* model); /* LOOM_VOCAB_TYPE_*, -1 on error */
LOOM_API int32_t loom_vocab_n_tokens(const loom_model* model);

/* Tokenizes text_len bytes of text (text_len < 0: up to the NUL). Returns the number of tokens
 * written, or -n when n_tokens_max is too small for the n tokens (nothing useful written), or
 * LOOM_SIZE_ERROR on error. add_special adds BOS/EOS as the model says; parse_special lets
 * the text of control tokens match them. */
LOOM_API int32_t loom_tokenize(const loom_model* model, const char* text, int32_t text_len, loom_token* tokens,
                               int32_t n_tokens_max, bool add_special, bool parse_special);
/* The text of one token, not NUL-terminated. lstrip: remove up to that many leading spaces.
 * special: render control tokens as their text. Returns bytes written, -n when length is too
 * small, LOOM_SIZE_ERROR for an invalid token. */
LOOM_API int32_t loom_token_to_piece(const loom_model* model, loom_token token, char* buf, int32_t length, int32_t lstrip,
                                     bool special);
/* The text of n_tokens tokens, not NUL-terminated. Returns bytes written, -n when
 * text_len_max is too small, LOOM_SIZE_ERROR for an invalid token. */
LOOM_API int32_t loom_detokenize(const loom_model* model, const loom_token* tokens, int32_t n_tokens, char* text,
                                 int32_t text_len_max, bool remove_special, bool unparse_special);

/* Special tokens; LOOM_TOKEN_NULL when the vocabulary has none. */
LOOM_API loom_token loom_token_bos(const loom_model* model);
LOOM_API loom_token loom_token_eos(const loom_model* model);
LOOM_API loom_token loom_token_eot(const loom_model* model);
LOOM_API loom_token loom_token_eom(const loom_model* model);
LOOM_API loom_token loom_token_sep(const loom_model* model);
LOOM_API loom_token loom_token_nl(const loom_model* model);
LOOM_API loom_token loom_token_pad(const loom_model* model);
LOOM_API loom_token loom_token_unk(const loom_model* model);
LOOM_API loom_token loom_token_fim_pre(const loom_model* model);
LOOM_API loom_token loom_token_fim_suf(const loom_model* model);
LOOM_API loom_token loom_token_fim_mid(const loom_model* model);
/* Since 0.3: the fill-in-the-middle pad, repository and file-separator tokens (Qwen2.5-Coder's
 * <|fim_pad|>, <|repo_name|>, <|file_sep|>), as llama-server's /infill uses them. */
LOOM_API loom_token loom_token_fim_pad(const loom_model* model);
LOOM_API loom_token loom_token_fim_rep(const loom_model* model);
LOOM_API loom_token loom_token_fim_sep(const loom_model* model);
LOOM_API bool loom_add_bos_token(const loom_model* model);
LOOM_API bool loom_add_eos_token(const loom_model* model);

/* Per-token data. Invalid ids give "" / 0 / LOOM_TOKEN_ATTR_UNDEFINED / false. */
LOOM_API bool loom_token_is_valid(const loom_model* model, loom_token token);
LOOM_API bool loom_token_is_eog(const loom_model* model, loom_token token);
LOOM_API bool loom_token_is_control(const loom_model* model, loom_token token);
LOOM_API const char* loom_token_get_text(const loom_model* model, loom_token token);
LOOM_API float loom_token_get_score(const loom_model* model, loom_token token);
LOOM_API uint32_t loom_token_get_attr(const loom_model* model, loom_token token);

/* ---- context --------------------------------------------------------------------------------- */

enum loom_rope_scaling_type {
  LOOM_ROPE_SCALING_UNSPECIFIED = -1,
  LOOM_ROPE_SCALING_NONE = 0,
  LOOM_ROPE_SCALING_LINEAR = 1,
  LOOM_ROPE_SCALING_YARN = 2
};
enum loom_pooling_type {
  LOOM_POOLING_UNSPECIFIED = -1,
  LOOM_POOLING_NONE = 0,
  LOOM_POOLING_MEAN = 1,
  LOOM_POOLING_CLS = 2,
  LOOM_POOLING_LAST = 3,
  LOOM_POOLING_RANK = 4
};
enum loom_attention_type { LOOM_ATTENTION_UNSPECIFIED = -1, LOOM_ATTENTION_CAUSAL = 0, LOOM_ATTENTION_NON_CAUSAL = 1 };
/* KV cache types (ggml type ids). */
enum loom_kv_type {
  LOOM_TYPE_F32 = 0,
  LOOM_TYPE_F16 = 1,
  LOOM_TYPE_Q4_0 = 2,
  LOOM_TYPE_Q8_0 = 8,
  LOOM_TYPE_BF16 = 30 /* since 0.3 (accepted before, not named) */
};

/* Polled between layers; returning true stops the decode (LOOM_DECODE_ABORTED). */
typedef bool (*loom_abort_callback)(void* data);
/* Observes named intermediate activations (rows x cols floats); return true to continue. */
typedef bool (*loom_eval_callback)(const char* name, int layer, const float* data, int64_t cols, int64_t rows,
                                   void* user_data);

typedef struct loom_context_params {
  int32_t n_ctx;             /* 0: the model's training context */
  int32_t n_batch;           /* most tokens one decode accepts */
  int32_t n_ubatch;          /* most tokens one forward pass computes (0: n_batch) */
  int32_t n_seq_max;         /* sequence ids are in [0, n_seq_max) */
  int32_t n_threads;         /* threads for single-token steps (0: all cores) */
  int32_t n_threads_batch;   /* threads for batches (0: n_threads) */
  int32_t rope_scaling_type; /* LOOM_ROPE_SCALING_* */
  int32_t pooling_type;      /* LOOM_POOLING_* */
  int32_t attention_type;    /* LOOM_ATTENTION_* */
  float rope_freq_base;      /* 0: from the model */
  float rope_freq_scale;     /* 0: from the model */
  float yarn_ext_factor;     /* < 0: 1 for YaRN scaling, else 0 */
  float yarn_attn_factor;    /* < 0: llama.cpp's derivation from the scaling factor and the file's yarn_log_multiplier */
  float yarn_beta_fast;      /* < 0: the model's (rope.scaling.yarn_beta_fast, else 32) */
  float yarn_beta_slow;      /* < 0: the model's (rope.scaling.yarn_beta_slow, else 1) */
  int32_t yarn_orig_ctx;     /* 0: the model's original context (else its training context) */
  int32_t n_swa;             /* sliding window of N tokens: -1 the model's (llama/Mistral: none, as
                                llama.cpp), 0 off, N > 0 on the model's SWA layers or, for families
                                without them, on every layer */
  float defrag_thold;        /* > 0: defragment before a decode when holes exceed this fraction */
  int32_t type_k;            /* LOOM_TYPE_* */
  int32_t type_v;
  bool embeddings; /* produce embeddings instead of logits */
  bool no_perf;
  loom_abort_callback abort_callback;
  void* abort_callback_data;
  loom_eval_callback eval_callback;
  void* eval_callback_data;
} loom_context_params;

LOOM_API loom_context_params loom_context_default_params(void);
/* params NULL: defaults. NULL on failure (NULL or vocab-only model, invalid params). */
LOOM_API loom_context* loom_context_new(const loom_model* model, const loom_context_params* params);
LOOM_API void loom_context_free(loom_context* ctx);

/* Values as resolved at creation (0 on a NULL context). */
LOOM_API int32_t loom_n_ctx(const loom_context* ctx);
LOOM_API int32_t loom_n_batch(const loom_context* ctx);
LOOM_API int32_t loom_n_ubatch(const loom_context* ctx);
LOOM_API int32_t loom_n_seq_max(const loom_context* ctx);
LOOM_API int32_t loom_n_threads(const loom_context* ctx);
LOOM_API int32_t loom_n_threads_batch(const loom_context* ctx);
LOOM_API int32_t loom_pooling_type(const loom_context* ctx);
LOOM_API int32_t loom_n_vocab(const loom_context* ctx);
LOOM_API int32_t loom_n_embd(const loom_context* ctx);

/* Run-time toggles (take effect on the next decode). Return LOOM_OK or an error status. */
LOOM_API int32_t loom_set_n_threads(loom_context* ctx, int32_t n_threads, int32_t n_threads_batch);
LOOM_API int32_t loom_set_embeddings(loom_context* ctx, bool embeddings);
LOOM_API int32_t loom_set_causal_attn(loom_context* ctx, bool causal_attn);
LOOM_API int32_t loom_set_abort_callback(loom_context* ctx, loom_abort_callback callback, void* data);

/* ---- batches --------------------------------------------------------------------------------- */

/* A batch the caller fills. Optional arrays may be NULL:
 *   token    ids [n_tokens]; NULL: embd holds [n_tokens][n_embd] input embeddings instead
 *   pos      NULL: each sequence continues after its own last position
 *   n_seq_id / seq_id: token i belongs to seq_id[i][0 .. n_seq_id[i]); seq_id NULL: all in
 *            sequence 0; n_seq_id NULL: one sequence per token
 *   logits   nonzero: token i produces an output; NULL: only the last token does */
typedef struct loom_batch {
  int32_t n_tokens;
  loom_token* token;
  float* embd;
  loom_pos* pos;
  int32_t* n_seq_id;
  loom_seq_id** seq_id;
  int8_t* logits;
} loom_batch;

/* Allocates arrays for n_tokens_max tokens (n_tokens = 0): embd == 0 allocates `token`,
 * otherwise `embd` with embd floats per token; seq_id[i] holds n_seq_max ids. On failure all
 * pointers are NULL (see loom_last_error). Free with loom_batch_free. */
LOOM_API loom_batch loom_batch_init(int32_t n_tokens_max, int32_t embd, int32_t n_seq_max);
/* Frees what loom_batch_init allocated and zeroes the struct (NULL is fine). */
LOOM_API void loom_batch_free(loom_batch* batch);
/* A batch over the caller's tokens, in sequence 0, continuing it, output for the last token
 * only. Nothing is allocated. */
LOOM_API loom_batch loom_batch_get_one(loom_token* tokens, int32_t n_tokens);

/* ---- evaluation ------------------------------------------------------------------------------ */

/* All-or-nothing: on any failure the KV cache is exactly as before. Returns LOOM_DECODE_*. */
LOOM_API int32_t loom_decode(loom_context* ctx, const loom_batch* batch);
/* Non-causal evaluation of a whole batch (at most n_ubatch tokens) that leaves the KV cache as
 * it was (embedding / encoder models). For a T5 this is its encoder: the output (readable with
 * loom_get_embeddings_ith) is kept for the cross-attention of the following decodes, until the
 * next encode. Returns LOOM_DECODE_*. */
LOOM_API int32_t loom_encode(loom_context* ctx, const loom_batch* batch);
/* Runs one token and clears the cache (pages weights in). Returns a status. */
LOOM_API int32_t loom_warmup(loom_context* ctx);

/* Number of output rows of the last decode. */
LOOM_API int32_t loom_n_outputs(const loom_context* ctx);
/* All output rows in batch order, [n_outputs][n_vocab]; NULL when there are none. */
LOOM_API const float* loom_get_logits(const loom_context* ctx);
/* Logits of batch row i (negative i counts back from the last output); NULL + error when that
 * row has no output. */
LOOM_API const float* loom_get_logits_ith(const loom_context* ctx, int32_t i);
/* Per-token embeddings [n_outputs][n_embd] (embeddings mode); NULL when none. */
LOOM_API const float* loom_get_embeddings(const loom_context* ctx);
LOOM_API const float* loom_get_embeddings_ith(const loom_context* ctx, int32_t i);
/* Pooled embedding of a sequence (n_embd floats; rank pooling: the classification head's
 * loom_model_n_cls_out raw scores, no sigmoid); NULL when none. */
LOOM_API const float* loom_get_embeddings_seq(const loom_context* ctx, loom_seq_id seq);

/* ---- KV cache -------------------------------------------------------------------------------- */

/* Recurrent models (mamba) keep one state per sequence instead of KV cells (n_seq_max cells, F32),
 * and these functions then do what llama.cpp's recurrent memory does (docs/context.md):
 *   loom_kv_seq_rm      LOOM_ERR_UNSUPPORTED (nothing changes) where the reference returns false:
 *                       dropping the end of a state but not all of it (0 < p0 <= pos < p1), or any
 *                       seq < 0 (use loom_kv_clear); a range from 0 that contains the state's
 *                       position removes it; a range that misses it changes nothing.
 *   loom_kv_seq_cp      ignores p0/p1: dst shares src's state (dst's own is dropped).
 *   loom_kv_seq_keep    drops every other state.
 *   loom_kv_seq_add/div move the state's position when it lies in [p0, p1) (seq >= 0; seq < 0 does nothing).
 *   loom_kv_seq_pos_min/max  the state's position (min = max), -1 without a state.
 *   loom_kv_can_shift   true; loom_kv_update and loom_kv_defrag do nothing.
 * A batch must continue each sequence at its position + 1, one sequence per token. */

LOOM_API void loom_kv_clear(loom_context* ctx);
/* Positions [p0, p1) of sequence seq (seq < 0: every sequence; p0 < 0: from 0; p1 < 0: to the
 * end). Return a status. */
LOOM_API int32_t loom_kv_seq_rm(loom_context* ctx, loom_seq_id seq, loom_pos p0, loom_pos p1);
LOOM_API int32_t loom_kv_seq_cp(loom_context* ctx, loom_seq_id src, loom_seq_id dst, loom_pos p0, loom_pos p1);
LOOM_API int32_t loom_kv_seq_keep(loom_context* ctx, loom_seq_id seq);
LOOM_API int32_t loom_kv_seq_add(loom_context* ctx, loom_seq_id seq, loom_pos p0, loom_pos p1, loom_pos delta);
LOOM_API int32_t loom_kv_seq_div(loom_context* ctx, loom_seq_id seq, loom_pos p0, loom_pos p1, int32_t d);
/* Smallest / largest position of seq (seq < 0: any); -1 when it holds no cells; LOOM_SIZE_ERROR
 * for an invalid sequence id or context. */
LOOM_API loom_pos loom_kv_seq_pos_min(const loom_context* ctx, loom_seq_id seq);
LOOM_API loom_pos loom_kv_seq_pos_max(const loom_context* ctx, loom_seq_id seq);
LOOM_API bool loom_kv_can_shift(const loom_context* ctx);
/* Applies pending position shifts now (otherwise done at the next decode). */
LOOM_API int32_t loom_kv_update(loom_context* ctx);
LOOM_API void loom_kv_defrag(loom_context* ctx);
/* Tokens stored (a cell shared by k sequences counts k times) and cells in use. */
LOOM_API int32_t loom_kv_n_tokens(const loom_context* ctx);
LOOM_API int32_t loom_kv_used_cells(const loom_context* ctx);

/* ---- sampling ------------------------------------------------------------------------------ */

/* A sampler chain (llama.cpp's common chain: penalties, DRY, top-k, typical, top-p, min-p, XTC,
 * temperature, then a random pick or greedy; optionally a grammar) with its parameters as a JSON
 * object of the generation request's sampling fields (loom_serve.h): temperature top_k top_p min_p
 * typical_p repeat_penalty repeat_last_n frequency_penalty presence_penalty mirostat mirostat_tau
 * mirostat_eta dynatemp_range dynatemp_exponent xtc_probability xtc_threshold min_keep dry_*
 * samplers seed logit_bias grammar json_schema; NULL or "{}" for the defaults (temperature 0.8,
 * top_k 40, top_p 0.95, min_p 0.05). NULL on error (the message names the field). */
typedef struct loom_sampler loom_sampler;
LOOM_API loom_sampler* loom_sampler_new(const loom_model* model, const char* params_json);
/* Samples from output i of the last decode (as loom_get_logits_ith); LOOM_TOKEN_NULL on error or
 * when the grammar admits no token. Call loom_sampler_accept with the token you keep. */
LOOM_API loom_token loom_sampler_sample(loom_sampler* sampler, const loom_context* ctx, int32_t i);
LOOM_API int32_t loom_sampler_accept(loom_sampler* sampler, loom_token token);
/* True when the grammar is complete and nothing else may follow. */
LOOM_API bool loom_sampler_grammar_done(const loom_sampler* sampler);
LOOM_API void loom_sampler_reset(loom_sampler* sampler);
LOOM_API void loom_sampler_free(loom_sampler* sampler);

/* ---- state ----------------------------------------------------------------------------------- */

/* Whole context (KV cache and last outputs). Size in bytes; 0 on error. */
LOOM_API size_t loom_state_get_size(const loom_context* ctx);
/* Writes the state into dst; returns bytes written, 0 on error (dst smaller than needed). */
LOOM_API size_t loom_state_get_data(const loom_context* ctx, uint8_t* dst, size_t size);
/* Restores a state; a corrupt state, or one of another model or cache type, is refused and
 * changes nothing. Returns a status. */
LOOM_API int32_t loom_state_set_data(loom_context* ctx, const uint8_t* src, size_t size);
/* State plus the caller's tokens to a file (written atomically). Returns a status. */
LOOM_API int32_t loom_state_save_file(const loom_context* ctx, const char* path, const loom_token* tokens,
                                      size_t n_token_count);
/* Restores a file; the stored tokens go to tokens_out (room for n_token_capacity) and their
 * number to *n_token_count_out. tokens_out and n_token_count_out may be NULL when not wanted.
 * When tokens_out is non-NULL and the file holds more than n_token_capacity tokens, nothing is
 * loaded: LOOM_ERR_RESOURCE_EXHAUSTED, with the number needed in *n_token_count_out. */
LOOM_API int32_t loom_state_load_file(loom_context* ctx, const char* path, loom_token* tokens_out, size_t n_token_capacity,
                                      size_t* n_token_count_out);

/* One sequence's cells; restoring into another sequence id works. */
LOOM_API size_t loom_state_seq_get_size(const loom_context* ctx, loom_seq_id seq);
LOOM_API size_t loom_state_seq_get_data(const loom_context* ctx, uint8_t* dst, size_t size, loom_seq_id seq);
LOOM_API int32_t loom_state_seq_set_data(loom_context* ctx, const uint8_t* src, size_t size, loom_seq_id dest_seq);
LOOM_API int32_t loom_state_seq_save_file(const loom_context* ctx, const char* path, loom_seq_id seq,
                                          const loom_token* tokens, size_t n_token_count);
LOOM_API int32_t loom_state_seq_load_file(loom_context* ctx, const char* path, loom_seq_id dest_seq, loom_token* tokens_out,
                                          size_t n_token_capacity, size_t* n_token_count_out);

/* ---- adapters -------------------------------------------------------------------------------- */

/* A LoRA adapter GGUF checked against the model. NULL on failure. */
LOOM_API loom_lora_adapter* loom_lora_adapter_load(const loom_model* model, const char* path);
LOOM_API void loom_lora_adapter_free(loom_lora_adapter* adapter);
/* Attaches the adapter with a scale, or changes its scale when attached. Returns a status. */
LOOM_API int32_t loom_set_lora(loom_context* ctx, const loom_lora_adapter* adapter, float scale);
/* LOOM_ERR_NOT_FOUND when the adapter is not attached. */
LOOM_API int32_t loom_remove_lora(loom_context* ctx, const loom_lora_adapter* adapter);
LOOM_API void loom_clear_lora(loom_context* ctx);

/* A control vector file (direction.<L> tensors) multiplied by strength. NULL on failure. */
LOOM_API loom_control_vector* loom_control_vector_load(const char* path, float strength);
LOOM_API void loom_control_vector_free(loom_control_vector* cvec);
/* Adds src into dst (vectors given together are summed); n_embd must agree. */
LOOM_API int32_t loom_control_vector_add(loom_control_vector* dst, const loom_control_vector* src);
/* Data [n_layers][n_embd], the first row being layer 1; its length is n_layers * n_embd. */
LOOM_API const float* loom_control_vector_data(const loom_control_vector* cvec);
LOOM_API int32_t loom_control_vector_n_embd(const loom_control_vector* cvec);
LOOM_API int32_t loom_control_vector_n_layers(const loom_control_vector* cvec);
/* Adds data (len floats, layer 1 first, n_embd per layer) to the output of blocks
 * il_start..il_end (inclusive). data NULL (or len 0) clears. Returns a status. */
LOOM_API int32_t loom_apply_control_vector(loom_context* ctx, const float* data, size_t len, int32_t n_embd,
                                           int32_t il_start, int32_t il_end);

/* ---- perf ------------------------------------------------------------------------------------ */

typedef struct loom_perf_data {
  int64_t t_load_us;
  int64_t n_prompt_tokens; /* tokens decoded in calls of more than one token */
  int64_t t_prompt_us;
  int64_t n_gen_tokens; /* single-token decodes */
  int64_t t_gen_us;
  int64_t n_reused; /* prompt tokens whose KV was reused, not computed: the tokens a state file
                              loaded with loom_state_load_file carries (in a scheduler's context: its
                              prefix cache hits). Written since 0.3. */
} loom_perf_data;

/* Zeroes on a NULL context. */
LOOM_API loom_perf_data loom_perf_get(const loom_context* ctx);
LOOM_API void loom_perf_reset(loom_context* ctx);
/* The human-readable report, snprintf-style (returns its full length, -1 on error). */
LOOM_API int32_t loom_perf_report(const loom_context* ctx, char* buf, size_t buf_size);
/* The report to stderr. */
LOOM_API void loom_perf_print(const loom_context* ctx);
/* Mixture-of-experts models: how often each expert was chosen since the context was made or
   loom_perf_reset, as [n_layer][n_expert] counts copied into out (up to n of them); the last layer
   runs only for the tokens whose outputs were asked for, and counts only theirs. Returns the
   number of counts the context has (0 for a model without experts; -1 on error). Since 0.3. */
LOOM_API int64_t loom_perf_expert_counts(const loom_context* ctx, uint64_t* out, size_t n);

/* ==== since 0.3: what the `loom` command line needs (it uses only this header) ================ */

/* ---- model, more ----------------------------------------------------------------------------- */

/* Mamba / Mamba-2: a recurrent state per sequence instead of a KV cache (loom_kv_seq_rm can drop
 * only whole sequences; speculative decoding and context shifting are not possible). */
LOOM_API bool loom_model_is_recurrent(const loom_model* model);
/* The pooling the file asks for (LOOM_POOLING_*), LOOM_POOLING_UNSPECIFIED when it says none. */
LOOM_API int32_t loom_model_pooling_type(const loom_model* model);
/* Label i of a classification head (<arch>.classifier.output_labels), snprintf-style; -1 when
 * the model has no label i. */
LOOM_API int32_t loom_model_cls_label(const loom_model* model, int32_t i, char* buf, size_t buf_size);
/* Bytes of the weights one single-token decode step reads (every matrix once, packed sizes). */
LOOM_API uint64_t loom_model_decode_weight_bytes(const loom_model* model);

/* A reranker's input for (query, document): the model's own layout of the two texts (BOS query
 * EOS/SEP document EOS, ...), tokenized without parsing special text. Sizes as loom_tokenize. */
LOOM_API int32_t loom_tokenize_rerank(const loom_model* model, const char* query, int32_t query_len, const char* document,
                                      int32_t document_len, loom_token* tokens, int32_t n_tokens_max);
/* A rendered chat prompt (loom_chat_format's "prompt") to tokens as llama.cpp's chat path does:
 * special text parsed, and the template's own BOS / EOS text dropped where the tokenizer adds those
 * tokens anyway. Sizes as loom_tokenize. */
LOOM_API int32_t loom_tokenize_chat(const loom_model* model, const char* text, int32_t text_len, loom_token* tokens,
                                    int32_t n_tokens_max);

/* ---- context, more --------------------------------------------------------------------------- */

/* loom_context_new with options that loom_context_params does not hold (its layout is fixed), as
 * a JSON object; NULL or "{}" is loom_context_new. Known: "kv_unified" (bool: any sequence may use
 * all n_ctx cells, as llama.cpp's kv_unified). An unknown key is an error. */
LOOM_API loom_context* loom_context_new_ext(const loom_model* model, const loom_context_params* params,
                                            const char* options_json);
/* Since 0.3, also: "swa_full" (bool: sliding-window layers keep n_ctx cells instead of a window-sized
 * cache), "n_seq_swa" and "n_seq_states" (0..256: the sequences that hold a window / a recurrent
 * state at once, which size those parts; 0: n_seq_max). */
/* Since 0.3: the context's memory as JSON into buf: {"kv", "kv_swa", "recurrent"} each {"bytes",
 * "cells", "layers"} (a part the model does not have: zeros), "total_bytes". Returns the length, or
 * -(needed size) when buf is too small, LOOM_SIZE_ERROR on error. */
LOOM_API int32_t loom_context_memory_json(const loom_context* ctx, char* buf, size_t buf_size);
/* Whether attention is causal (decoders) or not (BERT-like encoders, or set_causal_attn(false)). */
LOOM_API bool loom_causal_attn(const loom_context* ctx);
/* Bytes of K and V that one cache cell holds over all the decoder's attention layers: what a
 * decode step reads per cell it attends to. 0 for a recurrent model. */
LOOM_API uint64_t loom_kv_cell_bytes(const loom_context* ctx);
/* A recurrent model: the bytes of one sequence's state (what a decode step reads); else 0. */
LOOM_API uint64_t loom_recurrent_seq_state_bytes(const loom_context* ctx);

/* ---- sampling, more -------------------------------------------------------------------------- */

/* loom_sampler_new also takes "n_ctx" (what repeat_last_n / dry_penalty_last_n -1 mean; default
 * 4096). */
/* Samples from a row of n_vocab logits the caller holds (a speculative round's rows, say); as
 * loom_sampler_sample otherwise. */
LOOM_API loom_token loom_sampler_sample_logits(loom_sampler* sampler, const float* logits, int32_t n_vocab);
/* Puts tokens into the penalties' history without advancing the grammar (a prompt, a decoder start
 * token). Returns a status. */
LOOM_API int32_t loom_sampler_accept_history(loom_sampler* sampler, const loom_token* tokens, int32_t n_tokens);
LOOM_API bool loom_sampler_has_grammar(const loom_sampler* sampler);
/* True when the text so far is a complete sentence of the grammar (or there is no grammar). */
LOOM_API bool loom_sampler_grammar_can_end(const loom_sampler* sampler);

/* A JSON schema (text) as a GBNF grammar, snprintf-style; -1 on error (loom_last_error says why). */
LOOM_API int32_t loom_json_schema_to_grammar(const char* schema_json, char* buf, size_t buf_size);

/* ---- streaming detokenizer ------------------------------------------------------------------- */

/* Turns tokens into text as they come: text is released only in whole UTF-8 characters, with the
 * vocabulary's spacing rules, so that the chunks add up to loom_detokenize of all the tokens. */
typedef struct loom_detokenizer loom_detokenizer;
enum loom_detokenizer_flags {
  LOOM_DETOK_UNPARSE_SPECIAL = 1, /* control tokens as their text (detokenize's unparse_special) */
  LOOM_DETOK_REMOVE_SPECIAL = 2,  /* drop a leading BOS / trailing EOS the vocab adds */
  LOOM_DETOK_CONTINUATION = 4     /* the tokens continue earlier text (generated after a prompt):
                                     the first piece keeps its leading space */
};
LOOM_API loom_detokenizer* loom_detokenizer_new(const loom_model* model, uint32_t flags);
/* Appends a token; *text / *len get the text that became final (possibly empty), valid until the
 * next call on this detokenizer. A token outside the vocabulary is LOOM_ERR_OUT_OF_RANGE and
 * changes nothing. */
LOOM_API int32_t loom_detokenizer_push(loom_detokenizer* detok, loom_token token, const char** text, size_t* len);
/* Ends the text: everything held back (an incomplete UTF-8 tail becomes U+FFFD); then starts anew. */
LOOM_API int32_t loom_detokenizer_flush(loom_detokenizer* detok, const char** text, size_t* len);
LOOM_API void loom_detokenizer_reset(loom_detokenizer* detok);
LOOM_API void loom_detokenizer_free(loom_detokenizer* detok);

/* ---- speculative decoding -------------------------------------------------------------------- */

/* A drafter guesses the tokens that follow; one decode of the target verifies them all, and the
 * caller's sampler picks each token from the target's rows exactly as plain decoding would (loom's
 * kernels are batch-invariant), so greedy and seeded output are plain decoding's, token for token. */
typedef struct loom_drafter loom_drafter;
/* Prompt lookup: what followed the latest earlier occurrence of the history's last n-gram
 * (n = ngram_max down to ngram_min). */
LOOM_API loom_drafter* loom_drafter_lookup_new(int32_t ngram_max, int32_t ngram_min);
/* A draft model (its vocabulary must be the target's: checked, the message names the first
 * difference) decoding greedily in its own context made with params; it stops at a token whose
 * probability is below p_min. */
LOOM_API loom_drafter* loom_drafter_model_new(const loom_model* draft, const loom_model* target,
                                              const loom_context_params* params, float p_min);
/* Up to n_max tokens that probably follow history (which ends with the last token chosen) into
 * out; returns how many (0: no guess), or a negative status. */
LOOM_API int32_t loom_drafter_draft(loom_drafter* drafter, const loom_token* history, int32_t n_history, int32_t n_max,
                                    loom_token* out);
/* "lookup n=4..2", "model <desc> p_min=0.75"; snprintf-style. */
LOOM_API int32_t loom_drafter_describe(const loom_drafter* drafter, char* buf, size_t buf_size);
LOOM_API void loom_drafter_free(loom_drafter* drafter);

/* What the caller did with one verified row: the token its sampler picked (and accepted), whether
 * it joins the output (false: generation ends without it, e.g. at an end-of-generation token) and
 * whether generation stops after it. */
typedef struct loom_spec_pick {
  loom_token token;
  bool emit;
  bool stop;
} loom_spec_pick;
/* Called row by row; return LOOM_OK after filling *pick, or a negative status to end the round
 * with that status. */
typedef int32_t (*loom_spec_pick_callback)(const float* logits, int32_t n_vocab, loom_spec_pick* pick, void* user_data);
/* One verification round on sequence seq. Before: the context holds history[0 .. n-2] at
 * positions 0 .. n-2 and history[n-1] is not decoded yet (n = n_history >= 1). The draft (n_draft
 * may be 0) is decoded after it in one batch, every row with logits, and pick runs for the rows in
 * order until a pick differs from the draft, stops, or the rows run out. After: the context holds
 * history + the emitted tokens except the last one (pending, as before), or the whole history when
 * none was emitted. tokens_out (room for n_draft + 1) gets the emitted tokens, *n_out their number;
 * *n_accepted (may be NULL) the draft tokens the target agreed with; *stopped (may be NULL) whether a
 * pick stopped. The draft must fit: n - 1 + n_draft < n_ctx (and n_draft < n_batch). On a failed
 * decode, or a pick that returns an error (the round's status then), the cache is as before (the
 * outputs are not). Returns a status. */
LOOM_API int32_t loom_speculative_round(loom_context* ctx, loom_seq_id seq, const loom_token* history, int32_t n_history,
                                        const loom_token* draft, int32_t n_draft, loom_spec_pick_callback pick,
                                        void* user_data, loom_token* tokens_out, int32_t* n_out, int32_t* n_accepted,
                                        bool* stopped);

/* ---- files: GGUF listing, quantization, templates -------------------------------------------- */

/* A GGUF file's header as one JSON object: {"gguf_version", "alignment", "file_size",
 * "architecture", "metadata": [{"key", "type" ("u32", "str", "arr[str]", ...), "value" (JSON),
 * "text" (the value as text, arrays abbreviated after 8)}], "tensors": [{"name", "type", "shape",
 * "bytes", "offset"}]} (no tensor data is read). Size-negotiating: returns the length, or -needed
 * when buf is too small (call again), or LOOM_SIZE_ERROR on error. */
LOOM_API int32_t loom_gguf_describe(const char* path, char* buf, size_t buf_size);

/* The target types of loom_model_quantize ("Q4_0, Q4_1, ..."), snprintf-style. */
LOOM_API int32_t loom_quantize_types(char* buf, size_t buf_size);
/* Called once per tensor with a JSON object {"index", "count", "name", "type", "out_type",
 * "fallback", "shape", "bytes", "out_bytes"}. */
typedef void (*loom_quantize_progress_callback)(const char* tensor_json, void* user_data);
/* Quantizes a GGUF file (F32 / F16 / BF16 weights; llama-quantize's file types and mixes, with an
 * optional importance matrix) into output, written atomically. params_json: {"type": "Q4_K_M"
 * (required; also IQ2_M, TQ1_0, MXFP4_MOE, ...), "threads": 0, "allow_requantize": false,
 * "llama_order": false, "pure": false, "leave_output_tensor": false, "imatrix": "FILE" (GGUF or
 * legacy .dat), "include_weights" / "exclude_weights": ["name part", ...],
 * "output_tensor_type": "q8_0", "token_embedding_type": "q4_k"}. On success summary_json (may be
 * NULL) gets {"file_type", "file_type_name", "converted", "fallback", "copied", "imatrix_entries",
 * "input_bytes"} snprintf-style (truncated if small). Returns a status. */
LOOM_API int32_t loom_model_quantize(const char* input, const char* output, const char* params_json,
                                     loom_quantize_progress_callback progress, void* user_data, char* summary_json,
                                     size_t summary_size);

/* Renders a Jinja2 chat template with a JSON object as its context (key order kept; an absent key
 * is undefined, null is none). now_unix >= 0: strftime_now() renders that instant (UTC) instead of
 * the clock. Size-negotiating as loom_gguf_describe. */
LOOM_API int32_t loom_template_render(const char* template_source, const char* context_json, int64_t now_unix, char* buf,
                                      size_t buf_size);
/* Since 0.3: the same with flags. LOOM_TEMPLATE_LENIENT renders as llama.cpp where Python Jinja2
 * raises (what loom serve and loom-node do): an undefined value's attributes and items are
 * undefined, `+` with an undefined operand gives the other one, none iterates as empty. */
#define LOOM_TEMPLATE_LENIENT 1u
LOOM_API int32_t loom_template_render_ext(const char* template_source, const char* context_json, int64_t now_unix,
                                          uint32_t flags, char* buf, size_t buf_size);

/* ---- the machine ----------------------------------------------------------------------------- */

/* CPU features and the kernels in use: "AVX2 = 1 | AVX512 = 1 | ... | kernels = avx512"; static. */
LOOM_API const char* loom_system_info(void);
/* Threads a context uses by default (n_threads 0): the cores loom may run on. */
LOOM_API int32_t loom_cpu_count(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_LOOM_H */
