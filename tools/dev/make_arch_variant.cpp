// Derives small synthetic models of architectures that ../shared/tools/make_gguf.py does not
// write, from ones it does, with loom's GGUF writer. Used once to make test data
// (tests/data/README.md says how); not part of the build's products.
//
//   make_arch_variant qwen3 IN_qwen2.gguf OUT.gguf   drop q/k/v biases, add per-head q/k RMSNorm weights
//   make_arch_variant gemma IN_gemma2.gguf OUT.gguf  drop post-norms, soft-caps and the sliding window
//   make_arch_variant gemma3 IN_gemma2.gguf OUT.gguf drop soft-caps, add per-head q/k RMSNorm weights,
//                                                    global rope base 1e6 (local layers use 1e4)
//   make_arch_variant nomic-bert IN_bert.gguf OUT.gguf  rotary positions instead of learned ones, fused
//                                                    attn_qkv without biases, SwiGLU FFN without biases
//   make_arch_variant phi3-longrope IN_phi3.gguf OUT.gguf  add LongRoPE factors rope_factors_long (in [1, 8])
//                                                    and rope_factors_short (in [1, 2]), original context 64
//                                                    (larger contexts use the long factors) and the
//                                                    converter's attn_factor sqrt(1 + ln(n_ctx_train/64)/ln 64)
//   make_arch_variant phi3-longrope-short IN_phi3.gguf OUT.gguf  the same factors and attn_factor, but
//                                                    original context = n_ctx_train (contexts up to
//                                                    that size use the short factors)
//   make_arch_variant bert-rank IN_bert.gguf OUT.gguf  a cross-encoder reranker: adds the classification head
//                                                    cls.weight [n_embd x n_embd], cls.bias, cls.output.weight
//                                                    [n_embd x 1], cls.output.bias (weights N(0, 0.15), biases
//                                                    N(0, 0.1)), bert.pooling_type 4 (rank) and
//                                                    bert.classifier.output_labels ["LABEL_0"] (as the converter
//                                                    writes for bge-reranker)
//   make_arch_variant mamba IN.gguf OUT.gguf [N_EMBD N_LAYER] [f16] [untied]  a Mamba-1 model with
//                                                    IN's tokenizer and new random weights (seed 1234):
//                                                    d_inner 2·N_EMBD, d_state 16, d_conv 4,
//                                                    dt_rank ceil(N_EMBD/16); N_EMBD and N_LAYER default
//                                                    to IN's; f16 stores the matrices (ssm_in, ssm_x,
//                                                    ssm_dt, ssm_out, token_embd, output) as F16; untied
//                                                    adds output.weight (else the output is tied); IN
//                                                    may be a vocabulary-only file
//   make_arch_variant mamba2 IN.gguf OUT.gguf [N_EMBD N_LAYER] [f16] [untied]  the same for Mamba-2:
//                                                    d_inner 2·N_EMBD in heads of 16 channels (ssm.time_step_rank
//                                                    = d_inner / 16), 2 groups, d_state 16, d_conv 4,
//                                                    A = -U(1, 16) per head, grouped norm weights
//   make_arch_variant granitehybrid IN.gguf OUT.gguf [N_EMBD N_LAYER] [attn=I,J,...] [f16] [untied]
//                                                    a Granite 4 hybrid (granitehybrid): Mamba-2 layers as
//                                                    mamba2's, attention on layers I, J, ... (default 1), a
//                                                    SwiGLU FFN in every layer, Granite's multipliers (see
//                                                    make_ssm_model), no RoPE (as Granite 4.0 H files)
//   make_arch_variant smollm3|granite|lfm2|qwen35|gemma4|mistral3|gemma3n IN.gguf OUT.gguf [untied]
//                                                    a synthetic model of this year's families with IN's
//                                                    tokenizer and random weights (seed 1234); shapes and
//                                                    features in make_arch_families.cpp
//   make_arch_variant moe ARCH IN.gguf OUT.gguf      IN (a dense synthetic model) with a mixture-of-experts
//                                                    FFN as architecture ARCH (qwen3moe, olmoe, llama,
//                                                    qwen35moe, qwen3next, lfm2moe, granitemoe, granitehybrid, gemma4): 8 experts,
//                                                    2 chosen, width 32 (make_arch_moe.cpp, seed 1234);
//                                                    ARCH gpt-oss / gpt-oss-mxfp4: a gpt-oss from scratch
//                                                    with IN's tokenizer (F32, or MXFP4 experts)
//   make_arch_variant bench-shape SHAPE IN.gguf OUT.gguf [vocab=N]  SHAPE: qwen35-0.8b, lfm2-1.2b, smollm3-3b,
//                                                    gemma4-e2b, ministral3-3b, qwen3moe-2b, gpt-oss-2b, qwen3moe-kq (make_arch_families.h)
//                                                    the same families at a real model's dimensions, F16
//                                                    matrices (for llama-quantize), tied output, IN's
//                                                    tokenizer padded with unused tokens to N (speed benchmarks)
//   make_arch_variant t5|t5encoder IN_spm.gguf OUT.gguf [E ENC_LAYERS DEC_LAYERS HEADS HEAD_DIM FF] [gated]
//                     [f16] [untied] [plain]
//                                                    a T5 (encoder-decoder) or T5 encoder with random weights
//                                                    (seed 1234) and a Unigram vocabulary made from IN's
//                                                    SentencePiece pieces (see make_t5_vocab: pseudo-random
//                                                    scores, ASCII letters, a few non-ASCII characters, user-defined
//                                                    and unused tokens, and a precompiled charsmap of full-width
//                                                    forms, ligatures, NBSP/ideographic space, tabs and newlines,
//                                                    a combining sequence and zero-width characters); 32 relative
//                                                    buckets, the bias tensors in layer 0 only (shared, as in real
//                                                    T5 files); gated = gated-GELU FFN with ffn_gate (flan-T5),
//                                                    else ReLU; untied adds output.weight; plain = no space prefix,
//                                                    no whitespace merging (else both on, as T5's spiece.model);
//                                                    defaults 64 3 2 4 16 128
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/half.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "make_arch_families.h"
#include "vocab/ugm_tokenizer.h"

