// `loom serve`: requests into scheduler requests (server_app.h). OpenAI's chat and completions,
// llama-server's /completion and /infill, the chat dialects of src/api (Anthropic's messages,
// OpenAI's responses) over the chat path, the defaults the server puts under a request's fields,
// and the start of a generation: its requests submitted, its response opened.
#include <random>

#include "api/anthropic.h"
#include "api/native.h"
#include "api/responses.h"
#include "server_app.h"

namespace loom::server::server_detail {

namespace {

std::string random_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> l(mu);
  static const char* digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += digits[rng() % 62];
  return s;
}

}  // namespace

void App::chat_completions(http::Request& req, const std::shared_ptr<http::Response>& res) {
  GenerationPlan plan = plan_chat(parse_body(req.body), o.n_predict);
  for (json& r : plan.requests) apply_chat_defaults(r);
  start_generation(res, std::move(plan));
}

void App::apply_request_defaults(json& r) const {
  if (!request_defaults.is_object()) return;
  auto has = [&](const char* k) { return r.contains(k) && !r[k].is_null(); };
  const bool constrained = has("grammar") || has("json_schema") || has("response_format") ||
                           (has("tools") && r["tools"].is_array() && !r["tools"].empty());
  for (const auto& [k, v] : request_defaults.items()) {
    if ((k == "grammar" || k == "json_schema") && constrained) continue;
    if (!has(k.c_str())) r[k] = v;
  }
}

void App::apply_chat_defaults(json& r) const {
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

void App::completions(http::Request& req, const std::shared_ptr<http::Response>& res) {
  start_generation(res, plan_completion(parse_body(req.body), o.n_predict));
}

void App::register_live(const std::shared_ptr<GenState>& st) {
  std::lock_guard<std::mutex> l(live_mu);
  if (live.size() >= 64) std::erase_if(live, [](const auto& kv) { return kv.second.expired(); });
  live[st->id] = st;
}

void App::control(http::Request& req, http::Response& res) {
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

std::string App::prompt_text(const json& prompt) const {
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

void App::start_generation(const std::shared_ptr<http::Response>& res, GenerationPlan plan,
                           const std::function<void(GenState&)>& setup, const std::function<void(GenState&)>& described) {
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
  st->n_requests = int(plan.requests.size());
  submit_prompts(st, plan);
  if (st->echo) {
    for (const json& p : plan.prompts) st->prompt_texts.push_back(prompt_text(p));
  }
  if (described) {
    std::lock_guard<std::mutex> l(st->mu);
    described(*st);
  }
  register_live(st);
  cancel_on_disconnect(st);
  open_response(*st);
}

void App::submit_prompts(const std::shared_ptr<GenState>& st, GenerationPlan& plan) {
  const int n_prompts = int(plan.requests.size());
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
}

void App::cancel_on_disconnect(const std::shared_ptr<GenState>& st) {
  // A client that goes away cancels its requests at the next step.
  std::weak_ptr<GenState> weak = st;
  st->res->on_disconnect([this, weak] {
    if (auto s = weak.lock()) {
      std::vector<uint64_t> ids;
      {
        std::lock_guard<std::mutex> l(s->mu);
        ids = s->ids;
      }
      for (auto id : ids) sched->cancel(id);
    }
  });
}

void App::open_response(GenState& st) {
  std::lock_guard<std::mutex> l(st.mu);
  if (st.stream) {
    st.res->begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    if (st.dialect == Dialect::kDialect) {
      write_events(st, st.writer.begin());
    } else if (st.dialect != Dialect::kOpenAI) {
    } else if (st.chat) {
      for (size_t c = 0; c < st.choices.size(); ++c) {
        sse(st, chunk(st, int(c), json{{"role", "assistant"}, {"content", nullptr}}, nullptr));
      }
    } else if (st.echo) {
      // echo: each choice's stream starts with its prompt's text, as OpenAI's legacy endpoint.
      for (size_t c = 0; c < st.choices.size(); ++c) {
        sse(st, chunk(st, int(c), json(st.prompt_texts[c / size_t(st.n)]), nullptr));
      }
    }
  }
  st.open = true;
  std::vector<std::pair<int, Event>> pending;
  pending.swap(st.pending);
  for (auto& [prompt, e] : pending) {
    e.choice += prompt * st.n;
    handle_event(st, prompt, e);
  }
}

void App::native_completion(http::Request& req, const std::shared_ptr<http::Response>& res, bool infill) {
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

Tokenizer App::tokenizer() const {
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

void App::dialect_chat(const std::shared_ptr<http::Response>& res, json chat_body, const char* id_prefix,
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

void App::messages(http::Request& req, const std::shared_ptr<http::Response>& res) {
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

void App::responses(http::Request& req, const std::shared_ptr<http::Response>& res) {
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

}  // namespace loom::server::server_detail
