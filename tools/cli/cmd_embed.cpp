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

// What `loom embed` computes and prints, as its flags set it.
struct EmbedOptions {
  std::string model, prompt, pooling;
  int threads = 0;
  bool normalize = false, json = false;
};

// The prompt's tokens; with rank pooling a tab separates a query from a document.
api::Expected<std::vector<api::Token>> embed_tokens(const EmbedOptions& o, const api::Model& model, bool rank) {
  if (const size_t tab = o.prompt.find('\t'); rank && tab != std::string::npos) {
    return model.tokenize_rerank(o.prompt.substr(0, tab), o.prompt.substr(tab + 1));
  }
  return model.tokenize(o.prompt, true, false);
}

// An embeddings context that holds n_tokens in one batch, pooled as --pooling says.
api::Expected<api::Context> embed_context(const EmbedOptions& o, const api::Model& model, size_t n_tokens) {
  static const std::map<std::string, int32_t> kPooling = {{"none", LOOM_POOLING_NONE},
                                                          {"mean", LOOM_POOLING_MEAN},
                                                          {"cls", LOOM_POOLING_CLS},
                                                          {"last", LOOM_POOLING_LAST},
                                                          {"rank", LOOM_POOLING_RANK}};
  api::ContextParams cp;
  cp.p.n_ctx = std::max<int>(int(n_tokens), 8);
  cp.p.n_batch = cp.p.n_ubatch = cp.p.n_ctx;
  cp.p.n_threads = o.threads;
  cp.p.embeddings = true;
  cp.p.pooling_type = !o.pooling.empty()                                 ? kPooling.at(o.pooling)
                      : model.pooling_type() != LOOM_POOLING_UNSPECIFIED ? LOOM_POOLING_UNSPECIFIED
                                                                         : LOOM_POOLING_MEAN;
  return api::Context::create(model, cp);
}

void print_row(const std::vector<float>& v) {
  for (size_t d = 0; d < v.size(); ++d) std::printf(d ? " %.6f" : "%.6f", double(v[d]));
  std::printf("\n");
}

// --pooling none: one embedding per token, printed as rows or put into j. 0, or 1 on an error.
int emit_token_rows(const EmbedOptions& o, api::Context& ctx, size_t n_tokens, nlohmann::json& j) {
  const int n_embd = ctx.n_embd();
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < int(n_tokens); ++i) {
    const float* e = ctx.embeddings(i);
    if (!e) return fail(last_error());
    rows.emplace_back(e, e + n_embd);
    if (o.normalize) l2_normalize(rows.back());
  }
  if (o.json) {
    j["embeddings"] = rows;
  } else {
    for (const auto& r : rows) print_row(r);
  }
  return 0;
}

// A pooled embedding (or a reranker's scores), printed or put into j. 0, or 1 on an error.
int emit_pooled(const EmbedOptions& o, const api::Model& model, api::Context& ctx, nlohmann::json& j) {
  const float* e = ctx.embeddings_seq(0);
  if (!e) return fail(last_error());
  const bool ranked = ctx.pooling() == LOOM_POOLING_RANK;
  std::vector<float> v(e, e + (ranked ? model.n_cls_out() : ctx.n_embd()));
  if (o.normalize) l2_normalize(v);
  if (o.json && ranked) {
    j.erase("n_embd");
    j["n_cls_out"] = v.size();
    j["scores"] = v;
    if (auto labels = model.cls_labels(); !labels.empty()) j["labels"] = labels;
  } else if (o.json) {
    j["embedding"] = v;
  } else {
    print_row(v);
  }
  return 0;
}

// `loom embed`: 0 on success, 1 on a runtime error.
int run_embed(const EmbedOptions& o) {
  auto model = load_model_or_report(o.model);
  if (!model) return 1;
  const bool rank = o.pooling == "rank" || (o.pooling.empty() && model->pooling_type() == LOOM_POOLING_RANK);
  if (rank && o.normalize) return fail("--normalize does not apply to rank scores");
  auto tokenized = embed_tokens(o, *model, rank);
  if (!tokenized) return fail(tokenized.status());
  const std::vector<api::Token>& ids = *tokenized;
  if (ids.empty()) return fail("the text produced no tokens");
  auto ctx = embed_context(o, *model, ids.size());
  if (!ctx) return fail(ctx.status());
  api::Batch batch(int32_t(ids.size()));
  batch.add_tokens(ids.data(), ids.size(), 0, 0, /*all_logits=*/true);
  api::Status st = ctx->causal() && !model->has_encoder() ? ctx->decode(batch) : ctx->encode(batch);
  if (!st) return fail(st);
  nlohmann::json j;
  j["n_embd"] = ctx->n_embd();
  const int rc =
      ctx->pooling() == LOOM_POOLING_NONE ? emit_token_rows(o, *ctx, ids.size(), j) : emit_pooled(o, *model, *ctx, j);
  if (rc != 0) return rc;
  if (o.json) std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

void register_embed(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<EmbedOptions>();
  CLI::App* sub = app.add_subcommand("embed", "Print the embedding of a text");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", o->prompt, "text to embed (rank pooling: QUERY<tab>DOCUMENT, or any text)")->required();
  sub->add_option("--pooling", o->pooling, "mean|cls|last|rank|none (default: the model's, else mean)")
      ->check(CLI::IsMember({"mean", "cls", "last", "rank", "none"}));
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  sub->add_flag("--normalize", o->normalize, "scale each embedding to unit L2 norm");
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->callback([o, &exit_code] { exit_code = run_embed(*o); });
}

}  // namespace loom::cli