using namespace loom;

namespace {

int fail(const std::string& m) {
  std::fprintf(stderr, "make_arch_variant: %s\n", m.c_str());
  return 1;
}

// Renames every "<from>.x" key to "<to>.x" and sets general.architecture.
Status rename_arch(gguf::GgufWriter& w, const std::string& from, const std::string& to) {
  std::vector<gguf::KeyValue> kvs = w.metadata();
  for (const auto& kv : kvs) {
    if (kv.key.rfind(from + ".", 0) == 0) {
      w.remove(kv.key);
      LOOM_RETURN_IF_ERROR(w.set(to + kv.key.substr(from.size()), kv.value));
    }
  }
  w.remove("general.architecture");
  return w.set_string("general.architecture", to);
}

// UTF-8 of a code point.
std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// The normalization table of the synthetic Unigram vocabulary: what SentencePiece's nmt_nfkc does
// to these characters (full-width forms, compatibility ligatures and digits, spaces and controls
// to ' ', zero-width characters removed, one composition), written as a precompiled charsmap.
std::string t5_charsmap() {
  std::vector<std::pair<std::string, std::string>> m;
  for (uint32_t c = 0; c < 26; ++c) {
    m.push_back({utf8(0xFF21 + c), std::string(1, char('A' + c))});
    m.push_back({utf8(0xFF41 + c), std::string(1, char('a' + c))});
  }
  for (uint32_t c = 0; c < 10; ++c) m.push_back({utf8(0xFF10 + c), std::string(1, char('0' + c))});
  for (uint32_t c = 0; c < 9; ++c) m.push_back({utf8(0x2460 + c), std::string(1, char('1' + c))});  // circled digits
  m.push_back({utf8(0x3000), " "});
  m.push_back({utf8(0x00A0), " "});
  m.push_back({"\t", " "});
  m.push_back({"\n", " "});
  m.push_back({"\r", " "});
  m.push_back({utf8(0x2026), "..."});
  m.push_back({utf8(0xFB01), "fi"});
  m.push_back({utf8(0xFB02), "fl"});
  m.push_back({utf8(0x01C5), "D" + utf8(0x017E)});
  m.push_back({"e" + utf8(0x0301), utf8(0x00E9)});  // e + combining acute -> é (a two-character key)
  m.push_back({"A" + utf8(0x030A), utf8(0x00C5)});  // A + combining ring -> Å (not in the vocabulary)
  m.push_back({utf8(0x200B), ""});
  m.push_back({utf8(0x00AD), ""});
  return vocab::detail::build_precompiled_charsmap(m);
}

// A Unigram vocabulary from a SentencePiece one: <pad> 0, </s> 1, <unk> 2 (T5's ids), IN's normal
// pieces, then ASCII letters, digits and punctuation (alone and after U+2581) and a few non-ASCII
// characters it lacks, two user-defined tokens <extra_id_0>, <extra_id_1> (and a full-width one when
// plain), and an unused token. Scores are -(1 + u) with u in [0, 10) from a hash of the id, so Viterbi has real
// choices to make (longest matches do not always win).
Status make_t5_vocab(const gguf::GgufFile& in, gguf::GgufWriter& w, bool plain) {
  auto toks = in.get_array("tokenizer.ggml.tokens");
  auto types = in.get_array("tokenizer.ggml.token_type");
  if (!toks || !types) return invalid_argument("IN has no SentencePiece vocabulary");
  std::vector<std::string> tokens = {"<pad>", "</s>", "<unk>"};
  std::vector<int32_t> tt = {3, 3, 2};
  std::unordered_set<std::string> seen(tokens.begin(), tokens.end());
  auto add = [&](const std::string& t, int32_t type) {
    if (seen.insert(t).second) tokens.push_back(t), tt.push_back(type);
  };
  for (uint64_t i = 0; i < (*toks)->count; ++i) {
    if ((*types)->int_at(i) == 1) add((*toks)->strings[i], 1);
  }
  const std::string sp = "\xE2\x96\x81";
  add(sp, 1);
  for (char c = 33; c < 127; ++c) {
    add(std::string(1, c), 1);
    if (std::isalnum(static_cast<unsigned char>(c))) add(sp + std::string(1, c), 1);
  }
  for (uint32_t cp : {0xE9u, 0xFCu, 0xDFu, 0x65E5u, 0x672Cu, 0x17Eu, 0x1F600u}) add(utf8(cp), 1);
  add(sp + utf8(0x65E5) + utf8(0x672C), 1);
  add("<extra_id_0>", 4);
  add("<extra_id_1>", 4);
  // plain only: a user-defined full-width "ＡＢ". llama.cpp keeps the longest path along the
  // user-defined tokens' trie unnormalized, so with it every character starting with EF BC skips
  // the charsmap (and splits into invalid pieces): a quirk worth a golden, but it would hide the
  // charsmap's full-width mappings in the other vocabulary.
  if (plain) add(utf8(0xFF21) + utf8(0xFF22), 4);
  add(sp + "xyzzy", 5);  // unused: still a Viterbi candidate in llama.cpp
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t h = uint32_t(i) * 2654435761u;
    h ^= h >> 15;
    scores[i] = tt[i] == 1 ? -(1.0f + float(h % 1000) / 100.0f) : tt[i] == 5 ? -1000.0f : 0.0f;
  }
  LOOM_RETURN_IF_ERROR(w.set_string("tokenizer.ggml.model", "t5"));
  LOOM_RETURN_IF_ERROR(w.set_string("tokenizer.ggml.pre", "default"));
  LOOM_RETURN_IF_ERROR(w.set_string_array("tokenizer.ggml.tokens", tokens));
  LOOM_RETURN_IF_ERROR(w.set_f32_array("tokenizer.ggml.scores", scores));
  LOOM_RETURN_IF_ERROR(w.set_i32_array("tokenizer.ggml.token_type", tt));
  LOOM_RETURN_IF_ERROR(w.set_bool("tokenizer.ggml.add_space_prefix", !plain));
  LOOM_RETURN_IF_ERROR(w.set_bool("tokenizer.ggml.remove_extra_whitespaces", !plain));
  const std::string cm = t5_charsmap();
  gguf::Array arr;
  arr.elem_type = gguf::ValueType::kUint8;
  arr.count = cm.size();
  arr.raw.assign(cm.begin(), cm.end());
  LOOM_RETURN_IF_ERROR(w.set("tokenizer.ggml.precompiled_charsmap", gguf::Value(std::move(arr))));
  LOOM_RETURN_IF_ERROR(w.set_u32("tokenizer.ggml.eos_token_id", 1));
  LOOM_RETURN_IF_ERROR(w.set_u32("tokenizer.ggml.unknown_token_id", 2));
  LOOM_RETURN_IF_ERROR(w.set_u32("tokenizer.ggml.padding_token_id", 0));
  return Status::ok();
}

