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

#define BENCH_TRY(expr)                   \
  do {                                    \
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

}  // namespace

void register_bench(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string model;
    int n_prompt = 512, n_gen = 128, threads = 0, reps = 3, depth = 0, bw_mib = 1024, bw_passes = 5, parallel = 1;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("bench", "Measure prompt (pp) and generation (tg) speed, like llama-bench");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  sub->add_option("-p,--n-prompt", o->n_prompt, "pp: tokens of the prompt batch, one forward pass; 0 skips (default 512)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-n,--n-gen", o->n_gen, "tg: single-token decode steps; 0 skips (default 128)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  sub->add_option("-r,--reps", o->reps, "repetitions; the median is reported (default 3)")->check(CLI::Range(1, 1000));
  sub->add_option("-d,--depth", o->depth, "tokens already in the cache before the tg steps (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--bw-mib", o->bw_mib, "buffer for the memory bandwidth pass in MiB; 0 skips (default 1024)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--bw-passes", o->bw_passes, "memory bandwidth passes, the best is kept (default 5)")
      ->check(CLI::Range(1, 1000));
  sub->add_option("--parallel", o->parallel,
                  "sequences decoded together, each with its own -p prompt (llama-batched-bench's -npl; default 1)")
      ->check(CLI::Range(1, 256));
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->callback([o, &exit_code] {
    if (o->n_prompt == 0 && o->n_gen == 0) {
      std::fprintf(stderr, "loom: nothing to measure: -p and -n are both 0\n");
      exit_code = 2;
      return;
    }
    exit_code = 1;
    auto model = load_model_or_report(o->model);
    if (!model) return;
    const int n_threads = o->threads > 0 ? o->threads : api::cpu_count();
    const int np = o->parallel;
    const bool par = np > 1;
    const bool enc_dec = model->has_encoder() && model->has_decoder();
    if (enc_dec && par) { fail("--parallel is not supported for encoder-decoder models"); return; }
    const int n_enc = enc_dec ? (o->n_prompt > 0 ? o->n_prompt : int(std::min<int64_t>(512, model->n_ctx_train()))) : 0;
    // Parallel: every sequence holds its prompt, the extra depth and its generated tokens at once.
    const int64_t n_ctx64 = par ? std::max<int64_t>(int64_t(np) * (int64_t(o->n_prompt) + o->depth + o->n_gen), 1)
                                : std::max<int64_t>({int64_t(o->n_prompt), int64_t(o->depth) + o->n_gen, 1});
    const int64_t n_ubatch = par ? std::min<int64_t>(std::max<int64_t>(int64_t(np) * o->n_prompt, np), 512)
                                 : (o->n_prompt > 0 ? o->n_prompt : std::max<int64_t>(n_enc, std::min<int64_t>(512, n_ctx64)));
    // The context reserves an n_ubatch × n_ctx attention mask of floats: refuse absurd sizes up front.
    if (n_ctx64 > (1 << 24) || (!model->is_recurrent() && n_ubatch * n_ctx64 * int64_t(sizeof(float)) > (int64_t(4) << 30))) {
      fail("-p " + std::to_string(o->n_prompt) + " over a context of " + std::to_string(n_ctx64) +
           " tokens is too large to measure");
      return;
    }

    api::ContextParams cp;
    cp.p.n_ctx = int(n_ctx64);
    cp.p.n_batch = cp.p.n_ubatch = int(n_ubatch);
    if (par) {
      cp.p.n_seq_max = np;
      cp.p.n_batch = int(std::max<int64_t>(int64_t(np) * std::max(o->n_prompt, 1), np));
    }
    cp.p.n_threads = n_threads;
    cp.p.n_threads_batch = n_threads;
    // Parallel runs use a unified cache: any sequence may use every cell (llama-batched-bench's -kvu).
    std::optional<api::Context> ctx_or;
    if (auto c = api::Context::create(*model, cp, par ? R"({"kv_unified": true})" : "{}")) {
      ctx_or = std::move(*c);
    } else {
      fail(c.status());
      return;
    }
    api::Context& ctx = *ctx_or;

    // Random valid ids, fixed seed; BOS first as llama-bench does.
    std::mt19937 rng(1234567u);
    const int32_t n_vocab = model->n_vocab();
    const int32_t bos = model->bos();
    auto random_tokens = [&](int n, bool with_bos) {
      std::vector<int32_t> t(size_t(std::max(n, 0)));
      for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(rng() % uint32_t(n_vocab));
      if (with_bos && !t.empty() && bos >= 0 && bos < n_vocab) t[0] = bos;
      return t;
    };

    std::vector<double> pp_dec_runs;
    // A batch of one sequence's tokens from position pos0, logits for the last only.
    auto batch_of = [](const std::vector<int32_t>& toks, size_t from, size_t n, int32_t pos0) {
      api::Batch b(int32_t(std::max<size_t>(n, 1)));
      b.add_tokens(toks.data() + from, n, pos0);
      b.set_logits_last();
      return b;
    };
    auto run_pp = [&](double& tps) -> Status {
      ctx.kv_clear();
      const std::vector<int32_t> toks = random_tokens(o->n_prompt, true);
      const api::Batch b = batch_of(toks, 0, toks.size(), 0);
      if (enc_dec) {
        int64_t t0 = now_us();
        BENCH_TRY(ctx.encode(b));
        tps = double(o->n_prompt) * 1e6 / double(std::max<int64_t>(1, now_us() - t0));
        t0 = now_us();
        BENCH_TRY(ctx.decode(b));
        pp_dec_runs.push_back(double(o->n_prompt) * 1e6 / double(std::max<int64_t>(1, now_us() - t0)));
        return Status::ok();
      }
      const int64_t t0 = now_us();
      BENCH_TRY(ctx.decode(b));
      const int64_t dt = std::max<int64_t>(1, now_us() - t0);
      tps = double(o->n_prompt) * 1e6 / double(dt);
      return Status::ok();
    };
    auto run_tg = [&](double& tps) -> Status {
      ctx.kv_clear();
      if (enc_dec) {
        const std::vector<int32_t> enc = random_tokens(n_enc, true);
        BENCH_TRY(ctx.encode(batch_of(enc, 0, enc.size(), 0)));
      }
      // Fill the cache to the depth (not timed), in batches of n_ubatch.
      const std::vector<int32_t> fill = random_tokens(o->depth, true);
      for (int i = 0; i < o->depth; i += ctx.n_ubatch()) {
        const int n = std::min(ctx.n_ubatch(), o->depth - i);
        BENCH_TRY(ctx.decode(batch_of(fill, size_t(i), size_t(n), i)));
      }
      const std::vector<int32_t> toks = random_tokens(o->n_gen, o->depth == 0);
      api::Batch b(1);
      const int64_t t0 = now_us();
      for (int i = 0; i < o->n_gen; ++i) {
        b.clear();
        b.add(toks[size_t(i)], o->depth + i, 0, true);
        BENCH_TRY(ctx.decode(b));
      }
      const int64_t dt = std::max<int64_t>(1, now_us() - t0);
      tps = double(o->n_gen) * 1e6 / double(dt);
      return Status::ok();
    };

    // --parallel: N prompts in one batch (pp), then N tokens per decode (tg).
    auto run_par = [&](double& pp_tps, double& tg_tps) -> Status {
      ctx.kv_clear();
      api::Batch b(std::max(1, np * o->n_prompt));
      for (int s = 0; s < np; ++s) {
        const std::vector<int32_t> toks = random_tokens(o->n_prompt + o->depth, true);
        for (int i = 0; i < o->n_prompt; ++i) b.add(toks[size_t(i)], i, s, i == o->n_prompt - 1);
      }
      int64_t t0 = now_us();
      if (b.size() > 0) BENCH_TRY(ctx.decode(b));
      pp_tps = double(np) * o->n_prompt * 1e6 / double(std::max<int64_t>(1, now_us() - t0));
      // Extra depth per sequence (not timed).
      for (int d = 0; d < o->depth; d += std::max(1, ctx.n_ubatch() / np)) {
        const int n = std::min(std::max(1, ctx.n_ubatch() / np), o->depth - d);
        api::Batch f(n * np);
        for (int s = 0; s < np; ++s) {
          const std::vector<int32_t> toks = random_tokens(n, false);
          for (int i = 0; i < n; ++i) f.add(toks[size_t(i)], o->n_prompt + d + i, s, false);
        }
        BENCH_TRY(ctx.decode(f));
      }
      const int start = o->n_prompt + o->depth;
      api::Batch d(np);
      t0 = now_us();
      for (int k = 0; k < o->n_gen; ++k) {
        d.clear();
        for (int s = 0; s < np; ++s) d.add(int32_t(rng() % uint32_t(n_vocab)), start + k, s, true);
        BENCH_TRY(ctx.decode(d));
      }
      tg_tps = double(np) * o->n_gen * 1e6 / double(std::max<int64_t>(1, now_us() - t0));
      return Status::ok();
    };

    std::vector<double> pp_runs, tg_runs;
    double warm = 0.0;
    if (par) {
      double a = 0, b = 0;
      if (Status st = run_par(a, b); !st) { fail(st); return; }  // warm-up
      for (int r = 0; r < o->reps; ++r) {
        if (Status st = run_par(a, b); !st) { fail(st); return; }
        if (o->n_prompt > 0) pp_runs.push_back(a);
        if (o->n_gen > 0) tg_runs.push_back(b);
      }
    }
    if (o->n_prompt > 0 && !par) {
      if (Status st = run_pp(warm); !st) { fail(st); return; }
    }
    if (o->n_gen > 0 && !par) {
      if (Status st = run_tg(warm); !st) { fail(st); return; }
    }
    for (int r = 0; r < o->reps && o->n_prompt > 0 && !par; ++r) {
      double tps = 0.0;
      if (Status st = run_pp(tps); !st) { fail(st); return; }
      pp_runs.push_back(tps);
    }
    for (int r = 0; r < o->reps && o->n_gen > 0 && !par; ++r) {
      double tps = 0.0;
      if (Status st = run_tg(tps); !st) { fail(st); return; }
      tg_runs.push_back(tps);
    }
    if (enc_dec && !pp_dec_runs.empty()) pp_dec_runs.erase(pp_dec_runs.begin());  // the warm-up's
    const double pp_tps = median(pp_runs), tg_tps = median(tg_runs), pp_dec_tps = median(pp_dec_runs);

    // Bytes one tg step reads: every weight matrix once, plus for each layer the K and V rows of
    // every cell it attends to (depth + i + 1 at step i; after its prompt in parallel runs),
    // averaged over the run, per sequence; a recurrent model reads its sequence's state instead,
    // whatever the depth.
    double kv_bytes = 0.0;
    if (model->is_recurrent()) {
      kv_bytes = o->n_gen > 0 ? double(loom_recurrent_seq_state_bytes(ctx.handle())) : 0.0;
    } else {
      const double kv_row = double(loom_kv_cell_bytes(ctx.handle()));  // K + V of one cell, every layer
      const double avg_cells =
          o->n_gen > 0 ? double(o->depth + (par ? o->n_prompt : 0)) + double(o->n_gen + 1) / 2.0 : 0.0;
      kv_bytes = kv_row * avg_cells;
      // T5: each step also reads the cross-attention K/V of the encoder's tokens (cache types).
      if (enc_dec && o->n_gen > 0) kv_bytes += double(n_enc) * kv_row;
    }
    const double weight_bytes = double(model->decode_weight_bytes());
    // A parallel step reads the weights once and every sequence's KV: tg_tps / N steps per second.
    const double tg_gbps = (weight_bytes + kv_bytes * np) * (tg_tps / np) / 1e9;

    ctx_or.reset();  // free the context (KV cache, scratch) before the 1 GiB pass
    MemBandwidth bw;
    if (o->bw_mib > 0) bw = measure_read_bandwidth(size_t(o->bw_mib) << 20, n_threads, o->bw_passes);
    const double fraction = bw.gbps > 0.0 ? tg_gbps / bw.gbps : 0.0;

    const std::string name = std::filesystem::path(o->model).filename().string();
    if (o->json) {
      nlohmann::json j;
      j["model"] = o->model;
      j["threads"] = n_threads;
      j["isa"] = cpu_features().isa_level();
      j["pp_tokens"] = o->n_prompt;
      j["tg_tokens"] = o->n_gen;
      j["pp_tps"] = round2(pp_tps);
      j["tg_tps"] = round2(tg_tps);
      j["tg_gbps"] = std::round(tg_gbps * 1000.0) / 1000.0;
      j["mem_bw_gbps"] = round2(bw.gbps);
      j["bw_fraction"] = std::round(fraction * 10000.0) / 10000.0;
      j["depth"] = o->depth;
      j["reps"] = o->reps;
      j["statistic"] = "median";
      j["pp_runs"] = nlohmann::json::array();
      for (double x : pp_runs) j["pp_runs"].push_back(round2(x));
      j["tg_runs"] = nlohmann::json::array();
      for (double x : tg_runs) j["tg_runs"].push_back(round2(x));
      j["weight_bytes_per_token"] = model->decode_weight_bytes();
      j["kv_bytes_per_token"] = uint64_t(kv_bytes);
      j["mem_bw_kernel"] = bw.kernel;
      j["mem_bw_bytes"] = bw.bytes;
      if (enc_dec) {
        j["encoder_decoder"] = true;
        j["encoder_tokens"] = n_enc;
        j["pp_decoder_tps"] = round2(pp_dec_tps);
        j["pp_decoder_runs"] = nlohmann::json::array();
        for (double x : pp_dec_runs) j["pp_decoder_runs"].push_back(round2(x));
      }
      if (par) {
        j["parallel"] = np;
        j["aggregate_tps"] = round2(tg_tps);
        j["per_stream_tps"] = round2(tg_tps / np);
        j["pp_aggregate_tps"] = round2(pp_tps);
      }
      std::cout << j.dump() << "\n";
    } else {
      std::printf("model    %s: %s, %.2f M params, %s of weights read per token\n", name.c_str(),
                  model->arch().c_str(), double(model->n_params()) / 1e6, human_bytes(weight_bytes).c_str());
      std::printf("threads  %d (%s kernels), median of %d after a warm-up, depth %d", n_threads,
                  cpu_features().isa_level(), o->reps, o->depth);
      if (par) std::printf(", %d sequences decoded together (aggregate tokens/s)", np);
      std::printf("\n");
      std::printf("%-10s %12s   %s\n", "test", "tokens/s", "runs");
      char label[32];
      if (o->n_prompt > 0) {
        std::snprintf(label, sizeof label, par ? "pp%dx%d" : "pp%d", o->n_prompt, np);
        std::printf("%-10s %12.2f   %s%s\n", label, pp_tps, join_runs(pp_runs).c_str(), enc_dec ? "   (encoder)" : "");
        if (enc_dec) std::printf("%-10s %12.2f   %s   (decoder prompt)\n", label, pp_dec_tps, join_runs(pp_dec_runs).c_str());
      }
      if (o->n_gen > 0) {
        if (o->depth > 0) std::snprintf(label, sizeof label, "tg%d@d%d", o->n_gen, o->depth);
        else std::snprintf(label, sizeof label, "tg%d", o->n_gen);
        if (par) std::snprintf(label + std::strlen(label), sizeof label - std::strlen(label), "x%d", np);
        std::printf("%-10s %12.2f   %s\n", label, tg_tps, join_runs(tg_runs).c_str());
        if (par) std::printf("per stream %10.2f tokens/s\n", tg_tps / np);
        if (par) {
          std::printf("tg reads %s per step of %d tokens (weights %s + KV %d x %s): %.2f GB/s\n",
                      human_bytes(weight_bytes + kv_bytes * np).c_str(), np, human_bytes(weight_bytes).c_str(), np,
                      human_bytes(kv_bytes).c_str(), tg_gbps);
        } else {
          std::printf("tg reads %s per token (weights %s + KV %s): %.2f GB/s\n",
                      human_bytes(weight_bytes + kv_bytes).c_str(), human_bytes(weight_bytes).c_str(),
                      human_bytes(kv_bytes).c_str(), tg_gbps);
        }
      }
      if (bw.gbps > 0.0) {
        std::printf("memory   read bandwidth %.2f GB/s (%d thread%s, %s, %zu MiB, best of %d)", bw.gbps, bw.threads,
                    bw.threads == 1 ? "" : "s", bw.kernel.c_str(), bw.bytes >> 20, bw.passes);
        if (o->n_gen > 0) std::printf(": tg reaches %.1f %% of it", 100.0 * fraction);
        std::printf("\n");
      }
    }
    exit_code = 0;
  });
}

}  // namespace loom::cli
