// loom generate -m MODEL -p PROMPT [-n N] [-c CTX] [-t THREADS] [--temp T] [--seed S] [--json]
// Streams the generated text (not the prompt) to stdout as it is produced.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <random>

#include "commands.h"
#include "context/context.h"
#include "sample/sampler.h"

namespace loom::cli {

void register_generate(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string model, prompt;
    int n_predict = 128, n_ctx = 0, threads = 0, top_k = 40;
    float temp = 0.8f, top_p = 0.95f;
    int64_t seed = -1;
    bool json = false;
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

    SamplerParams sp;
    sp.temp = o->temp;
    sp.top_k = o->top_k;
    sp.top_p = o->top_p;
    sp.seed = o->seed >= 0 ? uint64_t(o->seed) : std::random_device{}();
    Sampler sampler(sp);

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
      if (vocab.is_eog(tok)) break;
      out.push_back(tok);
      const std::string piece = vocab.token_to_piece(tok, false);
      text += piece;
      if (!o->json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
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
      std::printf("\n");
      std::fprintf(stderr, "loom: prompt %lld tokens %.1f tok/s, generated %zu tokens %.1f tok/s\n",
                   static_cast<long long>(prompt.size()), prompt_tps, out.size(), gen_tps);
    }
    exit_code = 0;
  });
}

}  // namespace loom::cli
