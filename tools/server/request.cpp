#include "request.h"

namespace loom::server {

HttpError http_error(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kCorrupt: return {400, st.message(), {}, {}};
    case StatusCode::kUnsupported: return {501, st.message(), {}, {}};
    case StatusCode::kNotFound: return {404, st.message(), {}, {}};
    case StatusCode::kUnavailable: return {503, st.message(), {}, {{"Retry-After", "1"}}};
    case StatusCode::kResourceExhausted: return {503, st.message(), {}, {{"Retry-After", "1"}}};
    default: return {500, st.message(), {}, {}};
  }
}

namespace {

// serve's RequestError -> HttpError, so that callers see one kind of error.
template <typename F>
auto as_http(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const serve::RequestError& e) {
    throw http_error(e.status());
  }
}

}  // namespace

ParsedChat parse_chat_request(const json& body, const RequestEnv& env, uint64_t id_seed) {
  return as_http([&] {
    serve::ChatGeneration g =
        serve::parse_chat_generation(serve::Fields(body), env.tmpl, env.model.vocab(), env.n_predict, id_seed);
    ParsedChat p;
    p.gen = std::move(g.request);
    p.format = g.format;
    p.parse_options = g.parse_options;
    p.triggers = std::move(g.triggers);
    return p;
  });
}

ParsedCompletion parse_completion_request(const json& body, const RequestEnv& env) {
  return as_http([&] {
    const serve::Fields f(body);
    const json* p = f.get("prompt");
    if (!p) bad_request("prompt: required");
    const Vocab& vocab = env.model.vocab();
    ParsedCompletion out;
    // A string, an array of token ids, or an array of strings / token arrays (one choice each).
    std::vector<const json*> sources;
    if (p->is_array() && !p->empty() && (p->at(0).is_string() || p->at(0).is_array())) {
      if (p->size() > 64) bad_request("prompt: at most 64 prompts per request");
      for (size_t i = 0; i < p->size(); ++i) {
        out.prompts.push_back(serve::prompt_tokens(p->at(i), vocab, "prompt[" + std::to_string(i) + "]"));
        sources.push_back(&p->at(i));
      }
    } else {
      out.prompts.push_back(serve::prompt_tokens(*p, vocab, "prompt"));
      sources.push_back(p);
    }
    serve::parse_generation(f, vocab, env.n_predict, /*chat=*/false, out.gen);
    out.gen.prompt = out.prompts[0];
    out.echo = f.boolean("echo", false);
    if (out.echo) {
      for (size_t i = 0; i < out.prompts.size(); ++i) {
        if (sources[i]->is_string()) {
          out.echo_texts.push_back(sources[i]->get<std::string>());
        } else {
          auto t = vocab.detokenize(out.prompts[i], false, false);
          out.echo_texts.push_back(t ? *t : std::string());
        }
      }
    }
    return out;
  });
}

}  // namespace loom::server
