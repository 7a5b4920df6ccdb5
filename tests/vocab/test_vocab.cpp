// Unit tests of Vocab: the SentencePiece algorithm on a hand-made vocabulary, special-token
// handling, metadata validation (from plain data and from corrupt GGUF images), id checking,
// and robustness on empty, random and very long inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf_image.h"
#include "test_util.h"
#include "vocab/spm_tokenizer.h"
#include "vocab/utf8.h"
#include "vocab/vocab.h"

namespace loom::vocab {
namespace {

using Ids = std::vector<int32_t>;

// <unk> <s> </s>, the 256 byte tokens, then `extra` (text, score, type).
struct ToyToken {
  std::string text;
  float score;
  vocab::TokenType type = vocab::TokenType::kNormal;
};

VocabData toy_data(const std::vector<ToyToken>& extra) {
  VocabData d;
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.scores = {0, 0, 0};
  d.token_types = {int32_t(vocab::TokenType::kUnknown), int32_t(vocab::TokenType::kControl),
                   int32_t(vocab::TokenType::kControl)};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    d.tokens.push_back(name);
    d.scores.push_back(0);
    d.token_types.push_back(int32_t(vocab::TokenType::kByte));
  }
  for (const ToyToken& t : extra) {
    d.tokens.push_back(t.text);
    d.scores.push_back(t.score);
    d.token_types.push_back(int32_t(t.type));
  }
  return d;
}

constexpr int32_t kFirstExtra = 259;
int32_t byte_id(uint8_t b) { return 3 + b; }

Vocab toy_vocab(const std::vector<ToyToken>& extra) {
  auto v = Vocab::from_data(toy_data(extra));
  EXPECT_TRUE(v.has_value()) << v.status().message();
  return std::move(v).value();
}

std::string detok(const Vocab& v, const Ids& ids, bool remove_special = false, bool unparse = false) {
  auto s = v.detokenize(ids, remove_special, unparse);
  EXPECT_TRUE(s.has_value()) << s.status().message();
  return s.has_value() ? *s : std::string("<error>");
}

// ---- the SentencePiece algorithm ----

TEST(SpmTokenizer, HigherScoreMergesFirst) {
  // "▁ab": the pairs "▁a" and "ab" compete; the higher-scoring one wins.
  Vocab lo = toy_vocab({{"\xE2\x96\x81", -1},
                        {"a", -1},
                        {"b", -1},
                        {"\xE2\x96\x81"
                         "a",
                         -3},
                        {"ab", -2}});
  EXPECT_EQ(lo.tokenize("ab", false, false), (Ids{kFirstExtra, kFirstExtra + 4}));  // ▁ ab
  Vocab hi = toy_vocab({{"\xE2\x96\x81", -1},
                        {"a", -1},
                        {"b", -1},
                        {"\xE2\x96\x81"
                         "a",
                         -1},
                        {"ab", -2}});
  EXPECT_EQ(hi.tokenize("ab", false, false), (Ids{kFirstExtra + 3, kFirstExtra + 2}));  // ▁a b
}

TEST(SpmTokenizer, EqualScoresMergeLeftmostFirst) {
  Vocab v = toy_vocab({{"\xE2\x96\x81", -1}, {"a", -1}, {"aa", -1}});
  // ▁ a a a: both "aa" pairs score the same; the left one merges, leaving the last "a".
  EXPECT_EQ(v.tokenize("aaa", false, false), (Ids{kFirstExtra, kFirstExtra + 2, kFirstExtra + 1}));
}

TEST(SpmTokenizer, MergesChainThroughIntermediateTokens) {
  Vocab v = toy_vocab({{"\xE2\x96\x81", -5},
                       {"a", -5},
                       {"b", -5},
                       {"c", -5},
                       {"ab", -1},
                       {"abc", -2},
                       {"\xE2\x96\x81"
                        "abc",
                        -3}});
  EXPECT_EQ(v.tokenize("abc", false, false), (Ids{kFirstExtra + 6}));
}

TEST(SpmTokenizer, UnknownCharactersFallBackToBytes) {
  Vocab v = toy_vocab({{"\xE2\x96\x81", -1}, {"a", -1}});
  EXPECT_EQ(v.tokenize("a\xC3\xA9", false, false), (Ids{kFirstExtra, kFirstExtra + 1, byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(detok(v, v.tokenize("a\xC3\xA9", false, false)), "a\xC3\xA9");
}

TEST(SpmTokenizer, SpacesAreEscapedAndPrefixed) {
  Vocab v = toy_vocab({{"\xE2\x96\x81", -1},
                       {"a", -1},
                       {"\xE2\x96\x81"
                        "a",
                        -0.5}});
  EXPECT_EQ(v.tokenize("a a", false, false), (Ids{kFirstExtra + 2, kFirstExtra + 2}));
  EXPECT_EQ(v.tokenize(" a", false, false), (Ids{kFirstExtra, kFirstExtra + 2}));
  EXPECT_EQ(detok(v, {kFirstExtra, kFirstExtra + 2}), " a");  // only the prefix space is removed
  EXPECT_EQ(detok(v, {kFirstExtra + 2, kFirstExtra + 2}), "a a");

  VocabData d = toy_data({{"\xE2\x96\x81", -1},
                          {"a", -1},
                          {"\xE2\x96\x81"
                           "a",
                           -0.5}});
  d.add_space_prefix = false;
  auto no_prefix = Vocab::from_data(d);
  ASSERT_TRUE(no_prefix.has_value());
  EXPECT_EQ(no_prefix->tokenize("a a", false, false), (Ids{kFirstExtra + 1, kFirstExtra + 2}));
  EXPECT_EQ(detok(*no_prefix, {kFirstExtra + 2}), " a");
}

TEST(SpmTokenizer, BosAndEosFollowTheFlags) {
  VocabData d = toy_data({{"\xE2\x96\x81", -1}, {"a", -1}});
  d.add_eos = true;
  auto v = Vocab::from_data(d);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->tokenize("a", true, false), (Ids{1, kFirstExtra, kFirstExtra + 1, 2}));
  EXPECT_EQ(v->tokenize("", true, false), (Ids{1, 2}));
  EXPECT_EQ(v->tokenize("", false, false), Ids{});
  EXPECT_EQ(detok(*v, {1, kFirstExtra, kFirstExtra + 1, 2}, /*remove_special=*/true), " a");
  EXPECT_EQ(detok(*v, {1, kFirstExtra, kFirstExtra + 1, 2}, false, /*unparse=*/true), "<s> a</s>");
  EXPECT_EQ(detok(*v, {1, kFirstExtra, kFirstExtra + 1, 2}, false, false), " a");
}

// ---- special tokens ----

TEST(SpecialTokens, ControlTokensNeedParseSpecialUserDefinedDoNot) {
  Vocab v = toy_vocab({{"\xE2\x96\x81", -1},
                       {"x", -1},
                       {"y", -1},
                       {"<ctl>", 0, vocab::TokenType::kControl},
                       {"<usr>", 0, vocab::TokenType::kUserDefined}});
  const int32_t sp = kFirstExtra, x = sp + 1, y = sp + 2, ctl = sp + 3, usr = sp + 4;
  // Split out: a space prefix goes in front of the text after a special token.
  EXPECT_EQ(v.tokenize("x<ctl>y", false, true), (Ids{sp, x, ctl, sp, y}));
  EXPECT_EQ(v.tokenize("x<usr>y", false, false), (Ids{sp, x, usr, sp, y}));
  // Not split out: the control token's text is tokenized as characters.
  const Ids plain = v.tokenize("<ctl>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), ctl), 0);
  EXPECT_EQ(v.tokenize("<s>", true, true), (Ids{1, 1}));
  // Rendering: control text only with unparse_special, user-defined always.
  EXPECT_EQ(v.token_to_piece(ctl, false), "");
  EXPECT_EQ(v.token_to_piece(ctl, true), "<ctl>");
  EXPECT_EQ(v.token_to_piece(usr, false), "<usr>");
  EXPECT_EQ(v.token_to_piece(byte_id('A'), false), "A");
  EXPECT_EQ(v.token_to_piece(sp, false), " ");
}

TEST(SpecialTokens, LongerSpecialTokenWins) {
  Vocab v = toy_vocab(
      {{"\xE2\x96\x81", -1}, {"<a>", 0, vocab::TokenType::kUserDefined}, {"<a><b>", 0, vocab::TokenType::kUserDefined}});
  EXPECT_EQ(v.tokenize("<a><b><a>", false, false), (Ids{kFirstExtra + 2, kFirstExtra + 1}));
}

TEST(SpecialTokens, Phi3NameMakesSpecialsEatFollowingWhitespace) {
  VocabData d = toy_data({{"\xE2\x96\x81", -1}, {"x", -1}, {"<|user|>", 0, vocab::TokenType::kControl}});
  d.name = "Phi3 mini";
  auto v = Vocab::from_data(d);
  ASSERT_TRUE(v.has_value());
  const int32_t sp = kFirstExtra, x = sp + 1, user = sp + 2;
  EXPECT_TRUE(v->token_attr(user) & vocab::kAttrRStrip);
  EXPECT_FALSE(v->token_attr(1) & vocab::kAttrRStrip);  // <s> is exempt
  EXPECT_EQ(v->tokenize("<|user|>\n x", false, true), (Ids{user, sp, x}));
}

TEST(SpecialTokens, EndOfGenerationFromIdsAndTexts) {
  Vocab v = toy_vocab({{"<|im_end|>", 0, vocab::TokenType::kNormal}, {"<|end|>", 0, vocab::TokenType::kUserDefined}});
  const int32_t im_end = kFirstExtra, end = kFirstExtra + 1;
  EXPECT_TRUE(v.is_eog(2));  // eos
  EXPECT_TRUE(v.is_eog(im_end));
  EXPECT_TRUE(v.is_eog(end));
  EXPECT_FALSE(v.is_eog(1));
  EXPECT_FALSE(v.is_eog(-1));
  EXPECT_FALSE(v.is_eog(1 << 30));
  // A text-detected end-of-turn token becomes a control token.
  EXPECT_TRUE(v.is_control(im_end));
  EXPECT_EQ(v.eot(), im_end);  // first text of the EOT list that is present
}

// ---- validation ----

TEST(VocabValidation, FromDataRejectsInconsistentData) {
  auto expect_code = [](VocabData d, StatusCode code, const char* what) {
    auto v = Vocab::from_data(std::move(d));
    ASSERT_FALSE(v.has_value()) << what;
    EXPECT_EQ(v.status().code(), code) << what << ": " << v.status().message();
    EXPECT_FALSE(v.status().message().empty());
  };
  VocabData base = toy_data({{"a", -1}});
  ASSERT_TRUE(Vocab::from_data(base).has_value());

  VocabData d = base;
  d.tokens.clear();
  d.scores.clear();
  d.token_types.clear();
  expect_code(d, StatusCode::kCorrupt, "empty vocabulary");
  d = base;
  d.scores.pop_back();
  expect_code(d, StatusCode::kCorrupt, "short scores");
  d = base;
  d.token_types.push_back(1);
  expect_code(d, StatusCode::kCorrupt, "long token types");
  d = base;
  d.scores[5] = std::nanf("");
  expect_code(d, StatusCode::kCorrupt, "NaN score");
  d = base;
  d.tokens[7] = d.tokens[8];
  expect_code(d, StatusCode::kCorrupt, "duplicate token");
  d = base;
  d.bos = int64_t(d.tokens.size());
  expect_code(d, StatusCode::kCorrupt, "bos past the end");
  d = base;
  d.eos = -1;
  expect_code(d, StatusCode::kCorrupt, "negative eos");
  d = base;
  d.pad = int64_t(1) << 40;
  expect_code(d, StatusCode::kCorrupt, "huge pad");
  d = base;
  d.model = "gpt2";
  d.merges = {"a b"};
  d.pre = "no-such-pre-tokenizer";
  expect_code(d, StatusCode::kUnsupported, "unknown BPE pre-tokenizer");
  d = base;
  d.model = "rwkv";
  expect_code(d, StatusCode::kUnsupported, "RWKV");
  d = base;
  d.model = "martian";
  expect_code(d, StatusCode::kUnsupported, "unknown model");
}

TEST(VocabValidation, OddButLoadableData) {
  // Empty texts are renamed (an empty special token would match everywhere); unknown type
  // values load as undefined; a one-token vocabulary has no default BOS/EOS.
  VocabData d;
  d.tokens = {"", "a"};
  d.token_types = {int32_t(vocab::TokenType::kUserDefined), 99};
  auto v = Vocab::from_data(d);
  ASSERT_TRUE(v.has_value()) << v.status().message();
  EXPECT_EQ(v->token_text(0), "[EMPTY_0]");
  EXPECT_EQ(v->token_attr(1), vocab::kAttrUndefined);
  // BOS defaults to id 1 ("a"); characters without a token and without byte tokens fall back
  // to <unk> (id 0, the renamed empty token): "▁" is three bytes, "b" and "c" one each.
  EXPECT_EQ(v->tokenize("abc", true, true), (Ids{1, 0, 0, 0, 1, 0, 0}));
  VocabData one;
  one.tokens = {"a"};
  auto w = Vocab::from_data(one);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->bos(), Vocab::kNoToken);
  EXPECT_EQ(w->eos(), Vocab::kNoToken);
  EXPECT_EQ(w->tokenize("", true, false), Ids{});
  EXPECT_EQ(w->unk(), 0);
  EXPECT_EQ(w->tokenize("aa", true, false), (Ids{0, 0, 0, 0, 0}));
}

vocab_test::GgufImage valid_image() {
  vocab_test::GgufImage img;
  img.str("general.architecture", "llama")
      .str("tokenizer.ggml.model", "llama")
      .strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a",
                                         "\xE2\x96\x81"
                                         "a"})
      .f32s("tokenizer.ggml.scores", {0, 0, 0, -1, -1, -0.5f})
      .i32s("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1})
      .u32("tokenizer.ggml.bos_token_id", 1)
      .u32("tokenizer.ggml.eos_token_id", 2)
      .u32("tokenizer.ggml.unknown_token_id", 0);
  return img;
}

Status load_status(const vocab_test::GgufImage& img) {
  auto f = img.file();
  if (!f.has_value()) return f.status();
  auto v = Vocab::from_gguf(*f);
  return v.has_value() ? Status::ok() : v.status();
}

TEST(VocabValidation, FromGgufValidImage) {
  auto f = valid_image().boolean("tokenizer.ggml.add_eos_token", true).file();
  ASSERT_TRUE(f.has_value()) << f.status().message();
  auto v = Vocab::from_gguf(*f);
  ASSERT_TRUE(v.has_value()) << v.status().message();
  EXPECT_EQ(v->n_tokens(), 6);
  EXPECT_TRUE(v->add_bos());
  EXPECT_TRUE(v->add_eos());
  EXPECT_TRUE(v->add_space_prefix());
  EXPECT_EQ(v->tokenize("a a", true, false), (Ids{1, 5, 5, 2}));
  EXPECT_FLOAT_EQ(v->token_score(5), -0.5f);
}

TEST(VocabValidation, FromGgufRejectsCorruptMetadata) {
  using vocab_test::GgufImage;
  const std::vector<std::string> toks = {"<unk>", "<s>", "</s>", "a"};
  struct Case {
    const char* what;
    GgufImage img;
    StatusCode code;
  };
  std::vector<Case> cases;
  cases.push_back({"no tokenizer", GgufImage().str("general.architecture", "llama"), StatusCode::kNotFound});
  cases.push_back({"model not a string", GgufImage().u32("tokenizer.ggml.model", 1), StatusCode::kCorrupt});
  cases.push_back({"gpt2 without merges",
                   GgufImage().str("tokenizer.ggml.model", "gpt2").strings("tokenizer.ggml.tokens", toks),
                   StatusCode::kCorrupt});
  cases.push_back({"gpt2 merges not strings",
                   GgufImage()
                       .str("tokenizer.ggml.model", "gpt2")
                       .strings("tokenizer.ggml.tokens", toks)
                       .i32s("tokenizer.ggml.merges", {1}),
                   StatusCode::kCorrupt});
  cases.push_back({"gpt2 unknown pre",
                   GgufImage()
                       .str("tokenizer.ggml.model", "gpt2")
                       .str("tokenizer.ggml.pre", "martian")
                       .strings("tokenizer.ggml.tokens", toks)
                       .strings("tokenizer.ggml.merges", {"a a"}),
                   StatusCode::kUnsupported});
  cases.push_back({"bert lowercase not a bool",
                   GgufImage()
                       .str("tokenizer.ggml.model", "bert")
                       .strings("tokenizer.ggml.tokens", toks)
                       .str("tokenizer.ggml.normalizer.lowercase", "yes"),
                   StatusCode::kCorrupt});
  cases.push_back({"rwkv", GgufImage().str("tokenizer.ggml.model", "rwkv").strings("tokenizer.ggml.tokens", toks),
                   StatusCode::kUnsupported});
  cases.push_back({"t5 charsmap not bytes",
                   GgufImage()
                       .str("tokenizer.ggml.model", "t5")
                       .strings("tokenizer.ggml.tokens", toks)
                       .i32s("tokenizer.ggml.precompiled_charsmap", {1, 2}),
                   StatusCode::kCorrupt});
  cases.push_back({"no tokens", GgufImage().str("tokenizer.ggml.model", "llama"), StatusCode::kNotFound});
  cases.push_back({"tokens not strings",
                   GgufImage().str("tokenizer.ggml.model", "llama").i32s("tokenizer.ggml.tokens", {1, 2}),
                   StatusCode::kCorrupt});
  cases.push_back({"tokens not an array", GgufImage().str("tokenizer.ggml.model", "llama").str("tokenizer.ggml.tokens", "a"),
                   StatusCode::kCorrupt});
  cases.push_back({"empty tokens", GgufImage().str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", {}),
                   StatusCode::kCorrupt});
  cases.push_back({"scores too short",
                   GgufImage()
                       .str("tokenizer.ggml.model", "llama")
                       .strings("tokenizer.ggml.tokens", toks)
                       .f32s("tokenizer.ggml.scores", {0, 0, 0}),
                   StatusCode::kCorrupt});
  cases.push_back({"scores are strings",
                   GgufImage()
                       .str("tokenizer.ggml.model", "llama")
                       .strings("tokenizer.ggml.tokens", toks)
                       .strings("tokenizer.ggml.scores", toks),
                   StatusCode::kCorrupt});
  cases.push_back({"token types too long",
                   GgufImage()
                       .str("tokenizer.ggml.model", "llama")
                       .strings("tokenizer.ggml.tokens", toks)
                       .i32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1}),
                   StatusCode::kCorrupt});
  cases.push_back({"token types are floats",
                   GgufImage()
                       .str("tokenizer.ggml.model", "llama")
                       .strings("tokenizer.ggml.tokens", toks)
                       .f32s("tokenizer.ggml.token_type", {1, 1, 1, 1}),
                   StatusCode::kCorrupt});
  cases.push_back({"NaN score",
                   GgufImage()
                       .str("tokenizer.ggml.model", "llama")
                       .strings("tokenizer.ggml.tokens", toks)
                       .f32s("tokenizer.ggml.scores", {0, 0, std::nanf(""), 0}),
                   StatusCode::kCorrupt});
  cases.push_back({"duplicate tokens",
                   GgufImage().str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", {"<unk>", "a", "a"}),
                   StatusCode::kCorrupt});
  cases.push_back({"pad out of range", valid_image().u32("tokenizer.ggml.padding_token_id", 6), StatusCode::kCorrupt});
  cases.push_back({"negative eot", valid_image().i32("tokenizer.ggml.eot_token_id", -1), StatusCode::kCorrupt});
  cases.push_back({"mask id is a string", valid_image().str("tokenizer.ggml.mask_token_id", "3"), StatusCode::kCorrupt});
  cases.push_back({"add_bos not a bool", valid_image().u32("tokenizer.ggml.add_bos_token", 1), StatusCode::kCorrupt});
  cases.push_back(
      {"add_space_prefix not a bool", valid_image().str("tokenizer.ggml.add_space_prefix", "no"), StatusCode::kCorrupt});
  for (const Case& c : cases) {
    const Status st = load_status(c.img);
    EXPECT_EQ(st.code(), c.code) << c.what << ": " << st.message();
    EXPECT_FALSE(st.message().empty()) << c.what;
  }
}

