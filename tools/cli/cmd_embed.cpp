// loom embed -m MODEL -p TEXT [--pooling mean|cls|last|rank|none] [--normalize] [--json]
// Embeddings of a text: pooled per the flag (default: the model's pooling, else mean), or one
// row per token with --pooling none. Rank pooling (rerankers) prints the classification head's
// raw score(s) instead; a tab in TEXT separates a query from a document, which are then joined
// as /v1/rerank joins them ([BOS] query [EOS] [SEP] document [EOS]), llama-embedding's "\t".
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

#include "commands.h"
#include "context/context.h"

namespace loom::cli {
namespace {

void l2_normalize(std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  if (s > 0) {
    const float inv = float(1.0 / std::sqrt(s));
    for (float& x : v) x *= inv;
  }
}

}  // namespace

void register_embed(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string model, prompt, pooling;
    int threads = 0;
    bool normalize = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("embed", "Print the embedding of a text");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", o->prompt, "text to embed (rank pooling: QUERY<tab>DOCUMENT, or any text)")->required();
  sub->add_option("--pooling", o->pooling, "mean|cls|last|rank|none (default: the model's, else mean)")
      ->check(CLI::IsMember({"mean", "cls", "last", "rank", "none"}));
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  sub->add_flag("--normalize", o->normalize, "scale each embedding to unit L2 norm");
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->callback([o, &exit_code] {
    exit_code = 1;
    auto model = load_model_or_report(o->model);
    if (!model) return;
    const bool rank = o->pooling == "rank" || (o->pooling.empty() && model->hparams().pooling_type == 4);
    if (rank && o->normalize) { fail(invalid_argument("--normalize does not apply to rank scores")); return; }
    const Vocab& vocab = model->vocab();
    std::vector<int32_t> ids;
    if (const size_t tab = o->prompt.find('\t'); rank && tab != std::string::npos) {
      ids = vocab.rerank_input(vocab.tokenize(std::string_view(o->prompt).substr(0, tab), false, false),
                               vocab.tokenize(std::string_view(o->prompt).substr(tab + 1), false, false));
    } else {
      ids = vocab.tokenize(o->prompt, true, false);
    }
    if (ids.empty()) { fail(invalid_argument("the text produced no tokens")); return; }
    ContextParams cp;
    cp.n_ctx = std::max<int>(int(ids.size()), 8);
    cp.n_batch = cp.n_ubatch = cp.n_ctx;
    cp.n_threads = o->threads;
    cp.embeddings = true;
    cp.pooling = !o->pooling.empty() ? *parse_pooling(o->pooling)
                 : model->hparams().pooling_type >= 0 ? Pooling::kUnspecified : Pooling::kMean;
    auto ctx_or = Context::create(model, cp);
    if (!ctx_or) { fail(ctx_or.status()); return; }
    Context& ctx = **ctx_or;
    Batch batch = Batch::from_tokens(ids, 0, 0, /*all_outputs=*/true);
    // Encoder (non-causal) models embed with encode, a T5 with its encoder; decoders with a causal decode.
    Status st = ctx.causal() && !model->hparams().has_encoder() ? ctx.decode(batch) : ctx.encode(batch);
    if (!st) { fail(st); return; }
    nlohmann::json j;
    j["n_embd"] = ctx.n_embd();
    if (ctx.pooling() == Pooling::kNone) {
      std::vector<std::vector<float>> rows;
      for (int i = 0; i < int(ids.size()); ++i) {
        auto e = ctx.embeddings(i);
        if (!e) { fail(e.status()); return; }
        rows.emplace_back(e->begin(), e->end());
        if (o->normalize) l2_normalize(rows.back());
      }
      if (o->json) {
        j["embeddings"] = rows;
      } else {
        for (const auto& r : rows) {
          for (size_t d = 0; d < r.size(); ++d) std::printf(d ? " %.6f" : "%.6f", double(r[d]));
          std::printf("\n");
        }
      }
    } else {
      auto e = ctx.embeddings_seq(0);
      if (!e) { fail(e.status()); return; }
      std::vector<float> v(e->begin(), e->end());
      if (o->normalize) l2_normalize(v);
      if (o->json && ctx.pooling() == Pooling::kRank) {
        j.erase("n_embd");
        j["n_cls_out"] = v.size();
        j["scores"] = v;
        if (!model->hparams().cls_labels.empty()) j["labels"] = model->hparams().cls_labels;
      } else if (o->json) {
        j["embedding"] = v;
      } else {
        for (size_t d = 0; d < v.size(); ++d) std::printf(d ? " %.6f" : "%.6f", double(v[d]));
        std::printf("\n");
      }
    }
    if (o->json) std::cout << j.dump() << "\n";
    exit_code = 0;
  });
}

}  // namespace loom::cli
