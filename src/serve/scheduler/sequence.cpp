// One request's choices from their first sampled token to the end: sampling (with logprobs),
// stop words, EOG, grammar and length limits, the events sent to the caller, cancellation, and
// retiring a request (its cells to the prefix cache, its slots freed, kDone with usage and timings).

#include "serve/scheduler/impl.h"

#include <algorithm>
#include <cmath>

namespace loom::serve {

void Scheduler::Impl::start_generating(Req& q) {
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

void Scheduler::Impl::sample_choice(Req& q, int ci, std::span<const float> logits) {
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

void Scheduler::Impl::fill_logprobs(const Req& q, std::span<const float> logits, int32_t tok, Event* e) const {
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

void Scheduler::Impl::finish_choice(Req& q, int ci, FinishReason reason, std::string stop_word) {
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

// Requests whose choices are all done leave.
void Scheduler::Impl::retire_finished() {
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

// Gives the request's cells to the prefix cache, frees its slots, sends kDone.
void Scheduler::Impl::retire(Req& q) {
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
      release_slot(c);
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
  e.timings.prompt_ms = q.t_admit ? sched::ms_between(q.t_admit, q.t_prompt_done ? q.t_prompt_done : now) : 0;
  e.timings.predicted_n = q.n_generated;
  e.timings.predicted_ms = q.t_prompt_done ? sched::ms_between(q.t_prompt_done, now) : 0;
  e.timings.queue_ms = sched::ms_between(q.t_submit, q.t_admit ? q.t_admit : now);
  e.timings.ttft_ms = q.t_first ? sched::ms_between(q.t_submit, q.t_first) : 0;
  metrics.e2e.observe(double(now - q.t_submit) / 1e6);
  metrics.prompt_seconds += e.timings.prompt_ms / 1e3;
  metrics.predicted_seconds += e.timings.predicted_ms / 1e3;
  metrics.n_tokens_max = std::max<uint64_t>(metrics.n_tokens_max, uint64_t(q.r.prompt.size()) + uint64_t(q.n_generated));
  count_finish(q.reason0);
  publish();  // so that stats() seen after kDone already counts the slot as free
  emit(q, std::move(e));
}

void Scheduler::Impl::release_slot(Choice& c) {
  (void)ctx->seq_rm(c.slot, -1, -1);
  if (enc_dec) ctx->encoder_forget(c.slot);
  free_slots.push_back(c.slot);
  c.slot = -1;
}

void Scheduler::Impl::fail_request(Req& q, const Status& st) {
  for (Choice& c : q.ch) {
    if (c.slot >= 0) release_slot(c);
  }
  if (cache && q.lock) cache->unlock(q.lock);
  q.lock = nullptr;
  ++metrics.requests_error;
  Event e;
  e.kind = Event::Kind::kError;
  e.error = st;
  emit(q, std::move(e));
}

void Scheduler::Impl::apply_cancels(const std::unordered_set<RequestId>& ids) {
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
void Scheduler::Impl::apply_reasoning_ends(const std::unordered_set<RequestId>& ids) {
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

void Scheduler::Impl::cancel_running(Req& q) {
  q.cancelled = true;
  for (size_t i = 0; i < q.ch.size(); ++i) finish_choice(q, int(i), FinishReason::kCancelled);
  q.reason0 = FinishReason::kCancelled;
  retire(q);
}

void Scheduler::Impl::emit(Req& q, Event e) {
  e.id = q.id;
  if (e.kind == Event::Kind::kDone || e.kind == Event::Kind::kError) {
    std::lock_guard<std::mutex> l(mu);
    live.erase(q.id);
  }
  if (q.cb) q.cb(e);
}

void Scheduler::Impl::count_finish(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: ++metrics.requests_stop; break;
    case FinishReason::kLength: ++metrics.requests_length; break;
    case FinishReason::kCancelled: ++metrics.requests_cancelled; break;
  }
}

}  // namespace loom::serve
