#include "serve/scheduler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "base/log.h"
#include "base/timer.h"
#include "serve/disk_cache.h"
#include "serve/prefix_cache.h"
#include "serve/stop_matcher.h"
#include "speculative/speculative.h"
#include "vocab/stream_detokenizer.h"

namespace loom::serve {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "stop";
}

namespace {

constexpr int kMinReserve = 16;  // tokens reserved at least for a request without max_tokens
constexpr int kDraftRowsPerStep = 32;  // lookup draft rows verified in one step, all choices together

double ms_between(int64_t a_us, int64_t b_us) { return b_us > a_us ? double(b_us - a_us) / 1000.0 : 0.0; }

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
  int row = -1;                 // output row of this step
  std::vector<int32_t> draft;   // lookup draft verified this step, rows row+1 ...
  int draft_reserved = 0;       // of its cells, taken from `reserved` (the rest: unreserved room)
  int chunk = 0;                // refill tokens in this step
  int reserved = 0;             // cells still reserved for this choice
  int max_tokens = 0;
  bool done = false;
  bool end_reasoning = false;   // Scheduler::end_reasoning: close the reasoning block at the next token
  int64_t t_last_us = 0;
  // Memories with checkpoints: the end-only parts as of kv[0, rolling_len), saved every few
  // generated tokens. At the end the reply's last tokens often do not come back as they were (a
  // chat template trims or re-tokenizes them); this one, a little earlier, still matches.
  std::vector<uint8_t> rolling;
  int rolling_len = 0;
};

constexpr int kRollingCheckpointTokens = 8;  // generated tokens between rolling checkpoints
// Memories with checkpoints also keep one this many tokens before a prompt's end: the next turn's
// prompt often tokenizes the end of this one differently (the generation prompt's last characters
// merge with the reply that follows them), as llama-server checkpoints a few tokens early too.
constexpr int kPromptTailCheckpoint = 4;

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
  bool bounded = true;      // max_tokens given: its reservation is a guarantee
  PrefixCache::Node* lock = nullptr;
  bool cancelled = false;
  bool requeued = false;    // sent back to waiting once for lack of cells (unstick)
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

int common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
  return int(k);
}

}  // namespace

struct Scheduler::Impl {
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
  std::vector<SlotState> slot_snapshot;             // under stats_mu
  std::vector<std::vector<int32_t>> slot_last;      // under stats_mu: each slot's last tokens
  uint64_t rejected = 0;  // under mu

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
  int64_t stall_logged_us = 0;  // last "no cells" log line (at most one a second)
  // Draft-model speculation (p.draft_model): one drafter per slot, made on first use; a drafter
  // that cannot be made (out of memory) turns the draft model off with a log line.
  std::vector<std::unique_ptr<ModelDrafter>> drafters;
  bool draft_model_off = false;
  std::thread loop;

  ModelDrafter* drafter_for(int slot) {
    if (draft_model_off || !p.draft_model) return nullptr;
    if (drafters.empty()) drafters.resize(size_t(p.n_slots));
    auto& d = drafters[size_t(slot)];
    if (!d) {
      // Cells: draft_context.n_ctx when given, else twice a slot's share (at least 2048, at most the
      // whole context): a slot's own copy of the history, like llama-server's per-slot draft
      // contexts; a longer history is not drafted for (ModelDrafter returns no draft).
      ContextParams dp = p.draft_context;
      const int share = std::min(n_ctx, std::max(2048, 2 * n_ctx / std::max(1, p.n_slots)));
      dp.n_ctx = (p.draft_context.n_ctx > 0 ? p.draft_context.n_ctx : share) + p.draft_max + 1;
      dp.n_seq_max = 1;
      dp.kv_unified = false;
      if (dp.n_threads <= 0) dp.n_threads = ctx->params().n_threads;
      dp.n_batch = std::max(dp.n_batch, 512);
      auto made = ModelDrafter::create(p.draft_model, *model, dp, p.draft_p_min);
      if (!made) {
        LOOM_LOG(kWarn, "scheduler: draft model disabled: %s", made.status().message().c_str());
        draft_model_off = true;
        return nullptr;
      }
      d = std::move(*made);
    }
    return d.get();
  }

  // ---------------------------------------------------------------------------------------------
  void emit(Req& q, Event e) {
    e.id = q.id;
    if (e.kind == Event::Kind::kDone || e.kind == Event::Kind::kError) {
      std::lock_guard<std::mutex> l(mu);
      live.erase(q.id);
    }
    if (q.cb) q.cb(e);
  }

  int reserved_total() const {
    int t = 0;
    for (const auto& q : running) {
      t += q->prompt_reserved;
      for (const Choice& c : q->ch) t += c.done ? 0 : c.reserved;
    }
    return t;
  }
  // A memory without a full KV part (a recurrent model) has no cells to count: each slot's state is
  // its own, and only the context's length bounds a sequence.
  bool has_cells() const { return ctx->memory().kv() != nullptr; }
  int kv_used() const { return has_cells() ? ctx->kv().used() : 0; }
  int pinned() const { return kv_used() - (cache ? cache->evictable() : 0); }
  // Cells neither held, reserved nor claimed by this step's batch: what unbounded requests may
  // grow into. (A token taken from a reservation leaves `reserved` when it is claimed, before its
  // cell is used: step_cells keeps it counted until the decode.)
  int unreserved() const { return n_ctx - pinned() - reserved_total() - step_cells; }

  bool ensure_free(int n) {
    if (!has_cells()) return true;
    const int free_now = n_ctx - ctx->kv().used();
    if (free_now >= n) return true;
    if (cache) cache->evict(n - free_now);
    return n_ctx - ctx->kv().used() >= n;
  }
  // Cells for n more rows of this step's batch, evicting unused cached prefixes as needed: every
  // row is claimed before it is added, so a batch never meets a full cache at decode.
  bool claim(int n) {
    if (n <= 0) return true;
    if (!ensure_free(step_cells + n)) return false;
    step_cells += n;
    return true;
  }
  // The most rows (up to n) that claim() can give now.
  int claim_up_to(int n) {
    if (n <= 0 || claim(n)) return std::max(n, 0);
    const int can = std::min(n, n_ctx - kv_used() + (cache ? cache->evictable() : 0) - step_cells);
    for (int k = can; k > 0; --k) {
      if (claim(k)) return k;
    }
    return 0;
  }

