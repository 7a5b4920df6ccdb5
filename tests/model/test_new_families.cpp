// This year's small-model families on their synthetic files (tests/data/synth-{smollm3,granite,
// lfm2,qwen35,gemma4,mistral3}-tiny-f32, and gemma3n's, made by the test: synth_gemma3n_model;
// goldens from real llama.cpp in test_arch_golden): hyperparameters and the memory they make, batch
// invariance of the hybrids and of the Gemma 4 / 3n stacks (a sequence's logits are the same bits
// alone, in chunks, split into any micro-batches and among 7 other sequences), state save/load, the
// K-shift of smollm3's NoPE layers, refusals of bad files naming the tensor or key, and the CLI.
#include "model_test_util.h"
#include "context/context_test_util.h"  // feed, last_logits

#include <functional>

#include "gguf/gguf_writer.h"

namespace loom::test {
namespace {

std::string path_of(const std::string& arch) {
  if (arch == "gemma3n") return synth_gemma3n_model();  // too large to commit: made (and checked) here
  return data_dir() + "/synth-" + arch + "-tiny-f32.gguf";
}

std::shared_ptr<const Model> load(const std::string& arch) {
  auto m = Model::load(path_of(arch));
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? *m : nullptr;
}

nlohmann::json golden(const std::string& arch) { return load_json(data_dir() + "/synth-" + arch + "-tiny-f32.json"); }

std::vector<int32_t> prompt(const std::string& arch, int run) {
  return golden(arch)["runs"][run]["prompt_ids"].get<std::vector<int32_t>>();
}

std::unique_ptr<Context> context(std::shared_ptr<const Model> m, int n_seq_max = 8, int n_ubatch = 512,
                                 TensorType kv = TensorType::F16) {
  ContextParams cp;
  cp.n_ctx = cp.n_batch = 1024;
  cp.n_ubatch = n_ubatch;
  cp.n_seq_max = n_seq_max;
  cp.n_threads = 2;
  cp.type_k = cp.type_v = kv;
  auto ctx = Context::create(std::move(m), cp);
  EXPECT_TRUE(ctx.has_value()) << ctx.status().message();
  return ctx ? std::move(*ctx) : nullptr;
}

TEST(NewFamilies, HparamsAndMemory) {
  {
    auto m = load("smollm3");
    ASSERT_TRUE(m);
    const ModelHparams& hp = m->hparams();
    EXPECT_EQ(hp.arch, Arch::kSmolLM3);
    EXPECT_TRUE(hp.layer_has_rope(0) && hp.layer_has_rope(2));
    EXPECT_FALSE(hp.layer_has_rope(3));
    EXPECT_FALSE(hp.is_hybrid());
  }
  {
    auto m = load("granite");
    ASSERT_TRUE(m);
    const ModelHparams& hp = m->hparams();
    EXPECT_EQ(hp.arch, Arch::kGranite);
    EXPECT_EQ(hp.embd_scale, 12.0f);
    EXPECT_EQ(hp.residual_scale, 0.22f);
    EXPECT_EQ(hp.attn_scale, 0.125f);
    EXPECT_EQ(hp.logit_scale, 4.0f);
    EXPECT_TRUE(hp.use_rope);
  }
  {
    auto m = load("lfm2");
    ASSERT_TRUE(m);
    const ModelHparams& hp = m->hparams();
    EXPECT_EQ(hp.rec_mixer, model::RecurrentMixer::kShortConv);
    EXPECT_EQ(hp.recurrent_layer, (std::vector<uint8_t>{1, 0, 1, 0}));
    EXPECT_TRUE(hp.is_hybrid());
    EXPECT_EQ(hp.n_embd_conv_state(), 2 * 64);  // l_cache 3: two values per channel
    EXPECT_EQ(hp.n_embd_ssm_state(), 0);
    auto ctx = context(m, 3);
    ASSERT_TRUE(ctx);
    const MemoryBreakdown b = ctx->memory().breakdown();
    EXPECT_EQ(b.kv_layers, 2);
    EXPECT_EQ(b.rs_layers, 2);
    EXPECT_EQ(b.rs_cells, 3);
    EXPECT_EQ(b.rs_bytes, size_t(2 * (2 * 3) * 128 * 4));  // 2 layers, 2 rows per cell (a step writes a fresh row)
  }
  {
    auto m = load("qwen35");
    ASSERT_TRUE(m);
    const ModelHparams& hp = m->hparams();
    EXPECT_EQ(hp.rec_mixer, model::RecurrentMixer::kDeltaNet);
    EXPECT_EQ(hp.n_layer, 4);  // block_count 5 less the MTP block
    EXPECT_EQ(hp.n_layer_nextn, 1);
    EXPECT_EQ(hp.recurrent_layer, (std::vector<uint8_t>{1, 1, 1, 0}));
    EXPECT_TRUE(hp.attn_output_gate);
    EXPECT_EQ(hp.n_rot, 8);
    EXPECT_EQ(m->weights().rope_sections, nullptr);  // sections [2, 1, 1, 0]: every pair turns with the position
    EXPECT_EQ(m->weights().layers.size(), 4u);
    EXPECT_EQ(m->weights().layers[3].wq.rows, 2 * 4 * 16);  // q and its gate per head
    auto ctx = context(m, 2);
    ASSERT_TRUE(ctx);
    const MemoryBreakdown b = ctx->memory().breakdown();
    EXPECT_EQ(b.kv_layers, 1);
    EXPECT_EQ(b.rs_layers, 3);
    // Per layer and sequence: conv state 3 x 128 channels, 4 value heads of 16 x 16.
    EXPECT_EQ(b.rs_bytes, size_t(3 * (2 * 2) * (3 * 128 + 4 * 16 * 16) * 4));  // 3 layers, 2 rows per cell
  }
}

class Hybrid : public ::testing::TestWithParam<const char*> {};

TEST_P(Hybrid, ChunksTokenByTokenAndMicroBatchesGiveIdenticalLogits) {
  auto m = load(GetParam());
  ASSERT_TRUE(m);
  const auto p = prompt(GetParam(), 1);
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
  for (int ub : {1, 4, 5, 16}) {
    auto ctx = context(m, 8, ub);
    EXPECT_EQ(feed(*ctx, p, 0), want) << "n_ubatch " << ub;
  }
}

// A sequence among 7 others in one batch (every sequence a different prompt, tokens interleaved)
// gives the bits it gives alone, for its prompt and for greedy continuation steps decoded together.
TEST_P(Hybrid, ASequenceAmongSevenOthersEqualsItselfAlone) {
  auto m = load(GetParam());
  ASSERT_TRUE(m);
  const auto a = prompt(GetParam(), 0), b = prompt(GetParam(), 1);
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < 8; ++s) {
    std::vector<int32_t> p = s % 2 ? b : a;
    p.resize(p.size() - size_t(s % 3));  // different lengths
    if (s > 1) p[1] = int32_t(10 + s);   // and different contents
    prompts.push_back(p);
  }
  for (int ub : {512, 7}) {
    auto ctx = context(m, 8, ub);
    Batch batch;
    size_t longest = 0;
    for (const auto& p : prompts) longest = std::max(longest, p.size());
    for (size_t i = 0; i < longest; ++i) {
      for (int s = 0; s < 8; ++s) {
        if (i < prompts[size_t(s)].size()) batch.add(prompts[size_t(s)][i], int(i), {s}, i + 1 == prompts[size_t(s)].size());
      }
    }
    ASSERT_TRUE(ctx->decode(batch).is_ok());
    std::vector<std::vector<float>> together;  // outputs in batch order: by prompt length, then sequence
    for (int r = 0; r < 8; ++r) together.push_back(last_logits(*ctx, r - 8));
    for (int s = 0; s < 8; ++s) {
      auto solo = context(m, 1, ub);
      const auto want = feed(*solo, prompts[size_t(s)], 0);
      bool found = false;
      for (const auto& t : together) found = found || t == want;
      EXPECT_TRUE(found) << "sequence " << s << " n_ubatch " << ub;
    }
    // Four greedy steps of all eight together against sequence 3 alone.
    auto solo = context(m, 1, ub);
    auto want = feed(*solo, prompts[3], 0);
    std::vector<int32_t> next(8);
    for (int s = 0; s < 8; ++s) next[size_t(s)] = prompts[size_t(s)].back();
    for (int step = 0; step < 4; ++step) {
      const int32_t tok = int32_t(std::max_element(want.begin(), want.end()) - want.begin());
      Batch nb;
      for (int s = 0; s < 8; ++s) nb.add(s == 3 ? tok : next[size_t(s)], int(prompts[size_t(s)].size()) + step, {s}, true);
      ASSERT_TRUE(ctx->decode(nb).is_ok());
      want = feed(*solo, {tok}, int(prompts[3].size()) + step);
      EXPECT_EQ(last_logits(*ctx, 3), want) << "step " << step << " n_ubatch " << ub;
    }
  }
}

TEST_P(Hybrid, StateSaveLoadRoundTripAndTailRemovalRefused) {
  auto m = load(GetParam());
  ASSERT_TRUE(m);
  const auto p = prompt(GetParam(), 1);
  const long h = long(p.size() / 2);
  const std::vector<int32_t> head(p.begin(), p.begin() + h), tail(p.begin() + h, p.end());
  auto ctx = context(m, 4);
  feed(*ctx, head, 0, 0);
  feed(*ctx, prompt(GetParam(), 0), 0, 2);
  const auto whole = ctx->state_save(head);
  const auto seq0 = ctx->seq_state_save(0, head);
  ASSERT_TRUE(seq0.has_value()) << seq0.status().message();
  const auto want = feed(*ctx, tail, int(h), 0);
  auto other = context(m, 4);
  std::vector<int32_t> tokens;
  ASSERT_TRUE(other->state_load(whole, &tokens).is_ok());
  EXPECT_EQ(tokens, head);
  EXPECT_EQ(feed(*other, tail, int(h), 0), want);
  auto third = context(m, 4);
  feed(*third, p, 0, 1);
  ASSERT_TRUE(third->seq_state_load(*seq0, 1, &tokens).is_ok());
  EXPECT_EQ(feed(*third, tail, int(h), 1), want);
  if (!m->hparams().has_recurrent_layers()) return;
  // A recurrent state cannot drop its last tokens: refused, nothing changes.
  const auto before = third->state_save();
  EXPECT_EQ(third->seq_rm(1, int(h), -1).code(), StatusCode::kUnsupported);
  EXPECT_EQ(third->state_save(), before);
}

TEST_P(Hybrid, CliGenerateGivesTheGoldensGreedyIds) {
  // gemma4's F32-cache golden is the strict one; the CLI's default cache is F16.
  const auto g =
      std::string(GetParam()) == "gemma4" ? load_json(data_dir() + "/synth-gemma4-tiny-f32-kvf16.json") : golden(GetParam());
  for (int run : {0, 1}) {
    const auto& r = g["runs"][run];
    auto out = run_loom("generate -m " + quote(path_of(GetParam())) + " -p " + quote(r["prompt"].get<std::string>()) +
                        " -n 16 --temp 0 --json");
    ASSERT_EQ(out.exit_code, 0) << out.err;
    const auto j = nlohmann::json::parse(out.out);
    // The reference's greedy run goes on through an end-of-generation token; generate stops there
    // and does not print it.
    auto want = r["greedy_ids"].get<std::vector<int>>();
    auto m = load(GetParam());
    ASSERT_TRUE(m);
    for (size_t i = 0; i < want.size(); ++i) {
      if (m->vocab().is_eog(want[i])) {
        want.resize(i);
        break;
      }
    }
    EXPECT_EQ(j["ids"].get<std::vector<int>>(), want) << r["prompt"];
  }
}

// gemma4 (sliding and global layers of two head sizes, shared-KV layers, per-layer embeddings)
// and gemma3n (AltUp streams, Laurel, activation sparsity, sliding / global and shared-KV layers,
// per-layer inputs) go through the same invariance and state checks.
INSTANTIATE_TEST_SUITE_P(Files, Hybrid, ::testing::Values("lfm2", "qwen35", "gemma4", "gemma3n"));
// The mixture-of-experts files too: a micro-batch's tokens are grouped by expert, so an expert's
// GEMM sees a different set of rows alone, chunked, micro-batched and among other sequences, and
// the logits must still be the same bits (the kernels' per-output arithmetic does not depend on
// the row count).
INSTANTIATE_TEST_SUITE_P(MoE, Hybrid,
                         ::testing::Values("qwen3moe", "qwen35moe", "lfm2moe", "granitemoe", "granitehybridmoe", "olmoe",
                                           "mixtral", "gpt-oss", "gemma4moe", "qwen3next"));

class Dense : public Hybrid {};
TEST_P(Dense, CliGenerateGivesTheGoldensGreedyIds) {
  const auto g = golden(GetParam());
  const auto& r = g["runs"][1];
  auto out = run_loom("generate -m " + quote(path_of(GetParam())) + " -p " + quote(r["prompt"].get<std::string>()) +
                      " -n 16 --temp 0 --json");
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(nlohmann::json::parse(out.out)["ids"].get<std::vector<int>>(), r["greedy_ids"].get<std::vector<int>>());
}
INSTANTIATE_TEST_SUITE_P(Files, Dense, ::testing::Values("smollm3", "granite", "mistral3"));

// mistral3's YaRN and temperature come from the file: rope scaling type, factor, betas, log multiplier.
TEST(NewFamilies, Mistral3ReadsYarnAndTemperatureScaling) {
  auto m = load("mistral3");
  ASSERT_TRUE(m);
  const ModelHparams& hp = m->hparams();
  EXPECT_EQ(hp.arch, Arch::kMistral3);
  EXPECT_EQ(hp.rope_scaling, model::RopeScalingKind::kYarn);
  EXPECT_EQ(hp.rope_freq_scale, 0.25f);
  EXPECT_EQ(hp.n_ctx_orig_yarn, 32);
  EXPECT_EQ(hp.yarn_log_mul, 1.0f);
  EXPECT_EQ(hp.attn_temp_scale, 0.1f);
  auto ctx = context(m, 1);
  ASSERT_TRUE(ctx);
  EXPECT_EQ(ctx->params().yarn_ext_factor, 1.0f);  // YaRN from the file's rope.scaling.type
}

// smollm3's NoPE layer keeps its K as it was: a shifted sequence continues as one decoded at the
// shifted positions (F32 K/V; only the rotated layers' K turn).
TEST(NewFamilies, SmolLM3KShiftRotatesOnlyTheRopeLayers) {
  auto m = load("smollm3");
  ASSERT_TRUE(m);
  const auto p = prompt("smollm3", 1);
  const std::vector<int32_t> head(p.begin(), p.end() - 1);
  auto shifted = context(m, 1, 512, TensorType::F32);
  feed(*shifted, head, 50);
  ASSERT_TRUE(shifted->seq_add(0, 0, -1, -50).is_ok());
  const auto got = feed(*shifted, {p.back()}, int(p.size()) - 1);
  auto fresh = context(m, 1, 512, TensorType::F32);
  const auto want = feed(*fresh, p, 0);
  EXPECT_LE(max_abs_diff(got, want), 1e-4f * max_abs(want));
}

// Variants of a file built in memory.
Expected<std::shared_ptr<const Model>> edited(const std::string& arch,
                                              const std::function<Status(gguf::GgufWriter&)>& edit) {
  LOOM_ASSIGN_OR_RETURN(gguf::GgufFile src, gguf::GgufFile::open(path_of(arch)));
  LOOM_ASSIGN_OR_RETURN(gguf::GgufWriter w, gguf::GgufWriter::from_file(src));
  LOOM_RETURN_IF_ERROR(edit(w));
  LOOM_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::from_bytes(w.to_bytes()));
  return Model::from_gguf(std::move(f));
}

