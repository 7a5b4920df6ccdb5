// The scheduler's state, shared by the files of src/serve/scheduler/ (internal: include it from
// those files only). Scheduler::Impl holds the loop thread's view of every request and the queues
// it shares with submitters; its methods live with their concept:
//   loop.cpp            the loop: takes new work from the inboxes, runs one step, publishes stats
//   admission.cpp       queueing, admission into slots, KV cell accounting, unsticking
//   step.cpp            one batch: rows of generating choices, prompt chunks, refills; decode
//   sequence.cpp        one request's choices: sampling, stop handling, finishing, cancelling
//   prefix_reuse.cpp    the prefix cache and cache dir as the scheduler uses them (checkpoints,
//                       sharing a grown prefix, loading prefixes from disk)
//   speculation.cpp     draft tokens (lookup or a draft model) and context shift
//   embedding_jobs.cpp  embedding requests (a context made with embeddings)
//   tasks.cpp           exclusive tasks (run_exclusive)
// Thread rule: members under "shared with submitters" are guarded by `mu` (the stats ones by
// stats_mu); everything else belongs to the loop thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/log.h"
#include "base/timer.h"
#include "serve/disk_cache.h"
#include "serve/prefix_cache.h"
#include "serve/scheduler.h"
#include "serve/stop_matcher.h"
#include "speculative/speculative.h"
#include "vocab/stream_detokenizer.h"

namespace loom::serve {
namespace sched {

inline double ms_between(int64_t a_us, int64_t b_us) { return b_us > a_us ? double(b_us - a_us) / 1000.0 : 0.0; }

// One choice of a request (n > 1: several, each in its own slot).
struct Choice {
  int slot = -1;
  std::optional<Sampler> sampler;  // set at submit
  std::unique_ptr<StreamDetokenizer> detok;
  StopMatcher stop;
  std::vector<int32_t> generated;
  std::vector<int32_t> kv;      // tokens at positions 0..kv.size()-1 of the slot's sequence
  int32_t pending = -1;         // sampled, decoded at the next step
  std::vector<int32_t> refill;  // context shift: tokens to decode again after the kept ones
  size_t refill_done = 0;
  int row = -1;                // output row of this step
  std::vector<int32_t> draft;  // lookup draft verified this step, rows row+1 ...
  int draft_reserved = 0;      // of its cells, taken from `reserved` (the rest: unreserved room)
  int chunk = 0;               // refill tokens in this step
  int reserved = 0;            // cells still reserved for this choice
  int max_tokens = 0;
  bool done = false;
  bool end_reasoning = false;  // Scheduler::end_reasoning: close the reasoning block at the next token
  int64_t t_last_us = 0;
  // Memories with checkpoints: the end-only parts as of kv[0, rolling_len), saved every few
  // generated tokens. At the end the reply's last tokens often do not come back as they were (a
  // chat template trims or re-tokenizes them); this one, a little earlier, still matches.
  std::vector<uint8_t> rolling;
  int rolling_len = 0;
};

struct Req {
  RequestId id = 0;
  uint64_t ticket = 0;  // arrival order among requests, embeddings and exclusive tasks
  GenerateRequest r;
  EventCallback cb;
  std::vector<Choice> ch;
  enum class Phase { kWaiting, kPrefill, kRun } phase = Phase::kWaiting;
  int progress = 0;         // prompt tokens in choice 0's sequence (shared or computed)
  int cached = 0;           // of which came from the prefix cache
  int computed = 0;         // prompt tokens computed by this request
  int prompt_reserved = 0;  // prompt cells still reserved
  int reserve_per_choice = 0;
  bool bounded = true;  // max_tokens given: its reservation is a guarantee
  PrefixCache::Node* lock = nullptr;
  bool cancelled = false;
  bool requeued = false;                           // sent back to waiting once for lack of cells (unstick)
  int chunk = 0, chunk_from = 0, prompt_row = -1;  // this step's prompt chunk
  int64_t t_submit = 0, t_admit = 0, t_prompt_done = 0, t_first = 0;
  int n_generated = 0;
  FinishReason reason0 = FinishReason::kStop;  // choice 0's, for the metrics
};

struct EmbedJob {
  RequestId id = 0;
  uint64_t ticket = 0;  // arrival order, as Req::ticket
  EmbedRequest r;
  EmbedCallback cb;
  EmbedResult result;
  size_t next = 0;  // inputs done
};

inline int common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
  return int(k);
}

// The rows of one step's batch and who they belong to.
struct StepBatch {
  Batch b;
  std::vector<std::pair<Req*, int>> gen;      // (request, choice) decoding a token
  std::vector<Req*> prefill;                  // requests with a prompt chunk
  std::vector<std::pair<Req*, int>> refills;  // choices re-decoding after a context shift
};

// What the loop takes from the submitters at the start of an iteration.
struct Intake {
  std::unordered_set<RequestId> cancels, reasoning_ends;
  bool stop_now = false;  // shutting down, and the grace period is over or nothing runs
};

}  // namespace sched

