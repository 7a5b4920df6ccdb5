// The scheduler: many requests on one Context, served by one loop thread — continuous batching
// with chunked prefill, a prefix cache shared by every request, admission by KV cells and
// cancellation. It knows nothing of HTTP or JavaScript: `loom serve` and the Node binding's
// parallel mode both drive it (the binding through the C API).
//
//   auto s = *Scheduler::create(model, params);
//   GenerateRequest r; r.prompt = ids; r.max_tokens = 64;
//   auto id = s->submit(std::move(r), [](const Event& e) { ... });   // any thread
//   s->cancel(*id);                                                   // any thread
//   s->shutdown(std::chrono::seconds(5));
//
// Each step of the loop builds one batch: first the next token of every generating sequence,
// then prompt chunks of newly admitted requests under a per-step token budget (a long prompt
// never stalls running streams); decodes it; samples each sequence with its own sampler chain;
// emits events; retires finished requests. Events are delivered on the loop thread, in order per
// request: kToken* per choice, kFinish once per choice, then exactly one kDone (or one kError
// instead of all of them when the request could not run at all). Callbacks must not block and
// must not call back into the scheduler except cancel() / stats().
//
// Capacity: `n_ctx` KV cells are shared by every slot (one request may use all of them). A
// request is admitted when a slot is free for each of its choices and its uncached prompt plus
// n × max_tokens cells fit beside what the running requests have reserved (evicting unused
// cached prefixes as needed); otherwise it waits, in arrival order. Running requests therefore
// never fail because a newcomer arrived. max_tokens beyond what the context can hold is capped
// (finish reason kLength). A request without max_tokens reserves an equal share of the context
// (n_ctx / slots, at least its prompt plus 16 tokens) and grows beyond it while cells are free;
// when none are, it finishes with kLength.
//
// Every row of a step's batch claims its cell before it is added (evicting unused cached prefixes
// as needed), so a decode never meets a full cache and a running request never ends in an error
// for lack of cells. A choice that cannot get a cell — at the sequence's limit, or with its
// reservation used up and no unreserved room — is context-shifted when `context_shift` is on
// (n_keep tokens kept, half of the rest or more dropped so that the rest fits, the rest decoded
// again; the request's prefix-cache lock moves back to the kept tokens, so the dropped prompt
// cells become evictable), else it finishes with kLength keeping what it generated (llama.cpp's
// word). A step that can do nothing at all (a bookkeeping error; metrics.stalls counts them) ends
// the re-decoding choices with kLength or sends the newest prompt back to the queue once: the loop
// never spins on a step it cannot take.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "context/context.h"
#include "sample/sampler.h"
#include "serve/metrics.h"

namespace loom::serve {

class PrefixCache;
using RequestId = uint64_t;

enum class FinishReason { kStop, kLength, kCancelled };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled"

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;  // natural log of the model's probability (softmax of the raw logits)
};

struct GenerateRequest {
  std::vector<int32_t> prompt;    // token ids, BOS included as the caller wants
  SamplerParams sampling;         // the whole chain: seed, logit_bias, grammar (GBNF) ...
  int max_tokens = -1;            // per choice; < 0: as many as the context allows
  int n = 1;                      // choices, forked from one prefilled prompt (seq_cp)
  std::vector<std::string> stop;  // stop strings (never emitted, not even in part)
  bool ignore_eos = false;
  bool logprobs = false;         // report the chosen token's logprob
  int top_logprobs = 0;          // and this many most likely alternatives (0..kMaxTopLogprobs)
  bool cache_prompt = true;      // take / give prefixes from / to the prefix cache
  bool unparse_special = false;  // text of control tokens included (tool-call markers that are
                                 // special tokens in some vocabularies)
  int n_keep = 0;                // context shift: prompt tokens always kept (-1: the whole prompt)
  int slot = -1;                 // llama-server's id_slot: run in this slot (waits for it); -1: any
  int priority = 0;              // reserved
  // Speculative decoding by prompt lookup (speculative/speculative.h): each step drafts up to
  // draft_max tokens that followed the latest earlier occurrence of the choice's last `lookup`
  // tokens (down to 2-grams) and verifies them in the same batch; the output is unchanged.
  // 0: off. Drafts shorter than draft_min are not verified.
  int lookup = 0;
  int draft_max = 16;
  int draft_min = 0;
  // Prompt lengths at which the prefix cache also keeps a checkpoint of the memory's end-only
  // parts (recurrent states, windows), besides the prompt's end: e.g. the end of a chat's system
  // prompt, which later conversations share. Chunks of the prompt end there.
  std::vector<int> prompt_checkpoints;
};
inline constexpr int kMaxTopLogprobs = 20;

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;  // all choices
  int cached_tokens = 0;      // prompt tokens taken from the prefix cache
};

