// The C API's serving part (include/loom/loom_serve.h): loom::serve::Scheduler behind a handle,
// requests as JSON through serve/request_json (the same fields as `loom serve`), events as C
// structs with JSON details, and the exclusive operations (session files, LoRA, bench) as
// Scheduler::run_exclusive tasks. Also the in-process C++ API (include/loom/loom_serve.hpp): the
// same submission code with the request as a JSON value and typed events (GenerationEvent), from
// which the C events' JSON is written (deliver_c).
#include "loom/loom_serve.h"
#include "loom/loom_serve.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>

#include "capi/capi_internal.h"
#include "chat/chat_request.h"
#include "api/chat_stream.h"
#include "chat/tool_calls.h"
#include "serve/prefix_cache.h"
#include "serve/request_json.h"
#include "serve/scheduler.h"

using namespace loom::capi;
using loom::serve::json;

struct loom_scheduler {
  std::shared_ptr<const loom::Model> model;
  std::unique_ptr<loom::serve::Scheduler> s;
  std::optional<loom::chat::ChatTemplate> tmpl;  // for "messages" (parsed once)
  std::string tmpl_error;                        // why tmpl is empty
  std::atomic<uint64_t> counter{0};
  std::mutex lora_mu;
  std::vector<std::pair<std::shared_ptr<const loom::LoraAdapter>, float>> loras;
};

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int32_t copy_json(const char* fn, const json& j, char* buf, size_t buf_size) {
  const std::string s = dump(j);
  if (s.size() >= size_t(INT32_MAX)) {
    set_error(fn, "result does not fit int32_t");
    return LOOM_SIZE_ERROR;
  }
  if (!buf || buf_size <= s.size()) return -int32_t(s.size() + 1);
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  return int32_t(s.size());
}

// JSON-taking functions: RequestError -> its status, recorded.
template <typename F>
int32_t guarded_request(const char* fn, F&& f) noexcept {
  return guarded_status(fn, [&]() -> int32_t {
    try {
      return f();
    } catch (const loom::serve::RequestError& e) {
      return fail(fn, e.status());
    }
  });
}

json parse_request(const char* request_json) {
  if (!request_json) loom::serve::request_error("request_json is NULL");
  return loom::serve::parse_body(request_json);
}

// One generation request's state, owned by its event callback: the scheduler's events become
// typed GenerationEvents (loom_serve.hpp: pieces, the chat reply parsed as it streams) and go to
// the sink — the in-process frontend's callback, or deliver_c for the C callback.
struct GenState {
  using Sink = std::function<void(const loom::api::GenerationEvent&)>;
  Sink sink;
  const loom::Vocab* vocab = nullptr;
  bool chat = false;
  loom::chat::ToolCallFormat format = loom::chat::ToolCallFormat::kNone;
  loom::chat::ParseOptions parse_options;
  // "stream_parse": every kToken event of a chat request carries the parse of its choice's text so
  // far (parse_assistant_output with partial = true), as llama.node's token callback does, and the
  // deltas it adds (src/api/chat_stream.h); the FINISH event the last deltas.
  bool stream_parse = false;
  std::vector<int32_t> prompt;    // the request's prompt ids (reported with kDone)
  std::vector<std::string> text;  // per choice
  // Per chat choice: the reply parsed as it streams (src/api/chat_stream.h).
  std::vector<std::unique_ptr<loom::api::ChatStream>> streams;

