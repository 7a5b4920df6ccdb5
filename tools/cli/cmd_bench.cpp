// loom bench -m MODEL [-p 512] [-n 128] [-t THREADS] [-r REPS] [-d DEPTH] [--parallel N] [--json]
//
// Speed of a model on this machine, measured like llama-bench (and ../shared/bench/peer-bench.mjs)
// so that the two can be put side by side:
//  - pp: one batch of -p tokens into an empty cache, computed in one forward pass
//    (n_batch = n_ubatch = p), logits for the last token only -> tokens/s;
//  - tg: -n single-token decodes, after -d tokens already in the cache -> tokens/s;
//  - one warm-up run of each first, then the median of -r repetitions; token ids are random valid
//    ids from a fixed seed (the first is BOS when the vocabulary has one);
//  - --parallel N (as llama-batched-bench's -npl N, prompts not shared): N sequences, each with its
//    own -p-token prompt (all of them in one batch: pp is N x p tokens), then -n steps that each
//    decode one token of every sequence in one batch (tg), after the prompts (and -d more tokens
//    per sequence when given); tokens/s are aggregates, per-stream tg is aggregate / N;
//  - tg's achieved bandwidth: (weight bytes one decode step reads + KV bytes it reads, averaged
//    over the run) × tg tokens/s, and the machine's read bandwidth measured in the same run with
//    the same thread count, so the fraction of the memory limit can be read off directly;
//  - an encoder-decoder (T5): pp is the encoder over -p tokens (encode), pp_decoder the decoder
//    over a -p-token prompt after it (what llama-bench's pp measures: it runs only the decoder,
//    with cross-attention over n_ctx_train encoder rows), tg the decoder's single-token steps after
//    encoding -p tokens (512 when -p is 0).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bandwidth.h"
#include "base/cpu.h"
#include "commands.h"

