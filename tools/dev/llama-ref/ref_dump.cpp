// Reference outputs from real llama.cpp, linked against the static libraries that
// ../shared/tools/build-llama-cpp.sh builds (llama.cpp v0.5.0 as node-llama-cpp 3.22.1 bundles
// it). Not part of loom's build: build.sh beside this file compiles it. Written for the model
// kinds node-llama-cpp cannot drive (recurrent state operations, encoder-decoder).
//
//   ref_dump golden MODEL OUTDIR NAME [--prompt P]... [--gen N] [--kv-f16]
//       ref-golden.mjs's format: NAME.json (prompt_ids, greedy_ids, margins) and per prompt i
//       NAME.i.logits.f32 (after the whole prompt in one batch) and NAME.i.steps.f32 (the
//       logits each greedy id was picked from, one token per decode); with two prompts or more,
//       NAME.pair.f32: the first two decoded together in one batch as sequences 0 and 1 (each
//       one's last-token logits). 1 thread, n_ctx 512, F32 K/V (--kv-f16: F16, "kv_type": "f16"
//       in NAME.json), no flash attention.
//   ref_dump seqops MODEL OUT.json PROMPT_A PROMPT_B
//       a recurrent model's sequence operations step by step: each op, its return value and
//       every sequence's seq_pos_min/max afterwards, decode return codes of invalid batches,
//       and logits of two sequences decoded in one batch (OUT.ab.f32: seq 0 then seq 1).
//   ref_dump memory MODEL OUT.json PROMPT_A PROMPT_B
//       one script of sequence operations for every memory kind (KV, sliding-window KV, recurrent,
//       hybrid): see memory_script(); OUT.logits.f32 holds the logits of its successful decodes.
//   ref_dump t5golden MODEL OUTDIR NAME [--prompt P]... [--gen N] [--kv-f16]
//       an encoder-decoder (T5): per prompt i, llama_encode of its tokens (EOS appended), then the
//       decoder from llama_model_decoder_start_token (else BOS) one token per decode: NAME.i.logits.f32
//       (the first step's logits), NAME.i.steps.f32 (every greedy step's logits, teacher-forced by
//       the greedy ids), NAME.i.enc.f32 (the encoder output, llama_get_embeddings after encode);
//       NAME.json with prompt_ids (the encoder's), decoder_start, greedy_ids. F32 K/V, 1 thread.
//   ref_dump embed MODEL OUTDIR NAME [--prompt P]...
//       an encoder-only model (t5encoder): per prompt i, llama_encode with mean pooling
//       (NAME.i.embd.f32, n_embd floats) and without (NAME.i.tokens.f32, n_tokens x n_embd).
//   ref_dump t5bench MODEL P N REPS THREADS
//       llama-bench's measurement for an encoder-decoder (llama-bench itself aborts on T5: it never
//       calls llama_encode): random token ids (fixed seed), one warm-up then the median of REPS of
//       pp = llama_encode of P tokens, pp_decoder = llama_decode of a P-token decoder prompt after it,
//       tg = N single-token decodes after encoding P tokens; the context's default K/V type (F16)
//       and flash-attention setting, n_batch = n_ubatch = P. Prints one JSON line.
//   ref_dump tokenize MODEL CASES.txt OUT.json
//       llama_tokenize of every case of CASES.txt (cases separated by a line "__case__", raw bytes):
//       text_hex, ids_add_special, ids_plain, ids_parse_special, detokenized_plain (raw bytes as
//       hex too: detokenized_hex).
#include <llama.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using json = nlohmann::ordered_json;

namespace {

const llama_vocab* g_vocab = nullptr;

std::vector<llama_token> tokenize(const std::string& text, bool add_special, bool parse_special = false) {
  std::vector<llama_token> ids(text.size() + 8);
  int n = llama_tokenize(g_vocab, text.c_str(), int32_t(text.size()), ids.data(), int32_t(ids.size()), add_special,
                         parse_special);
  if (n < 0) {
    ids.resize(size_t(-n));
    n = llama_tokenize(g_vocab, text.c_str(), int32_t(text.size()), ids.data(), int32_t(ids.size()), add_special,
                       parse_special);
  }
  ids.resize(size_t(n));
  return ids;
}

std::string detokenize(const std::vector<llama_token>& ids) {
  std::string s(ids.size() * 16 + 16, '\0');
  int n = llama_detokenize(g_vocab, ids.data(), int32_t(ids.size()), s.data(), int32_t(s.size()), false, false);
  if (n < 0) {
    s.resize(size_t(-n));
    n = llama_detokenize(g_vocab, ids.data(), int32_t(ids.size()), s.data(), int32_t(s.size()), false, false);
  }
  s.resize(size_t(std::max(n, 0)));
  return s;
}

void write_f32(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
}

// golden / t5golden --kv-f16: K/V in F16 (llama.cpp's default cache type, what loom's CLI uses),
// for goldens that loom's default F16 cache must meet; else F32.
bool g_kv_f16 = false;

llama_context* make_context(llama_model* model, int n_seq_max) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_seq_max = uint32_t(n_seq_max);
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = g_kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
  cp.type_v = g_kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  return llama_init_from_model(model, cp);
}

struct Tok {
  llama_token id;
  llama_pos pos;
  std::vector<llama_seq_id> seqs;
  bool out;
};

int decode(llama_context* ctx, const std::vector<Tok>& toks) {
  llama_batch b = llama_batch_init(int32_t(toks.size()), 0, 4);
  for (const Tok& t : toks) {
    const int i = b.n_tokens++;
    b.token[i] = t.id;
    b.pos[i] = t.pos;
    b.n_seq_id[i] = int32_t(t.seqs.size());
    for (size_t s = 0; s < t.seqs.size(); ++s) b.seq_id[i][s] = t.seqs[s];
    b.logits[i] = t.out;
  }
  const int r = llama_decode(ctx, b);
  llama_batch_free(b);
  return r;
}

