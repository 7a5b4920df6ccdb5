// loom-sample-ref: the tokens llama.cpp's sampler chain picks, for loom's seeded-sampling test.
//
// For each configuration below it builds the chain llama.cpp's common_sampler builds for those
// parameters (penalties, top-k, typical, top-p, min-p, xtc, temperature in that default order,
// then dist; or temperature + mirostat), feeds it logits made by the generator described below for
// a number of steps, accepts each pick, and prints one line per configuration:
//
//   name key=value ... : tok tok tok ...
//
// Logits (loom's test computes the same numbers): for step s and token i,
//   x = splitmix64(logit_seed * 1000003 + s * 65537 + i)   (splitmix64: the usual finalizer of
//       x + 0x9e3779b97f4a7c15 with shifts 30, 27, 31 and multipliers 0xbf58476d1ce4e5b9,
//       0x94d049bb133111eb)
//   u = float(int32((x >> 40) & 0xffffff) - 0x800000) / float(0x800000)      in [-1, 1)
//   logit = scale * u, plus `boost` for the token (s * 7919) % n_vocab (a likely one each step).
// Usage: loom-sample-ref > tests/data/sample-ref/llama-draws.txt
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llama.h"

namespace {

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Config {
  std::string name;
  uint32_t seed = 42;
  int n_vocab = 4096;
  int steps = 64;
  float scale = 6.0f;
  float boost = 0.0f;
  uint64_t logit_seed = 1;
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float typical_p = 1.0f;
  float xtc_probability = 0.0f;
  float xtc_threshold = 0.1f;
  int penalty_last_n = 64;
  float penalty_repeat = 1.0f;
  float penalty_freq = 0.0f;
  float penalty_present = 0.0f;
  int mirostat = 0;
  float mirostat_tau = 5.0f;
  float mirostat_eta = 0.1f;
};

void run(const Config& c) {
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  if (c.mirostat == 0) {
    llama_sampler_chain_add(chain, llama_sampler_init_penalties(c.n_vocab, c.penalty_last_n, c.penalty_repeat,
                                                                c.penalty_freq, c.penalty_present));
    llama_sampler_chain_add(chain, llama_sampler_init_top_k(c.top_k));
    llama_sampler_chain_add(chain, llama_sampler_init_typical(c.typical_p, 0));
    llama_sampler_chain_add(chain, llama_sampler_init_top_p(c.top_p, 0));
    llama_sampler_chain_add(chain, llama_sampler_init_min_p(c.min_p, 0));
    llama_sampler_chain_add(chain, llama_sampler_init_xtc(c.xtc_probability, c.xtc_threshold, 0, c.seed));
    llama_sampler_chain_add(chain, llama_sampler_init_temp_ext(c.temp, 0.0f, 1.0f));
    llama_sampler_chain_add(chain, llama_sampler_init_dist(c.seed));
  } else {
    llama_sampler_chain_add(chain, llama_sampler_init_temp(c.temp));
    if (c.mirostat == 1) {
      llama_sampler_chain_add(chain, llama_sampler_init_mirostat(c.n_vocab, c.seed, c.mirostat_tau, c.mirostat_eta, 100));
    } else {
      llama_sampler_chain_add(chain, llama_sampler_init_mirostat_v2(c.seed, c.mirostat_tau, c.mirostat_eta));
    }
  }
  std::printf(
      "%s seed=%u n_vocab=%d steps=%d scale=%g boost=%g logit_seed=%llu temp=%g top_k=%d top_p=%g min_p=%g "
      "typical_p=%g xtc_probability=%g xtc_threshold=%g penalty_last_n=%d penalty_repeat=%g penalty_freq=%g "
      "penalty_present=%g mirostat=%d mirostat_tau=%g mirostat_eta=%g :",
      c.name.c_str(), c.seed, c.n_vocab, c.steps, c.scale, c.boost, (unsigned long long)c.logit_seed, c.temp, c.top_k,
      c.top_p, c.min_p, c.typical_p, c.xtc_probability, c.xtc_threshold, c.penalty_last_n, c.penalty_repeat, c.penalty_freq,
      c.penalty_present, c.mirostat, c.mirostat_tau, c.mirostat_eta);
  std::vector<llama_token_data> cand(size_t(c.n_vocab));
  for (int s = 0; s < c.steps; ++s) {
    for (int i = 0; i < c.n_vocab; ++i) {
      const uint64_t x = splitmix64(c.logit_seed * 1000003ull + uint64_t(s) * 65537ull + uint64_t(i));
      const float u = float(int32_t((x >> 40) & 0xffffff) - 0x800000) / float(0x800000);
      float logit = c.scale * u;
      if (i == int((uint64_t(s) * 7919u) % uint64_t(c.n_vocab))) logit += c.boost;
      cand[size_t(i)] = {i, logit, 0.0f};
    }
    llama_token_data_array arr = {cand.data(), cand.size(), -1, false};
    llama_sampler_apply(chain, &arr);
    const llama_token tok = arr.data[arr.selected].id;
    llama_sampler_accept(chain, tok);
    std::printf(" %d", tok);
  }
  std::printf("\n");
  llama_sampler_free(chain);
}

}  // namespace

