// loom logits -m MODEL -p PROMPT [--json]: logits after the last prompt token (one batch). For an
// encoder-decoder (T5): the prompt is encoded and these are the first decoder step's logits
// (after the decoder start token).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "commands.h"
#include "context/context.h"

namespace loom::cli {

void register_logits(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string model, prompt;
    int n_ctx = 0, threads = 0, n_swa = -1;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("logits", "Print the logits after the last prompt token");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", o->prompt, "prompt text")->required();
  sub->add_option("-c,--ctx-size", o->n_ctx, "context size (default: training context, at most 4096)")->check(CLI::NonNegativeNumber);
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_sliding_window_option(sub, o->n_swa);
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->callback([o, &exit_code] {
    exit_code = 1;
    auto model = load_model_or_report(o->model);
    if (!model) return;
    std::vector<int32_t> ids = model->vocab().tokenize(o->prompt, true, false);
    if (ids.empty()) { fail(invalid_argument("the prompt produced no tokens")); return; }
    ContextParams cp;
    cp.n_ctx = o->n_ctx > 0 ? o->n_ctx : std::max<int>(default_n_ctx(*model), int(ids.size()));
    cp.n_batch = std::max<int>(int(ids.size()), 1);
    cp.n_ubatch = cp.n_batch;
    cp.n_threads = o->threads;
    cp.n_swa = o->n_swa;
    auto ctx = Context::create(model, cp);
    if (!ctx) { fail(ctx.status()); return; }
    if (model->hparams().arch == Arch::kT5) {
      if (Status st = (*ctx)->encode(Batch::from_tokens(ids, 0)); !st) { fail(st); return; }
      const int32_t start[1] = {(*ctx)->decoder_start_token()};
      if (Status st = (*ctx)->decode(Batch::from_tokens(start, 0)); !st) { fail(st); return; }
    } else if (Status st = (*ctx)->decode(Batch::from_tokens(ids, 0)); !st) {
      fail(st);
      return;
    }
    auto logits = (*ctx)->logits(-1);
    if (!logits) { fail(logits.status()); return; }
    if (o->json) {
      nlohmann::json j;
      j["n_vocab"] = logits->size();
      j["logits"] = std::vector<float>(logits->begin(), logits->end());
      std::cout << j.dump() << "\n";
    } else {
      for (size_t i = 0; i < logits->size(); ++i) std::printf("%zu %.6f\n", i, double((*logits)[i]));
    }
    exit_code = 0;
  });
}

}  // namespace loom::cli