  // ---- logprobs ----
  void fill_logprobs(const Req& q, std::span<const float> logits, int32_t tok, Event* e) const {
    if (!q.r.logprobs && q.r.top_logprobs <= 0) return;
    float mx = -INFINITY;
    for (float v : logits) mx = std::max(mx, v);
    double sum = 0;
    for (float v : logits) sum += std::exp(double(v - mx));
    const float lse = mx + float(std::log(sum));
    e->has_logprob = true;
    e->logprob = {tok, logits[size_t(tok)] - lse};
    const int k = std::min<int>(q.r.top_logprobs, int(logits.size()));
    if (k > 0) {
      std::vector<int32_t> idx(logits.size());
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t(i);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
      });
      for (int i = 0; i < k; ++i) e->top.push_back({idx[size_t(i)], logits[size_t(idx[size_t(i)])] - lse});
    }
  }

  // ---- finishing ----
  void finish_choice(Req& q, int ci, FinishReason reason, std::string stop_word = {}) {
    Choice& c = q.ch[size_t(ci)];
    if (c.done) return;
    Event e;
    e.kind = Event::Kind::kFinish;
    e.choice = ci;
    if (!c.stop.matched() && c.detok) {
      e.text = c.stop.push(c.detok->flush());
      if (c.stop.matched()) {
        reason = FinishReason::kStop;
        stop_word = c.stop.stop_word();
      } else {
        e.text += c.stop.flush();
      }
    }
    e.reason = reason;
    if (ci == 0) q.reason0 = reason;
    e.stop_word = std::move(stop_word);
    e.tokens = c.generated;
    ++choices_finished;
    c.done = true;
    c.reserved = 0;
    c.pending = -1;
    c.refill.clear();
    emit(q, std::move(e));
  }

  void count_finish(FinishReason r) {
    switch (r) {
      case FinishReason::kStop: ++metrics.requests_stop; break;
      case FinishReason::kLength: ++metrics.requests_length; break;
      case FinishReason::kCancelled: ++metrics.requests_cancelled; break;
    }
  }

  // Gives the request's cells to the prefix cache, frees its slots, sends kDone.
  void retire(Req& q) {
    if (q.phase != Req::Phase::kWaiting) {
      for (size_t i = 0; i < q.ch.size(); ++i) {
        Choice& c = q.ch[i];
        if (c.slot < 0) continue;
        if (cache && q.r.cache_prompt) {
          std::span<const int32_t> toks = c.kv;
          std::vector<int32_t> partial;
          if (q.phase == Req::Phase::kPrefill) {
            partial.assign(q.r.prompt.begin(), q.r.prompt.begin() + (i == 0 ? q.progress : 0));
            toks = partial;
          }
          if (!toks.empty()) checkpoint(cache->insert(toks, c.slot), int(toks.size()), c.slot);
          {
            std::lock_guard<std::mutex> l(stats_mu);
            if (size_t(c.slot) < slot_last.size()) slot_last[size_t(c.slot)].assign(toks.begin(), toks.end());
          }
          // The last rolling checkpoint too, a few tokens before the end (see Choice::rolling).
          if (!c.rolling.empty() && c.rolling_len < int(toks.size()) && q.phase == Req::Phase::kRun) {
            cache->set_checkpoint(cache->insert(toks.first(size_t(c.rolling_len)), c.slot), std::move(c.rolling));
          }
        }
        {
          // The slot shows this request until another one runs in it.
          std::lock_guard<std::mutex> l(stats_mu);
          if (size_t(c.slot) < slot_snapshot.size()) {
            SlotState& s = slot_snapshot[size_t(c.slot)];
            s.processing = false;
            s.request = q.id;
            s.n_prompt = int(q.r.prompt.size());
            s.n_decoded = int(c.generated.size());
            s.n_remain = 0;
            s.n_cached = int(slot_last[size_t(c.slot)].size());
          }
        }
        (void)ctx->seq_rm(c.slot, -1, -1);
        if (enc_dec) ctx->encoder_forget(c.slot);
        free_slots.push_back(c.slot);
        c.slot = -1;
      }
      if (cache && q.lock) cache->unlock(q.lock);
      q.lock = nullptr;
    }
    const int64_t now = now_us();
    Event e;
    e.kind = Event::Kind::kDone;
    e.usage.prompt_tokens = int(q.r.prompt.size());
    e.usage.cached_tokens = q.cached;
    e.usage.completion_tokens = q.n_generated;
    e.timings.prompt_n = q.computed;
    e.timings.cache_n = q.cached;
    e.timings.prompt_ms = q.t_admit ? ms_between(q.t_admit, q.t_prompt_done ? q.t_prompt_done : now) : 0;
    e.timings.predicted_n = q.n_generated;
    e.timings.predicted_ms = q.t_prompt_done ? ms_between(q.t_prompt_done, now) : 0;
    e.timings.queue_ms = ms_between(q.t_submit, q.t_admit ? q.t_admit : now);
    e.timings.ttft_ms = q.t_first ? ms_between(q.t_submit, q.t_first) : 0;
    metrics.e2e.observe(double(now - q.t_submit) / 1e6);
    metrics.prompt_seconds += e.timings.prompt_ms / 1e3;
    metrics.predicted_seconds += e.timings.predicted_ms / 1e3;
    metrics.n_tokens_max = std::max<uint64_t>(metrics.n_tokens_max, uint64_t(q.r.prompt.size()) + uint64_t(q.n_generated));
    count_finish(q.reason0);
    publish();  // so that stats() seen after kDone already counts the slot as free
    emit(q, std::move(e));
  }

  // ---- sampling one choice from its logits row ----
  void sample_choice(Req& q, int ci, std::span<const float> logits) {
    Choice& c = q.ch[size_t(ci)];
    if (c.end_reasoning) {
      c.end_reasoning = false;
      c.sampler->end_reasoning();
    }
    const int32_t tok = c.sampler->sample(logits);
    const int64_t now = now_us();
    if (tok < 0) {
      LOOM_LOG(kWarn, "request %llu: the grammar admits no token here; stopping", static_cast<unsigned long long>(q.id));
      finish_choice(q, ci, FinishReason::kStop);
      return;
    }
    if (!q.r.ignore_eos && vocab->is_eog(tok)) {
      finish_choice(q, ci, FinishReason::kStop);
      return;
    }
    c.sampler->accept(tok);
    c.generated.push_back(tok);
    ++q.n_generated;
    ++metrics.generated_tokens;
    if (!q.t_first) {
      q.t_first = now;
      metrics.ttft.observe(double(now - q.t_submit) / 1e6);
    }
    if (c.t_last_us) metrics.itl.observe(double(now - c.t_last_us) / 1e6);
    c.t_last_us = now;
    Event e;
    e.kind = Event::Kind::kToken;
    e.choice = ci;
    e.token = tok;
    auto piece = c.detok->push(tok);
    e.text = c.stop.push(piece ? *piece : std::string());
    fill_logprobs(q, logits, tok, &e);
    emit(q, std::move(e));
    if (c.stop.matched()) {
      finish_choice(q, ci, FinishReason::kStop, c.stop.stop_word());
    } else if (c.sampler->grammar_done()) {
      finish_choice(q, ci, FinishReason::kStop);
    } else if (int(c.generated.size()) >= c.max_tokens) {
      finish_choice(q, ci, FinishReason::kLength);
    } else {
      c.pending = tok;
    }
  }

  // ---- admission ----
  // Admits waiting requests in arrival order, those that came before ticket `before` only (an
  // exclusive task waits for them; the ones after it wait for the task).
  void admit(uint64_t before) {
    while (!waiting.empty()) {
      Req& q = *waiting.front();
      if (q.ticket > before) return;
      if (int(free_slots.size()) < q.r.n) return;
      // llama-server's id_slot: a request for one slot waits (in arrival order) until it is free.
      auto pinned_at = free_slots.end();
      if (q.r.slot >= 0) {
        pinned_at = std::find(free_slots.begin(), free_slots.end(), q.r.slot);
        if (pinned_at == free_slots.end()) return;
      }
      const int len = int(q.r.prompt.size());
      PrefixCache::Match m;
      if (cache && q.r.cache_prompt) {
        m = cache->match(q.r.prompt, len - 1);
        try_disk(q, &m);
        cache->lock(m.node);
      }
      const int need = (enc_dec ? 0 : len - m.len) + q.r.n * q.reserve_per_choice;
      if (has_cells() && need > n_ctx - pinned() - reserved_total()) {
        if (cache) cache->unlock(m.node);
        return;  // in arrival order: the head waits for cells
      }
      std::unique_ptr<Req> owned = std::move(waiting.front());
      waiting.pop_front();
      if (pinned_at != free_slots.end()) std::iter_swap(pinned_at, free_slots.end() - 1);
      for (Choice& c : q.ch) {
        c.slot = free_slots.back();
        free_slots.pop_back();
        c.reserved = q.reserve_per_choice;
      }
      if (m.len > 0 && !cache->share(m, q.ch[0].slot).is_ok()) {
        cache->unlock(m.node);
        m = {};
      }
      q.lock = m.node;
      q.progress = q.cached = m.len;
      q.prompt_reserved = len - m.len;
      q.phase = Req::Phase::kPrefill;
      q.t_admit = now_us();
      metrics.queue_time.observe(double(q.t_admit - q.t_submit) / 1e6);
      metrics.prefix_queried_tokens += uint64_t(len);
      metrics.prefix_hit_tokens += uint64_t(m.len);
      running.push_back(std::move(owned));
      {
        std::lock_guard<std::mutex> l(mu);
        --n_waiting_shared;
      }
    }
  }

  // A longer prefix from the cache dir: loaded into a cache sequence and adopted by the tree.
  void try_disk(Req& q, PrefixCache::Match* m) {
    if (!disk.active()) return;
    const int len = int(q.r.prompt.size());
    int dlen = 0;
    const DiskPrefixStore::Entry* e = disk.find(q.r.prompt, len - 1, m->len + std::max(1, p.cache_dir_min_tokens / 2), &dlen);
    if (!e) return;
    const int file_cells = int(e->tokens.size());
    // The file is loaded whole; there must be room beside every reservation and this request.
    cache->lock(m->node);
    const bool room = file_cells + (len - dlen) + q.r.n * q.reserve_per_choice <= n_ctx - pinned() - reserved_total() &&
                      ensure_free(file_cells);
    cache->unlock(m->node);
    if (!room) return;
    const int seq = cache->take_free_seq();
    if (seq < 0) return;
    std::vector<int32_t> toks;
    const std::string path = e->path;
    Status st = ctx->seq_state_load_file(path, seq, &toks);
    if (st && toks != e->tokens) st = corrupt("its tokens changed since it was indexed");
    if (!st) {
      LOOM_LOG(kWarn, "cache dir: skipping %s: %s", path.c_str(), st.message().c_str());
      ++metrics.disk_errors;
      disk.forget(e);
      cache->release_seq(seq);
      return;
    }
    ++metrics.disk_loads;
    // Keep only what this prompt uses, then hand it to the tree.
    (void)ctx->seq_rm(seq, dlen, -1);
    toks.resize(size_t(dlen));
    cache->adopt(toks, seq);
    *m = cache->match(q.r.prompt, len - 1);
  }

  // ---- one step ----
  // One batch: returns false when it could do nothing at all (no row decoded, no choice ended),
  // which the loop must resolve (unstick) instead of trying the same step again.
  bool step() {
    ++metrics.steps;
    metrics.busy_slots_sum += running.size();
    step_cells = 0;
    const uint64_t finished_before = choices_finished;
    if (enc_dec) encode_prompts();
    Batch b;
    std::vector<std::pair<Req*, int>> gen;      // (request, choice) decoding a token
    std::vector<Req*> prefill;                  // requests with a prompt chunk
    std::vector<std::pair<Req*, int>> refills;  // choices re-decoding after a context shift

    // 1. the next token of every generating choice (and its lookup draft)
    draft_rows_left = kDraftRowsPerStep;
    for (auto& qp : running) {
      Req& q = *qp;
      if (q.phase != Req::Phase::kRun) continue;
      for (int ci = 0; ci < int(q.ch.size()); ++ci) {
        Choice& c = q.ch[size_t(ci)];
        c.row = -1;
        c.chunk = 0;
        if (c.done || c.pending < 0) continue;
        if (!take_cell(q, ci)) continue;
        c.row = b.size();
        b.add(c.pending, int32_t(c.kv.size()), {c.slot}, true);
        gen.emplace_back(&q, ci);
        add_draft(q, c, &b);
      }
    }
    // 2. prompt chunks and refills under the step budget, in admission order
    int budget = std::max(0, step_tokens - b.size());
    for (auto& qp : running) {
      Req& q = *qp;
      q.chunk = 0;
      q.prompt_row = -1;
      if (q.phase == Req::Phase::kRun) {
        for (int ci = 0; ci < int(q.ch.size()) && budget > 0; ++ci) {
          Choice& c = q.ch[size_t(ci)];
          if (c.done || c.refill.empty()) continue;
          const int n = claim_up_to(std::min<int>(budget, int(c.refill.size() - c.refill_done)));
          if (n <= 0) continue;
          c.reserved = std::max(0, c.reserved - n);
          for (int i = 0; i < n; ++i) {
            const size_t k = c.refill_done + size_t(i);
            const bool last = k + 1 == c.refill.size();
            if (last) c.row = b.size();
            b.add(c.refill[k], int32_t(c.kv.size() + size_t(i)), {c.slot}, last);
          }
          c.chunk = n;
          budget -= n;
          refills.emplace_back(&q, ci);
        }
        continue;
      }
      if (q.phase != Req::Phase::kPrefill || budget <= 0) continue;
      const int len = int(q.r.prompt.size());
      rematch(q);
      if (waits_for_other(q, prefill)) continue;
      // A checkpoint position inside the prompt ends a chunk there (prompt_checkpoints, and a few
      // tokens before the end).
      int upto = len;
      for (int cp : q.r.prompt_checkpoints) {
        if (cp > q.progress && cp < upto) upto = cp;
      }
      const int tail = tail_checkpoint(q);
      if (tail > q.progress && tail < upto) upto = tail;
      const int n = claim_up_to(std::min(budget, upto - q.progress));
      if (n <= 0) continue;
      for (int i = 0; i < n; ++i) {
        const int pos = q.progress + i;
        const bool last = pos + 1 == len;
        if (last) q.prompt_row = b.size();
        b.add(q.r.prompt[size_t(pos)], pos, {q.ch[0].slot}, last);
      }
      q.chunk_from = q.progress;
      q.chunk = n;
      budget -= n;
      prefill.push_back(&q);
    }
    if (b.size() == 0) return choices_finished != finished_before;
    if (has_cells() && !ensure_free(b.size())) {
      // Every row was claimed above: a bookkeeping error. Nothing is decoded; unstick() resolves it.
      log_stall("scheduler: %d cells needed, %d free after eviction (claimed %d)", b.size(), n_ctx - kv_used(),
                step_cells);
      return false;
    }
    LOOM_LOG(kDebug, "step: batch %d (gen %zu, prefill %zu), used %d, evictable %d, reserved %d", b.size(), gen.size(),
             prefill.size(), kv_used(), cache ? cache->evictable() : 0, reserved_total());
    const Status st = ctx->decode(b);
    step_cells = 0;
    if (!st) {
      fail_batch(st, gen, prefill, refills);
      return true;
    }

    // 3. outputs
    for (auto [qp, ci] : gen) {
      Choice& c = qp->ch[size_t(ci)];
      c.kv.push_back(c.pending);
      c.pending = -1;
      rolling_checkpoint(*qp, c);
    }
    for (auto [qp, ci] : gen) {
      Choice& c = qp->ch[size_t(ci)];
      if (qp->cancelled || c.done) {
        drop_draft(c, 0);
        continue;
      }
      // Row 0 is the pending token's; row i + 1 verifies draft[i] (accepted while the sampler
      // picks exactly it: the tokens are plain decoding's, see speculative/speculative.h).
      size_t i = 0;
      for (;;) {
        auto logits = ctx->logits(c.row + int(i));
        if (!logits) break;
        sample_choice(*qp, ci, *logits);
        if (c.done || i == c.draft.size() || c.pending != c.draft[i]) break;
        c.kv.push_back(c.pending);  // decoded already, as draft[i]
        c.pending = -1;
        ++i;
      }
      metrics.draft_accepted += uint64_t(i);
      drop_draft(c, int(i));
    }
    for (auto [qp, ci] : refills) {
      Choice& c = qp->ch[size_t(ci)];
      c.kv.insert(c.kv.end(), c.refill.begin() + long(c.refill_done), c.refill.begin() + long(c.refill_done) + c.chunk);
      c.refill_done += size_t(c.chunk);
      if (c.refill_done == c.refill.size()) {
        c.refill.clear();
        c.refill_done = 0;
        auto logits = ctx->logits(c.row);
        if (logits) sample_choice(*qp, ci, *logits);
      }
    }
    for (Req* q : prefill) {
      q->progress += q->chunk;
      q->computed += q->chunk;
      q->prompt_reserved = std::max(0, q->prompt_reserved - q->chunk);
      metrics.prompt_tokens += uint64_t(q->chunk);
      if (cache && q->r.cache_prompt) {
        // The prompt so far joins the tree at once, so requests arriving meanwhile share it.
        PrefixCache::Node* n = cache->insert(std::span<const int32_t>(q->r.prompt).first(size_t(q->progress)),
                                             q->ch[0].slot);
        if (n && n != q->lock) {
          cache->lock(n);
          if (q->lock) cache->unlock(q->lock);
          q->lock = n;
        }
        // Checkpoints of the end-only memory parts: at the prompt's end (the reply starts from
        // there next turn) and where the request asked (the end of a system prompt).
        const bool at_end = q->progress == int(q->r.prompt.size());
        if (at_end || q->progress == tail_checkpoint(*q) ||
            std::find(q->r.prompt_checkpoints.begin(), q->r.prompt_checkpoints.end(), q->progress) !=
                q->r.prompt_checkpoints.end()) {
          checkpoint(n, q->progress, q->ch[0].slot);
        }
      }
      if (q->progress == int(q->r.prompt.size())) start_generating(*q);
    }
    return true;
  }

  // Requests whose choices are all done leave.
  void retire_finished() {
    for (auto it = running.begin(); it != running.end();) {
      Req& q = **it;
      const bool all_done = std::all_of(q.ch.begin(), q.ch.end(), [](const Choice& c) { return c.done; });
      if (all_done && q.phase == Req::Phase::kRun) {
        retire(q);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
  }

  // A lookup draft for choice c after its pending token, within its reserved cells, the context
  // and its token limit; rows appended to b.
  void add_draft(const Req& q, Choice& c, Batch* b) {
    c.draft.clear();
    const bool lookup = q.r.lookup > 0;
    const bool model_draft = !lookup && p.draft_model && !draft_model_off;
    if ((!lookup && !model_draft) || q.r.draft_max <= 0 || c.done) return;
    if (ctx->recurrent()) return;  // a recurrent state cannot forget rejected draft tokens
    const int pos = int(c.kv.size());  // the pending token's
    const int claimable = n_ctx - kv_used() + (cache ? cache->evictable() : 0) - step_cells;
    int k = std::min({q.r.draft_max, model_draft ? p.draft_max : q.r.draft_max, n_ctx - pos - 1,
                      c.max_tokens - int(c.generated.size()) - 1,
                      std::max(c.reserved, q.bounded ? 0 : unreserved()), draft_rows_left, claimable});
    if (k <= 0) return;
    std::vector<int32_t> history(c.kv);
    history.push_back(c.pending);
    Expected<std::vector<int32_t>> d = std::vector<int32_t>{};
    if (lookup) {
      d = LookupDrafter(q.r.lookup, std::min(q.r.lookup, 2)).draft(history, k);
    } else if (ModelDrafter* drafter = drafter_for(c.slot)) {
      d = drafter->draft(history, k);
      if (!d) LOOM_LOG(kWarn, "scheduler: the draft model failed: %s", d.status().message().c_str());
    }
    const int min_len = std::max({1, q.r.draft_min, model_draft ? p.draft_min : 0});
    if (!d || int(d->size()) < min_len || !claim(int(d->size()))) return;
    c.draft = std::move(*d);
    const int m = int(c.draft.size());
    draft_rows_left -= m;
    c.draft_reserved = std::min(m, c.reserved);  // unbounded requests grow into unreserved cells
    c.reserved -= c.draft_reserved;
    for (int i = 0; i < m; ++i) b->add(c.draft[size_t(i)], int32_t(pos + 1 + i), {c.slot}, true);
    metrics.draft_tokens += uint64_t(m);
  }

  // After verification (`accepted` draft tokens kept): the cells of the other draft rows leave
  // the sequence, which holds exactly c.kv again; accepted tokens are charged to the reservation
  // first, as take_cell does, and what was taken from it for the rest goes back.
  void drop_draft(Choice& c, int accepted) {
    if (c.draft.empty()) return;
    (void)ctx->seq_rm(c.slot, int(c.kv.size()), -1);
    if (!c.done) c.reserved += std::max(0, c.draft_reserved - accepted);
    c.draft.clear();
    c.draft_reserved = 0;
  }

  // A cell for one more token of choice ci, claimed for this step: from its reservation, else
  // unreserved room. At the sequence's limit, or when no cell can be had, a context shift (when
  // enabled) makes room, else the choice ends with what it generated (kLength).
  bool take_cell(Req& q, int ci) {
    Choice& c = q.ch[size_t(ci)];
    if (int(c.kv.size()) < n_ctx) {
      if (c.reserved > 0) {
        if (claim(1)) {
          --c.reserved;
          return true;
        }
      } else if (unreserved() > 0 && claim(1)) {
        return true;
      }
    }
    if (p.context_shift && shift(q, ci)) return false;  // refills in the prompt stage
    finish_choice(q, ci, FinishReason::kLength);
    return false;
  }

  // Context shift by recomputation: keep n_keep tokens, drop half of the rest (more when the
  // remainder would not fit), decode the remainder again at its new positions (exact, and no
  // shared cell is ever moved). Returns false when nothing can be dropped; true when the choice
  // refills, or ended (kLength) because not even its pending token finds a cell.
  bool shift(Req& q, int ci) {
    Choice& c = q.ch[size_t(ci)];
    const int len = int(q.r.prompt.size());
    int keep = q.r.n_keep < 0 ? len : std::min(q.r.n_keep, len);
    if (!c.kv.empty() && c.kv[0] == vocab->bos() && keep == 0) keep = 1;
    keep = std::min(keep, int(c.kv.size()));
    const int n_left = int(c.kv.size()) - keep;
    if (n_left < 2) return false;
    if (!ctx->seq_rm(c.slot, keep, -1).is_ok()) return false;
    // The sequence no longer holds the prompt's cells after `keep`: the request's lock on the
    // prefix cache moves back to the first `keep` tokens, so that the rest can be evicted (with
    // one choice only: the others still share the prompt).
    if (cache && q.lock && q.ch.size() == 1) relock(q, keep);
    c.reserved = 0;  // recomputed from what is free now
    const int room = unreserved();
    // refill = n_left - discard tokens + the pending one, which must fit in `room`.
    const int discard = std::max(n_left / 2, n_left + 1 - room);
    if (discard > n_left) {
      c.kv.resize(size_t(keep));
      finish_choice(q, ci, FinishReason::kLength);
      return true;
    }
    c.rolling.clear();  // its positions are gone
    c.rolling_len = 0;
    c.refill.assign(c.kv.begin() + keep + discard, c.kv.end());
    c.refill.push_back(c.pending);
    c.refill_done = 0;
    c.kv.resize(size_t(keep));
    c.pending = -1;
    // Reserved: the refill, then up to a slot's share of further tokens.
    const int left = std::max(0, c.max_tokens - int(c.generated.size()));
    c.reserved = std::min(room, int(c.refill.size()) + std::min(left, std::max(q.reserve_per_choice, kMinReserve)));
    ++metrics.context_shifts;
    return true;
  }

  // The prompt position a few tokens before its end that gets a checkpoint too (0: none).
  int tail_checkpoint(const Req& q) const {
    const int len = int(q.r.prompt.size());
    return cache && cache->needs_checkpoints() && q.r.cache_prompt && len > 2 * kPromptTailCheckpoint
               ? len - kPromptTailCheckpoint
               : 0;
  }

  // Every few generated tokens, the end-only parts of a choice's sequence as of c.kv (not while
  // draft rows are in its memory).
  void rolling_checkpoint(const Req& q, Choice& c) {
    if (!cache || !cache->needs_checkpoints() || !q.r.cache_prompt || !c.draft.empty()) return;
    if (int(c.kv.size()) - std::max(c.rolling_len, int(q.r.prompt.size())) < kRollingCheckpointTokens) return;
    auto d = ctx->seq_state_save(c.slot, {}, kPartsAtEnd);
    if (!d) return;
    c.rolling = std::move(*d);
    c.rolling_len = int(c.kv.size());
  }

  // A checkpoint of `slot`'s end-only memory parts at node n, when the slot has decoded exactly n's
  // path (`len` tokens) and the memory has such parts.
  void checkpoint(PrefixCache::Node* n, int len, int slot) {
    if (!cache || !n || !cache->needs_checkpoints() || n->end() != len) return;
    cache->set_checkpoint(n, slot);
  }

  // Moves request q's lock on the prefix cache to its prompt's first `keep` tokens (none: unlocked).
  void relock(Req& q, int keep) {
    PrefixCache::Node* n = nullptr;
    if (keep > 0) n = cache->match(std::span<const int32_t>(q.r.prompt).first(size_t(keep)), keep).node;
    if (n == q.lock) return;
    if (n) cache->lock(n);
    cache->unlock(q.lock);
    q.lock = n;
  }

  // After a step that could do nothing (no cell for any row: a reservation went wrong): choices
  // re-decoding after a context shift end with what they generated (kLength); else the request
  // admitted last, still computing its prompt, goes back to the head of the queue (its computed
  // prefix stays in the cache), and fails if that happened once already. The loop never spins.
  void unstick() {
    ++metrics.stalls;
    bool ended = false;
    for (auto& qp : running) {
      for (int ci = 0; ci < int(qp->ch.size()); ++ci) {
        Choice& c = qp->ch[size_t(ci)];
        if (c.done || c.refill.empty()) continue;
        log_stall("scheduler: request %llu: no KV cells to re-decode %zu tokens after a context shift; it ends (length)",
                  static_cast<unsigned long long>(qp->id), c.refill.size() - c.refill_done);
        c.refill.clear();
        finish_choice(*qp, ci, FinishReason::kLength);
        ended = true;
      }
    }
    if (ended) return;
    for (auto it = running.rbegin(); it != running.rend(); ++it) {
      Req& q = **it;
      if (q.phase != Req::Phase::kPrefill) continue;
      auto fwd = std::prev(it.base());
      if (q.requeued) {
        log_stall("scheduler: request %llu: no KV cells for its prompt (n_ctx = %d); it fails",
                  static_cast<unsigned long long>(q.id), n_ctx);
        fail_request(q, resource_exhausted("no KV cells for the prompt (n_ctx = " + std::to_string(n_ctx) + ")"));
        running.erase(fwd);
        return;
      }
      log_stall("scheduler: request %llu: no KV cells for its prompt; it waits again",
                static_cast<unsigned long long>(q.id));
      requeue(q);
      std::unique_ptr<Req> owned = std::move(*fwd);
      running.erase(fwd);
      waiting.push_front(std::move(owned));
      {
        std::lock_guard<std::mutex> l(mu);
        ++n_waiting_shared;
      }
      return;
    }
    // Nothing to resolve (only finished choices): retire_finished() takes them.
  }

  // A request computing its prompt goes back to waiting: its computed prefix to the cache, its
  // slots freed, its counters as at submit.
  void requeue(Req& q) {
    q.requeued = true;
    Choice& c0 = q.ch[0];
    if (cache && q.r.cache_prompt && q.progress > 0 && c0.slot >= 0) {
      checkpoint(cache->insert(std::span<const int32_t>(q.r.prompt).first(size_t(q.progress)), c0.slot), q.progress,
                 c0.slot);
    }
    for (Choice& c : q.ch) {
      if (c.slot < 0) continue;
      (void)ctx->seq_rm(c.slot, -1, -1);
      free_slots.push_back(c.slot);
      c.slot = -1;
      c.reserved = 0;
    }
    if (cache && q.lock) cache->unlock(q.lock);
    q.lock = nullptr;
    q.phase = Req::Phase::kWaiting;
    q.progress = q.cached = q.prompt_reserved = 0;
    q.chunk = q.chunk_from = 0;
    q.prompt_row = -1;
  }

  // At most one line a second for the conditions above (a stuck state must not flood the log).
  template <typename... Args>
  void log_stall(const char* fmt, Args... args) {
    const int64_t now = now_us();
    if (now - stall_logged_us < 1000000) return;
    stall_logged_us = now;
    LOOM_LOG(kWarn, fmt, args...);
  }

  // The prompt's cached part may have grown since admission (another request's chunks): share it.
  void rematch(Req& q) {
    // (With checkpoints a prefix is resumed only where one was taken: at admission.)
    if (!cache || !q.r.cache_prompt || cache->needs_checkpoints()) return;
    const int len = int(q.r.prompt.size());
    PrefixCache::Match m = cache->match(q.r.prompt, len - 1);
    if (m.len <= q.progress) return;
    const int from = q.progress;
    // Positions [from, m.len) come from the tree's cells (equal to what this request would compute).
    int holder_seq = -1;
    {
      const PrefixCache::Node* n = m.node;
      while (!n->leaf()) n = n->children.front().get();
      holder_seq = n->seq;
    }
    if (!ctx->seq_cp(holder_seq, q.ch[0].slot, from, m.len).is_ok()) return;
    cache->lock(m.node);
    if (q.lock) cache->unlock(q.lock);
    q.lock = m.node;
    const int gain = m.len - from;
    q.progress = m.len;
    q.cached += gain;
    q.prompt_reserved = std::max(0, q.prompt_reserved - gain);
    metrics.prefix_hit_tokens += uint64_t(gain);
  }

  // A request whose next prompt tokens are being computed this step by an earlier request with
  // the same prefix waits for them instead of computing them twice.
  bool waits_for_other(const Req& q, const std::vector<Req*>& earlier) const {
    if (!cache || !q.r.cache_prompt || cache->needs_checkpoints()) return false;
    for (const Req* a : earlier) {
      if (!a->r.cache_prompt) continue;
      if (a->chunk_from <= q.progress && q.progress < a->chunk_from + a->chunk &&
          common_prefix(a->r.prompt, q.r.prompt) > q.progress) {
        return true;
      }
    }
    return false;
  }

  // Encoder-decoder: each admitted prompt runs through the encoder (its output kept for all its
  // choices' sequences); the decoder then starts from the model's start token at position 0.
  void encode_prompts() {
    for (auto it = running.begin(); it != running.end();) {
      Req& q = **it;
      if (q.phase != Req::Phase::kPrefill) {
        ++it;
        continue;
      }
      std::vector<int32_t> seqs;
      for (const Choice& c : q.ch) seqs.push_back(c.slot);
      Batch eb;
      for (size_t i = 0; i < q.r.prompt.size(); ++i) eb.add(q.r.prompt[i], int32_t(i), seqs, true);
      const Status st = ctx->encode(eb);
      if (!st) {
        LOOM_LOG(kError, "scheduler: encode failed: %s", st.message().c_str());
        fail_request(q, st);
        it = running.erase(it);
        continue;
      }
      const int len = int(q.r.prompt.size());
      q.progress = q.computed = len;
      q.prompt_reserved = 0;
      metrics.prompt_tokens += uint64_t(len);
      q.phase = Req::Phase::kRun;
      q.t_prompt_done = now_us();
      for (size_t i = 0; i < q.ch.size(); ++i) {
        Choice& c = q.ch[i];
        c.kv.clear();
        if (c.max_tokens <= 0) {
          finish_choice(q, int(i), FinishReason::kLength);
          continue;
        }
        c.pending = ctx->decoder_start_token();
      }
      ++it;
    }
  }

  void start_generating(Req& q) {
    q.phase = Req::Phase::kRun;
    q.t_prompt_done = now_us();
    q.ch[0].kv = q.r.prompt;
    for (size_t i = 1; i < q.ch.size(); ++i) {
      (void)ctx->seq_cp(q.ch[0].slot, q.ch[i].slot, -1, -1);
      q.ch[i].kv = q.r.prompt;
    }
    auto logits = ctx->logits(q.prompt_row);
    if (!logits) {
      for (size_t i = 0; i < q.ch.size(); ++i) finish_choice(q, int(i), FinishReason::kStop);
      return;
    }
    const std::vector<float> row(logits->begin(), logits->end());  // choices sample from one row
    for (size_t i = 0; i < q.ch.size(); ++i) {
      if (q.ch[i].max_tokens <= 0) {
        finish_choice(q, int(i), FinishReason::kLength);
        continue;
      }
      sample_choice(q, int(i), row);
    }
  }

  void fail_batch(const Status& st, const std::vector<std::pair<Req*, int>>& gen, const std::vector<Req*>& prefill,
                  const std::vector<std::pair<Req*, int>>& refills) {
    LOOM_LOG(kError, "scheduler: decode failed: %s", st.message().c_str());
    std::unordered_set<Req*> bad;
    for (auto [q, ci] : gen) bad.insert(q);
    for (Req* q : prefill) bad.insert(q);
    for (auto [q, ci] : refills) bad.insert(q);
    for (auto it = running.begin(); it != running.end();) {
      Req& q = **it;
      if (!bad.count(&q)) {
        ++it;
        continue;
      }
      fail_request(q, st);
      it = running.erase(it);
    }
  }

  void fail_request(Req& q, const Status& st) {
    for (Choice& c : q.ch) {
      if (c.slot >= 0) {
        (void)ctx->seq_rm(c.slot, -1, -1);
        if (enc_dec) ctx->encoder_forget(c.slot);
        free_slots.push_back(c.slot);
        c.slot = -1;
      }
    }
    if (cache && q.lock) cache->unlock(q.lock);
    q.lock = nullptr;
    ++metrics.requests_error;
    Event e;
    e.kind = Event::Kind::kError;
    e.error = st;
    emit(q, std::move(e));
  }

  // ---- cancellation ----
  void apply_cancels(const std::unordered_set<RequestId>& ids) {
    if (ids.empty()) return;
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (!ids.count((*it)->id)) {
        ++it;
        continue;
      }
      Req& q = **it;
      {
        std::lock_guard<std::mutex> l(mu);
        --n_waiting_shared;
      }
      for (size_t i = 0; i < q.ch.size(); ++i) finish_choice(q, int(i), FinishReason::kCancelled);
      retire(q);
      it = waiting.erase(it);
    }
    for (auto it = running.begin(); it != running.end();) {
      if (!ids.count((*it)->id)) {
        ++it;
        continue;
      }
      cancel_running(**it);
      it = running.erase(it);
    }
  }

  // end_reasoning: every choice's sampler closes its reasoning block at its next token (if it is in
  // one then: a request still reading its prompt acts when it samples its first token).
  void apply_reasoning_ends(const std::unordered_set<RequestId>& ids) {
    if (ids.empty()) return;
    auto mark = [&](auto& list) {
      for (auto& q : list) {
        if (!ids.count(q->id)) continue;
        for (Choice& c : q->ch) c.end_reasoning = true;
      }
    };
    mark(waiting);
    mark(running);
  }

  void cancel_running(Req& q) {
    q.cancelled = true;
    for (size_t i = 0; i < q.ch.size(); ++i) finish_choice(q, int(i), FinishReason::kCancelled);
    q.reason0 = FinishReason::kCancelled;
    retire(q);
  }

  // ---- embeddings ----
  // One batch of embedding inputs, from the jobs that arrived before ticket `before`.
  void embed_step(uint64_t before) {
    if (embed_jobs.empty()) return;
    const int cap_tokens = ctx->n_ubatch();
    const int cap_seqs = ctx->n_seq_max();
    Batch b;
    struct Part { EmbedJob* job; size_t input; int seq; };
    std::vector<Part> parts;
    for (auto& jp : embed_jobs) {
      EmbedJob& j = *jp;
      if (j.ticket > before) break;
      while (j.next + parts.size() < j.r.inputs.size()) {
        // inputs are taken in order; the ones of this job already in the batch are counted
        size_t in = j.next;
        for (const Part& pt : parts) if (pt.job == &j) in = std::max(in, pt.input + 1);
        if (in >= j.r.inputs.size()) break;
        const auto& toks = j.r.inputs[in];
        if (b.size() + int(toks.size()) > cap_tokens || int(parts.size()) >= cap_seqs) break;
        const int seq = int(parts.size());
        for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], int32_t(i), {seq}, true);
        parts.push_back({&j, in, seq});
      }
      if (b.size() >= cap_tokens || int(parts.size()) >= cap_seqs) break;
    }
    if (parts.empty()) return;
    const Status st = ctx->causal() ? ctx->decode(b) : ctx->encode(b);
    for (const Part& pt : parts) {
      if (!pt.job->cb) continue;
      if (!st) continue;
      auto e = ctx->embeddings_seq(pt.seq);
      if (!e) continue;
      pt.job->result.embeddings.resize(pt.job->r.inputs.size());
      pt.job->result.embeddings[pt.input].assign(e->begin(), e->end());
      pt.job->result.prompt_tokens += int(pt.job->r.inputs[pt.input].size());
    }
    ctx->kv_clear();
    for (const Part& pt : parts) pt.job->next = std::max(pt.job->next, pt.input + 1);
    for (auto it = embed_jobs.begin(); it != embed_jobs.end();) {
      EmbedJob& j = **it;
      bool touched = false;
      for (const Part& pt : parts) touched |= pt.job == &j;
      if (!st && touched) {
        ++metrics.requests_error;
        if (j.cb) j.cb(Status(st.code(), "embedding failed: " + st.message()));
        it = embed_jobs.erase(it);
      } else if (j.next >= j.r.inputs.size()) {
        ++metrics.embed_requests;
        metrics.prompt_tokens += uint64_t(j.result.prompt_tokens);
        if (j.cb) j.cb(std::move(j.result));
        it = embed_jobs.erase(it);
      } else {
        ++it;
      }
    }
  }

  // ---- the loop ----
  void publish() {
    std::lock_guard<std::mutex> l(stats_mu);
    int n_running = 0;
    for (const auto& q : running) n_running += !q->ch.empty() && q->ch[0].slot >= 0;  // retire() frees slots first
    snapshot.running = n_running;
    snapshot.slots = p.n_slots;
    snapshot.slots_busy = p.n_slots - int(free_slots.size());
    snapshot.kv_cells = n_ctx;
    snapshot.kv_used = has_cells() ? ctx->kv().used() : ctx->memory().used();
    snapshot.cache_checkpoints = cache ? cache->n_checkpoints() : 0;
    snapshot.cache_checkpoint_bytes = cache ? cache->checkpoint_bytes() : 0;
    snapshot.cached_tokens = cache ? cache->n_cached_tokens() : 0;
    snapshot.cache_evictable = cache ? cache->evictable() : 0;
    metrics.disk_writes = disk.writes();
    metrics.disk_errors = std::max(metrics.disk_errors, disk.errors());
    if (!ctx->expert_counts().empty()) {
      const Context::ExpertUsage u = ctx->expert_usage();
      metrics.expert_choices = u.choices;
      metrics.expert_busiest_share = u.busiest_share;
    }
    snapshot.metrics = metrics;
    // Idle slots keep showing the last request that ran in them.
    slot_snapshot.resize(size_t(p.n_slots));
    for (int i = 0; i < p.n_slots; ++i) {
      SlotState& s = slot_snapshot[size_t(i)];
      s.id = i;
      s.processing = false;
      s.n_cached = size_t(i) < slot_last.size() ? int(slot_last[size_t(i)].size()) : 0;
    }
    for (const auto& q : running) {
      for (const Choice& c : q->ch) {
        if (c.slot < 0 || c.slot >= p.n_slots) continue;
        SlotState& s = slot_snapshot[size_t(c.slot)];
        s.processing = !c.done;
        s.request = q->id;
        s.n_prompt = int(q->r.prompt.size());
        s.n_decoded = int(c.generated.size());
        s.n_remain = c.max_tokens - int(c.generated.size());
      }
    }
    std::lock_guard<std::mutex> l2(mu);
    snapshot.waiting = n_waiting_shared;
    snapshot.metrics.requests_rejected = rejected;
  }

  void run() {
    for (;;) {
      std::unordered_set<RequestId> cancel_now, end_now;
      bool stop_now = false;
      {
        std::unique_lock<std::mutex> l(mu);
        auto idle = [&] {
          return running.empty() && waiting.empty() && embed_jobs.empty() && inbox.empty() && embed_inbox.empty() &&
                 cancels.empty() && task_inbox.empty() && tasks.empty() && !stopping;
        };
        if (idle()) {
          l.unlock();
          publish();
          l.lock();
          cv.wait(l, [&] { return !idle(); });
        }
        while (!inbox.empty()) {
          waiting.push_back(std::move(inbox.front()));
          inbox.pop_front();
        }
        while (!embed_inbox.empty()) {
          embed_jobs.push_back(std::move(embed_inbox.front()));
          embed_inbox.pop_front();
        }
        while (!task_inbox.empty()) {
          tasks.push_back(std::move(task_inbox.front()));
          task_inbox.pop_front();
        }
        cancel_now.swap(cancels);
        end_now.swap(reasoning_ends);
        if (stopping) stop_now = now_us() >= stop_deadline_us || (running.empty() && embed_jobs.empty());
      }
      apply_cancels(cancel_now);
      apply_reasoning_ends(end_now);
      if (stopping_flag()) {
        // Waiting requests never start once shutting down.
        std::unordered_set<RequestId> all;
        for (auto& q : waiting) all.insert(q->id);
        apply_cancels(all);
      }
      if (stop_now) {
        while (!running.empty()) {
          cancel_running(*running.front());
          running.pop_front();
        }
        for (auto& j : embed_jobs) {
          if (j->cb) j->cb(unavailable("the server is shutting down"));
        }
        embed_jobs.clear();
        for (auto& t : tasks) t->done.set_value(unavailable("the scheduler is shutting down"));
        tasks.clear();
        if (cache && disk.active()) cache->persist_all();
        disk.flush();
        publish();
        return;
      }
      disk.poll();
      // An exclusive task runs once everything that arrived before it is done; what arrived after
      // it waits for it.
      const uint64_t before = tasks.empty() ? UINT64_MAX : tasks.front()->ticket;
      if (!tasks.empty() && running.empty() && !work_before(before)) {
        run_tasks();
        publish();
        continue;
      }
      if (p.context.embeddings) {
        embed_step(before);
      } else {
        admit(before);
        if (running.empty() && !waiting.empty() && waiting.front()->ticket < before) {
          // Nothing runs, so nothing will free cells: the head can never be admitted (only a
          // reservation bug leads here). Refuse it rather than wait forever.
          std::unique_ptr<Req> q = std::move(waiting.front());
          waiting.pop_front();
          {
            std::lock_guard<std::mutex> l(mu);
            --n_waiting_shared;
          }
          fail_request(*q, internal_error("the request cannot be given enough KV cells (n_ctx = " +
                                          std::to_string(n_ctx) + ")"));
        }
        if (!running.empty() && !step()) unstick();
        retire_finished();
      }
      publish();
    }
  }

  // Whether a request or embedding that arrived before ticket `t` still waits (both queues are in
  // arrival order).
  bool work_before(uint64_t t) const {
    return (!waiting.empty() && waiting.front()->ticket < t) || (!embed_jobs.empty() && embed_jobs.front()->ticket < t);
  }

  // Exclusive tasks, run when nothing else does (nothing runs and nothing that came before the
  // task waits). A task's exception becomes its status.
  void run_tasks() {
    while (!tasks.empty() && !work_before(tasks.front()->ticket)) {
      std::unique_ptr<Task> t = std::move(tasks.front());
      tasks.pop_front();
      Status st;
      try {
        st = t->fn(*ctx, cache.get());
      } catch (const std::exception& e) {
        st = internal_error(std::string("exclusive task failed: ") + e.what());
      }
      if (cache) {
        Status inv = cache->check_invariants();
        if (!inv) {
          LOOM_LOG(kWarn, "prefix cache inconsistent after an exclusive task (%s): cleared", inv.message().c_str());
          cache->clear_unlocked();
        }
      }
      t->done.set_value(std::move(st));
    }
  }

  // Queues an item for the loop unless shutting down or max_queue items wait already (*waiting
  // when given, which counts admitted-but-waiting requests too; else the inbox itself).
  template <typename T>
  Status enqueue(std::deque<std::unique_ptr<T>>& q, std::unique_ptr<T> item, int* waiting) {
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

  bool stopping_flag() const {
    std::lock_guard<std::mutex> l(mu);
    return stopping;
  }

  // The cache dir's writer: an evicted prefix's cells as a sequence state file.
  void persist_prefix(std::span<const int32_t> tokens, int seq) {
    if (!disk.active() || int(tokens.size()) < p.cache_dir_min_tokens) return;
    auto data = ctx->seq_state_save(seq, tokens);
    if (!data) {
      ++metrics.disk_errors;
      return;
    }
    disk.put(std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(*data));
  }
};

