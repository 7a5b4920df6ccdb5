// Anthropic's Messages API (src/api/anthropic.h): request translation field by field, tool use and
// tool results, the non-streamed message for each finish, every stream event sequence, errors, and
// hostile bodies (only ApiError 400 naming the field may escape).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/anthropic.h"

namespace loom::api {
namespace {

json J(const char* s) { return json::parse(s); }

// A minimal valid body with `extra` merged in.
json body_with(const json& extra) {
  json b = J(R"({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]})");
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

// Translates b, which must fail with a 400 whose message starts with `prefix`.
void expect_400(const json& b, const std::string& prefix) {
  try {
    json out = anthropic_to_chat(b);
    ADD_FAILURE() << "no error for " << b.dump() << " -> " << out.dump();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.message;
    EXPECT_EQ(e.message.substr(0, prefix.size()), prefix) << e.message;
  }
}

// ---- request translation ----

TEST(AnthropicRequest, MinimalBody) {
  json out = anthropic_to_chat(J(R"({"model": "claude", "max_tokens": 64,
      "messages": [{"role": "user", "content": "Hello"}]})"));
  EXPECT_EQ(out, J(R"({"model": "claude", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 64})"));
}

TEST(AnthropicRequest, MaxTokensDefaultsAsLlamaServer) {
  json out = anthropic_to_chat(J(R"({"messages": [{"role": "user", "content": "Hello"}]})"));
  EXPECT_EQ(out["max_tokens"], 4096);
  EXPECT_FALSE(out.contains("model"));
}

TEST(AnthropicRequest, SystemString) {
  json out = anthropic_to_chat(body_with(J(R"({"system": "Be brief."})")));
  EXPECT_EQ(out["messages"], J(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])"));
}

TEST(AnthropicRequest, SystemBlocksJoinedAndBillingStampNormalized) {
  json out = anthropic_to_chat(body_with(J(R"({"system": [
      {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=a5145;"},
      {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]})")));
  EXPECT_EQ(
      out["messages"][0],
      J(R"({"role": "system", "content": "x-anthropic-billing-header: cc_version=2.1; cch=fffff;You are Claude Code."})"));
  // Only the header's 5-character stamp followed by ';' is touched.
  out = anthropic_to_chat(body_with(J(R"({"system": "x-anthropic-billing-header: cch=abc; rest"})")));
  EXPECT_EQ(out["messages"][0]["content"], "x-anthropic-billing-header: cch=abc; rest");
  out = anthropic_to_chat(body_with(J(R"({"system": "say cch=12345; please"})")));
  EXPECT_EQ(out["messages"][0]["content"], "say cch=12345; please");
}

TEST(AnthropicRequest, TextBlocksBecomeParts) {
  json out = anthropic_to_chat(J(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [
      {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "b"}]}]})"));
  EXPECT_EQ(out["messages"],
            J(R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])"));
}

TEST(AnthropicRequest, SamplingFields) {
  json out = anthropic_to_chat(body_with(J(R"({"temperature": 0.5, "top_p": 0.9, "top_k": 40,
      "stop_sequences": ["END", "\n\n"], "stream": true, "metadata": {"user_id": "u"}, "service_tier": "auto"})")));
  EXPECT_EQ(out, J(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": ["END", "\n\n"],
      "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "stream": true})"));
}

TEST(AnthropicRequest, IntegralFloatsAreIntegers) {
  json out = anthropic_to_chat(body_with(J(R"({"max_tokens": 100.0, "top_k": 5.0})")));
  EXPECT_EQ(out["max_tokens"], 100);
  EXPECT_EQ(out["top_k"], 5);
}

TEST(AnthropicRequest, Tools) {
  json out = anthropic_to_chat(body_with(J(R"({"tools": [
      {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object",
       "properties": {"city": {"type": "string"}}, "required": ["city"]}},
      {"type": "custom", "name": "noop", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}]})")));
  EXPECT_EQ(out["tools"], J(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "noop", "description": "", "parameters": {"type": "object"}}}])"));
}

TEST(AnthropicRequest, ToolChoice) {
  EXPECT_EQ(anthropic_to_chat(body_with(J(R"({"tool_choice": {"type": "auto"}})")))["tool_choice"], "auto");
  EXPECT_EQ(anthropic_to_chat(body_with(J(R"({"tool_choice": {"type": "any"}})")))["tool_choice"], "required");
  EXPECT_EQ(anthropic_to_chat(body_with(J(R"({"tool_choice": {"type": "none"}})")))["tool_choice"], "none");
  json out = anthropic_to_chat(
      body_with(J(R"({"tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": true}})")));
  EXPECT_EQ(out["tool_choice"], J(R"({"type": "function", "function": {"name": "f"}})"));
  EXPECT_EQ(out["parallel_tool_calls"], false);
  out = anthropic_to_chat(body_with(J(R"({"tool_choice": {"type": "auto", "disable_parallel_tool_use": false}})")));
  EXPECT_FALSE(out.contains("parallel_tool_calls"));
}

TEST(AnthropicRequest, Thinking) {
  json out = anthropic_to_chat(body_with(J(R"({"thinking": {"type": "enabled", "budget_tokens": 2048}})")));
  EXPECT_EQ(out["chat_template_kwargs"], J(R"({"enable_thinking": true})"));
  EXPECT_EQ(out["thinking_budget_tokens"], 2048);
  out = anthropic_to_chat(body_with(J(R"({"thinking": {"type": "enabled"}})")));
  EXPECT_EQ(out["thinking_budget_tokens"], 10000);
  out = anthropic_to_chat(body_with(J(R"({"thinking": {"type": "disabled"}})")));
  EXPECT_EQ(out["chat_template_kwargs"], J(R"({"enable_thinking": false})"));
  EXPECT_FALSE(out.contains("thinking_budget_tokens"));
  out = anthropic_to_chat(body_with(J(R"({"thinking": {"type": "adaptive"}})")));
  EXPECT_EQ(out["chat_template_kwargs"], J(R"({"enable_thinking": true})"));
  EXPECT_FALSE(out.contains("thinking_budget_tokens"));
  // The caller's chat_template_kwargs pass on and their enable_thinking wins.
  out = anthropic_to_chat(body_with(J(R"({"thinking": {"type": "enabled", "budget_tokens": 10},
      "chat_template_kwargs": {"enable_thinking": false, "x": 1}})")));
  EXPECT_EQ(out["chat_template_kwargs"], J(R"({"enable_thinking": false, "x": 1})"));
  EXPECT_EQ(out["thinking_budget_tokens"], 10);
  out = anthropic_to_chat(body_with(J(R"({"chat_template_kwargs": {}})")));
  EXPECT_EQ(out["chat_template_kwargs"], json::object());
}

TEST(AnthropicRequest, ToolUseAndToolResultRoundTrip) {
  json out = anthropic_to_chat(J(R"({"max_tokens": 100, "messages": [
      {"role": "user", "content": "Weather in Paris and Rome?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Two cities.", "signature": "sig"},
        {"type": "redacted_thinking", "data": "xyz"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
         "content": [{"type": "text", "text": "city "}, {"type": "text", "text": "not found"}]},
        {"type": "text", "text": "Thanks"}]}]})"));
  EXPECT_EQ(out["messages"], J(R"([
      {"role": "user", "content": "Weather in Paris and Rome?"},
      {"role": "assistant", "content": [{"type": "text", "text": "Checking."}],
       "tool_calls": [
         {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
         {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}],
       "reasoning_content": "Two cities."},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
      {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: city not found"},
      {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}])"));
}

TEST(AnthropicRequest, ToolOnlyAssistantAndEmptyResults) {
  json out = anthropic_to_chat(J(R"({"max_tokens": 10, "messages": [
      {"role": "user", "content": "go"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"},
                                   {"type": "tool_result", "tool_use_id": "t", "is_error": true}]},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]},
      {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "z"}]},
      {"role": "user", "content": []}]})"));
  EXPECT_EQ(out["messages"], J(R"([
      {"role": "user", "content": "go"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "t", "content": ""},
      {"role": "tool", "tool_call_id": "t", "content": "Error"},
      {"role": "assistant", "content": "", "reasoning_content": "hm"}])"));
}