TEST(VocabValidation, RealVocabsOfEveryFamilyLoad) {
  struct Want {
    const char* file;
    VocabType type;
    const char* pre;
  };
  const Want wants[] = {
      {"golden/vocab/ggml-vocab-llama-spm.gguf", VocabType::kSpm, ""},
      {"golden/vocab/llama3-bpe.gguf", VocabType::kBpe, "llama-bpe"},
      {"golden/vocab/ggml-vocab-gpt-2.gguf", VocabType::kBpe, "gpt-2"},
      {"golden/vocab/ggml-vocab-qwen2.gguf", VocabType::kBpe, "qwen2"},
      {"golden/vocab/ggml-vocab-deepseek-coder.gguf", VocabType::kBpe, "deepseek-coder"},
      {"golden/vocab/ggml-vocab-falcon.gguf", VocabType::kBpe, "falcon"},
      {"golden/vocab/bert-base-uncased.gguf", VocabType::kWpm, ""},
      {"golden/vocab/ggml-vocab-bert-bge.gguf", VocabType::kWpm, ""},
  };
  for (const Want& w : wants) {
    auto f = gguf::GgufFile::open(test::shared_path(w.file));
    ASSERT_TRUE(f.has_value()) << f.status().message();
    auto v = Vocab::from_gguf(*f);
    ASSERT_TRUE(v.has_value()) << w.file << ": " << v.status().message();
    EXPECT_EQ(v->type(), w.type) << w.file;
    EXPECT_EQ(v->pre_tokenizer(), w.pre) << w.file;
  }
}

