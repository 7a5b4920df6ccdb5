// Tool calls: format detection for every real template, parsing each format's output (single,
// parallel, leading text, <think>, malformed and truncated calls), the GBNF grammars that force a
// call (checked with loom's matcher: correct calls accepted, wrong ones refused, and random
// sampling over a real vocabulary always yields a call that parses), response_format grammars and
// the per-format stop strings.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <random>
#include <set>

#include "chat/chat_request.h"
#include "chat/tool_calls.h"
#include "model/model.h"
#include "sample/grammar.h"
#include "sample/sampler.h"
#include "test_util.h"

namespace loom::test {
namespace {

using chat::ParsedMessage;
using chat::ToolCall;
using chat::ToolCallFormat;
using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 12},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
      "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "description": "Adds two integers.",
    "parameters": {"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
  {"type": "function", "function": {"name": "ping", "description": "No arguments."}}
])");

// --- detection ---------------------------------------------------------------------------------

TEST(ToolCallFormat, DetectedForEveryTemplate) {
  const std::vector<std::pair<std::string, ToolCallFormat>> expect = {
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama31},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"HuggingFaceTB-SmolLM3-3B.jinja", ToolCallFormat::kHermes},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolCallFormat::kMistralArgs},
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", ToolCallFormat::kGeneric},
      {"meetkai-functionary-medium-v3.2.jinja", ToolCallFormat::kGeneric},
      {"ibm-granite-granite-3.3-2B-Instruct.jinja", ToolCallFormat::kGeneric},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", ToolCallFormat::kGeneric},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::kGeneric},
      {"google-gemma-3-it.jinja", ToolCallFormat::kGeneric},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ToolCallFormat::kGeneric},
  };
  const std::string dir = shared_path("golden/chat-templates");
  ASSERT_FALSE(dir.empty());
  for (const auto& [file, fmt] : expect) {
    const std::string src = read_text_file(dir + "/" + file);
    ASSERT_FALSE(src.empty()) << file;
    EXPECT_EQ(chat::detect_tool_call_format(src), fmt)
        << file << ": got " << chat::tool_call_format_name(chat::detect_tool_call_format(src));
  }
  EXPECT_EQ(chat::detect_tool_call_format(chat::chatml_template_source()), ToolCallFormat::kHermes);
  EXPECT_EQ(chat::detect_tool_call_format(""), ToolCallFormat::kGeneric);
  EXPECT_STREQ(chat::tool_call_format_name(ToolCallFormat::kMistralArgs), "mistral-args");
}

