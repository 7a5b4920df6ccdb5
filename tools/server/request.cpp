#include "request.h"

#include "loom/loom.h"

namespace loom::server {

namespace {

// loom_last_error() names the C function first ("loom_scheduler_submit_ext: prompt: required"); a
// client is told only what is wrong with its request.
std::string without_function_name(const std::string& m) {
  const size_t colon = m.find(": ");
  if (m.rfind("loom_", 0) != 0 || colon == std::string::npos) return m;
  for (size_t i = 0; i < colon; ++i) {
    const char c = m[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return m;
  }
  return m.substr(colon + 2);
}

}  // namespace

HttpError http_error(int32_t code, const std::string& raw_message) {
  const std::string message = without_function_name(raw_message);
  switch (code) {
    case LOOM_ERR_INVALID_ARGUMENT:
    case LOOM_ERR_OUT_OF_RANGE:
    case LOOM_ERR_CORRUPT: return {400, message, {}, {}};
    case LOOM_ERR_UNSUPPORTED: return {501, message, {}, {}};
    case LOOM_ERR_NOT_FOUND: return {404, message, {}, {}};
    case LOOM_ERR_UNAVAILABLE:
    case LOOM_ERR_RESOURCE_EXHAUSTED: return {503, message, {}, {{"Retry-After", "1"}}};
    default: return {500, message, {}, {}};
  }
}

namespace {

// stream and stream_options.include_usage, shared by both generation endpoints.
void read_stream_fields(const Fields& f, GenerationPlan& p) {
  p.stream = f.boolean("stream", false);
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) bad_request("stream_options: expected an object");
    p.include_usage = Fields(*so, "stream_options.").boolean("include_usage", false);
  }
}

std::string submit_options(const char* endpoint, int default_max_tokens) {
  return dump(json{{"endpoint", endpoint}, {"n_predict", default_max_tokens}});
}

}  // namespace

GenerationPlan plan_chat(const json& body, int default_max_tokens) {
  const Fields f(body);
  GenerationPlan p;
  p.chat = true;
  read_stream_fields(f, p);
  json r = body;
  // The server's template (the model's or --chat-template-file) is the only one: a client does not
  // get to run its own Jinja source here.
  r.erase("chat_template");
  r.erase("prompt");
  p.requests.push_back(std::move(r));
  p.options = submit_options("chat", default_max_tokens);
  return p;
}

GenerationPlan plan_completion(const json& body, int default_max_tokens) {
  const Fields f(body);
  GenerationPlan p;
  p.chat = false;
  read_stream_fields(f, p);
  const json* prompt = f.get("prompt");
  if (!prompt) bad_request("prompt: required");
  // A string, an array of token ids, or an array of strings / token arrays (one choice group each).
  if (prompt->is_array() && !prompt->empty() && (prompt->at(0).is_string() || prompt->at(0).is_array())) {
    if (prompt->size() > 64) bad_request("prompt: at most 64 prompts per request");
    for (const json& one : *prompt) p.prompts.push_back(one);
  } else {
    p.prompts.push_back(*prompt);
  }
  p.echo = f.boolean("echo", false);
  for (const json& one : p.prompts) {
    json r = body;
    r.erase("messages");
    r["prompt"] = one;
    p.requests.push_back(std::move(r));
  }
  p.options = submit_options("completion", default_max_tokens);
  return p;
}

int64_t prompt_seed(uint64_t first_seed, int i) {
  return int64_t((first_seed + uint64_t(i) * 1000003u) & uint64_t(INT64_MAX));
}

EmbeddingsPlan plan_embeddings(const json& body) {
  const Fields f(body);
  const json* input = f.get("input");
  if (!input) input = f.get("content");  // llama.cpp's /embedding field
  if (!input) bad_request("input: required");
  EmbeddingsPlan p;
  const std::string fmt = f.string("encoding_format", "float");
  if (fmt != "float" && fmt != "base64") bad_request("encoding_format: expected \"float\" or \"base64\"");
  p.base64 = fmt == "base64";
  p.normalize = f.boolean("normalize", true);
  p.request = {{"input", *input}};
  return p;
}

RerankPlan plan_rerank(const json& body) {
  const Fields f(body);
  if (!f.has("query")) bad_request("query: required");
  const std::string query = f.string("query");
  const json* docs = f.get("documents");
  if (!docs || !docs->is_array() || docs->empty()) bad_request("documents: expected a non-empty array");
  if (docs->size() > 2048) bad_request("documents: at most 2048");
  RerankPlan p;
  p.top_n = int(f.integer_in("top_n", int64_t(docs->size()), 1, int64_t(docs->size())));
  p.return_documents = f.boolean("return_documents", false);
  for (const json& d : *docs) {
    // What is not text is refused by the C API when the request is submitted.
    if (d.is_string()) p.texts.push_back(d.get<std::string>());
    else if (d.is_object() && d.contains("text") && d["text"].is_string()) p.texts.push_back(d["text"].get<std::string>());
    else p.texts.emplace_back();
  }
  p.request = {{"rerank", {{"query", query}, {"documents", *docs}}}};
  return p;
}

TokenizePlan plan_tokenize(const json& body) {
  const Fields f(body);
  TokenizePlan p;
  p.content = f.string("content");
  p.add_special = f.boolean("add_special", false);
  p.parse_special = f.boolean("parse_special", true);
  p.with_pieces = f.boolean("with_pieces", false);
  return p;
}

std::vector<int32_t> plan_detokenize(const json& body, int32_t n_vocab) {
  const Fields f(body);
  const json* t = f.get("tokens");
  std::vector<int32_t> ids;
  if (!t) return ids;
  if (!t->is_array()) bad_request("tokens: expected an array of token ids");
  for (size_t i = 0; i < t->size(); ++i) {
    if (!(*t)[i].is_number_integer()) bad_request("tokens[" + std::to_string(i) + "]: expected a token id");
    const int64_t id = (*t)[i].get<int64_t>();
    if (id < 0 || id >= n_vocab) {
      bad_request("tokens[" + std::to_string(i) + "]: token " + std::to_string(id) + " is not in the vocabulary");
    }
    ids.push_back(int32_t(id));
  }
  return ids;
}

json plan_apply_template(const json& body) {
  const Fields f(body);
  const json* msgs = f.get("messages");
  if (!msgs || !msgs->is_array()) bad_request("messages: expected an array");
  json r = {{"messages", *msgs}, {"add_generation_prompt", f.boolean("add_generation_prompt", true)}};
  if (const json* t = f.get("tools")) r["tools"] = *t;
  if (const json* k = f.get("chat_template_kwargs")) r["chat_template_kwargs"] = *k;
  return r;
}

}  // namespace loom::server
