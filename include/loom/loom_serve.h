/*
 * loom C API, serving part: many requests on one context through loom's scheduler (continuous
 * batching, a prefix cache shared by every request, admission by KV cells, cancellation), chat
 * formatting with the model's template, and the session files of the prefix cache. `loom serve`
 * and the Node binding run on it. Include after (or instead of) loom.h; same error model:
 * nothing aborts or throws, failures return a negative LOOM_ERR_* and set loom_last_error().
 *
 * Requests are JSON objects (UTF-8, NUL-terminated), so that fields can be added without changing
 * the ABI. A generation request has either
 *   "prompt":   a string (tokenized with BOS as the model adds it, special tokens parsed) or an
 *               array of token ids, or
 *   "messages": OpenAI chat messages, rendered with the model's chat template (or the scheduler's
 *               chat_template override, or the request's own "chat_template"), with "tools", "tool_choice", "parallel_tool_calls",
 *               "response_format", "chat_template_kwargs", "add_generation_prompt", and (since 0.3)
 *               "reasoning_format": how a leading <think>...</think> (or [THINK]) block of the
 *               output is reported, llama.cpp's values: "auto" (the default) and "deepseek" put it
 *               in reasoning_content, "deepseek-legacy" too except with "stream_parse", where it
 *               stays in the content as <think>text</think>, "none" leaves the output's text as it
 *               is in the content;
 *               "stream_parse" (since 0.3; bool, default false): every LOOM_EVENT_TOKEN's json carries
 *               the assistant message parsed from the choice's text so far (see below), as
 *               llama.node's token callback shows it;
 * and llama-server's /completion fields for the rest, llama.node's spellings accepted too:
 *   temperature top_k top_p min_p typical_p|typ_p repeat_penalty|penalty_repeat
 *   repeat_last_n|penalty_last_n frequency_penalty|penalty_freq presence_penalty|penalty_present
 *   mirostat mirostat_tau mirostat_eta dynatemp_range dynatemp_exponent xtc_probability
 *   xtc_threshold min_keep dry_multiplier dry_base dry_allowed_length dry_penalty_last_n
 *   dry_sequence_breakers samplers seed logit_bias n_predict|max_tokens n stop ignore_eos
 *   cache_prompt n_keep n_probs grammar json_schema.
 * temperature 0 is greedy whatever the other samplers say. Unknown fields are ignored; a field of
 * the wrong type or out of range fails the submit with a message naming it ("stream_parse" and
 * "reasoning_format" are checked on every request, used only with "messages").
 *
 * Wherever a chat template is given (loom_scheduler_params.chat_template, a request's
 * "chat_template", loom_chat_format, loom_chat_template_info), since 0.3 it may also be one of
 * llama.cpp's built-in template names (llama_chat_apply_template's): chatml llama2 llama2-sys
 * llama2-sys-bos llama2-sys-strip mistral-v1 mistral-v3 mistral-v3-tekken mistral-v7
 * mistral-v7-tekken phi3 phi4 falcon3 zephyr monarch gemma orion openchat vicuna vicuna-orca deepseek
 * deepseek2 deepseek3 deepseek-ocr command-r llama3 chatglm3 chatglm4 glmedge minicpm exaone3 exaone4
 * exaone-moe rwkv-world granite granite-4.0 granite-4.1 gigachat megrez yandex bailing bailing-think
 * bailing2 llama4 smolvlm hunyuan-moe gpt-oss hunyuan-dense hunyuan-vl kimi-k2 seed_oss grok-2
 * pangu-embedded solar-open. Each renders what llama.cpp's formatting for that name does (tools in
 * the generic JSON tool-call format, except chatml: Hermes). A string that is neither Jinja (no
 * "{%" or "{{") nor one of these names is an error that lists them.
 *
 * Events arrive on the scheduler's thread, in order per request: LOOM_EVENT_TOKEN per generated
 * token and choice, LOOM_EVENT_FINISH once per choice, then one LOOM_EVENT_DONE — or one
 * LOOM_EVENT_ERROR instead of all of them. A callback must return quickly and may call only
 * loom_scheduler_cancel and loom_scheduler_stats. Event pointers are valid during the call only.
 */
#ifndef LOOM_LOOM_SERVE_H
#define LOOM_LOOM_SERVE_H

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_scheduler loom_scheduler;

typedef struct loom_scheduler_params {
  loom_context_params context; /* n_ctx = KV cells shared by every slot; n_seq_max is derived */
  int32_t n_slots;             /* sequences generating at once (default 4) */
  int32_t max_queue;           /* waiting requests beyond which submit fails LOOM_ERR_UNAVAILABLE */
  int32_t step_tokens;         /* tokens per step, decode + prompt chunks; 0: n_ubatch */
  bool context_shift;          /* at the context's end, drop the oldest half after n_keep and go on */
  bool prefix_cache;           /* share prompt prefixes between requests (default true) */
  const char* cache_dir;       /* NULL, or a folder for evicted / idle prefixes (state files) */
  const char* chat_template;   /* NULL: the model's; else a Jinja template or a built-in name
                                  ("llama3", ...) used for "messages" */
} loom_scheduler_params;