struct T5Shape {
  int64_t E = 64, L_enc = 3, L_dec = 2, H = 4, D = 16, F = 128;
  bool gated = false, f16 = false, untied = false, plain = false, encoder_only = false;
};

// A T5 / T5 encoder from scratch (tensor names and keys of llama.cpp's converter).
Status make_t5(const gguf::GgufFile& in, gguf::GgufWriter& w, const T5Shape& s, std::mt19937& rng) {
  LOOM_RETURN_IF_ERROR(make_t5_vocab(in, w, s.plain));
  const int64_t V = int64_t(std::get<gguf::Array>(*w.find("tokenizer.ggml.tokens")).count);
  const std::string a = s.encoder_only ? "t5encoder" : "t5";
  const int64_t E = s.E, HD = s.H * s.D, F = s.F, B = 32;
  LOOM_RETURN_IF_ERROR(w.set_string("general.architecture", a));
  LOOM_RETURN_IF_ERROR(w.set_string("general.name", "synthetic " + a));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".context_length", 512));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".embedding_length", uint32_t(E)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".feed_forward_length", uint32_t(F)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".block_count", uint32_t(s.L_enc)));
  if (!s.encoder_only) LOOM_RETURN_IF_ERROR(w.set_u32(a + ".decoder_block_count", uint32_t(s.L_dec)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count", uint32_t(s.H)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.key_length", uint32_t(s.D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.value_length", uint32_t(s.D)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.layer_norm_epsilon", 1e-6f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.relative_buckets_count", uint32_t(B)));
  if (!s.encoder_only) LOOM_RETURN_IF_ERROR(w.set_u32(a + ".decoder_start_token_id", 0));
  std::normal_distribution<float> unit(0.0f, 1.0f);
  auto add = [&](const std::string& name, std::vector<int64_t> ne, bool matrix, float std, float mean) -> Status {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<uint8_t> bytes;
    if (matrix && s.f16) {
      bytes.resize(size_t(n) * 2);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(mean + std * unit(rng));
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      return w.add_tensor(name, TensorType::F16, ne, bytes);
    }
    bytes.resize(size_t(n) * 4);
    for (int64_t i = 0; i < n; ++i) {
      const float v = mean + std * unit(rng);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
    return w.add_tensor(name, TensorType::F32, ne, bytes);
  };
  const float in_std = 1.0f / std::sqrt(float(E));
  // Tied: small embeddings, so that the blocks' outputs and not the current token's own row
  // dominate the logits (else greedy repeats the last token forever).
  LOOM_RETURN_IF_ERROR(add("token_embd.weight", {E, V}, true, s.untied || s.encoder_only ? 0.5f : 0.1f, 0.0f));
  LOOM_RETURN_IF_ERROR(add("enc.output_norm.weight", {E}, false, 0.1f, 1.0f));
  if (!s.encoder_only) LOOM_RETURN_IF_ERROR(add("dec.output_norm.weight", {E}, false, 0.1f, 1.0f));
  if (s.untied) LOOM_RETURN_IF_ERROR(add("output.weight", {E, V}, true, in_std, 0.0f));
  auto ffn = [&](const std::string& p) -> Status {
    LOOM_RETURN_IF_ERROR(add(p + "ffn_norm.weight", {E}, false, 0.1f, 1.0f));
    if (s.gated) LOOM_RETURN_IF_ERROR(add(p + "ffn_gate.weight", {E, F}, true, in_std, 0.0f));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_up.weight", {E, F}, true, in_std, 0.0f));
    return add(p + "ffn_down.weight", {F, E}, true, 0.5f / std::sqrt(float(F)), 0.0f);
  };
  // No 1/sqrt(d) in T5's attention: q is scaled down instead (as T5's initialisation does).
  auto attn = [&](const std::string& p, const std::string& pre, int64_t il) -> Status {
    LOOM_RETURN_IF_ERROR(add(p + pre + "_q.weight", {E, HD}, true, 0.5f * in_std, 0.0f));
    LOOM_RETURN_IF_ERROR(add(p + pre + "_k.weight", {E, HD}, true, in_std, 0.0f));
    LOOM_RETURN_IF_ERROR(add(p + pre + "_v.weight", {E, HD}, true, in_std, 0.0f));
    LOOM_RETURN_IF_ERROR(add(p + pre + "_o.weight", {HD, E}, true, 0.5f / std::sqrt(float(HD)), 0.0f));
    if (il == 0 && pre == "attn") LOOM_RETURN_IF_ERROR(add(p + "attn_rel_b.weight", {s.H, B}, false, 1.0f, 0.0f));
    return Status::ok();
  };
  for (int64_t il = 0; il < s.L_enc; ++il) {
    const std::string p = "enc.blk." + std::to_string(il) + ".";
    LOOM_RETURN_IF_ERROR(add(p + "attn_norm.weight", {E}, false, 0.1f, 1.0f));
    LOOM_RETURN_IF_ERROR(attn(p, "attn", il));
    LOOM_RETURN_IF_ERROR(ffn(p));
  }
  for (int64_t il = 0; il < (s.encoder_only ? 0 : s.L_dec); ++il) {
    const std::string p = "dec.blk." + std::to_string(il) + ".";
    LOOM_RETURN_IF_ERROR(add(p + "attn_norm.weight", {E}, false, 0.1f, 1.0f));
    LOOM_RETURN_IF_ERROR(attn(p, "attn", il));
    LOOM_RETURN_IF_ERROR(add(p + "cross_attn_norm.weight", {E}, false, 0.1f, 1.0f));
    LOOM_RETURN_IF_ERROR(attn(p, "cross_attn", il));
    LOOM_RETURN_IF_ERROR(ffn(p));
  }
  return Status::ok();
}

// make_arch_variant t5|t5encoder IN OUT [E ENC_LAYERS DEC_LAYERS HEADS HEAD_DIM FF] [gated] [f16] [untied] [plain]
int run_t5(int argc, char** argv) {
  auto in = gguf::GgufFile::open(argv[2]);
  if (!in) return fail(in.status().message());
  T5Shape s;
  s.encoder_only = std::string(argv[1]) == "t5encoder";
  std::vector<int64_t> dims;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "gated") s.gated = true;
    else if (a == "f16") s.f16 = true;
    else if (a == "untied") s.untied = true;
    else if (a == "plain") s.plain = true;
    else dims.push_back(std::atoll(argv[i]));
  }
  if (!dims.empty() && dims.size() != 6) return fail("give all of E ENC_LAYERS DEC_LAYERS HEADS HEAD_DIM FF");
  if (dims.size() == 6) s.E = dims[0], s.L_enc = dims[1], s.L_dec = dims[2], s.H = dims[3], s.D = dims[4], s.F = dims[5];
  gguf::GgufWriter w;
  std::mt19937 rng(1234);
  Status st = make_t5(*in, w, s, rng);
  if (st.is_ok()) st = w.write_file(argv[3]);
  if (!st) return fail(st.message());
  return 0;
}

// IN's tokenizer padded with unused tokens to n (bench-shape's vocab=N).
Expected<gguf::GgufFile> pad_vocab(const gguf::GgufFile& in, size_t n) {
  auto w = gguf::GgufWriter::from_file(in);
  if (!w) return w.status();
  auto toks = in.get_array("tokenizer.ggml.tokens");
  if (!toks) return invalid_argument("IN has no tokenizer.ggml.tokens");
  std::vector<std::string> t = (*toks)->strings;
  std::vector<int32_t> types;
  if (auto ty = in.get_array("tokenizer.ggml.token_type")) {
    for (uint64_t i = 0; i < (*ty)->count; ++i) types.push_back(int32_t((*ty)->int_at(i)));
  }
  std::vector<float> scores;
  if (auto sc = in.get_array("tokenizer.ggml.scores")) {
    for (uint64_t i = 0; i < (*sc)->count; ++i) scores.push_back(float((*sc)->number_at(i)));
  }
  while (t.size() < n) {
    t.push_back("<|bench_pad_" + std::to_string(t.size()) + "|>");
    if (!types.empty()) types.push_back(5);  // unused
    if (!scores.empty()) scores.push_back(-1e9f);
  }
  for (const char* k : {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"}) w->remove(k);
  Status st = w->set_string_array("tokenizer.ggml.tokens", t);
  if (st.is_ok() && !types.empty()) st = w->set_i32_array("tokenizer.ggml.token_type", types);
  if (st.is_ok() && !scores.empty()) st = w->set_f32_array("tokenizer.ggml.scores", scores);
  if (!st) return st;
  return gguf::GgufFile::from_bytes(w->to_bytes());
}

// make_arch_variant bench-shape SHAPE IN.gguf OUT.gguf [vocab=N]: a real model's dimensions
// (make_arch_families.h) with F16 matrices, IN's tokenizer padded with unused tokens to N.
int run_bench_shape(int argc, char** argv) {
  std::string arch;
  FamilyShape shape;
  if (!family_shape(argv[2], arch, shape)) return fail(std::string("unknown shape '") + argv[2] + "'");
  auto in = gguf::GgufFile::open(argv[3]);
  if (!in) return fail(in.status().message());
  if (argc >= 6 && std::string(argv[5]).rfind("vocab=", 0) == 0) {
    auto padded = pad_vocab(*in, size_t(std::atoll(argv[5] + 6)));
    if (!padded) return fail(padded.status().message());
    in = std::move(padded);
  }
  auto w = gguf::GgufWriter::from_file(*in);
  if (!w) return fail(w.status().message());
  std::mt19937 rng(1234);
  Status st = make_family_model(*in, *w, arch, /*untied=*/false, rng, shape);
  if (st.is_ok()) st = w->write_file(argv[4]);
  if (!st) return fail(st.message());
  return 0;
}

// make_arch_variant moe ARCH IN OUT, and the families of make_arch_families.cpp: IN's writer
// given to `make`, the result written to OUT.
int run_from_file(const char* in_path, const char* out_path,
                  const std::function<Status(const gguf::GgufFile&, gguf::GgufWriter&, std::mt19937&)>& make) {
  auto in = gguf::GgufFile::open(in_path);
  if (!in) return fail(in.status().message());
  auto w = gguf::GgufWriter::from_file(*in);
  if (!w) return fail(w.status().message());
  std::mt19937 rng(1234);
  Status st = make(*in, *w, rng);
  if (st.is_ok()) st = w->write_file(out_path);
  if (!st) return fail(st.message());
  return 0;
}

// make_arch_variant mamba|mamba2|granitehybrid IN OUT [N_EMBD N_LAYER] [attn=I,J,...] [f16] [untied]
int run_ssm(int argc, char** argv) {
  auto in = gguf::GgufFile::open(argv[2]);
  if (!in) return fail(in.status().message());
  auto w = gguf::GgufWriter::from_file(*in);
  if (!w) return fail(w.status().message());
  const std::string from = *in->get_string("general.architecture");
  auto e0 = in->get_int_or(from + ".embedding_length", 0), l0 = in->get_int_or(from + ".block_count", 0);
  int64_t E = e0 ? *e0 : 0, L = l0 ? *l0 : 0;
  bool f16 = false, untied = false;
  std::vector<int64_t> dims, attn_layers;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "f16") f16 = true;
    else if (a == "untied") untied = true;
    else if (a == "f32") continue;
    else if (a.rfind("attn=", 0) == 0) {
      for (size_t at = 5; at < a.size();) {
        const size_t comma = a.find(',', at);
        attn_layers.push_back(std::atoll(a.substr(at, comma - at).c_str()));
        at = comma == std::string::npos ? a.size() : comma + 1;
      }
    } else dims.push_back(std::atoll(argv[i]));
  }
  if (dims.size() == 2) E = dims[0], L = dims[1];
  if (dims.size() == 1 || dims.size() > 2 || E <= 0 || L <= 0) return fail("bad N_EMBD / N_LAYER");
  const std::string kind = argv[1];
  if (kind == "granitehybrid" && attn_layers.empty()) attn_layers = {1};
  for (int64_t il : attn_layers) {
    if (il < 0 || il >= L) return fail("attention layer " + std::to_string(il) + " is out of range");
  }
  std::mt19937 rng(1234);
  Status st = make_ssm_model(*in, *w,
                             kind == "mamba"    ? SsmKind::kMamba
                             : kind == "mamba2" ? SsmKind::kMamba2
                                                : SsmKind::kGraniteHybrid,
                             E, L, f16, untied, attn_layers, rng);
  if (st.is_ok()) st = w->write_file(argv[3]);
  if (!st) return fail(st.message());
  return 0;
}

// One of the variants derived from a make_gguf.py model (qwen3, gemma, ...): IN, its writer, its
// layer count, and the seeded generator with N(0, 0.1) that they draw from in order.
struct Variant {
  const gguf::GgufFile& in;
  gguf::GgufWriter& w;
  int64_t n_layer;
  std::mt19937 rng{1234};
  std::normal_distribution<float> noise{0.0f, 0.1f};

  // A new F32 tensor from values.
  Status add_f32(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return w.add_tensor(name, TensorType::F32, ne, bytes);
  }

  // Per-head q/k RMSNorm weights 1 + N(0, 0.1) for every layer.
  Status add_qk_norms(int64_t head_dim) {
    for (int64_t il = 0; il < n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      for (const char* n : {"attn_q_norm.weight", "attn_k_norm.weight"}) {
        std::vector<float> v(static_cast<size_t>(head_dim));
        for (float& x : v) x = 1.0f + noise(rng);
        LOOM_RETURN_IF_ERROR(add_f32(p + n, {head_dim}, v));
      }
    }
    return Status::ok();
  }
};

Status make_qwen3(Variant& v) {
  Status st = rename_arch(v.w, "qwen2", "qwen3");
  const int64_t n_embd = *v.in.get_int("qwen2.embedding_length"), n_head = *v.in.get_int("qwen2.attention.head_count");
  for (int64_t il = 0; il < v.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) v.w.remove_tensor(p + b);
  }
  if (st.is_ok()) st = v.add_qk_norms(n_embd / n_head);
  return st;
}

