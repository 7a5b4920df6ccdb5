// Unigram (T5) tokenizer: exact conformance with llama.cpp on the synthetic T5 vocabularies of
// tests/data (goldens by tools/dev/llama-ref/ref_dump tokenize, tests/data/README.md), the
// precompiled charsmap format, and robustness (corrupt charsmaps, random bytes never crash).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "test_util.h"
#include "vocab/ugm_tokenizer.h"
#include "vocab/vocab.h"

namespace loom::vocab {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

std::string unhex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s.push_back(char(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}

Expected<Vocab> load(const std::string& name) {
  LOOM_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::open(test::data_dir() + "/" + name + ".gguf"));
  return Vocab::from_gguf(f);
}

class UgmGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(UgmGolden, EveryCaseMatchesLlamaCpp) {
  const std::string name = GetParam();
  auto v = load(name);
  ASSERT_TRUE(v.has_value()) << v.status().message();
  ASSERT_EQ(v->type(), VocabType::kUgm);
  std::ifstream in(test::data_dir() + "/" + name + ".tokenize.json");
  ASSERT_TRUE(in.good());
  const json g = json::parse(in);
  const json& cases = g.at("tokenize");
  ASSERT_EQ(cases.size(), 150u);
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const std::string text = unhex(c.at("text_hex").get<std::string>());
    SCOPED_TRACE("case " + std::to_string(i) + ": " + json(text).dump(-1, ' ', false, json::error_handler_t::replace));
    const Ids plain = v->tokenize(text, false, false);
    const bool ok = plain == c.at("ids_plain").get<Ids>() &&
                    v->tokenize(text, true, false) == c.at("ids_add_special").get<Ids>() &&
                    v->tokenize(text, true, true) == c.at("ids_parse_special").get<Ids>();
    EXPECT_TRUE(ok);
    auto detok = v->detokenize(c.at("ids_plain").get<Ids>(), false, false);
    ASSERT_TRUE(detok.has_value());
    EXPECT_EQ(*detok, unhex(c.at("detokenized_hex").get<std::string>()));
    failures += !ok;
    if (failures > 5) break;
  }
}

INSTANTIATE_TEST_SUITE_P(OwnData, UgmGolden, ::testing::Values("synth-t5-tiny-f32", "synth-t5encoder-tiny-f32"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return s;
                         });

TEST(Ugm, DefaultsFollowLlamaCpp) {
  auto v = load("synth-t5-tiny-f32");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->bos(), Vocab::kNoToken);
  EXPECT_EQ(v->eos(), 1);
  EXPECT_EQ(v->unk(), 2);
  EXPECT_EQ(v->pad(), 0);
  EXPECT_FALSE(v->add_bos());
  EXPECT_TRUE(v->add_eos());
  EXPECT_TRUE(v->add_space_prefix());
  EXPECT_TRUE(v->remove_extra_whitespaces());
  EXPECT_TRUE(v->is_eog(1));
  // An empty text is no tokens, then EOS with specials.
  EXPECT_TRUE(v->tokenize("", false, false).empty());
  EXPECT_EQ(v->tokenize("", true, false), Ids{1});
}

// A vocabulary in memory with the given charsmap.
Expected<Vocab> small_vocab(std::string charsmap, bool prefix, bool merge) {
  VocabData d;
  d.model = "t5";
  d.tokens = {"<pad>",
              "</s>",
              "<unk>",
              "\xE2\x96\x81",
              "a",
              "b",
              "ab",
              "\xE2\x96\x81"
              "ab",
              "c",
              "fi"};
  d.scores = {0, 0, 0, -2, -3, -3, -4, -5, -3, -2};
  d.token_types = {3, 3, 2, 1, 1, 1, 1, 1, 1, 1};
  d.precompiled_charsmap = std::move(charsmap);
  d.add_space_prefix = prefix;
  d.remove_extra_whitespaces = merge;
  return Vocab::from_data(std::move(d));
}

