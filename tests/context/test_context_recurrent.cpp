// Recurrent models (mamba) through the context: a prompt in one batch, in chunks and token by
// token gives the same logits; sequences decoded together equal each alone (and llama.cpp's joint
// batch, from tests/data/synth-mamba-tiny-f32.seqops.json recorded with tools/dev/llama-ref); state
// save/load of whole contexts and single sequences; refused batches and aborts change nothing.
// (The sequence operations against llama.cpp: test_memory_interface.cpp, every memory kind.)
#include <cstdio>
#include <filesystem>

#include "context_test_util.h"

namespace loom::test {
namespace {

constexpr const char* kModel = "synth-mamba-tiny-f32";

std::shared_ptr<const Model> mamba(const std::string& name = kModel) {
  auto m = Model::load(data_dir() + "/" + name + ".gguf");
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? *m : nullptr;
}

std::vector<int32_t> prompt(int run, const std::string& name = kModel) {
  return load_json(data_dir() + "/" + name + ".json")["runs"][run]["prompt_ids"].get<std::vector<int32_t>>();
}

ContextParams params(int n_seq_max = 4, int n_ubatch = 512) {
  ContextParams cp = small_params(512, n_seq_max);
  cp.n_ubatch = n_ubatch;
  return cp;
}

TEST(Recurrent, ContextHasOneStateCellPerSequence) {
  auto model = mamba();
  ASSERT_TRUE(model);
  EXPECT_TRUE(model->hparams().is_recurrent());
  auto ctx = new_context(model, params(3));
  ASSERT_TRUE(ctx);
  EXPECT_TRUE(ctx->recurrent());
  ASSERT_NE(ctx->recurrent_cache(), nullptr);
  EXPECT_EQ(ctx->recurrent_cache()->size(), 3);
  EXPECT_EQ(ctx->params().type_k, TensorType::F32);  // the reference forces F32 states
  EXPECT_TRUE(ctx->can_shift());
  feed(*ctx, prompt(0), 0, 1);
  EXPECT_EQ(ctx->kv_used_cells(), 1);
  EXPECT_EQ(ctx->kv_n_tokens(), 1);
  const int last = int(prompt(0).size()) - 1;
  EXPECT_EQ(*ctx->seq_pos_min(1), last);  // one state: min = max = its last position
  EXPECT_EQ(*ctx->seq_pos_max(1), last);
  auto enc = ctx->encode(Batch::from_tokens(prompt(0), 0));
  EXPECT_EQ(enc.code(), StatusCode::kUnsupported);
}

class RecurrentModels : public ::testing::TestWithParam<const char*> {};

// Mamba-1 and Mamba-2.
TEST_P(RecurrentModels, OneBatchChunksAndTokenByTokenGiveIdenticalLogits) {
  auto model = mamba(GetParam());
  ASSERT_TRUE(model);
  const auto p = prompt(1, GetParam());
  auto one = new_context(model, params());
  const auto want = feed(*one, p, 0);
  for (int chunk : {1, 2, 3, 7}) {
    auto ctx = new_context(model, params());
    std::vector<float> got;
    for (size_t i = 0; i < p.size(); i += size_t(chunk)) {
      std::vector<int32_t> part(p.begin() + long(i), p.begin() + long(std::min(p.size(), i + size_t(chunk))));
      got = feed(*ctx, part, int(i));
    }
    EXPECT_EQ(got, want) << "chunks of " << chunk;
  }
  for (int ub : {1, 4, 5}) {  // micro-batches inside one decode
    auto ctx = new_context(model, params(4, ub));
    EXPECT_EQ(feed(*ctx, p, 0), want) << "n_ubatch " << ub;
  }
  // Every output of one batch equals the logits after that many tokens.
  auto all = new_context(model, params());
  ASSERT_TRUE(all->decode(Batch::from_tokens(p, 0, 0, /*all_outputs=*/true)).is_ok());
  auto step = new_context(model, params());
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(feed(*step, {p[i]}, int(i)), last_logits(*all, int(i))) << "token " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Recurrent, RecurrentModels, ::testing::Values("synth-mamba-tiny-f32", "synth-mamba2-tiny-f32"),
                         [](const auto& info) { return param_name(info.param); });

TEST(Recurrent, SequencesTogetherEqualEachAloneAndTheReference) {
  auto model = mamba();
  ASSERT_TRUE(model);
  auto ops = load_json(data_dir() + "/" + kModel + ".seqops.json");
  const auto a = ops["prompt_a"].get<std::vector<int32_t>>(), b = ops["prompt_b"].get<std::vector<int32_t>>();
  const auto ref = read_f32_file(data_dir() + "/" + kModel + ".seqops.json.ab.f32");
  const size_t nv = size_t(model->hparams().n_vocab);
  ASSERT_EQ(ref.size(), 2 * nv);
  std::vector<float> ref_a(ref.begin(), ref.begin() + long(nv)), ref_b(ref.begin() + long(nv), ref.end());
  auto alone = new_context(model, params());
  const auto want_a = feed(*alone, a, 0, 0);
  const auto want_b = feed(*alone, b, 0, 1);
  EXPECT_LE(rel_diff(want_a, ref_a), 1e-3f);
  EXPECT_LE(rel_diff(want_b, ref_b), 1e-3f);
  for (int ub : {512, 3, 2}) {
    // Interleaved tokens; equal split cuts them into micro-batches of both sequences.
    auto ctx = new_context(model, params(4, ub));
    Batch batch;
    int ia = -1, ib = -1;
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      if (i < a.size()) {
        if (i + 1 == a.size()) ia = batch.size();
        batch.add(a[i], int(i), {0}, i + 1 == a.size());
      }
      if (i < b.size()) {
        if (i + 1 == b.size()) ib = batch.size();
        batch.add(b[i], int(i), {1}, i + 1 == b.size());
      }
    }
    ASSERT_TRUE(ctx->decode(batch).is_ok());
    EXPECT_EQ(last_logits(*ctx, ia), want_a) << "n_ubatch " << ub;
    EXPECT_EQ(last_logits(*ctx, ib), want_b) << "n_ubatch " << ub;
    // all_logits() is in batch order: a's row first when a ends first.
    const auto all = ctx->all_logits();
    ASSERT_EQ(all.size(), 2 * nv);
    const bool a_first = ia < ib;
    EXPECT_TRUE(std::equal(want_a.begin(), want_a.end(), all.begin() + (a_first ? 0 : long(nv))));
    // Every token an output: the micro-batches hold them by sequence, the rows come back in
    // batch order (interleaved), each equal to that sequence's own all-outputs decode.
    auto every = new_context(model, params(4, ub));
    Batch inter;
    std::vector<std::pair<int, int>> who;  // (sequence, index in its prompt) of each batch row
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      if (i < a.size()) inter.add(a[i], int(i), {0}, true), who.emplace_back(0, int(i));
      if (i < b.size()) inter.add(b[i], int(i), {1}, true), who.emplace_back(1, int(i));
    }
    ASSERT_TRUE(every->decode(inter).is_ok());
    auto solo_a = new_context(model, params()), solo_b = new_context(model, params());
    ASSERT_TRUE(solo_a->decode(Batch::from_tokens(a, 0, 0, true)).is_ok());
    ASSERT_TRUE(solo_b->decode(Batch::from_tokens(b, 0, 0, true)).is_ok());
    const auto rows = every->all_logits();
    for (size_t r = 0; r < who.size(); ++r) {
      const auto want = last_logits(who[r].first == 0 ? *solo_a : *solo_b, who[r].second);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), rows.begin() + long(r * nv))) << "row " << r << " n_ubatch " << ub;
    }
    // Then one token each, in one batch, against each alone.
    Batch next;
    next.add(a[1], int(a.size()), {0}, true);
    next.add(b[1], int(b.size()), {1}, true);
    ASSERT_TRUE(ctx->decode(next).is_ok());
    auto solo = new_context(model, params());
    feed(*solo, a, 0, 2);
    EXPECT_EQ(last_logits(*ctx, 0), feed(*solo, {a[1]}, int(a.size()), 2));
  }
}