  static void set_message(const loom::chat::ParsedMessage& m, loom::api::GenerationEvent& g) {
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

  loom::api::ChatStream& stream(size_t choice) {
    if (streams.size() <= choice) streams.resize(choice + 1);
    if (!streams[choice]) streams[choice] = std::make_unique<loom::api::ChatStream>(format, parse_options);
    return *streams[choice];
  }

  void on_event(const loom::serve::Event& e) {
    using Kind = loom::serve::Event::Kind;
    if (e.kind != Kind::kDone && e.kind != Kind::kError && size_t(e.choice) >= text.size())
      text.resize(size_t(e.choice) + 1);
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
};

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

#define LOOM_NEED_SCHED(ret)                    \
  do {                                          \
    if (!sched) {                               \
      set_error(__func__, "scheduler is NULL"); \
      return ret;                               \
    }                                           \
  } while (0)

}  // namespace

extern "C" {

loom_scheduler_params loom_scheduler_default_params(void) {
  loom_scheduler_params p{};
  p.context = loom_context_default_params();
  p.n_slots = 4;
  p.max_queue = 256;
  p.step_tokens = 0;
  p.context_shift = false;
  p.prefix_cache = true;
  p.cache_dir = nullptr;
  p.chat_template = nullptr;
  return p;
}

namespace {

// Options of loom_scheduler_new_ext that loom_scheduler_params does not hold: the memory's
// checkpoints and window cache. Consumed keys are erased from `o`.
bool memory_options(const char* fn, loom::serve::json& o, loom::serve::SchedulerParams* sp) {
  for (const char* key : {"ctx_checkpoints", "cache_ram_mib"}) {
    if (!o.contains(key)) continue;
    const auto& v = o[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t(1) << 30)) {
      set_error(fn, std::string(key) + " must be an integer from 0 to 2^30");
      return false;
    }
    if (std::string(key) == "ctx_checkpoints") sp->ctx_checkpoints = int(v.get<int64_t>());
    else sp->cache_ram_mib = v.get<int64_t>();
    o.erase(key);
  }
  if (o.contains("swa_full")) {
    if (!o["swa_full"].is_boolean()) {
      set_error(fn, "swa_full must be a boolean");
      return false;
    }
    sp->context.swa_full = o["swa_full"].get<bool>();
    o.erase("swa_full");
  }
  return true;
}

// loom_scheduler_new, loom_scheduler_new_with_draft and loom_scheduler_new_ext.
loom_scheduler* new_scheduler(const char* fn, const loom_model* model, const loom_scheduler_params* params,
                              const loom_model* draft, const char* draft_options_json) {
  return guarded<loom_scheduler*>(fn, nullptr, [&]() -> loom_scheduler* {
    if (!model || !params) {
      set_error(fn, !model ? "model is NULL" : "params is NULL");
      return nullptr;
    }
    if (model->vocab_only) {
      set_error(fn, "the model was loaded with vocab_only");
      return nullptr;
    }
    loom::serve::SchedulerParams sp;
    if (loom::Status st = to_params(params->context, &sp.context); !st) {
      fail(fn, st);
      return nullptr;
    }
    if (params->n_slots < 1 || params->n_slots > 256) {
      set_error(fn, "n_slots must be between 1 and 256");
      return nullptr;
    }
    sp.n_slots = params->n_slots;
    sp.max_queue = std::max(0, params->max_queue);
    sp.step_tokens = std::max(0, params->step_tokens);
    sp.context_shift = params->context_shift;
    sp.prefix_cache = params->prefix_cache;
    if (params->cache_dir) sp.cache_dir = params->cache_dir;
    loom::serve::json options = loom::serve::json::parse(draft_options_json ? draft_options_json : "{}", nullptr, false);
    if (options.is_discarded() || !options.is_object()) {
      set_error(fn, "options_json is not a JSON object");
      return nullptr;
    }
    if (!memory_options(fn, options, &sp)) return nullptr;
    if (!draft && !options.empty()) {
      set_error(fn, "unknown option '" + options.begin().key() + "'");
      return nullptr;
    }
    if (draft) {
      if (draft->vocab_only) {
        set_error(fn, "the draft model was loaded with vocab_only");
        return nullptr;
      }
      sp.draft_model = draft->m;
      sp.draft_context.n_threads = sp.context.n_threads;
      sp.draft_context.type_k = sp.context.type_k;
      sp.draft_context.type_v = sp.context.type_v;
      for (const auto& [key, value] : options.items()) {
        if (key == "draft_max" || key == "draft_min") {
          if (!value.is_number_integer()) {
            set_error(fn, key + " must be an integer");
            return nullptr;
          }
          (key == "draft_max" ? sp.draft_max : sp.draft_min) = int(std::clamp<int64_t>(value.get<int64_t>(), -1, 1 << 20));
        } else if (key == "n_ctx") {
          if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > (int64_t(1) << 24)) {
            set_error(fn, "n_ctx must be an integer from 0 to 2^24");
            return nullptr;
          }
          sp.draft_context.n_ctx = int(value.get<int64_t>());
        } else if (key == "p_min") {
          if (!value.is_number()) {
            set_error(fn, "p_min must be a number");
            return nullptr;
          }
          sp.draft_p_min = value.get<float>();
        } else {
          set_error(fn, "unknown draft option '" + key + "'");
          return nullptr;
        }
      }
    }
    auto s = loom::serve::Scheduler::create(model->m, std::move(sp));
    if (!s) {
      fail(fn, s.status());
      return nullptr;
    }
    auto h = std::make_unique<loom_scheduler>();
    h->model = model->m;
    h->s = std::move(*s);
    std::string override_src;
    if (params->chat_template) override_src = params->chat_template;
    auto t = loom::chat::ChatTemplate::from_model(*h->model, params->chat_template ? &override_src : nullptr);
    if (t) h->tmpl = std::move(*t);
    else h->tmpl_error = t.status().message();
    return h.release();
  });
}

}  // namespace

loom_scheduler* loom_scheduler_new(const loom_model* model, const loom_scheduler_params* params) {
  return new_scheduler("loom_scheduler_new", model, params, nullptr, nullptr);
}

loom_scheduler* loom_scheduler_new_with_draft(const loom_model* model, const loom_scheduler_params* params,
                                              const loom_model* draft, const char* draft_options_json) {
  if (!draft) {
    set_error(__func__, "draft is NULL (use loom_scheduler_new)");
    return nullptr;
  }
  return new_scheduler(__func__, model, params, draft, draft_options_json);
}

loom_scheduler* loom_scheduler_new_ext(const loom_model* model, const loom_scheduler_params* params, const loom_model* draft,
                                       const char* options_json) {
  return new_scheduler(__func__, model, params, draft, options_json);
}

void loom_scheduler_shutdown(loom_scheduler* sched, int32_t grace_ms) {
  if (!sched) return;
  guarded<int>(__func__, 0, [&] {
    sched->s->shutdown(std::chrono::milliseconds(std::max(0, grace_ms)));
    return 0;
  });
}

void loom_scheduler_free(loom_scheduler* sched, int32_t grace_ms) {
  if (!sched) return;
  guarded<int>(__func__, 0, [&] {
    sched->s->shutdown(std::chrono::milliseconds(std::max(0, grace_ms)));
    return 0;
  });
  delete sched;
}

}  // extern "C"

