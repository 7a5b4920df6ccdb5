// The C API's serving events: a request's scheduler events turned into typed GenerationEvents
// (GenState, loom_serve.hpp), and those as the C API's loom_event with JSON details (deliver_c).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>

#include "capi/serve_internal.h"
#include "serve/prefix_cache.h"

using namespace loom::capi;

namespace loom::capi {

void GenState::set_message(const loom::chat::ParsedMessage& m, loom::api::GenerationEvent& g) {
  g.has_message = true;
  g.content = m.content;
  g.reasoning_content = m.reasoning_content;
  g.tool_calls = json::array();
  for (const loom::chat::ToolCall& tc : m.tool_calls) {
    json c = json::object();
    c["id"] = tc.id;
    c["type"] = "function";
    c["function"] = json{{"name", tc.name}, {"arguments", tc.arguments}};
    g.tool_calls.push_back(std::move(c));
  }
}

loom::api::ChatStream& GenState::stream(size_t choice) {
  if (streams.size() <= choice) streams.resize(choice + 1);
  if (!streams[choice]) streams[choice] = std::make_unique<loom::api::ChatStream>(format, parse_options);
  return *streams[choice];
}

void GenState::on_event(const loom::serve::Event& e) {
  using Kind = loom::serve::Event::Kind;
  if (e.kind != Kind::kDone && e.kind != Kind::kError && size_t(e.choice) >= text.size()) text.resize(size_t(e.choice) + 1);
  loom::api::GenerationEvent g;
  g.request_id = e.id;
  g.choice = e.choice;
  switch (e.kind) {
    case Kind::kToken: {
      text[size_t(e.choice)] += e.text;
      g.kind = LOOM_EVENT_TOKEN;
      g.token = e.token;
      g.text = e.text;
      if (e.has_logprob) {
        g.has_logprob = true;
        g.chosen = {e.token, vocab->token_to_piece(e.token, false), e.logprob.logprob};
        g.top.reserve(e.top.size());
        for (const auto& t : e.top) g.top.push_back({t.token, vocab->token_to_piece(t.token, false), t.logprob});
      }
      if (chat && stream_parse) {
        // The reply so far (llama.node's token callback fields) and what it adds (the deltas).
        loom::api::ChatStream& cs = stream(size_t(e.choice));
        g.deltas = cs.add(e.text);
        set_message(cs.message(), g);
      }
      break;
    }
    case Kind::kFinish: {
      std::string& all = text[size_t(e.choice)];
      all += e.text;
      g.kind = LOOM_EVENT_FINISH;
      g.text = e.text;
      g.reason = loom::serve::finish_reason_name(e.reason);
      g.stop_word = e.stop_word;
      g.all_text = all;
      g.tokens = e.tokens;
      if (chat) {
        // Fed piece by piece when streamed (deltas); else parsed once here.
        loom::api::ChatStream& cs = stream(size_t(e.choice));
        std::vector<json> deltas = stream_parse ? cs.finish(e.text) : cs.finish(all);
        set_message(cs.message(), g);
        if (stream_parse) g.deltas = std::move(deltas);
        streams[size_t(e.choice)].reset();
      }
      break;
    }
    case Kind::kDone: {
      g.kind = LOOM_EVENT_DONE;
      g.prompt_tokens = e.usage.prompt_tokens;
      g.completion_tokens = e.usage.completion_tokens;
      g.cached_tokens = e.usage.cached_tokens;
      const auto& t = e.timings;
      g.prompt_n = t.prompt_n;
      g.prompt_ms = t.prompt_ms;
      g.predicted_n = t.predicted_n;
      g.predicted_ms = t.predicted_ms;
      g.cache_n = t.cache_n;
      g.queue_ms = t.queue_ms;
      g.ttft_ms = t.ttft_ms;
      g.prompt_ids = prompt;
      break;
    }
    case Kind::kError: {
      g.kind = LOOM_EVENT_ERROR;
      g.token = status_code(e.error);
      g.text = e.error.message();
      break;
    }
  }
  sink(g);
}

// A typed event as the C API's loom_event: the details of its kind as JSON (loom_serve.h).
void deliver_c(const loom::api::GenerationEvent& g, bool stream_parse, loom_event_callback cb, void* user) {
  json d;
  bool has_json = true;
  switch (g.kind) {
    case LOOM_EVENT_TOKEN: {
      has_json = g.has_logprob || g.has_message;
      d = json::object();
      if (g.has_logprob) {
        json top = json::array();
        for (const auto& t : g.top) top.push_back({{"id", t.id}, {"piece", t.piece}, {"logprob", t.logprob}});
        d = {{"piece", g.chosen.piece}, {"logprob", g.chosen.logprob}, {"top", top}};
      }
      if (g.has_message) {
        d["content"] = g.content;
        d["reasoning_content"] = g.reasoning_content;
        d["tool_calls"] = g.tool_calls;
        d["deltas"] = g.deltas;
      }
      break;
    }
    case LOOM_EVENT_FINISH: {
      d = {{"reason", g.reason},
           {"stop_word", g.stop_word},
           {"stopped_eos", g.reason == "stop" && g.stop_word.empty()},
           {"stopped_word", !g.stop_word.empty()},
           {"stopped_limit", g.reason == "length"},
           {"text", g.all_text},
           {"tokens", g.tokens}};
      if (g.has_message) {
        d["content"] = g.content;
        d["reasoning_content"] = g.reasoning_content;
        d["tool_calls"] = g.tool_calls;
        if (stream_parse) d["deltas"] = g.deltas;
      }
      break;
    }
    case LOOM_EVENT_DONE: {
      auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / double(n) : 0.0; };
      auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1e3 * double(n) / ms : 0.0; };
      d = {{"usage",
            {{"prompt_tokens", g.prompt_tokens},
             {"completion_tokens", g.completion_tokens},
             {"cached_tokens", g.cached_tokens}}},
           {"timings",
            {{"prompt_n", g.prompt_n},
             {"prompt_ms", g.prompt_ms},
             {"prompt_per_token_ms", per_token(g.prompt_ms, g.prompt_n)},
             {"prompt_per_second", per_second(g.prompt_ms, g.prompt_n)},
             {"predicted_n", g.predicted_n},
             {"predicted_ms", g.predicted_ms},
             {"predicted_per_token_ms", per_token(g.predicted_ms, g.predicted_n)},
             {"predicted_per_second", per_second(g.predicted_ms, g.predicted_n)},
             {"cache_n", g.cache_n},
             {"queue_ms", g.queue_ms},
             {"ttft_ms", g.ttft_ms}}},
           {"prompt_tokens", g.prompt_ids.size()},
           {"prompt_ids", g.prompt_ids}};
      break;
    }
    case LOOM_EVENT_ERROR: d = {{"message", g.text}}; break;
    default: has_json = false; break;
  }
  loom_event ev{};
  ev.kind = g.kind;
  ev.request_id = g.request_id;
  ev.choice = g.choice;
  ev.token = g.kind == LOOM_EVENT_TOKEN || g.kind == LOOM_EVENT_ERROR ? g.token : -1;
  ev.text = g.text.c_str();
  ev.text_len = g.text.size();
  std::string js;
  if (has_json) js = dump(d);
  ev.json = has_json ? js.c_str() : nullptr;
  cb(&ev, user);
}

}  // namespace loom::capi