namespace loom::cli {
namespace {

using api::Status;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define BENCH_TRY(expr)                        \
  do {                                         \
    if (Status st_ = (expr); !st_) return st_; \
  } while (0)

double median(std::vector<double> xs) {
  if (xs.empty()) return 0.0;
  std::sort(xs.begin(), xs.end());
  const size_t m = xs.size() / 2;
  return xs.size() % 2 ? xs[m] : 0.5 * (xs[m - 1] + xs[m]);
}

double round2(double x) { return std::round(x * 100.0) / 100.0; }

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.2f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string join_runs(const std::vector<double>& xs) {
  std::string s;
  char buf[32];
  for (double x : xs) {
    std::snprintf(buf, sizeof buf, "%s%.1f", s.empty() ? "" : " ", x);
    s += buf;
  }
  return s;
}

// What `loom bench` measures, as its flags set it.
struct BenchOptions {
  std::string model;
  int n_prompt = 512, n_gen = 128, threads = 0, reps = 3, depth = 0, bw_mib = 1024, bw_passes = 5, parallel = 1;
  bool json = false;
};

// The flags of `loom bench`: one row per integer option.
struct IntFlag {
  const char* names;
  int BenchOptions::*field;
  const char* help;
  CLI::Validator check;
};

const std::vector<IntFlag>& bench_flags() {
  static const std::vector<IntFlag> flags = {
      {"-p,--n-prompt", &BenchOptions::n_prompt, "pp: tokens of the prompt batch, one forward pass; 0 skips (default 512)",
       CLI::NonNegativeNumber},
      {"-n,--n-gen", &BenchOptions::n_gen, "tg: single-token decode steps; 0 skips (default 128)", CLI::NonNegativeNumber},
      {"-t,--threads", &BenchOptions::threads, "threads (default: all cores)", CLI::NonNegativeNumber},
      {"-r,--reps", &BenchOptions::reps, "repetitions; the median is reported (default 3)", CLI::Range(1, 1000)},
      {"-d,--depth", &BenchOptions::depth,
       "tokens already in the cache before the pp batch and before the tg steps, as llama-bench's -d (default 0)",
       CLI::NonNegativeNumber},
      {"--bw-mib", &BenchOptions::bw_mib, "buffer for the memory bandwidth pass in MiB; 0 skips (default 1024)",
       CLI::Range(0, 1 << 20)},
      {"--bw-passes", &BenchOptions::bw_passes, "memory bandwidth passes, the best is kept (default 5)",
       CLI::Range(1, 1000)},
      {"--parallel", &BenchOptions::parallel,
       "sequences decoded together, each with its own -p prompt (llama-batched-bench's -npl; default 1)",
       CLI::Range(1, 256)},
  };
  return flags;
}

// The context one run measures in, and the token counts that size it.
struct BenchShape {
  int n_threads = 0;
  int np = 1;            // sequences decoded together
  bool par = false;      // np > 1
  bool enc_dec = false;  // an encoder-decoder (T5)
  int n_enc = 0;         // encoder tokens before the decoder's steps
  int pp_depth = 0;      // tokens in the cache before the pp batch (-d; 0 for an encoder-decoder)
  int64_t n_ctx = 0;
  int64_t n_ubatch = 0;
};

// The shape of a run, or an error message.
std::optional<BenchShape> bench_shape(const BenchOptions& o, const api::Model& model, std::string* error) {
  BenchShape sh;
  sh.n_threads = o.threads > 0 ? o.threads : api::cpu_count();
  sh.np = o.parallel;
  sh.par = sh.np > 1;
  sh.enc_dec = model.has_encoder() && model.has_decoder();
  if (sh.enc_dec && sh.par) {
    *error = "--parallel is not supported for encoder-decoder models";
    return std::nullopt;
  }
  sh.n_enc = sh.enc_dec ? (o.n_prompt > 0 ? o.n_prompt : int(std::min<int64_t>(512, model.n_ctx_train()))) : 0;
  // Parallel: every sequence holds its prompt, the extra depth and its generated tokens at once.
  // One sequence: the prompt after the depth (an encoder-decoder's pp is its encoder's, from 0).
  sh.pp_depth = sh.enc_dec || sh.par ? 0 : o.depth;
  sh.n_ctx = sh.par ? std::max<int64_t>(int64_t(sh.np) * (int64_t(o.n_prompt) + o.depth + o.n_gen), 1)
                    : std::max<int64_t>({int64_t(sh.pp_depth) + o.n_prompt, int64_t(o.depth) + o.n_gen, 1});
  sh.n_ubatch = sh.par ? std::min<int64_t>(std::max<int64_t>(int64_t(sh.np) * o.n_prompt, sh.np), 512)
                       : (o.n_prompt > 0 ? o.n_prompt : std::max<int64_t>(sh.n_enc, std::min<int64_t>(512, sh.n_ctx)));
  // The context reserves an n_ubatch × n_ctx attention mask of floats: refuse absurd sizes up front.
  if (sh.n_ctx > (1 << 24) ||
      (!model.is_recurrent() && sh.n_ubatch * sh.n_ctx * int64_t(sizeof(float)) > (int64_t(4) << 30))) {
    *error = "-p " + std::to_string(o.n_prompt) + " over a context of " + std::to_string(sh.n_ctx) +
             " tokens is too large to measure";
    return std::nullopt;
  }
  return sh;
}

api::Expected<api::Context> bench_context(const BenchOptions& o, const BenchShape& sh, const api::Model& model) {
  api::ContextParams cp;
  cp.p.n_ctx = int(sh.n_ctx);
  cp.p.n_batch = cp.p.n_ubatch = int(sh.n_ubatch);
  if (sh.par) {
    cp.p.n_seq_max = sh.np;
    cp.p.n_batch = int(std::max<int64_t>(int64_t(sh.np) * std::max(o.n_prompt, 1), sh.np));
  }
  cp.p.n_threads = sh.n_threads;
  cp.p.n_threads_batch = sh.n_threads;
  // Parallel runs use a unified cache: any sequence may use every cell (llama-batched-bench's -kvu).
  return api::Context::create(model, cp, sh.par ? R"({"kv_unified": true})" : "{}");
}

// A batch of one sequence's tokens from position pos0, logits for the last only.
api::Batch batch_of(const std::vector<int32_t>& toks, size_t from, size_t n, int32_t pos0) {
  api::Batch b(int32_t(std::max<size_t>(n, 1)));
  b.add_tokens(toks.data() + from, n, pos0);
  b.set_logits_last();
  return b;
}

double tokens_per_second(double tokens, int64_t t0) { return tokens * 1e6 / double(std::max<int64_t>(1, now_us() - t0)); }

// The timed runs of one context: each clears the cache first.
class BenchRuns {
 public:
  BenchRuns(const BenchOptions& o, const BenchShape& sh, const api::Model& model, api::Context& ctx)
      : o_(o), sh_(sh), ctx_(ctx), n_vocab_(model.n_vocab()), bos_(model.bos()) {}