namespace {

using loom::api::GenerationOptions;

// loom_scheduler_submit_ext's options_json -> GenerationOptions.
GenerationOptions parse_submit_options(const char* options_json) {
  GenerationOptions o;
  if (!options_json) return o;
  const json j = json::parse(options_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) loom::serve::request_error("options_json is not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key == "n_predict") {
      if (!value.is_number_integer() || value.get<int64_t>() < -1 || value.get<int64_t>() > (int64_t(1) << 30)) {
        loom::serve::request_error("options.n_predict: expected an integer from -1 to 2^30");
      }
      o.n_predict = int(value.get<int64_t>());
    } else if (key == "endpoint") {
      const std::string e = value.is_string() ? value.get<std::string>() : std::string();
      if (e == "chat") o.endpoint = GenerationOptions::Endpoint::kChat;
      else if (e == "completion") o.endpoint = GenerationOptions::Endpoint::kCompletion;
      else if (e == "any") o.endpoint = GenerationOptions::Endpoint::kAny;
      else loom::serve::request_error("options.endpoint: expected \"chat\", \"completion\" or \"any\"");
    } else {
      loom::serve::request_error("options: unknown field '" + key + "'");
    }
  }
  return o;
}

// GenerationInfo as loom_scheduler_submit_ext's info JSON.
json info_json(const loom::api::GenerationInfo& i) {
  return {{"prompt_tokens", i.prompt_tokens},
          {"n", i.n},
          {"max_tokens", i.max_tokens},
          {"seed", i.seed},
          {"logprobs", i.logprobs},
          {"top_logprobs", i.top_logprobs},
          {"chat", i.chat},
          {"tool_call_format", i.tool_call_format},
          {"grammar_triggers", i.grammar_triggers},
          {"reasoning_format", i.reasoning_format},
          {"stream_parse", i.stream_parse}};
}

// Every generation submission (C and C++): checks the request, describes it (describe may refuse
// it: nothing is queued then), queues it with its events going to `sink`. Returns a status;
// errors are recorded for loom_last_error.
using Describe = std::function<int32_t(const loom::api::GenerationInfo&)>;
int32_t submit_generation(const char* fn, loom_scheduler* sched, const json& body, const GenerationOptions& opts,
                          const std::function<GenState::Sink(const GenState&)>& make_sink, const Describe& describe,
                          uint64_t* request_id) {
  const loom::serve::Fields f(body);
  const loom::Vocab& vocab = sched->model->vocab();
  auto st = std::make_shared<GenState>();
  st->vocab = &vocab;
  loom::serve::GenerateRequest r;
  std::vector<std::string> triggers;
  // How a chat request's output is parsed (checked on every request; used with "messages").
  const bool stream_parse = f.boolean("stream_parse", false);
  loom::chat::ReasoningFormat reasoning_format = loom::chat::ReasoningFormat::kAuto;
  if (f.has("reasoning_format")) {
    auto rf = loom::chat::parse_reasoning_format(f.string("reasoning_format"));
    if (!rf) return fail(fn, rf.status());
    reasoning_format = *rf;
  }
  const bool chat = opts.endpoint == GenerationOptions::Endpoint::kChat ||
                    (opts.endpoint == GenerationOptions::Endpoint::kAny && f.has("messages"));
  if (chat) {
    // A request's own chat_template replaces the scheduler's for it.
    std::optional<loom::chat::ChatTemplate> own;
    if (f.has("chat_template") && !f.string("chat_template").empty()) {
      const std::string src = f.string("chat_template");
      auto t = loom::chat::ChatTemplate::from_model(*sched->model, &src);
      if (!t) return fail(fn, t.status());
      own = std::move(*t);
    }
    const loom::chat::ChatTemplate* tmpl = own ? &*own : sched->tmpl ? &*sched->tmpl : nullptr;
    if (!tmpl) return fail(fn, loom::invalid_argument("chat template: " + sched->tmpl_error));
    loom::serve::ChatGeneration g = loom::serve::parse_chat_generation(
        f, *tmpl, vocab, opts.n_predict, sched->counter.fetch_add(1), sched->s->checkpoints_prefixes());
    r = std::move(g.request);
    st->chat = true;
    st->format = g.format;
    st->parse_options = g.parse_options;
    st->parse_options.reasoning_format = reasoning_format;
    st->stream_parse = stream_parse;
    // deepseek-legacy: the reasoning stays in the content (as <think>...</think>) when streamed,
    // in the final message too, as llama.cpp's reasoning_in_content = stream && legacy.
    st->parse_options.reasoning_in_content =
        stream_parse && reasoning_format == loom::chat::ReasoningFormat::kDeepSeekLegacy;
    triggers = std::move(g.triggers);
  } else {
    const json* p = f.get("prompt");
    if (!p) {
      return fail(
          fn, loom::invalid_argument(opts.endpoint == GenerationOptions::Endpoint::kAny ? "prompt: required (or messages)"
                                                                                        : "prompt: required"));
    }
    loom::serve::parse_generation(f, vocab, opts.n_predict, /*chat=*/false, r);
    r.prompt = loom::serve::prompt_tokens(*p, vocab, "prompt");
  }
  if (describe) {
    // What the request became, for a frontend that shapes responses (loom serve): before anything
    // is queued, so a refusal loses nothing.
    loom::api::GenerationInfo info;
    info.prompt_tokens = int64_t(r.prompt.size());
    info.n = r.n;
    info.max_tokens = r.max_tokens;
    info.seed = r.sampling.seed;
    info.logprobs = r.logprobs;
    info.top_logprobs = r.top_logprobs;
    info.chat = st->chat;
    info.tool_call_format = loom::chat::tool_call_format_name(st->format);
    info.grammar_triggers = triggers;
    info.reasoning_format = loom::chat::reasoning_format_name(st->parse_options.reasoning_format);
    info.stream_parse = st->chat && st->stream_parse;
    if (const int32_t rc = describe(info); rc != LOOM_OK) return rc;
  }
  st->prompt = r.prompt;
  st->sink = make_sink(*st);
  auto id = sched->s->submit(std::move(r), [st](const loom::serve::Event& e) { st->on_event(e); });
  if (!id) return fail(fn, id.status());
  if (request_id) *request_id = *id;
  return LOOM_OK;
}

