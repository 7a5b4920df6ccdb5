// The memory interface against llama.cpp, one script for every memory kind. tools/dev/llama-ref's
// `loom-ref-dump memory` ran the same script of sequence operations on llama.cpp's memory for
// four models and recorded each step (tests/data/MODEL.memory.json, commands in tests/data/README.md):
//
//   synth-llama-tiny-f32          one KV cache (llama_kv_cache)
//   synth-gemma3-tiny-f32         iSWA: full KV for the global layer, a window-sized cache of 256
//                                 cells for the five sliding layers (llama_kv_cache_iswa, swa_full off)
//   synth-mamba-tiny-f32          recurrent states (llama_memory_recurrent)
//   synth-granitehybrid-tiny-f32  KV for the attention layer + states for the Mamba-2 layers
//                                 (llama_memory_hybrid)
//
// This test replays each recording through loom's Context (same n_ctx, n_batch, n_ubatch,
// n_seq_max, F32 K/V) and compares every return value, every sequence's seq_pos_min/max after
// every step, and the logits of every successful decode (1e-3 of max|logit|, the F32 goldens'
// tolerance). Where loom deliberately differs from llama.cpp the replay says so where it happens
// (docs/context.md, "Memory interface against llama.cpp", lists them).
#include <cstdio>

#include "context_test_util.h"

