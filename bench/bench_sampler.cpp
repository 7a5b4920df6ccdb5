// Per-token overhead of sampling on a 32000-token vocabulary: the default chain (llama.cpp's
// common defaults), greedy, and one grammar pass over the full vocabulary (JSON schema grammar,
// inside a string: the case where most tokens survive and all must be checked).
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "sample/json_schema.h"
#include "sample/sampler.h"

namespace {

constexpr int kVocab = 32000;

std::vector<std::vector<float>> random_rows(int n_rows) {
  std::mt19937 g(11);
  std::normal_distribution<float> nd(0, 3);
  auto rows = std::vector<std::vector<float>>(size_t(n_rows), std::vector<float>(size_t(kVocab)));
  for (auto& r : rows)
    for (auto& x : r) x = nd(g);
  return rows;
}

void BM_DefaultChain32k(benchmark::State& state) {
  auto rows = random_rows(8);
  loom::SamplerParams p;
  p.penalty_repeat = 1.1f;
  p.seed = 1;
  loom::Sampler s(p);
  for (int i = 0; i < 64; ++i) s.accept(i * 13);
  size_t i = 0;
  for (auto _ : state) {
    const int32_t tok = s.sample(rows[i++ % rows.size()]);
    s.accept(tok);
    benchmark::DoNotOptimize(tok);
  }
}
BENCHMARK(BM_DefaultChain32k)->Unit(benchmark::kMicrosecond);

void BM_Greedy32k(benchmark::State& state) {
  auto rows = random_rows(8);
  loom::SamplerParams p;
  p.temp = 0;
  loom::Sampler s(p);
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(rows[i++ % rows.size()]));
}
BENCHMARK(BM_Greedy32k)->Unit(benchmark::kMicrosecond);

void BM_GrammarFullVocabInsideString32k(benchmark::State& state) {
  auto gbnf = loom::sample::json_schema_to_grammar(
      R"({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})");
  auto g = loom::Grammar::parse(*gbnf);
  auto v = std::make_shared<loom::sample::GrammarVocab>();
  std::mt19937 rng(5);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ,.:\"{}[]0123456789";
  v->pieces.push_back("{\"name\": \"");
  v->is_eog.push_back(0);
  v->pieces.push_back("</s>");
  v->is_eog.push_back(1);
  while (v->pieces.size() < size_t(kVocab)) {
    std::string s;
    const size_t len = 1 + rng() % 8;
    for (size_t k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    v->pieces.push_back(s);
    v->is_eog.push_back(0);
  }
  loom::sample::GrammarStage st(*g, v);
  if (!st.try_accept(0)) state.SkipWithError("setup token refused");
  std::vector<float> logits(kVocab, 0.0f);
  loom::sample::Candidates c;
  for (auto _ : state) {
    c.fill(logits);
    st.apply(c);
    benchmark::DoNotOptimize(c.data.size());
  }
}
BENCHMARK(BM_GrammarFullVocabInsideString32k)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
