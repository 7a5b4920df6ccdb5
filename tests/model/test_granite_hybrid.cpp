// Granite 4 hybrids (granitehybrid: Mamba-2 layers and attention layers in one stack) on the
// synthetic tests/data/synth-granitehybrid-tiny-f32 (4 layers, attention on layer 1, Granite's
// multipliers, no RoPE; golden from real llama.cpp, tests/data/README.md): hyperparameters and the
// memory they make, the golden at F32 K/V, batch invariance across sequences and micro-batches,
// state save/load, the recurrent part's seq_rm rule, refusals of what is not supported, and the CLI.
#include "model_test_util.h"
#include "context/context_test_util.h"  // feed, last_logits

#include <cstdio>
#include <filesystem>

#include "gguf/gguf_writer.h"

namespace loom::test {
namespace {

constexpr const char* kName = "synth-granitehybrid-tiny-f32";

std::string path() { return data_dir() + "/" + kName + ".gguf"; }

std::shared_ptr<const Model> hybrid() {
  auto m = Model::load(path());
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? *m : nullptr;
}

nlohmann::json golden() { return load_json(data_dir() + "/" + kName + ".json"); }

std::vector<int32_t> prompt(int run) { return golden()["runs"][run]["prompt_ids"].get<std::vector<int32_t>>(); }

std::unique_ptr<Context> context(std::shared_ptr<const Model> m, int n_seq_max = 4, int n_ubatch = 512,
                                 TensorType kv = TensorType::F32) {
  ContextParams cp;
  cp.n_ctx = cp.n_batch = 512;
  cp.n_ubatch = n_ubatch;
  cp.n_seq_max = n_seq_max;
  cp.n_threads = 2;
  cp.type_k = cp.type_v = kv;
  auto ctx = Context::create(std::move(m), cp);
  EXPECT_TRUE(ctx.has_value()) << ctx.status().message();
  return ctx ? std::move(*ctx) : nullptr;
}

TEST(GraniteHybrid, HparamsAndTheHybridMemory) {
  auto m = hybrid();
  ASSERT_TRUE(m);
  const ModelHparams& hp = m->hparams();
  EXPECT_EQ(hp.arch, Arch::kGraniteHybrid);
  EXPECT_EQ(hp.n_head_kv_layer, (std::vector<int64_t>{0, 2, 0, 0}));
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_TRUE(hp.is_hybrid());
  EXPECT_FALSE(hp.is_recurrent());
  EXPECT_TRUE(hp.is_mamba2());
  EXPECT_TRUE(hp.layer_is_recurrent(0));
  EXPECT_FALSE(hp.layer_is_recurrent(1));
  EXPECT_FALSE(hp.use_rope);  // rope.scaling.finetuned false, as Granite 4.0 H files
  EXPECT_EQ(hp.embd_scale, 12.0f);
  EXPECT_EQ(hp.residual_scale, 0.22f);
  EXPECT_EQ(hp.attn_scale, 0.125f);
  EXPECT_EQ(hp.logit_scale, 4.0f);
  EXPECT_EQ(hp.ssm_n_group, 2);
  EXPECT_EQ(hp.ssm_dt_rank, 8);  // heads
  // Attention weights only on layer 1, Mamba-2 weights on the others, the FFN everywhere.
  const ModelWeights& w = m->weights();
  EXPECT_TRUE(w.layers[0].wq.empty());
  EXPECT_FALSE(w.layers[0].ssm_in.empty());
  EXPECT_FALSE(w.layers[1].wq.empty());
  EXPECT_TRUE(w.layers[1].ssm_in.empty());
  EXPECT_EQ(w.layers[1].wk.rows, 32);
  for (const model::LayerWeights& l : w.layers) EXPECT_FALSE(l.ffn_down.empty());

  auto ctx = context(m, 3, 512, TensorType::F16);
  ASSERT_TRUE(ctx);
  EXPECT_TRUE(ctx->recurrent());
  EXPECT_EQ(ctx->params().type_k, TensorType::F16);  // the attention layers' K/V keep the asked type
  const MemoryBreakdown b = ctx->memory().breakdown();
  EXPECT_EQ(b.kv_layers, 1);
  EXPECT_EQ(b.kv_cells, 512);
  EXPECT_EQ(b.rs_layers, 3);
  EXPECT_EQ(b.rs_cells, 3);
  EXPECT_EQ(b.kv_swa_layers, 0);
  // One attention layer of 2 kv heads x 16: K and V of 32 halves per cell.
  EXPECT_EQ(b.kv_bytes, size_t(512) * 2 * 32 * 2);
  EXPECT_EQ(ctx->encode(Batch::from_tokens(prompt(0), 0)).code(), StatusCode::kUnsupported);
}

// The golden's own check (ArchGolden) runs with F16 K/V; llama.cpp computed it with F32 K/V.
TEST(GraniteHybrid, TeacherForcedStepsMatchLlamaCppWithF32Cache) {
  auto m = hybrid();
  ASSERT_TRUE(m);
  const auto g = golden();
  const size_t nv = size_t(m->hparams().n_vocab);
  float worst = 0;
  for (const auto& run : g["runs"]) {
    const auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = run["greedy_ids"].get<std::vector<int32_t>>();
    const auto steps = read_f32_file(data_dir() + "/" + run["step_logits_file"].get<std::string>());
    ASSERT_EQ(steps.size(), greedy.size() * nv);
    auto ctx = context(m, 1);
    auto got = feed(*ctx, ids, 0);
    for (size_t k = 0; k < greedy.size(); ++k) {
      const std::vector<float> want(steps.begin() + long(k * nv), steps.begin() + long((k + 1) * nv));
      const float rel = max_abs_diff(got, want) / max_abs(want);
      worst = std::max(worst, rel);
      ASSERT_LE(rel, 1e-3f) << "step " << k << " of " << run["prompt"];
      if (k + 1 == greedy.size()) break;
      got = feed(*ctx, {greedy[k]}, int(ids.size() + k));
    }
  }
  std::printf("granitehybrid golden: max |logit - llama.cpp| / max|logit| = %.3g over every step\n", double(worst));
}

TEST(GraniteHybrid, OneBatchChunksAndTokenByTokenGiveIdenticalLogits) {
  auto m = hybrid();
  ASSERT_TRUE(m);
  const auto p = prompt(1);
  auto one = context(m);
  const auto want = feed(*one, p, 0);
  for (int chunk : {1, 3, 7}) {
    auto ctx = context(m);
    std::vector<float> got;
    for (size_t i = 0; i < p.size(); i += size_t(chunk)) {
      got = feed(*ctx, std::vector<int32_t>(p.begin() + long(i), p.begin() + long(std::min(p.size(), i + size_t(chunk)))),
                 int(i));
    }
    EXPECT_EQ(got, want) << "chunks of " << chunk;
  }
  for (int ub : {1, 4, 5}) {
    auto ctx = context(m, 4, ub);
    EXPECT_EQ(feed(*ctx, p, 0), want) << "n_ubatch " << ub;
  }
}

// Two sequences interleaved token by token in one batch give each sequence's own logits, bit for
// bit: whatever the micro-batches (equal split: runs of one sequence each), with every token an
// output, and for the next token of both decoded together.
TEST(GraniteHybrid, InterleavedSequencesEqualEachAlone) {
  auto m = hybrid();
  ASSERT_TRUE(m);
  const auto a = prompt(0), b = prompt(1);
  auto solo_a = context(m), solo_b = context(m);
  ASSERT_TRUE(solo_a->decode(Batch::from_tokens(a, 0, 0, /*all_outputs=*/true)).is_ok());
  ASSERT_TRUE(solo_b->decode(Batch::from_tokens(b, 0, 0, /*all_outputs=*/true)).is_ok());
  const size_t nv = size_t(m->hparams().n_vocab);
  for (int ub : {512, 7, 2}) {
    auto ctx = context(m, 4, ub);
    Batch batch;
    std::vector<std::pair<int, int>> who;  // (sequence, index in its prompt) of each row
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      if (i < a.size()) batch.add(a[i], int(i), {2}, true), who.emplace_back(0, int(i));
      if (i < b.size()) batch.add(b[i], int(i), {0}, true), who.emplace_back(1, int(i));
    }
    ASSERT_TRUE(ctx->decode(batch).is_ok());
    const auto rows = ctx->all_logits();
    ASSERT_EQ(rows.size(), who.size() * nv);
    for (size_t r = 0; r < who.size(); ++r) {
      const auto want = last_logits(who[r].first == 0 ? *solo_a : *solo_b, who[r].second);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), rows.begin() + long(r * nv))) << "row " << r << " n_ubatch " << ub;
    }
    Batch next;
    next.add(b[3], int(b.size()), {0}, true);
    next.add(a[2], int(a.size()), {2}, true);
    ASSERT_TRUE(ctx->decode(next).is_ok());
    EXPECT_EQ(last_logits(*ctx, 1), feed(*solo_a, {a[2]}, int(a.size()))) << "n_ubatch " << ub;
    EXPECT_EQ(last_logits(*ctx, 0), feed(*solo_b, {b[3]}, int(b.size()))) << "n_ubatch " << ub;
    // The solo contexts moved on: put them back for the next round.
    ASSERT_TRUE(solo_a->seq_rm(0, -1, -1).is_ok() && solo_b->seq_rm(0, -1, -1).is_ok());
    ASSERT_TRUE(solo_a->decode(Batch::from_tokens(a, 0, 0, true)).is_ok());
    ASSERT_TRUE(solo_b->decode(Batch::from_tokens(b, 0, 0, true)).is_ok());
  }
}