TEST(AnthropicRequest, TextBeforeToolResultKeepsOrder) {
  json out = anthropic_to_chat(J(R"({"messages": [{"role": "user", "content": [
      {"type": "text", "text": "a"}, {"type": "tool_result", "tool_use_id": "x", "content": "r"},
      {"type": "text", "text": "b"}]}]})"));
  EXPECT_EQ(out["messages"], J(R"([{"role": "user", "content": [{"type": "text", "text": "a"}]},
      {"role": "tool", "tool_call_id": "x", "content": "r"},
      {"role": "user", "content": [{"type": "text", "text": "b"}]}])"));
}

TEST(AnthropicRequest, NullMeansAbsent) {
  json out = anthropic_to_chat(body_with(J(R"({"system": null, "tools": null, "temperature": null, "thinking": null})")));
  EXPECT_EQ(out, J(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100})"));
}

// ---- errors naming the field ----

TEST(AnthropicRequest, Errors) {
  expect_400(J("[]"), "request body: expected a JSON object, got an array");
  expect_400(J(R"("x")"), "request body:");
  expect_400(J(R"({"max_tokens": 1})"), "messages: required");
  expect_400(J(R"({"messages": []})"), "messages: must not be empty");
  expect_400(J(R"({"messages": {}})"), "messages: expected an array, got an object");
  expect_400(J(R"({"messages": [1]})"), "messages[0]: expected an object, got a number");
  expect_400(J(R"({"messages": [{"content": "x"}]})"), "messages[0].role: required");
  expect_400(J(R"({"messages": [{"role": "user"}]})"), "messages[0].content: required");
  expect_400(J(R"({"messages": [{"role": "system", "content": "x"}]})"), "messages[0].role: must be 'user' or 'assistant'");
  expect_400(J(R"({"messages": [{"role": 3, "content": "x"}]})"), "messages[0].role: expected a string, got a number");
  expect_400(J(R"({"messages": [{"role": "user", "content": 5}]})"), "messages[0].content: expected a string or an array");
  expect_400(J(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "x"}]}]})"),
             "messages[1].content[0].type: unknown content block type 'x'");
  expect_400(J(R"({"messages": [{"role": "user", "content": [{"text": "x"}]}]})"), "messages[0].content[0].type: required");
  expect_400(J(R"({"messages": [{"role": "user", "content": ["x"]}]})"), "messages[0].content[0]: expected an object");
  expect_400(J(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})"),
             "messages[0].content[0].text: required");
  expect_400(J(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})"),
             "messages[0].content[0].text: expected a string");
  expect_400(J(R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}]})"),
             "messages[0].content[0].type: image content is not supported");
  expect_400(J(R"({"messages": [{"role": "user", "content": [{"type": "document"}]}]})"),
             "messages[0].content[0].type: document content is not supported");
  expect_400(
      J(R"({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]})"),
      "messages[0].content[0].type: 'tool_use' blocks are only allowed in assistant messages");
  expect_400(J(R"({"messages": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "a"}]}]})"),
             "messages[0].content[0].type: 'tool_result' blocks are only allowed in user messages");
  expect_400(J(R"({"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "a"}]}]})"),
             "messages[0].content[0].type: 'thinking' blocks are only allowed in assistant messages");
  expect_400(J(R"({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}]})"),
             "messages[0].content[0].id: required");
  expect_400(J(R"({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a"}]}]})"),
             "messages[0].content[0].name: required");
  expect_400(
      J(R"({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "x"}]}]})"),
      "messages[0].content[0].input: expected an object");
  expect_400(J(R"({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})"),
             "messages[0].content[0].tool_use_id: required");
  expect_400(
      J(R"({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": 3}]}]})"),
      "messages[0].content[0].content: expected a string or an array");
  expect_400(J(R"({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
                  "content": [{"type": "image", "source": {}}]}]}]})"),
             "messages[0].content[0].content[0].type: image content is not supported");
  expect_400(
      J(R"({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "is_error": "yes"}]}]})"),
      "messages[0].content[0].is_error: expected a boolean");
  expect_400(J(R"({"messages": [{"role": "assistant", "content": [{"type": "thinking"}]}]})"),
             "messages[0].content[0].thinking: required");
  expect_400(body_with(J(R"({"system": 1})")), "system: expected a string or an array of text blocks");
  expect_400(body_with(J(R"({"system": [{"type": "image"}]})")), "system[0].type: system blocks must be text blocks");
  expect_400(body_with(J(R"({"system": [{"type": "text"}]})")), "system[0].text: required");
  expect_400(body_with(J(R"({"max_tokens": "1"})")), "max_tokens: expected an integer, got a string");
  expect_400(body_with(J(R"({"max_tokens": 0})")), "max_tokens: must be at least 1");
  expect_400(body_with(J(R"({"max_tokens": 1.5})")), "max_tokens: expected an integer");
  expect_400(body_with(J(R"({"max_tokens": 18446744073709551615})")), "max_tokens: integer too large");
  expect_400(body_with(J(R"({"temperature": "hot"})")), "temperature: expected a number");
  expect_400(body_with(J(R"({"temperature": -1})")), "temperature: must not be negative");
  expect_400(body_with(J(R"({"top_p": []})")), "top_p: expected a number");
  expect_400(body_with(J(R"({"top_k": -1})")), "top_k: must not be negative");
  expect_400(body_with(J(R"({"stream": "true"})")), "stream: expected a boolean");
  expect_400(body_with(J(R"({"stop_sequences": "END"})")), "stop_sequences: expected an array");
  expect_400(body_with(J(R"({"stop_sequences": ["a", 1]})")), "stop_sequences[1]: expected a string");
  expect_400(body_with(J(R"({"tools": {}})")), "tools: expected an array");
  expect_400(body_with(J(R"({"tools": [{"input_schema": {}}]})")), "tools[0].name: required");
  expect_400(body_with(J(R"({"tools": [{"name": "", "input_schema": {}}]})")), "tools[0].name: must not be empty");
  expect_400(body_with(J(R"({"tools": [{"name": "f"}]})")), "tools[0].input_schema: required");
  expect_400(body_with(J(R"({"tools": [{"name": "f", "input_schema": "x"}]})")),
             "tools[0].input_schema: expected an object");
  expect_400(body_with(J(R"({"tools": [{"name": "f", "description": 2, "input_schema": {}}]})")),
             "tools[0].description: expected a string");
  expect_400(body_with(J(R"({"tool_choice": "auto"})")), "tool_choice: expected an object");
  expect_400(body_with(J(R"({"tool_choice": {}})")), "tool_choice.type: required");
  expect_400(body_with(J(R"({"tool_choice": {"type": "some"}})")), "tool_choice.type: must be");
  expect_400(body_with(J(R"({"tool_choice": {"type": "tool"}})")), "tool_choice.name: required");
  expect_400(body_with(J(R"({"tool_choice": {"type": "auto", "disable_parallel_tool_use": 1}})")),
             "tool_choice.disable_parallel_tool_use: expected a boolean");
  expect_400(body_with(J(R"({"thinking": true})")), "thinking: expected an object");
  expect_400(body_with(J(R"({"thinking": {}})")), "thinking.type: required");
  expect_400(body_with(J(R"({"thinking": {"type": "on"}})")), "thinking.type: must be");
  expect_400(body_with(J(R"({"thinking": {"type": "enabled", "budget_tokens": "many"}})")),
             "thinking.budget_tokens: expected an integer");
  expect_400(body_with(J(R"({"chat_template_kwargs": []})")), "chat_template_kwargs: expected an object");
  expect_400(body_with(J(R"({"metadata": "x"})")), "metadata: expected an object");
  expect_400(body_with(J(R"({"model": 1})")), "model: expected a string");
}

