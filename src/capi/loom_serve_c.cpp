// The C API's serving part (include/loom/loom_serve.h): loom::serve::Scheduler behind a handle,
// requests as JSON through serve/request_json (the same fields as `loom serve`), events as C
// structs with JSON details, and the exclusive operations (session files, LoRA, bench) as
// Scheduler::run_exclusive tasks. Also the in-process C++ API (include/loom/loom_serve.hpp): the
// same submission code with the request as a JSON value and typed events (GenerationEvent), from
// which the C events' JSON is written (deliver_c). This file: schedulers and requests; events are
// in loom_serve_events_c.cpp, the exclusive operations in loom_serve_slots_c.cpp.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>

#include "capi/serve_internal.h"
#include "serve/prefix_cache.h"

using namespace loom::capi;

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

// loom_scheduler_params into `sp`; false after recording an error.
bool scheduler_params(const char* fn, const loom_scheduler_params* params, loom::serve::SchedulerParams* sp) {
  if (loom::Status st = to_params(params->context, &sp->context); !st) {
    fail(fn, st);
    return false;
  }
  if (params->n_slots < 1 || params->n_slots > 256) {
    set_error(fn, "n_slots must be between 1 and 256");
    return false;
  }
  sp->n_slots = params->n_slots;
  sp->max_queue = std::max(0, params->max_queue);
  sp->step_tokens = std::max(0, params->step_tokens);
  sp->context_shift = params->context_shift;
  sp->prefix_cache = params->prefix_cache;
  if (params->cache_dir) sp->cache_dir = params->cache_dir;
  return true;
}

// One option of the draft model (draft_max, draft_min, n_ctx, p_min); false after recording an error.
bool draft_option(const char* fn, const std::string& key, const loom::serve::json& value, loom::serve::SchedulerParams* sp) {
  if (key == "draft_max" || key == "draft_min") {
    if (!value.is_number_integer()) {
      set_error(fn, key + " must be an integer");
      return false;
    }
    (key == "draft_max" ? sp->draft_max : sp->draft_min) = int(std::clamp<int64_t>(value.get<int64_t>(), -1, 1 << 20));
  } else if (key == "n_ctx") {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > (int64_t(1) << 24)) {
      set_error(fn, "n_ctx must be an integer from 0 to 2^24");
      return false;
    }
    sp->draft_context.n_ctx = int(value.get<int64_t>());
  } else if (key == "p_min") {
    if (!value.is_number()) {
      set_error(fn, "p_min must be a number");
      return false;
    }
    sp->draft_p_min = value.get<float>();
  } else {
    set_error(fn, "unknown draft option '" + key + "'");
    return false;
  }
  return true;
}

// The draft model (if any) and the options memory_options left; false after recording an error.
bool draft_params(const char* fn, const loom_model* draft, const loom::serve::json& options,
                  loom::serve::SchedulerParams* sp) {
  if (!draft && !options.empty()) {
    set_error(fn, "unknown option '" + options.begin().key() + "'");
    return false;
  }
  if (!draft) return true;
  if (draft->vocab_only) {
    set_error(fn, "the draft model was loaded with vocab_only");
    return false;
  }
  sp->draft_model = draft->m;
  sp->draft_context.n_threads = sp->context.n_threads;
  sp->draft_context.type_k = sp->context.type_k;
  sp->draft_context.type_v = sp->context.type_v;
  for (const auto& [key, value] : options.items()) {
    if (!draft_option(fn, key, value, sp)) return false;
  }
  return true;
}

// The scheduler's chat template for "messages": the override, else the model's (or why none).
void set_chat_template(loom_scheduler& h, const char* chat_template) {
  std::string override_src;
  if (chat_template) override_src = chat_template;
  auto t = loom::chat::ChatTemplate::from_model(*h.model, chat_template ? &override_src : nullptr);
  if (t) h.tmpl = std::move(*t);
  else h.tmpl_error = t.status().message();
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
    if (!scheduler_params(fn, params, &sp)) return nullptr;
    loom::serve::json options = loom::serve::json::parse(draft_options_json ? draft_options_json : "{}", nullptr, false);
    if (options.is_discarded() || !options.is_object()) {
      set_error(fn, "options_json is not a JSON object");
      return nullptr;
    }
    if (!memory_options(fn, options, &sp) || !draft_params(fn, draft, options, &sp)) return nullptr;
    auto s = loom::serve::Scheduler::create(model->m, std::move(sp));
    if (!s) {
      fail(fn, s.status());
      return nullptr;
    }
    auto h = std::make_unique<loom_scheduler>();
    h->model = model->m;
    h->s = std::move(*s);
    set_chat_template(*h, params->chat_template);
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