// This year's templates, from llama.cpp's models/templates/ (skipped without its source).
std::string llama_cpp_template(const std::string& name) {
  std::ifstream in(llama_cpp_src() + "/models/templates/" + name, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolCallFormat, DetectedForThisYearsTemplates) {
  const std::vector<std::pair<std::string, ToolCallFormat>> expect = {
      {"Qwen3.5-4B.jinja", ToolCallFormat::kQwenXml},
      {"Qwen3-Coder.jinja", ToolCallFormat::kQwenXml},
      {"LFM2.5-Instruct.jinja", ToolCallFormat::kLfm2},             // "List of tools: [" (LFM2.5)
      {"LFM2.5-8B-A1B.jinja", ToolCallFormat::kLfm2},               // ... and writes calls back
      {"LFM2-8B-A1B.jinja", ToolCallFormat::kLfm2},                 // <|tool_list_start|> (LFM2)
      {"HuggingFaceTB-SmolLM3-3B.jinja", ToolCallFormat::kHermes},  // no tool markers: by its name
      {"ibm-granite-granite-4.0.jinja", ToolCallFormat::kHermes},
      {"ibm-granite-granite-4.1.jinja", ToolCallFormat::kHermes},
      {"google-gemma-4-31B-it.jinja", ToolCallFormat::kGemma4},  // '<|tool_call>call:'
      {"google-gemma-4-31B-it-interleaved.jinja", ToolCallFormat::kGemma4},
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", ToolCallFormat::kMistralArgs},
  };
  for (const auto& [file, fmt] : expect) {
    const std::string src = llama_cpp_template(file);
    if (src.empty()) {
      GTEST_SKIP() << llama_cpp_src() << "/models/templates/" << file
                   << " not found: scripts/fetch-llama-cpp-src.sh fetches llama.cpp's source";
    }
    EXPECT_EQ(chat::detect_tool_call_format(src), fmt)
        << file << ": got " << chat::tool_call_format_name(chat::detect_tool_call_format(src));
  }
  EXPECT_STREQ(chat::tool_call_format_name(ToolCallFormat::kLfm2), "lfm2");
  EXPECT_STREQ(chat::tool_call_format_name(ToolCallFormat::kGemma4), "gemma4");
}

// --- parsing -----------------------------------------------------------------------------------

ParsedMessage parse(ToolCallFormat f, std::string_view text) { return chat::parse_assistant_output(f, text, true); }

void expect_call(const ToolCall& c, const std::string& name, const std::string& args) {
  EXPECT_EQ(c.name, name);
  EXPECT_EQ(json::parse(c.arguments), json::parse(args)) << c.arguments;
  EXPECT_EQ(c.arguments, json::parse(c.arguments).dump()) << "not compact";
  EXPECT_FALSE(c.id.empty());
}

TEST(ParseToolCalls, Hermes) {
  auto m = parse(ToolCallFormat::kHermes,
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_TRUE(m.tool_calls[0].id.starts_with("call_")) << m.tool_calls[0].id;
  EXPECT_EQ(m.tool_calls[0].id.size(), 29u);

  // Parallel calls, leading text, arguments given as a JSON string.
  m = parse(ToolCallFormat::kHermes,
            "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}\n</tool_call>");
  EXPECT_EQ(m.content, "Let me check both.");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  expect_call(m.tool_calls[0], "get_weather", R"({"city":"Paris"})");
  expect_call(m.tool_calls[1], "add", R"({"a":1,"b":2})");
  EXPECT_NE(m.tool_calls[0].id, m.tool_calls[1].id);

  // Qwen3 thinks first.
  m = parse(ToolCallFormat::kHermes,
            "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"ping\", \"arguments\": "
            "{}}\n</tool_call>");
  EXPECT_EQ(m.reasoning_content, "The user wants the weather.");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "ping", "{}");

  // A reply without calls is content, reasoning still split off.
  m = parse(ToolCallFormat::kHermes, "<think>hmm</think>\n\nIt is sunny.");
  EXPECT_EQ(m.reasoning_content, "hmm");
  EXPECT_EQ(m.content, "It is sunny.");
  EXPECT_TRUE(m.tool_calls.empty());

  // <function=name>{...}</function> and a bare JSON call.
  m = parse(ToolCallFormat::kHermes, "<function=add>{\"a\": 2, \"b\": 3}</function>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "add", R"({"a":2,"b":3})");
  m = parse(ToolCallFormat::kHermes, " {\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "add", R"({"a":2,"b":3})");

  // The output may end where a server stopped, before </tool_call>.
  m = parse(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n");
  ASSERT_EQ(m.tool_calls.size(), 1u);
}

TEST(ParseToolCalls, HermesMalformedAndTruncatedStayContent) {
  for (const std::string text : {
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",              // truncated
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {city: Paris}}\n</tool_call>",  // not JSON
           "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                                        // no name
           "<tool_call>\n{\"name\": \"f\", \"arguments\": 5}\n</tool_call>",  // arguments not an object
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call",  // closing tag cut
           "<tool_call>",
           "{\"name\": \"f\"",
       }) {
    auto m = parse(ToolCallFormat::kHermes, text);
    EXPECT_TRUE(m.tool_calls.empty()) << text;
    EXPECT_EQ(m.content, text);
  }
  // Calls before a malformed one are kept; the rest becomes content.
  auto m = parse(
      ToolCallFormat::kHermes,
      "Sure.\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"argu");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "ping");
  EXPECT_EQ(m.content, "Sure.\n<tool_call>\n{\"name\": \"add\", \"argu");
  // Text after the calls is kept too.
  m = parse(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>\nDone.");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.content, "Done.");
}

TEST(ParseToolCalls, Llama31) {
  auto m = parse(ToolCallFormat::kLlama31, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(m.content, "");

  // Llama 3.2 writes "type": "function" first; the end-of-message token may be left in the text.
  m = parse(ToolCallFormat::kLlama31,
            "{\"type\": \"function\", \"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}<|eom_id|>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "add", R"({"a":1,"b":2})");

  // After <|python_tag|>, with text before it; "arguments" is accepted for "parameters"; several
  // calls separated by ';'.
  m = parse(ToolCallFormat::kLlama31,
            "Checking.<|python_tag|>{\"name\": \"ping\", \"arguments\": {}}; {\"name\": \"add\", \"parameters\": "
            "{\"a\": 1, \"b\": 2}}<|eot_id|>");
  EXPECT_EQ(m.content, "Checking.");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  expect_call(m.tool_calls[0], "ping", "{}");
  expect_call(m.tool_calls[1], "add", R"({"a":1,"b":2})");

  // Builtin tools and raw code.
  m = parse(ToolCallFormat::kLlama31, "<|python_tag|>brave_search.call(query=\"weather in Paris\", count=3)<|eom_id|>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "brave_search", R"({"query":"weather in Paris","count":3})");
  m = parse(ToolCallFormat::kLlama31, "<|python_tag|>print(2 + 2)");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "python", R"j({"code":"print(2 + 2)"})j");

  // JSON that is not a call, JSON in the middle of a reply, truncated JSON: content.
  for (const std::string text : {"{\"answer\": 42}", "The call would be {\"name\": \"ping\", \"parameters\": {}}",
                                 "{\"name\": \"ping\", \"parameters\": {"}) {
    m = parse(ToolCallFormat::kLlama31, text);
    EXPECT_TRUE(m.tool_calls.empty()) << text;
    EXPECT_EQ(m.content, text);
  }
  m = parse(ToolCallFormat::kLlama31, "<|python_tag|>{\"name\": \"ping\", \"parameters\": {");
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "<|python_tag|>{\"name\": \"ping\", \"parameters\": {");
}

TEST(ParseToolCalls, Mistral) {
  auto m =
      parse(ToolCallFormat::kMistral,
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]</s>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(m.tool_calls[0].id, "abcDEF123");

  // Parallel, without ids (generated: 9 alphanumerics, as Nemo's template requires), leading text.
  m = parse(ToolCallFormat::kMistral,
            "On it. [TOOL_CALLS] [{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"add\", \"arguments\": {\"a\": 1, "
            "\"b\": 2}}]");
  EXPECT_EQ(m.content, "On it.");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  for (const ToolCall& c : m.tool_calls) {
    EXPECT_EQ(c.id.size(), 9u) << c.id;
    EXPECT_TRUE(std::all_of(c.id.begin(), c.id.end(), [](char ch) { return std::isalnum((unsigned char)ch); })) << c.id;
  }
  EXPECT_NE(m.tool_calls[0].id, m.tool_calls[1].id);

  // Detokenized without special tokens the marker is gone.
  m = parse(ToolCallFormat::kMistral, "[{\"name\": \"ping\", \"arguments\": {}}]");
  ASSERT_EQ(m.tool_calls.size(), 1u);

  for (const std::string text : {"[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}", "[TOOL_CALLS][]",
                                 "[TOOL_CALLS][{\"arguments\": {}}]", "[TOOL_CALLS]"}) {
    m = parse(ToolCallFormat::kMistral, text);
    EXPECT_TRUE(m.tool_calls.empty()) << text;
    EXPECT_EQ(m.content, text);
  }
}

TEST(ParseToolCalls, Lfm2) {
  auto m = parse(ToolCallFormat::kLfm2, "<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|>");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_TRUE(m.tool_calls[0].id.starts_with("call_"));

  // Parallel calls after text, Python literals (single quotes, True / None, dicts with single-quoted
  // keys, lists) and JSON ones, escapes of both kinds, no arguments.
  m = parse(ToolCallFormat::kLfm2,
            "Checking both.<|tool_call_start|>[book(city='Zürich', nights=3, budget=1250.5, ok=True, note=None, "
            "extras=['a', \"b\"], who={'name': 'Zoë \\'Z\\'', \"age\": 34}, j=true, n=null, e=1e3), "
            "ping(), say(t=\"line\\none \\u00e9 \\ud83d\\ude00 \\\"q\\\"\")]<|tool_call_end|>");
  EXPECT_EQ(m.content, "Checking both.");
  ASSERT_EQ(m.tool_calls.size(), 3u);
  expect_call(m.tool_calls[0], "book",
              R"({"city":"Zürich","nights":3,"budget":1250.5,"ok":true,"note":null,"extras":["a","b"],)"
              R"("who":{"name":"Zoë 'Z'","age":34},"j":true,"n":null,"e":1000.0})");
  expect_call(m.tool_calls[1], "ping", "{}");
  expect_call(m.tool_calls[2], "say", R"({"t":"line\none é 😀 \"q\""})");
  EXPECT_NE(m.tool_calls[0].id, m.tool_calls[1].id);

  // Reasoning first; the output may end before <|tool_call_end|> where the server stopped.
  m = parse(ToolCallFormat::kLfm2, "<think>Need weather.</think><|tool_call_start|>[get_weather(city=\"Oslo\")]");
  EXPECT_EQ(m.reasoning_content, "Need weather.");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  // Text after the block stays content; two blocks.
  m = parse(ToolCallFormat::kLfm2,
            "<|tool_call_start|>[ping()]<|tool_call_end|> <|tool_call_start|>[ping()]<|tool_call_end|>\nDone.");
  EXPECT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.content, "Done.");

  // Malformed or truncated: content as written.
  for (const std::string text : {
           "<|tool_call_start|>[get_weather(city=\"Par",                     // truncated
           "<|tool_call_start|>[get_weather(city=Paris)]<|tool_call_end|>",  // a bare word
           "<|tool_call_start|>[get weather()]<|tool_call_end|>",            // not a name
           "<|tool_call_start|>[f(a=1, a=2)]<|tool_call_end|>",              // a repeated argument
           "<|tool_call_start|>[]<|tool_call_end|>", "<|tool_call_start|>get_weather()<|tool_call_end|>",
           "<|tool_call_start|>",
           "[get_weather(city=\"Paris\")]",  // no markers: text
       }) {
    m = parse(ToolCallFormat::kLfm2, text);
    EXPECT_TRUE(m.tool_calls.empty()) << text;
    EXPECT_EQ(m.content, text);
  }
  // Calls before a malformed one are kept.
  m = parse(ToolCallFormat::kLfm2, "<|tool_call_start|>[ping(), add(a=1, b=]<|tool_call_end|>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "ping");
}

TEST(ParseToolCalls, Gemma4) {
  const ToolCallFormat g = ToolCallFormat::kGemma4;
  auto m = parse(g, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_TRUE(m.tool_calls[0].id.starts_with("call_"));

  // Parallel calls after text, every value form (raw strings with quotes, backslashes, newlines,
  // braces, colons and commas; numbers; true / false / null / None; nested dicts and lists; keys
  // written in <|"|>), a thought first.
  m = parse(
      g,
      "<|channel>thought\nTwo calls.<channel|>Checking both.<|tool_call>call:book{budget:1250.5,city:<|\"|>Zürich<|\"|>,"
      "extras:[<|\"|>a<|\"|>,<|\"|>b, c<|\"|>],nights:3,note:None,ok:true,no:false,n:null,e:1e3,"
      "who:{age:34,name:<|\"|>Zoë \"Z\" O'Neil {x:1}\\n<|\"|>},<|\"|>quoted key<|\"|>:-2}<tool_call|>"
      "<|tool_call>call:ping{}<tool_call|><|tool_call>call:say{t:<|\"|>line\none\ttab<|\"|>}<tool_call|>");
  EXPECT_EQ(m.reasoning_content, "Two calls.");
  EXPECT_EQ(m.content, "Checking both.");
  ASSERT_EQ(m.tool_calls.size(), 3u);
  expect_call(m.tool_calls[0], "book",
              R"({"budget":1250.5,"city":"Zürich","extras":["a","b, c"],"nights":3,"note":null,"ok":true,"no":false,)"
              R"("n":null,"e":1000.0,"who":{"age":34,"name":"Zoë \"Z\" O'Neil {x:1}\\n"},"quoted key":-2})");
  expect_call(m.tool_calls[1], "ping", "{}");
  expect_call(m.tool_calls[2], "say", R"({"t":"line\none\ttab"})");

  // The model's turn written out, spaces llama.cpp's parser allows, no <tool_call|> where the
  // output stopped; the empty thought Gemma may add at the end and a stray <channel|> are dropped.
  m = parse(g, "<|turn>model\n<|tool_call>call:add{ a: 1, b:2 }");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "add", R"({"a":1,"b":2})");
  m = parse(g, "It is sunny.<|channel>thought\n<channel|>");
  EXPECT_EQ(m.content, "It is sunny.");
  EXPECT_EQ(m.reasoning_content, "");
  m = parse(g, "It is sunny.<channel|>junk");
  EXPECT_EQ(m.content, "It is sunny.");
  // Without tools (kNone) the thinking channel is still reasoning.
  m = parse(ToolCallFormat::kNone, "<|channel>thought\nWhy? Rayleigh.<channel|>Blue light scatters more.");
  EXPECT_EQ(m.reasoning_content, "Why? Rayleigh.");
  EXPECT_EQ(m.content, "Blue light scatters more.");
  // Text after the calls stays content.
  m = parse(g, "<|tool_call>call:ping{}<tool_call|> <|tool_call>call:ping{}<tool_call|>\nDone.");
  EXPECT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.content, "Done.");

  // Malformed or truncated: content as written.
  for (const std::string text : {
           "<|tool_call>call:get_weather{city:<|\"|>Par",           // truncated
           "<|tool_call>call:get_weather{city:Paris}<tool_call|>",  // a bare word
           "<|tool_call>call:get weather{}<tool_call|>",            // not a name
           "<|tool_call>call:f{a:1,a:2}<tool_call|>",               // a repeated argument
           "<|tool_call>call:f{:1}<tool_call|>",                    // no key
           "<|tool_call>get_weather{}<tool_call|>",                 // no "call:"
           "<|tool_call>call:f(a=1)<tool_call|>", "<|tool_call>",
           "call:get_weather{city:<|\"|>Paris<|\"|>}",  // no markers: text
       }) {
    m = parse(g, text);
    EXPECT_TRUE(m.tool_calls.empty()) << text;
    EXPECT_EQ(m.content, text);
  }
  // Calls before a malformed one are kept.
  m = parse(g, "<|tool_call>call:ping{}<tool_call|><|tool_call>call:add{a:1,b:}<tool_call|>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "ping");
  EXPECT_EQ(m.content, "<|tool_call>call:add{a:1,b:}<tool_call|>");
}

TEST(ParseToolCalls, MistralArgs) {
  auto m = parse(ToolCallFormat::kMistralArgs, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(m.tool_calls[0].id.size(), 9u);

  m = parse(ToolCallFormat::kMistralArgs,
            "[THINK]Two calls.[/THINK]Both:[TOOL_CALLS]ping[ARGS]{}[TOOL_CALLS]add[CALL_ID]x1y2z3w4v[ARGS]{\"a\": 1, \"b\": "
            "2}</s>");
  EXPECT_EQ(m.reasoning_content, "Two calls.");
  EXPECT_EQ(m.content, "Both:");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  expect_call(m.tool_calls[0], "ping", "{}");
  expect_call(m.tool_calls[1], "add", R"({"a":1,"b":2})");
  EXPECT_EQ(m.tool_calls[1].id, "x1y2z3w4v");

  // Either Mistral format reads the other's syntax.
  m = parse(ToolCallFormat::kMistralArgs, "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}]");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  m = parse(ToolCallFormat::kMistral, "[TOOL_CALLS]ping[ARGS]{}");
  ASSERT_EQ(m.tool_calls.size(), 1u);

  for (const std::string text : {"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Pa", "[TOOL_CALLS]get weather[ARGS]{}",
                                 "[TOOL_CALLS]get_weather{}", "[TOOL_CALLS][ARGS]{}", "[TOOL_CALLS]f[ARGS]5"}) {
    m = parse(ToolCallFormat::kMistralArgs, text);
    EXPECT_TRUE(m.tool_calls.empty()) << text;
    EXPECT_EQ(m.content, text);
  }
  // The first call is kept when the second is cut off.
  m = parse(ToolCallFormat::kMistralArgs, "[TOOL_CALLS]ping[ARGS]{}[TOOL_CALLS]add[ARGS]{\"a\":");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.content, "[TOOL_CALLS]add[ARGS]{\"a\":");
}

TEST(ParseToolCalls, Generic) {
  auto m =
      parse(ToolCallFormat::kGeneric, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(m.content, "");

  m = parse(ToolCallFormat::kGeneric,
            "{\"tool_calls\": [{\"name\": \"ping\", \"arguments\": {}, \"id\": \"c-1\"}, "
            "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}, \"id\": \"c-2\"}]}");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].id, "c-1");
  EXPECT_EQ(m.tool_calls[1].id, "c-2");

  m = parse(ToolCallFormat::kGeneric, "  {\"response\": \"It is sunny.\"}\n");
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "It is sunny.");

  // DeepSeek R1's prompt ends inside <think>: the reply starts with reasoning.
  chat::ParseOptions o;
  o.thinking_forced_open = true;
  m = chat::parse_assistant_output(ToolCallFormat::kGeneric,
                                   "Need the weather.\n</think>\n\n{\"tool_call\": {\"name\": \"ping\", \"arguments\": {}}}",
                                   o);
  EXPECT_EQ(m.reasoning_content, "Need the weather.");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  m = chat::parse_assistant_output(ToolCallFormat::kGeneric, "Still thinking", o);
  EXPECT_EQ(m.reasoning_content, "Still thinking");
  EXPECT_EQ(m.content, "");

  for (const std::string text : {"Plain text.", "{\"tool_call\": {\"name\": \"ping\"", "{\"other\": 1}",
                                 "{\"tool_calls\": [{\"name\": \"ping\", \"arguments\": []}]}", "[1, 2]"}) {
    m = parse(ToolCallFormat::kGeneric, text);
    EXPECT_TRUE(m.tool_calls.empty()) << text;
    EXPECT_EQ(m.content, text);
  }
}

TEST(ParseToolCalls, WithoutToolsNothingIsACall) {
  const std::string text = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kNone}) {
    auto m = chat::parse_assistant_output(f, text, /*tools_present=*/f != ToolCallFormat::kHermes);
    EXPECT_TRUE(m.tool_calls.empty());
    EXPECT_EQ(m.content, text);
  }
}

TEST(ParseToolCalls, IdsAreDeterministicAndSeeded) {
  const std::string text = "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>";
  auto a = parse(ToolCallFormat::kHermes, text), b = parse(ToolCallFormat::kHermes, text);
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.tool_calls[0].id, b.tool_calls[0].id);
  chat::ParseOptions o;
  o.id_seed = 7;
  auto c = chat::parse_assistant_output(ToolCallFormat::kHermes, text, o);
  EXPECT_NE(a.tool_calls[0].id, c.tool_calls[0].id);
  // Ids depend on the text up to the end of the call (so that streaming keeps them), not after it.
  auto d = parse(ToolCallFormat::kHermes, "OK. " + text);
  EXPECT_NE(a.tool_calls[0].id, d.tool_calls[0].id);
  auto e = parse(ToolCallFormat::kHermes, text + "\nDone.");
  EXPECT_EQ(a.tool_calls[0].id, e.tool_calls[0].id);
}

TEST(ParseToolCalls, ToJsonIsAnOpenAiMessage) {
  auto m = parse(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>");
  const json j = m.to_json();
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_TRUE(j["content"].is_null());
  EXPECT_FALSE(j.contains("reasoning_content"));
  ASSERT_EQ(j["tool_calls"].size(), 1u);
  EXPECT_EQ(j["tool_calls"][0]["type"], "function");
  EXPECT_EQ(j["tool_calls"][0]["id"], m.tool_calls[0].id);
  EXPECT_EQ(j["tool_calls"][0]["function"]["name"], "add");
  EXPECT_EQ(j["tool_calls"][0]["function"]["arguments"], "{\"a\":1,\"b\":2}");
  auto plain = parse(ToolCallFormat::kHermes, "<think>x</think>Hi");
  EXPECT_EQ(plain.to_json(), json::parse(R"({"role": "assistant", "content": "Hi", "reasoning_content": "x"})"));
}

TEST(ParseToolCalls, RandomTextNeverCrashes) {
  std::mt19937 rng(5);
  const std::vector<std::string> pieces = {"<tool_call>",
                                           "</tool_call>",
                                           "[TOOL_CALLS]",
                                           "[ARGS]",
                                           "[CALL_ID]",
                                           "{",
                                           "\\u00",
                                           "<function=",
                                           ">",
                                           "}",
                                           "[",
                                           "]",
                                           "\"",
                                           "name",
                                           "arguments",
                                           ":",
                                           ",",
                                           "<|python_tag|>",
                                           "<think>",
                                           "</think>",
                                           "\\",
                                           "x",
                                           " ",
                                           "\n",
                                           ".call(",
                                           ")",
                                           "=",
                                           "1"};
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int n = int(rng() % 30);
    for (int k = 0; k < n; ++k) s += pieces[rng() % pieces.size()];
    for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama31, ToolCallFormat::kMistral,
                             ToolCallFormat::kMistralArgs, ToolCallFormat::kGeneric}) {
      auto m = parse(f, s);
      for (const ToolCall& c : m.tool_calls) {
        EXPECT_FALSE(c.name.empty());
        EXPECT_FALSE(c.id.empty());
        EXPECT_TRUE(json::parse(c.arguments, nullptr, false).is_object()) << c.arguments;
      }
      // The partial parse of every prefix too (pending calls from hostile text).
      chat::ParseOptions po;
      po.partial = true;
      for (size_t cut = 0; cut <= s.size(); cut += 3) {
        auto pm = chat::parse_assistant_output(f, std::string_view(s).substr(0, cut), po);
        if (pm.pending) {
          EXPECT_FALSE(pm.pending->name.empty());
          EXPECT_TRUE(pm.pending->arguments.empty() || pm.pending->arguments[0] == '{') << pm.pending->arguments;
        }
      }
    }
  }
}

