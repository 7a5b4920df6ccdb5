// The prefix cache and the cache dir as the scheduler uses them: prefixes loaded from disk at
// admission, a prompt's cached part grown by another request's chunks, requests waiting for an
// earlier one computing the same prefix, checkpoints of end-only memory parts (recurrent states,
// windows), and writing evicted prefixes to the cache dir.

#include "serve/scheduler/impl.h"

#include <algorithm>

namespace loom::serve {

// A longer prefix from the cache dir: loaded into a cache sequence and adopted by the tree.
void Scheduler::Impl::try_disk(Req& q, PrefixCache::Match* m) {
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

// The prompt's cached part may have grown since admission (another request's chunks): share it.
void Scheduler::Impl::rematch(Req& q) {
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
  ctx->count_reused(gain);
}

// A request whose next prompt tokens are being computed this step by an earlier request with
// the same prefix waits for them instead of computing them twice.
bool Scheduler::Impl::waits_for_other(const Req& q, const std::vector<Req*>& earlier) const {
  if (!cache || !q.r.cache_prompt || cache->needs_checkpoints()) return false;
  for (const Req* a : earlier) {
    if (!a->r.cache_prompt) continue;
    if (a->chunk_from <= q.progress && q.progress < a->chunk_from + a->chunk &&
        sched::common_prefix(a->r.prompt, q.r.prompt) > q.progress) {
      return true;
    }
  }
  return false;
}

// The prompt position a few tokens before its end that gets a checkpoint too (0: none).
int Scheduler::Impl::tail_checkpoint(const Req& q) const {
  const int len = int(q.r.prompt.size());
  return cache && cache->needs_checkpoints() && q.r.cache_prompt && len > 2 * kPromptTailCheckpoint
             ? len - kPromptTailCheckpoint
             : 0;
}

// Every few generated tokens, the end-only parts of a choice's sequence as of c.kv (not while
// draft rows are in its memory).
void Scheduler::Impl::rolling_checkpoint(const Req& q, Choice& c) {
  if (!cache || !cache->needs_checkpoints() || !q.r.cache_prompt || !c.draft.empty()) return;
  if (int(c.kv.size()) - std::max(c.rolling_len, int(q.r.prompt.size())) < kRollingCheckpointTokens) return;
  auto d = ctx->seq_state_save(c.slot, {}, kv::kPartsAtEnd);
  if (!d) return;
  c.rolling = std::move(*d);
  c.rolling_len = int(c.kv.size());
}

// A checkpoint of `slot`'s end-only memory parts at node n, when the slot has decoded exactly n's
// path (`len` tokens) and the memory has such parts.
void Scheduler::Impl::checkpoint(PrefixCache::Node* n, int len, int slot) {
  if (!cache || !n || !cache->needs_checkpoints() || n->end() != len) return;
  cache->set_checkpoint(n, slot);
}

// Moves request q's lock on the prefix cache to its prompt's first `keep` tokens (none: unlocked).
void Scheduler::Impl::relock(Req& q, int keep) {
  PrefixCache::Node* n = nullptr;
  if (keep > 0) n = cache->match(std::span<const int32_t>(q.r.prompt).first(size_t(keep)), keep).node;
  if (n == q.lock) return;
  if (n) cache->lock(n);
  cache->unlock(q.lock);
  q.lock = n;
}

// The cache dir's writer: an evicted prefix's cells as a sequence state file.
void Scheduler::Impl::persist_prefix(std::span<const int32_t> tokens, int seq) {
  if (!disk.active() || int(tokens.size()) < p.cache_dir_min_tokens) return;
  auto data = ctx->seq_state_save(seq, tokens);
  if (!data) {
    ++metrics.disk_errors;
    return;
  }
  disk.put(std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(*data));
}

}  // namespace loom::serve
