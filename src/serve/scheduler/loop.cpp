// The scheduler's loop thread: each iteration takes new work from the submitters, applies
// cancellations, then runs exclusive tasks, an embedding batch, or admission and one generation
// step, and publishes the stats that stats() and slots() read.

#include "serve/scheduler/impl.h"

#include <algorithm>

namespace loom::serve {

void Scheduler::Impl::run() {
  for (;;) {
    sched::Intake in = take_inbox();
    apply_cancels(in.cancels);
    apply_reasoning_ends(in.reasoning_ends);
    if (stopping_flag()) {
      // Waiting requests never start once shutting down.
      std::unordered_set<RequestId> all;
      for (auto& q : waiting) all.insert(q->id);
      apply_cancels(all);
    }
    if (in.stop_now) {
      shut_down_now();
      return;
    }
    disk.poll();
    // An exclusive task runs once everything that arrived before it is done; what arrived after
    // it waits for it.
    const uint64_t before = tasks.empty() ? UINT64_MAX : tasks.front()->ticket;
    if (!tasks.empty() && running.empty() && !work_before(before)) {
      run_tasks();
    } else if (p.context.embeddings) {
      embed_step(before);
    } else {
      generate_step(before);
    }
    publish();
  }
}

// Moves what submitters queued into the loop's own queues, waiting (after a publish) while there is
// nothing at all to do.
sched::Intake Scheduler::Impl::take_inbox() {
  sched::Intake in;
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
  in.cancels.swap(cancels);
  in.reasoning_ends.swap(reasoning_ends);
  if (stopping) in.stop_now = now_us() >= stop_deadline_us || (running.empty() && embed_jobs.empty());
  return in;
}

// The end of shutdown: what still runs is cancelled, embeddings and tasks refused, idle prefixes
// written to the cache dir.
void Scheduler::Impl::shut_down_now() {
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
}

// Generation: admission of what arrived before ticket `before`, one step, finished requests out.
void Scheduler::Impl::generate_step(uint64_t before) {
  admit(before);
  refuse_unadmittable(before);
  if (!running.empty() && !step()) unstick();
  retire_finished();
}

void Scheduler::Impl::publish() {
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

}  // namespace loom::serve
