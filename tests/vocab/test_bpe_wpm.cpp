// Unit tests of the byte-level BPE and WordPiece tokenizers: the merge algorithm and the GPT-2
// byte mapping on hand-made vocabularies, the pre-tokenizer regexes, WordPiece's normalization
// and greedy matching, detokenization's space clean-up, and robustness of every family (random
// bytes including invalid UTF-8, long inputs). Exact conformance with llama.cpp on real
// vocabularies is test_vocab_golden's job.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "test_util.h"
#include "vocab/bpe_tokenizer.h"
#include "vocab/unicode.h"
#include "vocab/utf8.h"
#include "vocab/vocab.h"
#include "vocab/wpm_tokenizer.h"

namespace loom::vocab {
namespace {

using Ids = std::vector<int32_t>;
using Words = std::vector<std::string>;

std::string cp_utf8(uint32_t cp) {
  std::string s;
  vocab::unicode::append_utf8(s, cp);
  return s;
}

// The byte-level text of raw bytes.
std::string enc(std::string_view bytes) {
  std::string s;
  for (char c : bytes) s += cp_utf8(detail::byte_to_codepoint(uint8_t(c)));
  return s;
}

std::string detok(const Vocab& v, const Ids& ids, bool remove_special = false, bool unparse = false) {
  auto s = v.detokenize(ids, remove_special, unparse);
  EXPECT_TRUE(s.has_value()) << s.status().message();
  return s.has_value() ? *s : std::string("<error>");
}

// ---- byte mapping ----

TEST(ByteLevel, MappingIsGpt2s) {
  EXPECT_EQ(detail::byte_to_codepoint('!'), uint32_t('!'));
  EXPECT_EQ(detail::byte_to_codepoint('~'), uint32_t('~'));
  EXPECT_EQ(detail::byte_to_codepoint(0xA1), 0xA1u);
  EXPECT_EQ(detail::byte_to_codepoint(0xFF), 0xFFu);
  EXPECT_EQ(detail::byte_to_codepoint(0x00), 0x100u);
  EXPECT_EQ(detail::byte_to_codepoint(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(detail::byte_to_codepoint('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(detail::byte_to_codepoint(0x7F), 0x121u);
  EXPECT_EQ(detail::byte_to_codepoint(0xAD), 0x143u);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  EXPECT_EQ(detail::byte_level_decode(enc(all)), all);
  // A code point outside the mapping is flagged, not dropped.
  EXPECT_EQ(detail::byte_level_decode("a\xE4\xB8\x80"), "a[UNK_BYTE_0xe4b880a\xE4\xB8\x80]");
}

// ---- BPE on a hand-made vocabulary ----

// The 256 byte tokens (ids 0..255 in byte order), then `extra` texts (raw bytes, encoded here).
Vocab toy_bpe(const std::vector<std::string>& extra, const std::vector<std::pair<std::string, std::string>>& merges,
              const std::string& pre = "gpt-2", std::vector<std::string> specials = {}) {
  VocabData d;
  d.model = "gpt2";
  d.pre = pre;
  for (int b = 0; b < 256; ++b) d.tokens.push_back(enc(std::string(1, char(b))));
  for (const std::string& e : extra) d.tokens.push_back(enc(e));
  d.token_types.assign(d.tokens.size(), int32_t(vocab::TokenType::kNormal));
  for (const std::string& s : specials) {
    d.tokens.push_back(s);
    d.token_types.push_back(int32_t(vocab::TokenType::kControl));
  }
  for (const auto& [l, r] : merges) d.merges.push_back(enc(l) + " " + enc(r));
  auto v = Vocab::from_data(std::move(d));
  EXPECT_TRUE(v.has_value()) << v.status().message();
  return std::move(v).value();
}

TEST(BpeTokenizer, MergesFollowRankNotLength) {
  // "abc": rank 0 is b+c, so "a" + "bc" even though "ab" exists too.
  Vocab v = toy_bpe({"ab", "bc", "abc"}, {{"b", "c"}, {"a", "b"}, {"a", "bc"}});
  EXPECT_EQ(v.tokenize("abc", false, false), (Ids{258}));  // a+bc -> abc
  EXPECT_EQ(v.tokenize("ab", false, false), (Ids{256}));
  // Only the pair (a, bc) merges to "abc"; (ab, c) has no rank, so "ab" then "c".
  Vocab w = toy_bpe({"ab", "bc", "abc"}, {{"a", "b"}, {"b", "c"}, {"a", "bc"}});
  EXPECT_EQ(w.tokenize("abc", false, false), (Ids{256, 'c'}));
}

TEST(BpeTokenizer, EqualRanksMergeLeftmostFirst) {
  Vocab v = toy_bpe({"aa"}, {{"a", "a"}});
  EXPECT_EQ(v.tokenize("aaa", false, false), (Ids{256, 'a'}));
  EXPECT_EQ(v.tokenize("aaaa", false, false), (Ids{256, 256}));
}

TEST(BpeTokenizer, PreTokensNeverMerge) {
  // " b" is a separate GPT-2 pre-token, so "a b" never becomes one token.
  Vocab v = toy_bpe({"a b", " b"}, {{"a", " "}, {" ", "b"}});
  EXPECT_EQ(v.tokenize("a b", false, false), (Ids{'a', 257}));
}

TEST(BpeTokenizer, SymbolsThatAreNotTokensFallBackToBytes) {
  // "ab" is merged but is no token: emitted as its single-character tokens.
  Vocab v = toy_bpe({"xyz"}, {{"a", "b"}});
  EXPECT_EQ(v.tokenize("ab", false, false), (Ids{'a', 'b'}));
}

TEST(BpeTokenizer, IgnoreMergesEmitsWholeVocabularyWords) {
  // llama-bpe: a pre-token that is a token is emitted as is, even without a merge path.
  Vocab v = toy_bpe({"hello"}, {}, "llama-bpe");
  EXPECT_EQ(v.tokenize("hello", false, false), (Ids{256}));
  Vocab g = toy_bpe({"hello"}, {}, "gpt-2");
  EXPECT_EQ(g.tokenize("hello", false, false), (Ids{'h', 'e', 'l', 'l', 'o'}));
}

TEST(BpeTokenizer, BosAndDefaultsPerPreset) {
  // A gpt2 vocab without bos/eos ids gets 11 for both; llama-bpe adds BOS, gpt-2 does not.
  Vocab g = toy_bpe({}, {{"a", "b"}}, "gpt-2");
  EXPECT_EQ(g.bos(), 11);
  EXPECT_EQ(g.eos(), 11);
  EXPECT_FALSE(g.add_bos());
  EXPECT_EQ(g.tokenize("a", true, false), (Ids{'a'}));
  Vocab l = toy_bpe({}, {{"a", "b"}}, "llama-bpe");
  EXPECT_TRUE(l.add_bos());
  EXPECT_EQ(l.tokenize("a", true, false), (Ids{11, 'a'}));
  EXPECT_EQ(l.nl(), '\n');
  EXPECT_TRUE(g.clean_spaces());
  EXPECT_FALSE(toy_bpe({}, {{"a", "b"}}, "qwen2").clean_spaces());
}

TEST(BpeTokenizer, SpecialTokensAndCache) {
  Vocab v = toy_bpe({"ab"}, {{"a", "b"}}, "gpt-2", {"<|x|>"});
  const int32_t x = 257;
  EXPECT_EQ(v.tokenize("ab<|x|>ab", false, true), (Ids{256, x, 256}));
  // Plain: the control token's text is ordinary text.
  EXPECT_EQ(v.tokenize("<|x|>", false, false), (Ids{'<', '|', 'x', '|', '>'}));
  // Repeated words come from the cache with the same result.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(v.tokenize("ab ab ab", false, false), (Ids{256, ' ', 256, ' ', 256}));
  EXPECT_EQ(detok(v, Ids{256, x}, false, true), "ab<|x|>");
  EXPECT_EQ(detok(v, Ids{256, x}, false, false), "ab");
}

TEST(BpeTokenizer, CleanSpacesOnDetokenize) {
  Vocab v = toy_bpe({}, {{"a", "b"}}, "gpt-2");
  auto round = [&](const std::string& s) { return detok(v, v.tokenize(s, false, false)); };
  EXPECT_EQ(round("etc... ???"), "etc...???");
  EXPECT_EQ(round("a , b . c ! d ?"), "a, b. c! d?");
  EXPECT_EQ(round("it 's I 'm we 're you 've"), "it's I'm we're you've");
  EXPECT_EQ(round("don 't I 'd we 'll"), "don 't I 'd we 'll");
  EXPECT_EQ(round("a ' b"), "a'b");
  Vocab q = toy_bpe({}, {{"a", "b"}}, "qwen2");
  EXPECT_EQ(detok(q, q.tokenize("etc... ??? it 's", false, false)), "etc... ??? it 's");
}

// ---- pre-tokenizers ----

Words pre_split(const std::string& pre, const std::string& text) {
  auto t = detail::BpeTokenizer::create(pre, {});
  EXPECT_TRUE(t.has_value()) << t.status().message();
  Words out;
  for (const std::string& w : (*t)->pre_tokenize(text)) out.push_back(detail::byte_level_decode(w));
  return out;
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(pre_split("gpt-2", "Hello world's  test\n"), (Words{"Hello", " world", "'s", " ", " test", "\n"}));
  EXPECT_EQ(pre_split("gpt-2", "x=12345;"), (Words{"x", "=", "12345", ";"}));
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(pre_split("llama-bpe", "I'M 12345 ok!!\n\n  x"),
            (Words{"I", "'M", " ", "123", "45", " ok", "!!\n\n", " ", " x"}));
}

TEST(PreTokenizer, Qwen2AndDeepseekCoderSplitDigits) {
  EXPECT_EQ(pre_split("qwen2", "a 123"), (Words{"a", " ", "1", "2", "3"}));
  EXPECT_EQ(pre_split("deepseek-coder", "ab 12\ncd"), (Words{"ab", " ", "1", "2", "\n", "cd"}));
}

TEST(PreTokenizer, EmptyMatchesSplit) {
  // superbpe's lookahead-only regex splits digit runs into groups of three from the right.
  EXPECT_EQ(pre_split("superbpe", "x1234567 12"), (Words{"x", "1", "234", "567", " ", "12"}));
}

TEST(PreTokenizer, WhitespaceIsTheWhiteSpaceProperty) {
  // U+0085 (NEL) is whitespace; U+180E and U+200B are not (they join a punctuation run; PCRE2's
  // own \s would take U+180E as whitespace).
  EXPECT_EQ(pre_split("gpt-2",
                      "a\xC2\x85\xC2\x85"
                      "b"),
            (Words{"a", "\xC2\x85", "\xC2\x85", "b"}));
  EXPECT_EQ(pre_split("gpt-2", "a \xE2\x80\x8B"), (Words{"a", " \xE2\x80\x8B"}));
  EXPECT_EQ(pre_split("gpt-2", "a!\xE1\xA0\x8E!"), (Words{"a", "!\xE1\xA0\x8E!"}));
  EXPECT_EQ(pre_split("llama-bpe", "a\xE3\x80\x80\xE3\x80\x80"), (Words{"a", "\xE3\x80\x80\xE3\x80\x80"}));
}

TEST(PreTokenizer, UnassignedCodePointsJoinPunctuationRuns) {
  // U+0378 is unassigned. llama.cpp's hand-written GPT-2/Llama-3/Qwen2 matchers give it a flag
  // (UNDEFINED) like any other character that is not a letter, number or space, so it is part of
  // punctuation runs, as in its std::regex path (ufakzeka).
  const std::string cn = "\xCD\xB8";
  EXPECT_EQ(pre_split("gpt-2", "a !" + cn + "!"), (Words{"a", " !" + cn + "!"}));
  EXPECT_EQ(pre_split("gpt-2", "a " + cn), (Words{"a", " " + cn}));
  EXPECT_EQ(pre_split("llama-bpe", "a " + cn + "b"), (Words{"a", " " + cn, "b"}));
  EXPECT_EQ(pre_split("llama-bpe", "!" + cn + cn), (Words{"!" + cn + cn}));
  EXPECT_EQ(pre_split("qwen2", "!" + cn + cn), (Words{"!" + cn + cn}));
  EXPECT_EQ(pre_split("ufakzeka", "!" + cn + cn), (Words{"!" + cn + cn}));
}

TEST(PreTokenizer, HandWrittenSplitters) {
  // Kimi-K2: Han runs apart from other letters; a contraction stays with its word.
  EXPECT_EQ(pre_split("kimi-k2",
                      "\xE4\xB8\xAD\xE6\x96\x87"
                      "English text's 12345"),
            (Words{"\xE4\xB8\xAD\xE6\x96\x87", "English", " text's", " ", "123", "45"}));
  // AFMoE's digit groups from the right (the text before a run goes with its first group, as in
  // llama.cpp, then the later regexes split it off again).
  EXPECT_EQ(pre_split("afmoe", "ab1234567"), (Words{"ab", "1", "234", "567"}));
  EXPECT_EQ(pre_split("tiny_aya", "x 1234"), (Words{"x", " ", "1", "234"}));
  // Gemma 4: runs of newlines and of everything else, raw UTF-8.
  auto g = detail::BpeTokenizer::create("gemma4", {});
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ((*g)->pre_tokenize("a b\n\nc\n"), (Words{"a b", "\n\n", "c", "\n"}));
}

TEST(PreTokenizer, EveryPresetCompilesAndSplits) {
  const char* names[] = {"default",      "llama3",         "llama-bpe",   "dbrx",      "smaug-bpe",     "chatglm-bpe",
                         "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",    "starcoder",     "refact",
                         "command-r",    "smollm",         "gpt-2",       "mpt",       "olmo",          "stablelm2",
                         "qwen2",        "bloom",          "poro-chat",   "viking",    "tekken",        "gpt-4o",
                         "superbpe",     "bailingmoe",     "seed-coder",  "chameleon", "hunyuan-dense", "roberta-bpe"};
  const std::string text = "Hello, World! I'm 2024 caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \t\n  x\xED\xA0\x80y";
  for (const char* name : names) {
    const Words words = pre_split(name, text);
    std::string joined;
    for (const std::string& w : words) joined += w;
    // Pieces cover the (leniently re-encoded) input exactly.
    EXPECT_EQ(joined, text) << name;
    EXPECT_GE(words.size(), 3u) << name;
  }
  EXPECT_FALSE(detail::BpeTokenizer::create("no-such", {}).has_value());
  EXPECT_EQ(pre_split("", "a1234"), pre_split("default", "a1234"));
}

TEST(PreTokenizer, LongWordsStayWhole) {
  // The case-aware regexes need regex stack per letter; 256 KiB of letters still match whole.
  const std::string word(256 * 1024, 'a');
  for (const char* name : {"tekken", "gpt-4o", "llama-bpe", "gpt-2", "qwen2", "deepseek-coder"}) {
    EXPECT_EQ(pre_split(name, " " + word), (Words{" " + word})) << name;
  }
}

TEST(PreTokenizer, InvalidUtf8BecomesReplacementCharacters) {
  // As in llama.cpp: an undecodable byte is U+FFFD from then on.
  EXPECT_EQ(pre_split("gpt-2",
                      "a\xFF"
                      "b"),
            (Words{"a", "\xEF\xBF\xBD", "b"}));
}

// ---- WordPiece ----

Vocab toy_wpm() {
  VocabData d;
  d.model = "bert";
  // WordPiece GGUFs store word-initial pieces with a U+2581 prefix and "##x" as "x".
  const std::vector<std::string> words = {"[PAD]",
                                          "\xE2\x96\x81"
                                          "hello",
                                          "\xE2\x96\x81"
                                          "un",
                                          "aff",
                                          "able",
                                          "\xE2\x96\x81"
                                          ",",
                                          "\xE2\x96\x81"
                                          "cafe",
                                          "\xE2\x96\x81\xE4\xB8\xAD",
                                          "\xE2\x96\x81"
                                          "!",
                                          "s"};
  d.tokens = words;
  while (d.tokens.size() < 100) d.tokens.push_back("[unused" + std::to_string(d.tokens.size()) + "]");
  for (const char* s : {"[UNK]", "[CLS]", "[SEP]", "[MASK]"}) d.tokens.push_back(s);
  d.token_types.assign(d.tokens.size(), int32_t(vocab::TokenType::kNormal));
  for (int32_t id : {0, 100, 101, 102, 103}) d.token_types[size_t(id)] = int32_t(vocab::TokenType::kControl);
  auto v = Vocab::from_data(std::move(d));
  EXPECT_TRUE(v.has_value()) << v.status().message();
  return std::move(v).value();
}

TEST(WpmTokenizer, PreTokenizationNormalizes) {
  EXPECT_EQ(detail::wpm_pre_tokenize("Hello, World!", true), (Words{"hello", ",", "world", "!"}));
  EXPECT_EQ(detail::wpm_pre_tokenize("  Caf\xC3\xA9\tna\xC3\xAFve  ", true), (Words{"cafe", "naive"}));
  // Combining marks are dropped, CJK ideographs stand alone, control characters vanish.
  EXPECT_EQ(detail::wpm_pre_tokenize("e\xCC\x81x \xE4\xB8\xAD\xE6\x96\x87"
                                     "ab\x01"
                                     "c",
                                     true),
            (Words{"ex", "\xE4\xB8\xAD", "\xE6\x96\x87", "abc"}));
  // ASCII symbols split, non-ASCII symbols do not.
  EXPECT_EQ(detail::wpm_pre_tokenize("a+b\xE2\x82\xAC"
                                     "c",
                                     true),
            (Words{"a", "+",
                   "b\xE2\x82\xAC"
                   "c"}));
  EXPECT_EQ(detail::wpm_pre_tokenize("", true), Words{});
}

TEST(WpmTokenizer, GreedyLongestMatchWithUnknownWords) {
  Vocab v = toy_wpm();
  EXPECT_EQ(v.type(), VocabType::kWpm);
  EXPECT_EQ(v.tokenize("unaffable", false, false), (Ids{2, 3, 4}));
  EXPECT_EQ(v.tokenize("Hello, CAFÉ!", false, false), (Ids{1, 5, 6, 8}));
  // A word that cannot be covered completely is one [UNK].
  EXPECT_EQ(v.tokenize("hello unaffablex hellos", false, false), (Ids{1, 100, 1, 9}));
  EXPECT_EQ(v.tokenize("hello", true, false), (Ids{101, 1, 102}));
  EXPECT_EQ(v.tokenize("", true, false), (Ids{101, 102}));
  EXPECT_EQ(v.tokenize("[MASK]hello", false, true), (Ids{103, 1}));
  EXPECT_EQ(detok(v, Ids{1, 5, 2, 3, 4}), " hello, unaffable");
}

// ---- robustness of every family on real vocabularies ----

const char* const kVocabFiles[] = {
    "golden/vocab/ggml-vocab-llama-spm.gguf",      "golden/vocab/llama3-bpe.gguf",
    "golden/vocab/ggml-vocab-gpt-2.gguf",          "golden/vocab/ggml-vocab-qwen2.gguf",
    "golden/vocab/ggml-vocab-deepseek-coder.gguf", "golden/vocab/ggml-vocab-falcon.gguf",
    "golden/vocab/bert-base-uncased.gguf",         "golden/vocab/ggml-vocab-bert-bge.gguf",
};

Vocab load(const std::string& rel) {
  auto f = gguf::GgufFile::open(test::shared_path(rel));
  EXPECT_TRUE(f.has_value()) << f.status().message();
  auto v = Vocab::from_gguf(*f);
  EXPECT_TRUE(v.has_value()) << v.status().message();
  return std::move(v).value();
}

TEST(FamilyRobustness, RandomBytesNeverFail) {
  for (const char* file : kVocabFiles) {
    SCOPED_TRACE(file);
    Vocab v = load(file);
    std::mt19937 rng(4321);
    const std::string fragments[] = {"a",
                                     " ",
                                     "\n",
                                     "\xC3\xA9",
                                     "\xE4\xB8\xAD",
                                     "\xF0\x9F\xA6\x99",
                                     "'s",
                                     "123",
                                     "<|endoftext|>",
                                     "[CLS]",
                                     "<s>",
                                     "\xED\xA0\x80",
                                     "\xF4\x90\x80\x80",
                                     "\xC0\x80",
                                     "\xE2\x96\x81",
                                     "\r\n",
                                     "\t",
                                     "!!"};
    for (int iter = 0; iter < 300; ++iter) {
      std::string text;
      const size_t n = rng() % 48;
      for (size_t i = 0; i < n; ++i) {
        if (rng() % 2) text.push_back(char(rng() % 256));
        else text += fragments[rng() % std::size(fragments)];
      }
      for (bool parse_special : {false, true}) {
        const Ids ids = v.tokenize(text, iter % 2 == 0, parse_special);
        ASSERT_TRUE(v.check_ids(ids).is_ok()) << "iteration " << iter;
        ASSERT_TRUE(v.detokenize(ids, iter % 3 == 0, parse_special).has_value());
      }
    }
  }
}

TEST(FamilyRobustness, ByteLevelBpeRoundTripsValidText) {
  // Without space clean-up (qwen2, deepseek-coder), valid UTF-8 comes back byte for byte.
  for (const char* file : {"golden/vocab/ggml-vocab-qwen2.gguf", "golden/vocab/ggml-vocab-deepseek-coder.gguf"}) {
    Vocab v = load(file);
    std::mt19937 rng(77);
    for (int iter = 0; iter < 200; ++iter) {
      std::string bytes(rng() % 64, '\0');
      for (char& c : bytes) c = char(rng() % 256);
      std::string text = vocab::sanitize_utf8(bytes);
      EXPECT_EQ(detok(v, v.tokenize(text, false, false)), text) << file << " iteration " << iter;
    }
  }
}

TEST(FamilyRobustness, LongUniformRunsAreFast) {
  // Regex backtracking or merge queues must not go quadratic on one huge pre-token.
  const std::string runs[] = {std::string(64 * 1024, ' '),        std::string(64 * 1024, '!'),
                              std::string(64 * 1024, '7'),        std::string(64 * 1024, '\n'),
                              std::string(64 * 1024, '\t') + "x", std::string(64 * 1024, '\xFF')};
  for (const char* file : kVocabFiles) {
    Vocab v = load(file);
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& run : runs) {
      // (WordPiece drops whitespace and U+FFFD, so some runs give no tokens there.)
      const Ids ids = v.tokenize(run, false, false);
      EXPECT_TRUE(v.check_ids(ids).is_ok()) << file;
      if (v.type() != VocabType::kWpm) {
        EXPECT_FALSE(ids.empty()) << file;
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Typically well under a second; the bound only catches quadratic behaviour (and survives
    // sanitizer builds).
    EXPECT_LT(seconds, 10.0) << file;
  }
}

TEST(FamilyRobustness, ConcurrentTokenizationMatchesSerial) {
  // The BPE word cache is shared between threads.
  Vocab v = load("golden/vocab/llama3-bpe.gguf");
  std::vector<std::string> texts;
  std::mt19937 rng(11);
  const std::string words[] = {"alpha", "beta", "gamma", "caf\xC3\xA9", "12345", "it's", "\n", "!!"};
  for (int t = 0; t < 8; ++t) {
    std::string s;
    for (int i = 0; i < 2000; ++i) s += words[rng() % std::size(words)] + " ";
    texts.push_back(s);
  }
  std::vector<Ids> serial;
  for (const std::string& s : texts) serial.push_back(v.tokenize(s, true, false));
  std::vector<Ids> parallel(texts.size());
  std::vector<std::thread> threads;
  for (size_t t = 0; t < texts.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) parallel[t] = v.tokenize(texts[t], true, false);
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(parallel, serial);
}

// Tokenizing grows linearly with the input: twice the text (and a pre-token twice as long) takes
// about twice as long, never four times. A ratio of best-of-3 timings, so it holds on a slow or
// instrumented build and on a busy machine; an absolute bound would not.
TEST(FamilyRobustness, LongInputsAreLinear) {
  std::mt19937 rng(5);
  const std::string words[] = {"Once", "upon", "a", "time", "café", "日本語", "🦙", "12345", "\n", "  ", "it's"};
  auto make_text = [&](size_t bytes) {
    std::string text;
    while (text.size() < bytes) text += words[rng() % std::size(words)] + " ";
    return text;
  };
  const std::string text1 = make_text(48 * 1024), text2 = text1 + make_text(48 * 1024);
  const std::string run1(64 * 1024, 'a'), run2(128 * 1024, 'a');  // one huge pre-token
  for (const char* file : {"golden/vocab/llama3-bpe.gguf", "golden/vocab/bert-base-uncased.gguf"}) {
    Vocab v = load(file);
    auto best_of_3 = [&](const std::string& text, const std::string& run) {
      double best = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        EXPECT_GT(v.tokenize(text, true, false).size(), text.size() / 10) << file;
        EXPECT_FALSE(v.tokenize(run, false, false).empty()) << file;
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      return best;
    };
    const double t1 = best_of_3(text1, run1), t2 = best_of_3(text2, run2);
    std::printf("%s: %.3f s, twice the input %.3f s (%.2fx)\n", file, t1, t2, t2 / t1);
    EXPECT_LT(t2 / t1, 3.4) << file << ": " << t1 << " s for 112 KiB, " << t2
                            << " s for 224 KiB (linear: 2x, quadratic: 4x)";
  }
}

}  // namespace
}  // namespace loom::vocab