// Every embedding submission (C and C++): {"input"} or {"rerank": {"query", "documents"}}.
int32_t submit_embedding(const char* fn, loom_scheduler* sched, const json& body,
                         std::function<void(loom::Expected<loom::serve::EmbedResult>)> done, uint64_t* request_id) {
  const loom::serve::Fields f(body);
  const loom::Vocab& vocab = sched->model->vocab();
  loom::serve::EmbedRequest er;
  if (const json* rr = f.get("rerank")) {
    const loom::serve::Fields rf(*rr, "rerank.");
    if (!rf.has("query")) return fail(fn, loom::invalid_argument("rerank.query: required"));
    const json* docs = rf.get("documents");
    if (!docs) return fail(fn, loom::invalid_argument("rerank.documents: required"));
    er.inputs = loom::serve::rerank_inputs(rf.string("query"), *docs, vocab, nullptr);
  } else if (const json* in = f.get("input")) {
    er.inputs = loom::serve::embed_inputs(*in, vocab, "input");
  } else {
    return fail(fn, loom::invalid_argument("input: required (or rerank)"));
  }
  auto id = sched->s->submit_embed(std::move(er), std::move(done));
  if (!id) return fail(fn, id.status());
  if (request_id) *request_id = *id;
  return LOOM_OK;
}

// n_inputs x n_dim floats, rows padded with zeros to the first one's size.
std::vector<float> flat_embeddings(const loom::serve::EmbedResult& r) {
  const auto& e = r.embeddings;
  const size_t dim = e.empty() ? 0 : e[0].size();
  std::vector<float> flat;
  flat.reserve(e.size() * dim);
  for (const auto& v : e) {
    flat.insert(flat.end(), v.begin(), v.begin() + std::ptrdiff_t(std::min(dim, v.size())));
    flat.resize(flat.size() + (dim - std::min(dim, v.size())), 0.0f);
  }
  return flat;
}

// loom_scheduler_submit and loom_scheduler_submit_ext: the JSON texts, the C callback.
int32_t submit_generation_c(const char* fn, loom_scheduler* sched, const char* request_json, const char* options_json,
                            loom_event_callback callback, void* user_data, uint64_t* request_id, char* info,
                            size_t info_size) {
  if (!sched) return fail_arg(fn, "scheduler is NULL");
  if (!callback) return fail_arg(fn, "callback is NULL");
  return guarded_request(fn, [&]() -> int32_t {
    const GenerationOptions opts = parse_submit_options(options_json);
    const json body = parse_request(request_json);
    Describe describe;
    if (info) {
      describe = [&](const loom::api::GenerationInfo& i) -> int32_t {
        const std::string s = dump(info_json(i));
        if (info_size <= s.size()) {
          return fail(fn, loom::Status(loom::StatusCode::kResourceExhausted,
                                       "info_buf needs " + std::to_string(s.size() + 1) + " bytes; nothing was queued"));
        }
        std::memcpy(info, s.c_str(), s.size() + 1);
        return LOOM_OK;
      };
    }
    auto make_sink = [callback, user_data](const GenState& st) -> GenState::Sink {
      const bool stream_parse = st.chat && st.stream_parse;
      return [callback, user_data, stream_parse](const loom::api::GenerationEvent& g) {
        deliver_c(g, stream_parse, callback, user_data);
      };
    };
    return submit_generation(fn, sched, body, opts, make_sink, describe, request_id);
  });
}

}  // namespace

extern "C" {

int32_t loom_scheduler_submit(loom_scheduler* sched, const char* request_json, loom_event_callback callback, void* user_data,
                              uint64_t* request_id) {
  return submit_generation_c(__func__, sched, request_json, nullptr, callback, user_data, request_id, nullptr, 0);
}

int32_t loom_scheduler_submit_ext(loom_scheduler* sched, const char* request_json, const char* options_json,
                                  loom_event_callback callback, void* user_data, uint64_t* request_id, char* info_buf,
                                  size_t info_size) {
  if (info_size > 0 && !info_buf) return fail_arg(__func__, "info_buf is NULL but info_size is not 0");
  return submit_generation_c(__func__, sched, request_json, options_json, callback, user_data, request_id,
                             info_size > 0 ? info_buf : nullptr, info_size);
}

int32_t loom_scheduler_end_reasoning(loom_scheduler* sched, uint64_t request_id) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__,
                        [&] { return check("loom_scheduler_end_reasoning", sched->s->end_reasoning(request_id)); });
}

void loom_scheduler_cancel(loom_scheduler* sched, uint64_t request_id) {
  if (!sched) return;
  guarded<int>(__func__, 0, [&] {
    sched->s->cancel(request_id);
    return 0;
  });
}

int32_t loom_scheduler_embed(loom_scheduler* sched, const char* request_json, loom_embed_callback callback, void* user_data,
                             uint64_t* request_id) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!callback) return fail_arg(__func__, "callback is NULL");
  return guarded_request(__func__, [&]() -> int32_t {
    return submit_embedding(
        "loom_scheduler_embed", sched, parse_request(request_json),
        [callback, user_data](loom::Expected<loom::serve::EmbedResult> r) {
          if (!r) {
            const std::string msg = r.status().message();
            callback(status_code(r.status()), msg.c_str(), nullptr, 0, 0, 0, user_data);
            return;
          }
          const std::vector<float> flat = flat_embeddings(*r);
          const size_t dim = r->embeddings.empty() ? 0 : r->embeddings[0].size();
          callback(LOOM_OK, "", flat.data(), int32_t(r->embeddings.size()), int32_t(dim), r->prompt_tokens, user_data);
        },
        request_id);
  });
}