// ---------------------------------------------------------------------------------------------

Expected<std::unique_ptr<Scheduler>> Scheduler::create(std::shared_ptr<const Model> model, SchedulerParams params,
                                                       const std::function<Status(Context&)>& setup) {
  if (!model) return invalid_argument("no model");
  if (params.n_slots < 1 || params.n_slots > kMaxSeqs / 2) {
    return invalid_argument("slots must be between 1 and " + std::to_string(kMaxSeqs / 2));
  }
  if (params.max_queue < 0) return invalid_argument("max_queue must be >= 0");
  if (params.ctx_checkpoints < 0 || params.cache_ram_mib < 0) {
    return invalid_argument("ctx_checkpoints and cache_ram_mib must not be negative");
  }
  if (model->hparams().arch == Arch::kT5) {
    // The prompt goes through the encoder (no shared prefixes: the encoder sees all of it at once),
    // the decoder's history is its own (no context shift: it would re-decode without the encoder).
    params.prefix_cache = false;
    params.context_shift = false;
    params.cache_dir.clear();
  }
  if (params.draft_model) {
    LOOM_RETURN_IF_ERROR(check_same_vocab(*params.draft_model, *model));
    const ModelHparams& dh = params.draft_model->hparams();
    if (dh.is_recurrent() || dh.arch == Arch::kT5) {
      return invalid_argument("the draft model must be a decoder with a KV cache (not " + dh.arch_name + ")");
    }
    if (params.context.embeddings) return invalid_argument("a draft model needs a generating context, not embeddings");
    if (params.draft_max < 1 || params.draft_max > kDraftRowsPerStep) {
      return invalid_argument("draft_max must be between 1 and " + std::to_string(kDraftRowsPerStep));
    }
    if (params.draft_min < 0 || params.draft_min > params.draft_max) return invalid_argument("draft_min must be between 0 and draft_max");
    if (!(params.draft_p_min >= 0.0f && params.draft_p_min <= 1.0f)) return invalid_argument("draft_p_min must be in [0, 1]");
  }
  std::unique_ptr<Scheduler> s(new Scheduler());
  s->model_ = model;
  s->params_ = params;
  auto impl = std::make_unique<Impl>();
  impl->self = s.get();
  impl->model = model;
  impl->vocab = &model->vocab();
  impl->p = params;
  impl->enc_dec = model->hparams().arch == Arch::kT5;
  ContextParams cp = params.context;
  if (cp.n_ctx <= 0) cp.n_ctx = int(std::min<int64_t>(model->hparams().n_ctx_train, 4096));
  const bool embed = cp.embeddings;
  if (embed) {
    cp.n_seq_max = kMaxSeqs;
  } else {
    const int cache_seqs = params.prefix_cache
                               ? (params.cache_seqs > 0 ? std::min(params.cache_seqs, kMaxSeqs - params.n_slots)
                                                        : kMaxSeqs - params.n_slots)
                               : 0;
    cp.n_seq_max = params.n_slots + cache_seqs;
  }
  cp.kv_unified = true;  // one request may use every cell
  // Windows and recurrent states are held by the slots alone (the prefix cache keeps its own as
  // checkpoints): the window cache is sized for the slots, not for the cache's sequence ids, and
  // the recurrent part has a state cell per slot.
  cp.n_seq_swa = params.n_slots;
  cp.n_seq_states = params.n_slots;
  if (cp.n_ubatch <= 0) cp.n_ubatch = 512;
  const int step = params.step_tokens > 0 ? params.step_tokens : cp.n_ubatch;
  // A step never decodes more than the step budget (plus one token per slot), and asks for at
  // most one output per slot: the logits buffer is slots x n_vocab, not n_batch x n_vocab.
  cp.n_batch = std::max(step, params.n_slots);
  // One output per slot (a generating choice or a prompt's last token), plus the rows of lookup
  // drafts verified in a step (at most kDraftRowsPerStep, shared by the choices).
  if (!embed) cp.n_outputs_max = params.n_slots + kDraftRowsPerStep;
  auto ctx = Context::create(model, cp);
  if (!ctx) return ctx.status();
  impl->ctx = std::move(*ctx);
  if (setup) LOOM_RETURN_IF_ERROR(setup(*impl->ctx));
  impl->n_ctx = impl->ctx->n_ctx();
  impl->step_tokens = std::min(step, impl->ctx->n_batch());
  s->n_ctx_ = impl->n_ctx;
  for (int i = params.n_slots - 1; i >= 0; --i) impl->free_slots.push_back(i);
  impl->slot_last.resize(size_t(params.n_slots));
  if (!embed && params.prefix_cache && cp.n_seq_max > params.n_slots) {
    PrefixCheckpointLimits lim;
    lim.per_path = params.ctx_checkpoints;
    lim.max_bytes = int64_t(params.cache_ram_mib) << 20;
    impl->cache = std::make_unique<PrefixCache>(*impl->ctx, params.n_slots, cp.n_seq_max - params.n_slots, lim);
    if (!params.cache_dir.empty() && impl->cache->needs_checkpoints()) {
      // Files of whole sequences cannot stand for checkpoints of recurrent states or windows yet.
      LOOM_LOG(kWarn, "scheduler: --cache-dir is not used for %s (its memory keeps checkpoints)",
               model->hparams().arch_name.c_str());
    } else if (!params.cache_dir.empty()) {
      LOOM_RETURN_IF_ERROR(impl->disk.open(params.cache_dir, *impl->ctx, params.cache_dir_max_bytes,
                                           params.cache_dir_min_tokens));
      Impl* raw = impl.get();
      impl->cache->set_evict_hook([raw](std::span<const int32_t> t, int seq) { raw->persist_prefix(t, seq); });
    }
  }
  Impl* raw = impl.get();
  s->impl_ = std::move(impl);
  raw->publish();
  raw->loop = std::thread([raw] { raw->run(); });
  return s;
}