int main() {
  std::vector<Config> configs;
  Config base;
  // llama-server's defaults (temp 0.8, top-k 40, top-p 0.95, min-p 0.05) at several seeds.
  for (uint32_t seed : {0u, 1u, 42u, 123456789u, 4294967294u}) {
    Config c = base;
    c.name = "server-defaults";
    c.seed = seed;
    configs.push_back(c);
  }
  {  // A flat distribution over the whole vocabulary, in token order (no truncation).
    Config c = base;
    c.name = "full-vocab";
    c.temp = 1.0f, c.top_k = 0, c.top_p = 1.0f, c.min_p = 0.0f, c.scale = 2.0f;
    configs.push_back(c);
  }
  {  // Peaked: one likely token a step, hot temperature.
    Config c = base;
    c.name = "peaked-hot";
    c.temp = 1.5f, c.boost = 5.0f, c.seed = 7;
    configs.push_back(c);
  }
  {
    Config c = base;
    c.name = "xtc";
    c.xtc_probability = 0.5f, c.xtc_threshold = 0.05f, c.boost = 4.0f, c.scale = 3.0f, c.seed = 99;
    configs.push_back(c);
  }
  {
    Config c = base;
    c.name = "typical";
    c.typical_p = 0.9f, c.top_k = 0, c.top_p = 1.0f, c.min_p = 0.0f, c.seed = 5;
    configs.push_back(c);
  }
  {  // Penalties on a small vocabulary (picks repeat).
    Config c = base;
    c.name = "penalties";
    c.n_vocab = 64, c.scale = 2.0f, c.penalty_repeat = 1.3f, c.penalty_freq = 0.2f, c.penalty_present = 0.1f;
    c.top_k = 0, c.top_p = 1.0f, c.min_p = 0.0f, c.steps = 128, c.seed = 11;
    configs.push_back(c);
  }
  for (int v : {1, 2}) {
    Config c = base;
    c.name = v == 1 ? "mirostat" : "mirostat-v2";
    c.mirostat = v, c.temp = 1.0f, c.scale = 4.0f, c.seed = 3;
    configs.push_back(c);
  }
  {  // A large vocabulary (32000), top-k 0 but min-p: the truncation keeps token order.
    Config c = base;
    c.name = "min-p-large";
    c.n_vocab = 32000, c.top_k = 0, c.top_p = 1.0f, c.min_p = 0.1f, c.scale = 8.0f, c.steps = 32, c.seed = 2024;
    configs.push_back(c);
  }
  for (const Config& c : configs) run(c);
  return 0;
}
