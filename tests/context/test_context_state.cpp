// State save/restore: whole context and per sequence, memory and file, into another sequence;
// corrupt, truncated and mismatched states are refused and change nothing.
#include <cstdio>
#include <filesystem>

#include "context_test_util.h"

namespace loom::test {
namespace {

constexpr const char* kModel = "models/synth-llama-tiny-f32.gguf";
constexpr const char* kGolden = "golden/synth-llama-tiny-f32.json";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("loom_state_test_" + name)).string();
}

TEST(ContextState, WholeStateRoundTripReproducesLogitsExactly) {
  auto model = load_shared_model(kModel);
  const auto p = golden_prompt(kGolden, 1);
  const long h = long(p.size() / 2);
  std::vector<int32_t> head(p.begin(), p.begin() + h), tail(p.begin() + h, p.end());
  auto ctx = new_context(model, small_params());
  auto head_logits = feed(*ctx, head, 0);
  auto saved = ctx->state_save(head);
  auto want = feed(*ctx, tail, int(h));

  for (bool via_file : {false, true}) {
    auto other = new_context(model, small_params());
    std::vector<int32_t> tokens;
    if (via_file) {
      const std::string path = temp_path("whole.bin");
      ASSERT_TRUE(ctx->state_save_file(path, head).is_ok());  // ctx now holds head+tail; save head state instead
      ASSERT_TRUE(other->state_load(saved, &tokens).is_ok());
      ASSERT_TRUE(other->state_save_file(path, tokens).is_ok());
      auto third = new_context(model, small_params());
      tokens.clear();
      ASSERT_TRUE(third->state_load_file(path, &tokens).is_ok());
      std::remove(path.c_str());
      other = std::move(third);
    } else {
      ASSERT_TRUE(other->state_load(saved, &tokens).is_ok());
    }
    EXPECT_EQ(tokens, head);
    EXPECT_EQ(last_logits(*other), head_logits);  // outputs of the saved decode come back too
    EXPECT_EQ(feed(*other, tail, int(h)), want) << (via_file ? "file" : "memory");
  }
}

TEST(ContextState, SequenceStateRestoresIntoAnotherSequence) {
  auto model = load_shared_model(kModel);
  const auto p = golden_prompt(kGolden, 1);
  const long h = long(p.size() / 2);
  std::vector<int32_t> head(p.begin(), p.begin() + h), tail(p.begin() + h, p.end());
  auto ctx = new_context(model, small_params());
  feed(*ctx, head, 0, 2);
  auto seq_state = ctx->seq_state_save(2, head);
  ASSERT_TRUE(seq_state.has_value());
  auto want = feed(*ctx, tail, int(h), 2);

  auto other = new_context(model, small_params());
  std::vector<int32_t> filler(10, 77);
  feed(*other, filler, 0, 0);  // another sequence already present
  std::vector<int32_t> tokens;
  ASSERT_TRUE(other->seq_state_load(*seq_state, 3, &tokens).is_ok());
  EXPECT_EQ(tokens, head);
  EXPECT_EQ(*other->seq_pos_max(3), int(h) - 1);
  EXPECT_EQ(*other->seq_pos_max(0), 9);
  EXPECT_EQ(feed(*other, tail, int(h), 3), want);

  // Via a file, into sequence 1, replacing what was there.
  const std::string path = temp_path("seq.bin");
  ASSERT_TRUE(ctx->seq_state_save_file(path, 2).is_ok());
  feed(*other, filler, 0, 1);
  ASSERT_TRUE(other->seq_state_load_file(path, 1).is_ok());
  std::remove(path.c_str());
  EXPECT_EQ(*other->seq_pos_max(1), int(p.size()) - 1);
}

TEST(ContextState, CorruptTruncatedOrMismatchedStatesChangeNothing) {
  auto model = load_shared_model(kModel);
  auto ctx = new_context(model, small_params());
  feed(*ctx, {1, 2, 3, 4, 5}, 0);
  const auto good = ctx->state_save();
  auto target = new_context(model, small_params());
  feed(*target, {9, 9, 9}, 0);
  const auto before = target->state_save();
  auto refused = [&](std::vector<uint8_t> data, const std::string& why) {
    Status st = target->state_load(data);
    EXPECT_FALSE(st.is_ok()) << why;
    EXPECT_EQ(target->state_save(), before) << why;
    return st;
  };
  for (size_t n : {size_t(0), size_t(7), size_t(20), good.size() / 2, good.size() - 1}) {
    (void)refused(std::vector<uint8_t>(good.begin(), good.begin() + long(n)), "truncated to " + std::to_string(n));
  }
  for (size_t i = 0; i < good.size(); i += 97) {
    auto bad = good;
    bad[i] ^= 0x5a;
    (void)refused(bad, "byte " + std::to_string(i) + " flipped");
  }
  auto extra = good;
  extra.push_back(0);
  (void)refused(extra, "trailing byte");
  // A state of another model.
  auto other_model = load_shared_model("models/stories260K.gguf");
  auto other_ctx = new_context(other_model, small_params());
  feed(*other_ctx, {1, 2, 3}, 0);
  Status st = refused(other_ctx->state_save(), "other model");
  EXPECT_NE(st.message().find("different model"), std::string::npos) << st.message();
  // Another cache type.
  ContextParams f32 = small_params();
  f32.type_k = TensorType::F32;
  auto f32_ctx = new_context(model, f32);
  feed(*f32_ctx, {1, 2}, 0);
  st = refused(f32_ctx->state_save(), "cache type");
  EXPECT_NE(st.message().find("types"), std::string::npos) << st.message();
  // A sequence state is not a whole state, and vice versa.
  (void)refused(*ctx->seq_state_save(0), "sequence state as whole");
  EXPECT_FALSE(target->seq_state_load(good, 0).is_ok());
  // More cells than the cache holds.
  auto small = new_context(model, small_params(4, 1));
  EXPECT_FALSE(small->state_load(good).is_ok());
  EXPECT_FALSE(target->state_load_file("/nonexistent/state.bin").is_ok());
}

