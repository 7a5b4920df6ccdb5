// Every BPE pre-tokenizer name llama.cpp knows, against llama.cpp: tests/data/vocab-pre/goldens.json
// holds llama.cpp's tokenization of tests/data/vocab-pre/cases.txt (hostile cases: scripts,
// emoji sequences, digit runs, whitespace mixes, contractions, code, invalid UTF-8) under each
// name, with a vocabulary made from one of llama.cpp's own vocab files (llama-bpe's, or
// Gemma 4's for the SentencePiece-style presets) by tools/dev/make_vocab_pre (see the README
// there). Here the same vocabulary is made in memory from the same file. Those files come from
// llama.cpp's source tree (test::llama_cpp_src()); without it the tests skip, saying so.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "test_util.h"
#include "vocab/bpe_tokenizer.h"
#include "vocab/vocab.h"

namespace loom::vocab {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// cases.txt as loom-ref-dump tokenize reads it.
std::vector<std::string> load_cases() {
  const std::string all = read_file(test::data_dir() + "/vocab-pre/cases.txt");
  std::vector<std::string> cases;
  const std::string sep = "\n__case__\n";
  size_t at = 0;
  for (;;) {
    const size_t next = all.find(sep, at);
    if (next == std::string::npos) {
      std::string last = all.substr(at);
      if (!last.empty() && last.back() == '\n') last.pop_back();
      cases.push_back(last);
      break;
    }
    cases.push_back(all.substr(at, next - at));
    at = next + sep.size();
  }
  return cases;
}

const json& goldens() {
  static const json g = json::parse(read_file(test::data_dir() + "/vocab-pre/goldens.json"));
  return g;
}

std::string ids_str(const Ids& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

std::string hex(const std::string& s) {
  static constexpr char d[] = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += d[c >> 4], h += d[c & 15];
  return h;
}

// The base vocabularies' data, read once.
const VocabData* base_data(const std::string& file) {
  static std::map<std::string, std::unique_ptr<VocabData>> cache;
  auto it = cache.find(file);
  if (it != cache.end()) return it->second.get();
  std::unique_ptr<VocabData> data;
  const std::string path = test::llama_cpp_src() + "/models/" + file;
  if (std::ifstream(path).good()) {
    auto f = gguf::GgufFile::open(path);
    if (f.has_value()) {
      auto d = Vocab::read_data(*f);
      if (d.has_value()) data = std::make_unique<VocabData>(std::move(*d));
    }
  }
  return cache.emplace(file, std::move(data)).first->second.get();
}

struct Entry {
  std::string name;
  const json* group;
};

std::vector<Entry> entries() {
  std::vector<Entry> out;
  for (const json& g : goldens().at("groups")) {
    for (const json& n : g.at("names")) out.push_back({n.get<std::string>(), &g});
  }
  return out;
}

class PreTypes : public ::testing::TestWithParam<Entry> {};

TEST_P(PreTypes, MatchLlamaCpp) {
  const Entry& e = GetParam();
  const json& g = *e.group;
  const std::string base = g.at("base").get<std::string>();
  const VocabData* bd = base_data(base);
  if (bd == nullptr) {
    GTEST_SKIP()
        << test::llama_cpp_src() << "/models/" << base
        << " not found: llama.cpp's source is fetched by scripts/fetch-llama-cpp-src.sh (or set LOOM_LLAMA_CPP_SRC)";
  }
  // make_vocab_pre's changes.
  VocabData d = *bd;
  d.model = g.at("model").get<std::string>();
  d.pre = e.name;
  d.add_bos.reset();
  d.add_eos.reset();
  d.add_sep.reset();
  auto v = Vocab::from_data(std::move(d));
  ASSERT_TRUE(v.has_value()) << v.status().message();

  const std::vector<std::string> cases = load_cases();
  // Plain ids: the group's own, or its reference group's with the group's differences.
  json plain = g.at("plain");
  if (g.contains("plain_like")) {
    json full = goldens().at("groups").at(g.at("plain_like").get<size_t>()).at("plain");
    for (const auto& [index, ids] : plain.items()) full[std::stoul(index)] = ids;
    plain = std::move(full);
  }
  ASSERT_EQ(cases.size(), plain.size());
  const json& add_special = g.at("add_special");
  const json& parse_special = g.at("parse_special");
  const json& detok = g.at("detokenized_hex");
  int failures = 0;
  for (size_t i = 0; i < cases.size() && failures < 10; ++i) {
    const std::string key = std::to_string(i);
    SCOPED_TRACE("case " + key + ": " + json(cases[i]).dump(-1, ' ', false, json::error_handler_t::replace));
    const Ids p = v->tokenize(cases[i], false, false);
    const Ids a = v->tokenize(cases[i], true, false);
    const Ids s = v->tokenize(cases[i], true, true);
    const std::string want_plain = plain[i].get<std::string>();
    const std::string want_add = add_special.contains(key) ? add_special[key].get<std::string>() : want_plain;
    const std::string want_parse = parse_special.contains(key) ? parse_special[key].get<std::string>() : want_add;
    const int before = ::testing::Test::HasFailure();
    EXPECT_EQ(ids_str(p), want_plain);
    EXPECT_EQ(ids_str(a), want_add);
    EXPECT_EQ(ids_str(s), want_parse);
    // Detokenization of the golden ids (clean_spaces, escaped spaces, byte tokens).
    Ids golden_ids;
    std::istringstream line(want_plain);
    for (int32_t id; line >> id;) golden_ids.push_back(id);
    auto text = v->detokenize(golden_ids, false, false);
    ASSERT_TRUE(text.has_value()) << text.status().message();
    EXPECT_EQ(hex(*text), detok.contains(key) ? detok[key].get<std::string>() : hex(cases[i]));
    if (::testing::Test::HasFailure() && !before) ++failures;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, PreTypes, ::testing::ValuesIn(entries()), [](const auto& info) {
  std::string name = info.param.name + "_" + info.param.group->at("model").template get<std::string>();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
});

// Pre-tokens: llama.cpp's own splitting (unicode_regex_split) of every case with each preset's
// regex list (tests/data/vocab-pre/pretokens.json), which ids cannot always show (a boundary
// that no merge crosses). Needs no vocabulary.
const json& pretokens() {
  static const json g = json::parse(read_file(test::data_dir() + "/vocab-pre/pretokens.json"));
  return g;
}

std::vector<Entry> pretoken_entries() {
  std::vector<Entry> out;
  for (const json& g : pretokens().at("groups")) {
    for (const json& n : g.at("names")) out.push_back({n.get<std::string>(), &g});
  }
  return out;
}

class PreTokens : public ::testing::TestWithParam<Entry> {};

TEST_P(PreTokens, MatchLlamaCpp) {
  const Entry& e = GetParam();
  auto t = detail::BpeTokenizer::create(e.name, {});
  ASSERT_TRUE(t.has_value()) << t.status().message();
  const std::vector<std::string> cases = load_cases();
  const json& lengths = e.group->at("lengths");
  ASSERT_EQ(cases.size(), lengths.size());
  int failures = 0;
  for (size_t i = 0; i < cases.size() && failures < 10; ++i) {
    std::string got;
    std::string pieces;
    for (const std::string& w : (*t)->pre_tokenize(cases[i])) {
      const std::string raw = (*t)->preset().byte_encode ? detail::byte_level_decode(w) : w;
      got += (got.empty() ? "" : " ") + std::to_string(raw.size());
      pieces += "[" + raw + "]";
    }
    // llama.cpp keeps an empty match (superbpe's lookahead) as an empty pre-token, which has no
    // tokens; loom does not make one.
    std::string want;
    std::istringstream in(lengths[i].get<std::string>());
    for (std::string len; in >> len;) {
      if (len != "0") want += (want.empty() ? "" : " ") + len;
    }
    EXPECT_EQ(got, want) << "case " << i << ": " << pieces;
    if (got != want) ++failures;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, PreTokens, ::testing::ValuesIn(pretoken_entries()), [](const auto& info) {
  std::string name = info.param.name;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
});

// The goldens cover every name llama.cpp's source names, and loom accepts exactly those.
TEST(PreTypeNames, SameAsLlamaCpp) {
  std::set<std::string> golden_names;
  for (const Entry& e : entries()) golden_names.insert(e.name);
  std::set<std::string> loom_names;
  for (std::string_view n : detail::bpe_pre_tokenizer_names()) loom_names.insert(std::string(n));
  EXPECT_EQ(loom_names, golden_names);
  // Every preset has its pre-token golden.
  std::set<std::string> presets, pretoken_names;
  for (std::string_view n : detail::bpe_preset_names()) presets.insert(std::string(n));
  for (const Entry& e : pretoken_entries()) pretoken_names.insert(e.name);
  EXPECT_EQ(presets, pretoken_names);

  const std::string src = test::llama_cpp_src() + "/src/llama-vocab.cpp";
  const std::string text = read_file(src);
  if (text.empty()) GTEST_SKIP() << src << " not found (llama.cpp's source; see scripts/fetch-llama-cpp-src.sh)";
  std::set<std::string> llama_names;
  const std::regex re("tokenizer_pre == \"([^\"]*)\"");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    llama_names.insert((*it)[1].str());
  }
  EXPECT_GE(llama_names.size(), 90u);
  EXPECT_EQ(loom_names, llama_names);
}

}  // namespace
}  // namespace loom::vocab