TEST(AnthropicRequest, DeepAndHugeInputs) {
  // Nesting deeper than the limit is refused before anything recurses over it.
  json deep = json::object();
  for (int i = 0; i < 100000; ++i) deep = json{{"a", std::move(deep)}};
  json b = body_with(J("{}"));
  b["tools"] = json::array({json{{"name", "f"}, {"input_schema", std::move(deep)}}});
  expect_400(b, "request body: nested more than 256 levels deep");
  // Deep arrays inside a tool_use input.
  json arr = json::array();
  for (int i = 0; i < 100000; ++i) arr = json::array({std::move(arr)});
  b = J(R"({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f"}]}]})");
  b["messages"][0]["content"][0]["input"] = json{{"x", std::move(arr)}};
  expect_400(b, "request body: nested more than");
  // Moderate depth is fine.
  json ok = json::object();
  for (int i = 0; i < 100; ++i) ok = json{{"type", "object"}, {"properties", {{"p", std::move(ok)}}}};
  b = body_with(J("{}"));
  b["tools"] = json::array({json{{"name", "f"}, {"input_schema", ok}}});
  EXPECT_EQ(anthropic_to_chat(b)["tools"][0]["function"]["parameters"], ok);
  // Many messages and a long string.
  b = J(R"({"messages": []})");
  for (int i = 0; i < 20000; ++i) b["messages"].push_back(json{{"role", i % 2 ? "assistant" : "user"}, {"content", "x"}});
  b["messages"].push_back(json{{"role", "user"}, {"content", std::string(4 << 20, 'y')}});
  json out = anthropic_to_chat(b);
  EXPECT_EQ(out["messages"].size(), 20001u);
  EXPECT_EQ(out["messages"].back()["content"].get<std::string>().size(), size_t{4} << 20);
}

