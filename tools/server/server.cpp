// `loom serve` over one model (server.h): the start (configuration, the engine: model, scheduler,
// LoRA adapters), the wait for a stop and the orderly stop, sleeping on idle and waking, and the
// routing of each request to its handler. server_app.h names the files of the rest.
#include "server.h"

#include <malloc.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "api/anthropic.h"
#include "api/responses.h"
#include "server_app.h"

namespace loom::server {

namespace server_detail {

std::shared_ptr<int> App::busy_token() {
  busy.fetch_add(1);
  touch();
  return std::shared_ptr<int>(new int(0), [this](int* p) {
    delete p;
    touch();
    busy.fetch_sub(1);
  });
}

void App::remember_meta() {
  loom_model* h = model->handle();
  auto piece = [&](loom_token t) { return t == LOOM_TOKEN_NULL ? std::string() : model->piece(t, true); };
  model_meta = {{"n_vocab", model->n_vocab()},         {"n_ctx", sched->n_ctx() / std::max(1, o.slots)},
                {"n_ctx_train", model->n_ctx_train()}, {"n_embd", model->n_embd()},
                {"n_params", model->n_params()},       {"n_ctx_total", sched->n_ctx()},
                {"bos", piece(loom_token_bos(h))},     {"eos", piece(loom_token_eos(h))}};
}

void App::unload_engine() {
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

void App::maybe_sleep() {
  if (o.sleep_idle_seconds < 0 || !ready.load()) return;
  if (busy.load() > 0 || now_ms() - last_active_ms.load() < int64_t(o.sleep_idle_seconds) * 1000) return;
  std::unique_lock<std::shared_mutex> l(engine_mu, std::try_to_lock);
  if (!l.owns_lock() || sleeping || busy.load() > 0) return;
  unload_engine();
}

void App::wake() {
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

bool App::exempt_from_waking(const http::Request& req) {
  const std::string& p = req.decoded_path;
  if (req.method == "OPTIONS") return true;
  if (p == "/health" || p == "/v1/health" || p == "/metrics" || p == "/models" || p == "/v1/models") return true;
  return p == "/props" && req.method != "POST";
}

void App::log_request(const http::Request& req, const std::shared_ptr<http::Response>& res) {
  const std::string body = req.body.substr(0, 2048);
  std::fprintf(stderr, "loom: request %llu: %s %s, %zu bytes%s%s\n", (unsigned long long)res->connection_id(),
               req.method.c_str(), req.target.c_str(), req.body.size(), body.empty() ? "" : ": ", body.c_str());
  std::fflush(stderr);
}

void App::send_error(http::Response& res, const HttpError& e) {
  http::Headers h;
  for (const auto& kv : e.headers) h.emplace_back(kv.first, kv.second);
  if (e.status == 401) h.emplace_back("WWW-Authenticate", "Bearer");
  res.send(e.status, "application/json", error_json(e.status, e.message, e.type), h);
}

void App::handle(http::Request&& req, std::shared_ptr<http::Response> res) {
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

void App::route(http::Request& req, const std::shared_ptr<http::Response>& res) {
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

}  // namespace server_detail

namespace {

using namespace server_detail;

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