std::vector<Tok> run(const std::vector<llama_token>& ids, llama_pos p0, llama_seq_id s) {
  std::vector<Tok> t;
  for (size_t i = 0; i < ids.size(); ++i) t.push_back({ids[i], p0 + llama_pos(i), {s}, i + 1 == ids.size()});
  return t;
}

std::vector<float> logits(llama_context* ctx, int i, int n_vocab) {
  const float* l = llama_get_logits_ith(ctx, i);
  return l ? std::vector<float>(l, l + n_vocab) : std::vector<float>();
}

int golden(llama_model* model, int argc, char** argv) {
  const std::string out_dir = argv[3], name = argv[4];
  std::vector<std::string> prompts;
  int n_gen = 16;
  for (int i = 5; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--prompt") && i + 1 < argc) prompts.push_back(argv[++i]);
    else if (!std::strcmp(argv[i], "--gen") && i + 1 < argc) n_gen = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--kv-f16")) g_kv_f16 = true;
  }
  const int n_vocab = llama_vocab_n_tokens(g_vocab);
  json out = {
      {"model", name},
      {"n_vocab", n_vocab},
      {"reference",
       std::string("llama.cpp v0.5.0 (node-llama-cpp 3.22.1's source) via tools/dev/llama-ref/ref_dump (CPU, 1 thread, ") +
           (g_kv_f16 ? "F16" : "F32") + " K/V)"}};
  if (g_kv_f16) out["kv_type"] = "f16";
  out["runs"] = json::array();
  for (size_t k = 0; k < prompts.size(); ++k) {
    llama_context* ctx = make_context(model, 1);
    const std::vector<llama_token> ids = tokenize(prompts[k], true);
    if (decode(ctx, run(ids, 0, 0)) != 0) return std::fprintf(stderr, "decode failed\n"), 1;
    std::vector<float> steps, cur = logits(ctx, int(ids.size()) - 1, n_vocab);
    write_f32(out_dir + "/" + name + "." + std::to_string(k) + ".logits.f32", cur);
    std::vector<llama_token> greedy;
    std::vector<float> margins;
    for (int step = 0; step < n_gen; ++step) {
      int best = 0;
      float a = -1e30f, b2 = -1e30f;
      for (int t = 0; t < n_vocab; ++t) {
        if (cur[size_t(t)] > a) {
          b2 = a;
          a = cur[size_t(t)];
          best = t;
        } else if (cur[size_t(t)] > b2) b2 = cur[size_t(t)];
      }
      steps.insert(steps.end(), cur.begin(), cur.end());
      greedy.push_back(best);
      margins.push_back(a - b2);
      if (llama_vocab_is_eog(g_vocab, best) || step + 1 == n_gen) break;
      if (decode(ctx, {{best, llama_pos(ids.size() + size_t(step)), {0}, true}}) != 0) return 1;
      cur = logits(ctx, 0, n_vocab);
    }
    write_f32(out_dir + "/" + name + "." + std::to_string(k) + ".steps.f32", steps);
    out["runs"].push_back({{"prompt", prompts[k]},
                           {"prompt_ids", ids},
                           {"last_logits_file", name + "." + std::to_string(k) + ".logits.f32"},
                           {"greedy_ids", greedy},
                           {"greedy_text", detokenize(greedy)},
                           {"greedy_margins", margins},
                           {"step_logits_file", name + "." + std::to_string(k) + ".steps.f32"}});
    llama_free(ctx);
  }
  if (prompts.size() >= 2) {
    // The first two prompts in one batch (sequences 0 and 1, all of 0's tokens then all of 1's):
    // NAME.pair.f32 holds sequence 0's last-token logits, then sequence 1's.
    llama_context* ctx = make_context(model, 2);
    const std::vector<llama_token> a = tokenize(prompts[0], true), b = tokenize(prompts[1], true);
    std::vector<Tok> both = run(a, 0, 0);
    for (const Tok& t : run(b, 0, 1)) both.push_back(t);
    if (decode(ctx, both) != 0) return std::fprintf(stderr, "pair decode failed\n"), 1;
    std::vector<float> pair = logits(ctx, int(a.size()) - 1, n_vocab);
    const std::vector<float> lb = logits(ctx, int(both.size()) - 1, n_vocab);
    pair.insert(pair.end(), lb.begin(), lb.end());
    write_f32(out_dir + "/" + name + ".pair.f32", pair);
    out["pair_logits_file"] = name + ".pair.f32";
    llama_free(ctx);
  }
  std::ofstream(out_dir + "/" + name + ".json") << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

llama_context* make_context_ex(llama_model* model, bool embeddings, enum llama_pooling_type pooling) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_seq_max = 1;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = g_kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
  cp.type_v = g_kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.embeddings = embeddings;
  cp.pooling_type = pooling;
  return llama_init_from_model(model, cp);
}