// ---- ids ----

TEST(VocabIds, OutOfRangeIdsAreReportedNotFatal) {
  Vocab v = toy_vocab({{"a", -1}});
  const int32_t n = v.n_tokens();
  EXPECT_TRUE(v.check_ids(Ids{0, 1, n - 1}).is_ok());
  const Status st = v.check_ids(Ids{0, n, 1});
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("position 1"), std::string::npos) << st.message();
  for (int32_t bad : {-1, n, n + 1000, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
    EXPECT_FALSE(v.is_valid(bad));
    EXPECT_EQ(v.token_to_piece(bad, true), "");
    EXPECT_EQ(v.token_text(bad), "");
    EXPECT_EQ(v.token_score(bad), 0.0f);
    EXPECT_EQ(v.token_attr(bad), vocab::kAttrUndefined);
    EXPECT_FALSE(v.is_eog(bad));
    auto s = v.detokenize(Ids{4, bad}, false, false);
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.status().code(), StatusCode::kOutOfRange);
  }
  EXPECT_EQ(detok(v, Ids{}), "");
}

// ---- sanitize_utf8 ----

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(vocab::sanitize_utf8(""), "");
  EXPECT_EQ(vocab::sanitize_utf8("plain ascii"), "plain ascii");
  EXPECT_EQ(vocab::sanitize_utf8("caf\xC3\xA9 \xF0\x9F\xA6\x99"), "caf\xC3\xA9 \xF0\x9F\xA6\x99");
  EXPECT_EQ(vocab::sanitize_utf8("\x80"), fffd);
  EXPECT_EQ(vocab::sanitize_utf8("a\xC3"), "a" + fffd);  // truncated at the end
  EXPECT_EQ(vocab::sanitize_utf8("\xF0\x9F\xA6"
                                 "a"),
            fffd + "a");                                                           // one subpart, one U+FFFD
  EXPECT_EQ(vocab::sanitize_utf8("\xC0\xAF"), fffd + fffd);                        // overlong lead byte
  EXPECT_EQ(vocab::sanitize_utf8("\xED\xA0\x80"), fffd + fffd + fffd);             // surrogate
  EXPECT_EQ(vocab::sanitize_utf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // above U+10FFFF
  EXPECT_EQ(vocab::sanitize_utf8("\xE2\x82"
                                 "\xE2\x82\xAC"),
            fffd + "\xE2\x82\xAC");
  EXPECT_TRUE(vocab::is_valid_utf8("\xE2\x82\xAC"));
  EXPECT_FALSE(vocab::is_valid_utf8("\xE2\x82"));
}

