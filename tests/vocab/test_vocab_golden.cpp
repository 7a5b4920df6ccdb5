// Conformance of the tokenizers with llama.cpp: every tokenization case of the golden files (made
// by real llama.cpp, see shared/golden/README.md and shared/golden/vocab/README.md) must match
// exactly, for the two SPM models and every vocab-only file (SentencePiece, byte-level BPE with
// five pre-tokenizers, WordPiece), plus llama.cpp's upstream .inp/.out tokenizer tests (ids from
// Hugging Face tokenizers) for the vocab-only files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "golden_sets.h"
#include "test_util.h"
#include "vocab/utf8.h"
#include "vocab/vocab.h"

namespace loom::vocab {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

using test::GoldenSet;
using test::kModelSets;
using test::kSynthSets;
using test::kVocabOnlySets;

// The synthetic model whose golden also holds tokenization cases (BERT, WordPiece).
const GoldenSet kSynthTokenizeSets[] = {
    {"synth_bert_tiny", "models/synth-bert-tiny-f32.gguf", "golden/synth-bert-tiny-f32.json"},
};

std::string type_name(VocabType t) {
  switch (t) {
    case VocabType::kSpm: return "spm";
    case VocabType::kBpe: return "bpe";
    case VocabType::kWpm: return "wpm";
    case VocabType::kUgm: return "ugm";
  }
  return "?";
}

auto set_name = [](const auto& info) { return std::string(info.param.name); };

Expected<Vocab> load_vocab(const std::string& rel) {
  LOOM_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::open(test::shared_path(rel)));
  return Vocab::from_gguf(f);
}

json load_json(const std::string& rel) {
  std::ifstream in(test::shared_path(rel));
  EXPECT_TRUE(in.good()) << rel;
  return json::parse(in);
}

std::string ids_str(const Ids& ids) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? ", " : "") << ids[i];
  return os.str() + ']';
}

class GoldenTokenize : public ::testing::TestWithParam<GoldenSet> {};

TEST_P(GoldenTokenize, AllCasesMatchLlamaCpp) {
  const GoldenSet& set = GetParam();
  auto vocab = load_vocab(set.gguf);
  ASSERT_TRUE(vocab.has_value()) << vocab.status().message();
  const Vocab& v = *vocab;
  const json golden = load_json(set.json);
  const json& cases = golden.at("tokenize");
  ASSERT_FALSE(cases.empty());

  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const std::string text = c.at("text").get<std::string>();
    SCOPED_TRACE("case " + std::to_string(i) + ": " + json(text).dump());
    const Ids add_special = v.tokenize(text, true, false);
    const Ids plain = v.tokenize(text, false, false);
    const Ids parse_special = v.tokenize(text, false, true);
    const Ids want_plain = c.at("ids_plain").get<Ids>();
    const Ids want_parse = c.at("ids_parse_special").get<Ids>();
    EXPECT_EQ(ids_str(add_special), ids_str(c.at("ids_add_special").get<Ids>()));
    EXPECT_EQ(ids_str(plain), ids_str(want_plain));
    EXPECT_EQ(ids_str(parse_special), ids_str(want_parse));

    // Detokenize the golden ids, so a tokenization mismatch does not hide a detokenization one.
    auto detok = v.detokenize(want_plain, false, false);
    ASSERT_TRUE(detok.has_value()) << detok.status().message();
    EXPECT_EQ(vocab::sanitize_utf8(*detok), c.at("detokenized_plain").get<std::string>());
    if (c.contains("detokenized_parse_special")) {
      auto detok_special = v.detokenize(want_parse, false, true);
      ASSERT_TRUE(detok_special.has_value()) << detok_special.status().message();
      EXPECT_EQ(vocab::sanitize_utf8(*detok_special), c.at("detokenized_parse_special").get<std::string>());
    }
    if (::testing::Test::HasFailure() && ++failures > 20) FAIL() << "too many failures";
  }
}

