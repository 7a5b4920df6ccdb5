// Admission: waiting requests enter slots in arrival order when their prompt and reserved
// generation fit in the KV cells (after the prefix cache's share); the cell accounting that keeps
// every step's rows within the cache; and unsticking, when a step could do nothing.

#include "serve/scheduler/impl.h"

#include <algorithm>

namespace loom::serve {

// Admits waiting requests in arrival order, those that came before ticket `before` only (an
// exclusive task waits for them; the ones after it wait for the task).
void Scheduler::Impl::admit(uint64_t before) {
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
    ctx->count_reused(m.len);  // loom_perf_data::n_reused
    running.push_back(std::move(owned));
    {
      std::lock_guard<std::mutex> l(mu);
      --n_waiting_shared;
    }
  }
}

// Nothing runs, so nothing will free cells: the head can never be admitted (only a reservation bug
// leads here). Refuse it rather than wait forever.
void Scheduler::Impl::refuse_unadmittable(uint64_t before) {
  if (!running.empty() || waiting.empty() || waiting.front()->ticket >= before) return;
  std::unique_ptr<Req> q = std::move(waiting.front());
  waiting.pop_front();
  {
    std::lock_guard<std::mutex> l(mu);
    --n_waiting_shared;
  }
  fail_request(*q, internal_error("the request cannot be given enough KV cells (n_ctx = " + std::to_string(n_ctx) + ")"));
}

// After a step that could do nothing (no cell for any row: a reservation went wrong): choices
// re-decoding after a context shift end with what they generated (kLength); else the request
// admitted last, still computing its prompt, goes back to the head of the queue (its computed
// prefix stays in the cache), and fails if that happened once already. The loop never spins.
void Scheduler::Impl::unstick() {
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
    log_stall("scheduler: request %llu: no KV cells for its prompt; it waits again", static_cast<unsigned long long>(q.id));
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
void Scheduler::Impl::requeue(Req& q) {
  q.requeued = true;
  Choice& c0 = q.ch[0];
  if (cache && q.r.cache_prompt && q.progress > 0 && c0.slot >= 0) {
    checkpoint(cache->insert(std::span<const int32_t>(q.r.prompt).first(size_t(q.progress)), c0.slot), q.progress, c0.slot);
  }
  for (Choice& c : q.ch) {
    if (c.slot < 0) continue;
    release_slot(c);
    c.reserved = 0;
  }
  if (cache && q.lock) cache->unlock(q.lock);
  q.lock = nullptr;
  q.phase = Req::Phase::kWaiting;
  q.progress = q.cached = q.prompt_reserved = 0;
  q.chunk = q.chunk_from = 0;
  q.prompt_row = -1;
}

int Scheduler::Impl::reserved_total() const {
  int t = 0;
  for (const auto& q : running) {
    t += q->prompt_reserved;
    for (const Choice& c : q->ch) t += c.done ? 0 : c.reserved;
  }
  return t;
}

bool Scheduler::Impl::ensure_free(int n) {
  if (!has_cells()) return true;
  const int free_now = n_ctx - ctx->kv().used();
  if (free_now >= n) return true;
  if (cache) cache->evict(n - free_now);
  return n_ctx - ctx->kv().used() >= n;
}

// Cells for n more rows of this step's batch, evicting unused cached prefixes as needed: every
// row is claimed before it is added, so a batch never meets a full cache at decode.
bool Scheduler::Impl::claim(int n) {
  if (n <= 0) return true;
  if (!ensure_free(step_cells + n)) return false;
  step_cells += n;
  return true;
}

// The most rows (up to n) that claim() can give now.
int Scheduler::Impl::claim_up_to(int n) {
  if (n <= 0 || claim(n)) return std::max(n, 0);
  const int can = std::min(n, n_ctx - kv_used() + (cache ? cache->evictable() : 0) - step_cells);
  for (int k = can; k > 0; --k) {
    if (claim(k)) return k;
  }
  return 0;
}

}  // namespace loom::serve