// llama-server's `timings`.
struct Timings {
  int prompt_n = 0;  // prompt tokens computed
  double prompt_ms = 0;
  int cache_n = 0;      // prompt tokens reused from the cache
  int predicted_n = 0;  // generated tokens (all choices)
  double predicted_ms = 0;
  double queue_ms = 0;  // submit -> admission
  double ttft_ms = 0;   // submit -> first token
};

struct Event {
  enum class Kind { kToken, kFinish, kDone, kError };
  Kind kind = Kind::kToken;
  RequestId id = 0;
  int choice = 0;
  // kToken: the token and the text that became final with it (possibly "" while a stop string
  // may still match or a UTF-8 character is incomplete). kFinish: the rest of the text.
  int32_t token = -1;
  std::string text;
  bool has_logprob = false;
  TokenLogprob logprob;           // the chosen token (when requested)
  std::vector<TokenLogprob> top;  // alternatives, most likely first
  // kFinish
  FinishReason reason = FinishReason::kStop;
  std::string stop_word;        // the stop string that matched ("" for EOS / grammar / length)
  std::vector<int32_t> tokens;  // the choice's generated tokens
  // kDone
  Usage usage;
  Timings timings;
  // kError
  Status error;
};
using EventCallback = std::function<void(const Event&)>;

struct EmbedRequest {
  std::vector<std::vector<int32_t>> inputs;  // each at most n_ubatch tokens
};
struct EmbedResult {
  std::vector<std::vector<float>> embeddings;  // per input: pooled (rank pooling: one score)
  int prompt_tokens = 0;
};
using EmbedCallback = std::function<void(Expected<EmbedResult>)>;

struct SchedulerParams {
  ContextParams context;       // n_ctx = total cells; n_seq_max is set by the scheduler
  int n_slots = 4;             // sequences generating at once
  int max_queue = 256;         // waiting requests beyond which submit() refuses (kUnavailable)
  int step_tokens = 0;         // tokens per step (decode + prompt chunks); 0: n_ubatch
  bool context_shift = false;  // at a sequence's limit, drop the oldest half after n_keep and go on
  bool prefix_cache = true;
  int cache_seqs = 0;  // sequences reserved for cached prefixes (0: as many as allowed)
  // Memories with end-only parts (recurrent, hybrid and sliding-window models) keep prefixes as
  // checkpoints in the prefix cache: at most this many on any path (llama-server's
  // --ctx-checkpoints) and this many MiB in all (its --cache-ram).
  int ctx_checkpoints = 8;
  int64_t cache_ram_mib = 8192;
  std::string cache_dir;  // evicted / idle prefixes as state files, loaded back on a hit
  int64_t cache_dir_max_bytes = int64_t(4) << 30;
  int cache_dir_min_tokens = 32;  // shorter prefixes are not written
  // Speculative decoding with a draft model (same vocabulary as the model, checked by create()):
  // every request that does not ask for prompt lookup drafts with it, up to min(draft_max, its
  // speculative.n_max) tokens per step (n_max 0 turns it off for that request), and verifies drafts
  // of at least max(draft_min, its n_min) tokens. Each slot gets its own context of the draft model
  // (draft_context; its n_ctx, or by default twice a slot's share of the cells, at least 2048 and
  // at most all of them; longer histories get no draft), made the first time the slot drafts, kept in
  // step with the slot's tokens by their common prefix. The draft decodes greedily and stops at a
  // token below draft_p_min. Output is unchanged: the target's sampler picks every token.
  std::shared_ptr<const Model> draft_model;
  ContextParams draft_context;
  int draft_max = 16, draft_min = 0;
  float draft_p_min = 0.75f;
};

