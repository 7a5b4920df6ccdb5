// OpenAI's Responses API (src/api/responses.h): request translation field by field and item by
// item, function calls and their outputs, the non-streamed response for each finish, every stream
// event sequence, and hostile bodies (only ApiError 400 naming the field may escape).
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <vector>

#include "api/responses.h"

namespace loom::api {
namespace {

json J(const char* s) { return json::parse(s); }

json body_with(const json& extra) {
  json b = J(R"({"model": "m", "input": "hi"})");
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

void expect_400(const json& b, const std::string& prefix) {
  try {
    json out = responses_to_chat(b);
    ADD_FAILURE() << "no error for " << b.dump() << " -> " << out.dump();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.message;
    EXPECT_EQ(e.message.substr(0, prefix.size()), prefix) << e.message;
  }
}

// ---- request translation ----

TEST(ResponsesRequest, StringInputAndInstructions) {
  json out = responses_to_chat(J(R"({"model": "gpt", "instructions": "Be brief.", "input": "Hello"})"));
  EXPECT_EQ(out, J(R"({"model": "gpt", "messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hello"}]})"));
}

TEST(ResponsesRequest, MessageItems) {
  json out = responses_to_chat(J(R"({"input": [
      {"role": "developer", "content": "Rules."},
      {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Sys"}]},
      {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "x", "annotations": []}, {"type": "refusal", "refusal": "no"}]},
      {"role": "assistant", "content": "more"},
      {"role": "user", "content": "c"}]})"));
  EXPECT_EQ(out["messages"], J(R"([
      {"role": "developer", "content": "Rules."},
      {"role": "system", "content": [{"type": "text", "text": "Sys"}]},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": "x\nno\nmore"},
      {"role": "user", "content": "c"}])"));
}

TEST(ResponsesRequest, FunctionCallsAndOutputsRoundTrip) {
  json out = responses_to_chat(J(R"({"input": [
      {"role": "user", "content": "Weather in Paris and Rome?"},
      {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "short"}],
       "content": [{"type": "reasoning_text", "text": "Two cities."}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}", "status": "completed"},
      {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "20C"}]},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s1"}, {"type": "summary_text", "text": "s2"}],
       "encrypted_content": "abc"},
      {"type": "function_call", "call_id": "call_3", "name": "f", "arguments": "{}"}]})"));
  EXPECT_EQ(out["messages"], J(R"([
      {"role": "user", "content": "Weather in Paris and Rome?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "Two cities.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
      {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "20C"}]},
      {"role": "assistant", "content": "", "reasoning_content": "s1\ns2", "tool_calls": [
        {"id": "call_3", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}])"));
}

TEST(ResponsesRequest, ReasoningWithoutTextIsDropped) {
  json out = responses_to_chat(J(R"({"input": [{"role": "user", "content": "q"},
      {"type": "reasoning", "summary": [], "encrypted_content": "zz"}, {"role": "assistant", "content": "a"}]})"));
  EXPECT_EQ(out["messages"], J(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])"));
}

TEST(ResponsesRequest, Tools) {
  json out = responses_to_chat(body_with(J(R"({"tools": [
      {"type": "function", "name": "get_weather", "description": "Weather",
       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": false},
      {"type": "function", "name": "noop"}],
      "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": false})")));
  EXPECT_EQ(out, J(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [
      {"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": false}},
      {"type": "function", "function": {"name": "noop", "strict": true}}],
      "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": false})"));
  for (const char* c : {"auto", "none", "required"})
    EXPECT_EQ(responses_to_chat(body_with(json{{"tool_choice", c}}))["tool_choice"], c);
}

