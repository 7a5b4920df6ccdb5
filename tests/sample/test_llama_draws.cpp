// Seeded sampling as llama.cpp draws it: the same seed and logits give the same tokens as
// llama.cpp's sampler chain (common_sampler's order: penalties, top-k, typical, top-p, min-p, xtc,
// temperature, dist; or temperature + mirostat). tests/data/sample-ref/llama-draws.txt holds what
// real llama.cpp picked for each configuration (tools/dev/llama-ref/sample_ref.cpp, whose header
// describes the logit generator repeated here).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sample/sampler.h"
#include "test_util.h"

namespace loom::sample {
namespace {

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Case {
  std::string name;
  std::map<std::string, std::string> kv;
  std::vector<int32_t> tokens;
  double num(const std::string& k) const { return std::stod(kv.at(k)); }
};

std::vector<Case> read_cases() {
  std::ifstream in(test::data_dir() + "/sample-ref/llama-draws.txt");
  EXPECT_TRUE(in.good()) << "missing tests/data/sample-ref/llama-draws.txt";
  std::vector<Case> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    Case c;
    ss >> c.name;
    std::string w;
    while (ss >> w && w != ":") {
      const auto eq = w.find('=');
      c.kv[w.substr(0, eq)] = w.substr(eq + 1);
    }
    int32_t t;
    while (ss >> t) c.tokens.push_back(t);
    out.push_back(std::move(c));
  }
  return out;
}

TEST(LlamaDraws, SeededPicksEqualLlamaCpps) {
  const auto cases = read_cases();
  ASSERT_GE(cases.size(), 10u);
  for (const Case& c : cases) {
    SamplerParams p;
    p.seed = uint64_t(std::stoull(c.kv.at("seed")));
    p.temp = float(c.num("temp"));
    p.top_k = int(c.num("top_k"));
    p.top_p = float(c.num("top_p"));
    p.min_p = float(c.num("min_p"));
    p.typical_p = float(c.num("typical_p"));
    p.xtc_probability = float(c.num("xtc_probability"));
    p.xtc_threshold = float(c.num("xtc_threshold"));
    p.penalty_last_n = int(c.num("penalty_last_n"));
    p.penalty_repeat = float(c.num("penalty_repeat"));
    p.penalty_freq = float(c.num("penalty_freq"));
    p.penalty_present = float(c.num("penalty_present"));
    p.mirostat = int(c.num("mirostat"));
    p.mirostat_tau = float(c.num("mirostat_tau"));
    p.mirostat_eta = float(c.num("mirostat_eta"));
    const int n_vocab = int(c.num("n_vocab"));
    const float scale = float(c.num("scale")), boost = float(c.num("boost"));
    const uint64_t logit_seed = std::stoull(c.kv.at("logit_seed"));
    sample::SamplerChain chain = build_chain(p, nullptr, n_vocab);
    std::vector<float> logits(static_cast<size_t>(n_vocab), 0.0f);
    std::vector<int32_t> got;
    for (size_t s = 0; s < c.tokens.size(); ++s) {
      for (int i = 0; i < n_vocab; ++i) {
        const uint64_t x = splitmix64(logit_seed * 1000003ull + uint64_t(s) * 65537ull + uint64_t(i));
        const float u = float(int32_t((x >> 40) & 0xffffff) - 0x800000) / float(0x800000);
        logits[size_t(i)] = scale * u + (i == int((uint64_t(s) * 7919u) % uint64_t(n_vocab)) ? boost : 0.0f);
      }
      const int32_t tok = chain.sample(logits);
      chain.accept(tok);
      got.push_back(tok);
    }
    EXPECT_EQ(got, c.tokens) << c.name << " seed " << p.seed << " (" << chain.describe() << ")";
  }
}

}  // namespace
}  // namespace loom::sample
