#include "request.h"

#include <algorithm>

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

loom::api::GenerationOptions submit_options(loom::api::GenerationOptions::Endpoint endpoint, int default_max_tokens) {
  loom::api::GenerationOptions o;
  o.endpoint = endpoint;
  o.n_predict = default_max_tokens;
  return o;
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
  // Streamed: the engine parses the reply as it comes and gives the deltas to send.
  if (p.stream) r["stream_parse"] = true;
  else r.erase("stream_parse");
  p.requests.push_back(std::move(r));
  p.options = submit_options(loom::api::GenerationOptions::Endpoint::kChat, default_max_tokens);
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
  p.options = submit_options(loom::api::GenerationOptions::Endpoint::kCompletion, default_max_tokens);
  return p;
}

namespace {

bool is_token_id(const json& v) {
  return v.is_number_integer() || (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())));
}

// One native prompt -> token ids (a string stays a string: the C API tokenizes it the same way).
json one_native_prompt(const json& p, const Tokenizer& tok, const std::string& where) {
  if (p.is_string()) return p;
  if (p.is_object()) {
    if (p.contains("multimodal_data") && !p.at("multimodal_data").is_null()) {
      throw HttpError{501, where + ".multimodal_data: this server has no vision or audio input", "not_supported_error", {}};
    }
    if (!p.contains("prompt_string") || !p.at("prompt_string").is_string())
      bad_request(where + ".prompt_string: expected a string");
    return p.at("prompt_string");
  }
  if (!p.is_array()) bad_request(where + ": expected a string, token ids, or an array of them");
  bool all_ids = true;
  for (const json& e : p) all_ids &= is_token_id(e);
  if (all_ids) return p;
  // Mixed: strings tokenized (BOS only for a string first), ids as they are.
  json ids = json::array();
  bool first = true;
  for (size_t i = 0; i < p.size(); ++i) {
    const json& e = p[i];
    if (e.is_string()) {
      for (int32_t t : tok.tokenize(e.get<std::string>(), first)) ids.push_back(t);
    } else if (is_token_id(e)) {
      ids.push_back(e.get<int64_t>());
    } else {
      bad_request(where + "[" + std::to_string(i) + "]: expected a token id or a string");
    }
    first = false;
  }
  return ids;
}

// Whether an array prompt is one prompt (ids, or ids mixed with strings) rather than a list.
bool single_prompt_array(const json& p) {
  bool has_id = false;
  for (const json& e : p) {
    if (is_token_id(e)) has_id = true;
    else if (!e.is_string()) return false;
  }
  return has_id;
}

std::string prompt_text_of(const json& p, const Tokenizer& tok) {
  if (p.is_string()) return p.get<std::string>();
  std::vector<int32_t> ids;
  for (const json& e : p) ids.push_back(e.get<int32_t>());
  return tok.detokenize(ids);
}

void native_flags(const Fields& f, NativePlan& p) {
  p.stream = f.boolean("stream", false);
  p.return_tokens = f.boolean("return_tokens", false);
  p.post_sampling_probs = f.boolean("post_sampling_probs", false);
}

}  // namespace

NativePlan plan_native(const json& body, int default_max_tokens, const Tokenizer& tok) {
  const Fields f(body);
  NativePlan p;
  native_flags(f, p);
  const json* prompt = f.get("prompt");
  if (!prompt) bad_request("prompt: required");
  std::vector<json> prompts;
  if (prompt->is_array() && !prompt->empty() && !single_prompt_array(*prompt)) {
    if (prompt->size() > 64) bad_request("prompt: at most 64 prompts per request");
    for (size_t i = 0; i < prompt->size(); ++i)
      prompts.push_back(one_native_prompt(prompt->at(i), tok, "prompt[" + std::to_string(i) + "]"));
  } else {
    prompts.push_back(one_native_prompt(*prompt, tok, "prompt"));
  }
  for (const json& one : prompts) {
    json r = body;
    r.erase("messages");
    r.erase("stream");
    r["prompt"] = one;
    p.requests.push_back(std::move(r));
    p.prompt_texts.push_back(prompt_text_of(one, tok));
  }
  p.options = submit_options(loom::api::GenerationOptions::Endpoint::kCompletion, default_max_tokens);
  return p;
}

