// loom logits -m MODEL -p PROMPT [--json]: logits after the last prompt token (one batch). For an
// encoder-decoder (T5): the prompt is encoded and these are the first decoder step's logits
// (after the decoder start token).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "commands.h"

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
  sub->add_option("-c,--ctx-size", o->n_ctx, "context size (default: training context, at most 4096)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_sliding_window_option(sub, o->n_swa);
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->callback([o, &exit_code] {
    exit_code = 1;
    auto model = load_model_or_report(o->model);
    if (!model) return;
    auto tokenized = model->tokenize(o->prompt, true, false);
    if (!tokenized) {
      fail(tokenized.status());
      return;
    }
    const std::vector<api::Token>& ids = *tokenized;
    if (ids.empty()) {
      fail("the prompt produced no tokens");
      return;
    }
    api::ContextParams cp;
    cp.p.n_ctx = o->n_ctx > 0 ? o->n_ctx : std::max<int>(default_n_ctx(*model), int(ids.size()));
    cp.p.n_batch = std::max<int>(int(ids.size()), 1);
    cp.p.n_ubatch = cp.p.n_batch;
    cp.p.n_threads = o->threads;
    cp.p.n_swa = o->n_swa;
    auto ctx = api::Context::create(*model, cp);
    if (!ctx) {
      fail(ctx.status());
      return;
    }
    api::Batch batch(int32_t(ids.size()));
    batch.add_tokens(ids.data(), ids.size(), 0);
    batch.set_logits_last();
    if (model->has_encoder() && model->has_decoder()) {
      if (api::Status st = ctx->encode(batch); !st) {
        fail(st);
        return;
      }
      api::Batch start(1);
      start.add(model->decoder_start(), 0, 0, true);
      if (api::Status st = ctx->decode(start); !st) {
        fail(st);
        return;
      }
    } else if (api::Status st = ctx->decode(batch); !st) {
      fail(st);
      return;
    }
    const float* logits = ctx->logits(-1);
    if (!logits) {
      fail(last_error());
      return;
    }
    const size_t n_vocab = size_t(ctx->n_vocab());
    if (o->json) {
      nlohmann::json j;
      j["n_vocab"] = n_vocab;
      j["logits"] = std::vector<float>(logits, logits + n_vocab);
      std::cout << j.dump() << "\n";
    } else {
      for (size_t i = 0; i < n_vocab; ++i) std::printf("%zu %.6f\n", i, double(logits[i]));
    }
    exit_code = 0;
  });
}

}  // namespace loom::cli
