#include "speculative/speculative.h"

#include <algorithm>
#include <cmath>

#include "sample/argmax.h"
#include "vocab/vocab.h"

namespace loom::speculative {

// ---- LookupDrafter ----

Expected<std::vector<int32_t>> LookupDrafter::draft(std::span<const int32_t> history, int n_max) {
  std::vector<int32_t> out;
  const int n = int(history.size());
  if (n_max <= 0 || n < 2) return out;
  for (int g = std::min(ngram_max_, n - 1); g >= std::max(1, ngram_min_); --g) {
    const std::span<const int32_t> tail = history.subspan(size_t(n - g));
    // The latest earlier occurrence: start positions n-g-1 down to 0.
    for (int s = n - g - 1; s >= 0; --s) {
      if (!std::equal(tail.begin(), tail.end(), history.begin() + s)) continue;
      const int from = s + g;  // what followed it (from < n since s < n - g)
      const int len = std::min(n_max, n - from);
      out.assign(history.begin() + from, history.begin() + from + len);
      return out;
    }
  }
  return out;
}

std::string LookupDrafter::describe() const {
  return "prompt lookup (n-grams " + std::to_string(ngram_max_) + ".." + std::to_string(std::max(1, ngram_min_)) + ")";
}

// ---- ModelDrafter ----

Status check_same_vocab(const Model& draft, const Model& target) {
  const Vocab& a = draft.vocab();
  const Vocab& b = target.vocab();
  if (a.type() != b.type()) return invalid_argument("the draft model's tokenizer type differs from the target's");
  if (a.n_tokens() != b.n_tokens()) {
    return invalid_argument("the draft model has " + std::to_string(a.n_tokens()) + " tokens, the target " +
                            std::to_string(b.n_tokens()) + ": the vocabularies must be the same");
  }
  if (draft.hparams().n_vocab != target.hparams().n_vocab) {
    return invalid_argument("the draft model's output has " + std::to_string(draft.hparams().n_vocab) +
                            " logits, the target's " + std::to_string(target.hparams().n_vocab));
  }
  if (a.bos() != b.bos() || a.eos() != b.eos())
    return invalid_argument("the draft model's BOS/EOS tokens differ from the target's");
  for (int32_t id = 0; id < a.n_tokens(); ++id) {
    if (a.token_text(id) != b.token_text(id) || a.token_attr(id) != b.token_attr(id)) {
      return invalid_argument("token " + std::to_string(id) +
                              " differs between the draft model and the target: the vocabularies must be the same");
    }
  }
  return Status::ok();
}

Expected<std::unique_ptr<ModelDrafter>> ModelDrafter::create(std::shared_ptr<const Model> draft, const Model& target,
                                                             ContextParams params, float p_min) {
  if (!draft) return invalid_argument("no draft model");
  LOOM_RETURN_IF_ERROR(check_same_vocab(*draft, target));
  if (!(p_min >= 0.0f && p_min <= 1.0f)) return invalid_argument("the draft's p_min must be in [0, 1]");
  std::unique_ptr<ModelDrafter> d(new ModelDrafter());
  d->model_ = draft;
  d->p_min_ = p_min;
  params.embeddings = false;
  LOOM_ASSIGN_OR_RETURN(d->ctx_, Context::create(std::move(draft), params));
  if (d->ctx_->recurrent()) return invalid_argument("a recurrent draft model cannot forget rejected tokens");
  return d;
}

std::string ModelDrafter::describe() const { return "draft model (p_min " + std::to_string(p_min_).substr(0, 4) + ")"; }

Expected<std::vector<int32_t>> ModelDrafter::draft(std::span<const int32_t> history, int n_max) {
  std::vector<int32_t> out;
  const int n = int(history.size());
  if (n_max <= 0 || n == 0) return out;
  // Room: the history plus the draft tokens decoded to continue it.
  if (n + n_max > ctx_->n_ctx()) n_max = ctx_->n_ctx() - n;
  if (n_max <= 0) return out;
  // Keep the cached prefix the history still shares; the last history token is decoded again when
  // it is cached already, for its logits.
  size_t keep = 0;
  while (keep < cached_.size() && keep < history.size() && cached_[keep] == history[keep]) ++keep;
  keep = std::min(keep, history.size() - 1);
  if (keep < cached_.size()) {
    LOOM_RETURN_IF_ERROR(ctx_->seq_rm(0, int(keep), -1));
    cached_.resize(keep);
  }
  for (size_t i = keep; i < history.size();) {
    const size_t m = std::min(history.size() - i, size_t(ctx_->n_batch()));
    Status st = ctx_->decode(Batch::from_tokens(history.subspan(i, m), int32_t(i)));
    if (!st) {
      // Forget what the context may hold past the agreed prefix; drafting is only an optimization.
      (void)ctx_->seq_rm(0, int(keep), -1);
      cached_.resize(keep);
      return st;
    }
    cached_.insert(cached_.end(), history.begin() + long(i), history.begin() + long(i + m));
    i += m;
  }
  for (int j = 0; j < n_max; ++j) {
    LOOM_ASSIGN_OR_RETURN(std::span<const float> logits, ctx_->logits(-1));
    const int32_t tok = sample::argmax(logits);
    if (p_min_ > 0.0f) {
      // softmax probability of the top token: 1 / sum(exp(l - l_max))
      const float mx = logits[size_t(tok)];
      double sum = 0.0;
      for (float l : logits) sum += std::exp(double(l - mx));
      if (!(1.0 / sum >= double(p_min_))) break;
    }
    out.push_back(tok);
    if (j + 1 == n_max) break;
    const int32_t one[1] = {tok};
    Status st = ctx_->decode(Batch::from_tokens(one, int32_t(cached_.size())));
    if (!st) break;  // the draft so far is still a valid guess
    cached_.push_back(tok);
  }
  return out;
}

// ---- verification ----

Expected<SpecRound> speculative_round(Context& ctx, int seq, std::span<const int32_t> history,
                                      std::span<const int32_t> draft, const SpecPickFn& pick) {
  if (history.empty()) return invalid_argument("speculative_round: the history is empty");
  const int n = int(history.size());
  const int m = int(draft.size());
  if (n - 1 + m >= ctx.n_ctx()) return invalid_argument("speculative_round: the draft does not fit the context");
  if (m + 1 > ctx.n_batch()) return invalid_argument("speculative_round: the draft is longer than n_batch");
  Batch b;
  b.add(history.back(), int32_t(n - 1), {seq}, true);
  for (int i = 0; i < m; ++i) b.add(draft[size_t(i)], int32_t(n + i), {seq}, true);
  LOOM_RETURN_IF_ERROR(ctx.decode(b));
  SpecRound r;
  r.drafted = m;
  Status failed;
  for (int i = 0; i <= m; ++i) {
    auto logits = ctx.logits(i);
    if (!logits) {
      failed = logits.status();
      break;
    }
    auto p = pick(*logits);
    if (!p) {
      failed = p.status();
      break;
    }
    if (!p->emit) {
      r.stopped = true;
      break;
    }
    r.tokens.push_back(p->token);
    if (p->stop) {
      r.stopped = true;
      break;
    }
    if (i == m || p->token != draft[size_t(i)]) break;
    ++r.accepted;
  }
  // Cells kept: history[0 .. n-1] and the accepted draft tokens before the last emitted token,
  // i.e. positions < n - 1 + tokens.size() (all of the history when nothing was emitted).
  // A failed pick leaves the cache as before the round: history.back() pending again.
  const int keep = !failed.is_ok() ? n - 1 : r.tokens.empty() ? n : n - 1 + int(r.tokens.size());
  if (keep < n + m) LOOM_RETURN_IF_ERROR(ctx.seq_rm(seq, keep, -1));
  if (!failed.is_ok()) return failed;
  return r;
}

}  // namespace loom::speculative