// --- syntax ------------------------------------------------------------------------------------

TEST(ToolCallSyntax, StopsAndPreservedTokens) {
  const auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  auto h = chat::tool_call_syntax(ToolCallFormat::kHermes);
  EXPECT_FALSE(has(h.stops, "</tool_call>"));  // several calls may follow
  EXPECT_TRUE(has(h.triggers, "<tool_call>"));
  EXPECT_TRUE(has(h.preserved_tokens, "<tool_call>"));
  auto l = chat::tool_call_syntax(ToolCallFormat::kLlama31);
  EXPECT_TRUE(has(l.stops, "<|eom_id|>"));
  EXPECT_TRUE(has(l.preserved_tokens, "<|python_tag|>"));
  auto m = chat::tool_call_syntax(ToolCallFormat::kMistral);
  EXPECT_TRUE(has(m.triggers, "[TOOL_CALLS]"));
  EXPECT_TRUE(has(m.preserved_tokens, "[TOOL_CALLS]"));
  auto a = chat::tool_call_syntax(ToolCallFormat::kMistralArgs);
  EXPECT_TRUE(has(a.preserved_tokens, "[ARGS]"));
  auto g = chat::tool_call_syntax(ToolCallFormat::kGemma4);
  EXPECT_TRUE(has(g.triggers, "<|tool_call>"));
  for (const char* t : {"<|tool_call>", "<tool_call|>", "<|channel>", "<channel|>", "<|turn>", "<|\"|>"})
    EXPECT_TRUE(has(g.preserved_tokens, t)) << t;
  EXPECT_TRUE(g.stops.empty());
  auto f = chat::tool_call_syntax(ToolCallFormat::kLfm2);
  EXPECT_TRUE(has(f.triggers, "<|tool_call_start|>"));
  EXPECT_TRUE(has(f.preserved_tokens, "<|tool_call_start|>"));
  EXPECT_TRUE(has(f.preserved_tokens, "<|tool_call_end|>"));
  EXPECT_TRUE(f.stops.empty());
  EXPECT_TRUE(chat::tool_call_syntax(ToolCallFormat::kNone).stops.empty());
}

// --- tools -------------------------------------------------------------------------------------

TEST(NormalizeTools, RebuildsAndNamesErrors) {
  auto n = chat::normalize_tools(kTools);
  ASSERT_TRUE(n) << n.status().message();
  ASSERT_EQ(n->size(), 3u);
  EXPECT_EQ((*n)[2], json::parse(R"({"type": "function", "function": {"name": "ping", "description": "No arguments.",
      "parameters": {"type": "object", "properties": {}}}})"));
  auto strict = chat::normalize_tools(json::parse(R"([{"type": "function", "function": {"name": "f", "strict": true,
      "parameters": {"type": "object"}}}])"));
  ASSERT_TRUE(strict);
  EXPECT_EQ((*strict)[0]["function"].dump(), R"({"name":"f","description":"","parameters":{"type":"object"}})");
  EXPECT_TRUE(chat::normalize_tools(json::array())->is_null());
  EXPECT_TRUE(chat::normalize_tools(nullptr)->is_null());

  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"type": "function"})", "tools: expected an array"},
      {R"([5])", "tools[0]: expected an object"},
      {R"([{"function": {"name": "f"}}])", "tools[0].type: missing"},
      {R"([{"type": "retrieval", "function": {"name": "f"}}])", "tools[0].type: expected \"function\""},
      {R"([{"type": "function"}])", "tools[0].function: expected an object"},
      {R"([{"type": "function", "function": {"name": ""}}])", "tools[0].function.name"},
      {R"([{"type": "function", "function": {"name": 3}}])", "tools[0].function.name"},
      {R"([{"type": "function", "function": {"name": "f", "description": 1}}])", "tools[0].function.description"},
      {R"([{"type": "function", "function": {"name": "f", "parameters": "x"}}])", "tools[0].function.parameters"},
      {R"([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])",
       "tools[1].function.name: 'f' is also tools[0]'s name"},
  };
  for (const auto& [text, msg] : bad) {
    auto r = chat::normalize_tools(json::parse(text));
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(msg), std::string::npos) << r.status().message();
  }
}

// --- reasoning formats -------------------------------------------------------------------------

TEST(ReasoningFormat, NamesRoundTrip) {
  for (const char* n : {"none", "auto", "deepseek", "deepseek-legacy"}) {
    auto f = chat::parse_reasoning_format(n);
    ASSERT_TRUE(f) << n;
    EXPECT_STREQ(chat::reasoning_format_name(*f), n);
  }
  for (const std::string& bad : std::vector<std::string>{"", "DeepSeek", "think", std::string(5000, 'x')}) {
    auto f = chat::parse_reasoning_format(bad);
    ASSERT_FALSE(f) << bad;
    EXPECT_NE(f.status().message().find("\"deepseek-legacy\""), std::string::npos);
    EXPECT_LT(f.status().message().size(), 200u);
  }
}

ParsedMessage parse_with(ToolCallFormat f, std::string_view text, chat::ReasoningFormat rf, bool in_content = false,
                         bool forced_open = false, bool tools = true) {
  chat::ParseOptions o;
  o.reasoning_format = rf;
  o.reasoning_in_content = in_content;
  o.thinking_forced_open = forced_open;
  o.tools_present = tools;
  return chat::parse_assistant_output(f, text, o);
}

TEST(ReasoningFormat, NoneAutoDeepSeekLegacy) {
  using RF = chat::ReasoningFormat;
  const std::string text = "<think>\nCheck the sky.\n</think>\n\nIt is sunny.";
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kGeneric}) {
    SCOPED_TRACE(chat::tool_call_format_name(f));
    for (RF rf : {RF::kAuto, RF::kDeepSeek, RF::kDeepSeekLegacy}) {
      auto m = parse_with(f, text, rf);
      EXPECT_EQ(m.reasoning_content, "Check the sky.");
      EXPECT_EQ(m.content, "It is sunny.");
    }
    auto m = parse_with(f, text, RF::kNone);
    EXPECT_EQ(m.reasoning_content, "");
    EXPECT_EQ(m.content, text);
    // deepseek-legacy while streaming: the block stays in the content, as <think>...</think>.
    m = parse_with(f, text, RF::kDeepSeekLegacy, /*in_content=*/true);
    EXPECT_EQ(m.reasoning_content, "");
    EXPECT_EQ(m.content, "<think>Check the sky.</think>It is sunny.");
    // A prompt that ends inside <think>: none ignores it, the others take the text up to </think>.
    m = parse_with(f, "Check the sky.</think>It is sunny.", RF::kNone, false, /*forced_open=*/true);
    EXPECT_EQ(m.content, "Check the sky.</think>It is sunny.");
    m = parse_with(f, "Check the sky.</think>It is sunny.", RF::kDeepSeek, false, /*forced_open=*/true);
    EXPECT_EQ(m.reasoning_content, "Check the sky.");
    EXPECT_EQ(m.content, "It is sunny.");
  }
  // With none, a call after the block is still a call; the block is content.
  auto m = parse_with(ToolCallFormat::kHermes,
                      "<think>call ping</think>\n<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>", RF::kNone);
  EXPECT_EQ(m.content, "<think>call ping</think>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  // [THINK] blocks (Magistral) too.
  m = parse_with(ToolCallFormat::kMistralArgs, "[THINK]plan[/THINK]Done.", RF::kDeepSeekLegacy, true);
  EXPECT_EQ(m.content, "[THINK]plan[/THINK]Done.");
  m = parse_with(ToolCallFormat::kMistralArgs, "[THINK]plan[/THINK]Done.", RF::kAuto);
  EXPECT_EQ(m.reasoning_content, "plan");
  EXPECT_EQ(m.content, "Done.");
}

// --- partial parsing ---------------------------------------------------------------------------

// Ends of the prefixes a stream delivers: one UTF-8 character at a time.
std::vector<size_t> char_cuts(std::string_view s) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i <= s.size(); ++i)
    if (i == s.size() || (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) cuts.push_back(i);
  return cuts;
}

// One token at a time, by a real vocabulary (Llama 2's), pieces joined until they end on a whole
// UTF-8 character as the C API's detokenizer delivers them.
std::vector<size_t> token_cuts(const Vocab& vocab, std::string_view s) {
  std::string joined;
  std::vector<size_t> cuts;
  for (int32_t t : vocab.tokenize(s, /*add_special=*/false, /*parse_special=*/false)) {
    joined += vocab.token_to_piece(t, false);
    cuts.push_back(joined.size());
  }
  size_t shift = 0;  // SentencePiece's leading space
  if (joined.size() == s.size() + 1 && joined[0] == ' ') shift = 1;
  EXPECT_EQ(joined.substr(shift), s) << "the vocabulary does not round-trip this text";
  std::vector<size_t> out;
  for (size_t c : cuts) {
    if (c <= shift) continue;
    c -= shift;
    if (c < s.size() && (static_cast<unsigned char>(s[c]) & 0xC0) == 0x80) continue;
    out.push_back(c);
  }
  if (out.empty() || out.back() != s.size()) out.push_back(s.size());
  return out;
}