TEST(ResponsesRequest, SamplingReasoningAndFormat) {
  json out = responses_to_chat(body_with(J(R"({"max_output_tokens": 256, "temperature": 0.7, "top_p": 0.95,
      "stream": true, "reasoning": {"effort": "low", "summary": "auto"}, "store": false, "metadata": {"a": "b"},
      "user": "u1", "include": ["reasoning.encrypted_content"], "truncation": "auto", "service_tier": "auto",
      "prompt_cache_key": "k", "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"},
      "strict": true}, "verbosity": "low"}})")));
  EXPECT_EQ(out, J(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 256,
      "temperature": 0.7, "top_p": 0.95, "stream": true, "reasoning_effort": "low",
      "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": true}},
      "user": "u1"})"));
  EXPECT_EQ(responses_to_chat(body_with(J(R"({"text": {"format": {"type": "json_object"}}})")))["response_format"],
            J(R"({"type": "json_object"})"));
  EXPECT_FALSE(responses_to_chat(body_with(J(R"({"text": {"format": {"type": "text"}}})"))).contains("response_format"));
  EXPECT_FALSE(responses_to_chat(body_with(J(R"({"reasoning": {"effort": null}})"))).contains("reasoning_effort"));
}

TEST(ResponsesRequest, LlamaExtensionsPassThrough) {
  json out = responses_to_chat(body_with(J(R"({"top_k": 20, "min_p": 0.05, "seed": 7,
      "chat_template_kwargs": {"enable_thinking": false}, "timings_per_token": true, "messages": "ignored",
      "max_tokens": 3, "max_output_tokens": 9})")));
  EXPECT_EQ(out, J(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9,
      "top_k": 20, "min_p": 0.05, "seed": 7, "chat_template_kwargs": {"enable_thinking": false}, "timings_per_token": true})"));
  // Without max_output_tokens, a llama.cpp-style max_tokens passes on.
  EXPECT_EQ(responses_to_chat(body_with(J(R"({"max_tokens": 3})")))["max_tokens"], 3);
}

TEST(ResponsesRequest, EmptyPreviousResponseIdIsAccepted) {
  EXPECT_NO_THROW(responses_to_chat(body_with(J(R"({"previous_response_id": "", "background": false})"))));
}

TEST(ResponsesRequest, Errors) {
  expect_400(J("[]"), "request body: expected a JSON object, got an array");
  expect_400(J(R"({"model": "m"})"), "input: required");
  expect_400(J(R"({"input": 3})"), "input: expected a string or an array of input items, got a number");
  expect_400(J(R"({"input": []})"), "input: must not be empty");
  expect_400(J(R"({"input": [1]})"), "input[0]: expected an object");
  expect_400(J(R"({"input": [{}]})"), "input[0].type: required");
  expect_400(J(R"({"input": [{"type": "message", "content": "x"}]})"), "input[0].role: required");
  expect_400(J(R"({"input": [{"role": "tool", "content": "x"}]})"), "input[0].role: must be");
  expect_400(J(R"({"input": [{"role": "user"}]})"), "input[0].content: required");
  expect_400(J(R"({"input": [{"role": "user", "content": 1}]})"), "input[0].content: expected a string or an array");
  expect_400(J(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})"),
             "input[0].content[0].type: 'input_image' content is not supported");
  expect_400(J(R"({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "x"}]}]})"),
             "input[0].content[0].type: 'input_file' content is not supported");
  expect_400(J(R"({"input": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "x"}]}]})"),
             "input[1].content[0].type: unknown content part type 'x'");
  expect_400(J(R"({"input": [{"role": "user", "content": [{"type": "refusal", "refusal": "x"}]}]})"),
             "input[0].content[0].type: unknown content part type 'refusal'");
  expect_400(J(R"({"input": [{"role": "user", "content": [{"type": "input_text"}]}]})"),
             "input[0].content[0].text: required");
  expect_400(J(R"({"input": [{"role": "user", "content": [{"type": "input_text", "text": 2}]}]})"),
             "input[0].content[0].text: expected a string");
  expect_400(J(R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})"), "input[0].call_id: required");
  expect_400(J(R"({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]})"), "input[0].name: required");
  expect_400(J(R"({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]})"), "input[0].arguments: required");
  expect_400(J(R"({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]})"),
             "input[0].arguments: expected a string, got an object");
  expect_400(J(R"({"input": [{"type": "function_call_output", "output": "x"}]})"), "input[0].call_id: required");
  expect_400(J(R"({"input": [{"type": "function_call_output", "call_id": "c"}]})"), "input[0].output: required");
  expect_400(J(R"({"input": [{"type": "function_call_output", "call_id": "c", "output": 1}]})"),
             "input[0].output: expected a string or an array");
  expect_400(J(R"({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image"}]}]})"),
             "input[0].output[0].type: 'input_image' content is not supported");
  expect_400(J(R"({"input": [{"type": "reasoning", "summary": "x"}]})"), "input[0].summary: expected an array");
  expect_400(J(R"({"input": [{"type": "reasoning", "summary": [{"type": "summary_text"}]}]})"),
             "input[0].summary[0].text: required");
  expect_400(J(R"({"input": [{"type": "item_reference", "id": "x"}]})"), "input[0].type: item references are not supported");
  expect_400(J(R"({"input": [{"type": "web_search_call", "id": "x"}]})"),
             "input[0].type: input item type 'web_search_call' is not supported");
  expect_400(J(R"({"input": [{"type": 1}]})"), "input[0].type: expected a string");
  expect_400(body_with(J(R"({"previous_response_id": "resp_1"})")),
             "previous_response_id: not supported: loom does not store responses");
  expect_400(body_with(J(R"({"previous_response_id": 1})")), "previous_response_id: expected a string");
  expect_400(body_with(J(R"({"conversation": "conv_1"})")), "conversation: not supported");
  expect_400(body_with(J(R"({"background": true})")), "background: background responses are not supported");
  expect_400(body_with(J(R"({"prompt": {"id": "p"}})")), "prompt: stored prompt templates are not supported");
  expect_400(body_with(J(R"({"instructions": 1})")), "instructions: expected a string");
  expect_400(body_with(J(R"({"tools": {}})")), "tools: expected an array");
  expect_400(body_with(J(R"({"tools": [{"name": "f"}]})")), "tools[0].type: required");
  expect_400(body_with(J(R"({"tools": [{"type": "function"}]})")), "tools[0].name: required");
  expect_400(body_with(J(R"({"tools": [{"type": "function", "name": ""}]})")), "tools[0].name: must not be empty");
  expect_400(body_with(J(R"({"tools": [{"type": "function", "name": "f", "parameters": []}]})")),
             "tools[0].parameters: expected an object");
  expect_400(body_with(J(R"({"tools": [{"type": "function", "name": "f", "strict": "yes"}]})")),
             "tools[0].strict: expected a boolean");
  expect_400(body_with(J(R"({"tool_choice": "any"})")), "tool_choice: must be");
  expect_400(body_with(J(R"({"tool_choice": 1})")), "tool_choice: expected a string or an object");
  expect_400(body_with(J(R"({"tool_choice": {"type": "web_search"}})")),
             "tool_choice.type: tool choice 'web_search' is not supported");
  expect_400(body_with(J(R"({"tool_choice": {"type": "function"}})")), "tool_choice.name: required");
  expect_400(body_with(J(R"({"max_output_tokens": 0})")), "max_output_tokens: must be at least 1");
  expect_400(body_with(J(R"({"max_output_tokens": "5"})")), "max_output_tokens: expected an integer");
  expect_400(body_with(J(R"({"temperature": "x"})")), "temperature: expected a number");
  expect_400(body_with(J(R"({"top_p": {}})")), "top_p: expected a number");
  expect_400(body_with(J(R"({"stream": 1})")), "stream: expected a boolean");
  expect_400(body_with(J(R"({"parallel_tool_calls": "no"})")), "parallel_tool_calls: expected a boolean");
  expect_400(body_with(J(R"({"reasoning": "high"})")), "reasoning: expected an object");
  expect_400(body_with(J(R"({"reasoning": {"effort": 3}})")), "reasoning.effort: expected a string");
  expect_400(body_with(J(R"({"text": "json"})")), "text: expected an object");
  expect_400(body_with(J(R"({"text": {"format": {}}})")), "text.format.type: required");
  expect_400(body_with(J(R"({"text": {"format": {"type": "xml"}}})")), "text.format.type: must be");
  expect_400(body_with(J(R"({"text": {"format": {"type": "json_schema", "name": "x"}}})")), "text.format.schema: required");
  expect_400(body_with(J(R"({"text": {"format": {"type": "json_schema", "schema": 1}}})")),
             "text.format.schema: expected an object");
  expect_400(body_with(J(R"({"user": 1})")), "user: expected a string");
  expect_400(body_with(J(R"({"metadata": 1})")), "metadata: expected an object");
  expect_400(body_with(J(R"({"store": "yes"})")), "store: expected a boolean");
  expect_400(body_with(J(R"({"model": []})")), "model: expected a string");
}