int encode(llama_context* ctx, const std::vector<llama_token>& ids) {
  llama_batch b = llama_batch_init(int32_t(ids.size()), 0, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    b.token[i] = ids[i];
    b.pos[i] = llama_pos(i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = true;
  }
  b.n_tokens = int32_t(ids.size());
  const int r = llama_encode(ctx, b);
  llama_batch_free(b);
  return r;
}

std::vector<std::string> prompts_of(int argc, char** argv, int* n_gen) {
  std::vector<std::string> prompts;
  for (int i = 5; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--prompt") && i + 1 < argc) prompts.push_back(argv[++i]);
    else if (!std::strcmp(argv[i], "--gen") && i + 1 < argc && n_gen) *n_gen = std::atoi(argv[++i]);
  }
  return prompts;
}

int t5golden(llama_model* model, int argc, char** argv) {
  const std::string out_dir = argv[3], name = argv[4];
  int n_gen = 16;
  const std::vector<std::string> prompts = prompts_of(argc, argv, &n_gen);
  for (int i = 5; i < argc; ++i) g_kv_f16 = g_kv_f16 || !std::strcmp(argv[i], "--kv-f16");
  const int n_vocab = llama_vocab_n_tokens(g_vocab), n_embd = llama_model_n_embd(model);
  llama_token start = llama_model_decoder_start_token(model);
  if (start == LLAMA_TOKEN_NULL) start = llama_vocab_bos(g_vocab);
  json out = {
      {"model", name},
      {"n_vocab", n_vocab},
      {"decoder_start", start},
      {"reference",
       std::string(
           "llama.cpp v0.5.0 (node-llama-cpp 3.22.1's source) via tools/dev/llama-ref/ref_dump t5golden (CPU, 1 thread, ") +
           (g_kv_f16 ? "F16" : "F32") + " K/V)"},
      {"kv_type", g_kv_f16 ? "f16" : "f32"}};
  out["runs"] = json::array();
  for (size_t k = 0; k < prompts.size(); ++k) {
    llama_context* ctx = make_context_ex(model, false, LLAMA_POOLING_TYPE_NONE);
    const std::vector<llama_token> ids = tokenize(prompts[k], true);
    if (encode(ctx, ids) != 0) return std::fprintf(stderr, "encode failed\n"), 1;
    const float* e = llama_get_embeddings(ctx);
    const std::string base = out_dir + "/" + name + "." + std::to_string(k);
    if (e) write_f32(base + ".enc.f32", std::vector<float>(e, e + ids.size() * size_t(n_embd)));
    if (decode(ctx, {{start, 0, {0}, true}}) != 0) return std::fprintf(stderr, "decode failed\n"), 1;
    std::vector<float> steps, cur = logits(ctx, 0, n_vocab);
    write_f32(base + ".logits.f32", cur);
    std::vector<llama_token> greedy;
    std::vector<float> margins;
    for (int step = 0; step < n_gen; ++step) {
      int best = 0;
      float a = -1e30f, b2 = -1e30f;
      for (int t = 0; t < n_vocab; ++t) {
        if (cur[size_t(t)] > a) {
          b2 = a;
          a = cur[size_t(t)];
          best = t;
        } else if (cur[size_t(t)] > b2) b2 = cur[size_t(t)];
      }
      steps.insert(steps.end(), cur.begin(), cur.end());
      greedy.push_back(best);
      margins.push_back(a - b2);
      if (llama_vocab_is_eog(g_vocab, best) || step + 1 == n_gen) break;
      if (decode(ctx, {{best, llama_pos(step + 1), {0}, true}}) != 0) return 1;
      cur = logits(ctx, 0, n_vocab);
    }
    write_f32(base + ".steps.f32", steps);
    out["runs"].push_back({{"prompt", prompts[k]},
                           {"prompt_ids", ids},
                           {"last_logits_file", name + "." + std::to_string(k) + ".logits.f32"},
                           {"encoder_output_file", name + "." + std::to_string(k) + ".enc.f32"},
                           {"greedy_ids", greedy},
                           {"greedy_text", detokenize(greedy)},
                           {"greedy_margins", margins},
                           {"step_logits_file", name + "." + std::to_string(k) + ".steps.f32"}});
    llama_free(ctx);
  }
  if (prompts.size() >= 2) {
    // The first two prompts in one batch (sequences 0 and 1, all of 0's tokens then all of 1's):
    // NAME.pair.f32 holds sequence 0's last-token logits, then sequence 1's.
    llama_context* ctx = make_context(model, 2);
    const std::vector<llama_token> a = tokenize(prompts[0], true), b = tokenize(prompts[1], true);
    std::vector<Tok> both = run(a, 0, 0);
    for (const Tok& t : run(b, 0, 1)) both.push_back(t);
    if (decode(ctx, both) != 0) return std::fprintf(stderr, "pair decode failed\n"), 1;
    std::vector<float> pair = logits(ctx, int(a.size()) - 1, n_vocab);
    const std::vector<float> lb = logits(ctx, int(both.size()) - 1, n_vocab);
    pair.insert(pair.end(), lb.begin(), lb.end());
    write_f32(out_dir + "/" + name + ".pair.f32", pair);
    out["pair_logits_file"] = name + ".pair.f32";
    llama_free(ctx);
  }
  std::ofstream(out_dir + "/" + name + ".json") << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

int embed(llama_model* model, int argc, char** argv) {
  const std::string out_dir = argv[3], name = argv[4];
  const std::vector<std::string> prompts = prompts_of(argc, argv, nullptr);
  const int n_embd = llama_model_n_embd(model);
  json out = {{"model", name},
              {"n_embd", n_embd},
              {"reference",
               "llama.cpp v0.5.0 (node-llama-cpp 3.22.1's source) via tools/dev/llama-ref/ref_dump embed (CPU, 1 thread)"}};
  out["runs"] = json::array();
  for (size_t k = 0; k < prompts.size(); ++k) {
    const std::vector<llama_token> ids = tokenize(prompts[k], true);
    const std::string base = out_dir + "/" + name + "." + std::to_string(k);
    llama_context* ctx = make_context_ex(model, true, LLAMA_POOLING_TYPE_MEAN);
    if (encode(ctx, ids) != 0) return std::fprintf(stderr, "encode failed\n"), 1;
    const float* p = llama_get_embeddings_seq(ctx, 0);
    if (!p) return std::fprintf(stderr, "no pooled embedding\n"), 1;
    write_f32(base + ".embd.f32", std::vector<float>(p, p + n_embd));
    llama_free(ctx);
    ctx = make_context_ex(model, true, LLAMA_POOLING_TYPE_NONE);
    if (encode(ctx, ids) != 0) return std::fprintf(stderr, "encode failed\n"), 1;
    const float* e = llama_get_embeddings(ctx);
    if (!e) return std::fprintf(stderr, "no embeddings\n"), 1;
    write_f32(base + ".tokens.f32", std::vector<float>(e, e + ids.size() * size_t(n_embd)));
    llama_free(ctx);
    out["runs"].push_back({{"prompt", prompts[k]},
                           {"prompt_ids", ids},
                           {"embedding_file", name + "." + std::to_string(k) + ".embd.f32"},
                           {"token_embeddings_file", name + "." + std::to_string(k) + ".tokens.f32"}});
  }
  std::ofstream(out_dir + "/" + name + ".json") << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

// ref_dump ttft MODEL PROMPT THREADS: the first generated token (greedy) and nothing else, for
// timing llama.cpp from process start to its first token as a whole process (bench/ttft.sh):
// model load (mmap, weight repacking), a default context (F16 K/V), the prompt, one pick.
int ttft(llama_model* model, int, char** argv) {
  const int threads = std::atoi(argv[4]);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_threads = cp.n_threads_batch = threads;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return std::fprintf(stderr, "cannot create a context\n"), 1;
  const std::vector<llama_token> ids = tokenize(argv[3], true);
  if (decode(ctx, run(ids, 0, 0)) != 0) return std::fprintf(stderr, "decode failed\n"), 1;
  const int n_vocab = llama_vocab_n_tokens(g_vocab);
  const std::vector<float> l = logits(ctx, int(ids.size()) - 1, n_vocab);
  const int best = int(std::max_element(l.begin(), l.end()) - l.begin());
  std::printf("%d\n", best);
  llama_free(ctx);
  return 0;
}

int t5bench(llama_model* model, int, char** argv) {
  const int P = std::atoi(argv[3]), N = std::atoi(argv[4]), reps = std::atoi(argv[5]), threads = std::atoi(argv[6]);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t(std::max(P, N) + 8);
  cp.n_batch = cp.n_ubatch = uint32_t(std::max(P, 1));
  cp.n_threads = cp.n_threads_batch = threads;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  const int n_vocab = llama_vocab_n_tokens(g_vocab);
  unsigned seed = 1234567u;
  auto rnd = [&](int n) {
    std::vector<llama_token> t(static_cast<size_t>(n));
    for (auto& x : t) x = llama_token((seed = seed * 1103515245u + 12345u) % unsigned(n_vocab));
    return t;
  };
  auto now = [] { return double(ggml_time_us()); };
  auto batch_of = [](const std::vector<llama_token>& ids, bool all) {
    llama_batch b = llama_batch_init(int32_t(ids.size()), 0, 1);
    for (size_t i = 0; i < ids.size(); ++i) {
      b.token[i] = ids[i];
      b.pos[i] = llama_pos(i);
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = 0;
      b.logits[i] = all || i + 1 == ids.size();
    }
    b.n_tokens = int32_t(ids.size());
    return b;
  };
  std::vector<double> pp, ppd, tg;
  for (int r = 0; r <= reps; ++r) {
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_batch e = batch_of(rnd(P), true);
    double t0 = now();
    if (llama_encode(ctx, e) != 0) return std::fprintf(stderr, "encode failed\n"), 1;
    llama_synchronize(ctx);
    const double enc = P * 1e6 / (now() - t0);
    llama_batch d = batch_of(rnd(P), false);
    t0 = now();
    if (llama_decode(ctx, d) != 0) return std::fprintf(stderr, "decode failed\n"), 1;
    llama_synchronize(ctx);
    const double dec = P * 1e6 / (now() - t0);
    llama_batch_free(d);
    llama_memory_clear(llama_get_memory(ctx), true);
    if (llama_encode(ctx, e) != 0) return 1;
    llama_batch_free(e);
    std::vector<llama_token> g = rnd(N);
    t0 = now();
    for (int i = 0; i < N; ++i) {
      if (decode(ctx, {{g[size_t(i)], llama_pos(i), {0}, true}}) != 0) return std::fprintf(stderr, "decode failed\n"), 1;
      llama_synchronize(ctx);
    }
    const double gen = N * 1e6 / (now() - t0);
    if (r == 0) continue;  // warm-up
    pp.push_back(enc), ppd.push_back(dec), tg.push_back(gen);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  json out = {{"pp_tps", median(pp)}, {"pp_decoder_tps", median(ppd)}, {"tg_tps", median(tg)},
              {"pp_runs", pp},        {"pp_decoder_runs", ppd},        {"tg_runs", tg},
              {"threads", threads}};
  std::printf("%s\n", out.dump().c_str());
  llama_free(ctx);
  return 0;
}

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += d[c >> 4], h += d[c & 15];
  return h;
}

int tokenize_cases(llama_model*, int, char** argv) {
  std::ifstream in(argv[3], std::ios::binary);
  if (!in) return std::fprintf(stderr, "cannot read %s\n", argv[3]), 1;
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> cases;
  const std::string sep = "\n__case__\n";
  size_t at = 0;
  for (;;) {
    const size_t next = all.find(sep, at);
    if (next == std::string::npos) {
      std::string last = all.substr(at);
      if (!last.empty() && last.back() == '\n') last.pop_back();
      cases.push_back(last);
      break;
    }
    cases.push_back(all.substr(at, next - at));
    at = next + sep.size();
  }
  json out = {{"reference", "llama.cpp v0.5.0 (node-llama-cpp 3.22.1's source) via tools/dev/llama-ref/ref_dump tokenize"}};
  out["tokenize"] = json::array();
  for (const std::string& text : cases) {
    const std::vector<llama_token> plain = tokenize(text, false);
    const std::string detok = detokenize(plain);
    out["tokenize"].push_back({{"text_hex", hex(text)},
                               {"ids_add_special", tokenize(text, true)},
                               {"ids_plain", plain},
                               {"ids_parse_special", tokenize(text, true, true)},
                               {"detokenized_hex", hex(detok)}});
  }
  std::ofstream(argv[4]) << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

// Two sequences in one batch, tokens interleaved (seq 0 = a, seq 1 = b); writes both last rows
// of logits to `path` and returns decode's result.
int decode_two(llama_context* ctx, const std::vector<llama_token>& a, const std::vector<llama_token>& b, int n_vocab,
               const std::string& path) {
  std::vector<Tok> ab;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size()) ab.push_back({a[i], llama_pos(i), {0}, i + 1 == a.size()});
    if (i < b.size()) ab.push_back({b[i], llama_pos(i), {1}, i + 1 == b.size()});
  }
  int ia = -1, ib = -1;
  for (size_t i = 0; i < ab.size(); ++i) {
    if (ab[i].out && ab[i].seqs[0] == 0) ia = int(i);
    if (ab[i].out && ab[i].seqs[0] == 1) ib = int(i);
  }
  const int ret = decode(ctx, ab);
  std::vector<float> both = logits(ctx, ia, n_vocab), lb = logits(ctx, ib, n_vocab);
  both.insert(both.end(), lb.begin(), lb.end());
  write_f32(path, both);
  return ret;
}

int seqops(llama_model* model, int, char** argv) {
  const std::string out_path = argv[3];
  const std::vector<llama_token> a = tokenize(argv[4], true), b = tokenize(argv[5], true);
  const int n_vocab = llama_vocab_n_tokens(g_vocab);
  llama_context* ctx = make_context(model, 4);
  llama_memory_t mem = llama_get_memory(ctx);
  json steps = json::array();
  auto record = [&](json step) {
    json pos = json::array();
    for (int s = 0; s < 4; ++s) pos.push_back({llama_memory_seq_pos_min(mem, s), llama_memory_seq_pos_max(mem, s)});
    step["pos"] = pos;
    steps.push_back(step);
  };
  const llama_pos na = llama_pos(a.size());
  const llama_token t = a[1];
  record({{"op", "decode"}, {"tokens", a}, {"pos0", 0}, {"seq", 0}, {"ret", decode(ctx, run(a, 0, 0))}});
  for (auto [s, p0, p1] : {std::tuple{0, 2, -1}, {0, 0, 3}, {0, na, -1}, {0, na - 1, na}, {3, -1, -1}}) {
    record({{"op", "seq_rm"}, {"seq", s}, {"p0", p0}, {"p1", p1}, {"ret", llama_memory_seq_rm(mem, s, p0, p1)}});
  }
  llama_memory_seq_cp(mem, 0, 1, -1, -1);
  record({{"op", "seq_cp"}, {"src", 0}, {"dst", 1}, {"p0", -1}, {"p1", -1}});
  llama_memory_seq_cp(mem, 0, 2, 0, 2);
  record({{"op", "seq_cp"}, {"src", 0}, {"dst", 2}, {"p0", 0}, {"p1", 2}});
  // Both copies continue the same state: equal logits.
  json l1, l2;
  record({{"op", "decode"},
          {"tokens", std::vector<llama_token>{t}},
          {"pos0", na},
          {"seq", 1},
          {"ret", decode(ctx, run({t}, na, 1))}});
  const std::vector<float> after1 = logits(ctx, 0, n_vocab);
  record({{"op", "decode"},
          {"tokens", std::vector<llama_token>{t}},
          {"pos0", na},
          {"seq", 2},
          {"ret", decode(ctx, run({t}, na, 2))}});
  const std::vector<float> after2 = logits(ctx, 0, n_vocab);
  write_f32(out_path + ".cp.f32", after1);
  llama_memory_seq_add(mem, 1, 0, -1, 10);
  record({{"op", "seq_add"}, {"seq", 1}, {"p0", 0}, {"p1", -1}, {"delta", 10}});
  llama_memory_seq_add(mem, 0, 0, 3, 5);
  record({{"op", "seq_add"}, {"seq", 0}, {"p0", 0}, {"p1", 3}, {"delta", 5}});
  llama_memory_seq_add(mem, -1, 0, -1, 7);
  record({{"op", "seq_add"}, {"seq", -1}, {"p0", 0}, {"p1", -1}, {"delta", 7}});
  llama_memory_seq_div(mem, 1, 0, -1, 3);
  record({{"op", "seq_div"}, {"seq", 1}, {"p0", 0}, {"p1", -1}, {"d", 3}});
  // Positions must continue each state; a token of two sequences is refused (sequential split).
  record({{"op", "decode"},
          {"tokens", std::vector<llama_token>{t}},
          {"pos0", na + 3},
          {"seq", 0},
          {"ret", decode(ctx, run({t}, na + 3, 0))}});
  record({{"op", "decode_coupled"},
          {"tokens", std::vector<llama_token>{t}},
          {"pos0", na},
          {"seqs", {0, 3}},
          {"ret", decode(ctx, {{t, na, {0, 3}, true}})}});
  llama_memory_seq_keep(mem, 2);
  record({{"op", "seq_keep"}, {"seq", 2}});
  record({{"op", "seq_rm"}, {"seq", -1}, {"p0", 0}, {"p1", 5}, {"ret", llama_memory_seq_rm(mem, -1, 0, 5)}});
  record({{"op", "seq_rm"}, {"seq", -1}, {"p0", -1}, {"p1", -1}, {"ret", llama_memory_seq_rm(mem, -1, -1, -1)}});
  record({{"op", "seq_rm"}, {"seq", 2}, {"p0", 0}, {"p1", -1}, {"ret", llama_memory_seq_rm(mem, 2, 0, -1)}});
  llama_memory_clear(mem, true);
  record({{"op", "decode_two"}, {"ret", decode_two(ctx, a, b, n_vocab, out_path + ".ab.f32")}});
  json out = {{"reference",
               "llama.cpp v0.5.0 (node-llama-cpp 3.22.1's source) via tools/dev/llama-ref/ref_dump seqops, n_seq_max 4"},
              {"prompt_a", a},
              {"prompt_b", b},
              {"copies_equal", after1 == after2},
              {"steps", steps}};
  std::ofstream(out_path) << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  llama_free(ctx);
  return 0;
}

// ref_dump memory MODEL OUT.json PROMPT_A PROMPT_B: one script of sequence operations for every
// memory kind (KV cache, sliding-window KV, recurrent states, hybrids), run on llama.cpp's memory:
// removals of whole sequences, of tails, of heads and of ranges (one sequence and all), copies
// (whole and partial), keep, shifts up and down and divisions, clear; decodes of one, two and three
// sequences in a batch, a prefix shared by two sequences (one token, two sequence ids), a sequence
// long enough to wrap a window cache; invalid batches (a position gap, a bad token id, a bad
// sequence id, two diverged sequences coupled). Each step records what it did (decode batches
// with explicit positions), its return value, every sequence's seq_pos_min/max afterwards and the
// rows of logits a successful decode produced (OUT.logits.f32, rows in order, the first
// min(n_vocab, 512) logits of each to keep the file small; the step's `out` is its first row). Context: n_ctx 512, n_batch 512, n_ubatch 64, n_seq_max 4, unified KV (one set of
// cells for every sequence, as loom's), the window cache sized by llama.cpp's default (swa_full
// off: 256 cells for a window of 16 here), F32 K/V, no flash attention, 1 thread.
int memory_script(llama_model* model, int, char** argv) {
  const std::string out_path = argv[3];
  const std::vector<llama_token> A = tokenize(argv[4], true), B = tokenize(argv[5], true);
  const int n_vocab = llama_vocab_n_tokens(g_vocab), n_cols = std::min(n_vocab, 512);
  constexpr int kSeqs = 4;
  // A model without RoPE on any layer (Granite 4.0 H: rope.scaling.finetuned false) aborts at the
  // decode after a position shift: the K-shift graph skips every layer and its input tensor is
  // never allocated (ggml_backend_buffer_get_type on a null buffer). The shifts are left out there.
  char arch[64] = {0}, fin[16] = {0};
  llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch);
  llama_model_meta_val_str(model, (std::string(arch) + ".rope.scaling.finetuned").c_str(), fin, sizeof fin);
  const bool no_rope = std::string(arch) == "granitehybrid" && std::string(fin) == "false";
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_ubatch = 64;
  cp.n_seq_max = kSeqs;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.kv_unified = true;
  cp.swa_full = false;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return std::fprintf(stderr, "cannot create a context\n"), 1;
  llama_memory_t mem = llama_get_memory(ctx);
  json steps = json::array();
  std::vector<float> rows;
  int n_rows = 0;
  auto record = [&](json step) {
    json pos = json::array();
    for (int s = 0; s < kSeqs; ++s) pos.push_back({llama_memory_seq_pos_min(mem, s), llama_memory_seq_pos_max(mem, s)});
    step["pos"] = pos;
    steps.push_back(step);
  };
  auto next = [&](llama_seq_id s) { return llama_memory_seq_pos_max(mem, s) + 1; };
  // Decodes a batch (given with explicit positions) and records it with its outputs' logits.
  auto run_batch = [&](const std::string& what, const std::vector<Tok>& toks) {
    const int r = decode(ctx, toks);
    json batch = json::array();
    for (const Tok& t : toks) batch.push_back({t.id, t.pos, t.seqs, t.out});
    json step = {{"op", "decode"}, {"what", what}, {"batch", batch}, {"ret", r}};
    if (r == 0) {
      step["out"] = n_rows;
      for (size_t i = 0; i < toks.size(); ++i) {
        if (!toks[i].out) continue;
        const std::vector<float> l = logits(ctx, int(i), n_vocab);
        rows.insert(rows.end(), l.begin(), l.begin() + n_cols);
        ++n_rows;
      }
    }
    record(step);
    return r;
  };
  auto seq_tokens = [&](const std::vector<llama_token>& ids, llama_seq_id s, bool out_last = true) {
    std::vector<Tok> t;
    const llama_pos p0 = next(s);
    for (size_t i = 0; i < ids.size(); ++i) t.push_back({ids[i], p0 + llama_pos(i), {s}, out_last && i + 1 == ids.size()});
    return t;
  };
  auto rm = [&](llama_seq_id s, llama_pos p0, llama_pos p1) {
    record({{"op", "seq_rm"}, {"seq", s}, {"p0", p0}, {"p1", p1}, {"ret", llama_memory_seq_rm(mem, s, p0, p1)}});
  };
  auto cpy = [&](llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1) {
    llama_memory_seq_cp(mem, src, dst, p0, p1);
    record({{"op", "seq_cp"}, {"src", src}, {"dst", dst}, {"p0", p0}, {"p1", p1}});
  };
  auto add = [&](llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos d) {
    llama_memory_seq_add(mem, s, p0, p1, d);
    record({{"op", "seq_add"}, {"seq", s}, {"p0", p0}, {"p1", p1}, {"delta", d}});
  };
  auto div = [&](llama_seq_id s, llama_pos p0, llama_pos p1, int d) {
    llama_memory_seq_div(mem, s, p0, p1, d);
    record({{"op", "seq_div"}, {"seq", s}, {"p0", p0}, {"p1", p1}, {"d", d}});
  };
  auto clear = [&] {
    llama_memory_clear(mem, true);
    record({{"op", "clear"}});
  };
  const llama_token T = A[1], U = B[2];
  const llama_pos na = llama_pos(A.size());

  // 1. One sequence: its tail, its head, an empty sequence, a range past its end.
  run_batch("prompt A into 0", seq_tokens(A, 0));
  rm(0, na - 1, -1);
  run_batch("one token into 0", seq_tokens({T}, 0));
  rm(0, 0, 2);
  rm(3, -1, -1);
  rm(0, 100, 200);
  // 2. Copies, whole and partial; the copies continue; three sequences in one batch. (A partial
  // copy of a recurrent state copies all of it: a hybrid's copy then holds KV up to the range's
  // end but a state that has seen more; llama.cpp continues it at the KV part's next position.)
  cpy(0, 1, -1, -1);
  cpy(0, 2, -1, -1);
  cpy(0, 3, 0, 4);
  run_batch("one token into 3 after a partial copy", seq_tokens({T}, 3));
  rm(3, -1, -1);
  run_batch("one token into 1", seq_tokens({T}, 1));
  run_batch("one token into 2", seq_tokens({T}, 2));
  {
    std::vector<Tok> t = {{T, next(1), {1}, true}, {U, next(2), {2}, true}, {U, next(0), {0}, true}};
    run_batch("one token into 1, 2 and 0", t);
  }
  // 3. Positions: shifts up, of a range, down past 0 (those cells go); decodes after them. Then a
  // division, on a sequence of its own: llama.cpp records a division's K shift with the wrong sign
  // (llama_kv_cells::pos_div: shift += p_old - p_new), so logits after it are its own.
  if (!no_rope) {
    add(1, 0, -1, 10);
    add(2, 4, -1, 3);
    add(0, 0, 3, -3);
  }
  run_batch("one token into 1 after shifts", seq_tokens({T}, 1));
  run_batch("one token into 2 after shifts", seq_tokens({T}, 2));
  run_batch("one token into 0 after shifts", seq_tokens({U}, 0));
  run_batch("8 tokens of B into 3", seq_tokens(std::vector<llama_token>(B.begin(), B.begin() + 8), 3));
  if (!no_rope) div(3, 0, -1, 2);
  run_batch("one token into 3 after a division", seq_tokens({T}, 3));
  rm(3, -1, -1);
  // 4. Invalid batches: a position gap, a bad token id, a bad sequence id, two diverged sequences coupled.
  run_batch("invalid: a position gap in 0", {{T, next(0) + 1, {0}, true}});
  run_batch("invalid: token id n_vocab", {{llama_token(n_vocab), next(0), {0}, true}});
  run_batch("invalid: sequence id 300", {{T, 0, {300}, true}});
  run_batch("invalid: 0 and 1 coupled after they diverged", {{T, std::max(next(0), next(1)), {0, 1}, true}});
  // 5. Keep one sequence, remove ranges of every sequence, then every sequence, then one.
  llama_memory_seq_keep(mem, 1);
  record({{"op", "seq_keep"}, {"seq", 1}});
  rm(-1, 0, 3);
  rm(-1, -1, -1);
  rm(1, 0, -1);
  // 6. A prefix shared by two sequences (its tokens in both), then each continues, interleaved.
  clear();
  const size_t k = 6;
  {
    std::vector<Tok> t;
    for (size_t i = 0; i < k; ++i) t.push_back({B[i], llama_pos(i), {0, 1}, i + 1 == k});
    run_batch("a prefix of B shared by 0 and 1", t);
  }
  {
    const std::vector<llama_token> rest_b(B.begin() + long(k), B.end()), rest_a(A.begin() + 1, A.end());
    const llama_pos p0 = next(0), p1 = next(1);
    std::vector<Tok> t;
    for (size_t i = 0; i < std::max(rest_b.size(), rest_a.size()); ++i) {
      if (i < rest_b.size()) t.push_back({rest_b[i], p0 + llama_pos(i), {0}, i + 1 == rest_b.size()});
      if (i < rest_a.size()) t.push_back({rest_a[i], p1 + llama_pos(i), {1}, i + 1 == rest_a.size()});
    }
    run_batch("the rest of B into 0 and of A into 1, interleaved", t);
  }
  {
    std::vector<Tok> t = {{T, next(1), {1}, true}, {U, next(0), {0}, true}};
    run_batch("one token into 1 and 0", t);
  }
  // 7. A sequence of 300 tokens (a window cache of 256 cells wraps), then the others continue.
  {
    std::vector<llama_token> longseq;
    while (longseq.size() < 300) {
      for (llama_token x : B) longseq.push_back(x);
      for (llama_token x : A) longseq.push_back(x);
    }
    longseq.resize(300);
    for (size_t i = 0; i < longseq.size(); i += 60) {
      const std::vector<llama_token> part(longseq.begin() + long(i), longseq.begin() + long(i + 60));
      run_batch("60 tokens of a long sequence into 2", seq_tokens(part, 2));
    }
  }
  run_batch("one token into 0 after the long sequence", seq_tokens({T}, 0));
  rm(2, 0, 200);
  run_batch("one token into 2 after removing its first 200 positions", seq_tokens({T}, 2));
  rm(1, -1, -1);
  run_batch("one token into 1 again", seq_tokens({U}, 1));
  clear();

  write_f32(out_path + ".logits.f32", rows);
  const std::string out_name = out_path.substr(out_path.find_last_of('/') + 1);
  json out = {{"reference",
               "llama.cpp (~/.cache/loom-llama-cpp) via tools/dev/llama-ref/ref_dump memory: n_ctx 512, n_batch 512, "
               "n_ubatch 64, n_seq_max 4, kv_unified, swa_full off, F32 K/V, 1 thread"},
              {"n_ctx", 512},
              {"n_batch", 512},
              {"n_ubatch", 64},
              {"n_seq_max", kSeqs},
              {"prompt_a", A},
              {"prompt_b", B},
              {"n_vocab", n_vocab},
              {"logits_file", out_name + ".logits.f32"},
              {"logit_cols", n_cols},
              {"shifts_left_out", no_rope},
              {"n_logit_rows", n_rows},
              {"steps", steps}};
  std::ofstream(out_path) << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  llama_free(ctx);
  return 0;
}

}  // namespace

