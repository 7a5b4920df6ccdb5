#include "server.h"

#include <malloc.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>

#include "frontend.h"
#include "http_server.h"
#include "json_fields.h"
#include "loom/loom.hpp"
#include "loom/loom_serve.hpp"
#include "metrics_text.h"
#include "request.h"
#include "api/anthropic.h"
#include "api/native.h"
#include "api/responses.h"

namespace loom::server {
namespace {

namespace api = loom::api;
using Event = api::GenerationEvent;

int64_t unix_now() { return int64_t(std::time(nullptr)); }

std::string random_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> l(mu);
  static const char* digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += digits[rng() % 62];
  return s;
}

std::string base64(const void* data, size_t n) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = uint32_t(p[i]) << 16 | (i + 1 < n ? uint32_t(p[i + 1]) << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += i + 1 < n ? tbl[(v >> 6) & 63] : '=';
    out += i + 2 < n ? tbl[v & 63] : '=';
  }
  return out;
}

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(int(c));
  return a;
}

// Usage and llama-server's timings, summed over the scheduler requests of one HTTP request (their
// DONE events).
struct Totals {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int64_t cache_n = 0, prompt_n = 0, predicted_n = 0;
  double prompt_ms = 0, predicted_ms = 0;

  void add(const api::GenerationEvent& done) {
    prompt_tokens += done.prompt_tokens;
    completion_tokens += done.completion_tokens;
    cached_tokens += done.cached_tokens;
    cache_n += done.cache_n;
    prompt_n += done.prompt_n;
    predicted_n += done.predicted_n;
    prompt_ms = std::max(prompt_ms, done.prompt_ms);
    predicted_ms = std::max(predicted_ms, done.predicted_ms);
  }
  json timings() const {
    auto per = [](double ms, int64_t n) { return n > 0 ? ms / double(n) : 0.0; };
    auto rate = [](double ms, int64_t n) { return ms > 0 ? 1000.0 * double(n) / ms : 0.0; };
    return {{"cache_n", cache_n},
            {"prompt_n", prompt_n},
            {"prompt_ms", prompt_ms},
            {"prompt_per_token_ms", per(prompt_ms, prompt_n)},
            {"prompt_per_second", rate(prompt_ms, prompt_n)},
            {"predicted_n", predicted_n},
            {"predicted_ms", predicted_ms},
            {"predicted_per_token_ms", per(predicted_ms, predicted_n)},
            {"predicted_per_second", rate(predicted_ms, predicted_n)}};
  }
  json usage() const {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  }
};

// A C API failure as the HTTP error it becomes.
HttpError http_error(const api::Status& st) { return server::http_error(st.code(), st.message()); }

// The chat message of a FINISH event's parsed output (content, reasoning_content, tool_calls), in
// OpenAI's shape: content null when there are only tool calls.
json assistant_message(const api::GenerationEvent& finish) {
  json m = json::object();
  m["role"] = "assistant";
  const json& calls = finish.tool_calls;
  if (finish.content.empty() && !calls.empty()) m["content"] = nullptr;
  else m["content"] = finish.content;
  if (!finish.reasoning_content.empty()) m["reasoning_content"] = finish.reasoning_content;
  if (!calls.empty()) m["tool_calls"] = calls;
  return m;
}

// ---------------------------------------------------------------------------------------------
// The application: one model, one scheduler, the HTTP front.

struct App {
  ServeOptions o;
  std::optional<api::Model> model;
  std::optional<api::Scheduler> sched;
  std::string template_override;           // --chat-template-file's source or --chat-template ("" = the model's template)
  json default_kwargs = json::object();    // --chat-template-kwargs, with --reasoning on|off's enable_thinking
  json request_defaults = json::object();  // --temp, --top-k, -s, --grammar, ... (ServeOptions::request_defaults)
  // --lora adapters (freed with the App) and their scales; lora_mu orders /lora-adapters calls.
  struct Lora {
    loom_lora_adapter* handle = nullptr;
    std::string path;
    float scale = 1.0f;
  };
  std::vector<Lora> loras;
  std::mutex lora_mu;
  ~App() {
    sched.reset();
    for (Lora& l : loras) loom_lora_adapter_free(l.handle);
  }

  // Gives the scheduler the adapters with a non-zero scale (it waits for running requests).
  bool apply_loras() {
    std::vector<loom_lora_adapter*> h;
    std::vector<float> sc;
    for (const Lora& l : loras) {
      if (l.scale != 0.0f) h.push_back(l.handle), sc.push_back(l.scale);
    }
    return loom_scheduler_set_lora(sched->handle(), h.data(), sc.data(), int32_t(h.size())) == LOOM_OK;
  }

  json lora_list() const {
    json out = json::array();
    for (size_t i = 0; i < loras.size(); ++i) {
      out.push_back(
          {{"id", i}, {"path", loras[i].path}, {"scale", loras[i].scale}, {"task_name", ""}, {"prompt_prefix", ""}});
    }
    return out;
  }

  // llama-server's /lora-adapters: GET lists them; POST [{"id", "scale"}] sets the scales (an
  // adapter not named gets 0, as llama-server), applied once the running requests are done.
  void lora_adapters(http::Request& req, http::Response& res) {
    std::lock_guard<std::mutex> l(lora_mu);
    if (req.method != "POST") return send_json(res, lora_list());
    const json body = parse_any_body(req.body);
    if (!body.is_array()) bad_request("Request body must be an array");
    std::vector<float> scales(loras.size(), 0.0f);
    for (size_t i = 0; i < body.size(); ++i) {
      const std::string where = "[" + std::to_string(i) + "]";
      const Fields f(body[i], where + ".");
      if (!body[i].is_object()) bad_request(where + ": expected {\"id\", \"scale\"}");
      const int64_t id = f.integer_in("id", -1, -1, INT32_MAX);
      if (id < 0 || id >= int64_t(loras.size()))
        bad_request(where + ".id: no adapter " + std::to_string(id) + " (" + std::to_string(loras.size()) + " loaded)");
      const json* sc = f.get("scale");
      if (sc && (!sc->is_number() || !std::isfinite(sc->get<double>()))) bad_request(where + ".scale: expected a number");
      scales[size_t(id)] = sc ? float(sc->get<double>()) : 0.0f;
    }
    std::vector<float> before;
    for (size_t i = 0; i < loras.size(); ++i) before.push_back(loras[i].scale), loras[i].scale = scales[i];
    if (!apply_loras()) {
      const std::string why = loom_last_error();
      for (size_t i = 0; i < loras.size(); ++i) loras[i].scale = before[i];
      throw HttpError{500, "applying the adapters failed: " + why, {}, {}};
    }
    send_json(res, {{"success", true}});
  }
  std::string template_source;  // the template in use (/props)
  std::string alias;
  std::atomic<bool> ready{false};

  // ---- sleep on idle (--sleep-idle-seconds) ----
  // A handler holds engine_mu shared while it uses `model` and `sched`; loading or unloading them
  // holds it unique. `busy` counts the answers not finished yet (a generation's until its last
  // event, an embedding's until its callback): the engine sleeps only when none is, after
  // sleep_idle_seconds without a request. What /props, /models and /metrics show is kept here,
  // so that they answer without waking it (llama-server's exempt endpoints).
  std::shared_mutex engine_mu;
  bool sleeping = false;  // under engine_mu
  std::atomic<int> busy{0};
  std::atomic<int64_t> last_active_ms{0};
  std::function<std::string()> load_engine;  // run_server's loader: "" or why it failed
  json model_meta = json::object();          // n_vocab, n_ctx_train, n_embd, n_params, n_ctx, bos, eos
  std::string last_stats;                    // the scheduler's stats when it went to sleep

  static int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void touch() { last_active_ms.store(now_ms()); }
  // Held by an answer in progress (GenState, an embedding's callback).
  std::shared_ptr<int> busy_token() {
    busy.fetch_add(1);
    touch();
    return std::shared_ptr<int>(new int(0), [this](int* p) {
      delete p;
      touch();
      busy.fetch_sub(1);
    });
  }

  // What the exempt endpoints show of the loaded engine.
  void remember_meta() {
    loom_model* h = model->handle();
    auto piece = [&](loom_token t) { return t == LOOM_TOKEN_NULL ? std::string() : model->piece(t, true); };
    model_meta = {{"n_vocab", model->n_vocab()},         {"n_ctx", sched->n_ctx() / std::max(1, o.slots)},
                  {"n_ctx_train", model->n_ctx_train()}, {"n_embd", model->n_embd()},
                  {"n_params", model->n_params()},       {"n_ctx_total", sched->n_ctx()},
                  {"bos", piece(loom_token_bos(h))},     {"eos", piece(loom_token_eos(h))}};
  }

  // Frees the scheduler, the adapters and the model (engine_mu held unique, nothing busy).
  void unload_engine() {
    if (auto s = sched->stats()) last_stats = *s;
    sched->shutdown(0);
    sched.reset();
    for (Lora& l : loras) {
      loom_lora_adapter_free(l.handle);
      l.handle = nullptr;
    }
    model.reset();
    sleeping = true;
#ifdef __GLIBC__
    malloc_trim(0);  // give the freed heap back to the system, not only to malloc
#endif
    std::fprintf(stderr, "loom: sleeping after %d s without requests (the model is unloaded)\n", o.sleep_idle_seconds);
    std::fflush(stderr);
  }

  // Called every few hundred ms by run_server's loop: sleep when idle long enough.
  void maybe_sleep() {
    if (o.sleep_idle_seconds < 0 || !ready.load()) return;
    if (busy.load() > 0 || now_ms() - last_active_ms.load() < int64_t(o.sleep_idle_seconds) * 1000) return;
    std::unique_lock<std::shared_mutex> l(engine_mu, std::try_to_lock);
    if (!l.owns_lock() || sleeping || busy.load() > 0) return;
    unload_engine();
  }