// llama.cpp's hybrid memory asks the recurrent part first: a state cannot lose its last tokens
// alone, so removing a sequence's tail is refused and changes nothing in either part.
TEST(GraniteHybrid, SeqRmOfATailIsRefusedWithoutChange) {
  auto m = hybrid();
  ASSERT_TRUE(m);
  const auto p = prompt(1);
  auto ctx = context(m);
  feed(*ctx, p, 0, 1);
  const int n = int(p.size());
  const auto before = ctx->state_save();
  const int used = ctx->kv_used_cells();
  for (auto [p0, p1] : {std::pair{n / 2, -1}, {n - 1, n}, {1, -1}}) {
    const Status st = ctx->seq_rm(1, p0, p1);
    EXPECT_EQ(st.code(), StatusCode::kUnsupported) << p0 << ", " << p1 << ": " << st.message();
    EXPECT_EQ(ctx->state_save(), before);
    EXPECT_EQ(ctx->memory().kv()->seq_pos_min(1), 0);  // the KV part still holds every position
    EXPECT_EQ(*ctx->seq_pos_max(1), n - 1);
    EXPECT_EQ(ctx->kv_used_cells(), used);
  }
  // The memory's lowest position is the highest of the parts' (the state's: llama.cpp's rule).
  EXPECT_EQ(*ctx->seq_pos_min(1), n - 1);
  // A range that misses the state's position removes the KV cells of that range only (the
  // reference's rule: true, the state kept) ...
  ASSERT_TRUE(ctx->seq_rm(1, 0, 3).is_ok());
  EXPECT_EQ(ctx->memory().kv()->seq_pos_min(1), 3);
  EXPECT_EQ(*ctx->seq_pos_max(1), n - 1);
  EXPECT_EQ(ctx->recurrent_cache()->used(), 1);
  // ... and the whole sequence goes from both parts.
  ASSERT_TRUE(ctx->seq_rm(1, -1, -1).is_ok());
  EXPECT_EQ(*ctx->seq_pos_min(1), -1);
  EXPECT_EQ(*ctx->seq_pos_max(1), -1);
  EXPECT_EQ(ctx->kv_used_cells(), 0);
  EXPECT_EQ(ctx->recurrent_cache()->used(), 0);
}