bool calls_extend(const std::vector<ToolCall>& a, const std::vector<ToolCall>& b) {
  if (a.size() > b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

// Parses every prefix with `partial`, then the whole text without: content and reasoning only
// grow, calls only get more, the last is the full parse; `clean`: the partial parse of the whole
// text already equals the full parse.
void check_stream(ToolCallFormat f, const std::string& text, chat::ParseOptions o, const std::vector<size_t>& cuts,
                  bool clean) {
  SCOPED_TRACE(std::string(chat::tool_call_format_name(f)) + " " + chat::reasoning_format_name(o.reasoning_format) +
               (o.reasoning_in_content ? " in-content" : "") + ": " + text);
  o.partial = true;
  ParsedMessage prev;
  std::vector<std::pair<size_t, ToolCall>> pendings;  // (index, the call cut off) as it streamed
  for (size_t cut : cuts) {
    ParsedMessage m = chat::parse_assistant_output(f, std::string_view(text).substr(0, cut), o);
    ASSERT_TRUE(m.content.starts_with(prev.content))
        << "content shrank at " << cut << ": '" << prev.content << "' -> '" << m.content << "'";
    ASSERT_TRUE(m.reasoning_content.starts_with(prev.reasoning_content))
        << "reasoning shrank at " << cut << ": '" << prev.reasoning_content << "' -> '" << m.reasoning_content << "'";
    ASSERT_TRUE(calls_extend(prev.tool_calls, m.tool_calls)) << "calls changed at " << cut;
    if (m.pending) {
      ASSERT_TRUE(f == ToolCallFormat::kHermes || f == ToolCallFormat::kQwenXml || f == ToolCallFormat::kLfm2 ||
                  f == ToolCallFormat::kGemma4);
      // Its arguments only grow, for one call at one index.
      if (!pendings.empty() && pendings.back().first == m.tool_calls.size()) {
        const ToolCall& was = pendings.back().second;
        ASSERT_EQ(was.id, m.pending->id) << cut;
        ASSERT_EQ(was.name, m.pending->name) << cut;
        ASSERT_TRUE(m.pending->arguments.starts_with(was.arguments))
            << cut << ": '" << was.arguments << "' -> '" << m.pending->arguments << "'";
      }
      pendings.emplace_back(m.tool_calls.size(), *m.pending);
    }
    prev = std::move(m);
  }
  o.partial = false;
  const ParsedMessage full = chat::parse_assistant_output(f, text, o);
  // A call that streamed cut off is, complete, the same call with arguments that extend it.
  for (const auto& [index, call] : pendings) {
    if (index >= full.tool_calls.size()) continue;  // never completed (the output ends inside it)
    const ToolCall& done = full.tool_calls[index];
    EXPECT_EQ(done.id, call.id);
    EXPECT_EQ(done.name, call.name);
    EXPECT_TRUE(done.arguments.starts_with(call.arguments)) << "'" << call.arguments << "' then '" << done.arguments << "'";
  }
  EXPECT_TRUE(full.content.starts_with(prev.content)) << "'" << prev.content << "' then '" << full.content << "'";
  EXPECT_TRUE(full.reasoning_content.starts_with(prev.reasoning_content));
  EXPECT_TRUE(calls_extend(prev.tool_calls, full.tool_calls));
  if (clean) {
    EXPECT_EQ(prev.content, full.content);
    EXPECT_EQ(prev.reasoning_content, full.reasoning_content);
    EXPECT_EQ(prev.tool_calls, full.tool_calls);
  }
}

struct StreamCase {
  ToolCallFormat format;
  std::string text;
  bool clean;  // ends after a closed call or on ordinary text
};

const std::vector<StreamCase>& stream_cases() {
  static const std::vector<StreamCase> cases = {
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", true},
      {ToolCallFormat::kHermes,
       "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}\n</tool_call>",
       true},
      {ToolCallFormat::kHermes,
       "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"ping\", \"arguments\": "
       "{}}\n</tool_call>",
       true},
      {ToolCallFormat::kHermes, "<think>hmm</think>\n\nIt is sunny.", true},
      {ToolCallFormat::kHermes, "<function=add>{\"a\": 2, \"b\": 3}</function>", true},
      {ToolCallFormat::kHermes, " {\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n", false},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": 5}</tool_call> then text", true},
      {ToolCallFormat::kHermes, "Sure <tool_call>{\"name\": \"add\", \"argu", false},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n", false},
      {ToolCallFormat::kHermes,
       "Voilà ☀️ — <tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Zürich\"}}</tool_call>\nDone 👍",
       true},
      {ToolCallFormat::kHermes, "a < b, <b>bold</b> and <tool_callx> are text", true},
      // Arguments that stream while the call is cut off: nesting, numbers dump rewrites (1.50,
      // 1E3, -0), escapes dump writes otherwise (\/, \u00e9, a surrogate pair), control characters,
      // "parameters", a name after the arguments (nothing streams before the end then).
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"edit_file\", \"arguments\": {\"path\": \"src/a\\/b.c\", \"edits\": [{\"line\": 12, "
       "\"text\": \"int x = 1;\\n\\tint y = 2;\"}, {\"line\": 1.50, \"text\": \"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\"\"}], "
       "\"opts\": {\"dry\": true, \"n\": 1E3, \"m\": -0, \"none\": null, \"ctl\": \"\\u0001\"}}}\n</tool_call>",
       true},
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"a\", \"parameters\": {\"k\": [1, 2, 3]}}</tool_call>"
       "<tool_call>{\"arguments\": {\"x\": \"y\"}, \"name\": \"b\"}</tool_call>",
       true},
      {ToolCallFormat::kHermes, "<function=write>{\"content\": \"line one\\nline two\", \"mode\": 420}</function>", true},
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call> and <tool_call>{\"name\": \"ping\", \"arguments\": "
       "{}}</tool_call>",
       true},
      {ToolCallFormat::kQwenXml,
       "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=unit>\n"
       "celsius\n</parameter>\n</function>\n</tool_call>",
       true},
      {ToolCallFormat::kQwenXml,
       "<think>two</think>\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n[2, "
       "3]\n</parameter>\n"
       "</function>\n</tool_call>\n<tool_call>\n<function=ping>\n</function>\n</tool_call>",
       true},
      {ToolCallFormat::kQwenXml,
       "<function=write>\n<parameter=text>\nline <b>one</b>\n\nline two\n</parameter>\n</function>", true},
      {ToolCallFormat::kQwenXml, "Sure <tool_call>\n<function=add>\n<parameter=a>\n1", false},
      {ToolCallFormat::kQwenXml, "a <function call> and <tool_callx> are text", true},
      // LFM2 / LFM2.5: Python calls in one block, streamed argument by argument.
      {ToolCallFormat::kLfm2,
       "Let me look.<|tool_call_start|>[get_weather(city=\"New York\", unit='celsius')]<|tool_call_end|>", true},
      {ToolCallFormat::kLfm2,
       "<think>Two things.</think>Both:<|tool_call_start|>[book(city='Zürich', nights=3, budget=1250.5, ok=True, note=None, "
       "extras=['a', \"b\"], who={'name': 'Zoë \\'Z\\'', \"age\": 34}), ping(), say(t=\"l1\\nl2 \\u00e9 \\ud83d\\ude00\")]"
       "<|tool_call_end|>",
       true},
      {ToolCallFormat::kLfm2,
       "<|tool_call_start|>[ping()]<|tool_call_end|><|tool_call_start|>[add(a=1, b=-2)]<|tool_call_end|>", true},
      {ToolCallFormat::kLfm2, "Sure <|tool_call_start|>[add(a=1, b=", false},
      {ToolCallFormat::kLfm2, "<|tool_call_start|>[get_weather(city=\"Oslo\")]", false},
      {ToolCallFormat::kLfm2, "<|tool_call_start|>[get weather()]<|tool_call_end|> is text", true},
      {ToolCallFormat::kLfm2, "a <|tool_ and [f(x)] are text", true},
      // Gemma 4: its own value syntax, streamed argument by argument; its thinking channel.
      {ToolCallFormat::kGemma4,
       "Let me look.<|tool_call>call:get_weather{city:<|\"|>New York<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>", true},
      {ToolCallFormat::kGemma4,
       "<|channel>thought\nTwo things.<channel|>Both:<|tool_call>call:book{budget:1250.5,city:<|\"|>Zürich<|\"|>,"
       "extras:[<|\"|>a<|\"|>,<|\"|>b<|\"|>],nights:3,note:null,ok:true,who:{age:34,name:<|\"|>Zoë \"Z\" <b> {x}<|\"|>}}"
       "<tool_call|><|tool_call>call:ping{}<tool_call|><|tool_call>call:say{t:<|\"|>l1\nl2 😀<|\"|>}<tool_call|>",
       true},
      {ToolCallFormat::kGemma4, "Sure <|tool_call>call:add{a:1,b:", false},
      {ToolCallFormat::kGemma4, "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}", false},
      {ToolCallFormat::kGemma4, "<|tool_call>call:get weather{}<tool_call|> is text", true},
      {ToolCallFormat::kGemma4, "a <|tool_ and call:f{x:1} are text", true},
      {ToolCallFormat::kGemma4, "It is sunny.<|channel>thought\n<channel|>", true},
      {ToolCallFormat::kNone,
       "<|channel>thought\nWhy? Rayleigh.<channel|>Blue light<|channel>thought\nmore<channel|> scatters.", true},
      // SmolLM3 (thinks in <think>, calls as Hermes) and Granite 4 (Hermes with a newline between calls).
      {ToolCallFormat::kHermes,
       "<think>\nThe user wants Paris.\n</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>",
       true},
      {ToolCallFormat::kHermes,
       "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
       true},
      {ToolCallFormat::kLlama31, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", true},
      {ToolCallFormat::kLlama31,
       "Checking.<|python_tag|>{\"name\": \"ping\", \"arguments\": {}}; {\"name\": \"add\", \"parameters\": {\"a\": 1, "
       "\"b\": 2}}",
       true},
      {ToolCallFormat::kLlama31, "<|python_tag|>brave_search.call(query=\"weather in Paris\", count=3)", false},
      {ToolCallFormat::kLlama31, "Sure.<|python_tag|>print(2 + 2)", false},
      {ToolCallFormat::kLlama31, "It is sunny.", true},
      {ToolCallFormat::kLlama31, "{\"answer\": 42} is JSON", true},
      {ToolCallFormat::kLlama31, "{\"name\": \"ping\", \"parameters\": {}} then a remark", true},
      {ToolCallFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]", true},
      {ToolCallFormat::kMistral,
       "On it. [TOOL_CALLS] [{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": "
       "2}}]",
       true},
      {ToolCallFormat::kMistral, "[{\"name\": \"ping\", \"arguments\": {}}]", false},
      {ToolCallFormat::kMistral, "[1] is the first point", true},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}", false},
      {ToolCallFormat::kMistralArgs,
       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}", true},
      {ToolCallFormat::kMistralArgs, "[THINK]Two calls.[/THINK]Both:[TOOL_CALLS]ping[ARGS]{}", true},
      {ToolCallFormat::kMistralArgs, "[TOOL_CALLS]add[CALL_ID]x1y2z3w4v[ARGS]{\"a\": 1, \"b\": 2}", true},
      {ToolCallFormat::kMistralArgs, "[TOOL_CALLS]get weather[ARGS]{} is not a call", true},
      {ToolCallFormat::kGeneric, "{\"tool_call\": {\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}}", true},
      {ToolCallFormat::kGeneric,
       "{\"tool_calls\": [{\"name\": \"ping\", \"arguments\": {}, \"id\": \"c-1\"}, {\"name\": \"add\", \"arguments\": "
       "{\"a\": 1, \"b\": 2}, \"id\": \"c-2\"}]}",
       true},
      {ToolCallFormat::kGeneric, "{\"response\": \"Hello \\\"world\\\"\\n\\u00e9\\ud83d\\ude00 done\"}", true},
      {ToolCallFormat::kGeneric, "  {\"response\": \"cut off he", true},
      {ToolCallFormat::kGeneric, "Plain text.", true},
      {ToolCallFormat::kGeneric, "<think>plan</think>{\"response\": \"ok\"}", true},
      {ToolCallFormat::kNone, "<think>r</think>Just text, <tool_call> included.", true},
  };
  return cases;
}

TEST(PartialParse, ContentOnlyGrowsCharByChar) {
  using RF = chat::ReasoningFormat;
  for (const StreamCase& c : stream_cases()) {
    for (RF rf : {RF::kAuto, RF::kNone, RF::kDeepSeekLegacy}) {
      for (bool in_content : {false, true}) {
        if (in_content && rf != RF::kDeepSeekLegacy) continue;
        chat::ParseOptions o;
        o.reasoning_format = rf;
        o.reasoning_in_content = in_content;
        check_stream(c.format, c.text, o, char_cuts(c.text), c.clean);
      }
    }
  }
}

TEST(PartialParse, ContentOnlyGrowsTokenByToken) {
  auto model =
      Model::load(shared_path("models/llama-2-tiny-random.gguf"), {.vocab_only = true, .repack = false, .progress = {}});
  ASSERT_TRUE(model) << model.status().message();
  const Vocab& vocab = (*model)->vocab();
  for (const StreamCase& c : stream_cases())
    check_stream(c.format, c.text, chat::ParseOptions{}, token_cuts(vocab, c.text), c.clean);
}

// Qwen3-Coder / Qwen3.5 XML calls typed by the request's tools: a string parameter's text stays
// text, others are JSON; it streams parameter by parameter, strings as they are written.
TEST(QwenXml, ValuesTypedByTheToolsAndStreamed) {
  chat::ParseOptions o;
  o.tools = kTools;
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\n1984\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=add>\n<parameter=a>\n7\n</parameter>\n<parameter=b>\n-2\n</parameter>\n</function>\n</"
      "tool_call>";
  auto m = chat::parse_assistant_output(ToolCallFormat::kQwenXml, call, o);
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"city\":\"1984\"}") << "a string parameter stays text";
  EXPECT_EQ(m.tool_calls[1].arguments, "{\"a\":7,\"b\":-2}");
  EXPECT_TRUE(m.content.empty());
  // Without the tools' schemas a value is JSON when it parses.
  EXPECT_EQ(parse(ToolCallFormat::kQwenXml, call).tool_calls[0].arguments, "{\"city\":1984}");
  // An integer parameter that is not JSON is not a call: the text stays content.
  m = chat::parse_assistant_output(
      ToolCallFormat::kQwenXml, "<tool_call>\n<function=add>\n<parameter=a>\nseven\n</parameter>\n</function>\n</tool_call>",
      o);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_NE(m.content.find("seven"), std::string::npos);
  // Multi-line text with markup, a last newline dropped as llama.cpp drops it.
  m = chat::parse_assistant_output(
      ToolCallFormat::kQwenXml,
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan\n<i>Jose</i>\n\n</parameter>\n</function>\n</tool_call>",
      o);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"city\":\"San\\n<i>Jose</i>\\n\"}");
  // Streamed prefix by prefix: the pending call's arguments only grow into the final ones.
  const std::string text =
      "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan\n<i>José</i> \"q\"\n</parameter>\n"
      "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>";
  std::vector<size_t> cuts;
  for (size_t i = 1; i <= text.size(); ++i)
    if (i == text.size() || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) cuts.push_back(i);
  check_stream(ToolCallFormat::kQwenXml, text, o, cuts, true);
  chat::ParseOptions po = o;
  po.partial = true;
  m = chat::parse_assistant_output(ToolCallFormat::kQwenXml, std::string_view(text).substr(0, text.find("Jos")), po);
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->name, "get_weather");
  EXPECT_EQ(m.pending->arguments, "{\"city\":\"San\\n<i>") << "the string so far";
  EXPECT_EQ(m.content, "I'll check.");
}