TEST(ContextState, SequenceRestoreWithoutRoomIsRefusedUnchanged) {
  auto model = load_shared_model(kModel);
  auto ctx = new_context(model, small_params(64, 2));
  std::vector<int32_t> ids(40, 300);
  feed(*ctx, ids, 0, 0);
  auto st40 = ctx->seq_state_save(0);
  auto target = new_context(model, small_params(64, 2));
  feed(*target, ids, 0, 0);  // 40 of 64 cells used by seq 0; restoring 40 more into seq 1 cannot fit
  const auto before = target->state_save();
  Status st = target->seq_state_load(*st40, 1);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(target->state_save(), before);
  // Into seq 0 itself it fits: its own cells are replaced.
  EXPECT_TRUE(target->seq_state_load(*st40, 0).is_ok());
}

}  // namespace
}  // namespace loom::test

namespace loom::test {
namespace {

std::shared_ptr<const Model> data_model(const std::string& file) {
  auto m = Model::load(data_dir() + "/" + file);
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? *m : nullptr;
}

// States and checkpoints of one memory kind never load into another: a clear error, nothing
// changed; a checkpoint (some parts) restores only those parts.
TEST(ContextState, StatesOfAnotherMemoryKindAreRefusedUnchanged) {
  struct Kind {
    std::shared_ptr<const Model> model;
    std::string name;
  };
  std::vector<Kind> kinds = {{load_shared_model("models/synth-llama-tiny-f32.gguf"), "kv"},
                             {data_model("synth-mamba-tiny-f32.gguf"), "recurrent"},
                             {data_model("synth-granitehybrid-tiny-f32.gguf"), "hybrid"},
                             {data_model("synth-gemma3-tiny-f32.gguf"), "iswa"}};
  const std::vector<int32_t> ids = {1, 20, 30, 40, 50, 60, 70, 80};
  std::vector<std::vector<uint8_t>> states, checkpoints;
  std::vector<std::unique_ptr<Context>> ctxs;
  for (const Kind& k : kinds) {
    ASSERT_TRUE(k.model) << k.name;
    ContextParams cp = small_params(512, 2);
    cp.n_ubatch = 64;
    ctxs.push_back(new_context(k.model, cp));
    feed(*ctxs.back(), ids, 0, 0);
    auto st = ctxs.back()->seq_state_save(0, ids);
    ASSERT_TRUE(st.has_value()) << k.name << ": " << st.status().message();
    states.push_back(std::move(*st));
    auto ck = ctxs.back()->seq_state_save(0, ids, kv::kPartsAtEnd);
    checkpoints.push_back(ck ? std::move(*ck) : std::vector<uint8_t>{});
    EXPECT_EQ(ck.has_value(), k.name != "kv") << k.name;  // a plain KV memory has no end-only part
  }
  for (size_t a = 0; a < kinds.size(); ++a) {
    for (size_t b = 0; b < kinds.size(); ++b) {
      if (a == b) continue;
      Context& into = *ctxs[b];
      const int used = into.kv_used_cells();
      const auto before = *into.seq_pos_max(0);
      Status st = into.seq_state_load(states[a], 1);
      EXPECT_FALSE(st.is_ok()) << kinds[a].name << " state into " << kinds[b].name;
      if (!checkpoints[a].empty()) {
        EXPECT_FALSE(into.seq_state_load(checkpoints[a], 1).is_ok());
      }
      EXPECT_EQ(into.kv_used_cells(), used);
      EXPECT_EQ(*into.seq_pos_max(0), before);
      EXPECT_EQ(*into.seq_pos_max(1), -1);
    }
  }
  // A checkpoint restores the end-only parts of its own kind; the next token's logits then equal
  // the source sequence's once the full KV part is shared too (the prefix cache's way).
  for (size_t a = 1; a < kinds.size(); ++a) {
    Context& c = *ctxs[a];
    ASSERT_TRUE(c.seq_cp(0, 1, -1, -1, kv::kPartKv).is_ok());
    ASSERT_TRUE(c.seq_state_load(checkpoints[a], 1).is_ok()) << kinds[a].name;
    EXPECT_EQ(feed(c, {90}, 8, 1), feed(c, {90}, 8, 0)) << kinds[a].name;
  }
}

}  // namespace
}  // namespace loom::test