Status make_nomic_bert(Variant& v) {
  Status st = rename_arch(v.w, "bert", "nomic-bert");
  if (st.is_ok()) st = v.w.set_f32("nomic-bert.rope.freq_base", 1000.0f);
  v.w.remove_tensor("position_embd.weight");
  const int64_t n_embd = *v.in.get_int("bert.embedding_length"), n_ff = *v.in.get_int("bert.feed_forward_length");
  std::normal_distribution<float> weight(0.0f, 0.05f);
  for (int64_t il = 0; il < v.n_layer && st.is_ok(); ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    // attn_qkv = rows of Q, then K, then V (each [n_embd rows][n_embd]).
    std::vector<uint8_t> qkv;
    for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) {
      const gguf::TensorInfo* t = v.in.find_tensor(p + n);
      if (!t || t->type != TensorType::F32) return invalid_argument("expected F32 " + p + n);
      qkv.insert(qkv.end(), t->data, t->data + t->nbytes);
      v.w.remove_tensor(p + n);
    }
    for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias", "ffn_up.bias", "ffn_down.bias"}) {
      v.w.remove_tensor(p + b);
    }
    st = v.w.add_tensor(p + "attn_qkv.weight", TensorType::F32, {n_embd, 3 * n_embd}, qkv);
    std::vector<float> gate(static_cast<size_t>(n_embd * n_ff));
    for (float& x : gate) x = weight(v.rng);
    if (st.is_ok()) st = v.add_f32(p + "ffn_gate.weight", {n_embd, n_ff}, gate);
  }
  return st;
}