TEST(ResponsesRequest, DeepAndHugeInputs) {
  json deep = json::array();
  for (int i = 0; i < 100000; ++i) deep = json::array({std::move(deep)});
  json b = body_with(J("{}"));
  b["seed"] = std::move(deep);  // moved, not copied: a copy of it recurses as deep as it is
  expect_400(b, "request body: nested more than 256 levels deep");
  b = J(R"({"input": []})");
  for (int i = 0; i < 20000; ++i) b["input"].push_back(json{{"role", "user"}, {"content", "x"}});
  b["input"].push_back(json{{"role", "user"}, {"content", std::string(4 << 20, 'y')}});
  EXPECT_EQ(responses_to_chat(b)["messages"].size(), 20001u);
}

TEST(ResponsesRequest, MutatedBodiesOnlyThrowApiError) {
  const json base = J(R"({"model": "m", "instructions": "i", "max_output_tokens": 10, "temperature": 0.1,
      "top_p": 0.5, "stream": false, "store": false, "metadata": {"a": "b"}, "parallel_tool_calls": true,
      "reasoning": {"effort": "low"}, "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": true}},
      "tool_choice": {"type": "function", "name": "f"},
      "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}],
      "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "t"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}], "content": [{"type": "reasoning_text", "text": "r"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "o"}]}]})");
  ASSERT_NO_THROW(responses_to_chat(base));
  const std::vector<json> replacements = {
      nullptr, true, 0, -1, 1.5, "", "x", json::array(), json::object(), json::array({1}), json{{"type", "input_text"}}};
  size_t n = 0, errors = 0;
  std::vector<json::json_pointer> pointers;
  const json flat = base.flatten();
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
        (void)responses_to_chat(b);
      } catch (const ApiError& e) {
        ++errors;
        EXPECT_EQ(e.status, 400) << p.to_string() << ": " << e.message;
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
    if (b[p.parent_pointer()].is_object()) b[p.parent_pointer()].erase(p.back());
    else b[p.parent_pointer()].erase(std::stoul(p.back()));
    run(b);
  }
  EXPECT_GT(n, 500u);
  EXPECT_GT(errors, 100u);
}