// Granite 4.0 H has no positional encoding (rope.scaling.finetuned false): a position shift or
// division moves positions (the mask, the state's position) and rotates nothing, so a shifted
// sequence continues exactly as an unshifted one. (llama.cpp aborts at the decode after a shift of
// such a model: its K-shift graph skips every layer and leaves its input unallocated.)
TEST(GraniteHybrid, PositionShiftsMovePositionsAndRotateNothing) {
  auto m = hybrid();
  ASSERT_TRUE(m);
  const auto p = prompt(1);
  const int n = int(p.size());
  const std::vector<int32_t> head(p.begin(), p.end() - 1);
  auto fresh = context(m);
  const auto want = feed(*fresh, p, 0);
  auto ctx = context(m);
  feed(*ctx, head, 0);
  ASSERT_TRUE(ctx->seq_add(0, 0, -1, 10).is_ok());
  EXPECT_EQ(*ctx->seq_pos_max(0), n - 2 + 10);
  EXPECT_EQ(ctx->memory().kv()->seq_pos_min(0), 10);
  EXPECT_EQ(feed(*ctx, {p.back()}, n - 1 + 10), want);
  auto div = context(m);
  feed(*div, head, 0);
  ASSERT_TRUE(div->seq_div(0, 0, -1, 2).is_ok());
  EXPECT_EQ(*div->seq_pos_max(0), (n - 2) / 2);
  EXPECT_EQ(feed(*div, {p.back()}, (n - 2) / 2 + 1), want);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("loom_granite_hybrid_test_" + name)).string();
}