// ---- real vocabularies: robustness and speed ----

Vocab load_model_vocab(const std::string& rel) {
  auto f = gguf::GgufFile::open(test::shared_path(rel));
  EXPECT_TRUE(f.has_value()) << f.status().message();
  auto v = Vocab::from_gguf(*f);
  EXPECT_TRUE(v.has_value()) << v.status().message();
  return std::move(v).value();
}

TEST(VocabRobustness, RandomInputs) {
  Vocab v = load_model_vocab("models/stories260K.gguf");
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 300; ++iter) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    // Any bytes tokenize. In invalid UTF-8 a lead byte can swallow part of an escaped space, so
    // only valid UTF-8 (without U+2581, which comes back as a space) round-trips exactly.
    const std::string valid = vocab::sanitize_utf8(bytes);
    for (bool parse_special : {false, true}) {
      const Ids raw_ids = v.tokenize(bytes, iter % 2 == 0, parse_special);
      ASSERT_TRUE(v.check_ids(raw_ids).is_ok());
      ASSERT_TRUE(v.detokenize(raw_ids, true, parse_special).has_value());
      if (valid.find("\xE2\x96\x81") != std::string::npos) continue;
      // Without BOS: llama.cpp strips the prefix space only from a first token that is not a
      // removed BOS.
      const Ids ids = v.tokenize(valid, /*add_special=*/false, parse_special);
      auto back = v.detokenize(ids, /*remove_special=*/false, /*unparse_special=*/parse_special);
      ASSERT_TRUE(back.has_value());
      EXPECT_EQ(*back, valid) << "iteration " << iter;
    }
  }
}