// Every body made by replacing one value (anywhere in a rich valid body) with a value of each
// other kind, or removing it: translation either succeeds or throws ApiError 400 — nothing else.
TEST(AnthropicRequest, MutatedBodiesOnlyThrowApiError) {
  const json base = J(R"({"model": "m", "max_tokens": 100, "system": [{"type": "text", "text": "s"}],
      "temperature": 0.2, "top_p": 0.9, "top_k": 3, "stop_sequences": ["x"], "stream": true,
      "metadata": {"user_id": "u"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
      "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": true},
      "chat_template_kwargs": {"a": 1},
      "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
      "messages": [
        {"role": "user", "content": [{"type": "text", "text": "t"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "r", "signature": ""},
          {"type": "text", "text": "a"}, {"type": "tool_use", "id": "i", "name": "f", "input": {"k": [1, 2]}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "i", "is_error": false,
          "content": [{"type": "text", "text": "ok"}]}]}]})");
  ASSERT_NO_THROW(anthropic_to_chat(base));
  const std::vector<json> replacements = {
      nullptr, true, 0, -1, 1.5, 1e300, "", "x", json::array(), json::object(), json::array({1}), json{{"type", "text"}}};
  size_t n = 0, errors = 0;
  json flat = base.flatten();
  std::vector<json::json_pointer> pointers;
  for (auto& [k, v] : flat.items()) {
    json::json_pointer p(k);
    while (!p.empty()) {
      pointers.push_back(p);
      p = p.parent_pointer();
    }
  }
  for (const auto& p : pointers) {
    auto run = [&](const json& b) {
      ++n;
      try {
        (void)anthropic_to_chat(b);
      } catch (const ApiError& e) {
        ++errors;
        EXPECT_EQ(e.status, 400) << p.to_string() << ": " << e.message;
        EXPECT_FALSE(e.message.empty());
      } catch (...) {
        ADD_FAILURE() << "non-ApiError exception for " << p.to_string();
      }
    };
    for (const json& r : replacements) {
      json b = base;
      b[p] = r;
      run(b);
    }
    json b = base;
    b[p.parent_pointer()].is_object() ? (void)b[p.parent_pointer()].erase(p.back())
                                      : (void)b[p.parent_pointer()].erase(std::stoul(p.back()));
    run(b);
  }
  EXPECT_GT(n, 500u);
  EXPECT_GT(errors, 100u);
}

