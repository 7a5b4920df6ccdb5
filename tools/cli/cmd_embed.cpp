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
    const bool rank = o->pooling == "rank" || (o->pooling.empty() && model->pooling_type() == LOOM_POOLING_RANK);
    if (rank && o->normalize) {
      fail("--normalize does not apply to rank scores");
      return;
    }
    api::Expected<std::vector<api::Token>> tokenized = std::vector<api::Token>{};
    if (const size_t tab = o->prompt.find('\t'); rank && tab != std::string::npos) {
      tokenized = model->tokenize_rerank(o->prompt.substr(0, tab), o->prompt.substr(tab + 1));
    } else {
      tokenized = model->tokenize(o->prompt, true, false);
    }
    if (!tokenized) {
      fail(tokenized.status());
      return;
    }
    const std::vector<api::Token>& ids = *tokenized;
    if (ids.empty()) {
      fail("the text produced no tokens");
      return;
    }
    static const std::map<std::string, int32_t> kPooling = {{"none", LOOM_POOLING_NONE},
                                                            {"mean", LOOM_POOLING_MEAN},
                                                            {"cls", LOOM_POOLING_CLS},
                                                            {"last", LOOM_POOLING_LAST},
                                                            {"rank", LOOM_POOLING_RANK}};
    api::ContextParams cp;
    cp.p.n_ctx = std::max<int>(int(ids.size()), 8);
    cp.p.n_batch = cp.p.n_ubatch = cp.p.n_ctx;
    cp.p.n_threads = o->threads;
    cp.p.embeddings = true;
    cp.p.pooling_type = !o->pooling.empty()                                 ? kPooling.at(o->pooling)
                        : model->pooling_type() != LOOM_POOLING_UNSPECIFIED ? LOOM_POOLING_UNSPECIFIED
                                                                            : LOOM_POOLING_MEAN;
    auto ctx = api::Context::create(*model, cp);
    if (!ctx) {
      fail(ctx.status());
      return;
    }
    api::Batch batch(int32_t(ids.size()));
    batch.add_tokens(ids.data(), ids.size(), 0, 0, /*all_logits=*/true);
    api::Status st = ctx->causal() && !model->has_encoder() ? ctx->decode(batch) : ctx->encode(batch);
    if (!st) {
      fail(st);
      return;
    }
    nlohmann::json j;
    const int n_embd = ctx->n_embd();
    j["n_embd"] = n_embd;
    if (ctx->pooling() == LOOM_POOLING_NONE) {
      std::vector<std::vector<float>> rows;
      for (int i = 0; i < int(ids.size()); ++i) {
        const float* e = ctx->embeddings(i);
        if (!e) {
          fail(last_error());
          return;
        }
        rows.emplace_back(e, e + n_embd);
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
      const float* e = ctx->embeddings_seq(0);
      if (!e) {
        fail(last_error());
        return;
      }
      const bool ranked = ctx->pooling() == LOOM_POOLING_RANK;
      std::vector<float> v(e, e + (ranked ? model->n_cls_out() : n_embd));
      if (o->normalize) l2_normalize(v);
      if (o->json && ranked) {
        j.erase("n_embd");
        j["n_cls_out"] = v.size();
        j["scores"] = v;
        if (auto labels = model->cls_labels(); !labels.empty()) j["labels"] = labels;
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