TEST(GraniteHybrid, StateSaveLoadRoundTripOfAHybridSequence) {
  auto m = hybrid();
  ASSERT_TRUE(m);
  const auto p = prompt(1);
  const long h = long(p.size() / 2);
  const std::vector<int32_t> head(p.begin(), p.begin() + h), tail(p.begin() + h, p.end());
  auto ctx = context(m);
  feed(*ctx, head, 0, 0);
  feed(*ctx, prompt(0), 0, 2);
  ASSERT_TRUE(ctx->seq_cp(0, 3, -1, -1).is_ok());  // KV cells and the state shared
  const auto whole = ctx->state_save(head);
  const auto seq0 = ctx->seq_state_save(0, head);
  ASSERT_TRUE(seq0.has_value()) << seq0.status().message();
  const auto want = feed(*ctx, tail, int(h), 0);

  // The whole memory, through a file, into a fresh context: the copy continues identically.
  const std::string file = temp_path("whole.bin");
  ASSERT_TRUE(ctx->state_load(whole).is_ok());
  ASSERT_TRUE(ctx->state_save_file(file, head).is_ok());
  auto other = context(m);
  std::vector<int32_t> tokens;
  ASSERT_TRUE(other->state_load_file(file, &tokens).is_ok());
  std::remove(file.c_str());
  EXPECT_EQ(tokens, head);
  EXPECT_EQ(*other->seq_pos_max(3), int(h) - 1);
  EXPECT_EQ(feed(*other, tail, int(h), 3), want);
  EXPECT_EQ(feed(*other, tail, int(h), 0), want);

  // One sequence (its KV cells and its state) into another id of a context that had other data.
  auto third = context(m);
  feed(*third, p, 0, 1);
  ASSERT_TRUE(third->seq_state_load(*seq0, 1, &tokens).is_ok());
  EXPECT_EQ(third->memory().kv()->seq_pos_min(1), 0);
  EXPECT_EQ(*third->seq_pos_max(1), int(h) - 1);
  EXPECT_EQ(feed(*third, tail, int(h), 1), want);

  // A Mamba-2 model's state (another memory layout) is refused and changes nothing.
  auto mamba2 = Model::load(data_dir() + "/synth-mamba2-tiny-f32.gguf");
  ASSERT_TRUE(mamba2.has_value());
  auto mctx = context(*mamba2);
  const auto before = other->state_save();
  EXPECT_FALSE(other->state_load(mctx->state_save()).is_ok());
  EXPECT_EQ(other->state_save(), before);
}

TEST(GraniteHybrid, RefusedBatchesLeaveBothPartsAsTheyWere) {
  auto m = hybrid();
  ASSERT_TRUE(m);
  const auto p = prompt(0);
  auto ctx = context(m, 4, 2);
  feed(*ctx, p, 0, 0);
  const auto before = ctx->state_save();
  const auto seq_before = *ctx->seq_state_save(0);
  const int n = int(p.size());
  // A position gap and a token of two sequences (one state per sequence).
  for (auto [pos, seqs] : {std::pair{n + 1, std::vector<int32_t>{0}}, {n, {0, 1}}}) {
    Batch b;
    b.add(p[1], pos, std::span<const int32_t>(seqs), true);
    EXPECT_EQ(ctx->decode(b).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(ctx->state_save(), before);
  }
  // An abort in a later micro-batch gives the KV cells back and keeps the old states.
  static int calls;
  calls = 0;
  ctx->set_abort_callback([](void*) { return ++calls > 6; }, nullptr);
  EXPECT_EQ(ctx->decode(Batch::from_tokens(p, n, 0)).code(), StatusCode::kAborted);
  ctx->set_abort_callback(nullptr, nullptr);
  // (A failed decode drops the last outputs, which a whole state holds: compare the sequence.)
  EXPECT_EQ(*ctx->seq_state_save(0), seq_before);
  EXPECT_EQ(ctx->kv_used_cells(), n);
  auto fresh = context(m, 4, 2);
  feed(*fresh, p, 0, 0);
  EXPECT_EQ(feed(*ctx, p, n, 0), feed(*fresh, p, n, 0));
}

// Variants of the file built in memory.
Expected<std::shared_ptr<const Model>> edited(const std::function<Status(gguf::GgufWriter&)>& edit) {
  LOOM_ASSIGN_OR_RETURN(gguf::GgufFile src, gguf::GgufFile::open(path()));
  LOOM_ASSIGN_OR_RETURN(gguf::GgufWriter w, gguf::GgufWriter::from_file(src));
  LOOM_RETURN_IF_ERROR(edit(w));
  LOOM_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::from_bytes(w.to_bytes()));
  return Model::from_gguf(std::move(f));
}