TEST(AnthropicRequest, InvalidUtf8InToolInputDoesNotThrow) {
  json b = J(R"({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f"}]}]})");
  b["messages"][0]["content"][0]["input"] = json{{"k", std::string("\xff\xfe", 2)}};
  json out;
  ASSERT_NO_THROW(out = anthropic_to_chat(b));
  EXPECT_TRUE(out["messages"][0]["tool_calls"][0]["function"]["arguments"].is_string());
}

// ---- non-streamed responses ----

ChatResult result(json message, std::string finish, std::string stop_word = "") {
  ChatResult r;
  r.id = "msg_01";
  r.model = "qwen";
  r.created = 1700000000;
  r.message = std::move(message);
  r.finish_reason = std::move(finish);
  r.stop_word = std::move(stop_word);
  r.prompt_tokens = 20;
  r.completion_tokens = 7;
  r.cached_tokens = 5;
  return r;
}

TEST(AnthropicResponse, TextEndTurn) {
  json res = anthropic_response(result(J(R"({"role": "assistant", "content": "Hello!"})"), "stop"));
  EXPECT_EQ(res, J(R"({"id": "msg_01", "type": "message", "role": "assistant",
      "content": [{"type": "text", "text": "Hello!"}], "model": "qwen", "stop_reason": "end_turn",
      "stop_sequence": null, "usage": {"cache_read_input_tokens": 5, "input_tokens": 15, "output_tokens": 7}})"));
}