struct Scheduler::Impl {
  using Choice = sched::Choice;
  using Req = sched::Req;
  using EmbedJob = sched::EmbedJob;
  using StepBatch = sched::StepBatch;

  static constexpr int kMinReserve = 16;              // tokens reserved at least for a request without max_tokens
  static constexpr int kDraftRowsPerStep = 32;        // lookup draft rows verified in one step, all choices together
  static constexpr int kRollingCheckpointTokens = 8;  // generated tokens between rolling checkpoints
  // Memories with checkpoints also keep one this many tokens before a prompt's end: the next turn's
  // prompt often tokenizes the end of this one differently (the generation prompt's last characters
  // merge with the reply that follows them), as llama-server checkpoints a few tokens early too.
  static constexpr int kPromptTailCheckpoint = 4;

  Scheduler* self = nullptr;
  std::shared_ptr<const Model> model;
  const Vocab* vocab = nullptr;
  SchedulerParams p;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<PrefixCache> cache;
  DiskPrefixStore disk;
  int n_ctx = 0, step_tokens = 0;

  // ---- shared with submitters ----
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Req>> inbox;
  std::deque<std::unique_ptr<EmbedJob>> embed_inbox;
  std::unordered_set<RequestId> cancels;
  // Requests submitted and not yet ended (kDone / kError), and whether each armed reasoning control
  // (end_reasoning); the ones asked to end their reasoning block at the next sampling.
  std::unordered_map<RequestId, bool> live;
  std::unordered_set<RequestId> reasoning_ends;
  struct Task {
    std::function<Status(Context&, PrefixCache*)> fn;
    std::promise<Status> done;
    uint64_t ticket = 0;  // arrival order: runs after everything that came before it, before what came after
  };
  uint64_t next_ticket = 0;  // guarded by mu
  std::deque<std::unique_ptr<Task>> task_inbox;
  std::atomic<uint64_t> next_id{1};
  int n_waiting_shared = 0;  // inbox + waiting, for max_queue
  bool stopping = false;
  int64_t stop_deadline_us = 0;
  mutable std::mutex stats_mu;
  SchedulerStats snapshot;
  std::vector<SlotState> slot_snapshot;         // under stats_mu
  std::vector<std::vector<int32_t>> slot_last;  // under stats_mu: each slot's last tokens
  uint64_t rejected = 0;                        // under mu

  // ---- loop thread only ----
  std::deque<std::unique_ptr<Req>> waiting;
  std::list<std::unique_ptr<Req>> running;  // admission order
  std::deque<std::unique_ptr<EmbedJob>> embed_jobs;
  std::deque<std::unique_ptr<Task>> tasks;  // exclusive tasks: admission pauses while any waits
  std::vector<int> free_slots;
  Metrics metrics;
  int draft_rows_left = 0;  // this step's room for draft rows (lookup or draft model)
  int step_cells = 0;       // cells claimed by this step's batch (claim())
  // An encoder-decoder model (T5): a prompt is encoded, the decoder starts from its start token;
  // the prompt takes no decoder cells and no prefix is shared.
  bool enc_dec = false;
  uint64_t choices_finished = 0;  // finish_choice() calls, to tell a step that ended choices
  int64_t stall_logged_us = 0;    // last "no cells" log line (at most one a second)
  // Draft-model speculation (p.draft_model): one drafter per slot, made on first use; a drafter
  // that cannot be made (out of memory) turns the draft model off with a log line.
  std::vector<std::unique_ptr<ModelDrafter>> drafters;
  bool draft_model_off = false;
  std::thread loop;

  // ---- loop.cpp ----
  void run();
  sched::Intake take_inbox();  // waits while there is nothing to do
  void shut_down_now();
  void generate_step(uint64_t before);
  void publish();
  bool stopping_flag() const {
    std::lock_guard<std::mutex> l(mu);
    return stopping;
  }