int32_t loom_scheduler_stats(const loom_scheduler* sched, char* buf, size_t buf_size) {
  LOOM_NEED_SCHED(LOOM_SIZE_ERROR);
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&] {
    const loom::serve::SchedulerStats s = sched->s->stats();
    const json j = {{"running", s.running},
                    {"waiting", s.waiting},
                    {"slots", s.slots},
                    {"slots_busy", s.slots_busy},
                    {"kv_cells", s.kv_cells},
                    {"kv_used", s.kv_used},
                    {"cached_tokens", s.cached_tokens},
                    {"cache_evictable", s.cache_evictable},
                    {"prompt_tokens", s.metrics.prompt_tokens},
                    {"generated_tokens", s.metrics.generated_tokens},
                    {"prefix_queried_tokens", s.metrics.prefix_queried_tokens},
                    {"prefix_hit_tokens", s.metrics.prefix_hit_tokens},
                    {"requests_rejected", s.metrics.requests_rejected},
                    {"draft_tokens", s.metrics.draft_tokens},
                    {"draft_accepted", s.metrics.draft_accepted},
                    {"cache_checkpoints", s.cache_checkpoints},
                    {"cache_checkpoint_bytes", s.cache_checkpoint_bytes}};
    // Since 0.3: every counter and latency histogram (what `loom serve`'s /metrics exports).
    auto histogram = [](const loom::serve::Histogram& h) {
      return json{{"bounds", h.bounds()}, {"counts", h.counts()}, {"sum", h.sum()}, {"count", h.count()}};
    };
    const loom::serve::Metrics& m = s.metrics;
    json out = j;
    out["metrics"] = {{"prompt_tokens", m.prompt_tokens},
                      {"generated_tokens", m.generated_tokens},
                      {"requests_stop", m.requests_stop},
                      {"requests_length", m.requests_length},
                      {"requests_cancelled", m.requests_cancelled},
                      {"requests_error", m.requests_error},
                      {"requests_rejected", m.requests_rejected},
                      {"embed_requests", m.embed_requests},
                      {"prefix_queried_tokens", m.prefix_queried_tokens},
                      {"prefix_hit_tokens", m.prefix_hit_tokens},
                      {"disk_loads", m.disk_loads},
                      {"disk_writes", m.disk_writes},
                      {"disk_errors", m.disk_errors},
                      {"steps", m.steps},
                      {"draft_tokens", m.draft_tokens},
                      {"draft_accepted", m.draft_accepted},
                      {"context_shifts", m.context_shifts},
                      {"expert_choices", m.expert_choices},
                      {"expert_busiest_share", m.expert_busiest_share},
                      {"stalls", m.stalls},
                      {"prompt_seconds", m.prompt_seconds},
                      {"predicted_seconds", m.predicted_seconds},
                      {"n_tokens_max", m.n_tokens_max},
                      {"busy_slots_sum", m.busy_slots_sum},
                      {"ttft_seconds", histogram(m.ttft)},
                      {"inter_token_seconds", histogram(m.itl)},
                      {"queue_seconds", histogram(m.queue_time)},
                      {"e2e_seconds", histogram(m.e2e)}};
    return copy_json("loom_scheduler_stats", out, buf, buf_size);
  });
}

int32_t loom_scheduler_n_ctx(const loom_scheduler* sched) {
  LOOM_NEED_SCHED(-1);
  return sched->s->n_ctx();
}

int32_t loom_scheduler_n_slots(const loom_scheduler* sched) {
  LOOM_NEED_SCHED(-1);
  return sched->s->n_slots();
}

}  // extern "C"

namespace {

// The cached prefix of `toks` as a checked sequence state file (save_session, slot save).
loom::Status save_cached(loom_scheduler* sched, const char* path, const std::vector<int32_t>& toks, int* saved) {
  *saved = 0;
  return sched->s->run_exclusive([&](loom::Context& ctx, loom::serve::PrefixCache* cache) -> loom::Status {
    if (!cache) return loom::Status(loom::StatusCode::kUnsupported, "the prefix cache is disabled");
    loom::serve::PrefixCache::Match m = cache->match(toks, int(toks.size()));
    if (m.len == 0) return loom::Status(loom::StatusCode::kNotFound, "none of these tokens is cached");
    // Slot 0 is free while nothing runs: give it the prefix, write it, free it again.
    LOOM_RETURN_IF_ERROR(cache->share(m, 0));
    loom::Status w = ctx.seq_state_save_file(path, 0, std::span<const int32_t>(toks.data(), size_t(m.len)));
    (void)ctx.seq_rm(0, -1, -1);
    if (w) *saved = m.len;
    return w;
  });
}

// A file written by save_cached into the prefix cache; its tokens into *toks.
loom::Status load_cached(loom_scheduler* sched, const char* path, std::vector<int32_t>* toks) {
  return sched->s->run_exclusive([&](loom::Context& ctx, loom::serve::PrefixCache* cache) -> loom::Status {
    if (!cache) return loom::Status(loom::StatusCode::kUnsupported, "the prefix cache is disabled");
    auto header = ctx.seq_state_file_tokens(path);
    if (!header) return header.status();
    const int need = int(header->size());
    if (need > ctx.kv().size()) {
      return loom::invalid_argument("the session holds " + std::to_string(need) +
                                    " tokens, more than n_ctx = " + std::to_string(ctx.kv().size()));
    }
    const int free_cells = ctx.kv().size() - ctx.kv().used();
    if (free_cells < need) cache->evict(need - free_cells);
    LOOM_RETURN_IF_ERROR(ctx.seq_state_load_file(path, 0, toks));
    (void)cache->insert(*toks, 0);
    (void)ctx.seq_rm(0, -1, -1);
    return loom::Status::ok();
  });
}

bool valid_slot(const loom_scheduler* sched, int32_t slot) { return slot >= 0 && slot < sched->s->n_slots(); }

}  // namespace