LOOM_API loom_scheduler_params loom_scheduler_default_params(void);

/* Creates the context and starts the scheduler's thread. The model may be freed afterwards (the
 * scheduler keeps it alive). NULL on error. */
LOOM_API loom_scheduler* loom_scheduler_new(const loom_model* model, const loom_scheduler_params* params);
/* Since 0.3: loom_scheduler_new with a draft model for speculative decoding (its vocabulary must
 * be the model's: checked, the message names the difference). Every request without "lookup"
 * drafts with it, up to min(draft_max, its "speculative.n_max") tokens per step ("speculative.n_max"
 * 0 turns it off for that request); the target's sampler picks every token, so the output is
 * plain decoding's. Each slot gets a context of the draft model when it first drafts.
 * draft_options_json: NULL or {"draft_max": 16 (1..32), "draft_min": 0, "p_min": 0.75 (the draft
 * stops at a token below it), "n_ctx" ( cells of each slot's draft context, 0: twice a
 * slot's share, at least 2048)}. The draft model may be freed afterwards. */
LOOM_API loom_scheduler* loom_scheduler_new_with_draft(const loom_model* model, const loom_scheduler_params* params,
                                                       const loom_model* draft, const char* draft_options_json);
/* Since 0.3: loom_scheduler_new (draft NULL) or loom_scheduler_new_with_draft with options that
 * loom_scheduler_params does not hold, as a JSON object (NULL or "{}": none; an unknown key is an
 * error): "ctx_checkpoints" (per path of the prefix cache, default 8: llama-server's
 * --ctx-checkpoints) and "cache_ram_mib" (in all, default 8192: its --cache-ram) bound the
 * checkpoints that recurrent, hybrid and sliding-window models resume prefixes from (their
 * recurrent states and windows cannot be shared by range as KV cells are); "swa_full" (bool) keeps
 * full-size caches for sliding-window layers (llama-server's --swa-full) instead of window-sized
 * ones; with a draft model, the draft options of loom_scheduler_new_with_draft too. */
LOOM_API loom_scheduler* loom_scheduler_new_ext(const loom_model* model, const loom_scheduler_params* params,
                                                const loom_model* draft, const char* options_json);
/* Refuses new requests, lets running ones finish for up to grace_ms, cancels the rest (their
 * callbacks get their final events), then frees everything. NULL is ignored. */
LOOM_API void loom_scheduler_free(loom_scheduler* sched, int32_t grace_ms);
/* Since 0.3: the first half of loom_scheduler_free, for a frontend that drains before it frees:
 * refuses new requests (LOOM_ERR_UNAVAILABLE), lets running ones finish for up to grace_ms, cancels
 * the rest (their callbacks get their final events). The handle stays valid — submit fails, stats
 * and cancel answer — until loom_scheduler_free. Calling it again does nothing. NULL is ignored. */
LOOM_API void loom_scheduler_shutdown(loom_scheduler* sched, int32_t grace_ms);

enum loom_event_kind {
  LOOM_EVENT_TOKEN = 0,  /* token, text: the text that became final with it (may be empty while a
                            stop string can still match or a character is incomplete); json: NULL,
                            or {"piece", "logprob": x, "top": [{"id", "piece", "logprob"}]} with
                            n_probs, and with "stream_parse" on a "messages" request (since 0.3)
                            the message parsed from all of the choice's text so far: "content",
                            "reasoning_content" (strings) and "tool_calls" ([{"id", "type":
                            "function", "function": {"name", "arguments"}}], the calls completed
                            so far). Text that may still become a tool call (an unfinished call,
                            the beginning of "<tool_call>", trailing whitespace) is held back, so
                            from one event to the next content and reasoning_content only grow
                            and tool_calls only get more entries, with their final ids; FINISH's
                            message extends the last TOKEN's. These events also carry
                            "deltas": what this event adds, as OpenAI chat deltas, each one of
                            {"reasoning_content": s}, {"content": s} or {"tool_calls": [{"index",
                            "id", "type", "function": {"name", "arguments"}}]} (a call's first delta,
                            once its name is known: Hermes-format calls then stream their
                            arguments in more {"tool_calls": [{"index", "function": {"arguments":
                            piece}}]} deltas while generated, other formats send a call whole
                            when complete); FINISH carries the last ones. */
  LOOM_EVENT_FINISH = 1, /* text: the rest of the choice's text; json: {"reason": "stop" | "length" |
                            "cancelled", "stop_word", "stopped_eos", "stopped_word", "stopped_limit",
                            "text" (all of it), "tokens" [...], and for "messages" requests the
                            parsed assistant message: "content", "reasoning_content", "tool_calls"} */
  LOOM_EVENT_DONE = 2,   /* json: {"usage": {"prompt_tokens", "completion_tokens", "cached_tokens"},
                            "timings": {llama-server's}, "prompt_tokens": n, "prompt_ids": [...]} */
  LOOM_EVENT_ERROR = 3   /* token: the status (LOOM_ERR_*); text: the message */
};