TEST(Ugm, CharsmapBuilderRoundTripsThroughNormalization) {
  const std::string cm = detail::build_precompiled_charsmap({{"\xEF\xBC\xA1", "a"},   // Ａ -> a
                                                             {"\xEF\xAC\x81", "fi"},  // ﬁ -> fi
                                                             {"x", ""},               // removed
                                                             {"ab", "c"},             // two-byte key
                                                             {"abc", "b b"},          // longest match wins
                                                             {"\t", " "}});
  auto v = small_vocab(cm, true, true);
  ASSERT_TRUE(v.has_value()) << v.status().message();
  const std::string sp = "\xE2\x96\x81";
  EXPECT_EQ(v->ugm_normalize("\xEF\xBC\xA1"), sp + "a");
  EXPECT_EQ(v->ugm_normalize("\xEF\xAC\x81x"), sp + "fi");
  EXPECT_EQ(v->ugm_normalize("ab"), sp + "c");
  EXPECT_EQ(v->ugm_normalize("abc"), sp + "b" + sp + "b");
  EXPECT_EQ(v->ugm_normalize("a\t\t b  "), sp + "a" + sp + "b");
  auto plain = small_vocab(cm, false, false);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->ugm_normalize(" a\tb "), sp + "a" + sp + "b" + sp);
  // Invalid UTF-8: one U+FFFD per undecodable byte.
  EXPECT_EQ(plain->ugm_normalize("\xC3"), "\xEF\xBF\xBD");
  EXPECT_EQ(plain->ugm_normalize("\xE2\x96"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // Viterbi: "▁ab" (-5) beats "▁" + "ab" (-6) and "▁" + "a" + "b" (-8); unknown characters merge.
  auto bare = small_vocab("", true, true), bare_plain = small_vocab("", false, false);
  ASSERT_TRUE(bare.has_value() && bare_plain.has_value());
  EXPECT_EQ(bare_plain->tokenize("ab", false, false), (Ids{6}));  // no prefix: "ab" (-4) beats "a" + "b"
  EXPECT_EQ(bare->tokenize("ab", false, false), (Ids{7}));
  EXPECT_EQ(bare->tokenize("a\xE2\x98\x83\xE2\x98\x83"
                           "b",
                           false, false),
            (Ids{3, 4, 2, 5}));
  EXPECT_EQ(bare->tokenize("ab", true, false), (Ids{7, 1}));
}

TEST(Ugm, CorruptCharsmapsAreRefusedOrHarmless) {
  // A header that does not fit is refused at load, as in llama.cpp.
  EXPECT_EQ(small_vocab("\x01\x02", true, true).status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(small_vocab(std::string("\x10\x00\x00\x00", 4) + std::string(12, 'x'), true, true).status().code(),
            StatusCode::kCorrupt);
  // An empty double array (blob 0..3) with replacement bytes after it loads and normalizes nothing
  // (found by the model_load fuzzer: the copy of an empty array passed memcpy a null pointer,
  // which UBSan reports; scripts/sanitize.sh asan runs this test under it).
  for (uint32_t blob : {0u, 3u}) {
    std::string cm(4, '\0');
    std::memcpy(cm.data(), &blob, 4);
    cm += std::string(blob, 'y') + "ab";
    auto v = small_vocab(cm, true, true);
    ASSERT_TRUE(v.has_value()) << v.status().message();
    EXPECT_EQ(v->ugm_normalize("ab"),
              "\xE2\x96\x81"
              "ab");
  }
  // Anything else loads, and no walk through it can crash (llama.cpp throws on out-of-bounds
  // indices; loom stops the match).
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t units = size_t(1 + trial % 40);
    std::string cm(4, '\0');
    const uint32_t blob = uint32_t(units * 4);
    std::memcpy(cm.data(), &blob, 4);
    for (size_t i = 0; i < units * 4 + 1 + size_t(trial % 7); ++i) cm.push_back(char(byte(rng)));
    auto v = small_vocab(cm, trial % 2, trial % 3);
    ASSERT_TRUE(v.has_value()) << v.status().message();
    std::string text;
    for (int i = 0; i < 64; ++i) text.push_back(char(byte(rng)));
    for (int32_t id : v->tokenize(text, true, true)) ASSERT_TRUE(v->is_valid(id));
  }
}

TEST(Ugm, RandomBytesNeverCrashAndGiveValidIds) {
  for (const char* name : {"synth-t5-tiny-f32", "synth-t5encoder-tiny-f32"}) {
    auto v = load(name);
    ASSERT_TRUE(v.has_value());
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> byte(0, 255), len(0, 200), pick(0, 5);
    const std::vector<std::string> pieces = {" ", "\t", "\xEF\xBC\xA1", "<extra_id_0>", "</s>", "\xE2\x96\x81"};
    for (int trial = 0; trial < 2000; ++trial) {
      std::string text;
      const int n = len(rng);
      for (int i = 0; i < n; ++i) {
        if (pick(rng) == 0) text += pieces[size_t(byte(rng)) % pieces.size()];
        else text.push_back(char(byte(rng)));
      }
      const Ids ids = v->tokenize(text, trial % 2, trial % 3 == 0);
      for (int32_t id : ids) ASSERT_TRUE(v->is_valid(id));
      ASSERT_TRUE(v->detokenize(ids, false, true).has_value());
    }
    // Long whitespace runs and a long word.
    EXPECT_FALSE(v->tokenize(std::string(100000, ' ') + "a" + std::string(100000, '\t'), true, false).empty());
    EXPECT_FALSE(v->tokenize(std::string(20000, 'q'), false, false).empty());
  }
}

}  // namespace
}  // namespace loom::vocab