TEST(QwenXml, DetectedAndWrittenBack) {
  EXPECT_EQ(chat::detect_tool_call_format("{{ '<tool_call>\\n<function=' + name + '>\\n<parameter=' }}"),
            ToolCallFormat::kQwenXml);
  EXPECT_EQ(chat::detect_tool_call_format("{{ '<tool_call>' }} {\"name\": ...}"), ToolCallFormat::kHermes);
  EXPECT_STREQ(chat::tool_call_format_name(ToolCallFormat::kQwenXml), "qwen3-coder");
  // llama.cpp's Qwen3.5 and Qwen3-Coder templates: ToolCallFormat.DetectedForThisYearsTemplates.
}

// LFM2's calls stream as they are written: whole arguments, a string argument's text so far.
TEST(Lfm2, PendingGrowsArgumentByArgument) {
  chat::ParseOptions o;
  o.partial = true;
  const auto p = [&](std::string_view t) { return chat::parse_assistant_output(ToolCallFormat::kLfm2, t, o); };
  auto m = p("I'll check.<|tool_call_st");
  EXPECT_EQ(m.content, "I'll check.");
  EXPECT_FALSE(m.pending);
  m = p("I'll check.<|tool_call_start|>[get_wea");
  EXPECT_EQ(m.content, "I'll check.");
  EXPECT_FALSE(m.pending) << "no name yet";
  m = p("I'll check.<|tool_call_start|>[get_weather(");
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->name, "get_weather");
  EXPECT_EQ(m.pending->arguments, "{");
  m = p("I'll check.<|tool_call_start|>[get_weather(city='San Jos\\u00");
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->arguments, "{\"city\":\"San Jos") << "an escape cut off waits";
  m = p("I'll check.<|tool_call_start|>[get_weather(city='San José', days=1");
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->arguments, "{\"city\":\"San José\"") << "1 may still grow";
  m = p("I'll check.<|tool_call_start|>[get_weather(city='San José', days=12)");
  ASSERT_EQ(m.tool_calls.size(), 1u) << "complete at its ')'";
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"city\":\"San José\",\"days\":12}");
  EXPECT_FALSE(m.pending);
  EXPECT_EQ(m.content, "I'll check.");
  m = p("I'll check.<|tool_call_start|>[get_weather(city='San José', days=12), ping(");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->name, "ping");
  // Its ids are the full parse's.
  o.partial = false;
  const auto full = chat::parse_assistant_output(
      ToolCallFormat::kLfm2,
      "I'll check.<|tool_call_start|>[get_weather(city='San José', days=12), ping()]<|tool_call_end|>", o);
  ASSERT_EQ(full.tool_calls.size(), 2u);
  EXPECT_EQ(full.tool_calls[0].id, m.tool_calls[0].id);
  EXPECT_EQ(full.tool_calls[1].id, m.pending->id);
}

// Gemma 4's calls stream as they are written: whole arguments, a string argument's text so far.
TEST(Gemma4, PendingGrowsArgumentByArgument) {
  chat::ParseOptions o;
  o.partial = true;
  const auto p = [&](std::string_view t) { return chat::parse_assistant_output(ToolCallFormat::kGemma4, t, o); };
  auto m = p("I'll check.<|tool_c");
  EXPECT_EQ(m.content, "I'll check.");
  EXPECT_FALSE(m.pending);
  m = p("I'll check.<|tool_call>call:get_wea");
  EXPECT_EQ(m.content, "I'll check.");
  EXPECT_FALSE(m.pending) << "no name yet";
  m = p("I'll check.<|tool_call>call:get_weather{");
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->name, "get_weather");
  EXPECT_EQ(m.pending->arguments, "{");
  m = p("I'll check.<|tool_call>call:get_weather{city:<|\"|>San Jos<|\"");
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->arguments, "{\"city\":\"San Jos") << "a closing quote's beginning waits";
  m = p("I'll check.<|tool_call>call:get_weather{city:<|\"|>San José<|\"|>,days:1");
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->arguments, "{\"city\":\"San José\"") << "1 may still grow";
  m = p("I'll check.<|tool_call>call:get_weather{city:<|\"|>San José<|\"|>,days:12}");
  ASSERT_EQ(m.tool_calls.size(), 1u) << "complete at its '}'";
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"city\":\"San José\",\"days\":12}");
  EXPECT_FALSE(m.pending);
  EXPECT_EQ(m.content, "I'll check.");
  m = p("I'll check.<|tool_call>call:get_weather{city:<|\"|>San José<|\"|>,days:12}<tool_call|><|tool_call>call:ping{");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->name, "ping");
  // Its ids are the full parse's.
  o.partial = false;
  const auto full = chat::parse_assistant_output(ToolCallFormat::kGemma4,
                                                 "I'll check.<|tool_call>call:get_weather{city:<|\"|>San "
                                                 "José<|\"|>,days:12}<tool_call|><|tool_call>call:ping{}<tool_call|>",
                                                 o);
  ASSERT_EQ(full.tool_calls.size(), 2u);
  EXPECT_EQ(full.tool_calls[0].id, m.tool_calls[0].id);
  EXPECT_EQ(full.tool_calls[1].id, m.pending->id);
}

std::string call_marker(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kLfm2: return "<|tool_call_start|>";
    case ToolCallFormat::kGemma4: return "<|tool_call>";
    case ToolCallFormat::kMistralArgs: return "[TOOL_CALLS]";
    default: return "<tool_call>";
  }
}

// Each of this year's templates end to end: prepare_chat with tool_choice required (format,
// grammar), the model's call parsed, sent back with a tool result and rendered again: natively by
// the templates that render calls (Qwen3.5, LFM2.5-8B, Granite 4), in the family's syntax in the
// content by those that drop them (LFM2.5-Instruct, llama.cpp's SmolLM3), whose tools loom lists
// in the system message where the template does not (SmolLM3).
TEST(ThisYearsTemplates, PrepareParseAndRenderBack) {
  struct Row {
    const char* file;
    const char* bos;
    const char* eos;
    ToolCallFormat format;
    std::string output;             // what the model writes
    std::string rendered;           // the call as the next prompt shows it
    bool think_in_grammar = false;  // the grammar also accepts the reasoning before the call
  };
  const std::vector<Row> rows = {
      {"Qwen3.5-4B.jinja", "", "<|im_end|>", ToolCallFormat::kQwenXml,
       "<think>\nRome's weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
       "</function>\n</tool_call>",
       "<|im_start|>assistant\n<think>\nRome's weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
       "<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call><|im_end|>"},
      {"LFM2.5-Instruct.jinja", "<|startoftext|>", "<|im_end|>", ToolCallFormat::kLfm2,
       "<|tool_call_start|>[get_weather(city=\"Rome\")]<|tool_call_end|>",
       "<|tool_call_start|>[get_weather(city=\"Rome\")]<|tool_call_end|>"},
      {"LFM2.5-8B-A1B.jinja", "<|startoftext|>", "<|im_end|>", ToolCallFormat::kLfm2,
       "<think>Rome.</think><|tool_call_start|>[get_weather(city=\"Rome\")]<|tool_call_end|>",
       "<|tool_call_start|>[get_weather(city='Rome')]<|tool_call_end|>"},
      {"HuggingFaceTB-SmolLM3-3B.jinja", "", "<|im_end|>", ToolCallFormat::kHermes,
       "<think>\nRome.\n</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Rome\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"},
      {"ibm-granite-granite-4.0.jinja", "<|end_of_text|>", "<|end_of_text|>", ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
       // Granite prints text arguments as they are (loom passes them as text, compact).
       "<|start_of_role|>assistant<|end_of_role|><tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
       "{\"city\":\"Rome\"}}\n</tool_call>"},
      // Gemma 4: arguments passed as objects, written in its syntax; the result after the call.
      {"google-gemma-4-31B-it.jinja", "<bos>", "<eos>", ToolCallFormat::kGemma4,
       "<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}<tool_call|>",
       "<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}<tool_call|><|tool_response>response:get_weather{"
       "value:<|\"|>18 degrees<|\"|>}<tool_response|>"},
      // ... its older template: the result folded into the calling message (llama.cpp's workaround).
      {"google-gemma-4-31B-it-interleaved.jinja", "<bos>", "<eos>", ToolCallFormat::kGemma4,
       "<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}<tool_call|>",
       "<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}<tool_call|><|tool_response>response:get_weather{"
       "value:<|\"|>18 degrees<|\"|>}<tool_response|>"},
      // Ministral 3 thinks first (its grammar allows it); the reasoning comes back as a thinking block.
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", "<s>", "</s>", ToolCallFormat::kMistralArgs,
       "[THINK]Rome.[/THINK][TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}",
       "[THINK]Rome.[/THINK][TOOL_CALLS]get_weather[ARGS]{\"city\":\"Rome\"}</s>[TOOL_RESULTS]18 degrees[/TOOL_RESULTS]",
       true},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.file);
    const std::string src = llama_cpp_template(r.file);
    if (src.empty()) {
      GTEST_SKIP() << llama_cpp_src() << "/models/templates/" << r.file << " not found";
    }
    auto t = chat::ChatTemplate::parse(src, r.bos, r.eos);
    ASSERT_TRUE(t) << t.status().message();
    EXPECT_EQ(t->tool_call_format(), r.format);
    chat::ChatInputs in;
    in.messages = json::array({json{{"role", "user"}, {"content", "Weather in Rome?"}}});
    in.tools = kTools;
    chat::ChatRequestOptions opts;
    opts.tool_choice.mode = chat::ToolChoice::kRequired;
    opts.parallel_tool_calls = true;
    auto p = chat::prepare_chat(*t, in, opts);
    ASSERT_TRUE(p) << p.status().message();
    EXPECT_EQ(p->format, r.format);
    EXPECT_NE(p->prompt.find("get_weather"), std::string::npos) << "the tools are described:\n" << p->prompt;
    // The grammar accepts the call (after the reasoning, which it leaves free when the prompt
    // opened it) and the parse finds it.
    const size_t call_at = r.output.find(call_marker(r.format));
    auto g = Grammar::parse(p->grammar);
    ASSERT_TRUE(g) << g.status().message();
    const std::string constrained =
        p->thinking_forced_open ? r.output.substr(r.output.find("<think>") + 7) : r.output.substr(call_at);
    GrammarMatcher gm(*g);
    EXPECT_TRUE(gm.accept_text(constrained) && gm.can_end()) << constrained << "\n" << p->grammar;
    if (r.think_in_grammar) {
      GrammarMatcher whole(*g);
      EXPECT_TRUE(whole.accept_text(r.output) && whole.can_end()) << r.output << "\n" << p->grammar;
    }
    auto m = chat::parse_assistant_output(p->format, p->thinking_forced_open ? constrained : r.output, p->parse_options());
    ASSERT_EQ(m.tool_calls.size(), 1u) << r.output;
    EXPECT_EQ(m.tool_calls[0].name, "get_weather");
    EXPECT_EQ(m.tool_calls[0].arguments, "{\"city\":\"Rome\"}");
    EXPECT_EQ(m.content, "");
    if (r.output.starts_with("<think>")) {
      EXPECT_FALSE(m.reasoning_content.empty());
    }
    // Sent back with the result.
    in.messages.push_back(m.to_json());
    in.messages.push_back(json{{"role", "tool"}, {"tool_call_id", m.tool_calls[0].id}, {"content", "18 degrees"}});
    auto out = t->render(in);
    ASSERT_TRUE(out) << out.status().message();
    EXPECT_NE(out->find(r.rendered), std::string::npos) << *out;
    EXPECT_NE(out->find("18 degrees"), std::string::npos) << *out;
  }
}