typedef struct loom_event {
  int32_t kind; /* enum loom_event_kind */
  uint64_t request_id;
  int32_t choice;
  int32_t token;
  const char* text; /* UTF-8, text_len bytes, NUL-terminated */
  size_t text_len;
  const char* json; /* NULL or a JSON object, see loom_event_kind */
} loom_event;

typedef void (*loom_event_callback)(const loom_event* event, void* user_data);

/* Validates and queues a generation request. On success *request_id is set and every event goes
 * to callback, which may run on the scheduler's thread before this returns (set up user_data
 * first). Errors: LOOM_ERR_INVALID_ARGUMENT (bad request, names the field),
 * LOOM_ERR_UNAVAILABLE (queue full or shutting down), LOOM_ERR_UNSUPPORTED (generation on an
 * embeddings context). */
LOOM_API int32_t loom_scheduler_submit(loom_scheduler* sched, const char* request_json, loom_event_callback callback,
                                       void* user_data, uint64_t* request_id);

/* Since 0.3: loom_scheduler_submit for a frontend that shapes its own responses (loom serve).
 * options_json: NULL or {"n_predict": the max tokens of a request that gives none (-1: as many as
 * fit), "endpoint": "chat" (the request must have "messages"; "prompt" is ignored) | "completion"
 * ("prompt" required, "messages" ignored) | "any" (the default: as loom_scheduler_submit)}.
 * info_buf (may be NULL with info_size 0) gets what the request became, as JSON:
 * {"prompt_tokens", "n" (choices), "max_tokens", "seed" (the one drawn when the request gave none),
 * "logprobs", "top_logprobs", "chat", "tool_call_format", "grammar_triggers" (text that starts a tool
 * call: a streaming frontend holds text back from there)}. It is written before the request is
 * queued (since 0.3 also "reasoning_format" and "stream_parse", as they apply): when info_size is
 * too small the request is refused (LOOM_ERR_RESOURCE_EXHAUSTED, the
 * message says the size needed) and nothing is queued. Otherwise as loom_scheduler_submit. */
LOOM_API int32_t loom_scheduler_submit_ext(loom_scheduler* sched, const char* request_json, const char* options_json,
                                           loom_event_callback callback, void* user_data, uint64_t* request_id,
                                           char* info_buf, size_t info_size);

/* Stops a request at the next step (its choices finish with "cancelled"). Unknown ids are ignored. */
LOOM_API void loom_scheduler_cancel(loom_scheduler* sched, uint64_t request_id);

/* Since 0.3: llama-server's reasoning_end control. A running chat request submitted with
 * "reasoning_control": true closes its reasoning block at its next token, as a spent
 * reasoning_budget_tokens does (reasoning_budget_message, then the end tag), and goes on to its
 * answer; a choice not inside a block then is unaffected. LOOM_ERR_NOT_FOUND: no such request is
 * running or waiting (it has finished); LOOM_ERR_UNSUPPORTED: it was not submitted with
 * reasoning_control. */
LOOM_API int32_t loom_scheduler_end_reasoning(loom_scheduler* sched, uint64_t request_id);

/* Embeddings on a context made with embeddings = true. request_json: {"input": a string, token
 * ids, or an array of either} or {"rerank": {"query": "...", "documents": ["...", ...]}} (rank
 * pooling: one score per document). The callback gets status LOOM_OK and n_inputs x n_dim floats
 * (pooled, not normalized), or a negative status and a message. */
typedef void (*loom_embed_callback)(int32_t status, const char* message, const float* data, int32_t n_inputs, int32_t n_dim,
                                    int32_t prompt_tokens, void* user_data);
LOOM_API int32_t loom_scheduler_embed(loom_scheduler* sched, const char* request_json, loom_embed_callback callback,
                                      void* user_data, uint64_t* request_id);

/* {"running", "waiting", "slots", "slots_busy", "kv_cells", "kv_used", "cached_tokens", ...,
 * "draft_tokens", "draft_accepted" (since 0.3), "metrics" (since 0.3: every counter, and the
 * histograms "ttft_seconds", "inter_token_seconds", "queue_seconds", "e2e_seconds" as {"bounds",
 * "counts" (per bucket, the last one +Inf), "sum", "count"})} into
 * buf. Returns the length, or -(needed size) when buf is too small, LOOM_SIZE_ERROR on error. */