class GoldenVocabOnly : public ::testing::TestWithParam<GoldenSet> {};

TEST_P(GoldenVocabOnly, SpecialIdsMatchLlamaCpp) {
  const GoldenSet& set = GetParam();
  auto vocab = load_vocab(set.gguf);
  ASSERT_TRUE(vocab.has_value()) << vocab.status().message();
  const json golden = load_json(set.json);
  const json& g = golden.at("vocab");
  EXPECT_EQ(type_name(vocab->type()), g.at("type").get<std::string>());
  EXPECT_EQ(vocab->bos(), g.at("bos").get<int32_t>());
  EXPECT_EQ(vocab->eos(), g.at("eos").get<int32_t>());
  EXPECT_EQ(vocab->eot(), g.at("eot").get<int32_t>());
  EXPECT_EQ(vocab->sep(), g.at("sep").get<int32_t>());
  EXPECT_EQ(vocab->pad(), g.at("pad").get<int32_t>());
  EXPECT_EQ(vocab->nl(), g.at("nl").get<int32_t>());
  EXPECT_EQ(vocab->add_bos(), g.at("add_bos").get<bool>());
  EXPECT_EQ(vocab->add_eos(), g.at("add_eos").get<bool>());
  EXPECT_EQ(vocab->add_sep(), g.at("add_sep").get<bool>());
  EXPECT_EQ(vocab->n_tokens(), golden.at("n_vocab").get<int32_t>());
}

class GoldenModel : public ::testing::TestWithParam<GoldenSet> {};

TEST_P(GoldenModel, RunsPromptIdsAndGreedyText) {
  const GoldenSet& set = GetParam();
  auto vocab = load_vocab(set.gguf);
  ASSERT_TRUE(vocab.has_value()) << vocab.status().message();
  const json golden = load_json(set.json);
  ASSERT_FALSE(golden.at("runs").empty());
  for (const json& run : golden.at("runs")) {
    const std::string prompt = run.at("prompt").get<std::string>();
    SCOPED_TRACE(prompt);
    EXPECT_EQ(ids_str(vocab->tokenize(prompt, true, false)), ids_str(run.at("prompt_ids").get<Ids>()));
    auto text = vocab->detokenize(run.at("greedy_ids").get<Ids>(), false, false);
    ASSERT_TRUE(text.has_value()) << text.status().message();
    EXPECT_EQ(vocab::sanitize_utf8(*text), run.at("greedy_text").get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTokenize, ::testing::ValuesIn(kModelSets), set_name);
INSTANTIATE_TEST_SUITE_P(VocabOnly, GoldenTokenize, ::testing::ValuesIn(kVocabOnlySets), set_name);
INSTANTIATE_TEST_SUITE_P(VocabOnly, GoldenVocabOnly, ::testing::ValuesIn(kVocabOnlySets), set_name);
INSTANTIATE_TEST_SUITE_P(Models, GoldenModel, ::testing::ValuesIn(kModelSets), set_name);
INSTANTIATE_TEST_SUITE_P(Synth, GoldenTokenize, ::testing::ValuesIn(kSynthTokenizeSets), set_name);

// The prompts of the synthetic models' runs.
class GoldenPromptIds : public ::testing::TestWithParam<GoldenSet> {};

TEST_P(GoldenPromptIds, MatchLlamaCpp) {
  const GoldenSet& set = GetParam();
  auto vocab = load_vocab(set.gguf);
  ASSERT_TRUE(vocab.has_value()) << vocab.status().message();
  const json golden = load_json(set.json);
  ASSERT_FALSE(golden.at("runs").empty());
  for (const json& run : golden.at("runs")) {
    const std::string prompt = run.at("prompt").get<std::string>();
    SCOPED_TRACE(prompt);
    EXPECT_EQ(ids_str(vocab->tokenize(prompt, true, false)), ids_str(run.at("prompt_ids").get<Ids>()));
  }
}

INSTANTIATE_TEST_SUITE_P(Synth, GoldenPromptIds, ::testing::ValuesIn(kSynthSets), set_name);

// llama.cpp's own tokenizer tests: NAME.gguf.inp holds cases separated by
// "\n__ggml_vocab_test__\n" (most files end with one; gemma-4's does not: a final separator
// closes the last case, as llama.cpp's test-tokenizer-0 reads them), NAME.gguf.out one line of
// ids per case, tokenized without BOS and without parsing special tokens.
class UpstreamVocabTest : public ::testing::TestWithParam<const char*> {};

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(sep, pos)) != std::string::npos; pos = hit + sep.size()) {
    parts.push_back(s.substr(pos, hit - pos));
  }
  parts.push_back(s.substr(pos));
  return parts;
}

