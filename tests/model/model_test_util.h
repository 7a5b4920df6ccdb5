// Shared helpers for model-level tests: loading shared models and golden runs, running a prompt.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "context/context.h"
#include "model/model.h"
#include "test_util.h"

namespace loom::test {

inline std::shared_ptr<const Model> load_shared_model(const std::string& rel) {
  const std::string path = shared_path(rel);
  if (path.empty()) return nullptr;
  auto m = Model::load(path);
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? *m : nullptr;
}

// A synthetic model that tests/data does not hold (too large to commit) but whose goldens it
// does: made on first use by build/bin/make_arch_variant ARGS (stories260K.gguf of ../shared as
// IN) into build/testdata/NAME.gguf, then checked against its recorded size and FNV-1a 64 hash
// so that a changed generator is reported rather than compared against stale goldens. Empty with
// a test failure when it cannot be made.
inline std::string generated_model(const std::string& name, const std::string& arch, uint64_t size, uint64_t fnv) {
  const std::string in = shared_path("models/stories260K.gguf");
  if (in.empty()) return "";
  const std::string dir = std::string(LOOM_BINARY_DIR) + "/testdata";
  const std::string out = dir + "/" + name + ".gguf";
  auto digest = [](const std::string& path, uint64_t& n) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    uint64_t h = 1469598103934665603ull;
    n = 0;
    if (!f) return h;
    unsigned char buf[1 << 16];
    for (size_t got; (got = std::fread(buf, 1, sizeof buf, f)) > 0;) {
      for (size_t i = 0; i < got; ++i) h = (h ^ buf[i]) * 1099511628211ull;
      n += got;
    }
    std::fclose(f);
    return h;
  };
  uint64_t n = 0;
  if (digest(out, n) != fnv || n != size) {
    // Written under a temporary name and renamed: tests running at once never see half a file.
    const std::string tmp = out + ".tmp" + std::to_string(::getpid());
    const std::string cmd = "mkdir -p " + quote(dir) + " && " + tool_command("make_arch_variant") + " " + arch + " " +
                            quote(in) + " " + quote(tmp) + " && mv " + quote(tmp) + " " + quote(out);
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  const uint64_t h = digest(out, n);
  EXPECT_EQ(n, size) << out << ": make_arch_variant " << arch << " no longer makes the file the goldens were made from";
  EXPECT_EQ(h, fnv) << out << ": make_arch_variant " << arch << " no longer makes the file the goldens were made from";
  return n == size && h == fnv ? out : "";
}

// gemma3n's synthetic model (tests/data/synth-gemma3n-tiny-f32.json's goldens; 23 MB, so made by
// generated_model rather than committed; tests/data/README.md). Needs build/bin/make_arch_variant.
inline std::string synth_gemma3n_model() {
  return generated_model("synth-gemma3n-tiny-f32", "gemma3n", 22895424, 0xc3ecb7e46b8cce77ull);
}

inline nlohmann::json load_json(const std::string& path) { return nlohmann::json::parse(read_text_file(path)); }

inline std::unique_ptr<Context> make_context(std::shared_ptr<const Model> m, int n_ctx = 512, int n_threads = 2,
                                             int n_ubatch = 512) {
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = n_ctx;
  cp.n_ubatch = n_ubatch;
  cp.n_threads = n_threads;
  auto ctx = Context::create(std::move(m), cp);
  EXPECT_TRUE(ctx.has_value()) << ctx.status().message();
  return ctx ? std::move(*ctx) : nullptr;
}

// Decodes ids as one batch starting at position 0 and returns the last logits.
inline std::vector<float> prompt_logits(Context& ctx, const std::vector<int32_t>& ids) {
  Status st = ctx.decode(Batch::from_tokens(ids, 0));
  EXPECT_TRUE(st.is_ok()) << st.message();
  auto l = ctx.logits(-1);
  EXPECT_TRUE(l.has_value());
  return l ? std::vector<float>(l->begin(), l->end()) : std::vector<float>{};
}

inline int32_t argmax_of(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// Teacher-forced comparison with one golden run (../shared/golden/README.md's format; `dir` holds
// its .f32 files): the golden greedy ids are fed one by one and every step's logits are compared
// with the run's step_logits_file within rel_tol * max|golden| (with check_last, the last-prompt
// logits with last_logits_file too). Greedy ids are compared only up to the first step whose golden
// top-1/top-2 margin is below 2 * rel_tol * max|golden| (two logits each off by the tolerance): past
// a closer call an engine within tolerance may legitimately pick the other token. Prints the worst
// relative error.
inline void check_teacher_forced(const std::shared_ptr<const Model>& model, const nlohmann::json& run,
                                 const std::string& dir, const std::string& label, float rel_tol, bool check_last = false) {
  const size_t nv = size_t(model->hparams().n_vocab);
  const auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
  const auto greedy = run["greedy_ids"].get<std::vector<int32_t>>();
  const auto margins = run["greedy_margins"].get<std::vector<float>>();
  const auto steps = read_f32_file(dir + "/" + run["step_logits_file"].get<std::string>());
  ASSERT_EQ(steps.size(), greedy.size() * nv);
  ASSERT_EQ(margins.size(), greedy.size());
  auto step = [&](size_t k) { return std::vector<float>(steps.begin() + long(k * nv), steps.begin() + long((k + 1) * nv)); };
  size_t cutoff = 0;  // greedy ids are compared at steps < cutoff
  while (cutoff < margins.size() && margins[cutoff] >= 2.0f * rel_tol * max_abs(step(cutoff))) ++cutoff;

  auto ctx = make_context(model);
  ASSERT_TRUE(ctx);
  std::vector<float> got = prompt_logits(*ctx, ids);
  ASSERT_EQ(got.size(), nv);
  float rel_last = 0.0f;
  if (check_last) {
    const auto last = read_f32_file(dir + "/" + run["last_logits_file"].get<std::string>());
    ASSERT_EQ(last.size(), nv);
    rel_last = max_abs_diff(got, last) / max_abs(last);
    EXPECT_LE(rel_last, rel_tol) << label << " last-prompt logits, prompt " << run["prompt"];
  }
  int32_t pos = int32_t(ids.size());
  float worst = 0.0f;
  for (size_t k = 0; k < greedy.size(); ++k) {
    const std::vector<float> want = step(k);
    ASSERT_EQ(got.size(), nv);
    const float rel = max_abs_diff(got, want) / max_abs(want);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, rel_tol) << label << " step " << k << " prompt " << run["prompt"];
    if (k < cutoff) {
      EXPECT_EQ(argmax_of(got), greedy[k]) << label << " step " << k << " prompt " << run["prompt"];
    }
    if (k + 1 == greedy.size()) break;
    const int32_t one[1] = {greedy[k]};
    ASSERT_TRUE(ctx->decode(Batch::from_tokens(one, pos++)).is_ok());
    auto l = ctx->logits(-1);
    ASSERT_TRUE(l.has_value());
    got.assign(l->begin(), l->end());
  }
  std::printf("%-36s prompt %2zu ids:%s max|d|/max|golden| over %zu steps = %.3g, greedy ids checked at %zu steps\n",
              label.c_str(), ids.size(), check_last ? (" last-prompt " + std::to_string(rel_last) + ",").c_str() : "",
              greedy.size(), double(worst), cutoff);
}

}  // namespace loom::test