// kvmem MODEL N_CTX N_SEQ [swa_full]: the KV memory llama.cpp allocates for a context (unified KV,
// F16, as loom serve's), as its own log lines report it ("creating ... KV cache, size = N cells",
// "KV buffer size = X MiB"), then one JSON line {"n_ctx", "n_seq", "swa_full", "kv_bytes"}.
std::vector<std::string> g_log_lines;
int kvmem(llama_model* model, int argc, char** argv) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t(std::atoi(argv[3]));
  cp.n_seq_max = uint32_t(std::atoi(argv[4]));
  cp.n_batch = cp.n_ubatch = 512;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.kv_unified = true;
  cp.swa_full = argc > 5 && std::string(argv[5]) == "swa_full";
  cp.type_k = cp.type_v = GGML_TYPE_F16;
  g_log_lines.clear();
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return std::fprintf(stderr, "cannot create the context\n"), 1;
  double mib = 0;
  for (const std::string& l : g_log_lines) {
    if (l.find("KV buffer size") == std::string::npos && l.find("KV cache, size") == std::string::npos) continue;
    std::fputs(l.c_str(), stdout);
    const size_t eq = l.find("KV buffer size =");
    if (eq != std::string::npos) mib += std::atof(l.c_str() + eq + 16);
  }
  std::printf("{\"n_ctx\": %u, \"n_seq\": %u, \"swa_full\": %s, \"kv_bytes\": %.0f}\n", cp.n_ctx, cp.n_seq_max,
              cp.swa_full ? "true" : "false", mib * 1024 * 1024);
  llama_free(ctx);
  return 0;
}

