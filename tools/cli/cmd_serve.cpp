// loom serve -m MODEL [--host 127.0.0.1] [--port 8080] [-np|--parallel 4] [-c CTX] [-b N] [-ub N]
//            [-t N] [-tb N] [-ctk/-ctv TYPE] [--api-key KEY[,KEY...]] [--api-key-file F]
//            [--max-queue N] [--timeout S] [--cache-dir DIR] [--embedding] [--pooling TYPE]
//            [--alias NAME] [--chat-template-file F] [--lora F[:SCALE]] [--context-shift]
//            [--max-body BYTES] [--ctx-checkpoints N] [--cache-ram MiB] [--swa-full]
// An OpenAI-compatible server (tools/server, docs/serving.md). Flags follow llama-server's
// spelling; main.cpp maps the multi-letter short forms (-np, -ub, -tb, -ctk, -ctv).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

#include "commands.h"
#include "server.h"

namespace loom::cli {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

void register_serve(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<server::ServeOptions>();
  auto keys = std::make_shared<std::string>();
  auto key_file = std::make_shared<std::string>();
  auto loras = std::make_shared<std::vector<std::string>>();
  auto ctk = std::make_shared<std::string>("f16");
  auto ctv = std::make_shared<std::string>("f16");
  CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (docs/serving.md)");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  sub->add_option("--host", o->host, "address to listen on (default 127.0.0.1)");
  sub->add_option("--port", o->port, "port (default 8080; 0 = any free port)")->check(CLI::Range(0, 65535));
  sub->add_option("--parallel", o->slots, "sequences generating at once (-np, default 4)")->check(CLI::Range(1, 128));
  sub->add_option("-c,--ctx-size", o->n_ctx, "KV cells in total, shared by every slot (default: the model's training context, at most 4096)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-b,--batch-size", o->n_batch, "most tokens per decode call (default 2048)")->check(CLI::PositiveNumber);
  sub->add_option("--ubatch-size", o->n_ubatch, "most tokens per forward pass (-ub, default 512)")->check(CLI::PositiveNumber);
  sub->add_option("--step-tokens", o->step_tokens, "tokens per scheduler step: running streams' tokens plus prompt chunks (default: -ub)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-t,--threads", o->threads, "threads for generation (default: all cores)")->check(CLI::NonNegativeNumber);
  sub->add_option("--threads-batch", o->threads_batch, "threads for prompts (-tb, default: --threads)")->check(CLI::NonNegativeNumber);
  sub->add_option("--cache-type-k", *ctk, "K cache type: f16, f32, bf16, q8_0, q4_0 (-ctk, default f16)");
  sub->add_option("--cache-type-v", *ctv, "V cache type (-ctv, default f16)");
  sub->add_option("--api-key", *keys, "require one of these keys (comma-separated) as 'Authorization: Bearer KEY'");
  sub->add_option("--api-key-file", *key_file, "file with one API key per line");
  sub->add_option("--max-queue", o->max_queue, "waiting requests beyond which new ones get 503 (default 256)")->check(CLI::NonNegativeNumber);
  sub->add_option("--timeout", o->timeout_s, "HTTP read/write timeout in seconds (default 600)")->check(CLI::PositiveNumber);
  sub->add_option("--cache-dir", o->cache_dir, "keep evicted and idle prompt prefixes in this folder, also across restarts");
  sub->add_flag("--no-prefix-cache", [o](int64_t) { o->prefix_cache = false; }, "do not share prompt prefixes between requests");
  sub->add_flag("--embedding,--embeddings", o->embedding, "serve /v1/embeddings and /v1/rerank instead of generation");
  sub->add_option("--pooling", o->pooling, "embedding pooling: mean, cls, last, rank (default: the model's)")
      ->check(CLI::IsMember({"mean", "cls", "last", "rank", "none"}));
  sub->add_option("--alias", o->alias, "model name reported to clients (default: the file name)");
  sub->add_option("--chat-template-file", o->chat_template_file, "Jinja chat template to use instead of the model's");
  sub->add_option("--lora", *loras, "LoRA adapter FILE[:SCALE] (repeatable)");
  sub->add_flag("--context-shift", o->context_shift, "when a sequence reaches its cells, drop the oldest half after n_keep and go on");
  sub->add_option("--ctx-checkpoints,--swa-checkpoints", o->ctx_checkpoints,
                  "recurrent / hybrid / sliding-window models: checkpoints kept per prefix path (default 8)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--cache-ram", o->cache_ram_mib, "MiB of checkpoints kept in all (default 8192)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  sub->add_flag("--swa-full", o->swa_full, "full-size caches for sliding-window layers (more memory, every prefix reusable)");
  sub->add_option("--max-body", o->max_body, "largest request body in bytes (default 8 MiB)")->check(CLI::PositiveNumber);
  sub->add_option("-n,--n-predict", o->n_predict, "default max_tokens for requests that give none (-1: as many as fit)")
      ->check(CLI::Range(-1, 1 << 30));
  sub->add_option("--http-threads", o->http_threads, "threads parsing requests (default 4)")->check(CLI::Range(1, 64));
  sub->add_option("--draft-model,--model-draft", o->draft_model,
                  "speculative decoding with this draft model (-md; same vocabulary) for requests without prompt lookup");
  sub->add_option("--draft-max", o->draft_max, "most draft tokens per step (default 16)")->check(CLI::Range(1, 32));
  sub->add_option("--draft-min", o->draft_min, "shorter drafts are not verified (default 0)")->check(CLI::Range(0, 32));
  sub->add_option("--ctx-size-draft", o->draft_n_ctx,
                  "cells of each slot's draft context (-cd; default: twice a slot's share of -c, at least 2048)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--draft-p-min", o->draft_p_min, "the draft stops at a token below this probability (default 0.75)")
      ->check(CLI::Range(0.0, 1.0));
  sub->callback([o, keys, key_file, loras, ctk, ctv, &exit_code] {
    for (const auto& k : split(*keys, ',')) o->api_keys.push_back(k);
    if (!key_file->empty()) {
      std::ifstream f(*key_file);
      if (!f) {
        std::fprintf(stderr, "loom: cannot open --api-key-file %s\n", key_file->c_str());
        exit_code = 1;
        return;
      }
      std::string line;
      while (std::getline(f, line)) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (!line.empty() && line[0] != '#') o->api_keys.push_back(line);
      }
    }
    static const std::pair<const char*, int32_t> kCacheTypes[] = {
        {"f32", LOOM_TYPE_F32}, {"f16", LOOM_TYPE_F16}, {"bf16", LOOM_TYPE_BF16}, {"q8_0", LOOM_TYPE_Q8_0}, {"q4_0", LOOM_TYPE_Q4_0}};
    for (const auto& [flag, name, dst] : {std::tuple{"--cache-type-k", ctk.get(), &o->type_k},
                                          std::tuple{"--cache-type-v", ctv.get(), &o->type_v}}) {
      std::string lower = *name;
      for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
      const auto* it = std::find_if(std::begin(kCacheTypes), std::end(kCacheTypes),
                                    [&](const auto& t) { return lower == t.first; });
      if (it == std::end(kCacheTypes)) {
        std::fprintf(stderr, "loom: %s %s: expected f32, f16, bf16, q8_0 or q4_0\n", flag, name->c_str());
        exit_code = 2;
        return;
      }
      *dst = it->second;
    }
    for (const std::string& l : *loras) {
      const size_t colon = l.rfind(':');
      float scale = 1.0f;
      std::string path = l;
      if (colon != std::string::npos && colon + 1 < l.size()) {
        char* end = nullptr;
        const float s = std::strtof(l.c_str() + colon + 1, &end);
        if (end && *end == '\0') {
          scale = s;
          path = l.substr(0, colon);
        }
      }
      o->loras.emplace_back(path, scale);
    }
    exit_code = server::run_server(*o, nullptr);
  });
}

}  // namespace loom::cli
