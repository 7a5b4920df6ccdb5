// StreamDetokenizer: streaming a token sequence must give exactly
// sanitize_utf8(Vocab::detokenize(ids)), in well-formed UTF-8 chunks, for every vocabulary family:
// the golden ids of every vocab-only file and model (shared/golden), random id sequences biased
// towards the tokens that make streaming hard (byte tokens, pieces ending inside a character,
// spaces and punctuation that clean_spaces removes, specials), and hand-made cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "golden_sets.h"
#include "test_util.h"
#include "vocab/stream_detokenizer.h"
#include "vocab/utf8.h"
#include "vocab/vocab.h"

namespace loom::vocab {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

using test::GoldenSet;

// Every vocab-only file, model and synthetic model golden.
std::vector<GoldenSet> all_files() {
  std::vector<GoldenSet> v(std::begin(test::kVocabOnlySets), std::end(test::kVocabOnlySets));
  v.insert(v.end(), std::begin(test::kModelSets), std::end(test::kModelSets));
  v.insert(v.end(), std::begin(test::kSynthSets), std::end(test::kSynthSets));
  return v;
}

// Vocabularies are loaded once per process (the large BPE ones take a while).
const Vocab& load_vocab(const std::string& rel) {
  static std::map<std::string, std::unique_ptr<Vocab>> cache;
  auto& slot = cache[rel];
  if (!slot) {
    auto file = gguf::GgufFile::open(test::shared_path(rel));
    EXPECT_TRUE(file.has_value()) << rel << ": " << file.status().message();
    if (!file.has_value()) std::abort();
    auto vocab = Vocab::from_gguf(*file);
    EXPECT_TRUE(vocab.has_value()) << rel << ": " << vocab.status().message();
    if (!vocab.has_value()) std::abort();
    slot = std::make_unique<Vocab>(std::move(*vocab));
  }
  return *slot;
}

json load_json(const std::string& rel) {
  std::ifstream in(test::shared_path(rel));
  EXPECT_TRUE(in.good()) << rel;
  return json::parse(in);
}

std::string escaped(const std::string& s) { return json(vocab::sanitize_utf8(s)).dump(); }

std::string ids_str(const Ids& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// Streams `ids` and checks the invariant against detokenize with the same flags. Returns the
// streamed text.
std::string check_stream(const Vocab& v, const Ids& ids, StreamDetokenizerOptions opt) {
  SCOPED_TRACE("ids " + ids_str(ids) + " unparse_special=" + std::to_string(opt.unparse_special) +
               " remove_special=" + std::to_string(opt.remove_special));
  auto want = v.detokenize(ids, opt.remove_special, opt.unparse_special);
  EXPECT_TRUE(want.has_value()) << want.status().message();
  if (!want.has_value()) return {};
  StreamDetokenizer detok(v, opt);
  std::string got;
  for (int32_t id : ids) {
    auto chunk = detok.push(id);
    EXPECT_TRUE(chunk.has_value()) << chunk.status().message();
    if (!chunk.has_value()) return {};
    EXPECT_TRUE(vocab::is_valid_utf8(*chunk)) << "chunk " << escaped(*chunk) << " after id " << id;
    got += *chunk;
    // Nothing returned may ever change: what came out so far is a prefix of the result.
    EXPECT_EQ(vocab::sanitize_utf8(*want).compare(0, got.size(), got), 0)
        << "streamed " << escaped(got) << " is not a prefix of " << escaped(*want);
  }
  const std::string tail = detok.flush();
  EXPECT_TRUE(vocab::is_valid_utf8(tail));
  EXPECT_EQ(detok.pending_bytes(), 0u);
  got += tail;
  EXPECT_EQ(got, vocab::sanitize_utf8(*want));
  return got;
}

const StreamDetokenizerOptions kAllOptions[] = {{false, false}, {true, false}, {false, true}, {true, true}};

class StreamDetokenizerFile : public ::testing::TestWithParam<GoldenSet> {};

TEST_P(StreamDetokenizerFile, GoldenIdsStreamLikeDetokenize) {
  const GoldenSet& f = GetParam();
  const Vocab& v = load_vocab(f.gguf);
  const json golden = load_json(f.json);
  std::vector<Ids> sequences;
  if (golden.contains("tokenize")) {
    for (const json& c : golden.at("tokenize")) {
      for (const char* key : {"ids_add_special", "ids_plain", "ids_parse_special"}) {
        sequences.push_back(c.at(key).get<Ids>());
      }
      // The golden text too, not only agreement with detokenize.
      const Ids plain = c.at("ids_plain").get<Ids>();
      EXPECT_EQ(check_stream(v, plain, {false, false}), c.at("detokenized_plain").get<std::string>());
    }
  }
  if (golden.contains("runs")) {
    for (const json& run : golden.at("runs")) {
      sequences.push_back(run.at("prompt_ids").get<Ids>());
      if (!run.contains("greedy_ids")) continue;  // embedding models
      Ids greedy = run.at("greedy_ids").get<Ids>();
      sequences.push_back(greedy);
      // A whole generation: prompt then generated ids.
      Ids all = run.at("prompt_ids").get<Ids>();
      all.insert(all.end(), greedy.begin(), greedy.end());
      sequences.push_back(all);
      if (run.contains("greedy_text")) {
        EXPECT_EQ(check_stream(v, greedy, {false, false}), run.at("greedy_text").get<std::string>());
      }
    }
  }
  ASSERT_FALSE(sequences.empty());
  for (const Ids& ids : sequences) {
    for (const StreamDetokenizerOptions& opt : kAllOptions) check_stream(v, ids, opt);
    if (HasFailure()) break;
  }
}

// Ids that make streaming hard: byte tokens, pieces that are not complete UTF-8 (they end or
// start inside a character), pieces made only of spaces, quotes, the punctuation and letters of
// the clean-up rules, and special tokens.
Ids tricky_ids(const Vocab& v) {
  Ids out;
  for (int32_t id = 0; id < v.n_tokens(); ++id) {
    const std::string piece = v.token_to_piece(id, true);
    const bool cleanup_chars = !piece.empty() && piece.size() <= 3 && std::all_of(piece.begin(), piece.end(), [](char c) {
      return std::string_view(" '?!.,smtdrevl").find(c) != std::string_view::npos;
    });
    if (v.is_byte(id) || v.is_control(id) || v.is_unknown(id) || v.is_user_defined(id) || !vocab::is_valid_utf8(piece) ||
        cleanup_chars || id == v.bos() || id == v.eos()) {
      out.push_back(id);
    }
  }
  return out;
}

TEST_P(StreamDetokenizerFile, RandomSequencesStreamLikeDetokenize) {
  const GoldenSet& f = GetParam();
  const Vocab& v = load_vocab(f.gguf);
  const Ids tricky = tricky_ids(v);
  ASSERT_FALSE(tricky.empty());
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int32_t> any(0, v.n_tokens() - 1);
  std::uniform_int_distribution<size_t> pick(0, tricky.size() - 1);
  std::uniform_int_distribution<int> len(0, 40);
  std::uniform_int_distribution<int> coin(0, 3);
  for (int round = 0; round < 1000 && !HasFailure(); ++round) {
    Ids ids(len(rng));
    for (int32_t& id : ids) id = coin(rng) == 0 ? any(rng) : tricky[pick(rng)];
    // Sometimes start with BOS and end with EOS, as a generation would.
    if (round % 5 == 0 && v.bos() != Vocab::kNoToken) ids.insert(ids.begin(), v.bos());
    if (round % 7 == 0 && v.eos() != Vocab::kNoToken) ids.push_back(v.eos());
    check_stream(v, ids, kAllOptions[round % 4]);
  }
}

auto file_name = [](const auto& info) { return std::string(info.param.name); };
INSTANTIATE_TEST_SUITE_P(All, StreamDetokenizerFile, ::testing::ValuesIn(all_files()), file_name);

// --- Hand-made cases ---

// Token ids of a byte sequence through the vocabulary's byte tokens.
Ids byte_ids(const Vocab& v, std::string_view bytes) {
  Ids ids;
  for (char c : bytes) ids.push_back(v.byte_to_token(static_cast<uint8_t>(c)));
  return ids;
}

TEST(StreamDetokenizer, SpmByteFallbackHoldsAnIncompleteCharacter) {
  const Vocab& v = load_vocab("golden/vocab/ggml-vocab-llama-spm.gguf");
  const Ids ids = byte_ids(v, "\xE6\x97\xA5");  // U+65E5
  for (int32_t id : ids) ASSERT_TRUE(v.is_byte(id));
  StreamDetokenizer detok(v);
  EXPECT_EQ(*detok.push(ids[0]), "");
  EXPECT_EQ(*detok.push(ids[1]), "");
  EXPECT_EQ(detok.pending_bytes(), 2u);
  EXPECT_EQ(*detok.push(ids[2]), "\xE6\x97\xA5");
  EXPECT_EQ(detok.pending_bytes(), 0u);
  EXPECT_EQ(detok.flush(), "");
}

TEST(StreamDetokenizer, IncompleteTailBecomesReplacementCharacterAtFlush) {
  const Vocab& v = load_vocab("golden/vocab/ggml-vocab-llama-spm.gguf");
  StreamDetokenizer detok(v);
  const Ids ids = byte_ids(v, "\xE6\x97");
  EXPECT_EQ(*detok.push(ids[0]), "");
  EXPECT_EQ(*detok.push(ids[1]), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD");
  // A sequence cut short by the next token: the replacement comes out with that token.
  EXPECT_EQ(*detok.push(ids[0]), "");
  EXPECT_EQ(*detok.push(v.byte_to_token('A')),
            "\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(detok.flush(), "");
}

TEST(StreamDetokenizer, BpeTokenEndingInsideACharacter) {
  const Vocab& v = load_vocab("golden/vocab/ggml-vocab-gpt-2.gguf");
  // GPT-2 splits most CJK characters into several byte-level tokens.
  const std::string text = "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E hello \xF0\x9F\x98\x80!";
  const Ids ids = v.tokenize(text, false, false);
  ASSERT_GT(ids.size(), 4u);
  bool held = false;
  StreamDetokenizer detok(v);
  std::string got;
  for (int32_t id : ids) {
    std::string chunk = *detok.push(id);
    EXPECT_TRUE(vocab::is_valid_utf8(chunk));
    held |= !vocab::is_valid_utf8(v.token_to_piece(id, false));
    got += chunk;
  }
  got += detok.flush();
  EXPECT_TRUE(held) << "no token of the text ends inside a character";
  EXPECT_EQ(got, text);
}

TEST(StreamDetokenizer, SpmLeadingSpaceRule) {
  const Vocab& v = load_vocab("golden/vocab/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(v.add_space_prefix());
  const Ids ids = v.tokenize("Hello world", true, false);  // BOS ▁Hello ▁world
  ASSERT_EQ(ids.front(), v.bos());
  {
    StreamDetokenizer detok(v);  // BOS hidden: it still takes the strip
    std::string got;
    for (int32_t id : ids) got += *detok.push(id);
    EXPECT_EQ(got + detok.flush(), " Hello world");
  }
  {
    StreamDetokenizer detok(v, {.unparse_special = false, .remove_special = true});
    std::string got;
    for (int32_t id : ids) got += *detok.push(id);  // BOS dropped: no strip
    EXPECT_EQ(got + detok.flush(), " Hello world");
  }
  {
    StreamDetokenizer detok(v);
    std::string got;
    for (size_t i = 1; i < ids.size(); ++i) got += *detok.push(ids[i]);
    EXPECT_EQ(got + detok.flush(), "Hello world");
  }
  {
    StreamDetokenizer detok(v, {.unparse_special = true});
    std::string got;
    for (int32_t id : ids) got += *detok.push(id);
    EXPECT_EQ(got + detok.flush(), "<s> Hello world");
  }
}

TEST(StreamDetokenizer, CleanSpacesHoldsASpaceUntilItIsSettled) {
  const Vocab& v = load_vocab("golden/vocab/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(v.clean_spaces());
  for (const char* text : {"etc... ???", "it 's fine , isn 't it ?", "a ' b", "we 're here", "x '", "' '' ' ", "  ?  !  ",
                           "they 've, we 'll, I 'm, he 'd"}) {
    SCOPED_TRACE(text);
    const Ids ids = v.tokenize(text, false, false);
    for (const StreamDetokenizerOptions& opt : kAllOptions) check_stream(v, ids, opt);
    // Each character alone, one token per character.
    Ids chars;
    for (const char c : std::string_view(text)) {
      const Ids one = v.tokenize(std::string(1, c), false, false);
      chars.insert(chars.end(), one.begin(), one.end());
    }
    EXPECT_EQ(check_stream(v, chars, {}), check_stream(v, ids, {}));
  }
}

TEST(StreamDetokenizer, TextComesOutPromptly) {
  // Plain ASCII text is returned as soon as it cannot change: at most three bytes wait (cleanup
  // rules), none without clean_spaces.
  for (const char* path : {"golden/vocab/ggml-vocab-gpt-2.gguf", "golden/vocab/ggml-vocab-qwen2.gguf",
                           "golden/vocab/ggml-vocab-llama-spm.gguf"}) {
    SCOPED_TRACE(path);
    const Vocab& v = load_vocab(path);
    StreamDetokenizer detok(v);
    for (int32_t id : v.tokenize("The quick brown fox jumps over the lazy dog", false, false)) {
      (void)*detok.push(id);
      EXPECT_LE(detok.pending_bytes(), v.clean_spaces() ? 3u : 0u);
    }
  }
}

TEST(StreamDetokenizer, RemoveSpecialDropsOnlyATrailingEos) {
  VocabData d;  // a vocab that adds EOS, so remove_special drops it
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81hi", "!"};
  d.token_types = {2, 3, 3, 1, 1};
  d.bos = 1;
  d.eos = 2;
  d.add_bos = true;
  d.add_eos = true;
  auto small = Vocab::from_data(d);
  ASSERT_TRUE(small.has_value()) << small.status().message();
  const StreamDetokenizerOptions opt{.unparse_special = true, .remove_special = true};
  EXPECT_EQ(check_stream(*small, {1, 3, 2}, opt), " hi");
  EXPECT_EQ(check_stream(*small, {1, 3, 2, 4}, opt), " hi</s>!");
  EXPECT_EQ(check_stream(*small, {3, 2, 2}, opt), "hi</s>");
  EXPECT_EQ(check_stream(*small, {2}, opt), "");
  EXPECT_EQ(check_stream(*small, {1, 2}, opt), "");
  EXPECT_EQ(check_stream(*small, {2, 1, 3}, opt), "</s><s> hi");
}

TEST(StreamDetokenizer, OutOfRangeIdIsAnErrorAndLeavesTheStreamIntact) {
  const Vocab& v = load_vocab("golden/vocab/ggml-vocab-llama-spm.gguf");
  StreamDetokenizer detok(v);
  const Ids bytes = byte_ids(v, "\xE6\x97\xA5");
  EXPECT_EQ(*detok.push(bytes[0]), "");
  for (int32_t bad : {-1, v.n_tokens(), v.n_tokens() + 1000, INT32_MIN, INT32_MAX}) {
    auto r = detok.push(bad);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  }
  EXPECT_EQ(detok.pending_bytes(), 1u);
  EXPECT_EQ(*detok.push(bytes[1]), "");
  EXPECT_EQ(*detok.push(bytes[2]), "\xE6\x97\xA5");
}

TEST(StreamDetokenizer, ResetAndFlushStartANewText) {
  const Vocab& v = load_vocab("golden/vocab/ggml-vocab-llama-spm.gguf");
  const Ids hello = v.tokenize("Hello", false, false);  // ▁Hello
  StreamDetokenizer detok(v);
  std::string a;
  for (int32_t id : hello) a += *detok.push(id);
  EXPECT_EQ(a + detok.flush(), "Hello");
  std::string b;
  for (int32_t id : hello) b += *detok.push(id);  // the first-token strip applies again
  EXPECT_EQ(b + detok.flush(), "Hello");
  (void)*detok.push(v.byte_to_token(0xE6));
  detok.reset();
  EXPECT_EQ(detok.pending_bytes(), 0u);
  EXPECT_EQ(detok.flush(), "");
}

}  // namespace
}  // namespace loom::vocab

namespace loom::vocab {
namespace {

TEST(StreamDetokenizer, ContinuationKeepsTheFirstPiecesLeadingSpace) {
  const Vocab& v = load_vocab("golden/vocab/ggml-vocab-llama-spm.gguf");
  const auto ids = v.tokenize(" Hello world", false, false);
  ASSERT_FALSE(ids.empty());
  StreamDetokenizer fresh(v);
  std::string a = *fresh.push(ids[0]);
  StreamDetokenizerOptions opt;
  opt.continuation = true;
  StreamDetokenizer cont(v, opt);
  std::string b = *cont.push(ids[0]);
  EXPECT_EQ(b, v.token_to_piece(ids[0], false));  // as printed after a prompt
  EXPECT_EQ(" " + a, b);                          // the document start drops one space
}

}  // namespace
}  // namespace loom::vocab