TEST(AnthropicResponse, MaxTokens) {
  json res = anthropic_response(result(J(R"({"role": "assistant", "content": "Hel"})"), "length"));
  EXPECT_EQ(res["stop_reason"], "max_tokens");
  EXPECT_EQ(res["stop_sequence"], nullptr);
}

TEST(AnthropicResponse, StopSequence) {
  json res = anthropic_response(result(J(R"({"role": "assistant", "content": "a"})"), "stop", "END"));
  EXPECT_EQ(res["stop_reason"], "stop_sequence");
  EXPECT_EQ(res["stop_sequence"], "END");
}

TEST(AnthropicResponse, ThinkingTextAndToolUse) {
  json res = anthropic_response(result(J(R"({"role": "assistant", "content": "Let me check.",
      "reasoning_content": "Need weather.",
      "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                     {"id": "call_2", "type": "function", "function": {"name": "bad", "arguments": "not json"}}]})"),
                                       "tool_calls"));
  EXPECT_EQ(res["content"], J(R"([
      {"type": "thinking", "thinking": "Need weather.", "signature": ""},
      {"type": "text", "text": "Let me check."},
      {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
      {"type": "tool_use", "id": "call_2", "name": "bad", "input": {}}])"));
  EXPECT_EQ(res["stop_reason"], "tool_use");
  // Tool calls with a "stop" finish are still tool_use (llama-server).
  EXPECT_EQ(anthropic_response(result(J(R"({"role": "assistant", "content": null,
      "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})"),
                                      "stop"))["stop_reason"],
            "tool_use");
}

TEST(AnthropicResponse, EmptyAndMalformedMessages) {
  EXPECT_EQ(anthropic_response(result(J(R"({"role": "assistant", "content": ""})"), "stop"))["content"], json::array());
  EXPECT_EQ(anthropic_response(result(nullptr, "stop"))["content"], json::array());
  EXPECT_EQ(
      anthropic_response(result(J(R"({"tool_calls": [1, {"function": 2}]})"), "stop"))["content"],
      J(R"([{"type": "tool_use", "id": "", "name": "", "input": {}}, {"type": "tool_use", "id": "", "name": "", "input": {}}])"));
}

TEST(AnthropicError, Shapes) {
  EXPECT_EQ(anthropic_error(400, "bad"),
            J(R"({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})"));
  EXPECT_EQ(anthropic_error(404, "x")["error"]["type"], "not_found_error");
  EXPECT_EQ(anthropic_error(401, "x")["error"]["type"], "authentication_error");
  EXPECT_EQ(anthropic_error(403, "x")["error"]["type"], "permission_error");
  EXPECT_EQ(anthropic_error(413, "x")["error"]["type"], "request_too_large");
  EXPECT_EQ(anthropic_error(429, "x")["error"]["type"], "rate_limit_error");
  EXPECT_EQ(anthropic_error(500, "x")["error"]["type"], "api_error");
  EXPECT_EQ(anthropic_error(501, "x")["error"]["type"], "invalid_request_error");
  EXPECT_EQ(anthropic_error(503, "x")["error"]["type"], "overloaded_error");
  EXPECT_EQ(anthropic_error(529, "x")["error"]["type"], "overloaded_error");
  EXPECT_EQ(anthropic_error(ApiError{400, "m", "custom_error"})["error"]["type"], "custom_error");
  EXPECT_EQ(anthropic_count_tokens_response(12), J(R"({"input_tokens": 12})"));
}

// ---- streaming ----

// Events as compact lines: "event data" for comparisons.
std::vector<std::string> lines(const std::vector<SseEvent>& evs) {
  std::vector<std::string> out;
  for (const auto& e : evs) {
    EXPECT_EQ(e.data.at("type"), e.event);
    out.push_back(e.event + " " + e.data.dump());
  }
  return out;
}

struct Events {
  std::vector<SseEvent> events;
  void add(std::vector<SseEvent> v) {
    for (auto& e : v) events.push_back(std::move(e));
  }
};

json reasoning(const char* s) { return json{{"reasoning_content", s}}; }
json content(const char* s) { return json{{"content", s}}; }
json call_start(int i, const char* id, const char* name, const char* args) {
  return json{{"tool_calls",
               {{{"index", i}, {"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}}}}};
}
json call_more(int i, const char* args) {
  return json{{"tool_calls", {{{"index", i}, {"function", {{"arguments", args}}}}}}};
}

TEST(AnthropicStreamTest, TextOnly) {
  AnthropicStream s("msg_1", "qwen", 20, 5);
  Events run;
  run.add(s.begin());
  run.add(s.delta(content("Hel")));
  run.add(s.delta(content("lo")));
  run.add(s.end(result(J(R"({"role": "assistant", "content": "Hello"})"), "stop")));
  std::vector<std::string> expected = {
      R"(message_start {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"qwen","stop_reason":null,"stop_sequence":null,"usage":{"cache_read_input_tokens":5,"input_tokens":15,"output_tokens":0}}})",
      R"(content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})",
      R"(content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}})",
      R"(content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}})",
      R"(content_block_stop {"type":"content_block_stop","index":0})",
      R"(message_delta {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}})",
      R"(message_stop {"type":"message_stop"})"};
  EXPECT_EQ(lines(run.events), expected);
}

TEST(AnthropicStreamTest, ThinkingThenText) {
  AnthropicStream s("msg_1", "qwen", 20);
  Events run;
  run.add(s.begin());
  run.add(s.delta(reasoning("Think")));
  run.add(s.delta(reasoning("ing.")));
  run.add(s.delta(content("Answer")));
  run.add(s.end(result(J(R"({"role": "assistant", "content": "Answer", "reasoning_content": "Thinking."})"), "stop")));
  std::vector<std::string> l = lines(run.events);
  std::vector<std::string> expected = {
      R"(content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})",
      R"(content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Think"}})",
      R"(content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"ing."}})",
      R"(content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":""}})",
      R"(content_block_stop {"type":"content_block_stop","index":0})",
      R"(content_block_start {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})",
      R"(content_block_delta {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Answer"}})",
      R"(content_block_stop {"type":"content_block_stop","index":1})",
      R"(message_delta {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}})",
      R"(message_stop {"type":"message_stop"})"};
  ASSERT_EQ(l.size(), expected.size() + 1);
  EXPECT_EQ(std::vector<std::string>(l.begin() + 1, l.end()), expected);
  EXPECT_EQ(run.events[0].data["message"]["usage"],
            J(R"({"cache_read_input_tokens": 0, "input_tokens": 20, "output_tokens": 0})"));
}