// Replays the reference's recorded sequence operations: every return value and every
// sequence's positions afterwards must be what llama.cpp reported.
TEST(Recurrent, RefusedBatchesAndAbortsLeaveTheStatesAsTheyWere) {
  auto model = mamba();
  ASSERT_TRUE(model);
  const auto p = prompt(0);
  auto ctx = new_context(model, params(4, 2));  // micro-batches of 2 tokens
  feed(*ctx, p, 0, 0);
  // The states (a failed decode also drops the last outputs, so compare the sequence state).
  const auto saved = *ctx->seq_state_save(0);
  const int n = int(p.size());
  // A gap, a repeated position, a token of two sequences.
  for (auto [pos, seqs] : {std::pair{n + 1, std::vector<int32_t>{0}}, {n - 1, {0}}, {n, {0, 1}}}) {
    Batch b;
    b.add(p[1], pos, std::span<const int32_t>(seqs), true);
    const Status st = ctx->decode(b);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  }
  // Within one batch, positions of a sequence must follow each other.
  Batch gap;
  gap.add(p[1], n, {0}, false);
  gap.add(p[2], n + 2, {0}, true);
  EXPECT_EQ(ctx->decode(gap).code(), StatusCode::kInvalidArgument);
  // Abort in the second micro-batch (polled before each of the 3 layers).
  static int calls;
  calls = 0;
  ctx->set_abort_callback([](void*) { return ++calls > 4; }, nullptr);
  EXPECT_EQ(ctx->decode(Batch::from_tokens(p, n, 0)).code(), StatusCode::kAborted);
  ctx->set_abort_callback(nullptr, nullptr);
  EXPECT_EQ(*ctx->seq_state_save(0), saved);
  auto fresh = new_context(model, params());
  feed(*fresh, p, 0, 0);
  EXPECT_EQ(feed(*ctx, p, n, 0), feed(*fresh, p, n, 0));
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("loom_recurrent_test_" + name)).string();
}

