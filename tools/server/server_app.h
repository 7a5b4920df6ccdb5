// `loom serve`'s single-model server (server.h), the internals its files share (not a public
// header): App, the application (one model, one scheduler, the HTTP front), and the state of one
// generation. server.cpp: start, stop, sleep on idle, routing; server_generation.cpp: requests
// into scheduler requests (chat, completions, native, the chat dialects); server_events.cpp: the
// scheduler's events into responses; server_endpoints.cpp: embeddings, rerank, slots, LoRA, and
// the small endpoints.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/api_types.h"
#include "api/native.h"
#include "frontend.h"
#include "http_server.h"
#include "json_fields.h"
#include "loom/loom.hpp"
#include "loom/loom_serve.hpp"
#include "request.h"
#include "server.h"

namespace loom::server::server_detail {

namespace api = loom::api;
using Event = api::GenerationEvent;

inline int64_t unix_now() { return int64_t(std::time(nullptr)); }

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
inline HttpError http_error(const api::Status& st) { return server::http_error(st.code(), st.message()); }

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
  bool apply_loras();

  json lora_list() const;

  // llama-server's /lora-adapters: GET lists them; POST [{"id", "scale"}] sets the scales (an
  // adapter not named gets 0, as llama-server), applied once the running requests are done.
  void lora_adapters(http::Request& req, http::Response& res);
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
  std::shared_ptr<int> busy_token();

  // What the exempt endpoints show of the loaded engine.
  void remember_meta();

  // Frees the scheduler, the adapters and the model (engine_mu held unique, nothing busy).
  void unload_engine();

  // Called every few hundred ms by run_server's loop: sleep when idle long enough.
  void maybe_sleep();

  // Loads the engine again for a request that needs it (HttpError 500 when it cannot).
  void wake();

  // /health, GET /props, /models and /metrics neither wake the engine nor count as activity.
  static bool exempt_from_waking(const http::Request& req);
  std::unique_ptr<http::Server> http;
  int64_t created = unix_now();

  // ---- generic plumbing ----
  bool authorized(const http::Request& req) const { return api_key_ok(o, req); }

  // --verbose: each request as it arrives (method, target, connection, the body's first 2 KiB).
  static void log_request(const http::Request& req, const std::shared_ptr<http::Response>& res);

  void send_error(http::Response& res, const HttpError& e);

  void send_json(http::Response& res, const json& j, int status = 200) { res.send(status, "application/json", dump(j)); }

  void handle(http::Request&& req, std::shared_ptr<http::Response> res);

  void cors(const http::Request& req, http::Response& res) const { apply_cors(o, req, res); }

  void route(http::Request& req, const std::shared_ptr<http::Response>& res);

  // ---- /v1/chat/completions and /v1/completions ----
  void chat_completions(http::Request& req, const std::shared_ptr<http::Response>& res);

  // The server-wide request defaults (llama-server's sampling flags) under a generation request's
  // own fields; a default grammar or schema only where the request constrains nothing itself.
  void apply_request_defaults(json& r) const;

  // The server's defaults under a chat request's own fields: --chat-template-kwargs and
  // --reasoning on|off (enable_thinking) under its chat_template_kwargs, --reasoning-format under
  // its reasoning_format.
  void apply_chat_defaults(json& r) const;

  void completions(http::Request& req, const std::shared_ptr<http::Response>& res);

  // Per HTTP request: the choices' accumulated output and the streaming state. Events arrive on
  // the scheduler's thread; everything is under mu.
  struct Choice {
    std::string text;     // generated text so far (grown by accumulate_text only)
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

  void register_live(const std::shared_ptr<GenState>& st);

  // ---- llama-server's slots ----
  // A query parameter's raw value ("" when absent).
  static std::string query_param(const http::Request& req, std::string_view name);

  // The request a slot runs (or ran last) as GET /slots shows it: its generation settings (JSON
  // text), by scheduler request id while it runs, then per slot.
  std::mutex slot_mu;
  std::unordered_map<uint64_t, std::string> request_settings;
  std::vector<std::string> slot_last_settings;
  std::vector<uint64_t> slot_last_request;

  void remember_settings(uint64_t rid, const json& settings);

  // A request ended (its last event): its settings move to the slots it ran in.
  void forget_settings(uint64_t rid);

  // GET /slots[?fail_on_no_slot=1]: each slot as llama-server shows it.
  void slots(http::Request& req, http::Response& res);

  // POST /slots/{id}?action=save|restore|erase ({"filename"} in --slot-save-path for the first two).
  void slot_action(http::Request& req, http::Response& res, const std::string& id_text);

  // A file name inside --slot-save-path: no path separators, not "." or "..", no control bytes,
  // not empty, at most 255 bytes (llama.cpp's fs_validate_filename is stricter about Unicode).
  static bool valid_slot_filename(const std::string& f);

  // POST /v1/chat/completions/control {"id", "action": "reasoning_end"}: ends the reasoning block of
  // a running completion submitted with reasoning_control (llama-server's answer: {"success"} and
  // a "message" when it is false).
  void control(http::Request& req, http::Response& res);

  // The text of a completion prompt as sent: a string's own text, token ids detokenized.
  std::string prompt_text(const json& prompt) const;