// Gemma 4 with enable_thinking: the prompt opens the model's turn only, the grammar for a required
// call lets the thought come first, the parse splits it off, and the next prompt shows it before
// the call (the template keeps reasoning of calls after the last user message); a message with
// text beside its call ends its turn, and llama.cpp opens the model's next one.
TEST(Gemma4, ThinkingPromptGrammarAndHistory) {
  const std::string src = llama_cpp_template("google-gemma-4-31B-it.jinja");
  if (src.empty()) {
    GTEST_SKIP() << "llama.cpp's models/templates/google-gemma-4-31B-it.jinja not found";
  }
  auto t = chat::ChatTemplate::parse(src, "<bos>", "<eos>");
  ASSERT_TRUE(t) << t.status().message();
  chat::ChatInputs in;
  in.messages = json::array({json{{"role", "user"}, {"content", "Weather in Rome?"}}});
  in.extra = json{{"enable_thinking", true}};
  // Without tools the channel markers (control tokens) are still kept for the parser.
  auto plain = chat::prepare_chat(*t, in, chat::ChatRequestOptions{});
  ASSERT_TRUE(plain) << plain.status().message();
  EXPECT_EQ(plain->format, ToolCallFormat::kNone);
  EXPECT_EQ(plain->preserved_tokens, (std::vector<std::string>{"<|channel>", "<channel|>"}));
  in.tools = kTools;
  chat::ChatRequestOptions opts;
  opts.tool_choice.mode = chat::ToolChoice::kRequired;
  auto p = chat::prepare_chat(*t, in, opts);
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_TRUE(p->prompt.starts_with("<bos><|turn>system\n<|think|>\n<|tool>declaration:get_weather{")) << p->prompt;
  EXPECT_TRUE(p->prompt.ends_with("<|turn>user\nWeather in Rome?<turn|>\n<|turn>model\n")) << p->prompt;
  const std::string out =
      "<|channel>thought\nRome, then answer.<channel|><|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}<tool_call|>";
  auto g = Grammar::parse(p->grammar);
  ASSERT_TRUE(g) << g.status().message();
  for (const std::string& text : {out, out.substr(out.find("<|tool_call>"))}) {
    GrammarMatcher gm(*g);
    EXPECT_TRUE(gm.accept_text(text) && gm.can_end()) << text << "\n" << p->grammar;
  }
  GrammarMatcher content_first(*g);
  EXPECT_FALSE(content_first.accept_text("Sure.<|tool_call>"));
  auto m = chat::parse_assistant_output(p->format, out, p->parse_options());
  EXPECT_EQ(m.reasoning_content, "Rome, then answer.");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"city\":\"Rome\"}");
  in.messages.push_back(m.to_json());
  in.messages.push_back(json{{"role", "tool"}, {"tool_call_id", m.tool_calls[0].id}, {"content", "{\"temp\": 18}"}});
  auto r = t->render(in);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_TRUE(
      r->ends_with("<|turn>model\n<|channel>thought\nRome, then answer.\n<channel|><|tool_call>call:get_weather{"
                   "city:<|\"|>Rome<|\"|>}<tool_call|><|tool_response>response:get_weather{value:<|\"|>{\"temp\": 18}"
                   "<|\"|>}<tool_response|>"))
      << *r;
  // Text beside the call: the template closes the turn after it; the model's next turn is opened.
  in.messages[1]["content"] = "Checking.";
  r = t->render(in);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_TRUE(r->ends_with("<tool_response|>Checking.<turn|>\n<|turn>model\n")) << *r;
  in.add_generation_prompt = false;
  r = t->render(in);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_TRUE(r->ends_with("<tool_response|>Checking.<turn|>\n")) << *r;
}

// The older Gemma 4 template reads no role "tool" messages: a call, its results and the answer
// are folded into one assistant message with tool_responses (JSON results as objects), as
// llama.cpp's workaround does.
TEST(Gemma4, OlderTemplateGetsToolResponses) {
  const std::string src = llama_cpp_template("google-gemma-4-31B-it-interleaved.jinja");
  if (src.empty()) {
    GTEST_SKIP() << "llama.cpp's models/templates/google-gemma-4-31B-it-interleaved.jinja not found";
  }
  auto t = chat::ChatTemplate::parse(src, "<bos>", "<eos>");
  ASSERT_TRUE(t) << t.status().message();
  chat::ChatInputs in;
  in.tools = kTools;
  in.messages = json::parse(R"([
    {"role": "user", "content": "Weather in Rome and Oslo?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}},
      {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 18, \"sky\": \"clear\"}"},
    {"role": "tool", "tool_call_id": "c2", "content": "cold"},
    {"role": "assistant", "content": "Rome 18, Oslo cold."},
    {"role": "user", "content": "Thanks"}])");
  auto r = t->render(in);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_NE(
      r->find("<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}<tool_call|><|tool_call>call:get_weather{"
              "city:<|\"|>Oslo<|\"|>}<tool_call|><|tool_response>response:get_weather{sky:<|\"|>clear<|\"|>,temp:18}"
              "<tool_response|><|tool_response>response:get_weather{value:<|\"|>cold<|\"|>}<tool_response|>Rome 18, Oslo "
              "cold.<turn|>\n<|turn>user\nThanks<turn|>\n"),
      std::string::npos)
      << *r;
  EXPECT_EQ(r->find("<|turn>tool"), std::string::npos) << *r;
}

// Continuing the final message (llama.cpp's continue_final_message): Gemma 4 continues its
// thinking channel (the template shows no reasoning of a message without calls), or writes the
// reasoning before the continued text; Ministral 3 continues inside [THINK]. The output then
// parses up to their own closing tag.
TEST(Gemma4, ContinuesTheFinalMessage) {
  const std::string src = llama_cpp_template("google-gemma-4-31B-it.jinja");
  const std::string mini = llama_cpp_template("mistralai-Ministral-3-14B-Reasoning-2512.jinja");
  if (src.empty() || mini.empty()) {
    GTEST_SKIP() << "llama.cpp's models/templates/ not found";
  }
  auto t = chat::ChatTemplate::parse(src, "<bos>", "<eos>");
  ASSERT_TRUE(t) << t.status().message();
  chat::ChatInputs in;
  in.messages = json::parse(R"([{"role": "user", "content": "Why is the sky blue?"},
                                {"role": "assistant", "content": "", "reasoning_content": "Rayleigh scat"}])");
  in.add_generation_prompt = false;
  in.continue_final = chat::ChatInputs::Continue::kAuto;
  auto p = chat::prepare_chat(*t, in, chat::ChatRequestOptions{});
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_TRUE(
      p->prompt.ends_with("<|turn>user\nWhy is the sky blue?<turn|>\n<|turn>model\n<|channel>thought\nRayleigh scat"))
      << p->prompt;
  EXPECT_TRUE(p->thinking_forced_open);
  auto m = chat::parse_assistant_output(p->format, "tering.<channel|>Blue light scatters more.", p->parse_options());
  EXPECT_EQ(m.reasoning_content, "tering.");
  EXPECT_EQ(m.content, "Blue light scatters more.");
  in.messages[1] = json{{"role", "assistant"}, {"content", "Blue"}, {"reasoning_content", "Rayleigh."}};
  p = chat::prepare_chat(*t, in, chat::ChatRequestOptions{});
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_TRUE(p->prompt.ends_with("<|turn>model\n<|channel>thought\nRayleigh.<channel|>Blue")) << p->prompt;
  EXPECT_FALSE(p->thinking_forced_open);

  auto mt = chat::ChatTemplate::parse(mini, "<s>", "</s>");
  ASSERT_TRUE(mt) << mt.status().message();
  in.messages = json::parse(R"([{"role": "user", "content": "2+2?"},
                                {"role": "assistant", "content": "", "reasoning_content": "Add"}])");
  p = chat::prepare_chat(*mt, in, chat::ChatRequestOptions{});
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_TRUE(p->prompt.ends_with("[INST]2+2?[/INST][THINK]Add")) << p->prompt;
  EXPECT_TRUE(p->thinking_forced_open);
  EXPECT_EQ(p->preserved_tokens, (std::vector<std::string>{"[THINK]", "[/THINK]"}));
  m = chat::parse_assistant_output(p->format, " them: 4.[/THINK]4", p->parse_options());
  EXPECT_EQ(m.reasoning_content, "them: 4.");
  EXPECT_EQ(m.content, "4");
  // With a required call, the grammar waits for the reasoning's own closing tag.
  in.tools = kTools;
  chat::ChatRequestOptions o;
  o.tool_choice.mode = chat::ToolChoice::kRequired;
  p = chat::prepare_chat(*mt, in, o);
  ASSERT_TRUE(p) << p.status().message();
  auto g = Grammar::parse(p->grammar);
  ASSERT_TRUE(g) << g.status().message();
  GrammarMatcher gm(*g);
  EXPECT_TRUE(gm.accept_text(" them.[/THINK][TOOL_CALLS]ping[ARGS]{}") && gm.can_end()) << p->grammar;
}

// Ministral 3: reasoning_content comes back as a thinking block ([THINK]...[/THINK] before the
// text), as llama.cpp passes it; other Mistral templates keep it a field.
TEST(Ministral3, ReasoningRenderedAsThinkingBlocks) {
  const std::string src = llama_cpp_template("mistralai-Ministral-3-14B-Reasoning-2512.jinja");
  if (src.empty()) {
    GTEST_SKIP() << "llama.cpp's models/templates/mistralai-Ministral-3-14B-Reasoning-2512.jinja not found";
  }
  auto t = chat::ChatTemplate::parse(src, "<s>", "</s>");
  ASSERT_TRUE(t) << t.status().message();
  chat::ChatInputs in;
  in.messages = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "Add them."},
    {"role": "user", "content": "3+3?"}])");
  auto r = t->render(in);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(*r,
            "<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]2+2?[/INST][THINK]Add them.[/THINK]4</s>[INST]3+3?[/INST]");
  // Its output: reasoning, then content or calls.
  auto m = chat::parse_assistant_output(ToolCallFormat::kMistralArgs, "[THINK]Six.[/THINK]6", true);
  EXPECT_EQ(m.reasoning_content, "Six.");
  EXPECT_EQ(m.content, "6");
  m = chat::parse_assistant_output(ToolCallFormat::kNone, "[THINK]Six.[/THINK]6", false);
  EXPECT_EQ(m.reasoning_content, "Six.");
  EXPECT_EQ(m.content, "6");
}

TEST(PartialParse, ForcedOpenThinking) {
  chat::ParseOptions o;
  o.thinking_forced_open = true;
  const std::string text = "Need the weather.\n</think>\n\n{\"tool_call\": {\"name\": \"ping\", \"arguments\": {}}}";
  check_stream(ToolCallFormat::kGeneric, text, o, char_cuts(text), true);
  o.partial = true;
  auto m = chat::parse_assistant_output(ToolCallFormat::kGeneric, "Need the weather.\n</thi", o);
  EXPECT_EQ(m.reasoning_content, "Need the weather.");
  EXPECT_EQ(m.content, "");
}