  std::vector<double> pp_dec_runs;  // an encoder-decoder's decoder over the prompt, per pp run

  // pp: the prompt in one batch after the depth (the encoder's, then the decoder's, for an
  // encoder-decoder, from position 0).
  Status run_pp(double& tps) {
    ctx_.kv_clear();
    BENCH_TRY(fill_depth(sh_.pp_depth));
    const std::vector<int32_t> toks = random_tokens(o_.n_prompt, sh_.pp_depth == 0);
    const api::Batch b = batch_of(toks, 0, toks.size(), sh_.pp_depth);
    if (sh_.enc_dec) {
      int64_t t0 = now_us();
      BENCH_TRY(ctx_.encode(b));
      tps = tokens_per_second(double(o_.n_prompt), t0);
      t0 = now_us();
      BENCH_TRY(ctx_.decode(b));
      pp_dec_runs.push_back(tokens_per_second(double(o_.n_prompt), t0));
      return Status::ok();
    }
    const int64_t t0 = now_us();
    BENCH_TRY(ctx_.decode(b));
    tps = tokens_per_second(double(o_.n_prompt), t0);
    return Status::ok();
  }

  // tg: single-token decodes after the depth (and the encoder's tokens).
  Status run_tg(double& tps) {
    ctx_.kv_clear();
    if (sh_.enc_dec) {
      const std::vector<int32_t> enc = random_tokens(sh_.n_enc, true);
      BENCH_TRY(ctx_.encode(batch_of(enc, 0, enc.size(), 0)));
    }
    BENCH_TRY(fill_depth(o_.depth));
    const std::vector<int32_t> toks = random_tokens(o_.n_gen, o_.depth == 0);
    api::Batch b(1);
    const int64_t t0 = now_us();
    for (int i = 0; i < o_.n_gen; ++i) {
      b.clear();
      b.add(toks[size_t(i)], o_.depth + i, 0, true);
      BENCH_TRY(ctx_.decode(b));
    }
    tps = tokens_per_second(double(o_.n_gen), t0);
    return Status::ok();
  }

  // --parallel: N prompts in one batch (pp), then N tokens per decode (tg).
  Status run_par(double& pp_tps, double& tg_tps) {
    const int np = sh_.np;
    ctx_.kv_clear();
    api::Batch b(std::max(1, np * o_.n_prompt));
    for (int s = 0; s < np; ++s) {
      const std::vector<int32_t> toks = random_tokens(o_.n_prompt + o_.depth, true);
      for (int i = 0; i < o_.n_prompt; ++i) b.add(toks[size_t(i)], i, s, i == o_.n_prompt - 1);
    }
    int64_t t0 = now_us();
    if (b.size() > 0) BENCH_TRY(ctx_.decode(b));
    pp_tps = tokens_per_second(double(np) * o_.n_prompt, t0);
    BENCH_TRY(fill_parallel_depth());
    const int start = o_.n_prompt + o_.depth;
    api::Batch d(np);
    t0 = now_us();
    for (int k = 0; k < o_.n_gen; ++k) {
      d.clear();
      for (int s = 0; s < np; ++s) d.add(int32_t(rng_() % uint32_t(n_vocab_)), start + k, s, true);
      BENCH_TRY(ctx_.decode(d));
    }
    tg_tps = tokens_per_second(double(np) * o_.n_gen, t0);
    return Status::ok();
  }

 private:
  // Random valid ids, fixed seed; BOS first as llama-bench does.
  std::vector<int32_t> random_tokens(int n, bool with_bos) {
    std::vector<int32_t> t(size_t(std::max(n, 0)));
    for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(rng_() % uint32_t(n_vocab_));
    if (with_bos && !t.empty() && bos_ >= 0 && bos_ < n_vocab_) t[0] = bos_;
    return t;
  }

