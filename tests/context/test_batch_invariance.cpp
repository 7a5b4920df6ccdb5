// Results must not depend on what else is in the batch (the server's guarantee): a sequence's
// logits are bit-identical whether it is decoded alone, in a batch with other sequences, with its
// cells scattered among theirs, in chunks of any size, or from a prefix shared with seq_cp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "context/context_test_util.h"

namespace loom::test {
namespace {

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

struct InvCase {
  const char* model;  // under ../shared
  int kv_type;        // 0 f16, 1 q8_0, 2 f32
};

std::string case_name(const testing::TestParamInfo<InvCase>& i) {
  static const char* kv[] = {"f16", "q8_0", "f32"};
  return param_name(i.param.model) + "_" + kv[i.param.kv_type];
}

class BatchInvariance : public testing::TestWithParam<InvCase> {
 protected:
  void SetUp() override {
    model_ = load_shared_model(GetParam().model);
    ASSERT_TRUE(model_);
  }
  ContextParams params(int n_threads) const {
    ContextParams cp = small_params(2048, 8);
    cp.n_threads = n_threads;
    cp.n_ubatch = 64;
    const TensorType t[] = {TensorType::F16, TensorType::Q8_0, TensorType::F32};
    cp.type_k = cp.type_v = t[GetParam().kv_type];
    return cp;
  }
  std::vector<int32_t> prompt(uint32_t seed, int n) const {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids;
    const int nv = int(model_->hparams().n_vocab);
    for (int i = 0; i < n; ++i) ids.push_back(int32_t(rng() % uint32_t(nv)));
    return ids;
  }
  // Greedy continuation of `ids` in sequence 0, alone, one token per step: logits of each step.
  std::vector<std::vector<float>> alone(const std::vector<int32_t>& ids, int steps, int n_threads) {
    auto ctx = new_context(model_, params(n_threads));
    if (!ctx) return {};
    std::vector<std::vector<float>> out;
    out.push_back(feed(*ctx, ids, 0));
    int32_t pos = int32_t(ids.size());
    for (int s = 0; s < steps; ++s) {
      const int32_t tok = argmax(out.back());
      out.push_back(feed(*ctx, {tok}, pos++));
    }
    return out;
  }
  std::shared_ptr<const Model> model_;
};

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The target sequence is decoded in chunks of 5 among 3 other sequences whose tokens share each
// batch (so its cells interleave with theirs), then generates alongside them.
TEST_P(BatchInvariance, AmongOtherSequences) {
  const std::vector<int32_t> target = prompt(1, 301);
  const auto ref = alone(target, 12, 2);
  ASSERT_FALSE(ref.empty());

  auto ctx = new_context(model_, params(2));
  std::vector<std::vector<int32_t>> others = {prompt(2, 150), prompt(3, 90), prompt(4, 170)};
  // Other sequences occupy some cells first, then part of them is freed (holes).
  for (int s = 1; s <= 3; ++s) feed(*ctx, others[size_t(s - 1)], 0, s);
  ASSERT_TRUE(ctx->seq_rm(2, -1, -1).is_ok());
  std::vector<int32_t> opos = {150, 0, 170};
  others[1].clear();
  size_t tp = 0;
  std::vector<float> got;
  while (tp < target.size()) {
    Batch b;
    const size_t n = std::min<size_t>(tp < 100 ? 5 : 67, target.size() - tp);
    int row = -1;
    for (size_t i = 0; i < n; ++i) {
      if (i + 1 == n && tp + n == target.size()) row = b.size();
      b.add(target[tp + i], int32_t(tp + i), {0}, i + 1 == n && tp + n == target.size());
    }
    for (int s = 1; s <= 3; ++s) {
      const int32_t t = prompt(100 + uint32_t(tp) + uint32_t(s), 1)[0];
      b.add(t, opos[size_t(s - 1)]++, {s}, true);
    }
    tp += n;
    ASSERT_TRUE(ctx->decode(b).is_ok());
    if (row >= 0) got = last_logits(*ctx, row);
  }
  ASSERT_TRUE(bit_equal(got, ref[0])) << "prompt logits differ: max diff " << max_abs_diff(got, ref[0]);
  int32_t pos = int32_t(target.size());
  for (size_t s = 1; s < ref.size(); ++s) {
    Batch b;
    for (int o = 1; o <= 3; ++o) b.add(prompt(900 + uint32_t(s) * 7 + uint32_t(o), 1)[0], opos[size_t(o - 1)]++, {o}, true);
    const int row = b.size();
    b.add(argmax(ref[s - 1]), pos++, {0}, true);
    ASSERT_TRUE(ctx->decode(b).is_ok());
    got = last_logits(*ctx, row);
    ASSERT_TRUE(bit_equal(got, ref[s])) << "step " << s << " differs: max diff " << max_abs_diff(got, ref[s]);
  }
}

// A prefix decoded by another sequence and shared with seq_cp gives the same logits as decoding
// the whole prompt in one batch.
TEST_P(BatchInvariance, SharedPrefix) {
  const std::vector<int32_t> target = prompt(5, 420);
  const auto ref = alone(target, 4, 2);
  ASSERT_FALSE(ref.empty());
  auto ctx = new_context(model_, params(2));
  // Sequence 3 holds a longer prompt with the same first 341 tokens, decoded in one batch.
  std::vector<int32_t> other(target.begin(), target.begin() + 341);
  for (int32_t t : prompt(6, 30)) other.push_back(t);
  feed(*ctx, other, 0, 3);
  ASSERT_TRUE(ctx->seq_cp(3, 0, 0, 341).is_ok());
  std::vector<int32_t> rest(target.begin() + 341, target.end());
  std::vector<float> got = feed(*ctx, rest, 341, 0);
  ASSERT_TRUE(bit_equal(got, ref[0])) << "max diff " << max_abs_diff(got, ref[0]);
  int32_t pos = int32_t(target.size());
  for (size_t s = 1; s < ref.size(); ++s) {
    got = feed(*ctx, {argmax(ref[s - 1])}, pos++, 0);
    ASSERT_TRUE(bit_equal(got, ref[s])) << "step " << s << " max diff " << max_abs_diff(got, ref[s]);
  }
}

// One thread and three threads give the same bits as two.
TEST_P(BatchInvariance, ThreadCount) {
  const std::vector<int32_t> target = prompt(7, 345);
  const auto a = alone(target, 3, 1), b = alone(target, 3, 3), c = alone(target, 3, 2);
  for (size_t s = 0; s < a.size(); ++s) {
    EXPECT_TRUE(bit_equal(a[s], c[s])) << "1 thread, step " << s;
    EXPECT_TRUE(bit_equal(b[s], c[s])) << "3 threads, step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, BatchInvariance,
                         testing::Values(InvCase{"models/stories260K.gguf", 0}, InvCase{"models/synth-llama-tiny-f32.gguf", 0},
                                         InvCase{"models/synth-llama-tiny-f16.gguf", 0},
                                         InvCase{"models/synth-llama-tiny-q8_0.gguf", 0},
                                         InvCase{"models/synth-llama-tiny-q4_0.gguf", 0},
                                         InvCase{"models/synth-llama-tiny-f32.gguf", 2},
                                         InvCase{"models/synth-qwen2-tiny-f32.gguf", 0},
                                         InvCase{"models/synth-gemma2-tiny-f32.gguf", 0},
                                         InvCase{"golden/kq/synth-llama-kq-q4_k_m.gguf", 0},
                                         InvCase{"golden/kq/synth-llama-kq-q8_0.gguf", 1},
                                         InvCase{"golden/kq/synth-llama-kq-bf16.gguf", 0}),
                         case_name);

}  // namespace
}  // namespace loom::test