Scheduler::~Scheduler() {
  if (impl_) shutdown(std::chrono::milliseconds(0));
}

Expected<RequestId> Scheduler::submit(GenerateRequest req, EventCallback on_event) {
  Impl& m = *impl_;
  if (params_.context.embeddings) return unsupported("this server runs an embedding model: use the embeddings endpoints");
  const Vocab& vocab = model_->vocab();
  const int len = int(req.prompt.size());
  if (len == 0) return invalid_argument("the prompt is empty");
  LOOM_RETURN_IF_ERROR(vocab.check_ids(req.prompt));
  if (req.n < 1 || req.n > params_.n_slots) {
    return invalid_argument("n must be between 1 and " + std::to_string(params_.n_slots) + " (the server's slots)");
  }
  if (req.slot >= params_.n_slots || req.slot < -1) {
    return invalid_argument("id_slot must be -1 or a slot from 0 to " + std::to_string(params_.n_slots - 1));
  }
  if (req.slot >= 0 && req.n != 1) return invalid_argument("id_slot needs n = 1 (one slot)");
  if (len + req.n > n_ctx_) {
    return invalid_argument("the prompt has " + std::to_string(len) + " tokens, which does not fit the context of n_ctx = " +
                            std::to_string(n_ctx_) + " tokens" + (req.n > 1 ? " with n choices" : ""));
  }
  if (req.top_logprobs < 0 || req.top_logprobs > kMaxTopLogprobs) {
    return invalid_argument("top_logprobs must be between 0 and " + std::to_string(kMaxTopLogprobs));
  }
  for (const auto& [tok, bias] : req.sampling.logit_bias) {
    if (!vocab.is_valid(tok)) return invalid_argument("logit_bias: token " + std::to_string(tok) + " is not in the vocabulary");
    (void)bias;
  }
  auto q = std::make_unique<Req>();
  q->id = m.next_id.fetch_add(1);
  q->t_submit = now_us();
  // Generation budget per choice: capped by what the context can hold beside the prompt (an
  // encoder-decoder's prompt holds no decoder cells; its decoder starts with one token).
  const bool enc_dec = model_->hparams().arch == Arch::kT5;
  if (enc_dec && len > m.ctx->n_ubatch()) {
    return invalid_argument("the prompt has " + std::to_string(len) + " tokens, more than the encoder's batch of " +
                            std::to_string(m.ctx->n_ubatch()) + " (raise -ub)");
  }
  const int cap = enc_dec ? (n_ctx_ - 1) / req.n : (n_ctx_ - len) / req.n;
  int max_tokens;
  if (req.max_tokens >= 0) {
    max_tokens = params_.context_shift ? req.max_tokens : std::min(req.max_tokens, cap);
    q->reserve_per_choice = std::min(req.max_tokens, cap);
    q->bounded = true;
  } else {
    max_tokens = params_.context_shift ? n_ctx_ : cap;
    q->reserve_per_choice = std::clamp(n_ctx_ / params_.n_slots - len, std::min(kMinReserve, cap), cap);
    q->bounded = false;
  }
  req.sampling.n_ctx = n_ctx_;
  for (int i = 0; i < req.n; ++i) {
    SamplerParams sp = req.sampling;
    sp.seed = req.sampling.seed + uint64_t(i);
    auto smp = Sampler::create(sp, &vocab);
    if (!smp) return Status(smp.status().code(), "sampling: " + smp.status().message());
    Choice c;
    c.sampler.emplace(std::move(*smp));
    for (int32_t t : req.prompt) c.sampler->accept(t, /*accept_grammar=*/false);
    StreamDetokenizerOptions dopt;
    dopt.continuation = true;
    dopt.unparse_special = req.unparse_special;
    c.detok = std::make_unique<StreamDetokenizer>(vocab, dopt);
    c.stop = StopMatcher(req.stop);
    c.max_tokens = max_tokens;
    q->ch.push_back(std::move(c));
  }
  q->r = std::move(req);
  q->cb = std::move(on_event);
  const RequestId id = q->id;
  {
    std::lock_guard<std::mutex> l(m.mu);
    m.live[id] = q->r.sampling.reasoning_control;
  }
  if (Status st = m.enqueue(m.inbox, std::move(q), &m.n_waiting_shared); !st) {
    std::lock_guard<std::mutex> l(m.mu);
    m.live.erase(id);
    return st;
  }
  return id;
}