void expect_refused(const Expected<std::shared_ptr<const Model>>& m, StatusCode code, const std::string& words) {
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.status().code(), code) << m.status().message();
  EXPECT_NE(m.status().message().find(words), std::string::npos) << m.status().message();
}

TEST(GraniteHybrid, WhatIsNotSupportedIsRefusedByName) {
  // Mixture-of-experts FFN (Granite 4.0 H Tiny / Small).
  // (granitehybrid takes experts now: without expert_used_count the file is incomplete.)
  expect_refused(edited([](gguf::GgufWriter& w) { return w.set_u32("granitehybrid.expert_count", 8); }),
                 StatusCode::kNotFound, "expert_used_count");
  // Optional biases of the reference's loader.
  expect_refused(edited([](gguf::GgufWriter& w) {
                   std::vector<uint8_t> bytes(64 * 4, 0);
                   return w.add_tensor("blk.1.attn_output.bias", TensorType::F32, {64}, bytes);
                 }),
                 StatusCode::kUnsupported, "blk.1.attn_output.bias");
  // Every layer recurrent, or a per-layer head count that is not a divisor.
  expect_refused(edited([](gguf::GgufWriter& w) {
                   w.remove("granitehybrid.attention.head_count_kv");
                   return w.set_i32_array("granitehybrid.attention.head_count_kv", {0, 0, 0, 0});
                 }),
                 StatusCode::kUnsupported, "every layer is recurrent");
  expect_refused(edited([](gguf::GgufWriter& w) {
                   w.remove("granitehybrid.attention.head_count_kv");
                   return w.set_i32_array("granitehybrid.attention.head_count_kv", {0, 3, 0, 0});
                 }),
                 StatusCode::kCorrupt, "head_count_kv[1] = 3");
  expect_refused(edited([](gguf::GgufWriter& w) {
                   w.remove("granitehybrid.attention.head_count_kv");
                   return w.set_i32_array("granitehybrid.attention.head_count_kv", {0, 2, 0});
                 }),
                 StatusCode::kCorrupt, "one per layer");
  // The reference runs only an expansion factor of 2.
  expect_refused(edited([](gguf::GgufWriter& w) {
                   w.remove("granitehybrid.ssm.inner_size");
                   return w.set_u32("granitehybrid.ssm.inner_size", 64);
                 }),
                 StatusCode::kUnsupported, "expansion factor");
  // A layer without attention heads in a family that has no recurrent layers.
  auto llama = gguf::GgufFile::open(shared_path("models/synth-llama-tiny-f32.gguf"));
  ASSERT_TRUE(llama.has_value());
  auto w = gguf::GgufWriter::from_file(*llama);
  ASSERT_TRUE(w.has_value());
  const int64_t n_layer = *llama->get_int("llama.block_count");
  std::vector<int32_t> kv(size_t(n_layer), int32_t(*llama->get_int_or("llama.attention.head_count_kv", 4)));
  kv[0] = 0;
  w->remove("llama.attention.head_count_kv");
  ASSERT_TRUE(w->set_i32_array("llama.attention.head_count_kv", kv).is_ok());
  auto f = gguf::GgufFile::from_bytes(w->to_bytes());
  ASSERT_TRUE(f.has_value());
  expect_refused(Model::from_gguf(std::move(*f)), StatusCode::kUnsupported, "only supported for hybrid");
}

TEST(GraniteHybrid, CliGenerateGivesTheGoldensGreedyIdsAndInfoNamesTheArchitecture) {
  const auto g = golden();
  for (int run : {0, 1}) {
    const auto& r = g["runs"][run];
    auto out =
        run_loom("generate -m " + quote(path()) + " -p " + quote(r["prompt"].get<std::string>()) + " -n 16 --temp 0 --json");
    ASSERT_EQ(out.exit_code, 0) << out.err;
    const auto j = nlohmann::json::parse(out.out);
    EXPECT_EQ(j["prompt_ids"].get<std::vector<int>>(), r["prompt_ids"].get<std::vector<int>>());
    EXPECT_EQ(j["ids"].get<std::vector<int>>(), r["greedy_ids"].get<std::vector<int>>()) << r["prompt"];
  }
  auto info = run_loom("info -m " + quote(path()) + " --json");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const auto j = nlohmann::json::parse(info.out);
  EXPECT_EQ(j["architecture"], "granitehybrid");
  EXPECT_EQ(j["metadata"]["granitehybrid.embedding_scale"], 12.0);
}

}  // namespace
}  // namespace loom::test
