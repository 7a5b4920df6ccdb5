// `loom generate` with the sampler flags, --grammar-file and --json-schema (end to end).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "test_util.h"

namespace loom::test {
namespace {

std::string write_temp(const std::string& text, const char* suffix) {
  std::string path = std::string("/tmp/loom_sample_") + std::to_string(getpid()) + suffix;
  std::ofstream(path) << text;
  return path;
}

std::string stories() { return quote(shared_path("models/stories260K.gguf")); }

TEST(GenerateCli, JsonSchemaPrintsOnlyMatchingJson) {
  const std::string schema = write_temp(
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
          "age": {"type": "integer", "minimum": 1, "maximum": 99},
          "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name", "age", "tags"]})",
      "_schema.json");
  for (int seed : {1, 2, 3}) {
    auto r = run_loom("generate -m " + stories() + " -p 'Once upon a time' -n 300 --seed " + std::to_string(seed) +
                      " --json-schema " + quote(schema));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
    EXPECT_TRUE(j["name"].is_string());
    EXPECT_GE(j["age"].get<int>(), 1);
    EXPECT_LE(j["age"].get<int>(), 99);
    EXPECT_LE(j["tags"].size(), 3u);
  }
  std::remove(schema.c_str());
}

TEST(GenerateCli, GrammarFileConstrainsTheText) {
  const std::string g = write_temp("root ::= \"The \" (\"cat\" | \"dog\") \" sat\" [.!]\n", ".gbnf");
  auto r =
      run_loom("generate -m " + stories() + " -p Once -n 50 --seed 1 --temp 1.5 --grammar-file " + quote(g) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string text = nlohmann::json::parse(r.out)["text"];
  EXPECT_TRUE(text == "The cat sat." || text == "The cat sat!" || text == "The dog sat." || text == "The dog sat!") << text;
  std::remove(g.c_str());
  const std::string bad = write_temp("root ::= \"x\" foo\n", "_bad.gbnf");
  r = run_loom("generate -m " + stories() + " -p Once --grammar-file " + quote(bad));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("grammar:1:14: undefined rule 'foo'"), std::string::npos) << r.err;
  std::remove(bad.c_str());
  r = run_loom("generate -m " + stories() + " -p Once --grammar-file /nonexistent.gbnf");
  EXPECT_EQ(r.exit_code, 1);
}

TEST(GenerateCli, SamplerFlagsAreAcceptedAndReproducible) {
  const std::string args = "generate -m " + stories() +
                           " -p 'Once upon a time' -n 24 --seed 7 --temp 1.2 --top-k 20 --top-p 0.9 --min-p 0.02"
                           " --typical-p 0.95 --repeat-penalty 1.1 --repeat-last-n 32 --frequency-penalty 0.1"
                           " --presence-penalty 0.1 --dry-multiplier 0.8 --xtc-probability 0.5 --xtc-threshold 0.1"
                           " --dynatemp-range 0.3";
  auto a = run_loom(args), b = run_loom(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  for (const char* m : {"--mirostat 1", "--mirostat 2 --mirostat-lr 0.2 --mirostat-ent 3"}) {
    auto r = run_loom("generate -m " + stories() + " -p 'Once upon a time' -n 16 --seed 7 " + m);
    EXPECT_EQ(r.exit_code, 0) << m << ": " << r.err;
  }
  EXPECT_EQ(run_loom("generate -m " + stories() + " -p hi --mirostat 3").exit_code, 2);
  EXPECT_EQ(run_loom("generate -m " + stories() + " -p hi --min-p 2").exit_code, 2);
  EXPECT_EQ(run_loom("generate -m " + stories() + " -p hi --samplers bogus").exit_code, 1);
}

}  // namespace
}  // namespace loom::test
