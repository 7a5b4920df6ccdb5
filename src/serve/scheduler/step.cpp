// One step: a batch of rows under the step budget, decoded at once, and its outputs handed out.
// Rows come in this order: the next token of every generating choice (and its draft), then, in
// admission order, refills after a context shift and prompt chunks. Every row's KV cell is claimed
// before it is added, so a batch never meets a full cache at decode.

#include "serve/scheduler/impl.h"

#include <algorithm>

namespace loom::serve {

// One batch: returns false when it could do nothing at all (no row decoded, no choice ended),
// which the loop must resolve (unstick) instead of trying the same step again.
bool Scheduler::Impl::step() {
  ++metrics.steps;
  metrics.busy_slots_sum += running.size();
  step_cells = 0;
  const uint64_t finished_before = choices_finished;
  if (enc_dec) encode_prompts();
  StepBatch s;
  add_generating_rows(s);
  add_prompt_rows(s);
  Batch& b = s.b;
  if (b.size() == 0) return choices_finished != finished_before;
  if (has_cells() && !ensure_free(b.size())) {
    // Every row was claimed above: a bookkeeping error. Nothing is decoded; unstick() resolves it.
    log_stall("scheduler: %d cells needed, %d free after eviction (claimed %d)", b.size(), n_ctx - kv_used(), step_cells);
    return false;
  }
  LOOM_LOG(kDebug, "step: batch %d (gen %zu, prefill %zu), used %d, evictable %d, reserved %d", b.size(), s.gen.size(),
           s.prefill.size(), kv_used(), cache ? cache->evictable() : 0, reserved_total());
  const Status st = ctx->decode(b);
  step_cells = 0;
  if (!st) {
    fail_batch(st, s);
    return true;
  }
  take_generated(s);
  take_refills(s);
  take_prompt_chunks(s);
  return true;
}

// The next token of every generating choice (and its lookup draft).
void Scheduler::Impl::add_generating_rows(StepBatch& s) {
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
      c.row = s.b.size();
      s.b.add(c.pending, int32_t(c.kv.size()), {c.slot}, true);
      s.gen.emplace_back(&q, ci);
      add_draft(q, c, &s.b);
    }
  }
}

// Prompt chunks and refills under the step budget, in admission order.
void Scheduler::Impl::add_prompt_rows(StepBatch& s) {
  int budget = std::max(0, step_tokens - s.b.size());
  for (auto& qp : running) {
    Req& q = *qp;
    q.chunk = 0;
    q.prompt_row = -1;
    if (q.phase == Req::Phase::kRun) {
      add_refill_rows(q, &budget, s);
    } else if (q.phase == Req::Phase::kPrefill && budget > 0) {
      add_prompt_chunk(q, &budget, s);
    }
  }
}

// The tokens each choice of q re-decodes after a context shift, within *budget.
void Scheduler::Impl::add_refill_rows(Req& q, int* budget, StepBatch& s) {
  for (int ci = 0; ci < int(q.ch.size()) && *budget > 0; ++ci) {
    Choice& c = q.ch[size_t(ci)];
    if (c.done || c.refill.empty()) continue;
    const int n = claim_up_to(std::min<int>(*budget, int(c.refill.size() - c.refill_done)));
    if (n <= 0) continue;
    c.reserved = std::max(0, c.reserved - n);
    for (int i = 0; i < n; ++i) {
      const size_t k = c.refill_done + size_t(i);
      const bool last = k + 1 == c.refill.size();
      if (last) c.row = s.b.size();
      s.b.add(c.refill[k], int32_t(c.kv.size() + size_t(i)), {c.slot}, last);
    }
    c.chunk = n;
    *budget -= n;
    s.refills.emplace_back(&q, ci);
  }
}

// The next chunk of q's prompt, within *budget, into choice 0's sequence.
void Scheduler::Impl::add_prompt_chunk(Req& q, int* budget, StepBatch& s) {
  const int len = int(q.r.prompt.size());
  rematch(q);
  if (waits_for_other(q, s.prefill)) return;
  // A checkpoint position inside the prompt ends a chunk there (prompt_checkpoints, and a few
  // tokens before the end).
  int upto = len;
  for (int cp : q.r.prompt_checkpoints) {
    if (cp > q.progress && cp < upto) upto = cp;
  }
  const int tail = tail_checkpoint(q);
  if (tail > q.progress && tail < upto) upto = tail;
  const int n = claim_up_to(std::min(*budget, upto - q.progress));
  if (n <= 0) return;
  for (int i = 0; i < n; ++i) {
    const int pos = q.progress + i;
    const bool last = pos + 1 == len;
    if (last) q.prompt_row = s.b.size();
    s.b.add(q.r.prompt[size_t(pos)], pos, {q.ch[0].slot}, last);
  }
  q.chunk_from = q.progress;
  q.chunk = n;
  *budget -= n;
  s.prefill.push_back(&q);
}

// Generating choices after the decode: the pending token joins the sequence, the next is sampled
// from its row, and draft tokens are verified row by row.
void Scheduler::Impl::take_generated(const StepBatch& s) {
  for (auto [qp, ci] : s.gen) {
    Choice& c = qp->ch[size_t(ci)];
    c.kv.push_back(c.pending);
    c.pending = -1;
    rolling_checkpoint(*qp, c);
  }
  for (auto [qp, ci] : s.gen) {
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
}

// Refilling choices after the decode: a finished refill samples its next token.
void Scheduler::Impl::take_refills(const StepBatch& s) {
  for (auto [qp, ci] : s.refills) {
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
}

// Prompt chunks after the decode: progress, the prefix cache, and generation once a prompt is done.
void Scheduler::Impl::take_prompt_chunks(const StepBatch& s) {
  for (Req* q : s.prefill) {
    q->progress += q->chunk;
    q->computed += q->chunk;
    q->prompt_reserved = std::max(0, q->prompt_reserved - q->chunk);
    metrics.prompt_tokens += uint64_t(q->chunk);
    if (cache && q->r.cache_prompt) {
      // The prompt so far joins the tree at once, so requests arriving meanwhile share it.
      PrefixCache::Node* n = cache->insert(std::span<const int32_t>(q->r.prompt).first(size_t(q->progress)), q->ch[0].slot);
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
}

// A cell for one more token of choice ci, claimed for this step: from its reservation, else
// unreserved room. At the sequence's limit, or when no cell can be had, a context shift (when
// enabled) makes room, else the choice ends with what it generated (kLength).
bool Scheduler::Impl::take_cell(Req& q, int ci) {
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

// Encoder-decoder: each admitted prompt runs through the encoder (its output kept for all its
// choices' sequences); the decoder then starts from the model's start token at position 0.
void Scheduler::Impl::encode_prompts() {
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

// A failed decode fails every request with a row in the batch.
void Scheduler::Impl::fail_batch(const Status& st, const StepBatch& s) {
  LOOM_LOG(kError, "scheduler: decode failed: %s", st.message().c_str());
  std::unordered_set<Req*> bad;
  for (auto [q, ci] : s.gen) bad.insert(q);
  for (Req* q : s.prefill) bad.insert(q);
  for (auto [q, ci] : s.refills) bad.insert(q);
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

}  // namespace loom::serve
