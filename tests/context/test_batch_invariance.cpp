// Results must not depend on what else is in the batch (the server's guarantee): a sequence's
// logits are bit-identical whether it is decoded alone, in a batch with other sequences, with its
// cells scattered among theirs, in chunks of any size, or from a prefix shared with seq_cp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "base/half.h"
#include "context/context_test_util.h"
#include "gguf/gguf_writer.h"

namespace loom::test {
namespace {

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

struct InvCase {
  const char* model;  // under ../shared, or kKvHeads12
  int kv_type;        // 0 f16, 1 q8_0, 2 f32
};

// stories260K with 24 query heads over 12 kv heads (more than one attention tile of 8 kv heads,
// tiles of 4 tokens) and F16 attention weights (the packed F16 kernels), built in memory.
constexpr const char* kKvHeads12 = "stories260K+kv12";

std::shared_ptr<const Model> kv_heads_variant() {
  auto src = gguf::GgufFile::open(shared_path("models/stories260K.gguf"));
  EXPECT_TRUE(src.has_value());
  if (!src) return nullptr;
  auto w = gguf::GgufWriter::from_file(*src);
  EXPECT_TRUE(w.has_value());
  if (!w) return nullptr;
  const int64_t E = 64, D = 8, H = 24, Hkv = 12;
  w->remove("llama.attention.head_count");
  w->remove("llama.attention.head_count_kv");
  w->remove("llama.attention.key_length");
  w->remove("llama.attention.value_length");
  w->remove("llama.rope.dimension_count");
  EXPECT_TRUE(w->set_u32("llama.attention.head_count", uint32_t(H)).is_ok());
  EXPECT_TRUE(w->set_u32("llama.attention.head_count_kv", uint32_t(Hkv)).is_ok());
  EXPECT_TRUE(w->set_u32("llama.attention.key_length", uint32_t(D)).is_ok());
  EXPECT_TRUE(w->set_u32("llama.attention.value_length", uint32_t(D)).is_ok());
  EXPECT_TRUE(w->set_u32("llama.rope.dimension_count", uint32_t(D)).is_ok());
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 0.15f);
  auto f16_tensor = [&](const std::string& name, int64_t cols, int64_t rows) {
    std::vector<uint8_t> bytes(size_t(cols * rows) * 2);
    for (size_t i = 0; i < bytes.size(); i += 2) {
      const uint16_t h = f32_to_f16(nd(rng));
      std::memcpy(bytes.data() + i, &h, 2);
    }
    w->remove_tensor(name);
    EXPECT_TRUE(w->add_tensor(name, TensorType::F16, {cols, rows}, bytes).is_ok()) << name;
  };
  for (int il = 0;; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    if (!src->find_tensor(b + "attn_q.weight")) break;
    f16_tensor(b + "attn_q.weight", E, H * D);
    f16_tensor(b + "attn_k.weight", E, Hkv * D);
    f16_tensor(b + "attn_v.weight", E, Hkv * D);
    f16_tensor(b + "attn_output.weight", H * D, E);
  }
  auto f = gguf::GgufFile::from_bytes(w->to_bytes());
  EXPECT_TRUE(f.has_value()) << f.status().message();
  if (!f) return nullptr;
  auto m = Model::from_gguf(std::move(*f));
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? *m : nullptr;
}

std::string case_name(const testing::TestParamInfo<InvCase>& i) {
  static const char* kv[] = {"f16", "q8_0", "f32"};
  return param_name(i.param.model) + "_" + kv[i.param.kv_type];
}

class BatchInvariance : public testing::TestWithParam<InvCase> {
 protected:
  static constexpr int kMaxBatch = 512;
  void SetUp() override {
    // Under QEMU (AArch64 cross builds) every case takes minutes: two models cover the NEON
    // paths there (Q8_0 tiles and vec_dot with a Q8_0 cache; F32 and packed-less F16 weights).
    const std::string m = GetParam().model;
    if (under_emulator() && m != "golden/kq/synth-llama-kq-q8_0.gguf" && !(m == kKvHeads12 && GetParam().kv_type == 0)) {
      GTEST_SKIP() << "under an emulator: covered by the kq-q8_0 and 12-kv-head cases";
    }
    model_ = std::string(GetParam().model) == kKvHeads12 ? kv_heads_variant() : load_shared_model(GetParam().model);
    ASSERT_TRUE(model_);
  }
  ContextParams params(int n_threads) const {
    ContextParams cp = small_params(2048, 8);
    cp.n_threads = n_threads;
    cp.n_batch = kMaxBatch;  // (the logits buffer is n_batch x n_vocab)
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
    for (size_t i = 0; i < ids.size(); i += kMaxBatch) {
      const size_t n = std::min<size_t>(kMaxBatch, ids.size() - i);
      const auto l = feed(*ctx, std::vector<int32_t>(ids.begin() + ptrdiff_t(i), ids.begin() + ptrdiff_t(i + n)), int(i));
      if (i + n == ids.size()) out.push_back(l);
    }
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

// Eight sequences, one of them long enough that its decode attention is split into ranges run in
// parallel, decoded each alone in its own context, then together: their prompts in one batch with
// their tokens interleaved (micro-batches mixing all eight, their cells interleaved in the
// cache), then generation with one token of each per batch. Every sequence's logits are
// bit-identical to its own alone.
TEST_P(BatchInvariance, DecodeBatchOfEight) {
  constexpr int kSeqs = 8, kSteps = 3;
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < kSeqs; ++s) prompts.push_back(prompt(uint32_t(20 + s), s == 0 ? 700 : 23 + 11 * s));
  std::vector<std::vector<std::vector<float>>> ref;
  for (int s = 0; s < kSeqs; ++s) {
    ref.push_back(alone(prompts[size_t(s)], kSteps, 2));
    ASSERT_EQ(ref.back().size(), size_t(kSteps + 1));
  }
  auto ctx = new_context(model_, params(2));
  // The prompts' tokens round-robin, in decode calls of up to kMaxBatch tokens.
  std::vector<std::pair<int, size_t>> order;  // (sequence, index)
  for (size_t i = 0; i < prompts[0].size(); ++i) {
    for (int s = 0; s < kSeqs; ++s) {
      if (i < prompts[size_t(s)].size()) order.push_back({s, i});
    }
  }
  for (size_t first = 0; first < order.size(); first += kMaxBatch) {
    Batch b;
    std::vector<std::pair<int, int>> last_rows;  // (sequence, row)
    for (size_t k = first; k < std::min(order.size(), first + kMaxBatch); ++k) {
      const auto [s, i] = order[k];
      const bool last = i + 1 == prompts[size_t(s)].size();
      if (last) last_rows.push_back({s, b.size()});
      b.add(prompts[size_t(s)][i], int32_t(i), {s}, last);
    }
    ASSERT_TRUE(ctx->decode(b).is_ok());
    for (auto [s, row] : last_rows) {
      ASSERT_TRUE(bit_equal(last_logits(*ctx, row), ref[size_t(s)][0])) << "sequence " << s << " prompt logits differ";
    }
  }
  for (int step = 1; step <= kSteps; ++step) {
    Batch g;
    for (int s = 0; s < kSeqs; ++s) {
      g.add(argmax(ref[size_t(s)][size_t(step - 1)]), int32_t(prompts[size_t(s)].size()) + step - 1, {s}, true);
    }
    ASSERT_TRUE(ctx->decode(g).is_ok());
    for (int s = 0; s < kSeqs; ++s) {
      const auto got = last_logits(*ctx, s);
      ASSERT_TRUE(bit_equal(got, ref[size_t(s)][size_t(step)]))
          << "sequence " << s << " step " << step << " differs: max diff "
          << max_abs_diff(got, ref[size_t(s)][size_t(step)]);
    }
  }
}

// The cache's cells out of position order: sequence 0's prompt goes into holes left by a removed
// sequence and past them, its generated tokens then into an earlier hole; attention must still
// sum its cells in position order and give the bits of the sequence decoded alone.
TEST_P(BatchInvariance, CellsOutOfPositionOrder) {
  const std::vector<int32_t> target = prompt(11, 200);
  const auto ref = alone(target, 6, 2);
  ASSERT_FALSE(ref.empty());
  auto ctx = new_context(model_, params(2));
  feed(*ctx, prompt(12, 60), 0, 1);                   // cells 0..59
  feed(*ctx, prompt(13, 100), 0, 2);                  // cells 60..159
  feed(*ctx, prompt(14, 40), 0, 3);                   // cells 160..199
  ASSERT_TRUE(ctx->seq_rm(2, -1, -1).is_ok());        // hole 60..159
  std::vector<float> got = feed(*ctx, target, 0, 0);  // cells 60..159, then 200..299
  ASSERT_TRUE(bit_equal(got, ref[0])) << "prompt logits differ: max diff " << max_abs_diff(got, ref[0]);
  ASSERT_TRUE(ctx->seq_rm(1, -1, -1).is_ok());  // hole 0..59: the next tokens go there
  int32_t pos = int32_t(target.size());
  for (size_t s = 1; s < ref.size(); ++s) {
    got = feed(*ctx, {argmax(ref[s - 1])}, pos++, 0);
    ASSERT_TRUE(bit_equal(got, ref[s])) << "step " << s << " differs: max diff " << max_abs_diff(got, ref[s]);
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

INSTANTIATE_TEST_SUITE_P(
    Models, BatchInvariance,
    testing::Values(InvCase{"models/stories260K.gguf", 0}, InvCase{"models/synth-llama-tiny-f32.gguf", 0},
                    InvCase{"models/synth-llama-tiny-f16.gguf", 0}, InvCase{"models/synth-llama-tiny-q8_0.gguf", 0},
                    InvCase{"models/synth-llama-tiny-q4_0.gguf", 0}, InvCase{"models/synth-llama-tiny-f32.gguf", 2},
                    InvCase{"models/synth-qwen2-tiny-f32.gguf", 0}, InvCase{"models/synth-gemma2-tiny-f32.gguf", 0},
                    InvCase{"golden/kq/synth-llama-kq-q4_k_m.gguf", 0}, InvCase{"golden/kq/synth-llama-kq-q8_0.gguf", 1},
                    InvCase{"golden/kq/synth-llama-kq-bf16.gguf", 0}, InvCase{kKvHeads12, 0}, InvCase{kKvHeads12, 2}),
    case_name);

}  // namespace
}  // namespace loom::test