TEST(AnthropicStreamTest, TextThenTwoToolCallsInPieces) {
  AnthropicStream s("msg_1", "qwen", 20);
  Events run;
  run.add(s.begin());
  run.add(s.delta(content("Checking.")));
  run.add(s.delta(call_start(0, "call_a", "get_weather", "")));
  run.add(s.delta(call_more(0, "{\"city\": ")));
  run.add(s.delta(call_more(0, "\"Paris\"}")));
  run.add(s.delta(call_start(1, "call_b", "get_time", "{\"tz\"")));
  run.add(s.delta(call_more(1, ": \"CET\"}")));
  run.add(s.end(result(J(R"({"role": "assistant", "content": "Checking.", "tool_calls": [
      {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
      {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\": \"CET\"}"}}]})"),
                       "tool_calls")));
  std::vector<std::string> l = lines(run.events);
  std::vector<std::string> expected = {
      R"(content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})",
      R"(content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking."}})",
      R"(content_block_stop {"type":"content_block_stop","index":0})",
      R"(content_block_start {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"call_a","name":"get_weather","input":{}}})",
      R"(content_block_delta {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}})",
      R"(content_block_delta {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}})",
      R"(content_block_stop {"type":"content_block_stop","index":1})",
      R"(content_block_start {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"call_b","name":"get_time","input":{}}})",
      R"(content_block_delta {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"tz\""}})",
      R"(content_block_delta {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":": \"CET\"}"}})",
      R"(content_block_stop {"type":"content_block_stop","index":2})",
      R"(message_delta {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":7}})",
      R"(message_stop {"type":"message_stop"})"};
  EXPECT_EQ(std::vector<std::string>(l.begin() + 1, l.end()), expected);
}