extern "C" {

int32_t loom_scheduler_save_session(loom_scheduler* sched, const char* path, const loom_token* tokens, int32_t n_tokens,
                                    int32_t* n_saved) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!path) return fail_arg(__func__, "path is NULL");
  if (n_tokens < 0 || (n_tokens > 0 && !tokens)) return fail_arg(__func__, "tokens is NULL or n_tokens negative");
  if (n_saved) *n_saved = 0;
  return guarded_status(__func__, [&]() -> int32_t {
    int saved = 0;
    const loom::Status st = save_cached(sched, path, std::vector<int32_t>(tokens, tokens + n_tokens), &saved);
    if (!st) return fail("loom_scheduler_save_session", st);
    if (n_saved) *n_saved = saved;
    return LOOM_OK;
  });
}

int32_t loom_scheduler_load_session(loom_scheduler* sched, const char* path, loom_token* tokens_out, int32_t capacity,
                                    int32_t* n_loaded) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!path) return fail_arg(__func__, "path is NULL");
  if (capacity < 0 || (capacity > 0 && !tokens_out)) return fail_arg(__func__, "tokens_out is NULL or capacity negative");
  if (n_loaded) *n_loaded = 0;
  return guarded_status(__func__, [&]() -> int32_t {
    std::vector<int32_t> toks;
    const loom::Status st = load_cached(sched, path, &toks);
    if (!st) return fail("loom_scheduler_load_session", st);
    const size_t n = std::min(toks.size(), size_t(capacity));
    if (n) std::copy_n(toks.begin(), n, tokens_out);
    if (n_loaded) *n_loaded = int32_t(toks.size());
    return LOOM_OK;
  });
}

int32_t loom_scheduler_slots(const loom_scheduler* sched, char* buf, size_t buf_size) {
  LOOM_NEED_SCHED(LOOM_SIZE_ERROR);
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&] {
    json out = json::array();
    for (const loom::serve::SlotState& s : sched->s->slots()) {
      out.push_back({{"id", s.id},
                     {"is_processing", s.processing},
                     {"request_id", s.request},
                     {"n_prompt", s.n_prompt},
                     {"n_decoded", s.n_decoded},
                     {"n_remain", s.n_remain},
                     {"n_cached", s.n_cached}});
    }
    return copy_json("loom_scheduler_slots", out, buf, buf_size);
  });
}

int32_t loom_scheduler_slot_save(loom_scheduler* sched, int32_t slot, const char* path, int32_t* n_saved) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!path) return fail_arg(__func__, "path is NULL");
  if (!valid_slot(sched, slot)) return fail_arg(__func__, "no such slot");
  if (n_saved) *n_saved = 0;
  return guarded_status(__func__, [&]() -> int32_t {
    const std::vector<int32_t> toks = sched->s->slot_tokens(slot);
    if (toks.empty()) return fail("loom_scheduler_slot_save", loom::not_found("the slot holds no tokens"));
    int saved = 0;
    const loom::Status st = save_cached(sched, path, toks, &saved);
    if (!st) return fail("loom_scheduler_slot_save", st);
    if (n_saved) *n_saved = saved;
    return LOOM_OK;
  });
}

int32_t loom_scheduler_slot_restore(loom_scheduler* sched, int32_t slot, const char* path, int32_t* n_restored) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!path) return fail_arg(__func__, "path is NULL");
  if (!valid_slot(sched, slot)) return fail_arg(__func__, "no such slot");
  if (n_restored) *n_restored = 0;
  return guarded_status(__func__, [&]() -> int32_t {
    std::vector<int32_t> toks;
    const loom::Status st = load_cached(sched, path, &toks);
    if (!st) return fail("loom_scheduler_slot_restore", st);
    if (n_restored) *n_restored = int32_t(toks.size());
    sched->s->set_slot_tokens(slot, std::move(toks));
    return LOOM_OK;
  });
}

int32_t loom_scheduler_slot_erase(loom_scheduler* sched, int32_t slot, int32_t* n_erased) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (!valid_slot(sched, slot)) return fail_arg(__func__, "no such slot");
  if (n_erased) *n_erased = 0;
  return guarded_status(__func__, [&]() -> int32_t {
    const std::vector<int32_t> toks = sched->s->slot_tokens(slot);
    if (!toks.empty()) {
      const loom::Status st = sched->s->run_exclusive([&](loom::Context&, loom::serve::PrefixCache* cache) -> loom::Status {
        if (cache) (void)cache->erase(toks);
        return loom::Status::ok();
      });
      if (!st) return fail("loom_scheduler_slot_erase", st);
    }
    sched->s->set_slot_tokens(slot, {});
    if (n_erased) *n_erased = int32_t(toks.size());
    return LOOM_OK;
  });
}

int32_t loom_scheduler_clear_cache(loom_scheduler* sched) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&]() -> int32_t {
    return check("loom_scheduler_clear_cache", sched->s->run_exclusive([](loom::Context&, loom::serve::PrefixCache* cache) {
      if (cache) cache->clear_unlocked();
      return loom::Status::ok();
    }));
  });
}

