// Scheduler's public methods: parameter checks, building the context and the prefix cache, and
// queueing work for the loop thread. The loop itself and its parts are in src/serve/scheduler/
// (see impl.h there for the map).
#include "serve/scheduler.h"

#include <algorithm>

#include "serve/scheduler/impl.h"

namespace loom::serve {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "stop";
}

// ---------------------------------------------------------------------------------------------

namespace {

// The parameters a scheduler cannot run with; for T5 the ones its encoder rules out are turned off.
Status check_params(const Model& model, SchedulerParams& params) {
  if (params.n_slots < 1 || params.n_slots > kv::kMaxSeqs / 2) {
    return invalid_argument("slots must be between 1 and " + std::to_string(kv::kMaxSeqs / 2));
  }
  if (params.max_queue < 0) return invalid_argument("max_queue must be >= 0");
  if (params.ctx_checkpoints < 0 || params.cache_ram_mib < 0) {
    return invalid_argument("ctx_checkpoints and cache_ram_mib must not be negative");
  }
  if (model.hparams().arch == Arch::kT5) {
    // The prompt goes through the encoder (no shared prefixes: the encoder sees all of it at once),
    // the decoder's history is its own (no context shift: it would re-decode without the encoder).
    params.prefix_cache = false;
    params.context_shift = false;
    params.cache_dir.clear();
  }
  if (!params.draft_model) return Status::ok();
  LOOM_RETURN_IF_ERROR(speculative::check_same_vocab(*params.draft_model, model));
  const ModelHparams& dh = params.draft_model->hparams();
  if (dh.is_recurrent() || dh.arch == Arch::kT5) {
    return invalid_argument("the draft model must be a decoder with a KV cache (not " + dh.arch_name + ")");
  }
  if (params.context.embeddings) return invalid_argument("a draft model needs a generating context, not embeddings");
  if (params.draft_max < 1 || params.draft_max > Scheduler::Impl::kDraftRowsPerStep) {
    return invalid_argument("draft_max must be between 1 and " + std::to_string(Scheduler::Impl::kDraftRowsPerStep));
  }
  if (params.draft_min < 0 || params.draft_min > params.draft_max)
    return invalid_argument("draft_min must be between 0 and draft_max");
  if (!(params.draft_p_min >= 0.0f && params.draft_p_min <= 1.0f)) return invalid_argument("draft_p_min must be in [0, 1]");
  return Status::ok();
}

// The tokens one step decodes at most.
int step_budget(const SchedulerParams& params, const ContextParams& cp) {
  return params.step_tokens > 0 ? params.step_tokens : cp.n_ubatch;
}

// The context the scheduler's slots and prefix cache share.
ContextParams context_params_for(const Model& model, const SchedulerParams& params) {
  ContextParams cp = params.context;
  if (cp.n_ctx <= 0) cp.n_ctx = int(std::min<int64_t>(model.hparams().n_ctx_train, 4096));
  const bool embed = cp.embeddings;
  if (embed) {
    cp.n_seq_max = kv::kMaxSeqs;
  } else {
    const int cache_seqs = params.prefix_cache
                               ? (params.cache_seqs > 0 ? std::min(params.cache_seqs, kv::kMaxSeqs - params.n_slots)
                                                        : kv::kMaxSeqs - params.n_slots)
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
  // A step never decodes more than the step budget (plus one token per slot), and asks for at
  // most one output per slot: the logits buffer is slots x n_vocab, not n_batch x n_vocab.
  cp.n_batch = std::max(step_budget(params, cp), params.n_slots);
  // One output per slot (a generating choice or a prompt's last token), plus the rows of lookup
  // drafts verified in a step (at most kDraftRowsPerStep, shared by the choices).
  if (!embed) cp.n_outputs_max = params.n_slots + Scheduler::Impl::kDraftRowsPerStep;
  return cp;
}

// The prefix cache over the sequence ids past the slots, and the cache dir behind it.
Status open_prefix_cache(Scheduler::Impl& impl, const ContextParams& cp) {
  const SchedulerParams& params = impl.p;
  if (cp.embeddings || !params.prefix_cache || cp.n_seq_max <= params.n_slots) return Status::ok();
  PrefixCheckpointLimits lim;
  lim.per_path = params.ctx_checkpoints;
  lim.max_bytes = int64_t(params.cache_ram_mib) << 20;
  impl.cache = std::make_unique<PrefixCache>(*impl.ctx, params.n_slots, cp.n_seq_max - params.n_slots, lim);
  if (params.cache_dir.empty()) return Status::ok();
  if (impl.cache->needs_checkpoints()) {
    // Files of whole sequences cannot stand for checkpoints of recurrent states or windows yet.
    LOOM_LOG(kWarn, "scheduler: --cache-dir is not used for %s (its memory keeps checkpoints)",
             impl.model->hparams().arch_name.c_str());
    return Status::ok();
  }
  LOOM_RETURN_IF_ERROR(impl.disk.open(params.cache_dir, *impl.ctx, params.cache_dir_max_bytes, params.cache_dir_min_tokens));
  Scheduler::Impl* raw = &impl;
  impl.cache->set_evict_hook([raw](std::span<const int32_t> t, int seq) { raw->persist_prefix(t, seq); });
  return Status::ok();
}

}  // namespace

Expected<std::unique_ptr<Scheduler>> Scheduler::create(std::shared_ptr<const Model> model, SchedulerParams params,
                                                       const std::function<Status(Context&)>& setup) {
  if (!model) return invalid_argument("no model");
  LOOM_RETURN_IF_ERROR(check_params(*model, params));
  std::unique_ptr<Scheduler> s(new Scheduler());
  s->model_ = model;
  s->params_ = params;
  auto impl = std::make_unique<Impl>();
  impl->self = s.get();
  impl->model = model;
  impl->vocab = &model->vocab();
  impl->p = params;
  impl->enc_dec = model->hparams().arch == Arch::kT5;
  const ContextParams cp = context_params_for(*model, params);
  auto ctx = Context::create(model, cp);
  if (!ctx) return ctx.status();
  impl->ctx = std::move(*ctx);
  if (setup) LOOM_RETURN_IF_ERROR(setup(*impl->ctx));
  impl->n_ctx = impl->ctx->n_ctx();
  impl->step_tokens = std::min(step_budget(params, cp), impl->ctx->n_batch());
  s->n_ctx_ = impl->n_ctx;
  for (int i = params.n_slots - 1; i >= 0; --i) impl->free_slots.push_back(i);
  impl->slot_last.resize(size_t(params.n_slots));
  LOOM_RETURN_IF_ERROR(open_prefix_cache(*impl, cp));
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
    if (!vocab.is_valid(tok))
      return invalid_argument("logit_bias: token " + std::to_string(tok) + " is not in the vocabulary");
    (void)bias;
  }
  auto q = std::make_unique<sched::Req>();
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
    q->reserve_per_choice = std::clamp(n_ctx_ / params_.n_slots - len, std::min(Impl::kMinReserve, cap), cap);
    q->bounded = false;
  }
  req.sampling.n_ctx = n_ctx_;
  for (int i = 0; i < req.n; ++i) {
    SamplerParams sp = req.sampling;
    sp.seed = req.sampling.seed + uint64_t(i);
    auto smp = Sampler::create(sp, &vocab);
    if (!smp) return Status(smp.status().code(), "sampling: " + smp.status().message());
    sched::Choice c;
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
  auto j = std::make_unique<sched::EmbedJob>();
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
  if (size_t(slot) < impl_->slot_snapshot.size())
    impl_->slot_snapshot[size_t(slot)].n_cached = int(impl_->slot_last[size_t(slot)].size());
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
