#include "server.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "base/log.h"
#include "base/timer.h"
#include "chat/chat_prompt.h"
#include "chat/chat_request.h"
#include "http_server.h"
#include "json_fields.h"
#include "metrics_text.h"
#include "request.h"
#include "model/adapters.h"
#include "sample/json_schema.h"
#include "serve/scheduler.h"

namespace loom::server {
namespace {

using serve::Event;
using serve::FinishReason;
using serve::GenerateRequest;

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

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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

json timings_json(const serve::Timings& t) {
  auto per = [](double ms, int n) { return n > 0 ? ms / n : 0.0; };
  auto rate = [](double ms, int n) { return ms > 0 ? 1000.0 * n / ms : 0.0; };
  return {{"cache_n", t.cache_n},
          {"prompt_n", t.prompt_n},
          {"prompt_ms", t.prompt_ms},
          {"prompt_per_token_ms", per(t.prompt_ms, t.prompt_n)},
          {"prompt_per_second", rate(t.prompt_ms, t.prompt_n)},
          {"predicted_n", t.predicted_n},
          {"predicted_ms", t.predicted_ms},
          {"predicted_per_token_ms", per(t.predicted_ms, t.predicted_n)},
          {"predicted_per_second", rate(t.predicted_ms, t.predicted_n)}};
}

json usage_json(const serve::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

// ---------------------------------------------------------------------------------------------
// The application: one model, one scheduler, the HTTP front.

struct App {
  ServeOptions o;
  std::shared_ptr<const Model> model;
  std::unique_ptr<serve::Scheduler> sched;
  std::optional<chat::ChatTemplate> tmpl;
  std::string alias;
  std::atomic<bool> ready{false};
  std::unique_ptr<http::Server> http;
  int64_t created = unix_now();
  std::atomic<uint64_t> request_counter{0};
  std::atomic<uint64_t> http_errors[6] = {};  // 400, 401, 404, 413, 503, 500

  // ---- generic plumbing ----
  bool authorized(const http::Request& req) const {
    if (o.api_keys.empty()) return true;
    std::string key;
    if (const std::string* h = req.header("authorization")) {
      std::string_view v = *h;
      if (v.size() > 7 && (v.substr(0, 7) == "Bearer " || v.substr(0, 7) == "bearer ")) key = std::string(v.substr(7));
    } else if (const std::string* x = req.header("x-api-key")) {
      key = *x;
    }
    // Constant-time comparison against each key.
    bool ok = false;
    for (const std::string& k : o.api_keys) {
      if (k.size() != key.size()) continue;
      unsigned char d = 0;
      for (size_t i = 0; i < k.size(); ++i) d |= uint8_t(k[i] ^ key[i]);
      ok |= d == 0;
    }
    return ok;
  }

  void send_error(http::Response& res, const HttpError& e) {
    http::Headers h;
    for (const auto& kv : e.headers) h.emplace_back(kv.first, kv.second);
    if (e.status == 401) h.emplace_back("WWW-Authenticate", "Bearer");
    res.send(e.status, "application/json", error_json(e.status, e.message, e.type), h);
  }

  void send_json(http::Response& res, const json& j, int status = 200) { res.send(status, "application/json", dump(j)); }

  void handle(http::Request&& req, std::shared_ptr<http::Response> res) {
    try {
      route(req, res);
    } catch (const HttpError& e) {
      send_error(*res, e);
    } catch (const serve::RequestError& e) {
      send_error(*res, http_error(e.status()));
    } catch (const std::exception& e) {
      send_error(*res, {500, std::string("internal error: ") + e.what(), {}, {}});
    }
  }

  void route(http::Request& req, const std::shared_ptr<http::Response>& res) {
    const std::string& path = req.decoded_path;
    const std::string& m = req.method;
    if (m == "OPTIONS") {
      res->send(204, "text/plain", "", {{"Allow", "GET, POST, OPTIONS"}});
      return;
    }
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
    if (path == "/v1/completions" || path == "/completions") return need(post), completions(req, res);
    if (path == "/v1/embeddings" || path == "/embeddings") return need(post), embeddings(req, res);
    if (path == "/v1/rerank" || path == "/rerank" || path == "/v1/reranking") return need(post), rerank(req, res);
    if (path == "/v1/models" || path == "/models") return need(get), models(*res);
    if (path == "/tokenize") return need(post), tokenize(req, *res);
    if (path == "/detokenize") return need(post), detokenize(req, *res);
    if (path == "/apply-template") return need(post), apply_template(req, *res);
    if (path == "/metrics") return need(get), metrics(*res);
    if (path == "/props") return need(get), props(*res);
    throw HttpError{404, "no endpoint " + path, "not_found_error", {}};
  }

  // ---- /v1/chat/completions and /v1/completions ----
  RequestEnv env() const { return {*model, *tmpl, o.n_predict}; }

  void chat_completions(http::Request& req, const std::shared_ptr<http::Response>& res) {
    const json body = parse_body(req.body);
    ParsedChat p = parse_chat_request(body, env(), request_counter.fetch_add(1));
    auto st = std::make_shared<GenState>();
    st->chat = true;
    st->format = p.format;
    st->parse_opts = p.parse_options;
    st->triggers = std::move(p.triggers);
    start_generation(req, res, Fields(body), std::move(p.gen), st, /*n_prompts=*/1, {});
  }

  void completions(http::Request& req, const std::shared_ptr<http::Response>& res) {
    const json body = parse_body(req.body);
    ParsedCompletion p = parse_completion_request(body, env());
    auto st = std::make_shared<GenState>();
    st->chat = false;
    st->echo = p.echo;
    st->prompt_texts = std::move(p.echo_texts);
    const int n_prompts = int(p.prompts.size());
    start_generation(req, res, Fields(body), std::move(p.gen), st, n_prompts, p.prompts);
  }

  // Per HTTP request: the choices' accumulated output and the streaming state. Events arrive on
  // the scheduler's loop thread; everything is under mu.
  struct Choice {
    std::string text;        // generated text so far
    size_t streamed = 0;     // bytes of text already sent as deltas
    bool held = false;       // a tool-call trigger appeared: the rest is parsed at the end
    std::vector<int32_t> tokens;
    json logprobs = json::array();
    std::string finish;      // OpenAI finish_reason
    bool finished = false;
    int text_offset = 0;
  };
  struct GenState {
    std::mutex mu;
    bool chat = true, stream = false, include_usage = false, echo = false;
    bool open = false;                     // stream started (events before it wait in pending)
    std::vector<Event> pending;
    std::string id, model;
    int64_t created = 0;
    chat::ToolCallFormat format = chat::ToolCallFormat::kNone;
    chat::ParseOptions parse_opts;
    std::vector<std::string> triggers;
    bool want_logprobs = false;
    std::vector<Choice> choices;           // n_prompts * n
    int n = 1;                             // choices per prompt
    std::vector<serve::RequestId> ids;     // one scheduler request per prompt
    int done_requests = 0, n_requests = 1;
    serve::Usage usage;
    serve::Timings timings;
    std::shared_ptr<http::Response> res;
    bool failed = false;
    std::vector<std::string> prompt_texts;  // echo
  };

  void start_generation(http::Request&, const std::shared_ptr<http::Response>& res, const Fields& f, GenerateRequest r,
                        const std::shared_ptr<GenState>& st, int n_prompts, const std::vector<std::vector<int32_t>>& prompts) {
    st->stream = f.boolean("stream", false);
    if (const json* so = f.get("stream_options")) {
      if (!so->is_object()) bad_request("stream_options: expected an object");
      st->include_usage = Fields(*so, "stream_options.").boolean("include_usage", false);
    }
    st->id = random_id(st->chat ? "chatcmpl-" : "cmpl-");
    st->model = alias;
    st->created = unix_now();
    st->want_logprobs = r.logprobs;
    st->n = r.n;
    st->n_requests = n_prompts;
    st->choices.resize(size_t(n_prompts * r.n));
    st->res = res;
    // Submit every prompt; if one is refused, cancel the others and answer with its error.
    for (int i = 0; i < n_prompts; ++i) {
      GenerateRequest ri = r;
      if (!prompts.empty()) ri.prompt = prompts[size_t(i)];
      if (n_prompts > 1) ri.sampling.seed = r.sampling.seed + uint64_t(i) * 1000003u;
      const int base = i * r.n;
      // The callback owns the state (and through it the Response) until the request retires.
      auto id = sched->submit(std::move(ri), [this, st, base](const Event& e) { on_event(*st, base, e); });
      if (!id) {
        for (auto rid : st->ids) sched->cancel(rid);
        std::lock_guard<std::mutex> l(st->mu);
        st->failed = true;
        throw http_error(id.status());
      }
      std::lock_guard<std::mutex> l(st->mu);
      st->ids.push_back(*id);
    }
    // A client that goes away cancels its requests at the next step.
    std::weak_ptr<GenState> weak = st;
    res->on_disconnect([this, weak] {
      if (auto s = weak.lock()) {
        std::vector<serve::RequestId> ids;
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
      if (st->chat) {
        for (size_t c = 0; c < st->choices.size(); ++c) {
          sse(*st, chunk(*st, int(c), json{{"role", "assistant"}, {"content", ""}}, nullptr));
        }
      } else if (st->echo) {
        // echo: each choice's stream starts with its prompt's text, as OpenAI's legacy endpoint.
        for (size_t c = 0; c < st->choices.size(); ++c) {
          sse(*st, chunk(*st, int(c), json(st->prompt_texts[c / size_t(st->n)]), nullptr));
        }
      }
    }
    st->open = true;
    std::vector<Event> pending;
    pending.swap(st->pending);
    for (const auto& e : pending) handle_event(*st, e);
  }

  // ---- events -> responses ----
  void on_event(GenState& st, int base, Event e) {
    std::lock_guard<std::mutex> l(st.mu);
    e.choice += base;
    if (!st.open) {
      st.pending.push_back(std::move(e));
      return;
    }
    handle_event(st, e);
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
            {"system_fingerprint", "loom"},
            {"choices", json::array({c})}};
  }

  json logprob_entry(const GenState& st, const Event& e) const {
    const Vocab& v = model->vocab();
    const std::string piece = v.token_to_piece(e.token, false);
    if (st.chat) {
      json top = json::array();
      for (const auto& t : e.top) {
        const std::string p = v.token_to_piece(t.token, false);
        top.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", bytes_of(p)}, {"id", t.token}});
      }
      return {{"id", e.token}, {"token", piece}, {"logprob", e.logprob.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}};
    }
    json top = json::object();
    for (const auto& t : e.top) top[v.token_to_piece(t.token, false)] = t.logprob;
    return {{"id", e.token}, {"token", piece}, {"logprob", e.logprob.logprob}, {"top_logprobs", top}};
  }

  // Completions' legacy logprobs object from the per-token entries.
  static json legacy_logprobs(const Choice& c) {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    int off = c.text_offset;
    for (const auto& e : c.logprobs) {
      tokens.push_back(e["token"]);
      lps.push_back(e["logprob"]);
      tops.push_back(e["top_logprobs"]);
      offs.push_back(off);
      off += int(e["token"].get<std::string>().size());
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
  }

  // How much of the text may be streamed now: up to a tool-call trigger (held back from there),
  // and not a tail that may still become one.
  size_t streamable(GenState& st, Choice& c) {
    if (st.triggers.empty()) return c.text.size();
    if (c.held) return c.streamed;
    size_t cut = c.text.size();
    for (const auto& t : st.triggers) {
      // Llama 3.1 / generic calls start with "{" at the very start of the message only.
      if (t == "{") {
        size_t k = 0;
        while (k < c.text.size() && std::isspace(static_cast<unsigned char>(c.text[k]))) ++k;
        if (k < c.text.size() && c.text[k] == '{') cut = std::min(cut, k), c.held = true;
        else if (k == c.text.size()) cut = std::min(cut, size_t(0));
        continue;
      }
      const size_t p = c.text.find(t);
      if (p != std::string::npos) {
        cut = std::min(cut, p);
        c.held = true;
        continue;
      }
      for (size_t k = std::min(t.size() - 1, c.text.size()); k > 0; --k) {
        if (c.text.compare(c.text.size() - k, k, t, 0, k) == 0) {
          cut = std::min(cut, c.text.size() - k);
          break;
        }
      }
    }
    return std::max(cut, c.streamed);
  }

  void handle_event(GenState& st, const Event& e) {
    switch (e.kind) {
      case Event::Kind::kToken: {
        if (e.choice < 0 || e.choice >= int(st.choices.size())) return;
        Choice& c = st.choices[size_t(e.choice)];
        c.text += e.text;
        c.tokens.push_back(e.token);
        json lp = nullptr;
        if (st.want_logprobs && e.has_logprob) {
          lp = logprob_entry(st, e);
          c.logprobs.push_back(lp);
        }
        if (!st.stream) return;
        const size_t upto = streamable(st, c);
        if (upto <= c.streamed && lp.is_null()) return;
        const std::string delta = c.text.substr(c.streamed, upto - c.streamed);
        c.streamed = upto;
        json j = chunk(st, e.choice, st.chat ? json{{"content", delta}} : json(delta), nullptr);
        if (!lp.is_null()) {
          j["choices"][0]["logprobs"] = st.chat ? json{{"content", json::array({lp})}} : legacy_logprobs(Choice{"", 0, false, {}, json::array({lp}), "", false, c.text_offset});
        }
        if (!st.chat) c.text_offset += int(delta.size());
        sse(st, j);
        return;
      }
      case Event::Kind::kFinish: {
        if (e.choice < 0 || e.choice >= int(st.choices.size())) return;
        Choice& c = st.choices[size_t(e.choice)];
        c.text += e.text;
        c.finished = true;
        c.finish = e.reason == FinishReason::kLength ? "length" : e.reason == FinishReason::kCancelled ? "cancelled" : "stop";
        if (!st.stream) return;
        if (e.reason == FinishReason::kCancelled) return;  // the final error event says why
        json delta = json::object();
        if (st.chat && st.format != chat::ToolCallFormat::kNone) {
          const chat::ParsedMessage pm = chat::parse_assistant_output(st.format, c.text, st.parse_opts);
          std::string rest;
          // What was streamed is raw text up to the trigger; send the rest of the parsed content.
          if (pm.content.size() > c.streamed && pm.content.compare(0, c.streamed, c.text, 0, c.streamed) == 0) {
            rest = pm.content.substr(c.streamed);
          }
          if (!rest.empty()) sse(st, chunk(st, e.choice, json{{"content", rest}}, nullptr));
          if (!pm.reasoning_content.empty()) sse(st, chunk(st, e.choice, json{{"reasoning_content", pm.reasoning_content}}, nullptr));
          if (!pm.tool_calls.empty()) {
            json calls = json::array();
            for (size_t i = 0; i < pm.tool_calls.size(); ++i) {
              const auto& tc = pm.tool_calls[i];
              calls.push_back({{"index", int(i)}, {"id", tc.id}, {"type", "function"},
                               {"function", {{"name", tc.name}, {"arguments", tc.arguments}}}});
            }
            sse(st, chunk(st, e.choice, json{{"tool_calls", calls}}, nullptr));
            c.finish = "tool_calls";
          }
        } else if (c.text.size() > c.streamed) {
          const std::string rest = c.text.substr(c.streamed);
          sse(st, chunk(st, e.choice, st.chat ? json{{"content", rest}} : json(rest), nullptr));
        }
        c.streamed = c.text.size();
        sse(st, chunk(st, e.choice, st.chat ? delta : json(""), c.finish));
        return;
      }
      case Event::Kind::kDone: {
        st.usage.prompt_tokens += e.usage.prompt_tokens;
        st.usage.completion_tokens += e.usage.completion_tokens;
        st.usage.cached_tokens += e.usage.cached_tokens;
        st.timings.cache_n += e.timings.cache_n;
        st.timings.prompt_n += e.timings.prompt_n;
        st.timings.prompt_ms = std::max(st.timings.prompt_ms, e.timings.prompt_ms);
        st.timings.predicted_n += e.timings.predicted_n;
        st.timings.predicted_ms = std::max(st.timings.predicted_ms, e.timings.predicted_ms);
        if (++st.done_requests < st.n_requests) return;
        finish_response(st);
        return;
      }
      case Event::Kind::kError: {
        st.failed = true;
        for (auto id : st.ids) sched->cancel(id);
        if (st.stream) {
          sse(st, json::parse(error_json(500, e.error.message())));
          st.res->write("data: [DONE]\n\n");
          st.res->end();
        } else {
          send_error(*st.res, http_error(e.error));
        }
        return;
      }
    }
  }

  void finish_response(GenState& st) {
    if (st.failed) return;
    const bool cancelled = std::any_of(st.choices.begin(), st.choices.end(), [](const Choice& c) { return c.finish == "cancelled"; });
    if (st.stream) {
      if (cancelled) {
        sse(st, json::parse(error_json(503, "the request was cancelled (the server is shutting down)")));
      } else if (st.include_usage) {
        json u = chunk(st, 0, json::object(), nullptr);
        u["choices"] = json::array();
        u["usage"] = usage_json(st.usage);
        u["timings"] = timings_json(st.timings);
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
      Choice& c = st.choices[i];
      json ch = {{"index", int(i)}};
      if (st.chat) {
        json msg;
        std::string finish = c.finish;
        if (st.format != chat::ToolCallFormat::kNone) {
          const chat::ParsedMessage pm = chat::parse_assistant_output(st.format, c.text, st.parse_opts);
          msg = pm.to_json();
          if (!pm.tool_calls.empty()) finish = "tool_calls";
        } else {
          msg = {{"role", "assistant"}, {"content", c.text}};
        }
        ch["message"] = msg;
        ch["logprobs"] = st.want_logprobs ? json{{"content", c.logprobs}} : json(nullptr);
        ch["finish_reason"] = finish;
      } else {
        const int prompt_i = int(i) / st.n;
        ch["text"] = st.echo ? st.prompt_texts[size_t(prompt_i)] + c.text : c.text;
        ch["logprobs"] = st.want_logprobs ? legacy_logprobs(c) : json(nullptr);
        ch["finish_reason"] = c.finish;
      }
      choices.push_back(std::move(ch));
    }
    json j = {{"id", st.id},
              {"object", st.chat ? "chat.completion" : "text_completion"},
              {"created", st.created},
              {"model", st.model},
              {"system_fingerprint", "loom"},
              {"choices", choices},
              {"usage", usage_json(st.usage)},
              {"timings", timings_json(st.timings)}};
    send_json(*st.res, j);
  }

  // ---- embeddings and rerank ----
  // Runs an embedding request and calls done(result) on the loop thread.
  void run_embed(std::vector<std::vector<int32_t>> inputs, const std::shared_ptr<http::Response>& res,
                 std::function<void(serve::EmbedResult&)> done) {
    serve::EmbedRequest er;
    er.inputs = std::move(inputs);
    auto id = sched->submit_embed(std::move(er), [this, res, done](Expected<serve::EmbedResult> r) {
      if (!r) {
        send_error(*res, http_error(r.status()));
        return;
      }
      done(*r);
    });
    if (!id) throw http_error(id.status());
  }

  void embeddings(http::Request& req, const std::shared_ptr<http::Response>& res) {
    if (!o.embedding) throw HttpError{501, "this server was not started with --embedding", "not_supported_error", {}};
    ParsedEmbeddings p = parse_embeddings_request(parse_body(req.body), model->vocab());
    const bool base64_out = p.base64, normalize = p.normalize;
    const std::string model_name = alias;
    run_embed(std::move(p.inputs), res, [this, res, base64_out, normalize, model_name](serve::EmbedResult& r) {
      json data = json::array();
      for (size_t i = 0; i < r.embeddings.size(); ++i) {
        std::vector<float>& e = r.embeddings[i];
        if (normalize) {
          double ss = 0;
          for (float x : e) ss += double(x) * x;
          const float inv = ss > 0 ? float(1.0 / std::sqrt(ss)) : 0.0f;
          for (float& x : e) x *= inv;
        }
        json item = {{"object", "embedding"}, {"index", int(i)}};
        if (base64_out) item["embedding"] = base64(e.data(), e.size() * sizeof(float));
        else item["embedding"] = e;
        data.push_back(std::move(item));
      }
      send_json(*res, {{"object", "list"}, {"data", data}, {"model", model_name},
                       {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}}});
    });
  }

  void rerank(http::Request& req, const std::shared_ptr<http::Response>& res) {
    if (!o.embedding || sched->stats().slots == 0 || rank_pooling() == false) {
      throw HttpError{501, "reranking needs a reranker model (rank pooling) started with --embedding --pooling rank",
                      "not_supported_error", {}};
    }
    ParsedRerank p = parse_rerank_request(parse_body(req.body), model->vocab());
    const int top_n = p.top_n;
    const bool return_docs = p.return_documents;
    std::vector<std::string> texts = std::move(p.texts);
    const std::string model_name = alias;
    run_embed(std::move(p.inputs), res, [this, res, texts, top_n, return_docs, model_name](serve::EmbedResult& r) {
      std::vector<std::pair<float, int>> scores;
      for (size_t i = 0; i < r.embeddings.size(); ++i) scores.emplace_back(r.embeddings[i].empty() ? 0.0f : r.embeddings[i][0], int(i));
      std::stable_sort(scores.begin(), scores.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      json results = json::array();
      for (int k = 0; k < top_n && k < int(scores.size()); ++k) {
        json item = {{"index", scores[size_t(k)].second}, {"relevance_score", scores[size_t(k)].first}};
        if (return_docs) item["document"] = {{"text", texts[size_t(scores[size_t(k)].second)]}};
        results.push_back(std::move(item));
      }
      send_json(*res, {{"model", model_name}, {"object", "list"}, {"results", results},
                       {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}}});
    });
  }

  bool rank_pooling() const { return o.pooling == "rank" || (o.pooling.empty() && model->hparams().pooling_type == 4); }

  // ---- small endpoints ----
  void models(http::Response& res) {
    const ModelHparams& hp = model->hparams();
    json meta = {{"n_vocab", hp.n_vocab}, {"n_ctx_train", hp.n_ctx_train}, {"n_embd", hp.n_embd},
                 {"n_params", model->n_params()}, {"size", std::filesystem::file_size(o.model)}};
    send_json(res, {{"object", "list"},
                    {"data", json::array({{{"id", alias}, {"object", "model"}, {"created", created}, {"owned_by", "loom"}, {"meta", meta}}})}});
  }

  void tokenize(http::Request& req, http::Response& res) {
    const ParsedTokenize p = parse_tokenize_request(parse_body(req.body));
    const auto ids = model->vocab().tokenize(p.content, p.add_special, p.parse_special);
    json toks = json::array();
    for (int32_t id : ids) {
      if (p.with_pieces) toks.push_back({{"id", id}, {"piece", model->vocab().token_to_piece(id, true)}});
      else toks.push_back(id);
    }
    send_json(res, {{"tokens", toks}});
  }

  void detokenize(http::Request& req, http::Response& res) {
    const std::vector<int32_t> ids = parse_detokenize_request(parse_body(req.body), model->vocab());
    auto text = model->vocab().detokenize(ids, false, true);
    if (!text) throw http_error(text.status());
    send_json(res, {{"content", *text}});
  }

  void apply_template(http::Request& req, http::Response& res) {
    const chat::ChatInputs in = parse_apply_template_request(parse_body(req.body));
    auto text = tmpl->render(in);
    if (!text) throw http_error(text.status());
    send_json(res, {{"prompt", *text}});
  }

  void props(http::Response& res) {
    send_json(res, {{"total_slots", o.slots},
                    {"n_ctx", sched->n_ctx()},
                    {"model_path", o.model},
                    {"model_alias", alias},
                    {"chat_template", tmpl ? tmpl->source() : std::string()},
                    {"embedding", o.embedding},
                    {"build_info", "loom"}});
  }

  void metrics(http::Response& res) {
    const serve::SchedulerStats s = sched->stats();
    const http::ServerStats h = http->stats();
    res.send(200, "text/plain; version=0.0.4", render_metrics(s, h));
  }
};

}  // namespace

int run_server(const ServeOptions& opts, std::atomic<bool>* stop) {
  // Signals are taken synchronously by this thread (sigtimedwait); every thread started from
  // here on inherits the blocked mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto app = std::make_unique<App>();
  app->o = opts;
  App& a = *app;
  if (!opts.api_keys.empty()) {
    for (const auto& k : opts.api_keys) {
      if (k.empty()) {
        std::fprintf(stderr, "loom: an API key is empty\n");
        return 2;
      }
    }
  }
  a.alias = !opts.alias.empty() ? opts.alias : std::filesystem::path(opts.model).filename().string();

  http::ServerOptions ho;
  ho.max_body_bytes = opts.max_body;
  ho.handler_threads = size_t(std::max(1, opts.http_threads));
  ho.header_timeout = std::chrono::seconds(std::max(1, std::min(opts.timeout_s, 10)));
  ho.body_timeout = std::chrono::seconds(std::max(1, std::min(opts.timeout_s, 30)));
  ho.write_timeout = std::chrono::seconds(std::max(1, opts.timeout_s));
  ho.error_body = [](int status, std::string_view msg) { return error_json(status, msg); };
  ho.log = [](std::string_view m) { LOOM_LOG(kWarn, "http: %.*s", int(m.size()), m.data()); };
  auto srv = http::Server::listen(opts.host, uint16_t(opts.port), ho);
  if (!srv) {
    std::fprintf(stderr, "loom: %s\n", srv.status().message().c_str());
    return 1;
  }
  a.http = std::move(*srv);
  a.http->start([&a](http::Request&& req, std::shared_ptr<http::Response> res) { a.handle(std::move(req), std::move(res)); });
  std::fprintf(stderr, "loom: listening on http://%s:%d\n", opts.host.c_str(), a.http->port());
  std::fflush(stderr);

  // A failure after the listener is up: say why, close it, exit with `code`.
  auto quit = [&a](int code, const std::string& why) {
    std::fprintf(stderr, "loom: %s\n", why.c_str());
    a.http->shutdown();
    return code;
  };
  // Load while /health answers 503.
  auto model = Model::load(opts.model);
  if (!model) {
    return quit(1, model.status().message());
  }
  a.model = *model;
  std::string tmpl_override;
  if (!opts.chat_template_file.empty()) {
    std::ifstream f(opts.chat_template_file, std::ios::binary);
    if (!f) {
      return quit(1, "cannot open " + opts.chat_template_file);
    }
    std::stringstream ss;
    ss << f.rdbuf();
    tmpl_override = ss.str();
  }
  auto tmpl = chat::ChatTemplate::from_model(*a.model, opts.chat_template_file.empty() ? nullptr : &tmpl_override);
  if (!tmpl) {
    return quit(1, "chat template: " + tmpl.status().message());
  }
  a.tmpl = *tmpl;

  serve::SchedulerParams sp;
  ContextParams& cp = sp.context;
  const int64_t train = a.model->hparams().n_ctx_train;
  cp.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : int(std::min<int64_t>(train, 4096));
  cp.n_batch = opts.n_batch;
  cp.n_ubatch = std::min(opts.n_ubatch, opts.n_batch);
  cp.n_threads = opts.threads;
  cp.n_threads_batch = opts.threads_batch;
  cp.type_k = opts.type_k;
  cp.type_v = opts.type_v;
  cp.embeddings = opts.embedding;
  if (opts.embedding) {
    cp.pooling = a.model->hparams().pooling_type >= 0 ? Pooling::kUnspecified : Pooling::kMean;
    if (auto p = parse_pooling(opts.pooling)) cp.pooling = *p;
    if (cp.pooling == Pooling::kNone) {
      return quit(2, "--pooling none is not served (the endpoints return one vector per input)");
    }
    cp.n_ubatch = cp.n_batch = std::max(cp.n_ubatch, std::min(cp.n_ctx, cp.n_batch));
  }
  sp.n_slots = opts.slots;
  sp.max_queue = opts.max_queue;
  sp.step_tokens = opts.step_tokens;
  sp.context_shift = opts.context_shift;
  sp.prefix_cache = opts.prefix_cache;
  sp.cache_dir = opts.cache_dir;
  if (!opts.draft_model.empty()) {
    if (opts.embedding) return quit(2, "--draft-model needs a generating server, not --embedding");
    auto dm = Model::load(opts.draft_model);
    if (!dm) return quit(1, "--draft-model " + opts.draft_model + ": " + dm.status().message());
    sp.draft_model = *dm;
    sp.draft_max = opts.draft_max;
    sp.draft_min = opts.draft_min;
    sp.draft_p_min = opts.draft_p_min;
    sp.draft_context.n_threads = opts.threads;
    sp.draft_context.n_ctx = opts.draft_n_ctx;
    sp.draft_context.type_k = opts.type_k;
    sp.draft_context.type_v = opts.type_v;
  }
  std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> loras;
  for (const auto& [path, scale] : opts.loras) {
    auto l = LoraAdapter::load(path, *a.model);
    if (!l) {
      return quit(1, "--lora " + path + ": " + l.status().message());
    }
    loras.emplace_back(*l, scale);
  }
  auto sched = serve::Scheduler::create(a.model, sp, [&](Context& ctx) -> Status {
    for (const auto& [l, scale] : loras) LOOM_RETURN_IF_ERROR(ctx.set_lora(l, scale));
    return Status::ok();
  });
  if (!sched) {
    return quit(1, sched.status().message());
  }
  a.sched = std::move(*sched);
  a.ready = true;
  std::fprintf(stderr, "loom: ready: %s, %d slots, %d KV cells%s%s\n", a.alias.c_str(), opts.slots, a.sched->n_ctx(),
               opts.embedding ? ", embeddings" : "",
               opts.draft_model.empty() ? "" : (", draft model " + opts.draft_model).c_str());
  std::fflush(stderr);

  // Wait for SIGINT / SIGTERM (or *stop).
  for (;;) {
    timespec ts{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (stop && stop->load()) break;
  }
  std::fprintf(stderr, "loom: stopping: finishing running requests (5 s grace)\n");
  a.http->stop_accepting();
  a.sched->shutdown(std::chrono::seconds(5));  // running streams finish or get their final event
  a.http->drain(std::chrono::seconds(2));
  a.http->shutdown();
  a.sched.reset();
  std::fprintf(stderr, "loom: stopped\n");
  return 0;
}

}  // namespace loom::server