  // ---- admission.cpp ----
  template <typename T>
  Status enqueue(std::deque<std::unique_ptr<T>>& q, std::unique_ptr<T> item, int* waiting);
  void admit(uint64_t before);
  void refuse_unadmittable(uint64_t before);
  void unstick();
  void requeue(Req& q);
  template <typename... Args>
  void log_stall(const char* fmt, Args... args);
  // KV cells
  // A memory without a full KV part (a recurrent model) has no cells to count: each slot's state is
  // its own, and only the context's length bounds a sequence.
  bool has_cells() const { return ctx->memory().kv() != nullptr; }
  int kv_used() const { return has_cells() ? ctx->kv().used() : 0; }
  int pinned() const { return kv_used() - (cache ? cache->evictable() : 0); }
  // Cells neither held, reserved nor claimed by this step's batch: what unbounded requests may
  // grow into. (A token taken from a reservation leaves `reserved` when it is claimed, before its
  // cell is used: step_cells keeps it counted until the decode.)
  int unreserved() const { return n_ctx - pinned() - reserved_total() - step_cells; }
  int reserved_total() const;
  bool ensure_free(int n);
  bool claim(int n);
  int claim_up_to(int n);

  // ---- step.cpp ----
  bool step();
  void add_generating_rows(StepBatch& s);
  void add_prompt_rows(StepBatch& s);
  void add_refill_rows(Req& q, int* budget, StepBatch& s);
  void add_prompt_chunk(Req& q, int* budget, StepBatch& s);
  void take_generated(const StepBatch& s);
  void take_refills(const StepBatch& s);
  void take_prompt_chunks(const StepBatch& s);
  bool take_cell(Req& q, int ci);
  void encode_prompts();
  void fail_batch(const Status& st, const StepBatch& s);

  // ---- sequence.cpp ----
  void sample_choice(Req& q, int ci, std::span<const float> logits);
  void fill_logprobs(const Req& q, std::span<const float> logits, int32_t tok, Event* e) const;
  void start_generating(Req& q);
  void finish_choice(Req& q, int ci, FinishReason reason, std::string stop_word = {});
  void retire(Req& q);
  // Empties choice c's slot (its cells and, for an encoder-decoder model, its encoder output),
  // returns it to the free list and unbinds it from c.
  void release_slot(Choice& c);
  void retire_finished();
  void fail_request(Req& q, const Status& st);
  void cancel_running(Req& q);
  void apply_cancels(const std::unordered_set<RequestId>& ids);
  void apply_reasoning_ends(const std::unordered_set<RequestId>& ids);
  void emit(Req& q, Event e);
  void count_finish(FinishReason r);

  // ---- prefix_reuse.cpp ----
  void try_disk(Req& q, PrefixCache::Match* m);
  void rematch(Req& q);
  bool waits_for_other(const Req& q, const std::vector<Req*>& earlier) const;
  int tail_checkpoint(const Req& q) const;
  void rolling_checkpoint(const Req& q, Choice& c);
  void checkpoint(PrefixCache::Node* n, int len, int slot);
  void relock(Req& q, int keep);
  void persist_prefix(std::span<const int32_t> tokens, int seq);

  // ---- speculation.cpp ----
  ModelDrafter* drafter_for(int slot);
  void add_draft(const Req& q, Choice& c, Batch* b);
  void drop_draft(Choice& c, int accepted);
  bool shift(Req& q, int ci);

  // ---- embedding_jobs.cpp ----
  void embed_step(uint64_t before);

  // ---- tasks.cpp ----
  bool work_before(uint64_t t) const;
  void run_tasks();
};

// At most one line a second for the conditions that stall the loop (a stuck state must not flood
// the log).
template <typename... Args>
void Scheduler::Impl::log_stall(const char* fmt, Args... args) {
  const int64_t now = now_us();
  if (now - stall_logged_us < 1000000) return;
  stall_logged_us = now;
  LOOM_LOG(kWarn, fmt, args...);
}

// Queues an item for the loop unless shutting down or max_queue items wait already (*waiting
// when given, which counts admitted-but-waiting requests too; else the inbox itself).
template <typename T>
Status Scheduler::Impl::enqueue(std::deque<std::unique_ptr<T>>& q, std::unique_ptr<T> item, int* waiting) {
  {
    std::lock_guard<std::mutex> l(mu);
    if (stopping) {
      ++rejected;
      return unavailable("the server is shutting down");
    }
    if ((waiting ? *waiting : int(q.size())) >= p.max_queue) {
      ++rejected;
      return unavailable("the queue is full (" + std::to_string(p.max_queue) + " waiting requests)");
    }
    if (waiting) ++*waiting;
    item->ticket = ++next_ticket;
    q.push_back(std::move(item));
  }
  cv.notify_one();
  return Status::ok();
}

}  // namespace loom::serve