// ref_dump split REGEXES.json CASES.txt OUT.json   (loads no model)
//     llama.cpp's pre-tokenization itself: unicode_regex_split (libllama's src/unicode.h; raw UTF-8,
//     byte_encode false) of every case of CASES.txt (read as tokenize reads it) with each regex
//     list of REGEXES.json ({"NAME": ["regex", ...]}, tools/dev/make_vocab_pre --regexes): OUT.json
//     {"NAME": ["LEN LEN ...", ...]}, the byte lengths of each case's pre-tokens.
std::vector<std::string> unicode_regex_split(const std::string& text, const std::vector<std::string>& regex_exprs,
                                             bool byte_encode);

int split_cases(int argc, char** argv) {
  if (argc != 5) return std::fprintf(stderr, "usage: ref_dump split REGEXES.json CASES.txt OUT.json\n"), 2;
  std::ifstream rin(argv[2], std::ios::binary);
  if (!rin) return std::fprintf(stderr, "cannot read %s\n", argv[2]), 1;
  const json lists = json::parse(rin);
  std::ifstream in(argv[3], std::ios::binary);
  if (!in) return std::fprintf(stderr, "cannot read %s\n", argv[3]), 1;
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> cases;
  const std::string sep = "\n__case__\n";
  for (size_t at = 0;;) {
    const size_t next = all.find(sep, at);
    if (next == std::string::npos) {
      std::string last = all.substr(at);
      if (!last.empty() && last.back() == '\n') last.pop_back();
      cases.push_back(last);
      break;
    }
    cases.push_back(all.substr(at, next - at));
    at = next + sep.size();
  }
  json out = json::object();
  for (const auto& [name, regexes] : lists.items()) {
    const std::vector<std::string> exprs = regexes.get<std::vector<std::string>>();
    json per_case = json::array();
    for (const std::string& text : cases) {
      std::string lens;
      // (llama_tokenize never splits an empty fragment: the hand-written splitters return no
      // offsets for one, and llama.cpp would then hand "\p{Han}+" to std::regex.)
      if (text.empty()) {
        per_case.push_back(lens);
        continue;
      }
      for (const std::string& piece : unicode_regex_split(text, exprs, false)) {
        lens += (lens.empty() ? "" : " ") + std::to_string(piece.size());
      }
      per_case.push_back(lens);
    }
    out[name] = per_case;
  }
  std::ofstream(argv[4]) << out.dump(0) << "\n";
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "split") return split_cases(argc, argv);
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: ref_dump golden MODEL OUTDIR NAME [--prompt P]... [--gen N]\n"
                 "       ref_dump seqops MODEL OUT.json PROMPT_A PROMPT_B\n"
                 "       ref_dump memory MODEL OUT.json PROMPT_A PROMPT_B\n"
                 "       ref_dump t5golden MODEL OUTDIR NAME [--prompt P]... [--gen N] [--kv-f16]\n"
                 "       ref_dump embed MODEL OUTDIR NAME [--prompt P]...\n"
                 "       ref_dump t5bench MODEL P N REPS THREADS\n"
                 "       ref_dump ttft MODEL PROMPT THREADS\n"
                 "       ref_dump tokenize MODEL CASES.txt OUT.json\n"
                 "       ref_dump kvmem MODEL N_CTX N_SEQ [swa_full]\n");
    return 2;
  }
  llama_log_set(
      [](ggml_log_level level, const char* text, void*) {
        g_log_lines.emplace_back(text);
        if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
      },
      nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = std::string(argv[1]) == "tokenize";
  llama_model* model = llama_model_load_from_file(argv[2], mp);
  if (!model) return std::fprintf(stderr, "cannot load %s\n", argv[2]), 1;
  g_vocab = llama_model_get_vocab(model);
  const std::string mode = argv[1];
  const int r = mode == "golden"     ? golden(model, argc, argv)
                : mode == "seqops"   ? seqops(model, argc, argv)
                : mode == "memory"   ? memory_script(model, argc, argv)
                : mode == "kvmem"    ? kvmem(model, argc, argv)
                : mode == "tokenize" ? tokenize_cases(model, argc, argv)
                : mode == "t5golden" ? t5golden(model, argc, argv)
                : mode == "embed"    ? embed(model, argc, argv)
                : mode == "t5bench"  ? t5bench(model, argc, argv)
                : mode == "ttft"     ? ttft(model, argc, argv)
                                     : 2;
  llama_model_free(model);
  return r;
}