TEST(Recurrent, StateSaveLoadWholeAndPerSequence) {
  auto model = mamba();
  ASSERT_TRUE(model);
  const auto p = prompt(1);
  const long h = long(p.size() / 2);
  std::vector<int32_t> head(p.begin(), p.begin() + h), tail(p.begin() + h, p.end());
  auto ctx = new_context(model, params());
  feed(*ctx, head, 0, 0);
  feed(*ctx, head, 0, 2);
  ASSERT_TRUE(ctx->seq_cp(0, 3, -1, -1).is_ok());  // a shared state
  const auto saved = ctx->state_save(head);
  const auto seq2 = ctx->seq_state_save(2, head);
  ASSERT_TRUE(seq2.has_value());
  const auto want = feed(*ctx, tail, int(h), 0);

  // Whole state, via a file, into a fresh context: every sequence continues identically.
  const std::string path = temp_path("whole.bin");
  {
    auto tmp = new_context(model, params());
    ASSERT_TRUE(tmp->state_load(saved).is_ok());
    ASSERT_TRUE(tmp->state_save_file(path, head).is_ok());
  }
  auto other = new_context(model, params());
  std::vector<int32_t> tokens;
  ASSERT_TRUE(other->state_load_file(path, &tokens).is_ok());
  std::remove(path.c_str());
  EXPECT_EQ(tokens, head);
  EXPECT_EQ(other->kv_used_cells(), 2);
  EXPECT_EQ(other->kv_n_tokens(), 3);
  EXPECT_EQ(feed(*other, tail, int(h), 3), want);  // the shared copy
  EXPECT_EQ(feed(*other, tail, int(h), 0), want);
  EXPECT_EQ(feed(*other, tail, int(h), 2), want);

  // One sequence into another id, replacing what was there.
  auto third = new_context(model, params());
  feed(*third, p, 0, 1);
  ASSERT_TRUE(third->seq_state_load(*seq2, 1, &tokens).is_ok());
  EXPECT_EQ(*third->seq_pos_max(1), int(h) - 1);
  EXPECT_EQ(feed(*third, tail, int(h), 1), want);
  // An empty sequence's state restores to nothing.
  auto empty = third->seq_state_save(3);
  ASSERT_TRUE(empty.has_value());
  ASSERT_TRUE(third->seq_state_load(*empty, 1).is_ok());
  EXPECT_EQ(*third->seq_pos_max(1), -1);

  // A state of a transformer model, or a corrupt one, is refused and changes nothing.
  std::vector<uint8_t> bad = saved;
  bad[bad.size() / 2] ^= 0x40;
  const auto before = other->state_save();
  EXPECT_FALSE(other->state_load(bad).is_ok());
  EXPECT_EQ(other->state_save(), before);
  auto llama = load_shared_model("models/synth-llama-tiny-f32.gguf");
  ASSERT_TRUE(llama);
  auto lctx = new_context(llama, small_params());
  EXPECT_FALSE(lctx->state_load(saved).is_ok());
  EXPECT_FALSE(other->state_load(lctx->state_save()).is_ok());
}

}  // namespace
}  // namespace loom::test