// ---- non-streamed responses ----

ChatResult result(json message, std::string finish) {
  ChatResult r;
  r.id = "resp_abc";
  r.model = "qwen";
  r.created = 1700000000;
  r.message = std::move(message);
  r.finish_reason = std::move(finish);
  r.prompt_tokens = 20;
  r.completion_tokens = 7;
  r.cached_tokens = 5;
  return r;
}

// The response without its clock-dependent completed_at (checked separately).
json without_clock(json res) {
  EXPECT_TRUE(res.contains("completed_at"));
  EXPECT_GE(res["completed_at"].get<int64_t>(), res["created_at"].get<int64_t>());
  EXPECT_LE(res["completed_at"].get<int64_t>(), static_cast<int64_t>(std::time(nullptr)) + 1);
  res.erase("completed_at");
  return res;
}

TEST(ResponsesResponse, TextCompleted) {
  json res = without_clock(responses_response(result(J(R"({"role": "assistant", "content": "Hello!"})"), "stop")));
  EXPECT_EQ(res, J(R"({"id": "resp_abc", "object": "response", "created_at": 1700000000, "status": "completed",
      "model": "qwen", "output": [{"id": "msg_abc", "type": "message", "status": "completed", "role": "assistant",
      "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Hello!"}]}],
      "usage": {"input_tokens": 20, "output_tokens": 7, "total_tokens": 27, "input_tokens_details": {"cached_tokens": 5}}})"));
}