Expected<RequestId> Scheduler::submit_embed(EmbedRequest req, EmbedCallback on_done) {
  Impl& m = *impl_;
  if (!params_.context.embeddings) return unsupported("embeddings need a server started with --embedding");
  if (req.inputs.empty()) return invalid_argument("input is empty");
  const Vocab& vocab = model_->vocab();
  for (size_t i = 0; i < req.inputs.size(); ++i) {
    const auto& in = req.inputs[i];
    if (in.empty()) return invalid_argument("input[" + std::to_string(i) + "] is empty");
    LOOM_RETURN_IF_ERROR(vocab.check_ids(in));
    if (int(in.size()) > m.ctx->n_ubatch()) {
      return invalid_argument("input[" + std::to_string(i) + "] has " + std::to_string(in.size()) +
                              " tokens, more than the batch size of " + std::to_string(m.ctx->n_ubatch()) +
                              " (raise -ub; n_ctx = " + std::to_string(n_ctx_) + ")");
    }
  }
  auto j = std::make_unique<EmbedJob>();
  j->id = m.next_id.fetch_add(1);
  j->r = std::move(req);
  j->cb = std::move(on_done);
  const RequestId id = j->id;
  LOOM_RETURN_IF_ERROR(m.enqueue(m.embed_inbox, std::move(j), nullptr));
  return id;
}

