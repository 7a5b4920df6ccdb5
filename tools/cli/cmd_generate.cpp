// loom generate -m MODEL -p PROMPT [-n N] [-c CTX] [-t THREADS] [--temp T] [--seed S] [--json]
//               [sampler flags] [--grammar-file F | --json-schema F]
//               [--parallel N] [--context-shift --keep N] [--save-state F | --load-state F]
//               [--draft-model M [--draft-max K] [--draft-min N] [--draft-p-min P] | --lookup N]
// Streams the generated text (not the prompt) to stdout as it is produced.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "base/timer.h"
#include "chat/chat_prompt.h"
#include "commands.h"
#include "context/context.h"
#include "sample/json_schema.h"
#include "sample/sampler.h"
#include "speculative/speculative.h"
#include "vocab/stream_detokenizer.h"

namespace loom::cli {
namespace {

struct Opts {
  std::string model, prompt;
  int n_predict = 128, n_ctx = 0, threads = 0, top_k = 40;
  int n_swa = -1;  // --sliding-window
  float temp = 0.8f, top_p = 0.95f;
  int64_t seed = -1;
  bool json = false;
  SamplerParams sp;  // the sampler flags other than temp/top-k/top-p/seed
  std::string samplers, grammar_file, json_schema_file;
  int parallel = 1;
  bool chat = false;
  bool context_shift = false;
  int keep = 0;
  std::string save_state, load_state;
  // Speculative decoding (speculative/speculative.h): a draft model or prompt lookup.
  std::string draft_model;
  int draft_max = 16, draft_min = 0, lookup = 0;
  float draft_p_min = 0.75f;
};

Status read_text(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return Status::ok();
}

Expected<Sampler> build_sampler(const Opts& o, const Vocab& vocab, int n_ctx) {
  SamplerParams sp = o.sp;
  sp.temp = o.temp;
  sp.top_k = o.top_k;
  sp.top_p = o.top_p;
  sp.seed = o.seed >= 0 ? uint64_t(o.seed) : std::random_device{}();
  sp.n_ctx = n_ctx;
  if (!o.samplers.empty()) {
    LOOM_ASSIGN_OR_RETURN(sp.order, parse_sampler_order(o.samplers));
  }
  if (!o.grammar_file.empty()) {
    LOOM_RETURN_IF_ERROR(read_text(o.grammar_file, &sp.grammar));
  } else if (!o.json_schema_file.empty()) {
    std::string schema;
    LOOM_RETURN_IF_ERROR(read_text(o.json_schema_file, &schema));
    LOOM_ASSIGN_OR_RETURN(sp.grammar, json_schema_to_grammar(std::string_view(schema)));
  }
  return Sampler::create(sp, &vocab);
}

// Decodes tokens[from..] into sequence `seq` at positions from.., in batches of n_batch; the
// last token's logits are the output.
Status decode_tokens(Context& ctx, std::span<const int32_t> tokens, size_t from, int seq = 0) {
  for (size_t i = from; i < tokens.size(); i += size_t(ctx.n_batch())) {
    const size_t n = std::min(tokens.size() - i, size_t(ctx.n_batch()));
    LOOM_RETURN_IF_ERROR(ctx.decode(Batch::from_tokens(tokens.subspan(i, n), int32_t(i), seq)));
  }
  return Status::ok();
}

double rate(int64_t n, int64_t us) { return us > 0 ? 1e6 * double(n) / double(us) : 0.0; }

// An encoder-decoder (T5): the prompt goes through the encoder, the decoder starts from the
// model's decoder start token and generates. JSON prompt_ids are the encoder's tokens, ids the
// decoder's generated tokens (without the start token).
// Samples the next token from `logits` and accepts it; -1 at an end-of-generation token (not
// accepted). The one step every generation loop of this file takes.
Expected<int32_t> next_token(Sampler& sampler, const Vocab& vocab, std::span<const float> logits) {
  const int32_t tok = sampler.sample(logits);
  if (tok < 0) return invalid_argument("the grammar admits no token of this vocabulary here");
  if (vocab.is_eog(tok)) return -1;
  sampler.accept(tok);
  return tok;
}

int generate_encoder_decoder(const Opts& o, std::shared_ptr<const Model> model, const std::vector<int32_t>& prompt) {
  if (o.parallel > 1 || o.context_shift || !o.save_state.empty() || !o.load_state.empty()) {
    return fail(unsupported("--parallel, --context-shift and state files are not supported for encoder-decoder models"));
  }
  const Vocab& vocab = model->vocab();
  ContextParams cp;
  cp.n_ctx = o.n_ctx > 0 ? o.n_ctx : default_n_ctx(*model);
  cp.n_threads = o.threads;
  // The encoder runs the whole prompt in one pass.
  cp.n_ctx = std::max<int>(cp.n_ctx, int(prompt.size()));
  cp.n_batch = cp.n_ubatch = std::max<int>(512, int(prompt.size()));
  auto ctx_or = Context::create(model, cp);
  if (!ctx_or) return fail(ctx_or.status());
  Context& ctx = **ctx_or;
  auto sampler_or = build_sampler(o, vocab, ctx.n_ctx());
  if (!sampler_or) return fail(sampler_or.status());
  Sampler& sampler = *sampler_or;
  if (Status st = ctx.encode(Batch::from_tokens(prompt, 0)); !st) return fail(st);
  int32_t cur = ctx.decoder_start_token();
  sampler.accept(cur, /*accept_grammar=*/false);
  std::vector<int32_t> out;
  std::string text;
  StreamDetokenizerOptions dopt;
  dopt.continuation = true;
  StreamDetokenizer detok(vocab, dopt);
  auto emit = [&](const std::string& chunk) {
    text += chunk;
    if (!o.json && !chunk.empty()) {
      std::fwrite(chunk.data(), 1, chunk.size(), stdout);
      std::fflush(stdout);
    }
  };
  for (int i = 0; i < o.n_predict && i < ctx.n_ctx(); ++i) {
    int32_t one[1] = {cur};
    if (Status st = ctx.decode(Batch::from_tokens(one, int32_t(i))); !st) return fail(st);
    auto logits = ctx.logits(-1);
    if (!logits) return fail(logits.status());
    auto next = next_token(sampler, vocab, *logits);
    if (!next) return fail(next.status());
    const int32_t tok = *next;
    if (tok < 0) break;
    out.push_back(tok);
    cur = tok;
    auto chunk = detok.push(tok);
    if (!chunk) return fail(chunk.status());
    emit(*chunk);
    if (sampler.grammar_done()) break;
  }
  emit(detok.flush());
  const PerfCounters& perf = ctx.perf();
  const double prompt_tps = rate(perf.n_prompt_tokens, perf.t_prompt_us);
  const double gen_tps = rate(perf.n_gen_tokens, perf.t_gen_us);
  if (o.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = out;
    j["text"] = text;
    j["decoder_start"] = ctx.decoder_start_token();
    j["timings"] = {{"prompt_tps", prompt_tps}, {"gen_tps", gen_tps}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    if (o.json_schema_file.empty()) std::printf("\n");
    std::fprintf(stderr, "loom: encoded %zu tokens %.1f tok/s, generated %zu tokens %.1f tok/s\n", prompt.size(),
                 prompt_tps, out.size(), gen_tps);
  }
  return 0;
}

// One stream: prompt (possibly resumed from a state file), sampling loop with optional
// context shift, optional state save at the end.
int generate_one(const Opts& o, std::shared_ptr<const Model> model, std::vector<int32_t> prompt) {
  const Vocab& vocab = model->vocab();
  ContextParams cp;
  cp.n_ctx = o.n_ctx > 0 ? o.n_ctx : default_n_ctx(*model);
  cp.n_threads = o.threads;
  cp.n_swa = o.n_swa;
  cp.n_batch = std::min<int>(cp.n_ctx, std::max<int>(512, int(prompt.size())));
  auto ctx_or = Context::create(model, cp);
  if (!ctx_or) return fail(ctx_or.status());
  Context& ctx = **ctx_or;
  if (o.context_shift && ctx.recurrent()) {
    return fail(unsupported("--context-shift needs to drop old tokens, which a recurrent model's state cannot"));
  }
  std::unique_ptr<Drafter> drafter;
  if (!o.draft_model.empty() || o.lookup > 0) {
    if (ctx.recurrent()) return fail(unsupported("speculative decoding needs to drop rejected tokens, which a recurrent model's state cannot"));
    if (o.context_shift) return fail(invalid_argument("speculative decoding cannot be combined with --context-shift"));
    if (o.lookup > 0) {
      drafter = std::make_unique<LookupDrafter>(o.lookup, std::min(o.lookup, 2));
    } else {
      auto dm = load_model_or_report(o.draft_model);
      if (!dm) return 1;
      ContextParams dp = cp;
      dp.n_ctx = cp.n_ctx + o.draft_max + 1;
      auto d = ModelDrafter::create(dm, *model, dp, o.draft_p_min);
      if (!d) return fail(d.status());
      drafter = std::move(*d);
    }
  }
  SpecStats spec;

  // `history` is exactly what the KV cache holds, in order.
  std::vector<int32_t> history;
  size_t reused = 0;
  if (!o.load_state.empty()) {
    Status st = ctx.state_load_file(o.load_state, &history);
    if (!st) return fail(st);
    if (prompt.empty()) {
      if (history.empty()) return fail(invalid_argument(o.load_state + " holds no tokens to resume from (pass -p)"));
      prompt = history;  // no -p: resume the saved tokens
    }
    const bool resume = history.size() >= prompt.size() && !history.empty() &&
                        std::equal(prompt.begin(), prompt.end(), history.begin());
    if (resume && ctx.logits(-1).has_value()) {
      prompt = history;  // continue the saved generation: its logits are restored too
      reused = history.size();
    } else {
      while (reused < history.size() && reused < prompt.size() && history[reused] == prompt[reused]) ++reused;
      if (reused == prompt.size()) --reused;  // the last prompt token must be decoded for its logits
      if (!ctx.seq_rm(0, int(reused), -1).is_ok()) {
        // A recurrent state cannot forget its last tokens: reuse it only when the prompt extends it.
        if (!ctx.recurrent()) return fail(internal_error("cannot trim the restored cache"));
        ctx.kv_clear();
        reused = 0;
      }
      history.resize(reused);
    }
    std::fprintf(stderr, "loom: state %s: reused %zu of %zu prompt tokens\n", o.load_state.c_str(), reused, prompt.size());
  }
  if (int(prompt.size()) >= cp.n_ctx && !o.context_shift) {
    return fail(invalid_argument("the prompt has " + std::to_string(prompt.size()) +
                                 " tokens, which does not fit the context of " + std::to_string(cp.n_ctx) + " (use -c)"));
  }
  if (int(prompt.size()) >= cp.n_ctx) return fail(invalid_argument("the prompt does not fit the context (use -c)"));

  auto sampler_or = build_sampler(o, vocab, ctx.n_ctx());
  if (!sampler_or) return fail(sampler_or.status());
  Sampler& sampler = *sampler_or;
  for (int32_t t : prompt) sampler.accept(t, /*accept_grammar=*/false);

  if (reused < prompt.size()) {
    Status st = decode_tokens(ctx, prompt, reused);
    if (!st) return fail(st);
  }
  history = prompt;
  const size_t n_keep = std::min(prompt.size(), size_t(o.keep) + (!prompt.empty() && prompt[0] == vocab.bos() ? 1 : 0));

  std::vector<int32_t> out;
  std::string text;
  // Text is released only in whole UTF-8 characters, with the vocabulary's spacing rules.
  StreamDetokenizerOptions dopt;
  dopt.continuation = true;
  StreamDetokenizer detok(vocab, dopt);
  auto emit = [&](const std::string& chunk) {
    text += chunk;
    if (!o.json && !chunk.empty()) {
      std::fwrite(chunk.data(), 1, chunk.size(), stdout);
      std::fflush(stdout);
    }
  };
  bool pending = false;  // the last sampled token is not in the cache yet
  const int64_t t_gen0 = now_us();  // wall clock of generation: decode, sampling, detokenizing
  while (int(out.size()) < o.n_predict) {
    if (pending && drafter && int(history.size()) < ctx.n_ctx()) {
      // Speculative step: draft, verify in one decode, keep what the sampler picks (the same
      // tokens as plain decoding; speculative/speculative.h says why).
      const int room = ctx.n_ctx() - int(history.size()) - 1;
      const int left = o.n_predict - int(out.size()) - 1;
      const int k = std::min({o.draft_max, room, left, ctx.n_batch() - 1});
      std::vector<int32_t> draft;
      if (k > 0) {
        auto d = drafter->draft(history, k);
        if (!d) return fail(d.status());
        draft = std::move(*d);
        if (int(draft.size()) < o.draft_min) draft.clear();
      }
      int picked = 0;
      auto round = speculative_round(ctx, 0, history, draft, [&](std::span<const float> logits) -> Expected<SpecPick> {
        LOOM_ASSIGN_OR_RETURN(const int32_t tok, next_token(sampler, vocab, logits));
        if (tok < 0) return SpecPick{tok, false, true};
        ++picked;
        const bool stop = sampler.grammar_done() || int(out.size()) + picked >= o.n_predict ||
                          int(history.size()) + picked >= ctx.n_ctx();
        return SpecPick{tok, true, stop};
      });
      if (!round) return fail(round.status());
      spec.add(*round);
      for (int32_t tok : round->tokens) {
        out.push_back(tok);
        history.push_back(tok);
        auto chunk = detok.push(tok);
        if (!chunk) return fail(chunk.status());
        emit(*chunk);
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
          return fail(internal_error("context shift failed"));
        }
        history.erase(history.begin() + long(n_keep), history.begin() + long(n_keep + n_discard));
      }
      int32_t one[1] = {history.back()};
      Status st = ctx.decode(Batch::from_tokens(one, int32_t(history.size() - 1)));
      if (!st) return fail(st);
      pending = false;
    }
    auto logits = ctx.logits(-1);
    if (!logits) return fail(logits.status());
    auto next = next_token(sampler, vocab, *logits);
    if (!next) return fail(next.status());
    const int32_t tok = *next;
    if (tok < 0) break;
    out.push_back(tok);
    history.push_back(tok);
    pending = true;
    auto chunk = detok.push(tok);
    if (!chunk) return fail(chunk.status());
    emit(*chunk);
    if (sampler.grammar_done()) break;
    if (!o.context_shift && int(history.size()) >= ctx.n_ctx()) break;
  }
  emit(detok.flush());
  const double gen_wall_us = double(now_us() - t_gen0);
  if (!o.save_state.empty()) {
    // Decode the last generated token too, so a resumed run continues exactly where this ended.
    if (pending && int(history.size()) <= ctx.n_ctx()) {
      int32_t one[1] = {history.back()};
      Status st = ctx.decode(Batch::from_tokens(one, int32_t(history.size() - 1)));
      if (!st) return fail(st);
    } else if (pending) {
      history.pop_back();
    }
    Status st = ctx.state_save_file(o.save_state, history);
    if (!st) return fail(st);
  }
  const PerfCounters& perf = ctx.perf();
  const double prompt_tps = rate(perf.n_prompt_tokens, perf.t_prompt_us);
  const double gen_tps = rate(perf.n_gen_tokens, perf.t_gen_us);
  if (o.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = out;
    j["text"] = text;
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
  if (sampler.has_grammar() && !sampler.grammar()->matcher().can_end())
    std::fprintf(stderr, "loom: warning: generation stopped before the grammar was complete (raise -n)\n");
  return 0;
}

// N continuations of one prompt at once: the prompt is decoded once into sequence 0 and its
// cells are shared with sequences 1..N-1 (seq_cp); each step decodes one token per live
// sequence in a single batch, and every sequence samples with its own sampler (seed + s).
int generate_parallel(const Opts& o, std::shared_ptr<const Model> model, const std::vector<int32_t>& prompt) {
  const Vocab& vocab = model->vocab();
  const int n_seq = o.parallel;
  ContextParams cp;
  cp.n_seq_max = n_seq;
  const int64_t need = int64_t(prompt.size()) + int64_t(n_seq) * o.n_predict;
  cp.n_ctx = o.n_ctx > 0 ? o.n_ctx : int(std::min<int64_t>(std::max<int64_t>(need, default_n_ctx(*model)), model->hparams().n_ctx_train));
  cp.n_threads = o.threads;
  cp.n_swa = o.n_swa;
  cp.n_batch = std::min<int>(cp.n_ctx, std::max<int>({512, int(prompt.size()), n_seq}));
  if (int(prompt.size()) >= cp.n_ctx) return fail(invalid_argument("the prompt does not fit the context (use -c)"));
  auto ctx_or = Context::create(model, cp);
  if (!ctx_or) return fail(ctx_or.status());
  Context& ctx = **ctx_or;

  std::vector<Sampler> samplers;
  for (int s = 0; s < n_seq; ++s) {
    Opts so = o;
    so.seed = (o.seed >= 0 ? o.seed : int64_t(std::random_device{}())) + s;
    auto smp = build_sampler(so, vocab, ctx.n_ctx());
    if (!smp) return fail(smp.status());
    for (int32_t t : prompt) smp->accept(t, false);
    samplers.push_back(std::move(*smp));
  }
  Status st = decode_tokens(ctx, prompt, 0);
  if (!st) return fail(st);
  for (int s = 1; s < n_seq; ++s) {
    if (!(st = ctx.seq_cp(0, s, -1, -1))) return fail(st);
  }

  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(n_seq));
  std::vector<std::string> texts(static_cast<size_t>(n_seq));
  std::vector<int> row(static_cast<size_t>(n_seq), -1);  // batch row of each live sequence's last token; -1 = done
  const int64_t t0 = now_us();
  int64_t n_generated = 0;
  int32_t pos = int32_t(prompt.size());
  bool first = true;
  for (int step = 0; step < o.n_predict; ++step) {
    Batch batch;
    for (int s = 0; s < n_seq; ++s) {
      if (!first && row[size_t(s)] < 0) continue;
      auto logits = ctx.logits(first ? -1 : row[size_t(s)]);
      if (!logits) return fail(logits.status());
      const int32_t tok = samplers[size_t(s)].sample(*logits);
      if (tok < 0 || vocab.is_eog(tok) || samplers[size_t(s)].grammar_done()) {
        row[size_t(s)] = -1;
        if (tok < 0 || vocab.is_eog(tok)) continue;
      }
      samplers[size_t(s)].accept(tok);
      ids[size_t(s)].push_back(tok);
      texts[size_t(s)] += vocab.token_to_piece(tok, false);
      ++n_generated;
      if (step + 1 == o.n_predict || samplers[size_t(s)].grammar_done()) {
        row[size_t(s)] = -1;
        continue;
      }
      row[size_t(s)] = batch.size();
      batch.add(tok, pos, {s}, true);
    }
    first = false;
    if (batch.size() == 0) break;
    st = ctx.decode(batch);
    if (st.code() == StatusCode::kResourceExhausted) {
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
    j["timings"] = {{"prompt_tps", rate(ctx.perf().n_prompt_tokens, ctx.perf().t_prompt_us)},
                    {"gen_tps", agg_tps}, {"aggregate_tps", agg_tps}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    for (int s = 0; s < n_seq; ++s) std::printf("[sequence %d]%s\n", s, texts[size_t(s)].c_str());
    std::fprintf(stderr, "loom: %d sequences, %lld tokens in %.2f s: %.1f tok/s aggregate\n", n_seq,
                 static_cast<long long>(n_generated), dt / 1e6, agg_tps);
  }
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
  SamplerParams& sp = o->sp;
  sub->add_option("--min-p", sp.min_p, "drop tokens below p times the top probability; 0 = off (default 0.05)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--typical-p", sp.typical_p, "locally typical sampling; 1 = off (default 1)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--repeat-penalty", sp.penalty_repeat, "penalize repeated tokens; 1 = off (default 1)")->check(CLI::PositiveNumber);
  sub->add_option("--repeat-last-n", sp.penalty_last_n, "tokens the penalties look back over; 0 = off, -1 = context (default 64)")->check(CLI::Range(-1, 1 << 30));
  sub->add_option("--frequency-penalty", sp.penalty_freq, "subtract count * F from a repeated token's logit (default 0)");
  sub->add_option("--presence-penalty", sp.penalty_present, "subtract P from a repeated token's logit (default 0)");
  sub->add_option("--dry-multiplier", sp.dry.multiplier, "DRY repetition penalty multiplier; 0 = off (default 0)")->check(CLI::NonNegativeNumber);
  sub->add_option("--dry-base", sp.dry.base, "DRY base (default 1.75)")->check(CLI::Range(1.0, 1e9));
  sub->add_option("--dry-allowed-length", sp.dry.allowed_length, "DRY: repeats up to this length are free (default 2)")->check(CLI::NonNegativeNumber);
  sub->add_option("--dry-penalty-last-n", sp.dry.penalty_last_n, "DRY look-back; 0 = off, -1 = context (default -1)")->check(CLI::Range(-1, 1 << 30));
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
  sub->callback([o, &exit_code] {
    auto model = load_model_or_report(o->model);
    if (!model) {
      exit_code = 1;
      return;
    }
    std::vector<int32_t> prompt;
    if (o->prompt.empty() && o->load_state.empty()) {
      std::fprintf(stderr, "loom: --prompt is required (unless --load-state resumes a saved generation)\n");
      exit_code = 2;
      return;
    }
    if (o->prompt.empty() && model->hparams().arch == Arch::kT5) {
      exit_code = fail(unsupported("state files are not supported for encoder-decoder models: pass -p"));
      return;
    }
    if (o->prompt.empty()) {
      // Resume: the saved tokens are the prompt (generate_one restores them and their logits).
      if (o->parallel > 1) {
        exit_code = fail(invalid_argument("--parallel cannot be combined with state files"));
        return;
      }
      exit_code = generate_one(*o, model, {});
      return;
    }
    if (o->chat) {
      const chat::ChatMessage user{"user", o->prompt};
      auto rendered = chat::apply_chat_template(*model, std::span<const chat::ChatMessage>(&user, 1), /*add_generation_prompt=*/true);
      if (!rendered) {
        exit_code = fail(rendered.status());
        return;
      }
      prompt = chat::tokenize_chat_prompt(model->vocab(), *rendered);
    } else {
      prompt = model->vocab().tokenize(o->prompt, true, false);
    }
    if (prompt.empty()) {
      exit_code = fail(invalid_argument("the prompt produced no tokens"));
      return;
    }
    if (o->parallel > 1 && (!o->draft_model.empty() || o->lookup > 0)) {
      exit_code = fail(invalid_argument("--parallel cannot be combined with --draft-model or --lookup"));
      return;
    }
    if (model->hparams().arch == Arch::kT5) {
      if (!o->draft_model.empty() || o->lookup > 0) {
        exit_code = fail(unsupported("speculative decoding (--draft-model, --lookup) is not implemented for encoder-decoder models"));
        return;
      }
      exit_code = generate_encoder_decoder(*o, model, prompt);
      return;
    }
    if (o->parallel > 1 && (o->context_shift || !o->save_state.empty() || !o->load_state.empty())) {
      exit_code = fail(invalid_argument("--parallel cannot be combined with --context-shift or state files"));
      return;
    }
    exit_code = o->parallel > 1 ? generate_parallel(*o, model, prompt) : generate_one(*o, model, std::move(prompt));
  });
}

}  // namespace loom::cli