TEST(AnthropicStreamTest, LengthFinish) {
  AnthropicStream s("msg_1", "qwen", 20);
  Events run;
  run.add(s.begin());
  run.add(s.delta(reasoning("Long thought")));
  run.add(s.end(result(J(R"({"role": "assistant", "content": "", "reasoning_content": "Long thought"})"), "length")));
  std::vector<std::string> l = lines(run.events);
  std::vector<std::string> expected = {
      R"(content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})",
      R"(content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Long thought"}})",
      R"(content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":""}})",
      R"(content_block_stop {"type":"content_block_stop","index":0})",
      R"(message_delta {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":7}})",
      R"(message_stop {"type":"message_stop"})"};
  EXPECT_EQ(std::vector<std::string>(l.begin() + 1, l.end()), expected);
}

TEST(AnthropicStreamTest, StopSequenceAndEmptyReply) {
  AnthropicStream s("msg_1", "qwen", 3);
  Events run;
  run.add(s.begin());
  run.add(s.end(result(J(R"({"role": "assistant", "content": ""})"), "stop", "###")));
  std::vector<std::string> l = lines(run.events);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(
      l[1],
      R"(message_delta {"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"###"},"usage":{"output_tokens":7}})");
}

TEST(AnthropicStreamTest, EndSendsWhatDeltasMissed) {
  AnthropicStream s("msg_1", "qwen", 3);
  Events run;
  run.add(s.begin());
  run.add(s.delta(content("Hel")));
  run.add(s.end(result(J(R"({"role": "assistant", "content": "Hello", "tool_calls": [
      {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})"),
                       "tool_calls")));
  std::vector<std::string> l = lines(run.events);
  std::vector<std::string> expected = {
      R"(content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})",
      R"(content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}})",
      R"(content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}})",
      R"(content_block_stop {"type":"content_block_stop","index":0})",
      R"(content_block_start {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"c1","name":"f","input":{}}})",
      R"(content_block_delta {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}})",
      R"(content_block_stop {"type":"content_block_stop","index":1})",
      R"(message_delta {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":7}})",
      R"(message_stop {"type":"message_stop"})"};
  EXPECT_EQ(std::vector<std::string>(l.begin() + 1, l.end()), expected);
  // Nothing after the end.
  EXPECT_TRUE(s.delta(content("x")).empty());
  EXPECT_TRUE(s.end(result(json::object(), "stop")).empty());
}

TEST(AnthropicStreamTest, MalformedDeltasAreIgnored) {
  AnthropicStream s("msg_1", "qwen", 3);
  (void)s.begin();
  EXPECT_TRUE(s.delta(nullptr).empty());
  EXPECT_TRUE(s.delta(J("[1]")).empty());
  EXPECT_TRUE(s.delta(J(R"({"content": 5, "reasoning_content": null, "tool_calls": {}})")).empty());
  EXPECT_TRUE(s.delta(J(R"({"content": ""})")).empty());
  EXPECT_TRUE(s.delta(J(R"({"tool_calls": [1, "x"]})")).empty());
  // A call without index is call 0.
  auto ev = s.delta(J(R"({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]})"));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].data["content_block"]["name"], "f");
}

}  // namespace
}  // namespace loom::api

namespace loom::api {
// Server tools (run by the vendor) are skipped as llama-server skips them; client tools stay.
TEST(AnthropicRequest, ServerToolsAreSkipped) {
  const json out = anthropic_to_chat(json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "web_search_20250305", "name": "web_search"}, {"name": "f", "input_schema": {"type": "object"}}]})"));
  ASSERT_EQ(out.at("tools").size(), 1u);
  EXPECT_EQ(out.at("tools")[0].at("function").at("name"), "f");
}
}  // namespace loom::api