int32_t loom_scheduler_set_lora(loom_scheduler* sched, const loom_lora_adapter* const* adapters, const float* scales,
                                int32_t n) {
  LOOM_NEED_SCHED(LOOM_ERR_INVALID_ARGUMENT);
  if (n < 0 || (n > 0 && (!adapters || !scales))) return fail_arg(__func__, "adapters / scales NULL or n negative");
  for (int32_t i = 0; i < n; ++i) {
    if (!adapters[i]) return fail_arg(__func__, "an adapter is NULL");
  }
  return guarded_status(__func__, [&]() -> int32_t {
    std::vector<std::pair<std::shared_ptr<const loom::LoraAdapter>, float>> want;
    for (int32_t i = 0; i < n; ++i) want.emplace_back(adapters[i]->a, scales[i]);
    loom::Status st = sched->s->run_exclusive([&](loom::Context& ctx, loom::serve::PrefixCache* cache) -> loom::Status {
      if (cache) cache->clear_unlocked();
      ctx.clear_lora();
      for (const auto& [a, scale] : want) {
        loom::Status s = ctx.set_lora(a, scale);
        if (!s) {
          ctx.clear_lora();
          return s;
        }
      }
      return loom::Status::ok();
    });
    if (!st) return fail("loom_scheduler_set_lora", st);
    std::lock_guard<std::mutex> l(sched->lora_mu);
    sched->loras = std::move(want);
    return LOOM_OK;
  });
}

int32_t loom_scheduler_bench(loom_scheduler* sched, int32_t pp, int32_t tg, int32_t pl, int32_t nr, char* buf,
                             size_t buf_size) {
  LOOM_NEED_SCHED(LOOM_SIZE_ERROR);
  if (pp < 0 || tg < 0 || pl < 1 || nr < 1 || pp + tg < 1) {
    set_error(__func__, "need pp >= 0, tg >= 0, pp + tg >= 1, pl >= 1, nr >= 1");
    return LOOM_SIZE_ERROR;
  }
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    std::vector<double> t_pp, t_tg;
    loom::Status st = sched->s->run_exclusive([&](loom::Context& ctx, loom::serve::PrefixCache* cache) -> loom::Status {
      if (cache) cache->clear_unlocked();
      if (pl > ctx.n_seq_max())
        return loom::invalid_argument("pl is more than the context's sequences (" + std::to_string(ctx.n_seq_max()) + ")");
      if (int64_t(pl) * (pp + tg) > ctx.kv().size()) {
        return loom::invalid_argument("pl x (pp + tg) is more than n_ctx = " + std::to_string(ctx.kv().size()));
      }
      const int32_t n_vocab = ctx.model().vocab().n_tokens();
      // Logits for each sequence's last token, as llama-batched-bench, up to what the context's
      // logits buffer holds (one row per slot).
      const int max_out = ctx.params().n_outputs_max > 0 ? ctx.params().n_outputs_max : pl;
      auto clear = [&] {
        for (int s = 0; s < pl; ++s) (void)ctx.seq_rm(s, -1, -1);
      };
      using clock = std::chrono::steady_clock;
      for (int r = 0; r < nr; ++r) {
        clear();
        auto t0 = clock::now();
        // Prompts: pl sequences of pp tokens, in batches of n_batch tokens.
        loom::Batch b;
        for (int s = 0; s < pl; ++s) {
          for (int i = 0; i < pp; ++i) {
            b.add(int32_t((s * 131 + i * 7 + 1) % n_vocab), i, {s}, i == pp - 1 && s < max_out);
            if (b.size() >= ctx.n_batch()) {
              LOOM_RETURN_IF_ERROR(ctx.decode(b));
              b = loom::Batch();
            }
          }
        }
        if (b.size() > 0) LOOM_RETURN_IF_ERROR(ctx.decode(b));
        auto t1 = clock::now();
        for (int k = 0; k < tg; ++k) {
          loom::Batch d;
          for (int s = 0; s < pl; ++s) d.add(int32_t((s * 31 + k * 17 + 3) % n_vocab), pp + k, {s}, s < max_out);
          LOOM_RETURN_IF_ERROR(ctx.decode(d));
        }
        auto t2 = clock::now();
        t_pp.push_back(std::chrono::duration<double>(t1 - t0).count());
        t_tg.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
      clear();
      return loom::Status::ok();
    });
    if (!st) {
      fail("loom_scheduler_bench", st);
      return LOOM_SIZE_ERROR;
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double tp = median(t_pp), tt = median(t_tg);
    const json j = {{"pp", pp},
                    {"tg", tg},
                    {"pl", pl},
                    {"nr", nr},
                    {"n_kv", pl * (pp + tg)},
                    {"t_pp", tp},
                    {"speed_pp", tp > 0 ? double(pl) * pp / tp : 0.0},
                    {"t_tg", tt},
                    {"speed_tg", tt > 0 ? double(pl) * tg / tt : 0.0},
                    {"t", tp + tt},
                    {"speed", tp + tt > 0 ? double(pl) * (pp + tg) / (tp + tt) : 0.0}};
    return copy_json("loom_scheduler_bench", j, buf, buf_size);
  });
}

