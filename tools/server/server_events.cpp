// `loom serve`: the scheduler's events into responses (server_app.h), on the scheduler's thread:
// OpenAI's chunks and final objects (logprobs included), llama-server's native partials and finals,
// and the chat dialects' events through their writers.
#include <algorithm>

#include "api/native.h"
#include "server_app.h"

namespace loom::server::server_detail {

namespace {

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(int(c));
  return a;
}

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

}  // namespace

void App::on_event(GenState& st, int prompt, Event e) {
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

void App::fail_response(GenState& st, const std::string& why) {
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

json App::chunk(GenState& st, int choice, json delta, json finish) {
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

json App::logprob_entry(const GenState& st, const Event& e) {
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

json App::legacy_logprobs(const json& entries, int text_offset) {
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

void App::send_deltas(GenState& st, int choice, Choice& c, const Event& e) {
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

json App::native_probs(const Event& e, bool post) {
  std::vector<loom::api::TokenProb> top;
  top.reserve(e.top.size());
  for (const api::TokenLogprob& t : e.top) top.push_back({t.id, t.piece, t.logprob});
  return loom::api::token_probs({e.token, e.chosen.piece, e.chosen.logprob}, top, post);
}

void App::native_event(GenState& st, int prompt, const Event& e) {
  if (prompt < 0 || prompt >= int(st.choices.size())) return;
  Choice& c = st.choices[size_t(prompt)];
  const int64_t prompt_n = st.prompt_n[size_t(prompt)];
  switch (e.kind) {
    case LOOM_EVENT_TOKEN: {
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
      if (!e.text.empty() && st.stream)
        sse(st, loom::api::native_partial(prompt, e.text, {}, -1, int64_t(c.tokens.size()), prompt_n, nullptr));
      return;
    }
    case LOOM_EVENT_DONE: return native_done(st, prompt, c, e);
    default: return;
  }
}

loom::api::NativeFinal App::native_final_of(const GenState& st, int prompt, const Choice& c, const Event& done) {
  const int64_t prompt_n = st.prompt_n[size_t(prompt)];
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
  one.add(done);
  f.timings = one.timings();
  if (!st.stream && st.want_logprobs) f.completion_probabilities = c.logprobs;
  return f;
}

void App::native_done(GenState& st, int prompt, const Choice& c, const Event& e) {
  st.totals.add(e);
  const loom::api::NativeFinal f = native_final_of(st, prompt, c, e);
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
}

void App::write_events(GenState& st, const std::vector<loom::api::SseEvent>& events) {
  for (const auto& ev : events) {
    std::string out;
    if (!ev.event.empty()) out += "event: " + ev.event + "\n";
    out += "data: " + dump(ev.data) + "\n\n";
    st.res->write(out);
  }
}

loom::api::ChatResult App::chat_result(const GenState& st, const Choice& c) const {
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

void App::dialect_event(GenState& st, const Event& e) {
  if (st.choices.empty()) return;
  Choice& c = st.choices[0];
  switch (e.kind) {
    case LOOM_EVENT_TOKEN: {
      if (e.choice != 0) return;
      if (!st.stream) return;
      for (const json& delta : e.deltas) write_events(st, st.writer.delta(delta));
      return;
    }
    case LOOM_EVENT_FINISH: {
      if (e.choice != 0) return;
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

App::Choice* App::text_choice(GenState& st, int prompt, const Event& e) {
  size_t i = 0;
  switch (st.dialect) {
    case Dialect::kNative:
      if (prompt < 0) return nullptr;
      i = size_t(prompt);
      break;
    case Dialect::kDialect:
      if (e.choice != 0) return nullptr;
      break;
    case Dialect::kOpenAI:
      if (e.choice < 0) return nullptr;
      i = size_t(e.choice);
      break;
  }
  return i < st.choices.size() ? &st.choices[i] : nullptr;
}

void App::accumulate_text(GenState& st, int prompt, const Event& e) {
  if (e.kind != LOOM_EVENT_TOKEN && e.kind != LOOM_EVENT_FINISH) return;
  if (Choice* c = text_choice(st, prompt, e)) c->text += e.text;
}

void App::handle_event(GenState& st, int prompt, const Event& e) {
  accumulate_text(st, prompt, e);
  if (st.dialect == Dialect::kDialect) return dialect_event(st, e);
  if (st.dialect == Dialect::kNative && e.kind != LOOM_EVENT_ERROR) return native_event(st, prompt, e);
  switch (e.kind) {
    case LOOM_EVENT_TOKEN: {
      if (e.choice < 0 || e.choice >= int(st.choices.size())) return;
      Choice& c = st.choices[size_t(e.choice)];
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

void App::finish_response(GenState& st) {
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

}  // namespace loom::server::server_detail