Status make_gemma3(Variant& v) {
  Status st = rename_arch(v.w, "gemma2", "gemma3");
  v.w.remove("gemma3.attn_logit_softcapping");
  v.w.remove("gemma3.final_logit_softcapping");
  v.w.remove("gemma3.rope.freq_base");
  if (st.is_ok()) st = v.w.set_f32("gemma3.rope.freq_base", 1000000.0f);
  if (st.is_ok()) st = v.add_qk_norms(*v.in.get_int("gemma2.attention.key_length"));
  return st;
}

Status make_gemma(Variant& v) {
  Status st = rename_arch(v.w, "gemma2", "gemma");
  for (const char* k : {"gemma.attn_logit_softcapping", "gemma.final_logit_softcapping", "gemma.attention.sliding_window"}) {
    v.w.remove(k);
  }
  for (int64_t il = 0; il < v.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    v.w.remove_tensor(p + "post_attention_norm.weight");
    v.w.remove_tensor(p + "post_ffw_norm.weight");
  }
  return st;
}

// phi3-longrope (original context 64) and phi3-longrope-short (original context n_ctx_train).
Status make_phi3_longrope(Variant& v, bool short_factors) {
  if (*v.in.get_string("general.architecture") != "phi3") return invalid_argument("expected a phi3 model");
  const int64_t n_embd = *v.in.get_int("phi3.embedding_length"), n_head = *v.in.get_int("phi3.attention.head_count");
  const int64_t n_rot = *v.in.get_int_or("phi3.rope.dimension_count", n_embd / n_head);
  const int64_t n_ctx_train = *v.in.get_int("phi3.context_length");
  constexpr int64_t kOrigCtx = 64;
  const int64_t orig = short_factors ? n_ctx_train : kOrigCtx;
  // One factor per rotated pair, long 1 + 7·((5i) mod n)/(n-1), short 1 + ((3i) mod n)/(n-1):
  // for n = 8 every value is distinct and in no monotone order (a reversed or shifted index
  // would show).
  const int64_t n = n_rot / 2;
  if (n < 2) return invalid_argument("expected at least 4 rotated dimensions");
  std::vector<float> lng(static_cast<size_t>(n)), sht(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    lng[size_t(i)] = 1.0f + 7.0f * float((5 * i) % n) / float(n - 1);
    sht[size_t(i)] = 1.0f + float((3 * i) % n) / float(n - 1);
  }
  Status st = v.add_f32("rope_factors_long.weight", {n}, lng);
  if (st.is_ok()) st = v.add_f32("rope_factors_short.weight", {n}, sht);
  // Phi3MiniModel's magnitude scale for a model trained at n_ctx_train from an original 64.
  const double scale = double(n_ctx_train) / double(kOrigCtx);
  const float attn_factor = float(std::sqrt(1.0 + std::log(scale) / std::log(double(kOrigCtx))));
  v.w.remove("phi3.rope.scaling.original_context_length");
  v.w.remove("phi3.rope.scaling.attn_factor");
  if (st.is_ok()) st = v.w.set_u32("phi3.rope.scaling.original_context_length", uint32_t(orig));
  if (st.is_ok()) st = v.w.set_f32("phi3.rope.scaling.attn_factor", attn_factor);
  return st;
}