LOOM_API int32_t loom_scheduler_stats(const loom_scheduler* sched, char* buf, size_t buf_size);

LOOM_API int32_t loom_scheduler_n_ctx(const loom_scheduler* sched);
LOOM_API int32_t loom_scheduler_n_slots(const loom_scheduler* sched);

/* ---- exclusive operations: each waits until no request runs (new ones wait meanwhile) --------- */

/* Saves the cached prefix of `tokens` (typically a finished request's prompt + output) as a
 * checked sequence state file with its tokens. *n_saved: tokens written (the longest cached
 * prefix; 0 writes nothing and returns LOOM_ERR_NOT_FOUND). */
LOOM_API int32_t loom_scheduler_save_session(loom_scheduler* sched, const char* path, const loom_token* tokens,
                                             int32_t n_tokens, int32_t* n_saved);
/* Loads a file written by save_session (or loom_state_seq_save_file) into the prefix cache: the
 * next request whose prompt starts with its tokens reuses them. Its tokens are copied to
 * tokens_out (up to capacity) and their count to *n_loaded. A file of another model, a corrupt
 * or truncated one fails (LOOM_ERR_CORRUPT / LOOM_ERR_INVALID_ARGUMENT) and changes nothing. */
LOOM_API int32_t loom_scheduler_load_session(loom_scheduler* sched, const char* path, loom_token* tokens_out,
                                             int32_t capacity, int32_t* n_loaded);
/* Since 0.3, llama-server's slots. Each slot (a sequence requests generate in) remembers the tokens
 * of the last request that ran in it (prompt + output, kept by the prefix cache when it ended).
 * loom_scheduler_slots: [{"id", "is_processing", "request_id" (0: none), "n_prompt", "n_decoded",
 * "n_remain", "n_cached" (the slot's remembered tokens)}] as of the last step, into buf (as
 * stats). slot_save: those tokens' cached prefix as a session file (LOOM_ERR_NOT_FOUND when the
 * slot holds none); slot_restore: a session file into the prefix cache, remembered as the slot's
 * (as load_session: another model's or a corrupt file fails and changes nothing); slot_erase:
 * drops the slot's tokens from the prefix cache where no other cached sequence shares them
 * (*n_erased: the tokens it held). Save, restore and erase are exclusive operations. */
LOOM_API int32_t loom_scheduler_slots(const loom_scheduler* sched, char* buf, size_t buf_size);
LOOM_API int32_t loom_scheduler_slot_save(loom_scheduler* sched, int32_t slot, const char* path, int32_t* n_saved);
LOOM_API int32_t loom_scheduler_slot_restore(loom_scheduler* sched, int32_t slot, const char* path, int32_t* n_restored);
LOOM_API int32_t loom_scheduler_slot_erase(loom_scheduler* sched, int32_t slot, int32_t* n_erased);

/* Empties the prefix cache. */
LOOM_API int32_t loom_scheduler_clear_cache(loom_scheduler* sched);
/* Replaces the LoRA adapters of the scheduler's context (n = 0 removes all) and empties the
 * prefix cache (its KV was computed without them). */
LOOM_API int32_t loom_scheduler_set_lora(loom_scheduler* sched, const loom_lora_adapter* const* adapters,
                                         const float* scales, int32_t n);
/* llama-batched-bench's measurement on the scheduler's context: pl sequences, a pp-token prompt
 * each, then tg decode steps, nr repetitions; the cache is emptied. JSON into buf (as stats):
 * {"pp", "tg", "pl", "nr", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed"} (seconds,
 * tokens per second; medians over nr). */
LOOM_API int32_t loom_scheduler_bench(loom_scheduler* sched, int32_t pp, int32_t tg, int32_t pl, int32_t nr, char* buf,
                                      size_t buf_size);

/* ---- chat formatting ------------------------------------------------------------------------ */

/* Renders a chat request (the "messages" fields above; "chat_template" in it, Jinja or a built-in
 * name, overrides the model's) and writes {"prompt", "grammar", "additional_stops", "preserved_tokens",
 * "tool_call_format", "thinking_forced_open", "grammar_triggers"} into buf (as stats). */
LOOM_API int32_t loom_chat_format(const loom_model* model, const char* request_json, char* buf, size_t buf_size);

/* {"has_template", "template", "tool_call_format", "supports_tools", "supports_tool_calls",
 * "supports_parallel_tool_calls"} for the model's (or template_override's: Jinja or a built-in
 * name, whose source "template" then shows) chat template. */
LOOM_API int32_t loom_chat_template_info(const loom_model* model, const char* template_override, char* buf, size_t buf_size);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_LOOM_SERVE_H */