TEST(ResponsesResponse, LengthIsIncomplete) {
  json res = without_clock(responses_response(result(J(R"({"role": "assistant", "content": "Hel"})"), "length")));
  EXPECT_EQ(res["status"], "incomplete");
  EXPECT_EQ(res["incomplete_details"], J(R"({"reason": "max_output_tokens"})"));
}

TEST(ResponsesResponse, ReasoningTextAndFunctionCalls) {
  json res = without_clock(responses_response(result(J(R"({"role": "assistant", "content": "Checking.",
      "reasoning_content": "Need weather.", "tool_calls": [
        {"id": "call_x1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
        {"id": "abc123def", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"type": "function", "function": {"name": "g", "arguments": "{}"}}]})"),
                                                     "tool_calls")));
  EXPECT_EQ(res["status"], "completed");
  EXPECT_EQ(res["output"], J(R"([
      {"id": "rs_abc", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Need weather."}],
       "encrypted_content": "", "status": "completed"},
      {"id": "msg_abc", "type": "message", "status": "completed", "role": "assistant",
       "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Checking."}]},
      {"id": "fc_x1", "type": "function_call", "status": "completed", "arguments": "{\"city\":\"Paris\"}",
       "call_id": "call_x1", "name": "get_weather"},
      {"id": "fc_abc123def", "type": "function_call", "status": "completed", "arguments": "{}", "call_id": "abc123def", "name": "f"},
      {"id": "fc_abc_2", "type": "function_call", "status": "completed", "arguments": "{}", "call_id": "", "name": "g"}])"));
}

TEST(ResponsesResponse, EmptyAndMalformed) {
  EXPECT_EQ(responses_response(result(nullptr, "stop"))["output"], json::array());
  EXPECT_EQ(responses_response(result(J(R"({"content": null, "tool_calls": [1]})"), "stop"))["output"].size(), 1u);
  EXPECT_EQ(responses_input_tokens_response(9), J(R"({"object": "response.input_tokens", "input_tokens": 9})"));
}

// ---- streaming ----