TEST(PartialParse, WhatIsHeldBack) {
  chat::ParseOptions o;
  o.partial = true;
  const auto p = [&](ToolCallFormat f, std::string_view t) { return chat::parse_assistant_output(f, t, o); };
  // A marker's beginning, trailing whitespace, an unfinished call.
  EXPECT_EQ(p(ToolCallFormat::kHermes, "Sure <tool_c").content, "Sure");
  EXPECT_EQ(p(ToolCallFormat::kHermes, "Sure <b").content, "Sure <b");
  EXPECT_EQ(p(ToolCallFormat::kHermes, "Sure\n\n").content, "Sure");
  auto m = p(ToolCallFormat::kHermes, "Sure <tool_call>{\"name\": \"ping\", \"arguments\": {}}");
  EXPECT_EQ(m.content, "Sure");
  EXPECT_TRUE(m.tool_calls.empty());
  // A call cut off streams as `pending` once its name is known and its arguments have begun:
  // complete scalars and string characters so far, in compact form.
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->name, "ping");
  EXPECT_EQ(m.pending->arguments, "{}");
  m = p(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 12");
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->arguments, "{\"a\":") << "12 may still grow";
  m = p(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 12, \"s\": \"x\\ny\\u00");
  ASSERT_TRUE(m.pending);
  EXPECT_EQ(m.pending->arguments, "{\"a\":12,\"s\":\"x\\ny");
  EXPECT_FALSE(p(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\"").pending) << "no arguments yet";
  EXPECT_FALSE(p(ToolCallFormat::kHermes, "<tool_call>{\"arguments\": {\"a\": 1").pending) << "no name yet";
  EXPECT_FALSE(p(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a").pending)
      << "arguments as a string wait for the end";
  EXPECT_FALSE(p(ToolCallFormat::kLlama31, "{\"name\": \"f\", \"parameters\": {\"a\": 1").pending) << "Hermes only";
  m = p(ToolCallFormat::kHermes, "Sure <tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  // Its id is the full parse's.
  EXPECT_EQ(m.tool_calls[0].id,
            parse(ToolCallFormat::kHermes, "Sure <tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call> Done.")
                .tool_calls[0]
                .id);
  // Reasoning so far; the start of a tag.
  m = p(ToolCallFormat::kHermes, "<think>Let me se");
  EXPECT_EQ(m.reasoning_content, "Let me se");
  EXPECT_EQ(m.content, "");
  EXPECT_EQ(p(ToolCallFormat::kHermes, "<think>Let me see.</th").reasoning_content, "Let me see.");
  EXPECT_EQ(p(ToolCallFormat::kNone, "<thi").content, "");
  EXPECT_EQ(p(ToolCallFormat::kNone, "<thing").content, "<thing");
  // Without tools nothing else is held back, and the partial parse is the full one.
  EXPECT_EQ(p(ToolCallFormat::kNone, "Hello <tool_c ").content, "Hello <tool_c ");
  // A generic reply streams its text.
  EXPECT_EQ(p(ToolCallFormat::kGeneric, "{\"response\": \"Hel").content, "Hel");
  EXPECT_EQ(p(ToolCallFormat::kGeneric, "{\"response\": \"a\\u00").content, "a");
  EXPECT_EQ(p(ToolCallFormat::kGeneric, "{\"tool_call\": {\"name\": \"pi").content, "");
  // Mistral's name and arguments.
  EXPECT_EQ(p(ToolCallFormat::kMistralArgs, "Calling.[TOOL_CALLS]get_wea").content, "Calling.");
  EXPECT_EQ(p(ToolCallFormat::kMistralArgs, "Calling.[TOOL_").content, "Calling.");
}

TEST(PartialParse, LongOutputCost) {
  // A 4,000-token reply (~16 KB) reparsed after every token, as the C API's stream_parse does, and
  // with the event JSON it then builds and serializes ({"content", "reasoning_content",
  // "tool_calls"}, dumped as loom_serve_c.cpp dumps it).
  std::string text = "<think>Plan the answer first.</think>";
  while (text.size() < 16000) text += "The weather in Paris is sunny, with a light breeze from the west. ";
  text += "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>";
  chat::ParseOptions o;
  o.partial = true;
  double ms[2] = {0, 0};
  size_t n = 0, bytes = 0;
  for (int with_json = 0; with_json < 2; ++with_json) {
    n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t cut = 4; cut <= text.size(); cut += 4, ++n) {
      const ParsedMessage m =
          chat::parse_assistant_output(ToolCallFormat::kHermes, std::string_view(text).substr(0, cut), o);
      if (with_json) {
        const json j = m.to_json();
        json d = json::object();
        d["content"] = j["content"];
        d["reasoning_content"] = m.reasoning_content;
        d["tool_calls"] = j.contains("tool_calls") ? j["tool_calls"] : json::array();
        bytes += d.dump(-1, ' ', false, json::error_handler_t::replace).size();
      }
    }
    ms[with_json] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::printf(
      "%zu prefixes of a %zu-byte output: partial parse %.1f ms in all (%.2f us each); with the event JSON "
      "%.1f ms (%.1f us each, %.1f MB)\n",
      n, text.size(), ms[0], 1e3 * ms[0] / double(n), ms[1], 1e3 * ms[1] / double(n), double(bytes) / 1e6);
  EXPECT_LT(ms[1], 20000.0);  // generous: sanitizer builds on a shared machine
}

// --- grammars ----------------------------------------------------------------------------------

std::shared_ptr<const Grammar> grammar(ToolCallFormat f, const std::string* forced, bool parallel,
                                       bool allow_response = false, const json& tools = kTools) {
  auto g = chat::tool_call_grammar(f, tools, forced, parallel, allow_response);
  EXPECT_TRUE(g) << g.status().message();
  if (!g) return nullptr;
  auto p = Grammar::parse(*g);
  EXPECT_TRUE(p) << p.status().message() << "\n" << *g;
  return p ? *p : nullptr;
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  if (!g) return false;
  GrammarMatcher m(g);
  return m.accept_text(text) && m.can_end();
}

struct GrammarCase {
  ToolCallFormat format;
  std::vector<std::string> good;      // one call each, any tool
  std::vector<std::string> parallel;  // accepted only with parallel_tool_calls
  std::vector<std::string> bad;       // never
};

std::vector<GrammarCase> grammar_cases() {
  return {
      {ToolCallFormat::kHermes,
       {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
        "\"celsius\"}}\n</tool_call>",
        "<tool_call>{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":-2}}</tool_call>",
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"},
       {"<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", "
        "\"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>"},
       {"<tool_call>\n{\"name\": \"get_wether\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",     // unknown name
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\"}}\n</tool_call>",  // no city
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"x\": 1}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"kelvin\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Llanfairpwllgwyngyll\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1.5, \"b\": 2}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n",  // unclosed
        "{\"name\": \"ping\", \"arguments\": {}}",                 // no tags
        "Sure! <tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {}, \"name\": \"ping\"}\n</tool_call>"}},
      {ToolCallFormat::kQwenXml,
       {"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork <b>\n</parameter>\n<parameter=unit>\ncelsius\n"
        "</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n-2\n</parameter>\n</function>\n</"
        "tool_call>",
        "<tool_call>\n<function=ping>\n</function>\n</tool_call>"},
       {"<tool_call>\n<function=ping>\n</function>\n</tool_call>\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</"
        "parameter>\n"
        "<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>"},
       {"<tool_call>\n<function=get_wether>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=x>\n1\n</parameter>\n"
        "</function>\n</tool_call>",
        "<tool_call>\n<function=add>\n<parameter=a>\n1.5\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n</"
        "tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nPa\n</parameter>\nris\n</parameter>\n</function>\n</"
        "tool_call>",
        "<tool_call>\n<function=ping>\n</function>\n", "<tool_call><function=ping>\n</function>\n</tool_call>",
        "Sure! <tool_call>\n<function=ping>\n</function>\n</tool_call>"}},
      {ToolCallFormat::kLfm2,
       {"<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|>",
        "<|tool_call_start|>[get_weather(city=\"Paris\", unit=\"celsius\")]<|tool_call_end|>",
        "<|tool_call_start|>[get_weather(city=\"Paris\",unit=\"celsius\")]<|tool_call_end|>",
        "<|tool_call_start|>[add(a=1, b=-2)]<|tool_call_end|>", "<|tool_call_start|>[ping()]<|tool_call_end|>"},
       {"<|tool_call_start|>[ping(), add(a=1, b=2)]<|tool_call_end|>",
        "<|tool_call_start|>[get_weather(city=\"Rome\"),get_weather(city=\"Oslo\")]<|tool_call_end|>"},
       {"<|tool_call_start|>[get_wether(city=\"Paris\")]<|tool_call_end|>",     // unknown name
        "<|tool_call_start|>[get_weather(unit=\"celsius\")]<|tool_call_end|>",  // no city
        "<|tool_call_start|>[get_weather(city=\"Paris\", x=1)]<|tool_call_end|>",
        "<|tool_call_start|>[get_weather(city=\"Paris\", unit=\"kelvin\")]<|tool_call_end|>",
        "<|tool_call_start|>[get_weather(city=\"Llanfairpwllgwyngyll\")]<|tool_call_end|>",
        "<|tool_call_start|>[get_weather(city=\"Paris\", city=\"Rome\")]<|tool_call_end|>",
        "<|tool_call_start|>[add(a=1.5, b=2)]<|tool_call_end|>",
        "<|tool_call_start|>[add(b=2, a=1)]<|tool_call_end|>",  // the schema's order
        "<|tool_call_start|>[ping()]",                          // unclosed
        "<|tool_call_start|>[]<|tool_call_end|>", "[ping()]", "Sure! <|tool_call_start|>[ping()]<|tool_call_end|>"}},
      {ToolCallFormat::kGemma4,
       {"<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>",
        "<|tool_call>call:get_weather{city:<|\"|>a \"<b>\" <|x<|\"<|\"|>}<tool_call|>",  // "<|" starts no quote here
        "<|tool_call>call:add{a:1,b:-2}<tool_call|>", "<|tool_call>call:ping{}<tool_call|>"},
       {"<|tool_call>call:ping{}<tool_call|><|tool_call>call:add{a:1,b:2}<tool_call|>",
        "<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}<tool_call|><|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}"
        "<tool_call|>"},
       {"<|tool_call>call:get_wether{city:<|\"|>Paris<|\"|>}<tool_call|>",     // unknown name
        "<|tool_call>call:get_weather{unit:<|\"|>celsius<|\"|>}<tool_call|>",  // no city
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,x:1}<tool_call|>",
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>kelvin<|\"|>}<tool_call|>",
        "<|tool_call>call:get_weather{city:\"Paris\"}<tool_call|>",  // a JSON string
        "<|tool_call>call:get_weather{city:<|\"|>Pa<|\"|>ris<|\"|>}<tool_call|>",
        "<|tool_call>call:get_weather{unit:<|\"|>celsius<|\"|>,city:<|\"|>Paris<|\"|>}<tool_call|>",  // sorted keys
        "<|tool_call>call:add{a:1.5,b:2}<tool_call|>", "<|tool_call>call:add{b:2,a:1}<tool_call|>",
        "<|tool_call>call:ping{}",  // unclosed
        "call:ping{}", "Sure! <|tool_call>call:ping{}<tool_call|>"}},
      {ToolCallFormat::kLlama31,
       {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        "{\"type\": \"function\", \"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
        "{\"name\": \"ping\", \"parameters\": {}}"},
       {},
       {"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "{\"name\": \"nope\", \"parameters\": {}}",
        "{\"name\": \"ping\", \"parameters\": {}}{\"name\": \"ping\", \"parameters\": {}}",
        "<|python_tag|>{\"name\": \"ping\", \"parameters\": {}}"}},
      {ToolCallFormat::kMistral,
       {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]",
        "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}, \"id\": \"000000000\"}]"},
       {"[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}, \"id\": \"a00000000\"}, {\"name\": \"add\", \"arguments\": "
        "{\"a\": 1, \"b\": 2}, \"id\": \"b00000000\"}]"},
       {"[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}]",                         // no id
        "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}, \"id\": \"abc\"}]",        // short id
        "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}, \"id\": \"abc_DEF12\"}]",  // not alphanumeric
        "[TOOL_CALLS][]", "[{\"name\": \"ping\", \"arguments\": {}, \"id\": \"abcDEF123\"}]"}},
      {ToolCallFormat::kMistralArgs,
       {"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "[TOOL_CALLS]ping[ARGS]{}",
        "[TOOL_CALLS]add[ARGS]{\"a\": 10, \"b\": 20}"},
       {"[TOOL_CALLS]ping[ARGS]{}[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}"},
       {"[TOOL_CALLS]get_weather[ARGS]{}", "[TOOL_CALLS]pong[ARGS]{}", "ping[ARGS]{}", "[TOOL_CALLS] ping[ARGS]{}",
        "[TOOL_CALLS]ping{}"}},
      {ToolCallFormat::kGeneric,
       {"{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}",
        "{\"tool_call\": {\"name\": \"ping\", \"arguments\": {}}}"},
       {"{\"tool_calls\": [{\"name\": \"ping\", \"arguments\": {}, \"id\": \"call1\"}]}"},
       {"{\"tool_call\": {\"name\": \"nope\", \"arguments\": {}}}", "{\"response\": \"Hi\"}",
        "{\"tool_call\": {\"name\": \"add\", \"arguments\": {\"a\": 1}}}"}},
  };
}

TEST(ToolCallGrammar, AcceptsTheFormatsCallsOnly) {
  for (const GrammarCase& c : grammar_cases()) {
    SCOPED_TRACE(chat::tool_call_format_name(c.format));
    auto single = grammar(c.format, nullptr, false);
    auto par = grammar(c.format, nullptr, true);
    ASSERT_TRUE(single && par);
    for (const std::string& t : c.good) {
      EXPECT_TRUE(accepts(single, t)) << t;
      // The generic format's parallel form is {"tool_calls": [...]} only (as llama.cpp's).
      EXPECT_EQ(accepts(par, t), c.format != ToolCallFormat::kGeneric) << t;
      // What the grammar accepts parses back as a call.
      auto m = parse(c.format, t);
      EXPECT_EQ(m.tool_calls.size(), 1u) << t;
    }
    for (const std::string& t : c.parallel) {
      EXPECT_FALSE(accepts(single, t)) << t;
      EXPECT_TRUE(accepts(par, t)) << t;
      auto m = parse(c.format, t);
      EXPECT_GE(m.tool_calls.size(), 1u) << t;
    }
    for (const std::string& t : c.bad) {
      EXPECT_FALSE(accepts(single, t)) << t;
      EXPECT_FALSE(accepts(par, t)) << t;
    }
  }
}