void expect_refused(const Expected<std::shared_ptr<const Model>>& m, const std::string& words) {
  ASSERT_FALSE(m.has_value()) << words;
  EXPECT_NE(m.status().message().find(words), std::string::npos) << m.status().message();
}

Status set_tensor(gguf::GgufWriter& w, const std::string& name, std::vector<int64_t> ne, float value = 0.0f) {
  w.remove_tensor(name);
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  std::vector<float> v(size_t(n), value);
  std::vector<uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return w.add_tensor(name, TensorType::F32, ne, bytes);
}

TEST(NewFamilies, BadFilesAreRefusedNamingTheTensorOrKey) {
  // Missing tensors of each mixer.
  expect_refused(edited("qwen35",
                        [](gguf::GgufWriter& w) {
                          w.remove_tensor("blk.1.ssm_beta.weight");
                          return Status::ok();
                        }),
                 "blk.1.ssm_beta.weight");
  expect_refused(edited("lfm2",
                        [](gguf::GgufWriter& w) {
                          w.remove_tensor("blk.2.shortconv.in_proj.weight");
                          return Status::ok();
                        }),
                 "blk.2.shortconv.in_proj.weight");
  expect_refused(edited("lfm2",
                        [](gguf::GgufWriter& w) {
                          w.remove_tensor("token_embd_norm.weight");
                          return Status::ok();
                        }),
                 "token_embd_norm.weight");
  // Wrong shapes.
  expect_refused(edited("lfm2",
                        [](gguf::GgufWriter& w) {
                          return set_tensor(w, "blk.0.shortconv.conv.weight", {4, 64});
                        }),
                 "blk.0.shortconv.conv.weight");
  expect_refused(edited("qwen35",
                        [](gguf::GgufWriter& w) {
                          return set_tensor(w, "blk.3.attn_q.weight", {64, 64});
                        }),
                 "blk.3.attn_q.weight");
  // A decay that would make the state grow.
  expect_refused(edited("qwen35", [](gguf::GgufWriter& w) { return set_tensor(w, "blk.0.ssm_a", {4}, 0.5f); }),
                 "blk.0.ssm_a");
  // Layer patterns that do not match the layer count, and inconsistent head sizes.
  expect_refused(edited("qwen35",
                        [](gguf::GgufWriter& w) {
                          return w.set_i32_array("qwen35.attention.recurrent_layers", {1, 1, 0});
                        }),
                 "qwen35.attention.recurrent_layers");
  expect_refused(edited("lfm2",
                        [](gguf::GgufWriter& w) {
                          w.remove("lfm2.attention.head_count_kv");
                          return w.set_i32_array("lfm2.attention.head_count_kv", {0, 2, 0});
                        }),
                 "one per layer");
  expect_refused(edited("qwen35",
                        [](gguf::GgufWriter& w) {
                          w.remove("qwen35.ssm.inner_size");
                          return w.set_u32("qwen35.ssm.inner_size", 48);
                        }),
                 "ssm.inner_size");
  expect_refused(edited("qwen35",
                        [](gguf::GgufWriter& w) {
                          w.remove("qwen35.nextn_predict_layers");
                          return w.set_u32("qwen35.nextn_predict_layers", 5);
                        }),
                 "nextn_predict_layers");
  expect_refused(edited("qwen35",
                        [](gguf::GgufWriter& w) {
                          w.remove("qwen35.rope.dimension_sections");
                          return w.set_i32_array("qwen35.rope.dimension_sections", {4, 4, 4, 0});
                        }),
                 "rope.dimension_sections");
  expect_refused(edited("lfm2",
                        [](gguf::GgufWriter& w) {
                          w.remove("lfm2.shortconv.l_cache");
                          return Status::ok();
                        }),
                 "lfm2.shortconv.l_cache");
}

