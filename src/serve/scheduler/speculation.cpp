// Rows beyond one token per choice: draft tokens verified in the step (lookup drafts or a draft
// model, one drafter per slot), and context shift (a full sequence drops half its history and
// re-decodes the rest).

#include "serve/scheduler/impl.h"

#include <algorithm>

namespace loom::serve {

ModelDrafter* Scheduler::Impl::drafter_for(int slot) {
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

// A lookup draft for choice c after its pending token, within its reserved cells, the context
// and its token limit; rows appended to b.
void Scheduler::Impl::add_draft(const Req& q, Choice& c, Batch* b) {
  c.draft.clear();
  const bool lookup = q.r.lookup > 0;
  const bool model_draft = !lookup && p.draft_model && !draft_model_off;
  if ((!lookup && !model_draft) || q.r.draft_max <= 0 || c.done) return;
  if (ctx->recurrent()) return;      // a recurrent state cannot forget rejected draft tokens
  const int pos = int(c.kv.size());  // the pending token's
  const int claimable = n_ctx - kv_used() + (cache ? cache->evictable() : 0) - step_cells;
  int k = std::min({q.r.draft_max, model_draft ? p.draft_max : q.r.draft_max, n_ctx - pos - 1,
                    c.max_tokens - int(c.generated.size()) - 1, std::max(c.reserved, q.bounded ? 0 : unreserved()),
                    draft_rows_left, claimable});
  if (k <= 0) return;
  std::vector<int32_t> history(c.kv);
  history.push_back(c.pending);
  Expected<std::vector<int32_t>> d = std::vector<int32_t>{};
  if (lookup) {
    d = speculative::LookupDrafter(q.r.lookup, std::min(q.r.lookup, 2)).draft(history, k);
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
void Scheduler::Impl::drop_draft(Choice& c, int accepted) {
  if (c.draft.empty()) return;
  (void)ctx->seq_rm(c.slot, int(c.kv.size()), -1);
  if (!c.done) c.reserved += std::max(0, c.draft_reserved - accepted);
  c.draft.clear();
  c.draft_reserved = 0;
}

// Context shift by recomputation: keep n_keep tokens, drop half of the rest (more when the
// remainder would not fit), decode the remainder again at its new positions (exact, and no
// shared cell is ever moved). Returns false when nothing can be dropped; true when the choice
// refills, or ended (kLength) because not even its pending token finds a cell.
bool Scheduler::Impl::shift(Req& q, int ci) {
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

}  // namespace loom::serve
