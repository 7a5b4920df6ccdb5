// llama-server's native request planning (tools/server/request.cpp): prompts of /completion and
// the fill-in-the-middle layout of /infill, with a tokenizer that maps each byte to a token id.
#include <gtest/gtest.h>

#include "json_fields.h"
#include "request.h"

using namespace loom::server;

namespace {

// Byte b -> id 1000 + b; BOS 1; FIM tokens 11..15.
Tokenizer bytes_tokenizer(bool fim = true, bool repo = true) {
  Tokenizer t;
  t.tokenize = [](const std::string& s, bool add_special) {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(1);
    for (unsigned char c : s) ids.push_back(1000 + c);
    return ids;
  };
  t.detokenize = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids)
      if (id >= 1000) s += char(id - 1000);
    return s;
  };
  t.bos = 1;
  t.add_bos = true;
  if (fim) t.fim_pre = 11, t.fim_suf = 12, t.fim_mid = 13;
  if (repo) t.fim_rep = 14, t.fim_sep = 15;
  return t;
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }
std::vector<int32_t> bytes(const std::string& s) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(1000 + c);
  return v;
}
std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> v;
  for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
  return v;
}

}  // namespace

TEST(NativePlan, PromptShapes) {
  const Tokenizer tok = bytes_tokenizer();
  // A string stays a string (the engine tokenizes it with BOS); ids stay ids.
  NativePlan p = plan_native(json::parse(R"({"prompt": "ab", "n_predict": 3, "stream": true})"), -1, tok);
  ASSERT_EQ(p.requests.size(), 1u);
  EXPECT_EQ(p.requests[0]["prompt"], "ab");
  EXPECT_FALSE(p.requests[0].contains("stream"));
  EXPECT_TRUE(p.stream);
  EXPECT_EQ(p.prompt_texts[0], "ab");
  // Mixed ids and strings are one prompt: BOS only for a string that comes first.
  p = plan_native(json::parse(R"({"prompt": ["a", 7, "b"]})"), -1, tok);
  ASSERT_EQ(p.requests.size(), 1u);
  EXPECT_EQ(ids_of(p.requests[0]["prompt"]), cat({{1}, bytes("a"), {7}, bytes("b")}));
  p = plan_native(json::parse(R"({"prompt": [7, "b"]})"), -1, tok);
  EXPECT_EQ(ids_of(p.requests[0]["prompt"]), cat({{7}, bytes("b")}));
  // A list of prompts: one request each; prompt_string objects are their string.
  p = plan_native(json::parse(R"({"prompt": ["x", [5, 6], {"prompt_string": "y"}]})"), -1, tok);
  ASSERT_EQ(p.requests.size(), 3u);
  EXPECT_EQ(p.requests[0]["prompt"], "x");
  EXPECT_EQ(ids_of(p.requests[1]["prompt"]), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(p.requests[2]["prompt"], "y");
  // Bad shapes are 400s naming the field; multimodal data is a 501.
  for (const char* bad : {R"({})", R"({"prompt": 3})", R"({"prompt": [[1, {}]]})", R"({"prompt": [{"x": 1}]})",
                          R"({"prompt": ["a", 1, null]})"}) {
    try {
      plan_native(json::parse(bad), -1, tok);
      ADD_FAILURE() << bad;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status, 400) << bad;
      EXPECT_NE(e.message.find("prompt"), std::string::npos) << e.message;
    }
  }
  try {
    plan_native(json::parse(R"({"prompt": {"prompt_string": "a", "multimodal_data": ["x"]}})"), -1, tok);
    ADD_FAILURE();
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 501);
  }
}

TEST(NativePlan, InfillLayout) {
  const Tokenizer tok = bytes_tokenizer();
  const json body = json::parse(R"({"input_prefix": "pre", "input_suffix": "suf", "prompt": "p",
                                    "input_extra": [{"filename": "f.c", "text": "x"}], "n_predict": 4})");
  NativePlan p = plan_infill(body, -1, tok, 4096, 512);
  ASSERT_EQ(p.requests.size(), 1u);
  EXPECT_FALSE(p.requests[0].contains("input_prefix"));
  const auto want = cat({{14},
                         bytes("myproject\n"),
                         {15},
                         bytes("f.c\n"),
                         bytes("x"),
                         {15},
                         bytes("filename\n"),
                         {1, 11},
                         bytes("pre"),
                         bytes("p"),
                         {12},
                         bytes("suf"),
                         {13}});
  EXPECT_EQ(ids_of(p.requests[0]["prompt"]), want);
  // Without FIM_REP / FIM_SEP: a snippet separator before each chunk, no file markers.
  const Tokenizer plain = bytes_tokenizer(true, false);
  p = plan_infill(body, -1, plain, 4096, 512);
  EXPECT_EQ(
      ids_of(p.requests[0]["prompt"]),
      cat({bytes("\n\n--- snippet ---\n\n"), bytes("x"), {1, 11}, bytes("pre"), bytes("p"), {12}, bytes("suf"), {13}}));
  // A small batch keeps the prefix's end (3/4 of it) and what is left of a quarter for the suffix;
  // no room in the context: no extra context.
  const json longer = json::parse(R"({"input_prefix": "0123456789", "input_suffix": "abcdefgh", "prompt": "",
                                      "input_extra": [{"text": "zzz"}]})");
  p = plan_infill(longer, 100, tok, 16, 12);
  EXPECT_EQ(ids_of(p.requests[0]["prompt"]), cat({{1, 11}, bytes("123456789"), {12}, bytes("a"), {13}}));
  // Errors: a vocabulary without FIM tokens (501), missing fields, bad types (400).
  try {
    plan_infill(body, -1, bytes_tokenizer(false, false), 4096, 512);
    ADD_FAILURE();
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 501);
    EXPECT_NE(e.message.find("Infill is not supported"), std::string::npos);
  }
  for (const char* bad :
       {R"({"input_suffix": "s"})", R"({"input_prefix": "s"})", R"({"input_prefix": "a", "input_suffix": "b", "prompt": 1})",
        R"({"input_prefix": "a", "input_suffix": "b", "input_extra": {}})",
        R"({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": 1}]})"}) {
    try {
      plan_infill(json::parse(bad), -1, tok, 4096, 512);
      ADD_FAILURE() << bad;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status, 400) << bad;
    }
  }
}