Status Scheduler::end_reasoning(RequestId id) {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    auto it = impl_->live.find(id);
    if (it == impl_->live.end()) return not_found("no active completion for this id");
    if (!it->second) return unsupported("reasoning control not enabled for this completion");
    impl_->reasoning_ends.insert(id);
  }
  impl_->cv.notify_one();
  return Status::ok();
}

void Scheduler::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->cancels.insert(id);
  }
  impl_->cv.notify_one();
}

Status Scheduler::run_exclusive(std::function<Status(Context&, PrefixCache*)> fn) {
  auto t = std::make_unique<Impl::Task>();
  t->fn = std::move(fn);
  std::future<Status> done = t->done.get_future();
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    if (impl_->stopping) return unavailable("the scheduler is shutting down");
    t->ticket = ++impl_->next_ticket;
    impl_->task_inbox.push_back(std::move(t));
  }
  impl_->cv.notify_one();
  return done.get();
}

bool Scheduler::checkpoints_prefixes() const { return impl_->cache && impl_->cache->needs_checkpoints(); }

std::vector<SlotState> Scheduler::slots() const {
  std::lock_guard<std::mutex> l(impl_->stats_mu);
  return impl_->slot_snapshot;
}

std::vector<int32_t> Scheduler::slot_tokens(int slot) const {
  std::lock_guard<std::mutex> l(impl_->stats_mu);
  if (slot < 0 || size_t(slot) >= impl_->slot_last.size()) return {};
  return impl_->slot_last[size_t(slot)];
}

void Scheduler::set_slot_tokens(int slot, std::vector<int32_t> tokens) {
  std::lock_guard<std::mutex> l(impl_->stats_mu);
  if (slot < 0 || size_t(slot) >= impl_->slot_last.size()) return;
  impl_->slot_last[size_t(slot)] = std::move(tokens);
  if (size_t(slot) < impl_->slot_snapshot.size()) impl_->slot_snapshot[size_t(slot)].n_cached = int(impl_->slot_last[size_t(slot)].size());
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> l(impl_->stats_mu);
  return impl_->snapshot;
}

void Scheduler::shutdown(std::chrono::milliseconds grace) {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    if (!impl_->stopping) {
      impl_->stopping = true;
      impl_->stop_deadline_us = now_us() + int64_t(grace.count()) * 1000;
    } else {
      impl_->stop_deadline_us = std::min(impl_->stop_deadline_us, now_us() + int64_t(grace.count()) * 1000);
    }
  }
  impl_->cv.notify_all();
  if (impl_->loop.joinable()) impl_->loop.join();
}

}  // namespace loom::serve
