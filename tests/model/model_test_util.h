// Shared helpers for model-level tests: loading shared models and golden runs, running a prompt.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

inline nlohmann::json load_json(const std::string& path) {
  return nlohmann::json::parse(read_text_file(path));
}

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

}  // namespace loom::test