// One vocabulary's .inp/.out cases (paths without the suffixes).
void check_upstream_cases(const Vocab& v, const std::string& inp, const std::string& out) {
  std::vector<std::string> inputs = split(test::read_text_file(inp), "\n__ggml_vocab_test__\n");
  std::vector<std::string> outputs = split(test::read_text_file(out), "\n");
  if (inputs.back().empty()) inputs.pop_back();
  ASSERT_EQ(outputs.back(), "");
  outputs.pop_back();
  ASSERT_EQ(inputs.size(), outputs.size());
  ASSERT_GT(inputs.size(), 40u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + json(inputs[i]).dump());
    Ids want;
    std::istringstream line(outputs[i]);
    for (int32_t id; line >> id;) want.push_back(id);
    EXPECT_EQ(ids_str(v.tokenize(inputs[i], false, false)), ids_str(want));
  }
}

TEST_P(UpstreamVocabTest, MatchesHuggingFaceIds) {
  const std::string base = std::string("golden/vocab/") + GetParam();
  auto vocab = load_vocab(base);
  ASSERT_TRUE(vocab.has_value()) << vocab.status().message();
  check_upstream_cases(*vocab, test::shared_path(base + ".inp"), test::shared_path(base + ".out"));
}

// The same tests for every vocabulary in llama.cpp's source (its models/ folder), where the source
// is on this machine: $LOOM_LLAMA_CPP_SRC, else ~/.cache/loom-llama-cpp/src, where
// ../shared/tools/build-llama-cpp.sh and scripts/fetch-llama-cpp-src.sh put it (from the npm
// package node-llama-cpp bundles it in; test::llama_cpp_src()). Skipped, saying so, where it is not.
using test::llama_cpp_src;

class LlamaCppVocabTest : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaCppVocabTest, MatchesLlamaCppIds) {
  const std::string base = llama_cpp_src() + "/models/ggml-vocab-" + GetParam() + ".gguf";
  if (!std::ifstream(base + ".inp").good()) {
    GTEST_SKIP() << base << ".inp not found: llama.cpp's source is fetched by scripts/fetch-llama-cpp-src.sh "
                 << "(or set LOOM_LLAMA_CPP_SRC)";
  }
  auto f = gguf::GgufFile::open(base);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  auto vocab = Vocab::from_gguf(*f);
  ASSERT_TRUE(vocab.has_value()) << vocab.status().message();
  check_upstream_cases(*vocab, base + ".inp", base + ".out");
}

INSTANTIATE_TEST_SUITE_P(LlamaCppModels, LlamaCppVocabTest,
                         // Every ggml-vocab-* with .inp/.out in llama.cpp's models/.
                         ::testing::Values("bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4",
                                           "gpt-2", "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact",
                                           "starcoder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

INSTANTIATE_TEST_SUITE_P(AllFamilies, UpstreamVocabTest,
                         ::testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf", "llama3-bpe.gguf",
                                           "ggml-vocab-gpt-2.gguf", "ggml-vocab-qwen2.gguf",
                                           "ggml-vocab-deepseek-coder.gguf", "ggml-vocab-falcon.gguf",
                                           "bert-base-uncased.gguf", "ggml-vocab-bert-bge.gguf"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace loom::vocab
