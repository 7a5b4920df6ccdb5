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

ParsedEmbeddings parse_embeddings_request(const json& body, const Vocab& vocab) {
  return as_http([&] {
    const serve::Fields f(body);
    const json* input = f.get("input");
    if (!input) input = f.get("content");  // llama.cpp's /embedding field
    if (!input) bad_request("input: required");
    ParsedEmbeddings p;
    const std::string fmt = f.string("encoding_format", "float");
    if (fmt != "float" && fmt != "base64") bad_request("encoding_format: expected \"float\" or \"base64\"");
    p.base64 = fmt == "base64";
    p.normalize = f.boolean("normalize", true);
    p.inputs = serve::embed_inputs(*input, vocab, "input");
    return p;
  });
}

ParsedRerank parse_rerank_request(const json& body, const Vocab& vocab) {
  return as_http([&] {
    const serve::Fields f(body);
    if (!f.has("query")) bad_request("query: required");
    const std::string query = f.string("query");
    const json* docs = f.get("documents");
    if (!docs || !docs->is_array() || docs->empty()) bad_request("documents: expected a non-empty array");
    if (docs->size() > 2048) bad_request("documents: at most 2048");
    ParsedRerank p;
    p.top_n = int(f.integer_in("top_n", int64_t(docs->size()), 1, int64_t(docs->size())));
    p.return_documents = f.boolean("return_documents", false);
    p.inputs = serve::rerank_inputs(query, *docs, vocab, &p.texts);
    return p;
  });
}

ParsedTokenize parse_tokenize_request(const json& body) {
  return as_http([&] {
    const serve::Fields f(body);
    ParsedTokenize p;
    p.content = f.string("content");
    p.add_special = f.boolean("add_special", false);
    p.parse_special = f.boolean("parse_special", true);
    p.with_pieces = f.boolean("with_pieces", false);
    return p;
  });
}

std::vector<int32_t> parse_detokenize_request(const json& body, const Vocab& vocab) {
  return as_http([&] {
    const serve::Fields f(body);
    const json* t = f.get("tokens");
    std::vector<int32_t> ids;
    if (!t) return ids;
    if (!t->is_array()) bad_request("tokens: expected an array of token ids");
    for (size_t i = 0; i < t->size(); ++i) {
      if (!(*t)[i].is_number_integer()) bad_request("tokens[" + std::to_string(i) + "]: expected a token id");
      const int64_t id = (*t)[i].get<int64_t>();
      if (id < 0 || id >= vocab.n_tokens()) {
        bad_request("tokens[" + std::to_string(i) + "]: token " + std::to_string(id) + " is not in the vocabulary");
      }
      ids.push_back(int32_t(id));
    }
    return ids;
  });
}

chat::ChatInputs parse_apply_template_request(const json& body) {
  return as_http([&] {
    const serve::Fields f(body);
    const json* msgs = f.get("messages");
    if (!msgs || !msgs->is_array()) bad_request("messages: expected an array");
    chat::ChatInputs in;
    in.messages = *msgs;
    if (const json* t = f.get("tools")) in.tools = *t;
    if (const json* k = f.get("chat_template_kwargs")) in.extra = *k;
    in.add_generation_prompt = f.boolean("add_generation_prompt", true);
    return in;
  });
}

}  // namespace loom::server