  // Loads the engine again for a request that needs it (HttpError 500 when it cannot).
  void wake() {
    std::unique_lock<std::shared_mutex> l(engine_mu);
    if (!sleeping) return;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string why = load_engine();
    if (!why.empty()) throw HttpError{500, "the model could not be loaded again: " + why, {}, {}};
    sleeping = false;
    touch();
    std::fprintf(stderr, "loom: awake (loaded in %.0f ms)\n",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stderr);
  }

  // /health, GET /props, /models and /metrics neither wake the engine nor count as activity.
  static bool exempt_from_waking(const http::Request& req) {
    const std::string& p = req.decoded_path;
    if (req.method == "OPTIONS") return true;
    if (p == "/health" || p == "/v1/health" || p == "/metrics" || p == "/models" || p == "/v1/models") return true;
    return p == "/props" && req.method != "POST";
  }
  std::unique_ptr<http::Server> http;
  int64_t created = unix_now();

  // ---- generic plumbing ----
  bool authorized(const http::Request& req) const { return api_key_ok(o, req); }

  // --verbose: each request as it arrives (method, target, connection, the body's first 2 KiB).
  static void log_request(const http::Request& req, const std::shared_ptr<http::Response>& res) {
    const std::string body = req.body.substr(0, 2048);
    std::fprintf(stderr, "loom: request %llu: %s %s, %zu bytes%s%s\n", (unsigned long long)res->connection_id(),
                 req.method.c_str(), req.target.c_str(), req.body.size(), body.empty() ? "" : ": ", body.c_str());
    std::fflush(stderr);
  }

  void send_error(http::Response& res, const HttpError& e) {
    http::Headers h;
    for (const auto& kv : e.headers) h.emplace_back(kv.first, kv.second);
    if (e.status == 401) h.emplace_back("WWW-Authenticate", "Bearer");
    res.send(e.status, "application/json", error_json(e.status, e.message, e.type), h);
  }

  void send_json(http::Response& res, const json& j, int status = 200) { res.send(status, "application/json", dump(j)); }

  void handle(http::Request&& req, std::shared_ptr<http::Response> res) {
    if (o.verbose) log_request(req, res);
    // Anthropic's endpoints answer errors in Anthropic's shape.
    const bool anthropic = req.decoded_path.rfind("/v1/messages", 0) == 0;
    auto fail = [&](const HttpError& e) {
      if (!anthropic) return send_error(*res, e);
      http::Headers h;
      for (const auto& kv : e.headers) h.emplace_back(kv.first, kv.second);
      res->send(e.status, "application/json", dump(loom::api::anthropic_error(e.status, e.message)), h);
    };
    try {
      const bool exempt = exempt_from_waking(req);
      for (;;) {
        std::shared_lock<std::shared_mutex> l(engine_mu);
        if (sleeping && !exempt && ready.load()) {
          l.unlock();
          wake();
          continue;
        }
        if (!exempt) touch();
        route(req, res);
        break;
      }
    } catch (const HttpError& e) {
      fail(e);
    } catch (const loom::api::ApiError& e) {
      fail({e.status, e.message, e.type, {}});
    } catch (const std::exception& e) {
      fail({500, std::string("internal error: ") + e.what(), {}, {}});
    }
  }

  void cors(const http::Request& req, http::Response& res) const { apply_cors(o, req, res); }

  void route(http::Request& req, const std::shared_ptr<http::Response>& res) {
    const std::string& path = req.decoded_path;
    const std::string& m = req.method;
    // CORS on every reply, errors included; a preflight is answered before authorization
    // (browsers send no credentials with it), as llama-server does.
    cors(req, *res);
    if (m == "OPTIONS") return answer_preflight(o, req, *res);
    if (path == "/health" || path == "/v1/health") {
      if (!ready) throw HttpError{503, "Loading model", "unavailable_error", {{"Retry-After", "1"}}};
      send_json(*res, {{"status", "ok"}});
      return;
    }
    if (!authorized(req)) throw HttpError{401, "Invalid API Key", "authentication_error", {}};
    if (!ready) throw HttpError{503, "Loading model", "unavailable_error", {{"Retry-After", "1"}}};
    const bool get = m == "GET" || m == "HEAD", post = m == "POST";
    auto need = [&](bool ok) {
      if (!ok) throw HttpError{405, "method " + m + " is not allowed on " + path, "invalid_request_error", {}};
    };
    if (path == "/v1/chat/completions" || path == "/chat/completions") return need(post), chat_completions(req, res);
    if (path == "/v1/completions") return need(post), completions(req, res);
    if (path == "/completion" || path == "/completions") return need(post), native_completion(req, res, false);
    if (path == "/infill") return need(post), native_completion(req, res, true);
    if (path == "/v1/messages") return need(post), messages(req, res);
    if (path == "/v1/messages/count_tokens") return need(post), count_tokens(req, *res);
    if (path == "/v1/responses" || path == "/responses") return need(post), responses(req, res);
    if (path == "/v1/responses/input_tokens" || path == "/responses/input_tokens") {
      need(post);
      send_json(*res, loom::api::responses_input_tokens_response(
                          chat_prompt_tokens(loom::api::responses_to_chat(parse_body(req.body)))));
      return;
    }
    if (path == "/v1/chat/completions/input_tokens" || path == "/chat/completions/input_tokens") {
      // The prompt a chat completion with this body would get, in the Responses API's answer shape
      // (as llama-server).
      need(post);
      send_json(*res, loom::api::responses_input_tokens_response(chat_prompt_tokens(parse_body(req.body))));
      return;
    }
    if (path == "/v1/chat/completions/control") return need(post), control(req, *res);
    if (path == "/v1/embeddings") return need(post), embeddings(req, res);
    if (path == "/embedding" || path == "/embeddings") return need(post), native_embeddings(req, res);
    if (path == "/v1/rerank" || path == "/rerank" || path == "/v1/reranking" || path == "/reranking")
      return need(post), rerank(req, res);
    if (path == "/v1/models" || path == "/models") return need(get), models(*res);
    if (path == "/tokenize") return need(post), tokenize(req, *res);
    if (path == "/detokenize") return need(post), detokenize(req, *res);
    if (path == "/apply-template") return need(post), apply_template(req, *res);
    if (path == "/metrics") return need(get), metrics(*res);
    if (path == "/props") {
      if (post)
        throw HttpError{501,
                        "This server does not support changing global properties. Start it with `--props`",
                        "not_supported_error",
                        {}};
      return need(get), props(*res);
    }
    if (path == "/lora-adapters") return need(get || post), lora_adapters(req, *res);
    if (path == "/slots") return need(get), slots(req, *res);
    if (path.rfind("/slots/", 0) == 0) return need(post), slot_action(req, *res, path.substr(7));
    throw HttpError{404, "no endpoint " + path, "not_found_error", {}};
  }

  // ---- /v1/chat/completions and /v1/completions ----
  void chat_completions(http::Request& req, const std::shared_ptr<http::Response>& res) {
    GenerationPlan plan = plan_chat(parse_body(req.body), o.n_predict);
    for (json& r : plan.requests) apply_chat_defaults(r);
    start_generation(res, std::move(plan));
  }

  // The server-wide request defaults (llama-server's sampling flags) under a generation request's
  // own fields; a default grammar or schema only where the request constrains nothing itself.
  void apply_request_defaults(json& r) const {
    if (!request_defaults.is_object()) return;
    auto has = [&](const char* k) { return r.contains(k) && !r[k].is_null(); };
    const bool constrained = has("grammar") || has("json_schema") || has("response_format") ||
                             (has("tools") && r["tools"].is_array() && !r["tools"].empty());
    for (const auto& [k, v] : request_defaults.items()) {
      if ((k == "grammar" || k == "json_schema") && constrained) continue;
      if (!has(k.c_str())) r[k] = v;
    }
  }

  // The server's defaults under a chat request's own fields: --chat-template-kwargs and
  // --reasoning on|off (enable_thinking) under its chat_template_kwargs, --reasoning-format under
  // its reasoning_format.
  void apply_chat_defaults(json& r) const {
    json kwargs = default_kwargs;
    if (r.contains("chat_template_kwargs") && r["chat_template_kwargs"].is_object()) {
      for (const auto& [k, v] : r["chat_template_kwargs"].items()) kwargs[k] = v;
    }
    if (!kwargs.empty() && (!r.contains("chat_template_kwargs") || r["chat_template_kwargs"].is_object() ||
                            r["chat_template_kwargs"].is_null())) {
      r["chat_template_kwargs"] = std::move(kwargs);
    }
    if ((!r.contains("reasoning_format") || r["reasoning_format"].is_null()) && o.reasoning_format != "auto") {
      r["reasoning_format"] = o.reasoning_format;
    }
    // --reasoning-budget, unless the request gives its own.
    auto given = [&](const char* k) {
      return r.contains(k) && !r[k].is_null() && !(r[k].is_number() && r[k].get<double>() == -1);
    };
    if (o.reasoning_budget >= 0 && !given("reasoning_budget_tokens") && !given("thinking_budget_tokens")) {
      r["reasoning_budget_tokens"] = o.reasoning_budget;
    }
  }

  void completions(http::Request& req, const std::shared_ptr<http::Response>& res) {
    start_generation(res, plan_completion(parse_body(req.body), o.n_predict));
  }

