// The serving scheduler's cost over a bare decode loop, on one stream (what loom-node's
// completion() and a single `loom serve` client pay): the same greedy generation, interleaved,
//   - "loop": Context::decode one token at a time + greedy sampler + stream detokenizer (what
//     `loom generate` does);
//   - "scheduler": serve::Scheduler with one request, events consumed by a callback;
// and the decode bandwidth (weight bytes per token x tok/s). Plain main(), no Google Benchmark.
//
//   loom_bench_scheduler MODEL.gguf [--threads 2] [--tokens 256] [--reps 3] [--ctx 2048] [--slots 1]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "context/context.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "serve/scheduler.h"
#include "vocab/stream_detokenizer.h"

using namespace loom;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int arg_int(int argc, char** argv, const char* name, int def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return def;
}

// Tokens per second of the generation phase (prompt excluded), one greedy run.
double run_loop(std::shared_ptr<const Model> model, const std::vector<int32_t>& prompt, int n_tokens, int threads,
                int n_ctx) {
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_threads = threads;
  auto ctx = Context::create(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "context: %s\n", ctx.status().message().c_str());
    std::exit(1);
  }
  Context& c = **ctx;
  SamplerParams sp;
  sp.temp = 0.0f;
  auto sampler = Sampler::create(sp, &model->vocab());
  if (!sampler) std::exit(1);
  StreamDetokenizerOptions dopt;
  dopt.continuation = true;
  StreamDetokenizer detok(model->vocab(), dopt);
  if (!c.decode(Batch::from_tokens(prompt, 0))) std::exit(1);
  int32_t pos = int32_t(prompt.size());
  std::string text;
  const double t0 = now_s();
  for (int i = 0; i < n_tokens; ++i) {
    auto logits = c.logits(-1);
    const int32_t tok = sampler->sample(*logits);
    sampler->accept(tok);
    auto piece = detok.push(tok);
    if (piece) text += *piece;
    int32_t one[1] = {tok};
    if (!c.decode(Batch::from_tokens(one, pos++))) std::exit(1);
  }
  return n_tokens / (now_s() - t0);
}

double run_sched(std::shared_ptr<const Model> model, const std::vector<int32_t>& prompt, int n_tokens, int threads,
                 int n_ctx, int slots) {
  serve::SchedulerParams p;
  p.context.n_ctx = n_ctx;
  p.context.n_threads = threads;
  p.n_slots = slots;
  auto s = serve::Scheduler::create(model, p);
  if (!s) {
    std::fprintf(stderr, "scheduler: %s\n", s.status().message().c_str());
    std::exit(1);
  }
  serve::GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = n_tokens + 1;
  r.ignore_eos = true;
  r.sampling.temp = 0.0f;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int n = 0;
  double t_first = 0, t_last = 0;
  std::string text;
  auto id = (*s)->submit(std::move(r), [&](const serve::Event& e) {
    if (e.kind == serve::Event::Kind::kToken) {
      text += e.text;
      if (n++ == 0) t_first = now_s();
      t_last = now_s();
    } else if (e.kind == serve::Event::Kind::kDone || e.kind == serve::Event::Kind::kError) {
      std::lock_guard<std::mutex> l(mu);
      done = true;
      cv.notify_all();
    }
  });
  if (!id) std::exit(1);
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done; });
  // The first token comes from the prompt's logits: n - 1 decode steps between first and last.
  return (n - 1) / (t_last - t_first);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(
        stderr, "usage: loom_bench_scheduler MODEL.gguf [--threads 2] [--tokens 256] [--reps 3] [--ctx 2048] [--slots 1]\n");
    return 2;
  }
  const int threads = arg_int(argc, argv, "--threads", 2), tokens = arg_int(argc, argv, "--tokens", 256),
            reps = arg_int(argc, argv, "--reps", 3), n_ctx = arg_int(argc, argv, "--ctx", 2048),
            slots = arg_int(argc, argv, "--slots", 1);
  auto model = Model::load(argv[1]);
  if (!model) {
    std::fprintf(stderr, "%s\n", model.status().message().c_str());
    return 1;
  }
  const auto prompt = (*model)->vocab().tokenize(
      "Once upon a time, there was a little girl who lived in a village near the forest.", true, false);
  std::vector<double> a, b;
  for (int r = 0; r < reps; ++r) {
    a.push_back(run_loop(*model, prompt, tokens, threads, n_ctx));
    b.push_back(run_sched(*model, prompt, tokens, threads, n_ctx, slots));
    std::printf("rep %d: loop %.1f tok/s, scheduler %.1f tok/s (%.3fx)\n", r, a.back(), b.back(), b.back() / a.back());
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double bytes = double((*model)->decode_weight_bytes());
  std::printf("median: loop %.1f tok/s (%.2f GB/s), scheduler %.1f tok/s (%.2f GB/s): %.3fx\n", med(a), med(a) * bytes / 1e9,
              med(b), med(b) * bytes / 1e9, med(b) / med(a));
  return 0;
}