  // Fills the cache of sequence 0 to `depth` tokens (not timed), in batches of n_ubatch.
  Status fill_depth(int depth) {
    const std::vector<int32_t> fill = random_tokens(depth, true);
    for (int i = 0; i < depth; i += ctx_.n_ubatch()) {
      const int n = std::min(ctx_.n_ubatch(), depth - i);
      BENCH_TRY(ctx_.decode(batch_of(fill, size_t(i), size_t(n), i)));
    }
    return Status::ok();
  }

  // Extra depth per sequence of a parallel run (not timed).
  Status fill_parallel_depth() {
    const int np = sh_.np;
    for (int d = 0; d < o_.depth; d += std::max(1, ctx_.n_ubatch() / np)) {
      const int n = std::min(std::max(1, ctx_.n_ubatch() / np), o_.depth - d);
      api::Batch f(n * np);
      for (int s = 0; s < np; ++s) {
        const std::vector<int32_t> toks = random_tokens(n, false);
        for (int i = 0; i < n; ++i) f.add(toks[size_t(i)], o_.n_prompt + d + i, s, false);
      }
      BENCH_TRY(ctx_.decode(f));
    }
    return Status::ok();
  }

  const BenchOptions& o_;
  const BenchShape& sh_;
  api::Context& ctx_;
  const int32_t n_vocab_;
  const int32_t bos_;
  std::mt19937 rng_{1234567u};
};

// The runs' speeds: a warm-up of each test first, then -r repetitions.
struct BenchRunsResult {
  std::vector<double> pp_runs, tg_runs, pp_dec_runs;
};

Status measure(const BenchOptions& o, const BenchShape& sh, BenchRuns& runs, BenchRunsResult& r) {
  double warm = 0.0;
  if (sh.par) {
    double a = 0, b = 0;
    BENCH_TRY(runs.run_par(a, b));  // warm-up
    for (int k = 0; k < o.reps; ++k) {
      BENCH_TRY(runs.run_par(a, b));
      if (o.n_prompt > 0) r.pp_runs.push_back(a);
      if (o.n_gen > 0) r.tg_runs.push_back(b);
    }
    return Status::ok();
  }
  if (o.n_prompt > 0) BENCH_TRY(runs.run_pp(warm));
  if (o.n_gen > 0) BENCH_TRY(runs.run_tg(warm));
  for (int k = 0; k < o.reps && o.n_prompt > 0; ++k) {
    double tps = 0.0;
    BENCH_TRY(runs.run_pp(tps));
    r.pp_runs.push_back(tps);
  }
  for (int k = 0; k < o.reps && o.n_gen > 0; ++k) {
    double tps = 0.0;
    BENCH_TRY(runs.run_tg(tps));
    r.tg_runs.push_back(tps);
  }
  r.pp_dec_runs = runs.pp_dec_runs;
  if (sh.enc_dec && !r.pp_dec_runs.empty()) r.pp_dec_runs.erase(r.pp_dec_runs.begin());  // the warm-up's
  return Status::ok();
}

// Bytes one tg step reads besides the weights: for each layer the K and V rows of every cell it
// attends to (depth + i + 1 at step i; after its prompt in parallel runs), averaged over the run,
// per sequence; a recurrent model reads its sequence's state instead, whatever the depth.
double kv_bytes_per_token(const BenchOptions& o, const BenchShape& sh, const api::Model& model, api::Context& ctx) {
  if (model.is_recurrent()) return o.n_gen > 0 ? double(loom_recurrent_seq_state_bytes(ctx.handle())) : 0.0;
  const double kv_row = double(loom_kv_cell_bytes(ctx.handle()));  // K + V of one cell, every layer
  const double avg_cells = o.n_gen > 0 ? double(o.depth + (sh.par ? o.n_prompt : 0)) + double(o.n_gen + 1) / 2.0 : 0.0;
  double kv_bytes = kv_row * avg_cells;
  // T5: each step also reads the cross-attention K/V of the encoder's tokens (cache types).
  if (sh.enc_dec && o.n_gen > 0) kv_bytes += double(sh.n_enc) * kv_row;
  return kv_bytes;
}

// Everything a report prints.
struct BenchReport {
  BenchRunsResult runs;
  double pp_tps = 0, tg_tps = 0, pp_dec_tps = 0;
  double weight_bytes = 0, kv_bytes = 0, tg_gbps = 0, fraction = 0;
  uint64_t weight_bytes_per_token = 0;
  MemBandwidth bw;
};

nlohmann::json rounded(const std::vector<double>& xs) {
  nlohmann::json a = nlohmann::json::array();
  for (double x : xs) a.push_back(round2(x));
  return a;
}

void print_json(const BenchOptions& o, const BenchShape& sh, const BenchReport& r) {
  nlohmann::json j;
  j["model"] = o.model;
  j["threads"] = sh.n_threads;
  j["isa"] = cpu_features().isa_level();
  j["isa_extras"] = cpu_features().isa_extras();  // "+fhm": F16 weights by FMLAL (AArch64)
  j["pp_tokens"] = o.n_prompt;
  j["tg_tokens"] = o.n_gen;
  j["pp_tps"] = round2(r.pp_tps);
  j["tg_tps"] = round2(r.tg_tps);
  j["tg_gbps"] = std::round(r.tg_gbps * 1000.0) / 1000.0;
  j["mem_bw_gbps"] = round2(r.bw.gbps);
  j["bw_fraction"] = std::round(r.fraction * 10000.0) / 10000.0;
  j["depth"] = o.depth;
  j["reps"] = o.reps;
  j["statistic"] = "median";
  j["pp_runs"] = rounded(r.runs.pp_runs);
  j["tg_runs"] = rounded(r.runs.tg_runs);
  j["weight_bytes_per_token"] = r.weight_bytes_per_token;
  j["kv_bytes_per_token"] = uint64_t(r.kv_bytes);
  j["mem_bw_kernel"] = r.bw.kernel;
  j["mem_bw_bytes"] = r.bw.bytes;
  if (sh.enc_dec) {
    j["encoder_decoder"] = true;
    j["encoder_tokens"] = sh.n_enc;
    j["pp_decoder_tps"] = round2(r.pp_dec_tps);
    j["pp_decoder_runs"] = rounded(r.runs.pp_dec_runs);
  }
  if (sh.par) {
    j["parallel"] = sh.np;
    j["aggregate_tps"] = round2(r.tg_tps);
    j["per_stream_tps"] = round2(r.tg_tps / sh.np);
    j["pp_aggregate_tps"] = round2(r.pp_tps);
  }
  std::cout << j.dump() << "\n";
}

// The tg line of the text report and what it reads per step.
void print_tg_text(const BenchOptions& o, const BenchShape& sh, const BenchReport& r) {
  char label[32];
  if (o.depth > 0) std::snprintf(label, sizeof label, "tg%d@d%d", o.n_gen, o.depth);
  else std::snprintf(label, sizeof label, "tg%d", o.n_gen);
  if (sh.par) std::snprintf(label + std::strlen(label), sizeof label - std::strlen(label), "x%d", sh.np);
  std::printf("%-10s %12.2f   %s\n", label, r.tg_tps, join_runs(r.runs.tg_runs).c_str());
  if (sh.par) std::printf("per stream %10.2f tokens/s\n", r.tg_tps / sh.np);
  if (sh.par) {
    std::printf("tg reads %s per step of %d tokens (weights %s + KV %d x %s): %.2f GB/s\n",
                human_bytes(r.weight_bytes + r.kv_bytes * sh.np).c_str(), sh.np, human_bytes(r.weight_bytes).c_str(), sh.np,
                human_bytes(r.kv_bytes).c_str(), r.tg_gbps);
  } else {
    std::printf("tg reads %s per token (weights %s + KV %s): %.2f GB/s\n", human_bytes(r.weight_bytes + r.kv_bytes).c_str(),
                human_bytes(r.weight_bytes).c_str(), human_bytes(r.kv_bytes).c_str(), r.tg_gbps);
  }
}

void print_text(const BenchOptions& o, const BenchShape& sh, const api::Model& model, const BenchReport& r) {
  const std::string name = std::filesystem::path(o.model).filename().string();
  std::printf("model    %s: %s, %.2f M params, %s of weights read per token\n", name.c_str(), model.arch().c_str(),
              double(model.n_params()) / 1e6, human_bytes(r.weight_bytes).c_str());
  std::printf("threads  %d (%s%s kernels), median of %d after a warm-up, depth %d", sh.n_threads, cpu_features().isa_level(),
              cpu_features().isa_extras(), o.reps, o.depth);
  if (sh.par) std::printf(", %d sequences decoded together (aggregate tokens/s)", sh.np);
  std::printf("\n");
  std::printf("%-10s %12s   %s\n", "test", "tokens/s", "runs");
  if (o.n_prompt > 0) {
    char label[32];
    if (sh.par) std::snprintf(label, sizeof label, "pp%dx%d", o.n_prompt, sh.np);
    else if (sh.pp_depth > 0) std::snprintf(label, sizeof label, "pp%d@d%d", o.n_prompt, sh.pp_depth);
    else std::snprintf(label, sizeof label, "pp%d", o.n_prompt);
    std::printf("%-10s %12.2f   %s%s\n", label, r.pp_tps, join_runs(r.runs.pp_runs).c_str(),
                sh.enc_dec ? "   (encoder)" : "");
    if (sh.enc_dec) {
      std::printf("%-10s %12.2f   %s   (decoder prompt)\n", label, r.pp_dec_tps, join_runs(r.runs.pp_dec_runs).c_str());
    }
  }
  if (o.n_gen > 0) print_tg_text(o, sh, r);
  if (r.bw.gbps > 0.0) {
    std::printf("memory   read bandwidth %.2f GB/s (%d thread%s, %s, %zu MiB, best of %d)", r.bw.gbps, r.bw.threads,
                r.bw.threads == 1 ? "" : "s", r.bw.kernel.c_str(), r.bw.bytes >> 20, r.bw.passes);
    if (o.n_gen > 0) std::printf(": tg reaches %.1f %% of it", 100.0 * r.fraction);
    std::printf("\n");
  }
}

// `loom bench`: 0 on success, 1 on a runtime error, 2 on a usage error.
int run_bench(const BenchOptions& o) {
  if (o.n_prompt == 0 && o.n_gen == 0) {
    std::fprintf(stderr, "loom: nothing to measure: -p and -n are both 0\n");
    return 2;
  }
  auto model = load_model_or_report(o.model);
  if (!model) return 1;
  std::string error;
  const std::optional<BenchShape> sh = bench_shape(o, *model, &error);
  if (!sh) return fail(error);
  auto ctx = bench_context(o, *sh, *model);
  if (!ctx) return fail(ctx.status());
  BenchReport r;
  {
    BenchRuns runs(o, *sh, *model, *ctx);
    if (Status st = measure(o, *sh, runs, r.runs); !st) return fail(st);
  }
  r.pp_tps = median(r.runs.pp_runs);
  r.tg_tps = median(r.runs.tg_runs);
  r.pp_dec_tps = median(r.runs.pp_dec_runs);
  r.kv_bytes = kv_bytes_per_token(o, *sh, *model, *ctx);
  r.weight_bytes_per_token = model->decode_weight_bytes();
  r.weight_bytes = double(r.weight_bytes_per_token);
  // A parallel step reads the weights once and every sequence's KV: tg_tps / N steps per second.
  r.tg_gbps = (r.weight_bytes + r.kv_bytes * sh->np) * (r.tg_tps / sh->np) / 1e9;
  { auto freed = std::move(*ctx); }  // free the context (KV cache, scratch) before the 1 GiB pass
  if (o.bw_mib > 0) r.bw = measure_read_bandwidth(size_t(o.bw_mib) << 20, sh->n_threads, o.bw_passes);
  r.fraction = r.bw.gbps > 0.0 ? r.tg_gbps / r.bw.gbps : 0.0;
  if (o.json) print_json(o, *sh, r);
  else print_text(o, *sh, *model, r);
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand("bench", "Measure prompt (pp) and generation (tg) speed, like llama-bench");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  for (const IntFlag& f : bench_flags()) sub->add_option(f.names, (*o).*f.field, f.help)->check(f.check);
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->callback([o, &exit_code] { exit_code = run_bench(*o); });
}

}  // namespace loom::cli
