// loom generate -m MODEL -p PROMPT [-n N] [-c CTX] [-t THREADS] [--temp T] [--seed S] [--json]
//               [sampler flags] [--grammar-file F | --json-schema F]
//               [--parallel N] [--context-shift --keep N] [--save-state F | --load-state F]
//               [--draft-model M [--draft-max K] [--draft-min N] [--draft-p-min P] | --lookup N]
// Streams the generated text (not the prompt) to stdout as it is produced.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>

#include "commands.h"

namespace loom::cli {
namespace {

using api::Token;

struct Opts {
  std::string model, prompt;
  int n_predict = 128, n_ctx = 0, threads = 0;
  int n_swa = -1;  // --sliding-window
  int64_t seed = -1;
  bool json = false;
  bool verbose = false;  // the context's perf report (timings, expert routing) on stderr at the end
  nlohmann::json sampling = nlohmann::json::object();  // the sampler flags given (add_sampler_flags)
  std::string samplers, grammar_file, json_schema_file;
  int parallel = 1;
  bool chat = false;
  bool context_shift = false;
  int keep = 0;
  std::string save_state, load_state;
  // Speculative decoding (loom_drafter_*, loom_speculative_round): a draft model or prompt lookup.
  std::string draft_model;
  int draft_max = 16, draft_min = 0, lookup = 0;
  float draft_p_min = 0.75f;
};

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The sampler of one stream; `seed_offset` separates the streams of --parallel.
api::Expected<api::Sampler> build_sampler(const Opts& o, const api::Model& model, int n_ctx, int64_t seed) {
  nlohmann::json j = o.sampling;
  j["seed"] = seed;
  j["n_ctx"] = n_ctx;
  if (!o.samplers.empty()) j["samplers"] = o.samplers;
  std::string error;
  if (!o.grammar_file.empty()) {
    auto g = read_file(o.grammar_file, &error);
    if (!g) return api::Status(LOOM_ERR_NOT_FOUND, error);
    j["grammar"] = *g;
  } else if (!o.json_schema_file.empty()) {
    auto schema = read_file(o.json_schema_file, &error);
    if (!schema) return api::Status(LOOM_ERR_NOT_FOUND, error);
    auto g = api::json_schema_to_grammar(*schema);
    if (!g) return g.status();
    j["grammar"] = *g;
  }
  return api::Sampler::create(model, j.dump());
}

int64_t resolve_seed(const Opts& o) { return o.seed >= 0 ? o.seed : int64_t(std::random_device{}()); }

double rate(int64_t n, int64_t us) { return us > 0 ? 1e6 * double(n) / double(us) : 0.0; }

// Samples the next token from a row of logits and accepts it; -1 at an end-of-generation token
// (not accepted). The one step every generation loop of this file takes.
api::Expected<Token> next_token(api::Sampler& sampler, const api::Model& model, const float* logits, int32_t n_vocab) {
  if (!logits) return api::Status(LOOM_ERR_INTERNAL, last_error());
  const Token tok = sampler.pick(logits, n_vocab);
  if (tok == LOOM_TOKEN_NULL)
    return api::Status(LOOM_ERR_INVALID_ARGUMENT, "the grammar admits no token of this vocabulary here");
  if (model.is_eog(tok)) return Token(-1);
  if (api::Status st = sampler.accept(tok); !st) return st;
  return tok;
}

// Generated text: kept for --json, streamed to stdout otherwise.
struct Output {
  bool json = false;
  std::string text;
  void emit(const std::string& chunk) {
    text += chunk;
    if (!json && !chunk.empty()) {
      std::fwrite(chunk.data(), 1, chunk.size(), stdout);
      std::fflush(stdout);
    }
  }
};

// One token with its logits, through a batch the caller keeps (no allocation per token).
api::Status decode_one(api::Context& ctx, api::Batch& b, Token t, int32_t pos) {
  b.clear();
  b.add(t, pos, 0, true);
  return ctx.decode(b);
}

// An encoder-decoder (T5): the prompt goes through the encoder, the decoder starts from the
// model's decoder start token and generates. JSON prompt_ids are the encoder's tokens, ids the
// decoder's generated tokens (without the start token).
int generate_encoder_decoder(const Opts& o, const api::Model& model, const std::vector<Token>& prompt) {
  if (o.parallel > 1 || o.context_shift || !o.save_state.empty() || !o.load_state.empty()) {
    return fail("--parallel, --context-shift and state files are not supported for encoder-decoder models");
  }
  api::ContextParams cp;
  cp.p.n_ctx = o.n_ctx > 0 ? o.n_ctx : default_n_ctx(model);
  cp.p.n_threads = o.threads;
  // The encoder runs the whole prompt in one pass.
  cp.p.n_ctx = std::max<int>(cp.p.n_ctx, int(prompt.size()));
  cp.p.n_batch = cp.p.n_ubatch = std::max<int>(512, int(prompt.size()));
  auto ctx_or = api::Context::create(model, cp);
  if (!ctx_or) return fail(ctx_or.status());
  api::Context& ctx = *ctx_or;
  auto sampler_or = build_sampler(o, model, ctx.n_ctx(), resolve_seed(o));
  if (!sampler_or) return fail(sampler_or.status());
  api::Sampler& sampler = *sampler_or;
  api::Batch enc(int32_t(prompt.size()));
  enc.add_tokens(prompt.data(), prompt.size(), 0);
  enc.set_logits_last();
  if (api::Status st = ctx.encode(enc); !st) return fail(st);
  Token cur = model.decoder_start();
  sampler.accept_history({cur});
  std::vector<Token> out;
  Output text{o.json, {}};
  auto detok = api::Detokenizer::create(model);
  if (!detok) return fail(detok.status());
  api::Batch one(1);
  for (int i = 0; i < o.n_predict && i < ctx.n_ctx(); ++i) {
    if (api::Status st = decode_one(ctx, one, cur, i); !st) return fail(st);
    auto next = next_token(sampler, model, ctx.logits(-1), ctx.n_vocab());
    if (!next) return fail(next.status());
    const Token tok = *next;
    if (tok < 0) break;
    out.push_back(tok);
    cur = tok;
    auto chunk = detok->push(tok);
    if (!chunk) return fail(chunk.status());
    text.emit(*chunk);
    if (sampler.grammar_done()) break;
  }
  text.emit(detok->flush());
  const loom_perf_data perf = ctx.perf();
  const double prompt_tps = rate(perf.n_prompt_tokens, perf.t_prompt_us);
  const double gen_tps = rate(perf.n_gen_tokens, perf.t_gen_us);
  if (o.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = out;
    j["text"] = text.text;
    j["decoder_start"] = model.decoder_start();
    j["timings"] = {{"prompt_tps", prompt_tps}, {"gen_tps", gen_tps}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    if (o.json_schema_file.empty()) std::printf("\n");
    std::fprintf(stderr, "loom: encoded %zu tokens %.1f tok/s, generated %zu tokens %.1f tok/s\n", prompt.size(), prompt_tps,
                 out.size(), gen_tps);
  }
  return 0;
}

// Running totals of speculative rounds for the report.
struct SpecStats {
  int64_t rounds = 0, drafted = 0, accepted = 0, emitted = 0;
  void add(const api::SpecRound& r) {
    ++rounds;
    drafted += r.drafted;
    accepted += r.accepted;
    emitted += int64_t(r.tokens.size());
  }
  double acceptance() const { return drafted > 0 ? double(accepted) / double(drafted) : 0.0; }
};

using api::Status;

Status error(const std::string& message) { return Status(LOOM_ERR_INVALID_ARGUMENT, message); }

// The drafter of --draft-model or --lookup (none without them), and the draft model it runs.
struct Drafting {
  std::optional<api::Model> draft_model;  // kept alive with the drafter
  std::optional<api::Drafter> drafter;
};

Status make_drafter(const Opts& o, const api::Model& model, const api::ContextParams& cp, Drafting& d) {
  if (o.draft_model.empty() && o.lookup <= 0) return Status::ok();
  if (model.is_recurrent())
    return error("speculative decoding needs to drop rejected tokens, which a recurrent model's state cannot");
  if (o.context_shift) return error("speculative decoding cannot be combined with --context-shift");
  if (o.lookup > 0) {
    auto dr = api::Drafter::lookup(o.lookup, std::min(o.lookup, 2));
    if (!dr) return dr.status();
    d.drafter = std::move(*dr);
    return Status::ok();
  }
  auto m = api::Model::load(o.draft_model);
  if (!m) return m.status();
  d.draft_model = std::move(*m);
  api::ContextParams dp = cp;
  dp.p.n_ctx = cp.p.n_ctx + o.draft_max + 1;
  auto dr = api::Drafter::model(*d.draft_model, model, dp, o.draft_p_min);
  if (!dr) return dr.status();
  d.drafter = std::move(*dr);
  return Status::ok();
}

// --load-state: restores the cache and its tokens into `history`, and how many of the prompt's
// tokens it already holds (`reused`). Without -p the saved tokens are the prompt.
Status restore_state(const Opts& o, api::Context& ctx, bool recurrent, std::vector<Token>& prompt,
                     std::vector<Token>& history, size_t& reused) {
  auto loaded = ctx.load_state(o.load_state);
  if (!loaded) return loaded.status();
  history = std::move(*loaded);
  if (prompt.empty()) {
    if (history.empty()) return error(o.load_state + " holds no tokens to resume from (pass -p)");
    prompt = history;  // no -p: resume the saved tokens
  }
  const bool resume =
      history.size() >= prompt.size() && !history.empty() && std::equal(prompt.begin(), prompt.end(), history.begin());
  if (resume && loom_get_logits_ith(ctx.handle(), -1) != nullptr) {
    prompt = history;  // continue the saved generation: its logits are restored too
    reused = history.size();
  } else {
    while (reused < history.size() && reused < prompt.size() && history[reused] == prompt[reused]) ++reused;
    if (reused == prompt.size()) --reused;  // the last prompt token must be decoded for its logits
    if (!ctx.seq_rm(0, int(reused), -1).is_ok()) {
      // A recurrent state cannot forget its last tokens: reuse it only when the prompt extends it.
      if (!recurrent) return error("cannot trim the restored cache");
      ctx.kv_clear();
      reused = 0;
    }
    history.resize(reused);
  }
  std::fprintf(stderr, "loom: state %s: reused %zu of %zu prompt tokens\n", o.load_state.c_str(), reused, prompt.size());
  return Status::ok();
}

// One stream's generation after its prompt: `history` is exactly what the KV cache holds, in
// order (plus the last sampled token while `pending`).
class Stream {
 public:
  Stream(const Opts& o, const api::Model& model, api::Context& ctx, api::Sampler& sampler, api::Detokenizer& detok,
         api::Drafter* drafter, std::vector<Token> prompt)
      : o_(o),
        model_(model),
        ctx_(ctx),
        sampler_(sampler),
        detok_(detok),
        drafter_(drafter),
        history(std::move(prompt)),
        text{o.json, {}} {
    n_keep_ = std::min(history.size(), size_t(o.keep) + (!history.empty() && history[0] == model.bos() ? 1 : 0));
  }

  std::vector<Token> history, out;
  Output text;
  SpecStats spec;

  // Samples until -n tokens, an end-of-generation token, the grammar's end or a full context.
  Status run() {
    while (int(out.size()) < o_.n_predict) {
      bool stop = false;
      Status st = pending_ && drafter_ && int(history.size()) < ctx_.n_ctx() ? speculative_step(stop) : plain_step(stop);
      if (!st) return st;
      if (stop) break;
    }
    text.emit(detok_.flush());
    return Status::ok();
  }

  // Before a state save: the last generated token decoded too, so a resumed run continues
  // exactly where this one ended.
  Status settle() {
    if (pending_ && int(history.size()) <= ctx_.n_ctx()) {
      return decode_one(ctx_, one_, history.back(), int32_t(history.size() - 1));
    }
    if (pending_) history.pop_back();
    return Status::ok();
  }

 private:
  // Text is released only in whole UTF-8 characters, with the vocabulary's spacing rules.
  Status emit(Token tok) {
    out.push_back(tok);
    history.push_back(tok);
    auto chunk = detok_.push(tok);
    if (!chunk) return chunk.status();
    text.emit(*chunk);
    return Status::ok();
  }

  // Draft, verify in one decode, keep what the sampler picks (the same tokens as plain decoding:
  // loom_speculative_round says why).
  Status speculative_step(bool& stop) {
    const int room = ctx_.n_ctx() - int(history.size()) - 1;
    const int left = o_.n_predict - int(out.size()) - 1;
    const int k = std::min({o_.draft_max, room, left, ctx_.n_batch() - 1});
    std::vector<Token> draft;
    if (k > 0) {
      auto d = drafter_->draft(history, k);
      if (!d) return d.status();
      draft = std::move(*d);
      if (int(draft.size()) < o_.draft_min) draft.clear();
    }
    int picked = 0;
    auto round = api::speculative_round(
        ctx_, 0, history, draft, [&](const float* logits, int32_t nv) -> api::Expected<api::SpecPick> {
          auto tok = next_token(sampler_, model_, logits, nv);
          if (!tok) return tok.status();
          if (*tok < 0) return api::SpecPick{*tok, false, true};
          ++picked;
          const bool done = sampler_.grammar_done() || int(out.size()) + picked >= o_.n_predict ||
                            int(history.size()) + picked >= ctx_.n_ctx();
          return api::SpecPick{*tok, true, done};
        });
    if (!round) return round.status();
    spec.add(*round);
    for (Token tok : round->tokens) {
      if (Status st = emit(tok); !st) return st;
    }
    pending_ = !round->tokens.empty();
    stop = round->stopped || int(history.size()) >= ctx_.n_ctx();
    return Status::ok();
  }

  // Keeps the first n_keep tokens, drops half of the rest and shifts the remainder left.
  Status shift_context() {
    const size_t n_left = history.size() - n_keep_;
    const size_t n_discard = std::max<size_t>(1, n_left / 2);
    if (!ctx_.seq_rm(0, int(n_keep_), int(n_keep_ + n_discard)).is_ok() ||
        !ctx_.seq_add(0, int(n_keep_ + n_discard), -1, -int(n_discard)).is_ok()) {
      return error("context shift failed");
    }
    history.erase(history.begin() + long(n_keep_), history.begin() + long(n_keep_ + n_discard));
    return Status::ok();
  }

  // The pending token decoded (the context shifted first when full), then the next one sampled.
  Status plain_step(bool& stop) {
    if (pending_) {
      if (int(history.size()) >= ctx_.n_ctx()) {
        if (!o_.context_shift) {
          stop = true;
          return Status::ok();
        }
        if (Status st = shift_context(); !st) return st;
      }
      if (Status st = decode_one(ctx_, one_, history.back(), int32_t(history.size() - 1)); !st) return st;
      pending_ = false;
    }
    auto next = next_token(sampler_, model_, ctx_.logits(-1), ctx_.n_vocab());
    if (!next) return next.status();
    if (*next < 0) {
      stop = true;
      return Status::ok();
    }
    pending_ = true;
    if (Status st = emit(*next); !st) return st;
    stop = sampler_.grammar_done() || (!o_.context_shift && int(history.size()) >= ctx_.n_ctx());
    return Status::ok();
  }

  const Opts& o_;
  const api::Model& model_;
  api::Context& ctx_;
  api::Sampler& sampler_;
  api::Detokenizer& detok_;
  api::Drafter* drafter_;
  size_t n_keep_ = 0;
  api::Batch one_{1};
  bool pending_ = false;  // the last sampled token is not in the cache yet
};

// The end of one stream: JSON on stdout, or the speeds on stderr.
void report_one(const Opts& o, api::Context& ctx, const Stream& s, const std::vector<Token>& prompt, size_t reused,
                double gen_wall_us, const api::Drafter* drafter) {
  const loom_perf_data perf = ctx.perf();
  const double prompt_tps = rate(perf.n_prompt_tokens, perf.t_prompt_us);
  const double gen_tps = rate(perf.n_gen_tokens, perf.t_gen_us);
  const double wall_tps = gen_wall_us > 0 ? double(s.out.size()) * 1e6 / gen_wall_us : 0.0;
  const double per_round = s.spec.rounds > 0 ? double(s.spec.emitted) / double(s.spec.rounds) : 0.0;
  if (o.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = s.out;
    j["text"] = s.text.text;
    // gen_tps: decode time only (the context's counters, as llama.cpp's eval time); gen_wall_tps:
    // tokens over the wall clock from the prompt's end to the last token, sampling included (as
    // llama-server's and loom serve's predicted_per_second).
    j["timings"] = {{"prompt_tps", prompt_tps}, {"gen_tps", gen_tps}, {"gen_wall_tps", wall_tps}};
    if (!o.load_state.empty()) j["reused_tokens"] = reused;
    if (drafter) {
      j["speculative"] = {{"drafter", drafter->describe()},    {"rounds", s.spec.rounds},
                          {"drafted", s.spec.drafted},         {"accepted", s.spec.accepted},
                          {"acceptance", s.spec.acceptance()}, {"tokens_per_round", per_round}};
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  if (o.json_schema_file.empty()) std::printf("\n");
  std::fprintf(stderr, "loom: prompt %zu tokens %.1f tok/s, generated %zu tokens %.1f tok/s\n", prompt.size(), prompt_tps,
               s.out.size(), gen_tps);
  if (drafter) {
    std::fprintf(stderr,
                 "loom: speculative (%s): %lld rounds, %lld of %lld draft tokens accepted (%.1f %%), %.2f tokens per target "
                 "decode, %.1f tok/s wall\n",
                 drafter->describe().c_str(), static_cast<long long>(s.spec.rounds), static_cast<long long>(s.spec.accepted),
                 static_cast<long long>(s.spec.drafted), 100.0 * s.spec.acceptance(), per_round, wall_tps);
  }
}

// One stream: prompt (possibly resumed from a state file), sampling loop with optional
// context shift, optional state save at the end.
Status generate_one(const Opts& o, const api::Model& model, std::vector<Token> prompt) {
  api::ContextParams cp;
  cp.p.n_ctx = o.n_ctx > 0 ? o.n_ctx : default_n_ctx(model);
  cp.p.n_threads = o.threads;
  cp.p.n_swa = o.n_swa;
  cp.p.n_batch = std::min<int>(cp.p.n_ctx, std::max<int>(512, int(prompt.size())));
  auto ctx_or = api::Context::create(model, cp);
  if (!ctx_or) return ctx_or.status();
  api::Context& ctx = *ctx_or;
  const bool recurrent = model.is_recurrent();
  if (o.context_shift && recurrent) {
    return error("--context-shift needs to drop old tokens, which a recurrent model's state cannot");
  }
  Drafting drafting;
  if (Status st = make_drafter(o, model, cp, drafting); !st) return st;
  std::vector<Token> history;
  size_t reused = 0;
  if (!o.load_state.empty()) {
    if (Status st = restore_state(o, ctx, recurrent, prompt, history, reused); !st) return st;
  }
  if (int(prompt.size()) >= cp.p.n_ctx && !o.context_shift) {
    return error("the prompt has " + std::to_string(prompt.size()) + " tokens, which does not fit the context of " +
                 std::to_string(cp.p.n_ctx) + " (use -c)");
  }
  if (int(prompt.size()) >= cp.p.n_ctx) return error("the prompt does not fit the context (use -c)");
  auto sampler = build_sampler(o, model, ctx.n_ctx(), resolve_seed(o));
  if (!sampler) return sampler.status();
  sampler->accept_history(prompt);
  if (reused < prompt.size()) {
    if (Status st = decode_tokens(ctx, prompt, reused); !st) return st;
  }
  auto detok = api::Detokenizer::create(model);
  if (!detok) return detok.status();
  api::Drafter* drafter = drafting.drafter ? &*drafting.drafter : nullptr;
  Stream s(o, model, ctx, *sampler, *detok, drafter, prompt);
  const int64_t t_gen0 = now_us();  // wall clock of generation: decode, sampling, detokenizing
  if (Status st = s.run(); !st) return st;
  const double gen_wall_us = double(now_us() - t_gen0);
  if (!o.save_state.empty()) {
    if (Status st = s.settle(); !st) return st;
    if (Status st = ctx.save_state(o.save_state, s.history); !st) return st;
  }
  report_one(o, ctx, s, prompt, reused, gen_wall_us, drafter);
  if (o.verbose) loom_perf_print(ctx.handle());
  if (sampler->has_grammar() && !sampler->grammar_can_end())
    std::fprintf(stderr, "loom: warning: generation stopped before the grammar was complete (raise -n)\n");
  return Status::ok();
}

// The end of --parallel: every sequence's text, the aggregate speed.
void report_parallel(const Opts& o, api::Context& ctx, const std::vector<Token>& prompt,
                     const std::vector<std::vector<Token>>& ids, const std::vector<std::string>& texts, int64_t n_generated,
                     double dt) {
  const int n_seq = o.parallel;
  const double agg_tps = dt > 0 ? 1e6 * double(n_generated) / dt : 0.0;
  if (o.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = ids[0];
    j["text"] = texts[0];
    nlohmann::json seqs = nlohmann::json::array();
    for (int s = 0; s < n_seq; ++s) seqs.push_back({{"ids", ids[size_t(s)]}, {"text", texts[size_t(s)]}});
    j["sequences"] = seqs;
    const loom_perf_data perf = ctx.perf();
    j["timings"] = {
        {"prompt_tps", rate(perf.n_prompt_tokens, perf.t_prompt_us)}, {"gen_tps", agg_tps}, {"aggregate_tps", agg_tps}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    for (int s = 0; s < n_seq; ++s) std::printf("[sequence %d]%s\n", s, texts[size_t(s)].c_str());
    std::fprintf(stderr, "loom: %d sequences, %lld tokens in %.2f s: %.1f tok/s aggregate\n", n_seq,
                 static_cast<long long>(n_generated), dt / 1e6, agg_tps);
  }
  if (o.verbose) loom_perf_print(ctx.handle());
}

// N continuations of one prompt at once: the prompt is decoded once into sequence 0 and its
// cells are shared with sequences 1..N-1 (seq_cp); each step decodes one token per live
// sequence in a single batch, and every sequence samples with its own sampler (seed + s).
int generate_parallel(const Opts& o, const api::Model& model, const std::vector<Token>& prompt) {
  const int n_seq = o.parallel;
  api::ContextParams cp;
  cp.p.n_seq_max = n_seq;
  const int64_t need = int64_t(prompt.size()) + int64_t(n_seq) * o.n_predict;
  cp.p.n_ctx =
      o.n_ctx > 0 ? o.n_ctx : int(std::min<int64_t>(std::max<int64_t>(need, default_n_ctx(model)), model.n_ctx_train()));
  cp.p.n_threads = o.threads;
  cp.p.n_swa = o.n_swa;
  cp.p.n_batch = std::min<int>(cp.p.n_ctx, std::max<int>({512, int(prompt.size()), n_seq}));
  if (int(prompt.size()) >= cp.p.n_ctx) return fail("the prompt does not fit the context (use -c)");
  auto ctx_or = api::Context::create(model, cp);
  if (!ctx_or) return fail(ctx_or.status());
  api::Context& ctx = *ctx_or;

  std::vector<api::Sampler> samplers;
  const int64_t seed0 = resolve_seed(o);
  for (int s = 0; s < n_seq; ++s) {
    auto smp = build_sampler(o, model, ctx.n_ctx(), seed0 + s);
    if (!smp) return fail(smp.status());
    smp->accept_history(prompt);
    samplers.push_back(std::move(*smp));
  }
  api::Status st = decode_tokens(ctx, prompt, 0);
  if (!st) return fail(st);
  for (int s = 1; s < n_seq; ++s) {
    if (!(st = ctx.seq_cp(0, s, -1, -1))) return fail(st);
  }

  const int32_t n_vocab = ctx.n_vocab();
  std::vector<std::vector<Token>> ids(static_cast<size_t>(n_seq));
  std::vector<std::string> texts(static_cast<size_t>(n_seq));
  std::vector<int> row(static_cast<size_t>(n_seq), -1);  // batch row of each live sequence's last token; -1 = done
  const int64_t t0 = now_us();
  int64_t n_generated = 0;
  int32_t pos = int32_t(prompt.size());
  bool first = true;
  api::Batch batch(n_seq);
  for (int step = 0; step < o.n_predict; ++step) {
    batch.clear();
    for (int s = 0; s < n_seq; ++s) {
      if (!first && row[size_t(s)] < 0) continue;
      const float* logits = ctx.logits(first ? -1 : row[size_t(s)]);
      if (!logits) return fail(last_error());
      api::Sampler& smp = samplers[size_t(s)];
      const Token tok = smp.pick(logits, n_vocab);
      if (tok < 0 || model.is_eog(tok) || smp.grammar_done()) {
        row[size_t(s)] = -1;
        if (tok < 0 || model.is_eog(tok)) continue;
      }
      smp.accept(tok);
      ids[size_t(s)].push_back(tok);
      texts[size_t(s)] += model.piece(tok, false);
      ++n_generated;
      if (step + 1 == o.n_predict || smp.grammar_done()) {
        row[size_t(s)] = -1;
        continue;
      }
      row[size_t(s)] = batch.size();
      batch.add(tok, pos, s, true);
    }
    first = false;
    if (batch.size() == 0) break;
    st = ctx.decode(batch);
    if (st.code() == LOOM_ERR_RESOURCE_EXHAUSTED) {
      std::fprintf(stderr, "loom: the context is full; stopping (use a larger -c)\n");
      break;
    }
    if (!st) return fail(st);
    ++pos;
  }
  report_parallel(o, ctx, prompt, ids, texts, n_generated, double(now_us() - t0));
  return 0;
}

// The prompt's tokens: -p as text, or with --chat as one user message through the model's template.
api::Expected<std::vector<Token>> prompt_tokens(const Opts& o, const api::Model& model) {
  if (!o.chat) return model.tokenize(o.prompt, true, false);
  const nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", o.prompt}}});
  auto rendered = model.apply_chat_template(messages.dump(), /*add_generation_prompt=*/true);
  if (!rendered) return rendered.status();
  return model.tokenize_chat(*rendered);
}

// The combinations of flags one model cannot run, or ok.
Status check_combination(const Opts& o, bool enc_dec) {
  const bool speculative = !o.draft_model.empty() || o.lookup > 0;
  if (o.parallel > 1 && speculative) return error("--parallel cannot be combined with --draft-model or --lookup");
  if (enc_dec && speculative) {
    return error("speculative decoding (--draft-model, --lookup) is not implemented for encoder-decoder models");
  }
  if (!enc_dec && o.parallel > 1 && (o.context_shift || !o.save_state.empty() || !o.load_state.empty())) {
    return error("--parallel cannot be combined with --context-shift or state files");
  }
  return Status::ok();
}

// `loom generate`: 0 on success, 1 on a runtime error, 2 on a usage error.
int run_generate(const Opts& o) {
  auto model = load_model_or_report(o.model);
  if (!model) return 1;
  const bool enc_dec = model->has_encoder() && model->has_decoder();
  if (o.prompt.empty() && o.load_state.empty()) {
    std::fprintf(stderr, "loom: --prompt is required (unless --load-state resumes a saved generation)\n");
    return 2;
  }
  if (o.prompt.empty() && enc_dec) return fail("state files are not supported for encoder-decoder models: pass -p");
  if (o.prompt.empty()) {
    // Resume: the saved tokens are the prompt (generate_one restores them and their logits).
    if (o.parallel > 1) return fail("--parallel cannot be combined with state files");
    Status st = generate_one(o, *model, {});
    return st ? 0 : fail(st);
  }
  auto prompt = prompt_tokens(o, *model);
  if (!prompt) return fail(prompt.status());
  if (prompt->empty()) return fail("the prompt produced no tokens");
  if (Status st = check_combination(o, enc_dec); !st) return fail(st);
  if (enc_dec) return generate_encoder_decoder(o, *model, *prompt);
  if (o.parallel > 1) return generate_parallel(o, *model, *prompt);
  Status st = generate_one(o, *model, std::move(*prompt));
  return st ? 0 : fail(st);
}

// The flags of generation itself (the sampler's are add_sampler_flags').
void add_generation_flags(CLI::App* sub, Opts& o) {
  auto* gf = sub->add_option("--grammar-file", o.grammar_file, "constrain the output with a GBNF grammar file");
  sub->add_option("--json-schema", o.json_schema_file,
                  "constrain the output to JSON matching this JSON schema file (stdout holds only the JSON)")
      ->excludes(gf);
  sub->add_option("--parallel", o.parallel, "generate N continuations at once, sharing the prompt's cache cells")
      ->check(CLI::Range(1, 256));
  sub->add_flag("--chat", o.chat, "apply the model's chat template to the prompt as one user message");
  sub->add_flag("--context-shift", o.context_shift,
                "when the context is full, drop the oldest half (after --keep) and go on");
  sub->add_option("--keep", o.keep, "prompt tokens kept by --context-shift (BOS is always kept)")
      ->check(CLI::NonNegativeNumber);
  auto* save = sub->add_option("--save-state", o.save_state, "save the context (cache + tokens) to FILE at the end");
  sub->add_option("--load-state", o.load_state, "restore a saved context and reuse its tokens (resumes a saved generation)")
      ->excludes(save);
  auto* dm = sub->add_option(
      "--draft-model", o.draft_model,
      "speculative decoding with this draft model (same vocabulary); greedy and seeded output are unchanged");
  sub->add_option("--draft-max", o.draft_max, "most tokens drafted per step (default 16)")->check(CLI::Range(1, 256));
  sub->add_option("--draft-min", o.draft_min, "drafts shorter than this are not verified (default 0)")
      ->check(CLI::Range(0, 256));
  sub->add_option("--draft-p-min", o.draft_p_min, "the draft model stops at a token below this probability (default 0.75)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option(
         "--lookup", o.lookup,
         "speculative decoding by prompt lookup: drafts from the longest repeated n-gram up to N tokens (no draft model)")
      ->check(CLI::Range(1, 64))
      ->excludes(dm);
}

}  // namespace

void register_generate(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", o->prompt, "prompt text (optional with --load-state: resume the saved tokens)");
  sub->add_option("-n,--n-predict", o->n_predict, "tokens to generate (default 128)")->check(CLI::NonNegativeNumber);
  sub->add_option("-c,--ctx-size", o->n_ctx, "context size (default: training context, at most 4096)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_sliding_window_option(sub, o->n_swa);
  sub->add_option("--seed", o->seed, "random seed (default: random)");
  add_sampler_flags(sub, o->sampling, SamplerFlagSet::kAll);
  sub->add_option("--samplers", o->samplers, "stage order, e.g. penalties;dry;top_k;typ_p;top_p;min_p;xtc;temperature");
  add_generation_flags(sub, *o);
  sub->add_flag("--json", o->json, "print one JSON object instead of streaming");
  sub->add_flag("-v,--verbose", o->verbose,
                "at the end, print the context's perf report on stderr (timings; for mixture-of-experts models how "
                "evenly the tokens were routed)");
  sub->callback([o, &exit_code] { exit_code = run_generate(*o); });
}

}  // namespace loom::cli