NativePlan plan_infill(const json& body, int default_max_tokens, const Tokenizer& tok, int n_ctx, int n_batch) {
  std::string missing;
  if (tok.fim_pre < 0) missing += "prefix token is missing. ";
  if (tok.fim_suf < 0) missing += "suffix token is missing. ";
  if (tok.fim_mid < 0) missing += "middle token is missing. ";
  if (!missing.empty()) throw HttpError{501, "Infill is not supported by this model: " + missing, "not_supported_error", {}};
  const Fields f(body);
  NativePlan p;
  native_flags(f, p);
  if (f.has("prompt") && !f.get("prompt")->is_string()) bad_request("prompt: expected a string");
  if (!f.has("input_prefix")) bad_request("input_prefix: required");
  if (!f.has("input_suffix")) bad_request("input_suffix: required");
  auto mixed = [&](const char* k) -> std::vector<int32_t> {
    const json v = one_native_prompt(*f.get(k), tok, k);
    if (v.is_string()) return tok.tokenize(v.get<std::string>(), false);
    std::vector<int32_t> ids;
    for (const json& e : v) ids.push_back(e.get<int32_t>());
    return ids;
  };
  std::vector<int32_t> prefix = mixed("input_prefix"), suffix = mixed("input_suffix");
  const std::vector<int32_t> prompt = tok.tokenize(f.string("prompt"), false);
  std::vector<int32_t> extra;
  if (tok.fim_rep >= 0) {
    extra.push_back(tok.fim_rep);
    for (int32_t t : tok.tokenize("myproject\n", false)) extra.push_back(t);
  }
  if (const json* chunks = f.get("input_extra")) {
    if (!chunks->is_array()) bad_request("input_extra: expected an array of {\"filename\": string, \"text\": string}");
    if (chunks->size() > 4096) bad_request("input_extra: at most 4096 chunks");
    for (size_t i = 0; i < chunks->size(); ++i) {
      const Fields c(chunks->at(i), "input_extra[" + std::to_string(i) + "].");
      if (!chunks->at(i).is_object() || !c.has("text") || !c.get("text")->is_string()) {
        bad_request("input_extra[" + std::to_string(i) + "].text: expected a string");
      }
      const std::string filename = c.string("filename", "tmp");
      if (tok.fim_sep >= 0) {
        extra.push_back(tok.fim_sep);
        for (int32_t t : tok.tokenize(filename + "\n", false)) extra.push_back(t);
      } else {
        for (int32_t t : tok.tokenize("\n\n--- snippet ---\n\n", false)) extra.push_back(t);
      }
      for (int32_t t : tok.tokenize(c.string("text"), false)) extra.push_back(t);
    }
  }
  if (tok.fim_sep >= 0) {
    extra.push_back(tok.fim_sep);
    for (int32_t t : tok.tokenize("filename\n", false)) extra.push_back(t);
  }
  const int64_t n_predict =
      f.integer_in("n_predict", f.integer_in("max_tokens", default_max_tokens, -1, INT32_MAX), -1, INT32_MAX);
  const size_t n_prefix = std::min<size_t>(prefix.size(), size_t(3 * (n_batch / 4)));
  const size_t n_suffix =
      std::min<size_t>(suffix.size(), size_t(std::max<int64_t>(0, n_batch / 4 - (2 + int64_t(prompt.size())))));
  const size_t n_extra = std::min<size_t>(
      size_t(std::max<int64_t>(0, int64_t(n_ctx) - n_batch - 2 * std::max<int64_t>(n_predict, 0))), extra.size());
  prefix.erase(prefix.begin(), prefix.end() - std::ptrdiff_t(n_prefix));
  suffix.resize(n_suffix);
  json ids = json::array();
  for (size_t i = extra.size() - n_extra; i < extra.size(); ++i) ids.push_back(extra[i]);
  if (tok.add_bos && tok.bos >= 0) ids.push_back(tok.bos);
  ids.push_back(tok.fim_pre);
  for (int32_t t : prefix) ids.push_back(t);
  for (int32_t t : prompt) ids.push_back(t);
  ids.push_back(tok.fim_suf);
  for (int32_t t : suffix) ids.push_back(t);
  ids.push_back(tok.fim_mid);
  json r = body;
  for (const char* k : {"input_prefix", "input_suffix", "input_extra", "stream", "messages"}) r.erase(k);
  r["prompt"] = ids;
  p.prompt_texts.push_back(prompt_text_of(ids, tok));
  p.requests.push_back(std::move(r));
  p.options = submit_options(loom::api::GenerationOptions::Endpoint::kCompletion, default_max_tokens);
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