Status make_bert_rank(Variant& v) {
  if (*v.in.get_string("general.architecture") != "bert") return invalid_argument("expected a bert model");
  const int64_t n_embd = *v.in.get_int("bert.embedding_length");
  std::normal_distribution<float> weight(0.0f, 0.15f);
  auto add = [&](const std::string& name, std::vector<int64_t> ne, std::normal_distribution<float>& dist) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<float> x(static_cast<size_t>(n));
    for (float& e : x) e = dist(v.rng);
    return v.add_f32(name, ne, x);
  };
  Status st = add("cls.weight", {n_embd, n_embd}, weight);
  if (st.is_ok()) st = add("cls.bias", {n_embd}, v.noise);
  if (st.is_ok()) st = add("cls.output.weight", {n_embd, 1}, weight);
  if (st.is_ok()) st = add("cls.output.bias", {1}, v.noise);
  v.w.remove("bert.pooling_type");
  if (st.is_ok()) st = v.w.set_u32("bert.pooling_type", 4);
  if (st.is_ok()) st = v.w.set_string_array("bert.classifier.output_labels", {"LABEL_0"});
  return st;
}

// make_arch_variant qwen3|gemma|gemma3|nomic-bert|phi3-longrope|phi3-longrope-short|bert-rank IN OUT
int run_variant(const std::string& target, const char* in_path, const char* out_path) {
  static const std::map<std::string, std::function<Status(Variant&)>> kVariants = {
      {"qwen3", make_qwen3},
      {"nomic-bert", make_nomic_bert},
      {"gemma3", make_gemma3},
      {"gemma", make_gemma},
      {"phi3-longrope", [](Variant& v) { return make_phi3_longrope(v, false); }},
      {"phi3-longrope-short", [](Variant& v) { return make_phi3_longrope(v, true); }},
      {"bert-rank", make_bert_rank},
  };
  auto in = gguf::GgufFile::open(in_path);
  if (!in) return fail(in.status().message());
  auto w = gguf::GgufWriter::from_file(*in);
  if (!w) return fail(w.status().message());
  const int64_t n_layer = *in->get_int(*in->get_string("general.architecture") + ".block_count");
  const auto it = kVariants.find(target);
  if (it == kVariants.end()) return fail("unknown target '" + target + "'");
  Variant v{*in, *w, n_layer};
  Status st = it->second(v);
  if (!st) return fail(st.message());
  st = w->write_file(out_path);
  if (!st) return fail(st.message());
  return 0;
}

