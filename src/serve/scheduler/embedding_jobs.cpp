// Embedding requests (a scheduler made with ContextParams::embeddings): inputs of the jobs that
// arrived first packed into one batch of sequences, pooled, and the jobs answered when complete.

#include "serve/scheduler/impl.h"

#include <algorithm>

namespace loom::serve {

// One batch of embedding inputs, from the jobs that arrived before ticket `before`.
void Scheduler::Impl::embed_step(uint64_t before) {
  if (embed_jobs.empty()) return;
  const int cap_tokens = ctx->n_ubatch();
  const int cap_seqs = ctx->n_seq_max();
  Batch b;
  struct Part {
    EmbedJob* job;
    size_t input;
    int seq;
  };
  std::vector<Part> parts;
  for (auto& jp : embed_jobs) {
    EmbedJob& j = *jp;
    if (j.ticket > before) break;
    while (j.next + parts.size() < j.r.inputs.size()) {
      // inputs are taken in order; the ones of this job already in the batch are counted
      size_t in = j.next;
      for (const Part& pt : parts)
        if (pt.job == &j) in = std::max(in, pt.input + 1);
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

}  // namespace loom::serve
