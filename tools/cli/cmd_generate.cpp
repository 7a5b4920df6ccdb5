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

// The sampler flags (llama.cpp's names and defaults), given to the sampler as JSON
// (loom_sampler_new's fields).
struct SamplerFlags {
  float min_p = 0.05f, typical_p = 1.0f, repeat_penalty = 1.0f, frequency_penalty = 0.0f, presence_penalty = 0.0f;
  int repeat_last_n = 64;
  float dry_multiplier = 0.0f, dry_base = 1.75f;
  int dry_allowed_length = 2, dry_penalty_last_n = -1;
  int mirostat = 0;
  float mirostat_eta = 0.1f, mirostat_tau = 5.0f;
  float xtc_probability = 0.0f, xtc_threshold = 0.1f;
  float dynatemp_range = 0.0f, dynatemp_exponent = 1.0f;
};

struct Opts {
  std::string model, prompt;
  int n_predict = 128, n_ctx = 0, threads = 0, top_k = 40;
  int n_swa = -1;  // --sliding-window
  float temp = 0.8f, top_p = 0.95f;
  int64_t seed = -1;
  bool json = false;
  bool verbose = false;  // the context's perf report (timings, expert routing) on stderr at the end
  SamplerFlags sf;  // the sampler flags other than temp/top-k/top-p/seed
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
  const SamplerFlags& f = o.sf;
  nlohmann::json j = {{"temperature", o.temp}, {"top_k", o.top_k}, {"top_p", o.top_p}, {"min_p", f.min_p},
                      {"typical_p", f.typical_p}, {"repeat_penalty", f.repeat_penalty},
                      {"repeat_last_n", f.repeat_last_n}, {"frequency_penalty", f.frequency_penalty},
                      {"presence_penalty", f.presence_penalty}, {"dry_multiplier", f.dry_multiplier},
                      {"dry_base", f.dry_base}, {"dry_allowed_length", f.dry_allowed_length},
                      {"dry_penalty_last_n", f.dry_penalty_last_n}, {"mirostat", f.mirostat},
                      {"mirostat_eta", f.mirostat_eta}, {"mirostat_tau", f.mirostat_tau},
                      {"xtc_probability", f.xtc_probability}, {"xtc_threshold", f.xtc_threshold},
                      {"dynatemp_range", f.dynatemp_range}, {"dynatemp_exponent", f.dynatemp_exponent},
                      {"seed", seed}, {"n_ctx", n_ctx}};
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
  if (tok == LOOM_TOKEN_NULL) return api::Status(LOOM_ERR_INVALID_ARGUMENT, "the grammar admits no token of this vocabulary here");
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
    std::fprintf(stderr, "loom: encoded %zu tokens %.1f tok/s, generated %zu tokens %.1f tok/s\n", prompt.size(),
                 prompt_tps, out.size(), gen_tps);
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

// One stream: prompt (possibly resumed from a state file), sampling loop with optional
// context shift, optional state save at the end.
int generate_one(const Opts& o, const api::Model& model, std::vector<Token> prompt) {
  api::ContextParams cp;
  cp.p.n_ctx = o.n_ctx > 0 ? o.n_ctx : default_n_ctx(model);
  cp.p.n_threads = o.threads;
  cp.p.n_swa = o.n_swa;
  cp.p.n_batch = std::min<int>(cp.p.n_ctx, std::max<int>(512, int(prompt.size())));
  auto ctx_or = api::Context::create(model, cp);
  if (!ctx_or) return fail(ctx_or.status());
  api::Context& ctx = *ctx_or;
  const bool recurrent = model.is_recurrent();
  if (o.context_shift && recurrent) {
    return fail("--context-shift needs to drop old tokens, which a recurrent model's state cannot");
  }
  std::optional<api::Drafter> drafter;
  std::optional<api::Model> draft_model;  // kept alive with the drafter
  if (!o.draft_model.empty() || o.lookup > 0) {
    if (recurrent) return fail("speculative decoding needs to drop rejected tokens, which a recurrent model's state cannot");
    if (o.context_shift) return fail("speculative decoding cannot be combined with --context-shift");
    if (o.lookup > 0) {
      auto d = api::Drafter::lookup(o.lookup, std::min(o.lookup, 2));
      if (!d) return fail(d.status());
      drafter = std::move(*d);
    } else {
      draft_model = load_model_or_report(o.draft_model);
      if (!draft_model) return 1;
      api::ContextParams dp = cp;
      dp.p.n_ctx = cp.p.n_ctx + o.draft_max + 1;
      auto d = api::Drafter::model(*draft_model, model, dp, o.draft_p_min);
      if (!d) return fail(d.status());
      drafter = std::move(*d);
    }
  }
  SpecStats spec;

  // `history` is exactly what the KV cache holds, in order.
  std::vector<Token> history;
  size_t reused = 0;
  if (!o.load_state.empty()) {
    auto loaded = ctx.load_state(o.load_state);
    if (!loaded) return fail(loaded.status());
    history = std::move(*loaded);
    if (prompt.empty()) {
      if (history.empty()) return fail(o.load_state + " holds no tokens to resume from (pass -p)");
      prompt = history;  // no -p: resume the saved tokens
    }
    const bool resume = history.size() >= prompt.size() && !history.empty() &&
                        std::equal(prompt.begin(), prompt.end(), history.begin());
    if (resume && loom_get_logits_ith(ctx.handle(), -1) != nullptr) {
      prompt = history;  // continue the saved generation: its logits are restored too
      reused = history.size();
    } else {
      while (reused < history.size() && reused < prompt.size() && history[reused] == prompt[reused]) ++reused;
      if (reused == prompt.size()) --reused;  // the last prompt token must be decoded for its logits
      if (!ctx.seq_rm(0, int(reused), -1).is_ok()) {
        // A recurrent state cannot forget its last tokens: reuse it only when the prompt extends it.
        if (!recurrent) return fail("cannot trim the restored cache");
        ctx.kv_clear();
        reused = 0;
      }
      history.resize(reused);
    }
    std::fprintf(stderr, "loom: state %s: reused %zu of %zu prompt tokens\n", o.load_state.c_str(), reused, prompt.size());
  }
  if (int(prompt.size()) >= cp.p.n_ctx && !o.context_shift) {
    return fail("the prompt has " + std::to_string(prompt.size()) + " tokens, which does not fit the context of " +
                std::to_string(cp.p.n_ctx) + " (use -c)");
  }
  if (int(prompt.size()) >= cp.p.n_ctx) return fail("the prompt does not fit the context (use -c)");

  auto sampler_or = build_sampler(o, model, ctx.n_ctx(), resolve_seed(o));
  if (!sampler_or) return fail(sampler_or.status());
  api::Sampler& sampler = *sampler_or;
  sampler.accept_history(prompt);

  if (reused < prompt.size()) {
    api::Status st = decode_tokens(ctx, prompt, reused);
    if (!st) return fail(st);
  }
  history = prompt;
  const size_t n_keep = std::min(prompt.size(), size_t(o.keep) + (!prompt.empty() && prompt[0] == model.bos() ? 1 : 0));
  const int32_t n_vocab = ctx.n_vocab();

  std::vector<Token> out;
  Output text{o.json, {}};
  // Text is released only in whole UTF-8 characters, with the vocabulary's spacing rules.
  auto detok = api::Detokenizer::create(model);
  if (!detok) return fail(detok.status());
  auto push_text = [&](Token tok) -> api::Status {
    auto chunk = detok->push(tok);
    if (!chunk) return chunk.status();
    text.emit(*chunk);
    return api::Status::ok();
  };
  api::Batch one(1);
  bool pending = false;  // the last sampled token is not in the cache yet
  const int64_t t_gen0 = now_us();  // wall clock of generation: decode, sampling, detokenizing
  while (int(out.size()) < o.n_predict) {
    if (pending && drafter && int(history.size()) < ctx.n_ctx()) {
      // Speculative step: draft, verify in one decode, keep what the sampler picks (the same
      // tokens as plain decoding: loom_speculative_round says why).
      const int room = ctx.n_ctx() - int(history.size()) - 1;
      const int left = o.n_predict - int(out.size()) - 1;
      const int k = std::min({o.draft_max, room, left, ctx.n_batch() - 1});
      std::vector<Token> draft;
      if (k > 0) {
        auto d = drafter->draft(history, k);
        if (!d) return fail(d.status());
        draft = std::move(*d);
        if (int(draft.size()) < o.draft_min) draft.clear();
      }
      int picked = 0;
      auto round = api::speculative_round(ctx, 0, history, draft, [&](const float* logits, int32_t nv) -> api::Expected<api::SpecPick> {
        auto tok = next_token(sampler, model, logits, nv);
        if (!tok) return tok.status();
        if (*tok < 0) return api::SpecPick{*tok, false, true};
        ++picked;
        const bool stop = sampler.grammar_done() || int(out.size()) + picked >= o.n_predict ||
                          int(history.size()) + picked >= ctx.n_ctx();
        return api::SpecPick{*tok, true, stop};
      });
      if (!round) return fail(round.status());
      spec.add(*round);
      for (Token tok : round->tokens) {
        out.push_back(tok);
        history.push_back(tok);
        if (api::Status st = push_text(tok); !st) return fail(st);
      }
      pending = !round->tokens.empty();
      if (round->stopped || int(history.size()) >= ctx.n_ctx()) break;
      continue;
    }
    if (pending) {
      if (int(history.size()) >= ctx.n_ctx()) {
        if (!o.context_shift) break;
        // Keep the first n_keep tokens, drop half of the rest, shift the remainder left.
        const size_t n_left = history.size() - n_keep;
        const size_t n_discard = std::max<size_t>(1, n_left / 2);
        if (!ctx.seq_rm(0, int(n_keep), int(n_keep + n_discard)).is_ok() ||
            !ctx.seq_add(0, int(n_keep + n_discard), -1, -int(n_discard)).is_ok()) {
          return fail("context shift failed");
        }
        history.erase(history.begin() + long(n_keep), history.begin() + long(n_keep + n_discard));
      }
      if (api::Status st = decode_one(ctx, one, history.back(), int32_t(history.size() - 1)); !st) return fail(st);
      pending = false;
    }
    auto next = next_token(sampler, model, ctx.logits(-1), n_vocab);
    if (!next) return fail(next.status());
    const Token tok = *next;
    if (tok < 0) break;
    out.push_back(tok);
    history.push_back(tok);
    pending = true;
    if (api::Status st = push_text(tok); !st) return fail(st);
    if (sampler.grammar_done()) break;
    if (!o.context_shift && int(history.size()) >= ctx.n_ctx()) break;
  }
  text.emit(detok->flush());
  const double gen_wall_us = double(now_us() - t_gen0);
  if (!o.save_state.empty()) {
    // Decode the last generated token too, so a resumed run continues exactly where this ended.
    if (pending && int(history.size()) <= ctx.n_ctx()) {
      if (api::Status st = decode_one(ctx, one, history.back(), int32_t(history.size() - 1)); !st) return fail(st);
    } else if (pending) {
      history.pop_back();
    }
    if (api::Status st = ctx.save_state(o.save_state, history); !st) return fail(st);
  }
  const loom_perf_data perf = ctx.perf();
  const double prompt_tps = rate(perf.n_prompt_tokens, perf.t_prompt_us);
  const double gen_tps = rate(perf.n_gen_tokens, perf.t_gen_us);
  if (o.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = out;
    j["text"] = text.text;
    // gen_tps: decode time only (the context's counters, as llama.cpp's eval time); gen_wall_tps:
    // tokens over the wall clock from the prompt's end to the last token, sampling included (as
    // llama-server's and loom serve's predicted_per_second).
    j["timings"] = {{"prompt_tps", prompt_tps}, {"gen_tps", gen_tps},
                    {"gen_wall_tps", gen_wall_us > 0 ? double(out.size()) * 1e6 / gen_wall_us : 0.0}};
    if (!o.load_state.empty()) j["reused_tokens"] = reused;
    if (drafter) {
      j["speculative"] = {{"drafter", drafter->describe()}, {"rounds", spec.rounds}, {"drafted", spec.drafted},
                          {"accepted", spec.accepted}, {"acceptance", spec.acceptance()},
                          {"tokens_per_round", spec.rounds > 0 ? double(spec.emitted) / double(spec.rounds) : 0.0}};
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    if (o.json_schema_file.empty()) std::printf("\n");
    std::fprintf(stderr, "loom: prompt %zu tokens %.1f tok/s, generated %zu tokens %.1f tok/s\n", prompt.size(),
                 prompt_tps, out.size(), gen_tps);
    if (drafter) {
      std::fprintf(stderr, "loom: speculative (%s): %lld rounds, %lld of %lld draft tokens accepted (%.1f %%), %.2f tokens per target decode, %.1f tok/s wall\n",
                   drafter->describe().c_str(), static_cast<long long>(spec.rounds), static_cast<long long>(spec.accepted),
                   static_cast<long long>(spec.drafted), 100.0 * spec.acceptance(),
                   spec.rounds > 0 ? double(spec.emitted) / double(spec.rounds) : 0.0,
                   gen_wall_us > 0 ? double(out.size()) * 1e6 / gen_wall_us : 0.0);
    }
  }
  if (o.verbose) loom_perf_print(ctx.handle());
  if (sampler.has_grammar() && !sampler.grammar_can_end())
    std::fprintf(stderr, "loom: warning: generation stopped before the grammar was complete (raise -n)\n");
  return 0;
}

// N continuations of one prompt at once: the prompt is decoded once into sequence 0 and its
// cells are shared with sequences 1..N-1 (seq_cp); each step decodes one token per live
// sequence in a single batch, and every sequence samples with its own sampler (seed + s).
int generate_parallel(const Opts& o, const api::Model& model, const std::vector<Token>& prompt) {
  const int n_seq = o.parallel;
  api::ContextParams cp;
  cp.p.n_seq_max = n_seq;
  const int64_t need = int64_t(prompt.size()) + int64_t(n_seq) * o.n_predict;
  cp.p.n_ctx = o.n_ctx > 0 ? o.n_ctx : int(std::min<int64_t>(std::max<int64_t>(need, default_n_ctx(model)), model.n_ctx_train()));
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
  const double dt = double(now_us() - t0);
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
    j["timings"] = {{"prompt_tps", rate(perf.n_prompt_tokens, perf.t_prompt_us)},
                    {"gen_tps", agg_tps}, {"aggregate_tps", agg_tps}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    for (int s = 0; s < n_seq; ++s) std::printf("[sequence %d]%s\n", s, texts[size_t(s)].c_str());
    std::fprintf(stderr, "loom: %d sequences, %lld tokens in %.2f s: %.1f tok/s aggregate\n", n_seq,
                 static_cast<long long>(n_generated), dt / 1e6, agg_tps);
  }
  if (o.verbose) loom_perf_print(ctx.handle());
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", o->prompt, "prompt text (optional with --load-state: resume the saved tokens)");
  sub->add_option("-n,--n-predict", o->n_predict, "tokens to generate (default 128)")->check(CLI::NonNegativeNumber);
  sub->add_option("-c,--ctx-size", o->n_ctx, "context size (default: training context, at most 4096)")->check(CLI::NonNegativeNumber);
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_sliding_window_option(sub, o->n_swa);
  sub->add_option("--temp", o->temp, "temperature; 0 = greedy (default 0.8)")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-k", o->top_k, "keep the k most likely tokens; 0 = all (default 40)")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", o->top_p, "nucleus sampling threshold (default 0.95)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--seed", o->seed, "random seed (default: random)");
  // Sampler chain (llama.cpp's flags and defaults).
  SamplerFlags& sp = o->sf;
  sub->add_option("--min-p", sp.min_p, "drop tokens below p times the top probability; 0 = off (default 0.05)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--typical-p", sp.typical_p, "locally typical sampling; 1 = off (default 1)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--repeat-penalty", sp.repeat_penalty, "penalize repeated tokens; 1 = off (default 1)")->check(CLI::PositiveNumber);
  sub->add_option("--repeat-last-n", sp.repeat_last_n, "tokens the penalties look back over; 0 = off, -1 = context (default 64)")->check(CLI::Range(-1, 1 << 30));
  sub->add_option("--frequency-penalty", sp.frequency_penalty, "subtract count * F from a repeated token's logit (default 0)");
  sub->add_option("--presence-penalty", sp.presence_penalty, "subtract P from a repeated token's logit (default 0)");
  sub->add_option("--dry-multiplier", sp.dry_multiplier, "DRY repetition penalty multiplier; 0 = off (default 0)")->check(CLI::NonNegativeNumber);
  sub->add_option("--dry-base", sp.dry_base, "DRY base (default 1.75)")->check(CLI::Range(1.0, 1e9));
  sub->add_option("--dry-allowed-length", sp.dry_allowed_length, "DRY: repeats up to this length are free (default 2)")->check(CLI::NonNegativeNumber);
  sub->add_option("--dry-penalty-last-n", sp.dry_penalty_last_n, "DRY look-back; 0 = off, -1 = context (default -1)")->check(CLI::Range(-1, 1 << 30));
  sub->add_option("--mirostat", sp.mirostat, "mirostat sampling: 0 off, 1 v1, 2 v2 (default 0)")->check(CLI::Range(0, 2));
  sub->add_option("--mirostat-lr", sp.mirostat_eta, "mirostat learning rate eta (default 0.1)")->check(CLI::NonNegativeNumber);
  sub->add_option("--mirostat-ent", sp.mirostat_tau, "mirostat target entropy tau (default 5)")->check(CLI::NonNegativeNumber);
  sub->add_option("--xtc-probability", sp.xtc_probability, "XTC: chance of removing the top choices; 0 = off (default 0)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--xtc-threshold", sp.xtc_threshold, "XTC: probability threshold (default 0.1)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--dynatemp-range", sp.dynatemp_range, "dynamic temperature in [temp - R, temp + R]; 0 = off (default 0)")->check(CLI::NonNegativeNumber);
  sub->add_option("--dynatemp-exp", sp.dynatemp_exponent, "dynamic temperature exponent (default 1)")->check(CLI::NonNegativeNumber);
  sub->add_option("--samplers", o->samplers, "stage order, e.g. penalties;dry;top_k;typ_p;top_p;min_p;xtc;temperature");
  auto* gf = sub->add_option("--grammar-file", o->grammar_file, "constrain the output with a GBNF grammar file");
  sub->add_option("--json-schema", o->json_schema_file, "constrain the output to JSON matching this JSON schema file (stdout holds only the JSON)")->excludes(gf);
  sub->add_option("--parallel", o->parallel, "generate N continuations at once, sharing the prompt's cache cells")
      ->check(CLI::Range(1, 256));
  sub->add_flag("--chat", o->chat, "apply the model's chat template to the prompt as one user message");
  sub->add_flag("--context-shift", o->context_shift, "when the context is full, drop the oldest half (after --keep) and go on");
  sub->add_option("--keep", o->keep, "prompt tokens kept by --context-shift (BOS is always kept)")->check(CLI::NonNegativeNumber);
  auto* save = sub->add_option("--save-state", o->save_state, "save the context (cache + tokens) to FILE at the end");
  sub->add_option("--load-state", o->load_state, "restore a saved context and reuse its tokens (resumes a saved generation)")
      ->excludes(save);
  auto* dm = sub->add_option("--draft-model", o->draft_model, "speculative decoding with this draft model (same vocabulary); greedy and seeded output are unchanged");
  sub->add_option("--draft-max", o->draft_max, "most tokens drafted per step (default 16)")->check(CLI::Range(1, 256));
  sub->add_option("--draft-min", o->draft_min, "drafts shorter than this are not verified (default 0)")->check(CLI::Range(0, 256));
  sub->add_option("--draft-p-min", o->draft_p_min, "the draft model stops at a token below this probability (default 0.75)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--lookup", o->lookup, "speculative decoding by prompt lookup: drafts from the longest repeated n-gram up to N tokens (no draft model)")
      ->check(CLI::Range(1, 64))->excludes(dm);
  sub->add_flag("--json", o->json, "print one JSON object instead of streaming");
  sub->add_flag("-v,--verbose", o->verbose,
                "at the end, print the context's perf report on stderr (timings; for mixture-of-experts models how "
                "evenly the tokens were routed)");
  sub->callback([o, &exit_code] {
    auto model = load_model_or_report(o->model);
    if (!model) {
      exit_code = 1;
      return;
    }
    const bool enc_dec = model->has_encoder() && model->has_decoder();
    if (o->prompt.empty() && o->load_state.empty()) {
      std::fprintf(stderr, "loom: --prompt is required (unless --load-state resumes a saved generation)\n");
      exit_code = 2;
      return;
    }
    if (o->prompt.empty() && enc_dec) {
      exit_code = fail("state files are not supported for encoder-decoder models: pass -p");
      return;
    }
    if (o->prompt.empty()) {
      // Resume: the saved tokens are the prompt (generate_one restores them and their logits).
      if (o->parallel > 1) {
        exit_code = fail("--parallel cannot be combined with state files");
        return;
      }
      exit_code = generate_one(*o, *model, {});
      return;
    }
    api::Expected<std::vector<Token>> prompt_or = std::vector<Token>{};
    if (o->chat) {
      const nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", o->prompt}}});
      auto rendered = model->apply_chat_template(messages.dump(), /*add_generation_prompt=*/true);
      if (!rendered) {
        exit_code = fail(rendered.status());
        return;
      }
      prompt_or = model->tokenize_chat(*rendered);
    } else {
      prompt_or = model->tokenize(o->prompt, true, false);
    }
    if (!prompt_or) {
      exit_code = fail(prompt_or.status());
      return;
    }
    std::vector<Token> prompt = std::move(*prompt_or);
    if (prompt.empty()) {
      exit_code = fail("the prompt produced no tokens");
      return;
    }
    if (o->parallel > 1 && (!o->draft_model.empty() || o->lookup > 0)) {
      exit_code = fail("--parallel cannot be combined with --draft-model or --lookup");
      return;
    }
    if (enc_dec) {
      if (!o->draft_model.empty() || o->lookup > 0) {
        exit_code = fail("speculative decoding (--draft-model, --lookup) is not implemented for encoder-decoder models");
        return;
      }
      exit_code = generate_encoder_decoder(*o, *model, prompt);
      return;
    }
    if (o->parallel > 1 && (o->context_shift || !o->save_state.empty() || !o->load_state.empty())) {
      exit_code = fail("--parallel cannot be combined with --context-shift or state files");
      return;
    }
    exit_code = o->parallel > 1 ? generate_parallel(*o, *model, prompt) : generate_one(*o, *model, std::move(prompt));
  });
}

}  // namespace loom::cli