json reasoning(const char* s) { return json{{"reasoning_content", s}}; }
json content(const char* s) { return json{{"content", s}}; }
json call_start(int i, const char* id, const char* name, const char* args) {
  return json{{"tool_calls",
               {{{"index", i}, {"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}}}}};
}
json call_more(int i, const char* args) {
  return json{{"tool_calls", {{{"index", i}, {"function", {{"arguments", args}}}}}}};
}

struct Events {
  std::vector<SseEvent> all;
  void add(std::vector<SseEvent> v) {
    for (auto& e : v) all.push_back(std::move(e));
  }
  // "event data" lines with sequence numbers checked and removed, and the final response's
  // completed_at removed.
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < all.size(); ++i) {
      json d = all[i].data;
      EXPECT_EQ(d.at("type"), all[i].event);
      EXPECT_EQ(d.at("sequence_number"), i);
      d.erase("sequence_number");
      if (d.contains("response")) d["response"].erase("completed_at");
      out.push_back(all[i].event + " " + d.dump());
    }
    return out;
  }
};

const char* kBegin[] = {
    R"(response.created {"type":"response.created","response":{"id":"resp_abc","object":"response","created_at":1700000000,"status":"in_progress","model":"qwen","output":[]}})",
    R"(response.in_progress {"type":"response.in_progress","response":{"id":"resp_abc","object":"response","created_at":1700000000,"status":"in_progress","model":"qwen","output":[]}})"};

TEST(ResponsesStreamTest, TextOnly) {
  ResponsesStream s("resp_abc", "qwen", 1700000000);
  Events ev;
  ev.add(s.begin());
  ev.add(s.delta(content("Hel")));
  ev.add(s.delta(content("lo")));
  ev.add(s.end(result(J(R"({"role": "assistant", "content": "Hello"})"), "stop")));
  std::vector<std::string> expected = {
      kBegin[0],
      kBegin[1],
      R"(response.output_item.added {"type":"response.output_item.added","output_index":0,"item":{"id":"msg_abc","type":"message","status":"in_progress","role":"assistant","content":[]}})",
      R"(response.content_part.added {"type":"response.content_part.added","item_id":"msg_abc","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}})",
      R"(response.output_text.delta {"type":"response.output_text.delta","item_id":"msg_abc","output_index":0,"content_index":0,"delta":"Hel","logprobs":[]})",
      R"(response.output_text.delta {"type":"response.output_text.delta","item_id":"msg_abc","output_index":0,"content_index":0,"delta":"lo","logprobs":[]})",
      R"(response.output_text.done {"type":"response.output_text.done","item_id":"msg_abc","output_index":0,"content_index":0,"text":"Hello","logprobs":[]})",
      R"(response.content_part.done {"type":"response.content_part.done","item_id":"msg_abc","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello"}})",
      R"(response.output_item.done {"type":"response.output_item.done","output_index":0,"item":{"id":"msg_abc","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello"}]}})",
      R"(response.completed {"type":"response.completed","response":{"id":"resp_abc","object":"response","created_at":1700000000,"status":"completed","model":"qwen","output":[{"id":"msg_abc","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello"}]}],"usage":{"input_tokens":20,"output_tokens":7,"total_tokens":27,"input_tokens_details":{"cached_tokens":5}}}})"};
  EXPECT_EQ(ev.lines(), expected);
  // The completed response equals the non-streamed one.
  json streamed = ev.all.back().data["response"];
  json direct = responses_response(result(J(R"({"role": "assistant", "content": "Hello"})"), "stop"));
  streamed.erase("completed_at");
  direct.erase("completed_at");
  EXPECT_EQ(streamed, direct);
}

TEST(ResponsesStreamTest, ReasoningThenText) {
  ResponsesStream s("resp_abc", "qwen", 1700000000);
  Events ev;
  ev.add(s.begin());
  ev.add(s.delta(reasoning("Think")));
  ev.add(s.delta(reasoning("ing.")));
  ev.add(s.delta(content("Answer")));
  ChatResult r = result(J(R"({"role": "assistant", "content": "Answer", "reasoning_content": "Thinking."})"), "stop");
  ev.add(s.end(r));
  std::vector<std::string> l = ev.lines();
  std::vector<std::string> expected = {
      R"(response.output_item.added {"type":"response.output_item.added","output_index":0,"item":{"id":"rs_abc","type":"reasoning","summary":[],"content":[],"encrypted_content":"","status":"in_progress"}})",
      R"(response.reasoning_text.delta {"type":"response.reasoning_text.delta","item_id":"rs_abc","output_index":0,"content_index":0,"delta":"Think"})",
      R"(response.reasoning_text.delta {"type":"response.reasoning_text.delta","item_id":"rs_abc","output_index":0,"content_index":0,"delta":"ing."})",
      R"(response.reasoning_text.done {"type":"response.reasoning_text.done","item_id":"rs_abc","output_index":0,"content_index":0,"text":"Thinking."})",
      R"(response.output_item.done {"type":"response.output_item.done","output_index":0,"item":{"id":"rs_abc","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"Thinking."}],"encrypted_content":"","status":"completed"}})",
      R"(response.output_item.added {"type":"response.output_item.added","output_index":1,"item":{"id":"msg_abc","type":"message","status":"in_progress","role":"assistant","content":[]}})",
      R"(response.content_part.added {"type":"response.content_part.added","item_id":"msg_abc","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}})",
      R"(response.output_text.delta {"type":"response.output_text.delta","item_id":"msg_abc","output_index":1,"content_index":0,"delta":"Answer","logprobs":[]})",
      R"(response.output_text.done {"type":"response.output_text.done","item_id":"msg_abc","output_index":1,"content_index":0,"text":"Answer","logprobs":[]})",
      R"(response.content_part.done {"type":"response.content_part.done","item_id":"msg_abc","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":"Answer"}})",
      R"(response.output_item.done {"type":"response.output_item.done","output_index":1,"item":{"id":"msg_abc","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Answer"}]}})"};
  ASSERT_EQ(l.size(), expected.size() + 3);
  EXPECT_EQ(std::vector<std::string>(l.begin() + 2, l.end() - 1), expected);
  json streamed = ev.all.back().data["response"];
  json direct = responses_response(r);
  streamed.erase("completed_at");
  direct.erase("completed_at");
  EXPECT_EQ(streamed, direct);
}