  // Per HTTP request: the choices' accumulated output and the streaming state. Events arrive on
  // the scheduler's thread; everything is under mu.
  struct Choice {
    std::string text;     // generated text so far
    size_t streamed = 0;  // bytes of text already sent as deltas
    json logprobs = json::array();
    json unsent_logprobs = json::array();  // streamed chat: of tokens that added no delta yet
    std::vector<int32_t> tokens;           // native: the generated ids
    std::string stop_word;                 // native: the stop string that ended it
    std::string finish;                    // OpenAI finish_reason
    json message;                          // chat: the assistant message (FINISH)
    int text_offset = 0;
  };
  // Which API a generation answers in.
  enum class Dialect { kOpenAI, kNative, kDialect };
  // A chat dialect of src/api (Anthropic's messages, OpenAI's responses): how its stream and its
  // answer are written from the neutral deltas and result.
  struct DialectWriter {
    std::function<std::vector<loom::api::SseEvent>()> begin;
    std::function<std::vector<loom::api::SseEvent>(const json&)> delta;
    std::function<std::vector<loom::api::SseEvent>(const loom::api::ChatResult&)> end;
    std::function<json(const loom::api::ChatResult&)> respond;
    std::function<json(int, const std::string&)> error;
  };
  struct GenState {
    std::mutex mu;
    bool chat = true, stream = false, include_usage = false, echo = false;
    bool open = false;                           // described and started (events before it wait in pending)
    std::vector<std::pair<int, Event>> pending;  // (prompt index, event)
    std::string id, model;
    int64_t created = 0;
    bool want_logprobs = false;
    std::vector<Choice> choices;  // n_prompts * n
    int n = 1;                    // choices per prompt
    std::vector<uint64_t> ids;    // one scheduler request per prompt
    int done_requests = 0, n_requests = 1;
    Totals totals;
    std::shared_ptr<http::Response> res;
    bool failed = false;
    std::vector<std::string> prompt_texts;  // echo; native: the "prompt" of each final object
    Dialect dialect = Dialect::kOpenAI;
    // Native (/completion, /infill): per prompt, its prompt tokens; the request body (for
    // generation_settings); return_tokens, post_sampling_probs; the seed drawn.
    std::vector<int64_t> prompt_n;
    json body;
    bool return_tokens = false, post_probs = false;
    uint64_t seed = 0;
    json finals = json::array();  // native, not streamed: each prompt's final object
    DialectWriter writer;         // kDialect
    std::shared_ptr<int> busy;    // App::busy_token: held until the last event
  };
  // The generations in flight by their response id (chatcmpl-..., cmpl-..., msg_..., resp_...),
  // for /v1/chat/completions/control; an entry expires with its GenState.
  std::mutex live_mu;
  std::unordered_map<std::string, std::weak_ptr<GenState>> live;

  void register_live(const std::shared_ptr<GenState>& st) {
    std::lock_guard<std::mutex> l(live_mu);
    if (live.size() >= 64) std::erase_if(live, [](const auto& kv) { return kv.second.expired(); });
    live[st->id] = st;
  }

  // ---- llama-server's slots ----
  // A query parameter's raw value ("" when absent).
  static std::string query_param(const http::Request& req, std::string_view name) {
    std::string_view q = req.query;
    while (!q.empty()) {
      const size_t amp = q.find('&');
      const std::string_view kv = q.substr(0, amp);
      const size_t eq = kv.find('=');
      if (kv.substr(0, eq) == name) {
        std::string out;
        if (eq == std::string_view::npos) return out;
        return http::percent_decode(kv.substr(eq + 1), &out) ? out : std::string();
      }
      if (amp == std::string_view::npos) break;
      q.remove_prefix(amp + 1);
    }
    return {};
  }

  // The request a slot runs (or ran last) as GET /slots shows it: its generation settings (JSON
  // text), by scheduler request id while it runs, then per slot.
  std::mutex slot_mu;
  std::unordered_map<uint64_t, std::string> request_settings;
  std::vector<std::string> slot_last_settings;
  std::vector<uint64_t> slot_last_request;

  void remember_settings(uint64_t rid, const json& settings) {
    std::lock_guard<std::mutex> l(slot_mu);
    request_settings[rid] = dump(settings);
  }

  // A request ended (its last event): its settings move to the slots it ran in.
  void forget_settings(uint64_t rid) {
    std::string settings;
    {
      std::lock_guard<std::mutex> l(slot_mu);
      auto it = request_settings.find(rid);
      if (it == request_settings.end()) return;
      settings = std::move(it->second);
      request_settings.erase(it);
    }
    auto text = api::Model::detail_json([&](char* b, size_t n) { return loom_scheduler_slots(sched->handle(), b, n); });
    if (!text) return;
    const json states = json::parse(*text, nullptr, false);
    if (!states.is_array()) return;
    std::lock_guard<std::mutex> l(slot_mu);
    slot_last_settings.resize(states.size());
    slot_last_request.resize(states.size(), 0);
    for (const json& s : states) {
      if (s.value("request_id", uint64_t(0)) != rid) continue;
      const size_t i = s.value("id", size_t(0));
      if (i < slot_last_settings.size()) {
        slot_last_settings[i] = settings;
        slot_last_request[i] = rid;
      }
    }
  }

  // GET /slots[?fail_on_no_slot=1]: each slot as llama-server shows it.
  void slots(http::Request& req, http::Response& res) {
    if (!o.slots_endpoint) {
      throw HttpError{
          501, "This server does not support slots endpoint. Start it with `--slots`", "not_supported_error", {}};
    }
    auto text = api::Model::detail_json([&](char* b, size_t n) { return loom_scheduler_slots(sched->handle(), b, n); });
    if (!text) throw http_error(text.status());
    const json states = json::parse(*text);
    const int n_ctx = sched->n_ctx() / std::max(1, o.slots);
    bool any_free = false;
    json out = json::array();
    std::lock_guard<std::mutex> l(slot_mu);
    slot_last_settings.resize(states.size());
    slot_last_request.resize(states.size(), 0);
    for (const json& s : states) {
      const size_t i = s.at("id").get<size_t>();
      const bool processing = s.at("is_processing").get<bool>();
      any_free = any_free || !processing;
      const uint64_t rid = s.at("request_id").get<uint64_t>();
      if (rid != 0) {
        auto it = request_settings.find(rid);
        if (it != request_settings.end()) {
          slot_last_settings[i] = it->second;
          slot_last_request[i] = rid;
        }
      }
      if (i >= slot_last_settings.size()) continue;
      json j = {{"id", i}, {"n_ctx", n_ctx}, {"speculative", !o.draft_model.empty()}, {"is_processing", processing}};
      if (slot_last_request[i] != 0) {
        j["id_task"] = slot_last_request[i];
        j["n_prompt_tokens"] = s.at("n_prompt");
        j["params"] = json::parse(slot_last_settings[i], nullptr, false);
        j["next_token"] = json::array({{{"has_next_token", processing},
                                        {"has_new_line", false},
                                        {"n_remain", processing ? s.at("n_remain") : json(-1)},
                                        {"n_decoded", s.at("n_decoded")}}});
      }
      j["n_cached"] = s.at("n_cached");
      out.push_back(std::move(j));
    }
    if (!query_param(req, "fail_on_no_slot").empty() && !any_free) {
      throw HttpError{503, "no slot available", "unavailable_error", {}};
    }
    send_json(res, out);
  }

  // POST /slots/{id}?action=save|restore|erase ({"filename"} in --slot-save-path for the first two).
  void slot_action(http::Request& req, http::Response& res, const std::string& id_text) {
    if (o.slot_save_path.empty()) {
      throw HttpError{
          501, "This server does not support slots action. Start it with `--slot-save-path`", "not_supported_error", {}};
    }
    int slot = -1;
    {
      char* end = nullptr;
      errno = 0;
      const long v = id_text.empty() ? -1 : std::strtol(id_text.c_str(), &end, 10);
      if (id_text.empty() || errno != 0 || *end != '\0' || v < 0 || v >= o.slots)
        throw HttpError{400, "Invalid slot ID", {}, {}};
      slot = int(v);
    }
    const std::string action = query_param(req, "action");
    if (action != "save" && action != "restore" && action != "erase") throw HttpError{400, "Invalid action", {}, {}};
    if (action == "erase") {
      int32_t n = 0;
      const int32_t rc = loom_scheduler_slot_erase(sched->handle(), slot, &n);
      if (rc != LOOM_OK) throw http_error(api::Status::last(rc));
      send_json(res, {{"id_slot", slot}, {"n_erased", n}});
      return;
    }
    const json body = parse_body(req.body);
    const json* fn = body.contains("filename") ? &body["filename"] : nullptr;
    if (!fn || !fn->is_string()) throw HttpError{400, "filename: required (a string)", {}, {}};
    const std::string filename = fn->get<std::string>();
    if (!valid_slot_filename(filename)) throw HttpError{400, "Invalid filename", {}, {}};
    const std::string path = (std::filesystem::path(o.slot_save_path) / filename).string();
    const auto t0 = std::chrono::steady_clock::now();
    auto ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
    int32_t n = 0;
    if (action == "save") {
      const int32_t rc = loom_scheduler_slot_save(sched->handle(), slot, path.c_str(), &n);
      if (rc != LOOM_OK) throw http_error(api::Status::last(rc));
      std::error_code ec;
      const auto bytes = std::filesystem::file_size(path, ec);
      send_json(res, {{"id_slot", slot},
                      {"filename", filename},
                      {"n_saved", n},
                      {"n_written", ec ? 0 : int64_t(bytes)},
                      {"timings", {{"save_ms", ms()}}}});
      return;
    }
    if (!std::filesystem::exists(path)) throw HttpError{404, "no slot file named " + filename, {}, {}};
    const int32_t rc = loom_scheduler_slot_restore(sched->handle(), slot, path.c_str(), &n);
    if (rc != LOOM_OK) throw http_error(api::Status::last(rc));
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    send_json(res, {{"id_slot", slot},
                    {"filename", filename},
                    {"n_restored", n},
                    {"n_read", ec ? 0 : int64_t(bytes)},
                    {"timings", {{"restore_ms", ms()}}}});
  }