int32_t loom_chat_format(const loom_model* model, const char* request_json, char* buf, size_t buf_size) {
  if (!model) {
    set_error(__func__, "model is NULL");
    return LOOM_SIZE_ERROR;
  }
  int32_t out = LOOM_SIZE_ERROR;
  const int32_t st = guarded_request(__func__, [&]() -> int32_t {
    const char* fn = "loom_chat_format";
    const json body = parse_request(request_json);
    const loom::serve::Fields f(body);
    std::string src;
    const bool has_override = f.has("chat_template") && !(src = f.string("chat_template")).empty();
    auto tmpl = loom::chat::ChatTemplate::from_model(*model->m, has_override ? &src : nullptr);
    if (!tmpl) return fail(fn, tmpl.status());
    loom::serve::ChatGeneration g = loom::serve::parse_chat_generation(f, *tmpl, model->m->vocab(), -1, 0);
    json triggers = json::array();
    for (const auto& t : loom::chat::tool_call_syntax(g.format).triggers) {
      if (g.parse_options.tools_present) triggers.push_back({{"type", "word"}, {"value", t}});
    }
    const json j = {{"prompt", g.prompt_text},
                    {"grammar", g.request.sampling.grammar},
                    {"grammar_lazy", false},
                    {"grammar_triggers", triggers},
                    {"additional_stops", g.request.stop},
                    {"preserved_tokens", g.preserved_tokens},
                    {"tool_call_format", loom::chat::tool_call_format_name(g.format)},
                    {"thinking_forced_open", g.parse_options.thinking_forced_open}};
    out = copy_json(fn, j, buf, buf_size);
    return LOOM_OK;
  });
  return st == LOOM_OK ? out : LOOM_SIZE_ERROR;
}

int32_t loom_chat_template_info(const loom_model* model, const char* template_override, char* buf, size_t buf_size) {
  if (!model) {
    set_error(__func__, "model is NULL");
    return LOOM_SIZE_ERROR;
  }
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    const char* fn = "loom_chat_template_info";
    std::string src = template_override ? template_override : "";
    char probe[2];
    const bool has_model_template = loom_model_meta_val_str(model, "tokenizer.chat_template", probe, sizeof probe) >= 0;
    auto tmpl = loom::chat::ChatTemplate::from_model(*model->m, template_override ? &src : nullptr);
    if (!tmpl) {
      fail(fn, tmpl.status());
      return LOOM_SIZE_ERROR;
    }
    const auto& caps = tmpl->caps();
    const json j = {{"has_template", has_model_template || template_override != nullptr},
                    {"template", tmpl->source()},
                    {"tool_call_format", loom::chat::tool_call_format_name(tmpl->tool_call_format())},
                    {"supports_tools", caps.supports_tools},
                    {"supports_tool_calls", caps.supports_tool_calls},
                    {"supports_tool_responses", caps.supports_tool_responses},
                    {"supports_parallel_tool_calls", caps.supports_parallel_tool_calls}};
    return copy_json(fn, j, buf, buf_size);
  });
}

}  // extern "C"

// ---- the in-process C++ API (loom_serve.hpp) ----------------------------------------------------

namespace loom::api {

namespace {
// A failure recorded as "fn: message" (loom_last_error) as the C++ API's Status: the message alone.
Status last_status(const char* fn, int32_t rc) {
  std::string m = loom_last_error();
  const std::string prefix = std::string(fn) + ": ";
  if (m.rfind(prefix, 0) == 0) m.erase(0, prefix.size());
  return Status(rc, std::move(m));
}
}  // namespace

Expected<uint64_t> submit_generation(loom_scheduler* sched, const nlohmann::ordered_json& request,
                                     const GenerationOptions& options, OnGenerationEvent on_event, GenerationInfo* info) {
  const char* fn = "submit_generation";
  uint64_t id = 0;
  int32_t rc = LOOM_OK;
  if (!sched) rc = fail_arg(fn, "scheduler is NULL");
  else if (!on_event) rc = fail_arg(fn, "on_event is empty");
  else if (!request.is_object()) rc = fail_arg(fn, "request: expected a JSON object");
  if (rc != LOOM_OK) return last_status(fn, rc);
  rc = guarded_request(fn, [&]() -> int32_t {
    ::Describe describe;
    if (info)
      describe = [info](const GenerationInfo& i) {
        *info = i;
        return int32_t(LOOM_OK);
      };
    auto sink = std::make_shared<OnGenerationEvent>(std::move(on_event));
    return ::submit_generation(
        fn, sched, request, options,
        [sink](const GenState&) -> GenState::Sink { return [sink](const GenerationEvent& g) { (*sink)(g); }; }, describe,
        &id);
  });
  if (rc != LOOM_OK) return last_status(fn, rc);
  return id;
}

Expected<uint64_t> submit_embedding(loom_scheduler* sched, const nlohmann::ordered_json& request, Scheduler::OnEmbed done) {
  const char* fn = "submit_embedding";
  uint64_t id = 0;
  int32_t rc = LOOM_OK;
  if (!sched) rc = fail_arg(fn, "scheduler is NULL");
  else if (!done) rc = fail_arg(fn, "done is empty");
  else if (!request.is_object()) rc = fail_arg(fn, "request: expected a JSON object");
  if (rc != LOOM_OK) return last_status(fn, rc);
  rc = guarded_request(fn, [&]() -> int32_t {
    return ::submit_embedding(
        fn, sched, request,
        [done = std::move(done)](loom::Expected<loom::serve::EmbedResult> r) {
          if (!r) {
            done(Status(status_code(r.status()), r.status().message()));
            return;
          }
          Scheduler::Embeddings e;
          e.data = flat_embeddings(*r);
          e.n_inputs = int32_t(r->embeddings.size());
          e.n_dim = r->embeddings.empty() ? 0 : int32_t(r->embeddings[0].size());
          e.prompt_tokens = r->prompt_tokens;
          done(std::move(e));
        },
        &id);
  });
  if (rc != LOOM_OK) return last_status(fn, rc);
  return id;
}

}  // namespace loom::api