TEST(ResponsesStreamTest, TextThenTwoFunctionCallsInPieces) {
  ResponsesStream s("resp_abc", "qwen", 1700000000);
  Events ev;
  ev.add(s.begin());
  ev.add(s.delta(content("Checking.")));
  ev.add(s.delta(call_start(0, "call_a", "get_weather", "")));
  ev.add(s.delta(call_more(0, "{\"city\": ")));
  ev.add(s.delta(call_more(0, "\"Paris\"}")));
  ev.add(s.delta(call_start(1, "call_b", "get_time", "{\"tz\"")));
  ev.add(s.delta(call_more(1, ": \"CET\"}")));
  ChatResult r = result(J(R"({"role": "assistant", "content": "Checking.", "tool_calls": [
      {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
      {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\": \"CET\"}"}}]})"),
                        "tool_calls");
  ev.add(s.end(r));
  std::vector<std::string> l = ev.lines();
  std::vector<std::string> expected = {
      R"(response.output_item.added {"type":"response.output_item.added","output_index":1,"item":{"id":"fc_a","type":"function_call","status":"in_progress","arguments":"","call_id":"call_a","name":"get_weather"}})",
      R"(response.function_call_arguments.delta {"type":"response.function_call_arguments.delta","item_id":"fc_a","output_index":1,"delta":"{\"city\": "})",
      R"(response.function_call_arguments.delta {"type":"response.function_call_arguments.delta","item_id":"fc_a","output_index":1,"delta":"\"Paris\"}"})",
      R"(response.function_call_arguments.done {"type":"response.function_call_arguments.done","item_id":"fc_a","output_index":1,"name":"get_weather","arguments":"{\"city\": \"Paris\"}"})",
      R"(response.output_item.done {"type":"response.output_item.done","output_index":1,"item":{"id":"fc_a","type":"function_call","status":"completed","arguments":"{\"city\": \"Paris\"}","call_id":"call_a","name":"get_weather"}})",
      R"(response.output_item.added {"type":"response.output_item.added","output_index":2,"item":{"id":"fc_b","type":"function_call","status":"in_progress","arguments":"","call_id":"call_b","name":"get_time"}})",
      R"(response.function_call_arguments.delta {"type":"response.function_call_arguments.delta","item_id":"fc_b","output_index":2,"delta":"{\"tz\""})",
      R"(response.function_call_arguments.delta {"type":"response.function_call_arguments.delta","item_id":"fc_b","output_index":2,"delta":": \"CET\"}"})",
      R"(response.function_call_arguments.done {"type":"response.function_call_arguments.done","item_id":"fc_b","output_index":2,"name":"get_time","arguments":"{\"tz\": \"CET\"}"})",
      R"(response.output_item.done {"type":"response.output_item.done","output_index":2,"item":{"id":"fc_b","type":"function_call","status":"completed","arguments":"{\"tz\": \"CET\"}","call_id":"call_b","name":"get_time"}})"};
  // begin (2), the message item (6 events), the calls, response.completed.
  ASSERT_EQ(l.size(), 2 + 6 + expected.size() + 1);
  EXPECT_EQ(std::vector<std::string>(l.begin() + 8, l.end() - 1), expected);
  EXPECT_EQ(ev.all[7].event, "response.output_item.done");
  json streamed = ev.all.back().data["response"];
  json direct = responses_response(r);
  streamed.erase("completed_at");
  direct.erase("completed_at");
  EXPECT_EQ(streamed, direct);
}