  // A file name inside --slot-save-path: no path separators, not "." or "..", no control bytes,
  // not empty, at most 255 bytes (llama.cpp's fs_validate_filename is stricter about Unicode).
  static bool valid_slot_filename(const std::string& f) {
    if (f.empty() || f.size() > 255 || f == "." || f == "..") return false;
    for (unsigned char c : f) {
      if (c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == ':') return false;
    }
    return f.find("..") == std::string::npos && f.front() != ' ' && f.back() != ' ' && f.back() != '.';
  }

  // POST /v1/chat/completions/control {"id", "action": "reasoning_end"}: ends the reasoning block of
  // a running completion submitted with reasoning_control (llama-server's answer: {"success"} and
  // a "message" when it is false).
  void control(http::Request& req, http::Response& res) {
    const json body = parse_body(req.body);
    const Fields f(body);
    const std::string id = f.has("id") ? f.string("id") : std::string();
    const std::string action = f.has("action") ? f.string("action") : std::string();
    if (id.empty()) throw HttpError{400, "missing completion id", {}, {}};
    if (action != "reasoning_end") throw HttpError{400, "unknown control action", {}, {}};
    std::vector<uint64_t> ids;
    {
      std::lock_guard<std::mutex> l(live_mu);
      auto it = live.find(id);
      if (it != live.end()) {
        if (auto st = it->second.lock()) {
          std::lock_guard<std::mutex> sl(st->mu);
          if (!st->failed) ids = st->ids;
        }
      }
    }
    int32_t rc = LOOM_ERR_NOT_FOUND;
    for (uint64_t rid : ids) {
      const int32_t r = loom_scheduler_end_reasoning(sched->handle(), rid);
      if (r == LOOM_OK || rc == LOOM_ERR_NOT_FOUND) rc = r;
    }
    json out = {{"success", rc == LOOM_OK}};
    if (rc == LOOM_ERR_UNSUPPORTED) out["message"] = "reasoning control not enabled for this completion";
    else if (rc != LOOM_OK) out["message"] = "no active completion for this id";
    send_json(res, out);
  }

  // The text of a completion prompt as sent: a string's own text, token ids detokenized.
  std::string prompt_text(const json& prompt) const {
    if (prompt.is_string()) return prompt.get<std::string>();
    std::vector<api::Token> ids;
    if (prompt.is_array()) {
      for (const json& t : prompt) {
        if (t.is_number_integer()) ids.push_back(t.get<api::Token>());
      }
    }
    auto t = model->detokenize(ids, false, false);
    return t ? *t : std::string();
  }

  // setup runs before the requests are submitted, described once they are (prompt sizes known).
  void start_generation(const std::shared_ptr<http::Response>& res, GenerationPlan plan,
                        const std::function<void(GenState&)>& setup = {},
                        const std::function<void(GenState&)>& described = {}) {
    auto st = std::make_shared<GenState>();
    st->busy = busy_token();
    if (setup) setup(*st);
    st->chat = plan.chat;
    st->stream = plan.stream;
    st->include_usage = plan.include_usage;
    st->echo = plan.echo;
    if (st->id.empty()) st->id = random_id(st->chat ? "chatcmpl-" : "cmpl-");
    st->model = alias;
    st->created = unix_now();
    st->res = res;
    for (json& r : plan.requests) apply_request_defaults(r);
    const int n_prompts = int(plan.requests.size());
    st->n_requests = n_prompts;
    // Submit every prompt; if one is refused, cancel the others and answer with its error. The
    // first one's description (choices, logprobs, its seed) shapes the answer.
    uint64_t seed = 0;
    for (int i = 0; i < n_prompts; ++i) {
      json& r = plan.requests[size_t(i)];
      if (i > 0) r["seed"] = prompt_seed(seed, i);
      api::GenerationInfo info;
      auto id = api::submit_generation(
          sched->handle(), r, plan.options, [this, st, i](const Event& e) { on_event(*st, i, e); }, &info);
      if (!id) {
        for (auto rid : st->ids) sched->cancel(rid);
        {
          std::lock_guard<std::mutex> l(st->mu);
          st->failed = true;
        }
        HttpError e = http_error(id.status());
        // Name the prompt a field error is about when there are several.
        if (n_prompts > 1 && e.message.rfind("prompt", 0) == 0) e.message.insert(6, "[" + std::to_string(i) + "]");
        throw e;
      }
      remember_settings(*id, loom::api::generation_settings(r, info.seed, plan.stream));
      std::lock_guard<std::mutex> l(st->mu);
      st->ids.push_back(*id);
      st->prompt_n.push_back(info.prompt_tokens);
      if (i == 0) {
        st->seed = info.seed;
        seed = info.seed;
        st->n = info.n;
        st->want_logprobs = info.logprobs;
        st->choices.resize(size_t(n_prompts * st->n));
      }
    }
    if (st->echo) {
      for (const json& p : plan.prompts) st->prompt_texts.push_back(prompt_text(p));
    }
    if (described) {
      std::lock_guard<std::mutex> l(st->mu);
      described(*st);
    }
    register_live(st);
    // A client that goes away cancels its requests at the next step.
    std::weak_ptr<GenState> weak = st;
    res->on_disconnect([this, weak] {
      if (auto s = weak.lock()) {
        std::vector<uint64_t> ids;
        {
          std::lock_guard<std::mutex> l(s->mu);
          ids = s->ids;
        }
        for (auto id : ids) sched->cancel(id);
      }
    });
    std::lock_guard<std::mutex> l(st->mu);
    if (st->stream) {
      res->begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
      if (st->dialect == Dialect::kDialect) {
        write_events(*st, st->writer.begin());
      } else if (st->dialect != Dialect::kOpenAI) {
      } else if (st->chat) {
        for (size_t c = 0; c < st->choices.size(); ++c) {
          sse(*st, chunk(*st, int(c), json{{"role", "assistant"}, {"content", nullptr}}, nullptr));
        }
      } else if (st->echo) {
        // echo: each choice's stream starts with its prompt's text, as OpenAI's legacy endpoint.
        for (size_t c = 0; c < st->choices.size(); ++c) {
          sse(*st, chunk(*st, int(c), json(st->prompt_texts[c / size_t(st->n)]), nullptr));
        }
      }
    }
    st->open = true;
    std::vector<std::pair<int, Event>> pending;
    pending.swap(st->pending);
    for (auto& [prompt, e] : pending) {
      e.choice += prompt * st->n;
      handle_event(*st, prompt, e);
    }
  }

  // ---- events -> responses ----
  // On the scheduler's thread: nothing may escape into the C API's callback.
  void on_event(GenState& st, int prompt, Event e) {
    if (e.kind == LOOM_EVENT_DONE || e.kind == LOOM_EVENT_ERROR) forget_settings(e.request_id);
    std::lock_guard<std::mutex> l(st.mu);
    if (!st.open) {
      st.pending.emplace_back(prompt, std::move(e));
      return;
    }
    e.choice += prompt * st.n;
    try {
      handle_event(st, prompt, e);
    } catch (const std::exception& ex) {
      fail_response(st, std::string("internal error: ") + ex.what());
    }
  }

  // Ends a response that cannot go on (a malformed event would be a bug): the client gets a 500 or
  // a final error event, the requests are cancelled.
  void fail_response(GenState& st, const std::string& why) {
    if (st.failed) return;
    st.failed = true;
    for (auto id : st.ids) sched->cancel(id);
    if (st.stream) {
      sse(st, json::parse(error_json(500, why)));
      if (st.dialect == Dialect::kOpenAI) st.res->write("data: [DONE]\n\n");  // only OpenAI's streams end so
      st.res->end();
    } else {
      send_error(*st.res, {500, why, {}, {}});
    }
  }

  void sse(GenState& st, const json& j) { st.res->write("data: " + dump(j) + "\n\n"); }

