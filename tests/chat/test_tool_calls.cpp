// Tool calls: format detection for every real template, parsing each format's output (single,
// parallel, leading text, <think>, malformed and truncated calls), the GBNF grammars that force a
// call (checked with loom's matcher: correct calls accepted, wrong ones refused, and random
// sampling over a real vocabulary always yields a call that parses), response_format grammars and
// the per-format stop strings.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
    EXPECT_EQ(chat::detect_tool_call_format(src), fmt) << file << ": got " << chat::tool_call_format_name(
                                                                                     chat::detect_tool_call_format(src));
  }
  EXPECT_EQ(chat::detect_tool_call_format(chat::chatml_template_source()), ToolCallFormat::kHermes);
  EXPECT_EQ(chat::detect_tool_call_format(""), ToolCallFormat::kGeneric);
  EXPECT_STREQ(chat::tool_call_format_name(ToolCallFormat::kMistralArgs), "mistral-args");
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
            "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>");
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
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",   // truncated
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {city: Paris}}\n</tool_call>",  // not JSON
           "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                                // no name
           "<tool_call>\n{\"name\": \"f\", \"arguments\": 5}\n</tool_call>",                // arguments not an object
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call",                // closing tag cut
           "<tool_call>",
           "{\"name\": \"f\"",
       }) {
    auto m = parse(ToolCallFormat::kHermes, text);
    EXPECT_TRUE(m.tool_calls.empty()) << text;
    EXPECT_EQ(m.content, text);
  }
  // Calls before a malformed one are kept; the rest becomes content.
  auto m = parse(ToolCallFormat::kHermes,
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
  auto m = parse(ToolCallFormat::kMistral,
                 "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]</s>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(m.tool_calls[0].id, "abcDEF123");

  // Parallel, without ids (generated: 9 alphanumerics, as Nemo's template requires), leading text.
  m = parse(ToolCallFormat::kMistral,
            "On it. [TOOL_CALLS] [{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]");
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

TEST(ParseToolCalls, MistralArgs) {
  auto m = parse(ToolCallFormat::kMistralArgs, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m.tool_calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(m.tool_calls[0].id.size(), 9u);

  m = parse(ToolCallFormat::kMistralArgs,
            "[THINK]Two calls.[/THINK]Both:[TOOL_CALLS]ping[ARGS]{}[TOOL_CALLS]add[CALL_ID]x1y2z3w4v[ARGS]{\"a\": 1, \"b\": 2}</s>");
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
  auto m = parse(ToolCallFormat::kGeneric,
                 "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}");
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
                                   "Need the weather.\n</think>\n\n{\"tool_call\": {\"name\": \"ping\", \"arguments\": {}}}", o);
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
  auto d = parse(ToolCallFormat::kHermes, text + " ");
  EXPECT_NE(a.tool_calls[0].id, d.tool_calls[0].id);
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
  const std::vector<std::string> pieces = {"<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "{",
                                           "}", "[", "]", "\"", "name", "arguments", ":", ",", "<|python_tag|>",
                                           "<think>", "</think>", "\\", "x", " ", "\n", ".call(", ")", "=", "1"};
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
  std::vector<std::string> good;       // one call each, any tool
  std::vector<std::string> parallel;   // accepted only with parallel_tool_calls
  std::vector<std::string> bad;        // never
};

std::vector<GrammarCase> grammar_cases() {
  return {
      {ToolCallFormat::kHermes,
       {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
        "<tool_call>{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":-2}}</tool_call>",
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"},
       {"<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", "
        "\"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>"},
       {"<tool_call>\n{\"name\": \"get_wether\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",  // unknown name
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\"}}\n</tool_call>",  // no city
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"x\": 1}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"kelvin\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Llanfairpwllgwyngyll\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1.5, \"b\": 2}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n",  // unclosed
        "{\"name\": \"ping\", \"arguments\": {}}",                  // no tags
        "Sure! <tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {}, \"name\": \"ping\"}\n</tool_call>"}},
      {ToolCallFormat::kLlama31,
       {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        "{\"type\": \"function\", \"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
        "{\"name\": \"ping\", \"parameters\": {}}"},
       {},
       {"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
        "{\"name\": \"nope\", \"parameters\": {}}",
        "{\"name\": \"ping\", \"parameters\": {}}{\"name\": \"ping\", \"parameters\": {}}",
        "<|python_tag|>{\"name\": \"ping\", \"parameters\": {}}"}},
      {ToolCallFormat::kMistral,
       {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]",
        "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}, \"id\": \"000000000\"}]"},
       {"[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}, \"id\": \"a00000000\"}, {\"name\": \"add\", \"arguments\": "
        "{\"a\": 1, \"b\": 2}, \"id\": \"b00000000\"}]"},
       {"[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}]",                       // no id
        "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}, \"id\": \"abc\"}]",       // short id
        "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}, \"id\": \"abc_DEF12\"}]", // not alphanumeric
        "[TOOL_CALLS][]", "[{\"name\": \"ping\", \"arguments\": {}, \"id\": \"abcDEF123\"}]"}},
      {ToolCallFormat::kMistralArgs,
       {"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "[TOOL_CALLS]ping[ARGS]{}",
        "[TOOL_CALLS]add[ARGS]{\"a\": 10, \"b\": 20}"},
       {"[TOOL_CALLS]ping[ARGS]{}[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}"},
       {"[TOOL_CALLS]get_weather[ARGS]{}", "[TOOL_CALLS]pong[ARGS]{}", "ping[ARGS]{}",
        "[TOOL_CALLS] ping[ARGS]{}", "[TOOL_CALLS]ping{}"}},
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
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama31, ToolCallFormat::kMistral,
                           ToolCallFormat::kMistralArgs, ToolCallFormat::kGeneric}) {
    SCOPED_TRACE(chat::tool_call_format_name(f));
    auto g = grammar(f, &name, false);
    for (const GrammarCase& c : grammar_cases()) {
      if (c.format != f) continue;
      for (const std::string& t : c.good)
        EXPECT_EQ(accepts(g, t), t.find("\"add\"") != std::string::npos || t.find("]add[") != std::string::npos) << t;
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
  EXPECT_EQ(chat::tool_call_grammar(ToolCallFormat::kHermes, json::parse(R"([{"type": "x"}])"), nullptr, false)
                .status()
                .code(),
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
  auto m = parse(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"say\\\"hi\\\\\", \"arguments\": {\"t\": \"x\"}}\n</tool_call>");
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
    if (vocab.is_eog(i)) bias[size_t(i)] = 4.0f;
  }
  std::string text;
  for (int step = 0; step < 1500; ++step) {
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = nd(rng) + bias[i];
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
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama31, ToolCallFormat::kMistral,
                           ToolCallFormat::kMistralArgs, ToolCallFormat::kGeneric}) {
    for (bool parallel : {false, true}) {
      auto g = chat::tool_call_grammar(f, kTools, nullptr, parallel);
      ASSERT_TRUE(g) << g.status().message();
      for (uint64_t seed = 0; seed < 8; ++seed) {
        SCOPED_TRACE(std::string(chat::tool_call_format_name(f)) + (parallel ? " parallel" : "") + " seed " +
                     std::to_string(seed));
        const std::string text = generate(vocab, *g, seed);
        ASSERT_FALSE(text.empty());
        auto m = parse(f, text);
        ASSERT_GE(m.tool_calls.size(), 1u) << text;
        if (!parallel || f == ToolCallFormat::kLlama31) {
          EXPECT_EQ(m.tool_calls.size(), 1u) << text;
        }
        EXPECT_EQ(m.content, "") << text;
        for (const ToolCall& c : m.tool_calls) {
          EXPECT_TRUE(names.count(c.name)) << c.name;
          const json args = json::parse(c.arguments);
          if (c.name == "get_weather") {
            ASSERT_TRUE(args.contains("city")) << text;
            EXPECT_LE(args["city"].get<std::string>().size(), 12u * 4);
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
