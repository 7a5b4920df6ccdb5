// loom generate -m MODEL -p PROMPT [-n N] [-c CTX] [-t THREADS] [--temp T] [--seed S] [--json]
//               [sampler flags] [--grammar-file F | --json-schema F]
// Streams the generated text (not the prompt) to stdout as it is produced.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "commands.h"
#include "context/context.h"
#include "sample/json_schema.h"
#include "sample/sampler.h"

namespace loom::cli {

void register_generate(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string model, prompt;
    int n_predict = 128, n_ctx = 0, threads = 0, top_k = 40;
    float temp = 0.8f, top_p = 0.95f;
    int64_t seed = -1;
    bool json = false;
    SamplerParams sp;  // the sampler flags other than temp/top-k/top-p/seed
    std::string samplers, grammar_file, json_schema_file;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", o->prompt, "prompt text")->required();
  sub->add_option("-n,--n-predict", o->n_predict, "tokens to generate (default 128)")->check(CLI::NonNegativeNumber);
  sub->add_option("-c,--ctx-size", o->n_ctx, "context size (default: training context, at most 4096)")->check(CLI::NonNegativeNumber);
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
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
  sub->add_flag("--json", o->json, "print one JSON object instead of streaming");
  sub->callback([o, &exit_code] {
    exit_code = 1;
    auto model = load_model_or_report(o->model);
    if (!model) return;
    const Vocab& vocab = model->vocab();
    std::vector<int32_t> prompt = vocab.tokenize(o->prompt, true, false);
    if (prompt.empty()) { fail(invalid_argument("the prompt produced no tokens")); return; }

    ContextParams cp;
    cp.n_ctx = o->n_ctx > 0 ? o->n_ctx : default_n_ctx(*model);
    cp.n_threads = o->threads;
    if (int(prompt.size()) >= cp.n_ctx) {
      fail(invalid_argument("the prompt has " + std::to_string(prompt.size()) + " tokens, which does not fit the context of " +
                            std::to_string(cp.n_ctx) + " (use -c)"));
      return;
    }
    cp.n_batch = std::min<int>(cp.n_ctx, std::max<int>(512, int(prompt.size())));
    auto ctx_or = Context::create(model, cp);
    if (!ctx_or) { fail(ctx_or.status()); return; }
    Context& ctx = **ctx_or;

    SamplerParams sp = o->sp;
    sp.temp = o->temp;
    sp.top_k = o->top_k;
    sp.top_p = o->top_p;
    sp.seed = o->seed >= 0 ? uint64_t(o->seed) : std::random_device{}();
    sp.n_ctx = ctx.n_ctx();
    if (!o->samplers.empty()) {
      auto order = parse_sampler_order(o->samplers);
      if (!order) { fail(order.status()); return; }
      sp.order = *order;
    }
    auto read_text = [](const std::string& path, std::string* out) -> Status {
      std::ifstream f(path, std::ios::binary);
      if (!f) return not_found("cannot open " + path);
      std::stringstream ss;
      ss << f.rdbuf();
      *out = ss.str();
      return Status::ok();
    };
    if (!o->grammar_file.empty()) {
      Status st = read_text(o->grammar_file, &sp.grammar);
      if (!st) { fail(st); return; }
    } else if (!o->json_schema_file.empty()) {
      std::string schema;
      Status st = read_text(o->json_schema_file, &schema);
      if (!st) { fail(st); return; }
      auto g = json_schema_to_grammar(std::string_view(schema));
      if (!g) { fail(g.status()); return; }
      sp.grammar = *g;
    }
    auto sampler_or = Sampler::create(sp, &vocab);
    if (!sampler_or) { fail(sampler_or.status()); return; }
    Sampler& sampler = *sampler_or;
    for (int32_t t : prompt) sampler.accept(t, /*accept_grammar=*/false);

    // The prompt in batches of n_batch.
    for (size_t i = 0; i < prompt.size(); i += size_t(ctx.n_batch())) {
      const size_t n = std::min(prompt.size() - i, size_t(ctx.n_batch()));
      Status st = ctx.decode(Batch::from_tokens(std::span(prompt).subspan(i, n), int32_t(i)));
      if (!st) { fail(st); return; }
    }
    std::vector<int32_t> out;
    std::string text;
    int32_t pos = int32_t(prompt.size());
    for (int i = 0; i < o->n_predict && pos < ctx.n_ctx(); ++i) {
      auto logits = ctx.logits(-1);
      if (!logits) { fail(logits.status()); return; }
      const int32_t tok = sampler.sample(*logits);
      if (tok < 0) { fail(invalid_argument("the grammar admits no token of this vocabulary here")); return; }
      if (vocab.is_eog(tok)) break;
      sampler.accept(tok);
      out.push_back(tok);
      const std::string piece = vocab.token_to_piece(tok, false);
      text += piece;
      if (!o->json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      if (sampler.grammar_done()) break;
      if (i + 1 == o->n_predict || pos + 1 > ctx.n_ctx()) break;
      int32_t one[1] = {tok};
      Status st = ctx.decode(Batch::from_tokens(one, pos++));
      if (!st) { fail(st); return; }
    }
    const PerfCounters& perf = ctx.perf();
    const double prompt_tps = perf.t_prompt_us ? 1e6 * double(perf.n_prompt_tokens) / double(perf.t_prompt_us) : 0.0;
    const double gen_tps = perf.t_gen_us ? 1e6 * double(perf.n_gen_tokens) / double(perf.t_gen_us) : 0.0;
    if (o->json) {
      nlohmann::json j;
      j["prompt_ids"] = prompt;
      j["ids"] = out;
      j["text"] = text;
      j["timings"] = {{"prompt_tps", prompt_tps}, {"gen_tps", gen_tps}};
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      if (o->json_schema_file.empty()) std::printf("\n");
      std::fprintf(stderr, "loom: prompt %lld tokens %.1f tok/s, generated %zu tokens %.1f tok/s\n",
                   static_cast<long long>(prompt.size()), prompt_tps, out.size(), gen_tps);
    }
    if (sampler.has_grammar() && !sampler.grammar()->matcher().can_end())
      std::fprintf(stderr, "loom: warning: generation stopped before the grammar was complete (raise -n)\n");
    exit_code = 0;
  });
}

}  // namespace loom::cli