  // setup runs before the requests are submitted, described once they are (prompt sizes known).
  void start_generation(const std::shared_ptr<http::Response>& res, GenerationPlan plan,
                        const std::function<void(GenState&)>& setup = {},
                        const std::function<void(GenState&)>& described = {});
  // Its steps: every prompt submitted (if one is refused, the others are cancelled and its error
  // thrown; the first one's description shapes the answer), the requests cancelled when the client
  // goes, the response opened (a stream's first chunks) and the events that came first handled.
  void submit_prompts(const std::shared_ptr<GenState>& st, GenerationPlan& plan);
  void cancel_on_disconnect(const std::shared_ptr<GenState>& st);
  void open_response(GenState& st);

  // ---- events -> responses ----
  // On the scheduler's thread: nothing may escape into the C API's callback.
  void on_event(GenState& st, int prompt, Event e);

  // Ends a response that cannot go on (a malformed event would be a bug): the client gets a 500 or
  // a final error event, the requests are cancelled.
  void fail_response(GenState& st, const std::string& why);

  void sse(GenState& st, const json& j) { st.res->write("data: " + dump(j) + "\n\n"); }

  json chunk(GenState& st, int choice, json delta, json finish);

  // A TOKEN event's logprobs in the endpoint's shape.
  static json logprob_entry(const GenState& st, const Event& e);

  // Completions' legacy logprobs object from per-token entries.
  static json legacy_logprobs(const json& entries, int text_offset);

  // A streamed chat choice: one chunk per delta the engine parsed out of the text (the event's
  // deltas, src/api/chat_stream.h), the pending logprobs on the last of them.
  void send_deltas(GenState& st, int choice, Choice& c, const Event& e);

  // ---- llama-server's native /completion and /infill ----
  void native_completion(http::Request& req, const std::shared_ptr<http::Response>& res, bool infill);

  Tokenizer tokenizer() const;

  // A TOKEN event's logprobs as llama-server's completion_probabilities entry.
  static json native_probs(const Event& e, bool post);

  void native_event(GenState& st, int prompt, const Event& e);
  // A prompt's DONE event: its final object (sent, or kept for the answer of all prompts), and the
  // answer once every prompt is done.
  void native_done(GenState& st, int prompt, const Choice& c, const Event& e);
  static loom::api::NativeFinal native_final_of(const GenState& st, int prompt, const Choice& c, const Event& done);

  // ---- chat dialects of src/api: Anthropic's /v1/messages, OpenAI's /v1/responses ----
  void write_events(GenState& st, const std::vector<loom::api::SseEvent>& events);

  // A dialect body -> the OpenAI chat body it means (translate), then the usual chat path.
  void dialect_chat(const std::shared_ptr<http::Response>& res, json chat_body, const char* id_prefix,
                    const std::function<DialectWriter(const std::string& id, int64_t prompt_tokens)>& make);

  loom::api::ChatResult chat_result(const GenState& st, const Choice& c) const;

  void dialect_event(GenState& st, const Event& e);

  void messages(http::Request& req, const std::shared_ptr<http::Response>& res);

  void responses(http::Request& req, const std::shared_ptr<http::Response>& res);

  // The prompt tokens a chat body renders to (what its generation would be given).
  int64_t chat_prompt_tokens(const json& chat);

  // /v1/messages/count_tokens: the prompt a /v1/messages request with this body would get.
  void count_tokens(http::Request& req, http::Response& res);

  // The choice whose text a TOKEN or FINISH event extends, by the dialect's numbering: its
  // prompt's for the native endpoints, the one reply of a chat dialect, the event's own choice for
  // OpenAI's; null when the event names none (it is then ignored).
  static Choice* text_choice(GenState& st, int prompt, const Event& e);
  // The one place a choice's generated text (Choice::text) grows: a TOKEN's or FINISH's text, added
  // before the dialect's writer sees the event.
  static void accumulate_text(GenState& st, int prompt, const Event& e);
  void handle_event(GenState& st, int prompt, const Event& e);

  void finish_response(GenState& st);

  // ---- embeddings and rerank ----
  // Runs an embedding request and calls done(result) on the scheduler's thread.
  void run_embed(const json& request, const std::shared_ptr<http::Response>& res,
                 std::function<void(api::Scheduler::Embeddings&)> done);

  void embeddings(http::Request& req, const std::shared_ptr<http::Response>& res);

  // llama-server's native /embedding and /embeddings: [{"index", "embedding": [[...]]}] (one pooled
  // row per input), normalized as embd_normalize says (-1 none, 0 max-abs to int16, 1 taxicab,
  // 2 euclidean (the default), p > 2 the p-norm).
  void native_embeddings(http::Request& req, const std::shared_ptr<http::Response>& res);

  void rerank(http::Request& req, const std::shared_ptr<http::Response>& res);

  bool rank_pooling() const;

  // ---- small endpoints ----
  void models(http::Response& res);

  void tokenize(http::Request& req, http::Response& res);

  void detokenize(http::Request& req, http::Response& res);

  void apply_template(http::Request& req, http::Response& res);

  // llama-server's /props: default_generation_settings {params, n_ctx}, slots, the model, the
  // template and its special tokens, build info; and loom's n_ctx (all slots) and embedding.
  void props(http::Response& res);

  // llama.cpp's build-info form, "b<build>-<commit>": loom's version as a build number
  // (0.3.0 -> b300) and its git commit.
  static std::string build_info();

  void metrics(http::Response& res);
};

}  // namespace loom::server::server_detail