TEST(ResponsesStreamTest, LengthFinish) {
  ResponsesStream s("resp_abc", "qwen", 1700000000);
  Events ev;
  ev.add(s.begin());
  ev.add(s.delta(content("Trunc")));
  ev.add(s.end(result(J(R"({"role": "assistant", "content": "Trunc"})"), "length")));
  std::vector<std::string> l = ev.lines();
  ASSERT_EQ(l.size(), 9u);
  EXPECT_EQ(ev.all.back().event, "response.completed");
  const json& resp = ev.all.back().data["response"];
  EXPECT_EQ(resp["status"], "incomplete");
  EXPECT_EQ(resp["incomplete_details"], J(R"({"reason": "max_output_tokens"})"));
  EXPECT_EQ(resp["output"][0]["content"][0]["text"], "Trunc");
}

TEST(ResponsesStreamTest, EndSendsWhatDeltasMissed) {
  ResponsesStream s("resp_abc", "qwen", 1700000000);
  Events ev;
  ev.add(s.begin());
  ev.add(s.end(result(J(R"({"role": "assistant", "content": "Hi", "tool_calls": [
      {"id": "call_z", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})"),
                      "tool_calls")));
  std::vector<std::string> types;
  for (const auto& e : ev.all) types.push_back(e.event);
  std::vector<std::string> expected = {"response.created",
                                       "response.in_progress",
                                       "response.output_item.added",
                                       "response.content_part.added",
                                       "response.output_text.delta",
                                       "response.output_text.done",
                                       "response.content_part.done",
                                       "response.output_item.done",
                                       "response.output_item.added",
                                       "response.function_call_arguments.delta",
                                       "response.function_call_arguments.done",
                                       "response.output_item.done",
                                       "response.completed"};
  EXPECT_EQ(types, expected);
  (void)ev.lines();  // sequence numbers
  EXPECT_TRUE(s.delta(content("x")).empty());
  EXPECT_TRUE(s.end(result(json::object(), "stop")).empty());
}

TEST(ResponsesStreamTest, TextAfterCallStartsNewMessageItem) {
  ResponsesStream s("resp_abc", "qwen", 1700000000);
  Events ev;
  ev.add(s.begin());
  ev.add(s.delta(content("a")));
  ev.add(s.delta(call_start(0, "call_q", "f", "{}")));
  ev.add(s.delta(content("b")));
  ev.add(s.end(result(J(R"({"role": "assistant", "content": "ab"})"), "stop")));
  const json& out = ev.all.back().data["response"]["output"];
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["id"], "msg_abc");
  EXPECT_EQ(out[1]["id"], "fc_q");
  EXPECT_EQ(out[2]["id"], "msg_abc_1");
  EXPECT_EQ(out[2]["content"][0]["text"], "b");
}

TEST(ResponsesStreamTest, MalformedDeltasAreIgnored) {
  ResponsesStream s("resp_abc", "qwen", 1);
  (void)s.begin();
  EXPECT_TRUE(s.delta(nullptr).empty());
  EXPECT_TRUE(s.delta(J(R"({"content": 1, "tool_calls": "x"})")).empty());
  EXPECT_TRUE(s.delta(J(R"({"tool_calls": [null, 2]})")).empty());
  EXPECT_TRUE(s.delta(J(R"({"reasoning_content": ""})")).empty());
}

}  // namespace
}  // namespace loom::api

namespace loom::api {
// Hosted tools (web_search, custom ...) are skipped as llama-server skips them; functions stay.
TEST(ResponsesRequest, HostedToolsAreSkipped) {
  const json out = responses_to_chat(json::parse(R"({"input": "x", "tools": [{"type": "web_search"},
      {"type": "function", "name": "f", "parameters": {"type": "object"}}, {"type": "custom", "name": "g"}]})"));
  ASSERT_EQ(out.at("tools").size(), 1u);
  EXPECT_EQ(out.at("tools")[0].at("function").at("name"), "f");
}
}  // namespace loom::api