// One slot (a sequence that generates; llama-server's slot) as GET /slots shows it.
struct SlotState {
  int id = 0;
  bool processing = false;  // a request's choice runs in it
  RequestId request = 0;    // that request (0: none)
  int n_prompt = 0;         // its prompt tokens
  int n_decoded = 0;        // tokens the choice has generated
  int n_remain = -1;        // tokens it may still generate
  int n_cached = 0;         // tokens of the last request that ran in it (Scheduler::slot_tokens)
};

struct SchedulerStats {
  int running = 0;  // requests admitted and not finished
  int waiting = 0;
  int slots = 0, slots_busy = 0;
  int kv_cells = 0, kv_used = 0;
  int cached_tokens = 0;  // tokens in the prefix tree
  int cache_evictable = 0;
  int cache_checkpoints = 0;  // checkpoints of recurrent states / windows, and their bytes
  int64_t cache_checkpoint_bytes = 0;
  Metrics metrics;
};

class Scheduler {
 public:
  // Loads nothing: the model is shared. `setup` runs on the new context before the loop starts
  // (LoRA adapters, control vectors).
  static Expected<std::unique_ptr<Scheduler>> create(std::shared_ptr<const Model> model, SchedulerParams params,
                                                     const std::function<Status(Context&)>& setup = {});
  ~Scheduler();  // shutdown(0) if still running
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates (token ids, sampler params and grammar, sizes) and queues. Errors: kInvalidArgument
  // (bad request; names the field, and n_ctx for a prompt that can never fit), kUnavailable
  // (queue full or shutting down), kUnsupported (generation on an embeddings-only context).
  Expected<RequestId> submit(GenerateRequest req, EventCallback on_event);
  Expected<RequestId> submit_embed(EmbedRequest req, EmbedCallback on_done);
  // Stops a request at the next step (its choices finish with kCancelled); unknown ids are ignored.
  void cancel(RequestId id);
  // llama-server's reasoning_end control: the request's choices close their reasoning block at
  // their next token, as a spent reasoning budget does (the budget message, then the end tag).
  // kNotFound when the request has ended (or never was); when it was not
  // submitted with sampling.reasoning_control (kUnsupported).
  Status end_reasoning(RequestId id);

  // The slots as of the last step. A slot's tokens are those of the last request that ran in it
  // (prompt + output; they went to the prefix cache when it ended), or what set_slot_tokens gave
  // it (a restored session): what llama-server's /slots save, restore and erase act on.
  std::vector<SlotState> slots() const;
  std::vector<int32_t> slot_tokens(int slot) const;
  void set_slot_tokens(int slot, std::vector<int32_t> tokens);

  // Runs `fn` on the loop thread when nothing else runs and returns its status: admission pauses
  // (requests submitted meanwhile wait) until the running requests and embeddings are done, then
  // `fn` gets the context and the prefix cache (null when disabled). What changes the meaning of
  // cached KV (LoRA adapters, control vectors) must clear the cache it is given. Session files,
  // benchmarks and cache edits go through here. Blocks the caller: never call it from an event
  // callback. kUnavailable once shutting down.
  Status run_exclusive(std::function<Status(Context&, PrefixCache*)> fn);

  SchedulerStats stats() const;
  const Model& model() const { return *model_; }
  int n_ctx() const { return n_ctx_; }
  int n_slots() const { return params_.n_slots; }
  // The prefix cache keeps checkpoints (recurrent, hybrid and sliding-window models): requests
  // may name prompt positions worth one (GenerateRequest::prompt_checkpoints).
  bool checkpoints_prefixes() const;
  bool embeddings() const { return params_.context.embeddings; }

  // Refuses new requests, lets running ones finish for up to `grace`, cancels the rest (their
  // streams get their final events), writes idle prefixes to the cache dir and stops the loop.
  void shutdown(std::chrono::milliseconds grace);

  struct Impl;

 private:
  Scheduler() = default;
  std::shared_ptr<const Model> model_;
  SchedulerParams params_;
  int n_ctx_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::serve
