// Helpers for context tests: models, contexts with given params, decoding and logits capture.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "context/context.h"
#include "model/model_test_util.h"

namespace loom::test {

inline std::unique_ptr<Context> new_context(std::shared_ptr<const Model> m, ContextParams cp) {
  if (cp.n_threads == 0) cp.n_threads = 2;
  auto ctx = Context::create(std::move(m), cp);
  EXPECT_TRUE(ctx.has_value()) << ctx.status().message();
  return ctx ? std::move(*ctx) : nullptr;
}

inline ContextParams small_params(int n_ctx = 256, int n_seq_max = 4) {
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = n_ctx;
  cp.n_ubatch = n_ctx;
  cp.n_seq_max = n_seq_max;
  cp.n_threads = 2;
  return cp;
}

inline std::vector<float> last_logits(const Context& ctx, int i = -1) {
  auto l = ctx.logits(i);
  EXPECT_TRUE(l.has_value()) << l.status().message();
  return l ? std::vector<float>(l->begin(), l->end()) : std::vector<float>{};
}

// Decodes ids into `seq` starting at `start`, returns the last token's logits.
inline std::vector<float> feed(Context& ctx, const std::vector<int32_t>& ids, int start, int seq = 0) {
  Status st = ctx.decode(Batch::from_tokens(ids, start, seq));
  EXPECT_TRUE(st.is_ok()) << st.message();
  return st ? last_logits(ctx) : std::vector<float>{};
}

inline std::vector<int32_t> golden_prompt(const std::string& golden_rel, int run) {
  auto g = load_json(shared_path(golden_rel));
  return g["runs"][run]["prompt_ids"].get<std::vector<int32_t>>();
}

inline float rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  return max_abs_diff(a, b) / std::max(1e-6f, max_abs(b));
}

}  // namespace loom::test