TEST(NewFamilies, Gemma4HparamsAndItsTwoCaches) {
  auto m = load("gemma4");
  ASSERT_TRUE(m);
  const ModelHparams& hp = m->hparams();
  EXPECT_EQ(hp.arch, Arch::kGemma4);
  EXPECT_EQ(hp.swa_window, 16);
  EXPECT_EQ(hp.swa_layer, (std::vector<uint8_t>{1, 1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(hp.head_dim, 32);
  EXPECT_EQ(hp.head_dim_at(0), 16);
  EXPECT_EQ(hp.head_dim_at(2), 32);
  EXPECT_EQ(hp.n_rot_at(1), 16);
  EXPECT_EQ(hp.kv_reuse, (std::vector<int>{-1, -1, -1, -1, -1, 3, 4}));  // the last sliding / global K/V layer
  EXPECT_EQ(hp.n_ff_at(0), 128);
  EXPECT_EQ(hp.n_ff_at(6), 256);
  EXPECT_EQ(hp.n_embd_per_layer, 8);
  EXPECT_EQ(hp.final_softcap, 30.0f);
  const ModelWeights& w = m->weights();
  ASSERT_TRUE(w.rope_freqs);
  EXPECT_EQ(w.rope_freqs[15], 1e30f);
  EXPECT_EQ(w.layers[1].wv.data, w.layers[1].wk.data);  // no attn_v: V is K's projection
  EXPECT_TRUE(w.layers[5].wk.empty());                  // a shared-KV layer has no K/V weights
  EXPECT_NE(w.layers[3].out_scale, 0.0f);
  auto ctx = context(m, 2, 512, TensorType::F16);
  ASSERT_TRUE(ctx);
  const MemoryBreakdown b = ctx->memory().breakdown();
  EXPECT_EQ(b.kv_layers, 2);      // global layers 2 and 4 (6 reads 4's)
  EXPECT_EQ(b.kv_swa_layers, 3);  // sliding layers 0, 1, 3 (5 reads 3's)
  // Global: 2 kv heads x 32, sliding: 2 x 16; K and V in F16, per cell.
  EXPECT_EQ(b.kv_bytes, size_t(b.kv_cells) * 2 * (2 * 64 * 2));
  EXPECT_EQ(b.kv_swa_bytes, size_t(b.kv_swa_cells) * 3 * (2 * 32 * 2));
  EXPECT_LT(b.kv_swa_cells, b.kv_cells);
}

// gemma3n's file: 25 layers, 4 of 5 sliding (window 16), layers 20-24 on the K/V of 18 (sliding)
// and 19 (global), the reference's fixed AltUp / per-layer / sparsity sizes.
TEST(NewFamilies, Gemma3nHparamsAndItsTwoCaches) {
  auto m = load("gemma3n");
  ASSERT_TRUE(m);
  const ModelHparams& hp = m->hparams();
  EXPECT_EQ(hp.arch, Arch::kGemma3n);
  EXPECT_EQ(hp.n_layer, 25);
  EXPECT_EQ(hp.swa_window, 16);
  for (int il = 0; il < 25; ++il) EXPECT_EQ(hp.is_swa_layer(il), il % 5 != 4) << "layer " << il;
  std::vector<int> reuse(25, -1);
  for (int il = 20; il < 25; ++il) reuse[size_t(il)] = il % 5 == 4 ? 19 : 18;
  EXPECT_EQ(hp.kv_reuse, reuse);
  EXPECT_EQ(hp.n_altup, 4);
  EXPECT_EQ(hp.n_embd_per_layer, 256);
  EXPECT_EQ(hp.n_layer_sparse, 10);
  EXPECT_TRUE(hp.v_norm);
  EXPECT_EQ(hp.final_softcap, 30.0f);
  EXPECT_TRUE(m->weights().layers[20].wk.empty());  // a shared-KV layer has no K/V weights
  EXPECT_FALSE(m->weights().layers[19].wk.empty());
  auto ctx = context(m, 2, 512, TensorType::F16);
  ASSERT_TRUE(ctx);
  const MemoryBreakdown b = ctx->memory().breakdown();
  EXPECT_EQ(b.kv_layers, 4);       // global layers 4, 9, 14, 19 (24 reads 19's)
  EXPECT_EQ(b.kv_swa_layers, 16);  // the sliding ones of the first 20
  // 2 kv heads x 16, K and V in F16, per cell.
  EXPECT_EQ(b.kv_bytes, size_t(b.kv_cells) * 4 * (2 * 32 * 2));
  EXPECT_EQ(b.kv_swa_bytes, size_t(b.kv_swa_cells) * 16 * (2 * 32 * 2));
  EXPECT_LT(b.kv_swa_cells, b.kv_cells);
}

TEST(NewFamilies, Gemma4BadFilesAreRefused) {
  expect_refused(edited("gemma4",
                        [](gguf::GgufWriter& w) {
                          w.remove("gemma4.attention.sliding_window_pattern");
                          return w.set_bool_array("gemma4.attention.sliding_window_pattern", {true, false});
                        }),
                 "sliding_window_pattern");
  // Shared-KV layers whose source would be a layer of the other kind.
  expect_refused(edited("gemma4",
                        [](gguf::GgufWriter& w) {
                          w.remove("gemma4.attention.shared_kv_layers");
                          return w.set_u32("gemma4.attention.shared_kv_layers", 1);
                        }),
                 "shared-KV layer");
  expect_refused(edited("gemma4",
                        [](gguf::GgufWriter& w) {
                          w.remove_tensor("per_layer_model_proj.weight");
                          return Status::ok();
                        }),
                 "per_layer_model_proj.weight");
  expect_refused(edited("gemma4",
                        [](gguf::GgufWriter& w) {
                          return set_tensor(w, "blk.2.attn_q.weight", {64, 64});
                        }),
                 "blk.2.attn_q.weight");
  // An expert count without the rest of Gemma 4 MoE's keys and tensors.
  expect_refused(edited("gemma4", [](gguf::GgufWriter& w) { return w.set_u32("gemma4.expert_count", 8); }),
                 "expert_used_count");
}

}  // namespace
}  // namespace loom::test