  json chunk(GenState& st, int choice, json delta, json finish) {
    json c = {{"index", choice}};
    if (st.chat) {
      c["delta"] = std::move(delta);
    } else {
      c["text"] = delta.is_string() ? delta : json("");
    }
    c["logprobs"] = nullptr;
    c["finish_reason"] = std::move(finish);
    return {{"id", st.id},
            {"object", st.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", st.created},
            {"model", st.model},
            {"system_fingerprint", build_info()},
            {"choices", json::array({c})}};
  }

  // A TOKEN event's logprobs in the endpoint's shape.
  static json logprob_entry(const GenState& st, const Event& e) {
    const std::string& piece = e.chosen.piece;
    const double logprob = e.chosen.logprob;
    if (st.chat) {
      json top = json::array();
      for (const api::TokenLogprob& t : e.top) {
        top.push_back({{"token", t.piece}, {"logprob", t.logprob}, {"bytes", bytes_of(t.piece)}, {"id", t.id}});
      }
      return {{"id", e.token}, {"token", piece}, {"logprob", logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}};
    }
    json top = json::object();
    for (const api::TokenLogprob& t : e.top) top[t.piece] = t.logprob;
    return {{"id", e.token}, {"token", piece}, {"logprob", logprob}, {"top_logprobs", top}};
  }

  // Completions' legacy logprobs object from per-token entries.
  static json legacy_logprobs(const json& entries, int text_offset) {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    int off = text_offset;
    for (const auto& e : entries) {
      tokens.push_back(e["token"]);
      lps.push_back(e["logprob"]);
      tops.push_back(e["top_logprobs"]);
      offs.push_back(off);
      off += int(e["token"].get<std::string>().size());
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
  }

  // A streamed chat choice: one chunk per delta the engine parsed out of the text (the event's
  // deltas, src/api/chat_stream.h), the pending logprobs on the last of them.
  void send_deltas(GenState& st, int choice, Choice& c, const Event& e) {
    const std::vector<json>& deltas = e.deltas;
    for (size_t i = 0; i < deltas.size(); ++i) {
      json j = chunk(st, choice, deltas[i], nullptr);
      if (i + 1 == deltas.size() && !c.unsent_logprobs.empty()) {
        j["choices"][0]["logprobs"] = json{{"content", std::move(c.unsent_logprobs)}};
        c.unsent_logprobs = json::array();
      }
      sse(st, j);
    }
  }

  // ---- llama-server's native /completion and /infill ----
  void native_completion(http::Request& req, const std::shared_ptr<http::Response>& res, bool infill) {
    const json body = parse_body(req.body);
    const Tokenizer tok = tokenizer();
    NativePlan np =
        infill ? plan_infill(body, o.n_predict, tok, sched->n_ctx(), o.n_batch) : plan_native(body, o.n_predict, tok);
    GenerationPlan plan;
    plan.chat = false;
    plan.stream = np.stream;
    plan.requests = std::move(np.requests);
    plan.options = np.options;
    plan.prompts.resize(plan.requests.size());
    start_generation(res, std::move(plan), [&](GenState& st) {
      st.dialect = Dialect::kNative;
      st.body = body;
      apply_request_defaults(st.body);  // generation_settings shows what the request ran with
      st.return_tokens = np.return_tokens;
      st.post_probs = np.post_sampling_probs;
      st.prompt_texts = np.prompt_texts;
    });
  }

  Tokenizer tokenizer() const {
    Tokenizer t;
    const api::Model* m = &*model;
    t.tokenize = [m](const std::string& text, bool add_special) {
      auto ids = m->tokenize(text, add_special, false);
      if (!ids) throw http_error(ids.status());
      return std::vector<int32_t>(ids->begin(), ids->end());
    };
    t.detokenize = [m](const std::vector<int32_t>& ids) {
      auto s = m->detokenize(std::vector<api::Token>(ids.begin(), ids.end()), false, false);
      return s ? *s : std::string();
    };
    loom_model* h = model->handle();
    auto id = [](loom_token v) { return v == LOOM_TOKEN_NULL ? int32_t(-1) : int32_t(v); };
    t.bos = id(loom_token_bos(h));
    t.add_bos = loom_add_bos_token(h);
    t.fim_pre = id(loom_token_fim_pre(h));
    t.fim_suf = id(loom_token_fim_suf(h));
    t.fim_mid = id(loom_token_fim_mid(h));
    t.fim_rep = id(loom_token_fim_rep(h));
    t.fim_sep = id(loom_token_fim_sep(h));
    return t;
  }

  // A TOKEN event's logprobs as llama-server's completion_probabilities entry.
  static json native_probs(const Event& e, bool post) {
    std::vector<loom::api::TokenProb> top;
    top.reserve(e.top.size());
    for (const api::TokenLogprob& t : e.top) top.push_back({t.id, t.piece, t.logprob});
    return loom::api::token_probs({e.token, e.chosen.piece, e.chosen.logprob}, top, post);
  }

  void native_event(GenState& st, int prompt, const Event& e) {
    if (prompt < 0 || prompt >= int(st.choices.size())) return;
    Choice& c = st.choices[size_t(prompt)];
    const int64_t prompt_n = st.prompt_n[size_t(prompt)];
    switch (e.kind) {
      case LOOM_EVENT_TOKEN: {
        c.text += e.text;
        c.tokens.push_back(e.token);
        json probs = nullptr;
        if (st.want_logprobs && e.has_logprob) {
          json p = native_probs(e, st.post_probs);
          c.logprobs.push_back(p);
          probs = json::array({std::move(p)});
        }
        if (!st.stream) return;
        std::vector<int32_t> toks;
        if (st.return_tokens) toks.push_back(e.token);
        sse(st, loom::api::native_partial(prompt, e.text, toks, -1, int64_t(c.tokens.size()), prompt_n, probs));
        return;
      }
      case LOOM_EVENT_FINISH: {
        c.finish = e.reason;
        c.stop_word = e.stop_word;
        if (!e.text.empty()) {
          c.text += e.text;
          if (st.stream)
            sse(st, loom::api::native_partial(prompt, e.text, {}, -1, int64_t(c.tokens.size()), prompt_n, nullptr));
        }
        return;
      }
      case LOOM_EVENT_DONE: {
        st.totals.add(e);
        loom::api::NativeFinal f;
        f.index = prompt;
        f.content = st.stream ? std::string() : c.text;
        if (st.return_tokens) f.tokens = c.tokens;
        f.model = st.model;
        f.tokens_predicted = int64_t(c.tokens.size());
        f.tokens_evaluated = prompt_n;
        f.tokens_cached = prompt_n + int64_t(c.tokens.size());
        f.generation_settings = loom::api::generation_settings(st.body, st.seed, st.stream);
        f.prompt = prompt < int(st.prompt_texts.size()) ? st.prompt_texts[size_t(prompt)] : std::string();
        f.truncated = false;
        f.stop_type = loom::api::native_stop_type(c.finish, c.stop_word);
        f.stopping_word = c.stop_word;
        Totals one;
        one.add(e);
        f.timings = one.timings();
        if (!st.stream && st.want_logprobs) f.completion_probabilities = c.logprobs;
        const bool cancelled = c.finish == "cancelled";
        if (st.stream) {
          if (cancelled) {
            fail_response(st, "the request was cancelled (the server is shutting down)");
            return;
          }
          sse(st, loom::api::native_final(f));
        } else {
          st.finals.push_back(loom::api::native_final(f));
        }
        if (++st.done_requests < st.n_requests) return;
        if (st.stream) {
          st.res->end();
          return;
        }
        const bool any_cancelled =
            std::any_of(st.choices.begin(), st.choices.end(), [](const Choice& x) { return x.finish == "cancelled"; });
        if (any_cancelled) {
          send_error(*st.res, {503, "the request was cancelled (the server is shutting down)", {}, {{"Retry-After", "1"}}});
          return;
        }
        if (st.n_requests == 1) {
          send_json(*st.res, st.finals[0]);
        } else {
          json all = std::move(st.finals);
          std::sort(all.begin(), all.end(),
                    [](const json& a, const json& b) { return a.at("index").get<int>() < b.at("index").get<int>(); });
          send_json(*st.res, all);
        }
        return;
      }
      default: return;
    }
  }

  // ---- chat dialects of src/api: Anthropic's /v1/messages, OpenAI's /v1/responses ----
  void write_events(GenState& st, const std::vector<loom::api::SseEvent>& events) {
    for (const auto& ev : events) {
      std::string out;
      if (!ev.event.empty()) out += "event: " + ev.event + "\n";
      out += "data: " + dump(ev.data) + "\n\n";
      st.res->write(out);
    }
  }

  // A dialect body -> the OpenAI chat body it means (translate), then the usual chat path.
  void dialect_chat(const std::shared_ptr<http::Response>& res, json chat_body, const char* id_prefix,
                    const std::function<DialectWriter(const std::string& id, int64_t prompt_tokens)>& make) {
    GenerationPlan plan = plan_chat(chat_body, o.n_predict);
    for (json& r : plan.requests) {
      r.erase("n");  // one reply
      apply_chat_defaults(r);
    }
    const std::string id = random_id(id_prefix);
    start_generation(
        res, std::move(plan),
        [&](GenState& st) {
          st.dialect = Dialect::kDialect;
          st.id = id;
        },
        [&](GenState& st) { st.writer = make(st.id, st.prompt_n.empty() ? 0 : st.prompt_n[0]); });
  }

  loom::api::ChatResult chat_result(const GenState& st, const Choice& c) const {
    loom::api::ChatResult r;
    r.id = st.id;
    r.model = st.model;
    r.created = st.created;
    r.message = c.message;
    r.finish_reason = c.finish;
    r.stop_word = c.stop_word;
    r.prompt_tokens = st.totals.prompt_tokens;
    r.completion_tokens = st.totals.completion_tokens;
    r.cached_tokens = st.totals.cached_tokens;
    return r;
  }

  void dialect_event(GenState& st, const Event& e) {
    if (st.choices.empty()) return;
    Choice& c = st.choices[0];
    switch (e.kind) {
      case LOOM_EVENT_TOKEN: {
        if (e.choice != 0) return;
        c.text += e.text;
        if (!st.stream) return;
        for (const json& delta : e.deltas) write_events(st, st.writer.delta(delta));
        return;
      }
      case LOOM_EVENT_FINISH: {
        if (e.choice != 0) return;
        c.text += e.text;
        c.finish = e.reason;
        c.stop_word = e.stop_word;
        c.message = assistant_message(e);
        if (c.message.contains("tool_calls")) c.finish = "tool_calls";
        if (st.stream && c.finish != "cancelled") {
          for (const json& delta : e.deltas) write_events(st, st.writer.delta(delta));
        }
        return;
      }
      case LOOM_EVENT_DONE: {
        st.totals.add(e);
        if (++st.done_requests < st.n_requests) return;
        if (st.failed) return;
        const bool cancelled = c.finish == "cancelled";
        const std::string why = "the request was cancelled (the server is shutting down)";
        if (st.stream) {
          if (cancelled) {
            write_events(st, {{"error", st.writer.error(503, why)}});
          } else {
            write_events(st, st.writer.end(chat_result(st, c)));
          }
          st.res->end();
          return;
        }
        if (cancelled) {
          st.res->send(503, "application/json", dump(st.writer.error(503, why)), {{"Retry-After", "1"}});
          return;
        }
        send_json(*st.res, st.writer.respond(chat_result(st, c)));
        return;
      }
      case LOOM_EVENT_ERROR: {
        if (st.failed) return;
        st.failed = true;
        for (auto id : st.ids) sched->cancel(id);
        const HttpError he = server::http_error(e.token, e.text);
        if (st.stream) {
          write_events(st, {{"error", st.writer.error(he.status, he.message)}});
          st.res->end();
        } else {
          st.res->send(he.status, "application/json", dump(st.writer.error(he.status, he.message)));
        }
        return;
      }
      default: return;
    }
  }

  void messages(http::Request& req, const std::shared_ptr<http::Response>& res) {
    const json chat = loom::api::anthropic_to_chat(parse_body(req.body));
    dialect_chat(res, chat, "msg_", [this](const std::string& id, int64_t prompt_tokens) {
      auto stream = std::make_shared<loom::api::AnthropicStream>(id, alias, prompt_tokens);
      DialectWriter w;
      w.begin = [stream] { return stream->begin(); };
      w.delta = [stream](const json& d) { return stream->delta(d); };
      w.end = [stream](const loom::api::ChatResult& r) { return stream->end(r); };
      w.respond = [](const loom::api::ChatResult& r) { return loom::api::anthropic_response(r); };
      w.error = [](int status, const std::string& m) { return loom::api::anthropic_error(status, m); };
      return w;
    });
  }

  void responses(http::Request& req, const std::shared_ptr<http::Response>& res) {
    const json chat = loom::api::responses_to_chat(parse_body(req.body));
    const int64_t created = unix_now();
    dialect_chat(res, chat, "resp_", [this, created](const std::string& id, int64_t) {
      auto stream = std::make_shared<loom::api::ResponsesStream>(id, alias, created);
      DialectWriter w;
      w.begin = [stream] { return stream->begin(); };
      w.delta = [stream](const json& d) { return stream->delta(d); };
      w.end = [stream](const loom::api::ChatResult& r) { return stream->end(r); };
      w.respond = [](const loom::api::ChatResult& r) { return loom::api::responses_response(r); };
      w.error = [](int status, const std::string& m) { return json::parse(error_json(status, m)); };
      return w;
    });
  }

  // The prompt tokens a chat body renders to (what its generation would be given).
  int64_t chat_prompt_tokens(const json& chat) {
    json r = plan_apply_template(chat);
    apply_chat_defaults(r);
    if (!template_override.empty()) r["chat_template"] = template_override;
    auto f = model->chat_format(dump(r));
    if (!f) throw http_error(f.status());
    auto ids = model->tokenize(json::parse(*f).at("prompt").get<std::string>(), true, true);
    if (!ids) throw http_error(ids.status());
    return int64_t(ids->size());
  }

  // /v1/messages/count_tokens: the prompt a /v1/messages request with this body would get.
  void count_tokens(http::Request& req, http::Response& res) {
    send_json(res, loom::api::anthropic_count_tokens_response(
                       chat_prompt_tokens(loom::api::anthropic_to_chat(parse_body(req.body)))));
  }

  void handle_event(GenState& st, int prompt, const Event& e) {
    if (st.dialect == Dialect::kDialect) return dialect_event(st, e);
    if (st.dialect == Dialect::kNative && e.kind != LOOM_EVENT_ERROR) return native_event(st, prompt, e);
    switch (e.kind) {
      case LOOM_EVENT_TOKEN: {
        if (e.choice < 0 || e.choice >= int(st.choices.size())) return;
        Choice& c = st.choices[size_t(e.choice)];
        c.text += e.text;
        json lp = nullptr;
        if (st.want_logprobs && e.has_logprob) {
          lp = logprob_entry(st, e);
          c.logprobs.push_back(lp);
        }
        if (!st.stream) return;
        if (st.chat) {
          // The engine's deltas (reasoning, content, complete tool calls; text that may become a
          // call held back); a token's logprobs ride on the next chunk.
          if (!lp.is_null()) c.unsent_logprobs.push_back(lp);
          send_deltas(st, e.choice, c, e);
          return;
        }
        const size_t upto = c.text.size();
        if (upto <= c.streamed && lp.is_null()) return;
        const std::string delta = c.text.substr(c.streamed, upto - c.streamed);
        c.streamed = upto;
        json j = chunk(st, e.choice, st.chat ? json{{"content", delta}} : json(delta), nullptr);
        if (!lp.is_null()) {
          j["choices"][0]["logprobs"] =
              st.chat ? json{{"content", json::array({lp})}} : legacy_logprobs(json::array({lp}), c.text_offset);
        }
        if (!st.chat) c.text_offset += int(delta.size());
        sse(st, j);
        return;
      }
      case LOOM_EVENT_FINISH: {
        if (e.choice < 0 || e.choice >= int(st.choices.size())) return;
        Choice& c = st.choices[size_t(e.choice)];
        c.text += e.text;
        c.finish = e.reason;
        if (st.chat) {
          c.message = assistant_message(e);
          if (c.message.contains("tool_calls")) c.finish = "tool_calls";
        }
        if (!st.stream) return;
        if (c.finish == "cancelled") return;  // the final error event says why
        if (st.chat) {
          send_deltas(st, e.choice, c, e);
        } else if (c.text.size() > c.streamed) {
          const std::string rest = c.text.substr(c.streamed);
          sse(st, chunk(st, e.choice, st.chat ? json{{"content", rest}} : json(rest), nullptr));
        }
        c.streamed = c.text.size();
        sse(st, chunk(st, e.choice, st.chat ? json::object() : json(""), c.finish));
        return;
      }
      case LOOM_EVENT_DONE: {
        st.totals.add(e);
        if (++st.done_requests < st.n_requests) return;
        finish_response(st);
        return;
      }
      case LOOM_EVENT_ERROR: {
        if (st.stream) {
          fail_response(st, e.text);
        } else if (!st.failed) {
          st.failed = true;
          for (auto id : st.ids) sched->cancel(id);
          send_error(*st.res, server::http_error(e.token, e.text));
        }
        return;
      }
      default: return;  // a kind added after this server was written
    }
  }

  void finish_response(GenState& st) {
    if (st.failed) return;
    const bool cancelled =
        std::any_of(st.choices.begin(), st.choices.end(), [](const Choice& c) { return c.finish == "cancelled"; });
    if (st.stream) {
      if (cancelled) {
        sse(st, json::parse(error_json(503, "the request was cancelled (the server is shutting down)")));
      } else if (st.include_usage) {
        json u = chunk(st, 0, json::object(), nullptr);
        u["choices"] = json::array();
        u["usage"] = st.totals.usage();
        u["timings"] = st.totals.timings();
        sse(st, u);
      }
      st.res->write("data: [DONE]\n\n");
      st.res->end();
      return;
    }
    if (cancelled) {
      send_error(*st.res, {503, "the request was cancelled (the server is shutting down)", {}, {{"Retry-After", "1"}}});
      return;
    }
    json choices = json::array();
    for (size_t i = 0; i < st.choices.size(); ++i) {
      const Choice& c = st.choices[i];
      json ch = {{"index", int(i)}};
      if (st.chat) {
        ch["message"] = c.message;
        ch["logprobs"] = st.want_logprobs ? json{{"content", c.logprobs}} : json(nullptr);
      } else {
        const int prompt_i = int(i) / st.n;
        ch["text"] = st.echo ? st.prompt_texts[size_t(prompt_i)] + c.text : c.text;
        ch["logprobs"] = st.want_logprobs ? legacy_logprobs(c.logprobs, 0) : json(nullptr);
      }
      ch["finish_reason"] = c.finish;
      choices.push_back(std::move(ch));
    }
    const json j = {{"id", st.id},
                    {"object", st.chat ? "chat.completion" : "text_completion"},
                    {"created", st.created},
                    {"model", st.model},
                    {"system_fingerprint", build_info()},
                    {"choices", choices},
                    {"usage", st.totals.usage()},
                    {"timings", st.totals.timings()}};
    send_json(*st.res, j);
  }

  // ---- embeddings and rerank ----
  // Runs an embedding request and calls done(result) on the scheduler's thread.
  void run_embed(const json& request, const std::shared_ptr<http::Response>& res,
                 std::function<void(api::Scheduler::Embeddings&)> done) {
    auto id = api::submit_embedding(sched->handle(), request,
                                    [this, res, done, token = busy_token()](api::Expected<api::Scheduler::Embeddings> r) {
                                      if (!r) {
                                        send_error(*res, http_error(r.status()));
                                        return;
                                      }
                                      try {
                                        done(*r);
                                      } catch (const std::exception& e) {
                                        send_error(*res, {500, std::string("internal error: ") + e.what(), {}, {}});
                                      }
                                    });
    if (!id) throw http_error(id.status());
  }

  void embeddings(http::Request& req, const std::shared_ptr<http::Response>& res) {
    if (!o.embedding) throw HttpError{501, "this server was not started with --embedding", "not_supported_error", {}};
    const EmbeddingsPlan p = plan_embeddings(parse_body(req.body));
    const bool base64_out = p.base64, normalize = p.normalize;
    const std::string model_name = alias;
    run_embed(p.request, res, [this, res, base64_out, normalize, model_name](api::Scheduler::Embeddings& r) {
      json data = json::array();
      for (int32_t i = 0; i < r.n_inputs; ++i) {
        float* e = r.data.data() + size_t(i) * size_t(r.n_dim);
        if (normalize) {
          double ss = 0;
          for (int32_t k = 0; k < r.n_dim; ++k) ss += double(e[k]) * e[k];
          const float inv = ss > 0 ? float(1.0 / std::sqrt(ss)) : 0.0f;
          for (int32_t k = 0; k < r.n_dim; ++k) e[k] *= inv;
        }
        json item = {{"object", "embedding"}, {"index", int(i)}};
        if (base64_out) item["embedding"] = base64(e, size_t(r.n_dim) * sizeof(float));
        else item["embedding"] = std::vector<float>(e, e + r.n_dim);
        data.push_back(std::move(item));
      }
      send_json(*res, {{"object", "list"},
                       {"data", data},
                       {"model", model_name},
                       {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}}});
    });
  }

  // llama-server's native /embedding and /embeddings: [{"index", "embedding": [[...]]}] (one pooled
  // row per input), normalized as embd_normalize says (-1 none, 0 max-abs to int16, 1 taxicab,
  // 2 euclidean (the default), p > 2 the p-norm).
  void native_embeddings(http::Request& req, const std::shared_ptr<http::Response>& res) {
    if (!o.embedding) throw HttpError{501, "this server was not started with --embedding", "not_supported_error", {}};
    const json body = parse_body(req.body);
    const EmbeddingsPlan p = plan_embeddings(body);
    const Fields f(body);
    const int64_t mode = f.integer_in("embd_normalize", 2, -1, 1000);
    run_embed(p.request, res, [this, res, mode](api::Scheduler::Embeddings& r) {
      json out = json::array();
      for (int32_t i = 0; i < r.n_inputs; ++i) {
        float* e = r.data.data() + size_t(i) * size_t(r.n_dim);
        double norm = 0;
        if (mode == 0) {
          for (int32_t k = 0; k < r.n_dim; ++k) norm = std::max(norm, double(std::fabs(e[k])));
          norm /= 32760.0;
        } else if (mode == 2) {
          for (int32_t k = 0; k < r.n_dim; ++k) norm += double(e[k]) * e[k];
          norm = std::sqrt(norm);
        } else if (mode > 0) {
          for (int32_t k = 0; k < r.n_dim; ++k) norm += std::pow(std::fabs(double(e[k])), double(mode));
          norm = std::pow(norm, 1.0 / double(mode));
        }
        const float inv = mode >= 0 && norm > 0 ? float(1.0 / norm) : 1.0f;
        std::vector<float> v(e, e + r.n_dim);
        for (float& x : v) x *= inv;
        out.push_back({{"index", int(i)}, {"embedding", json::array({std::move(v)})}});
      }
      send_json(*res, out);
    });
  }

  void rerank(http::Request& req, const std::shared_ptr<http::Response>& res) {
    if (!o.embedding || !rank_pooling()) {
      throw HttpError{501,
                      "reranking needs a reranker model (rank pooling) started with --embedding --pooling rank",
                      "not_supported_error",
                      {}};
    }
    RerankPlan p = plan_rerank(parse_body(req.body));
    const int top_n = p.top_n;
    const bool return_docs = p.return_documents;
    std::vector<std::string> texts = std::move(p.texts);
    const std::string model_name = alias;
    run_embed(p.request, res, [this, res, texts, top_n, return_docs, model_name](api::Scheduler::Embeddings& r) {
      std::vector<std::pair<float, int>> scores;
      for (int32_t i = 0; i < r.n_inputs; ++i) {
        scores.emplace_back(r.n_dim > 0 ? r.data[size_t(i) * size_t(r.n_dim)] : 0.0f, int(i));
      }
      std::stable_sort(scores.begin(), scores.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      json results = json::array();
      for (int k = 0; k < top_n && k < int(scores.size()); ++k) {
        json item = {{"index", scores[size_t(k)].second}, {"relevance_score", scores[size_t(k)].first}};
        if (return_docs) item["document"] = {{"text", texts[size_t(scores[size_t(k)].second)]}};
        results.push_back(std::move(item));
      }
      send_json(*res, {{"model", model_name},
                       {"object", "list"},
                       {"results", results},
                       {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}}});
    });
  }

  bool rank_pooling() const {
    return o.pooling == "rank" || (o.pooling.empty() && model->pooling_type() == LOOM_POOLING_RANK);
  }

  // ---- small endpoints ----
  void models(http::Response& res) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(o.model, ec);
    const json meta = {{"n_vocab", model_meta["n_vocab"]},         {"n_ctx", model_meta["n_ctx"]},
                       {"n_ctx_train", model_meta["n_ctx_train"]}, {"n_embd", model_meta["n_embd"]},
                       {"n_params", model_meta["n_params"]},       {"size", ec ? uintmax_t(0) : size}};
    // llama-server's shape: OpenAI's list in "data" (with aliases and tags), ollama's in "models".
    json aliases = json::array();
    for (const std::string& a : o.aliases) {
      if (a != alias) aliases.push_back(a);
    }
    const json ollama = {{"name", alias},
                         {"model", alias},
                         {"modified_at", ""},
                         {"size", ""},
                         {"digest", ""},
                         {"type", "model"},
                         {"description", ""},
                         {"tags", o.tags.empty() ? json::array({""}) : json(o.tags)},
                         {"capabilities", json::array({o.embedding ? "embedding" : "completion"})},
                         {"parameters", ""},
                         {"details",
                          {{"parent_model", ""},
                           {"format", "gguf"},
                           {"family", ""},
                           {"families", json::array({""})},
                           {"parameter_size", ""},
                           {"quantization_level", ""}}}};
    send_json(res, {{"models", json::array({ollama})},
                    {"object", "list"},
                    {"data", json::array({{{"id", alias},
                                           {"aliases", aliases},
                                           {"tags", o.tags},
                                           {"object", "model"},
                                           {"created", created},
                                           {"owned_by", "loom"},
                                           {"meta", meta}}})}});
  }