namespace loom::test {
namespace {

struct Recording {
  std::string name;
  nlohmann::json j;
  std::vector<float> rows;  // [n_logit_rows][logit_cols]
};

std::string model_path(const std::string& name) {
  // The plain KV model is one of the shared test models; the others are loom's own test data.
  return name == "synth-llama-tiny-f32" ? shared_path("models/" + name + ".gguf") : data_dir() + "/" + name + ".gguf";
}

Recording load_recording(const std::string& name) {
  Recording r;
  r.name = name;
  r.j = load_json(data_dir() + "/" + name + ".memory.json");
  r.rows = read_f32_file(data_dir() + "/" + r.j["logits_file"].get<std::string>());
  return r;
}

std::unique_ptr<Context> replay_context(std::shared_ptr<const Model> m, const nlohmann::json& j) {
  ContextParams cp;
  cp.n_ctx = j["n_ctx"];
  cp.n_batch = j["n_batch"];
  cp.n_ubatch = j["n_ubatch"];
  cp.n_seq_max = j["n_seq_max"];
  cp.kv_unified = true;  // as recorded: one set of cells for every sequence (loom's only layout)
  cp.type_k = cp.type_v = TensorType::F32;
  cp.n_threads = 2;
  return new_context(std::move(m), cp);
}

struct Tok {
  int32_t id = 0, pos = 0;
  std::vector<int32_t> seqs;
  bool out = false;
};

std::vector<Tok> batch_of(const nlohmann::json& step) {
  std::vector<Tok> t;
  for (const auto& e : step["batch"])
    t.push_back({e[0].get<int32_t>(), e[1].get<int32_t>(), e[2].get<std::vector<int32_t>>(), e[3].get<bool>()});
  return t;
}

Batch to_batch(const std::vector<Tok>& toks) {
  Batch b;
  for (const Tok& t : toks) b.add(t.id, t.pos, std::span<const int32_t>(t.seqs), t.out);
  return b;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

class MemoryInterface : public ::testing::TestWithParam<const char*> {};

TEST_P(MemoryInterface, EveryStepReturnsAndHoldsWhatLlamaCppDid) {
  const Recording rec = load_recording(GetParam());
  auto m = Model::load(model_path(rec.name));
  ASSERT_TRUE(m.has_value()) << m.status().message();
  auto ctx = replay_context(*m, rec.j);
  ASSERT_TRUE(ctx);
  const Memory& mem = ctx->memory();
  const bool recurrent = mem.rs() != nullptr;
  const int n_seqs = rec.j["n_seq_max"];
  const size_t cols = rec.j["logit_cols"];
  ASSERT_EQ(rec.rows.size(), rec.j["n_logit_rows"].get<size_t>() * cols);
  if (rec.name == "synth-gemma3-tiny-f32") {
    // llama.cpp's window cache: min(n_ctx, window * n_seq_max + n_ubatch) padded to 256 cells.
    ASSERT_NE(mem.kv_swa(), nullptr);
    EXPECT_EQ(mem.kv_swa()->size(), 256);
    EXPECT_EQ(mem.kv()->size(), 512);
  }

  int n_steps = 0, n_rows = 0, n_differences = 0;
  float worst = 0;
  for (const auto& s : rec.j["steps"]) {
    const std::string op = s["op"];
    SCOPED_TRACE(rec.name + " step " + std::to_string(n_steps) + ": " + s.dump().substr(0, 300));
    ++n_steps;
    std::vector<int32_t> unchecked;  // sequences whose positions this step leaves unchecked
    if (op == "decode") {
      const std::string what = s["what"];
      const std::vector<Tok> toks = batch_of(s);
      const int ret = s["ret"];
      bool coupled = false;
      for (const Tok& t : toks) coupled = coupled || t.seqs.size() > 1;
      Status st = ctx->decode(to_batch(toks));
      if (ret == 0 && !st.is_ok() && recurrent && coupled) {
        // DIFFERENT: a token of several sequences on a memory with recurrent states. llama.cpp's
        // hybrid memory (with a unified KV cache) decodes it and the sequences share one state;
        // loom keeps one state per sequence and refuses such a token (kInvalidArgument: decode
        // the shared prefix in one sequence, then seq_cp it — which is what happens here, with
        // the same cells, state and logits). (llama.cpp's plain recurrent memory refuses it too.)
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
        const int32_t first = toks[0].seqs[0];
        std::vector<Tok> alone = toks;
        for (Tok& t : alone) {
          for (int32_t q : t.seqs) {
            if (q != first) {
              EXPECT_EQ(*ctx->seq_pos_max(q), -1) << "the emulation needs empty sequences";
            }
          }
          t.seqs = {first};
        }
        st = ctx->decode(to_batch(alone));
        ASSERT_TRUE(st.is_ok()) << st.message();
        for (int32_t q : toks[0].seqs) {
          if (q != first) {
            ASSERT_TRUE(ctx->seq_cp(first, q, -1, -1).is_ok());
          }
        }
        ++n_differences;
      } else if (ret == 0 && !st.is_ok() && recurrent && starts_with(what, "one token into 3 after a partial copy")) {
        // DIFFERENT: after a partial seq_cp a hybrid's copy holds KV up to the range's end but a
        // recurrent state that has seen later positions (a partial copy of a state copies all
        // of it, in both). llama.cpp checks the batch against the memory's highest position (the
        // lower one, the KV part's) and runs the state over positions it has already seen; loom
        // checks it against the state ("a recurrent state can neither skip nor revisit
        // positions") and refuses. The script removes that sequence next, which brings the two
        // back together; until then its positions are loom's unchanged ones.
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
        unchecked.push_back(3);
        ++n_differences;
      } else if (ret != 0 && st.is_ok()) {
        // DIFFERENT: a KV memory (no recurrent part) accepts positions that do not continue a
        // sequence (a gap) and a token coupling sequences whose positions differ: attention reads
        // each cell's position, so both are well defined. llama.cpp refuses them (it requires
        // Y = X + 1 and coupled sequences that have not diverged). loom refuses both wherever a
        // recurrent part makes them meaningless. The replay takes the tokens out again.
        ASSERT_FALSE(recurrent) << st.message();
        ASSERT_TRUE(starts_with(what, "invalid: a position gap") || starts_with(what, "invalid: 0 and 1 coupled")) << what;
        for (const Tok& t : toks) {
          for (int32_t q : t.seqs) ASSERT_TRUE(ctx->seq_rm(q, t.pos, -1).is_ok());
        }
        ++n_differences;
      } else {
        ASSERT_EQ(st.is_ok(), ret == 0) << "llama.cpp returned " << ret << ", loom: " << st.message();
        if (!st.is_ok()) {
          // llama.cpp: -1 invalid batch, 1 no slot for a token of several sequences in its
          // recurrent memory (sequential split). loom: kInvalidArgument with the reason for both
          // (retrying cannot help), docs/context.md.
          EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
        }
      }
      // llama.cpp's division of positions records the K shift with the wrong sign
      // (llama_kv_cells::pos_div: shift += p_old - p_new), so its K rows of a divided sequence are
      // rotated away from their positions and its logits after a seq_div are wrong. loom's shifted
      // cache equals a fresh decode at the new positions (test_context_invariants'
      // SeqDivHalvesPositions): the script divides a sequence of its own, and its next logits are
      // not compared where there is K to rotate.
      const bool after_division = starts_with(what, "one token into 3 after a division") && mem.kv() != nullptr;
      if (st.is_ok() && ret == 0 && !after_division) {
        // Every output row, in batch order, against llama.cpp's (its first logit_cols logits).
        int k = 0;
        for (size_t i = 0; i < toks.size(); ++i) {
          if (!toks[i].out) continue;
          const auto l = ctx->logits(int(i));
          ASSERT_TRUE(l.has_value()) << l.status().message();
          const std::vector<float> got(l->begin(), l->begin() + long(cols));
          const size_t row = size_t(s["out"].get<int>() + k++);
          const std::vector<float> want(rec.rows.begin() + long(row * cols), rec.rows.begin() + long((row + 1) * cols));
          const float rel = max_abs_diff(got, want) / max_abs(want);
          worst = std::max(worst, rel);
          EXPECT_LE(rel, 1e-3f) << "output of batch row " << i;
          ++n_rows;
        }
      }
    } else if (op == "seq_rm") {
      const Status st = ctx->seq_rm(s["seq"], s["p0"], s["p1"]);
      EXPECT_EQ(st.is_ok(), s["ret"].get<bool>()) << st.message();
      // llama.cpp's false (a recurrent state cannot lose only its end; a negative sequence id on a
      // recurrent memory) is kUnsupported with the reason.
      if (!st.is_ok()) {
        EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
      }
    } else if (op == "seq_cp") {
      ASSERT_TRUE(ctx->seq_cp(s["src"], s["dst"], s["p0"], s["p1"]).is_ok());
    } else if (op == "seq_add") {
      ASSERT_TRUE(ctx->seq_add(s["seq"], s["p0"], s["p1"], s["delta"]).is_ok());
    } else if (op == "seq_div") {
      ASSERT_TRUE(ctx->seq_div(s["seq"], s["p0"], s["p1"], s["d"]).is_ok());
    } else if (op == "seq_keep") {
      ASSERT_TRUE(ctx->seq_keep(s["seq"]).is_ok());
    } else if (op == "clear") {
      ctx->kv_clear();
    } else {
      FAIL() << "unknown op " << op;
    }
    for (int q = 0; q < n_seqs; ++q) {
      if (std::find(unchecked.begin(), unchecked.end(), q) != unchecked.end()) continue;
      EXPECT_EQ(*ctx->seq_pos_min(q), s["pos"][q][0].get<int>()) << "seq_pos_min(" << q << ")";
      EXPECT_EQ(*ctx->seq_pos_max(q), s["pos"][q][1].get<int>()) << "seq_pos_max(" << q << ")";
    }
  }
  std::printf("%s: %d steps, %d output rows within %.3g of max|logit|, %d documented differences\n", rec.name.c_str(),
              n_steps, n_rows, double(worst), n_differences);
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, MemoryInterface,
                         ::testing::Values("synth-llama-tiny-f32", "synth-gemma3-tiny-f32", "synth-mamba-tiny-f32",
                                           "synth-granitehybrid-tiny-f32"),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace loom::test