TEST(VocabRobustness, WordByWordSegmentationIsExact) {
  // spm_segment may split at runs of escaped spaces (see spm_tokenizer.cpp); the result must be
  // that of one whole-fragment pass, also for invalid UTF-8 and runs of spaces.
  for (const char* model : {"models/stories260K.gguf", "models/llama-2-tiny-random.gguf"}) {
    Vocab v = load_model_vocab(model);
    std::mt19937 rng(99);
    const std::string pieces[] = {"\xE2\x96\x81", "\xE2\x96\x81\xE2\x96\x81", "a",  "the",   "ing", "\xE2", "\x96", "\x81",
                                  "\xC3\xA9",     "\xF0\x9F\xA6\x99",         "\n", "Hello", "(",   "."};
    for (int iter = 0; iter < 500; ++iter) {
      std::string text;
      const size_t n = rng() % 40;
      for (size_t i = 0; i < n; ++i) text += pieces[rng() % std::size(pieces)];
      Ids whole, split;
      detail::spm_segment(v, text, false, whole);
      detail::spm_segment(v, text, true, split);
      ASSERT_EQ(whole, split) << model << " iteration " << iter;
    }
  }
}

std::string long_text(size_t bytes) {
  const std::string words[] = {"Once",  "upon",  "a",    "time",   "there", "was", "a",  "little", "girl",
                               "named", "Lily.", "café", "日本語", "🦙",  "<s>", "\n", "  ",     "\t"};
  std::string text;
  std::mt19937 rng(7);
  while (text.size() < bytes) {
    text += words[rng() % std::size(words)];
    text += ' ';
  }
  return text;  // about `bytes` long; not cut, so it stays valid UTF-8
}