TEST(ToolCallGrammar, ForcedFunction) {
  const std::string name = "add";
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama31, ToolCallFormat::kMistral, ToolCallFormat::kMistralArgs,
        ToolCallFormat::kGeneric, ToolCallFormat::kLfm2, ToolCallFormat::kGemma4}) {
    SCOPED_TRACE(chat::tool_call_format_name(f));
    auto g = grammar(f, &name, false);
    for (const GrammarCase& c : grammar_cases()) {
      if (c.format != f) continue;
      for (const std::string& t : c.good)
        EXPECT_EQ(accepts(g, t), t.find("\"add\"") != std::string::npos || t.find("]add[") != std::string::npos ||
                                     t.find("[add(") != std::string::npos || t.find("call:add{") != std::string::npos)
            << t;
    }
  }
  const std::string missing = "nope";
  auto r = chat::tool_call_grammar(ToolCallFormat::kHermes, kTools, &missing, false);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("nope"), std::string::npos);
}

TEST(ToolCallGrammar, GenericAutoAllowsAResponse) {
  auto g = grammar(ToolCallFormat::kGeneric, nullptr, false, /*allow_response=*/true);
  EXPECT_TRUE(accepts(g, "{\"response\": \"It is sunny.\"}"));
  EXPECT_TRUE(accepts(g, "{\"tool_call\": {\"name\": \"ping\", \"arguments\": {}}}"));
  EXPECT_FALSE(accepts(g, "It is sunny."));
}

TEST(ToolCallGrammar, Errors) {
  EXPECT_EQ(chat::tool_call_grammar(ToolCallFormat::kNone, kTools, nullptr, false).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(chat::tool_call_grammar(ToolCallFormat::kHermes, json::array(), nullptr, false).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      chat::tool_call_grammar(ToolCallFormat::kHermes, json::parse(R"([{"type": "x"}])"), nullptr, false).status().code(),
      StatusCode::kInvalidArgument);
  // A parameters schema outside the converter's subset names the tool and the JSON pointer.
  auto r = chat::tool_call_grammar(ToolCallFormat::kHermes, json::parse(R"([{"type": "function", "function": {
      "name": "f", "parameters": {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}}}}])"),
                                   nullptr, false);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("tools[0].function.parameters"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("/properties/s/pattern"), std::string::npos) << r.status().message();
}

TEST(ToolCallGrammar, NamesNeedingEscapes) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "say\"hi\\", "parameters":
      {"type": "object", "properties": {"t": {"type": "string"}}, "required": ["t"]}}}])");
  auto g = grammar(ToolCallFormat::kHermes, nullptr, false, false, tools);
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\": \"say\\\"hi\\\\\", \"arguments\": {\"t\": \"x\"}}\n</tool_call>"));
  auto m = parse(ToolCallFormat::kHermes,
                 "<tool_call>\n{\"name\": \"say\\\"hi\\\\\", \"arguments\": {\"t\": \"x\"}}\n</tool_call>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "say\"hi\\");
}

TEST(PrefixGbnfRules, RenamesRulesOnly) {
  const std::string g = "root ::= item (\",\" item)* # a comment with root\nitem ::= [a-z-]{1,3} \"root\\\"x\" | [\\]x]\n";
  const std::string p = chat::prefix_gbnf_rules(g, "p-");
  EXPECT_EQ(p, "p-root ::= p-item (\",\" p-item)* \np-item ::= [a-z-]{1,3} \"root\\\"x\" | [\\]x]\n");
  auto a = Grammar::parse(g), b = Grammar::parse(p, "p-root");
  ASSERT_TRUE(a && b) << (b ? "" : b.status().message());
  for (const std::string t : {"ab,c", "root\"x", "]", "abcd", ""}) {
    GrammarMatcher ma(*a), mb(*b);
    EXPECT_EQ(ma.accept_text(t) && ma.can_end(), mb.accept_text(t) && mb.can_end()) << t;
  }
}

// --- response_format ---------------------------------------------------------------------------

TEST(ResponseFormatGrammar, Forms) {
  const auto g = [](const char* rf) {
    auto r = chat::response_format_grammar(json::parse(rf));
    EXPECT_TRUE(r) << rf << ": " << r.status().message();
    auto p = r ? Grammar::parse(*r) : Expected<std::shared_ptr<const Grammar>>(internal_error("no grammar"));
    EXPECT_TRUE(p) << rf;
    return p ? *p : nullptr;
  };
  auto any = g(R"({"type": "json_object"})");
  EXPECT_TRUE(accepts(any, "{\"a\": [1, {\"b\": null}]}"));
  EXPECT_TRUE(accepts(any, "{}"));
  EXPECT_FALSE(accepts(any, "[1]"));
  EXPECT_FALSE(accepts(any, "hello"));

  auto schema = g(R"({"type": "json_schema", "json_schema": {"name": "r", "strict": true, "schema":
      {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}})");
  EXPECT_TRUE(accepts(schema, "{\"n\": 3}"));
  EXPECT_FALSE(accepts(schema, "{\"n\": \"3\"}"));
  EXPECT_FALSE(accepts(schema, "{}"));

  auto llama = g(R"({"type": "json_object", "schema": {"type": "array", "items": {"type": "boolean"}}})");
  EXPECT_TRUE(accepts(llama, "[true, false]"));
  EXPECT_FALSE(accepts(llama, "{}"));

  EXPECT_EQ(*chat::response_format_grammar(json::parse(R"({"type": "text"})")), "");
  EXPECT_EQ(*chat::response_format_grammar(nullptr), "");

  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"("json")", "response_format: expected an object"},
      {R"({})", "response_format.type"},
      {R"({"type": "xml"})", "response_format.type: unknown type \"xml\""},
      {R"({"type": "json_schema"})", "response_format.json_schema: expected an object"},
      {R"({"type": "json_schema", "json_schema": {"name": "x"}})", "response_format.json_schema.schema: missing"},
      {R"({"type": "json_schema", "json_schema": {"schema": 5}})", "response_format.json_schema.schema"},
  };
  for (const auto& [text, msg] : bad) {
    auto r = chat::response_format_grammar(json::parse(text));
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(r.status().message().find(msg), std::string::npos) << r.status().message();
  }
  auto unsup = chat::response_format_grammar(json::parse(R"({"type": "json_schema", "json_schema": {"schema":
      {"type": "string", "pattern": "x+"}}})"));
  ASSERT_FALSE(unsup);
  EXPECT_EQ(unsup.status().code(), StatusCode::kUnsupported);
}

// --- generation under the grammars ------------------------------------------------------------

// Samples from random logits under the grammar over a real vocabulary; returns the text once the
// grammar is done or an end-of-generation token is picked ("" on a dead end or no end).
std::string generate(const Vocab& vocab, const std::string& grammar, uint64_t seed) {
  SamplerParams p;
  p.seed = seed;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.grammar = grammar;
  auto s = Sampler::create(p, &vocab);
  EXPECT_TRUE(s) << s.status().message();
  if (!s) return "";
  std::mt19937 rng(uint32_t(seed * 7919 + 3));
  std::normal_distribution<float> nd(0, 2);
  std::vector<float> logits(size_t(vocab.n_tokens())), bias(logits.size(), 0.0f);
  // Nudge pieces that close strings and containers so unbounded parts end in reasonable time.
  for (int32_t i = 0; i < vocab.n_tokens(); ++i) {
    const std::string piece = vocab.token_to_piece(i, true);
    if (piece.find_first_of("\"]}<") != std::string::npos) bias[size_t(i)] = 3.0f;
    // kQwenXml's raw strings end only with "\n</parameter>": favour its pieces.
    static const std::string kXmlClose = "\n</parameter>\n</function>\n</tool_call>";
    if (grammar.find("xs0") != std::string::npos && !piece.empty() && kXmlClose.find(piece) != std::string::npos)
      bias[size_t(i)] = 6.0f;
    if (vocab.is_eog(i)) bias[size_t(i)] = 4.0f;
  }
  // kGemma4's strings end only with <|"|>: favour its next character once it has begun, and '<'.
  static const std::string kGemmaQuote = "<|\"|>";
  const bool gemma = grammar.find("g4s0") != std::string::npos;
  std::vector<std::vector<int32_t>> quote_tokens(kGemmaQuote.size());
  if (gemma) {
    for (int32_t i = 0; i < vocab.n_tokens(); ++i) {
      const std::string piece = vocab.token_to_piece(i, true);
      for (size_t k = 0; k < kGemmaQuote.size(); ++k)
        if (piece.size() == 1 && piece[0] == kGemmaQuote[k]) quote_tokens[k].push_back(i);
    }
  }
  std::string text;
  for (int step = 0; step < 1500; ++step) {
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = nd(rng) + bias[i];
    if (gemma) {
      size_t k = 0;
      for (size_t n = kGemmaQuote.size() - 1; n > 0 && k == 0; --n)
        if (text.ends_with(kGemmaQuote.substr(0, n))) k = n;
      for (int32_t t : quote_tokens[k]) logits[size_t(t)] += k ? 8.0f : 2.0f;
    }
    const int32_t tok = s->sample(logits);
    EXPECT_GE(tok, 0) << "grammar dead end after: " << text;
    if (tok < 0) return "";
    if (vocab.is_eog(tok)) return text;
    s->accept(tok);
    text += vocab.token_to_piece(tok, true);
    if (s->grammar_done()) return text;
  }
  ADD_FAILURE() << "did not finish: " << text;
  return "";
}

TEST(ToolCallGrammar, RandomModelsEmitParseableCalls) {
  auto model = Model::load(shared_path("models/stories260K.gguf"), {.vocab_only = true, .repack = true, .progress = {}});
  ASSERT_TRUE(model) << model.status().message();
  const Vocab& vocab = (*model)->vocab();
  std::set<std::string> names;
  for (const auto& t : kTools) names.insert(t["function"]["name"].get<std::string>());
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama31, ToolCallFormat::kMistral, ToolCallFormat::kMistralArgs,
        ToolCallFormat::kGeneric, ToolCallFormat::kQwenXml, ToolCallFormat::kLfm2, ToolCallFormat::kGemma4}) {
    // kQwenXml types its parameters' text by the tools (a string parameter of digits stays text).
    chat::ParseOptions po;
    if (f == ToolCallFormat::kQwenXml) po.tools = kTools;
    for (bool parallel : {false, true}) {
      auto g = chat::tool_call_grammar(f, kTools, nullptr, parallel);
      ASSERT_TRUE(g) << g.status().message();
      for (uint64_t seed = 0; seed < 8; ++seed) {
        SCOPED_TRACE(std::string(chat::tool_call_format_name(f)) + (parallel ? " parallel" : "") + " seed " +
                     std::to_string(seed));
        const std::string text = generate(vocab, *g, seed);
        ASSERT_FALSE(text.empty());
        auto m = chat::parse_assistant_output(f, text, po);
        ASSERT_GE(m.tool_calls.size(), 1u) << text;
        check_stream(f, text, po, char_cuts(text), /*clean=*/false);
        if (!parallel || f == ToolCallFormat::kLlama31) {
          EXPECT_EQ(m.tool_calls.size(), 1u) << text;
        }
        EXPECT_EQ(m.content, "") << text;
        for (const ToolCall& c : m.tool_calls) {
          EXPECT_TRUE(names.count(c.name)) << c.name;
          const json args = json::parse(c.arguments);
          if (c.name == "get_weather") {
            ASSERT_TRUE(args.contains("city")) << text;
            // (kQwenXml's and kGemma4's grammars keep string parameters raw, as llama.cpp's: no maxLength.)
            if (f != ToolCallFormat::kQwenXml && f != ToolCallFormat::kGemma4) {
              EXPECT_LE(args["city"].get<std::string>().size(), 12u * 4);
            }
            EXPECT_TRUE(args["city"].is_string()) << text;
          }
          if (c.name == "add") {
            EXPECT_TRUE(args["a"].is_number_integer() && args["b"].is_number_integer()) << text;
          }
          if (c.name == "ping") {
            EXPECT_EQ(args, json::object()) << text;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom::test