bool is_one_of(const std::string& a, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (a == n) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string kind = argc >= 2 ? argv[1] : "";
  if (argc >= 4 && is_one_of(kind, {"t5", "t5encoder"})) return run_t5(argc, argv);
  if (argc >= 5 && kind == "bench-shape") return run_bench_shape(argc, argv);
  if (argc == 5 && kind == "moe") {
    const std::string arch = argv[2];
    return run_from_file(argv[3], argv[4], [&](const gguf::GgufFile& in, gguf::GgufWriter& w, std::mt19937& rng) {
      return make_moe_model(in, w, arch, rng);
    });
  }
  if (argc >= 4 && is_one_of(kind, {"smollm3", "granite", "lfm2", "qwen35", "gemma4", "mistral3", "gemma3n"})) {
    const bool untied = argc >= 5 && std::string(argv[4]) == "untied";
    return run_from_file(argv[2], argv[3], [&](const gguf::GgufFile& in, gguf::GgufWriter& w, std::mt19937& rng) {
      return make_family_model(in, w, kind, untied, rng);
    });
  }
  if (argc >= 4 && is_one_of(kind, {"mamba", "mamba2", "granitehybrid"})) return run_ssm(argc, argv);
  if (argc != 4) {
    return fail(
        "usage: make_arch_variant qwen3|gemma|gemma3|nomic-bert|phi3-longrope|phi3-longrope-short|bert-rank IN.gguf "
        "OUT.gguf");
  }
  return run_variant(kind, argv[2], argv[3]);
}