TEST(VocabRobustness, HundredKilobytesIsFast) {
  Vocab v = load_model_vocab("models/llama-2-tiny-random.gguf");
  const std::string text = long_text(100 * 1024);
  const auto t0 = std::chrono::steady_clock::now();
  const Ids with_specials = v.tokenize(text, true, true);
  const Ids ids = v.tokenize(text, false, false);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(ids.size(), 10000u);
  EXPECT_GT(with_specials.size(), 10000u);
  // Typically tens of ms; the bound only catches quadratic behaviour (and survives debug builds).
  EXPECT_LT(seconds, 2.0);
  auto back = v.detokenize(ids, false, false);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, text);
}

TEST(VocabRobustness, OneMegabyteAndEdgeInputs) {
  Vocab v = load_model_vocab("models/stories260K.gguf");
  const std::string text = long_text(1024 * 1024);
  const Ids ids = v.tokenize(text, false, false);
  EXPECT_GT(ids.size(), 100000u);
  auto back = v.detokenize(ids, false, false);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, text);

  // One 1 MB run without spaces, a NUL-laden string, lone special-token text.
  const std::string run(1024 * 1024, 'a');
  EXPECT_FALSE(v.tokenize(run, false, false).empty());
  const std::string nuls("\0\0a\0", 4);
  EXPECT_EQ(*v.detokenize(v.tokenize(nuls, false, false), false, false), nuls);
  EXPECT_EQ(v.tokenize("<s></s>", false, true), (Ids{1, 2}));
  EXPECT_EQ(v.tokenize("", true, true), (Ids{1}));
}

}  // namespace
}  // namespace loom::vocab