  void tokenize(http::Request& req, http::Response& res) {
    const TokenizePlan p = plan_tokenize(parse_body(req.body));
    auto ids = model->tokenize(p.content, p.add_special, p.parse_special);
    if (!ids) throw http_error(ids.status());
    json toks = json::array();
    for (api::Token id : *ids) {
      if (p.with_pieces) toks.push_back({{"id", id}, {"piece", model->piece(id, true)}});
      else toks.push_back(id);
    }
    send_json(res, {{"tokens", toks}});
  }

  void detokenize(http::Request& req, http::Response& res) {
    const std::vector<int32_t> ids = plan_detokenize(parse_body(req.body), model->n_vocab());
    auto text = model->detokenize(ids, false, true);
    if (!text) throw http_error(text.status());
    send_json(res, {{"content", *text}});
  }

  void apply_template(http::Request& req, http::Response& res) {
    json r = plan_apply_template(parse_body(req.body));
    apply_chat_defaults(r);
    if (!template_override.empty()) r["chat_template"] = template_override;
    auto f = model->chat_format(dump(r));
    if (!f) throw http_error(f.status());
    send_json(res, {{"prompt", json::parse(*f).at("prompt")}});
  }

  // llama-server's /props: default_generation_settings {params, n_ctx}, slots, the model, the
  // template and its special tokens, build info; and loom's n_ctx (all slots) and embedding.
  void props(http::Response& res) {
    const json params = loom::api::generation_settings(json::object(), 4294967295u, false);
    send_json(res, {{"default_generation_settings", {{"params", params}, {"n_ctx", model_meta["n_ctx"]}}},
                    {"total_slots", o.slots},
                    {"model_alias", alias},
                    {"model_path", o.model},
                    {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
                    {"endpoint_slots", o.slots_endpoint},
                    {"endpoint_props", false},
                    {"endpoint_metrics", true},
                    {"chat_template", template_source},
                    {"bos_token", model_meta["bos"]},
                    {"eos_token", model_meta["eos"]},
                    {"build_info", build_info()},
                    {"is_sleeping", sleeping},
                    {"n_ctx", model_meta["n_ctx_total"]},
                    {"embedding", o.embedding}});
  }

  // llama.cpp's build-info form, "b<build>-<commit>": loom's version as a build number
  // (0.3.0 -> b300) and its git commit.
  static std::string build_info() {
    static const std::string s = [] {
      const std::string v = loom_version();  // "MAJOR.MINOR.PATCH (git COMMIT)"
      int major = 0, minor = 0, patch = 0;
      std::sscanf(v.c_str(), "%d.%d.%d", &major, &minor, &patch);
      std::string commit = "unknown";
      const size_t g = v.find("(git ");
      if (g != std::string::npos) commit = v.substr(g + 5, v.find(')', g) - g - 5);
      return "b" + std::to_string(major * 10000 + minor * 100 + patch) + "-" + commit;
    }();
    return s;
  }

  void metrics(http::Response& res) {
    std::string text = last_stats;
    if (!sleeping) {
      auto s = sched->stats();
      if (!s) throw http_error(s.status());
      text = *s;
    }
    res.send(200, "text/plain; version=0.0.4", render_metrics(json::parse(text), http->stats()));
  }
};

// Signals are taken synchronously by the thread that starts the server (sigtimedwait); every
// thread started after this inherits the blocked mask.
sigset_t block_stop_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return sigs;
}

// Where the server listens, as people type it: the first TCP address first (what scripts and
// tests read), then the others.
void announce_listening(const std::vector<std::string>& hosts, int port) {
  std::vector<std::string> where;
  for (const std::string& h : hosts) {
    const bool sock = h.size() > 5 && h.compare(h.size() - 5, 5, ".sock") == 0;
    where.push_back(sock ? "unix:" + h
                         : "http://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(port));
  }
  std::stable_partition(where.begin(), where.end(), [](const std::string& w) { return w.rfind("http://", 0) == 0; });
  for (const std::string& w : where) std::fprintf(stderr, "loom: listening on %s\n", w.c_str());
  std::fflush(stderr);
}

// Why a start failed, and the exit code it fails with (1 runtime, 2 usage).
struct StartError {
  int code = 0;
  std::string why;
};

// The configuration that does not depend on the model: template override, template kwargs,
// request defaults, reasoning, LoRA paths; an error for flags that cannot go together.
std::optional<StartError> configure(App& a, const ServeOptions& opts) {
  if (!opts.chat_template_file.empty()) {
    std::ifstream f(opts.chat_template_file, std::ios::binary);
    if (!f) return StartError{1, "cannot open " + opts.chat_template_file};
    std::stringstream ss;
    ss << f.rdbuf();
    a.template_override = ss.str();
  } else if (!opts.chat_template.empty()) {
    a.template_override = opts.chat_template;  // a built-in name or Jinja source
  }
  if (!opts.chat_template_kwargs.empty()) {
    try {
      a.default_kwargs = json::parse(opts.chat_template_kwargs);
    } catch (const std::exception& e) {
      return StartError{2, std::string("--chat-template-kwargs: not JSON: ") + e.what()};
    }
    if (!a.default_kwargs.is_object()) return StartError{2, "--chat-template-kwargs: expected a JSON object"};
  }
  if (!opts.request_defaults.empty()) {
    a.request_defaults = json::parse(opts.request_defaults, nullptr, false);
    if (!a.request_defaults.is_object()) return StartError{2, "the request defaults are not a JSON object"};
  }
  if (opts.reasoning == "on" || opts.reasoning == "off") a.default_kwargs["enable_thinking"] = opts.reasoning == "on";
  else if (opts.reasoning != "auto")
    return StartError{2, "--reasoning: expected on, off or auto, not '" + opts.reasoning + "'"};
  if (opts.embedding && !opts.draft_model.empty())
    return StartError{2, "--draft-model needs a generating server, not --embedding"};
  if (opts.embedding && opts.pooling == "none") {
    return StartError{2, "--pooling none is not served (the endpoints return one vector per input)"};
  }
  for (const auto& [path, scale] : opts.loras) a.loras.push_back({nullptr, path, scale});
  return std::nullopt;
}

// The scheduler's parameters for the loaded model (the strings point into opts and a).
api::SchedulerParams scheduler_params(const App& a, const ServeOptions& opts) {
  api::SchedulerParams sp;
  loom_context_params& cp = sp.p.context;
  const int64_t train = a.model->n_ctx_train();
  cp.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : int32_t(std::min<int64_t>(train, 4096));
  cp.n_batch = opts.n_batch;
  cp.n_ubatch = std::min(opts.n_ubatch, opts.n_batch);
  cp.n_threads = opts.threads;
  cp.n_threads_batch = opts.threads_batch;
  cp.type_k = opts.type_k;
  cp.type_v = opts.type_v;
  cp.embeddings = opts.embedding;
  if (opts.embedding) {
    cp.pooling_type = a.model->pooling_type() != LOOM_POOLING_UNSPECIFIED ? LOOM_POOLING_UNSPECIFIED : LOOM_POOLING_MEAN;
    static const std::pair<const char*, int32_t> kPoolings[] = {
        {"mean", LOOM_POOLING_MEAN}, {"cls", LOOM_POOLING_CLS}, {"last", LOOM_POOLING_LAST}, {"rank", LOOM_POOLING_RANK}};
    for (const auto& [name, value] : kPoolings) {
      if (opts.pooling == name) cp.pooling_type = value;
    }
    cp.n_ubatch = cp.n_batch = std::max(cp.n_ubatch, std::min(cp.n_ctx, cp.n_batch));
  }
  sp.p.n_slots = opts.slots;
  sp.p.max_queue = opts.max_queue;
  sp.p.step_tokens = opts.step_tokens;
  sp.p.context_shift = opts.context_shift;
  sp.p.prefix_cache = opts.prefix_cache;
  sp.p.cache_dir = opts.cache_dir.empty() ? nullptr : opts.cache_dir.c_str();
  sp.p.chat_template = a.template_override.empty() ? nullptr : a.template_override.c_str();
  return sp;
}

// The scheduler over the loaded model (and the draft model, with --draft-model).
api::Expected<api::Scheduler> create_scheduler(const App& a, const ServeOptions& opts) {
  const api::SchedulerParams sp = scheduler_params(a, opts);
  const json memory_options = {
      {"ctx_checkpoints", opts.ctx_checkpoints}, {"cache_ram_mib", opts.cache_ram_mib}, {"swa_full", opts.swa_full}};
  if (opts.draft_model.empty()) return api::Scheduler::create_ext(*a.model, sp, nullptr, dump(memory_options));
  auto dm = api::Model::load(opts.draft_model);
  if (!dm) return api::Status(dm.status().code(), "--draft-model " + opts.draft_model + ": " + dm.status().message());
  json options = memory_options;
  options.update({{"draft_max", opts.draft_max},
                  {"draft_min", opts.draft_min},
                  {"p_min", opts.draft_p_min},
                  {"n_ctx", opts.draft_n_ctx}});
  return api::Scheduler::create_ext(*a.model, sp, &*dm, dump(options));
}

// The server-wide request defaults are checked once (a --samplers typo, a grammar that does not
// parse stops the start rather than failing every request): a request with them is described,
// with no room for the description, so that nothing is queued. "" or why they fail.
std::string check_request_defaults(const App& a) {
  json probe = a.request_defaults;
  probe["prompt"] = "x";
  char small[1];
  const int32_t st = loom_scheduler_submit_ext(
      a.sched->handle(), dump(probe).c_str(), nullptr, [](const loom_event*, void*) {}, nullptr, nullptr, small,
      sizeof small);
  if (st != LOOM_OK && st != LOOM_ERR_RESOURCE_EXHAUSTED)
    return std::string("a server-wide sampling default: ") + loom_last_error();
  return std::string();
}

// The engine: the model, its scheduler and the LoRA adapters (with their current scales). Loaded
// at the start (while /health answers 503) and again when a sleeping server gets a request.
// Returns "" or why it failed (nothing stays loaded then); the exit code of a failure in *code.
std::string load_engine(App& a, const ServeOptions& opts, int* code) {
  auto fail = [&](int c, std::string why) {
    *code = c;
    a.sched.reset();
    for (App::Lora& l : a.loras) {
      loom_lora_adapter_free(l.handle);
      l.handle = nullptr;
    }
    a.model.reset();
    return why;
  };
  auto model = api::Model::load(opts.model);
  if (!model) return fail(1, model.status().message());
  a.model = std::move(*model);
  // The template is checked now, so that a broken one stops the start rather than every chat.
  auto info = api::Model::detail_json([&](char* b, size_t n) {
    return loom_chat_template_info(a.model->handle(), a.template_override.empty() ? nullptr : a.template_override.c_str(), b,
                                   n);
  });
  if (!info) return fail(1, "chat template: " + info.status().message());
  a.template_source = json::parse(*info).value("template", std::string());
  auto sched = create_scheduler(a, opts);
  if (!sched) return fail(1, sched.status().message());
  a.sched = std::move(*sched);
  if (!a.request_defaults.empty() && !opts.embedding) {
    if (std::string why = check_request_defaults(a); !why.empty()) return fail(2, why);
  }
  // LoRA adapters: loaded and given to the scheduler's context; kept (with their scales) for
  // /lora-adapters, which changes the scales.
  for (App::Lora& l : a.loras) {
    l.handle = loom_lora_adapter_load(a.model->handle(), l.path.c_str());
    if (!l.handle) return fail(1, "--lora " + l.path + ": " + loom_last_error());
  }
  if (!a.loras.empty() && !a.apply_loras()) return fail(1, std::string("--lora: ") + loom_last_error());
  a.remember_meta();
  return std::string();
}

// Waits for SIGINT / SIGTERM (or *stop), letting an idle server sleep meanwhile.
void wait_for_stop(App& a, const sigset_t& sigs, std::atomic<bool>* stop) {
  for (;;) {
    timespec ts{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (stop && stop->load()) break;
    a.maybe_sleep();
  }
}

// Running requests finish (5 s grace), then the listener and the engine close.
void shut_down(App& a) {
  std::fprintf(stderr, "loom: stopping: finishing running requests (5 s grace)\n");
  a.http->stop_accepting();
  {
    std::unique_lock<std::shared_mutex> l(a.engine_mu);
    if (a.sched) a.sched->shutdown(5000);  // running streams finish or get their final event
  }
  a.http->drain(std::chrono::seconds(2));
  a.http->shutdown();
  a.sched.reset();
  std::fprintf(stderr, "loom: stopped\n");
}

}  // namespace

int run_server(const ServeOptions& opts, std::atomic<bool>* stop) {
  const sigset_t sigs = block_stop_signals();
  auto app = std::make_unique<App>();
  app->o = opts;
  App& a = *app;
  for (const auto& k : opts.api_keys) {
    if (k.empty()) {
      std::fprintf(stderr, "loom: an API key is empty\n");
      return 2;
    }
  }
  a.alias = !opts.alias.empty() ? opts.alias : std::filesystem::path(opts.model).filename().string();

  const http::ServerOptions ho = http_options(opts);
  const std::vector<std::string> hosts = listen_hosts(opts.host);  // addresses and UNIX socket paths (*.sock)
  auto srv = http::Server::listen(hosts, uint16_t(opts.port), ho);
  if (!srv) {
    std::fprintf(stderr, "loom: %s\n", srv.status().message().c_str());
    return 1;
  }
  a.http = std::move(*srv);
  a.http->start(
      [&a](http::Request&& req, std::shared_ptr<http::Response> res) { a.handle(std::move(req), std::move(res)); });
  announce_listening(hosts, a.http->port());

  // A failure after the listener is up: say why, close it, exit with its code.
  auto quit = [&a](const StartError& e) {
    std::fprintf(stderr, "loom: %s\n", e.why.c_str());
    a.http->shutdown();
    return e.code;
  };
  if (std::optional<StartError> e = configure(a, opts)) return quit(*e);
  a.load_engine = [&a, &opts]() {
    int code = 1;
    return load_engine(a, opts, &code);
  };
  int load_code = 1;
  if (const std::string why = load_engine(a, opts, &load_code); !why.empty()) return quit({load_code, why});
  a.touch();
  a.ready = true;
  std::fprintf(stderr, "loom: ready: %s, %d slots, %d KV cells%s%s\n", a.alias.c_str(), opts.slots, a.sched->n_ctx(),
               opts.embedding ? ", embeddings" : "",
               opts.draft_model.empty() ? "" : (", draft model " + opts.draft_model).c_str());
  std::fflush(stderr);
  wait_for_stop(a, sigs, stop);
  shut_down(a);
  return 0;
}

}  // namespace loom::server
