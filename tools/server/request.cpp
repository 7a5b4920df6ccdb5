#include "request.h"

#include <cmath>
#include <cstdlib>
#include <random>

#include "chat/chat_prompt.h"
#include "sample/json_schema.h"

namespace loom::server {

using serve::GenerateRequest;

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

// Sampling parameters (OpenAI names, llama.cpp's extensions and defaults).
void parse_generation(const Fields& f, GenerateRequest& r, bool chat, const RequestEnv& env) {
  SamplerParams& sp = r.sampling;
  sp.temp = float(f.number_in("temperature", 0.8, 0.0, 100.0));
  sp.top_k = int(f.integer_in("top_k", 40, -1, 1 << 30));
  sp.top_p = float(f.number_in("top_p", 0.95, 0.0, 1.0));
  sp.min_p = float(f.number_in("min_p", 0.05, 0.0, 1.0));
  sp.typical_p = float(f.number_in("typical_p", f.number_in("typ_p", 1.0, 0.0, 1.0), 0.0, 1.0));
  sp.penalty_repeat = float(f.number_in("repeat_penalty", 1.0, 0.0, 100.0));
  sp.penalty_last_n = int(f.integer_in("repeat_last_n", 64, -1, 1 << 30));
  sp.penalty_freq = float(f.number_in("frequency_penalty", 0.0, -2.0, 2.0));
  sp.penalty_present = float(f.number_in("presence_penalty", 0.0, -2.0, 2.0));
  sp.mirostat = int(f.integer_in("mirostat", 0, 0, 2));
  sp.mirostat_tau = float(f.number_in("mirostat_tau", 5.0, 0.0, 1000.0));
  sp.mirostat_eta = float(f.number_in("mirostat_eta", 0.1, 0.0, 1000.0));
  sp.dynatemp_range = float(f.number_in("dynatemp_range", 0.0, 0.0, 100.0));
  sp.dynatemp_exponent = float(f.number_in("dynatemp_exponent", 1.0, 0.0, 100.0));
  sp.xtc_probability = float(f.number_in("xtc_probability", 0.0, 0.0, 1.0));
  sp.xtc_threshold = float(f.number_in("xtc_threshold", 0.1, 0.0, 1.0));
  sp.min_keep = int(f.integer_in("min_keep", 0, 0, 1 << 20));
  sp.dry.multiplier = float(f.number_in("dry_multiplier", 0.0, 0.0, 1000.0));
  sp.dry.base = float(f.number_in("dry_base", 1.75, 1.0, 1000.0));
  sp.dry.allowed_length = int(f.integer_in("dry_allowed_length", 2, 0, 1 << 20));
  sp.dry.penalty_last_n = int(f.integer_in("dry_penalty_last_n", -1, -1, 1 << 30));
  if (f.has("dry_sequence_breakers")) sp.dry.sequence_breakers = f.strings("dry_sequence_breakers");
  if (f.has("samplers")) {
    std::string order;
    const json& v = *f.get("samplers");
    if (v.is_string()) order = v.get<std::string>();
    else for (const auto& s : f.strings("samplers")) order += s + ";";
    auto parsed = parse_sampler_order(order);
    if (!parsed) bad_request("samplers: " + parsed.status().message());
    sp.order = *parsed;
  }
  // seed: absent or -1 = random.
  const int64_t seed = f.integer("seed", -1);
  sp.seed = seed >= 0 ? uint64_t(seed) : std::random_device{}();
  // temperature 0 is greedy whatever the other samplers say.
  if (sp.temp <= 0.0f) sp.xtc_probability = 0.0f;
  // logit_bias: OpenAI's {"token id": bias}; llama.cpp's [[id, bias], ...] (bias false = ban).
  if (const json* lb = f.get("logit_bias")) {
    auto add = [&](const json& k, const json& v, const std::string& where) {
      int64_t id;
      if (k.is_string()) {
        const std::string ks = k.get<std::string>();
        char* end = nullptr;
        id = std::strtoll(ks.c_str(), &end, 10);
        if (ks.empty() || *end) bad_request(where + ": keys must be token ids");
      } else if (k.is_number_integer()) {
        id = k.get<int64_t>();
      } else {
        bad_request(where + ": keys must be token ids");
      }
      float bias;
      if (v.is_boolean() && !v.get<bool>()) bias = -INFINITY;
      else if (v.is_number()) bias = float(v.get<double>());
      else bad_request(where + ": biases must be numbers");
      if (id < 0 || id >= env.model.vocab().n_tokens()) bad_request(where + ": token " + std::to_string(id) + " is not in the vocabulary");
      sp.logit_bias.emplace_back(int32_t(id), bias);
    };
    if (lb->is_object()) {
      for (auto it = lb->begin(); it != lb->end(); ++it) add(json(it.key()), it.value(), "logit_bias");
    } else if (lb->is_array()) {
      for (size_t i = 0; i < lb->size(); ++i) {
        const json& e = (*lb)[i];
        if (!e.is_array() || e.size() != 2) bad_request("logit_bias[" + std::to_string(i) + "]: expected [token, bias]");
        add(e[0], e[1], "logit_bias[" + std::to_string(i) + "]");
      }
    } else {
      bad_request("logit_bias: expected an object or an array");
    }
  }
  // Lengths: max_completion_tokens (chat), max_tokens, n_predict (llama.cpp).
  int64_t max_tokens = env.n_predict;
  for (const char* k : {"n_predict", "max_tokens", "max_completion_tokens"}) {
    if (f.has(k)) max_tokens = f.integer_in(k, -1, -1, int64_t(1) << 30);
  }
  r.max_tokens = int(max_tokens);
  r.n = int(f.integer_in("n", 1, 1, 128));
  r.stop = f.strings("stop");
  for (const auto& s : r.stop) {
    if (s.size() > 4096) bad_request("stop: each stop string must be at most 4096 bytes");
  }
  if (r.stop.size() > 16) bad_request("stop: at most 16 stop strings");
  r.ignore_eos = f.boolean("ignore_eos", false);
  r.cache_prompt = f.boolean("cache_prompt", true);
  r.n_keep = int(f.integer_in("n_keep", 0, -1, 1 << 30));
  // logprobs: chat has logprobs (bool) + top_logprobs; completions has logprobs (int);
  // llama.cpp's n_probs is both.
  if (chat) {
    r.logprobs = f.boolean("logprobs", false);
    r.top_logprobs = r.logprobs ? int(f.integer_in("top_logprobs", 0, 0, serve::kMaxTopLogprobs)) : 0;
  } else if (f.has("logprobs")) {
    const json& v = *f.get("logprobs");
    if (v.is_boolean()) {
      r.logprobs = v.get<bool>();
    } else {
      r.top_logprobs = int(f.integer_in("logprobs", 0, 0, serve::kMaxTopLogprobs));
      r.logprobs = true;
    }
  }
  if (f.has("n_probs")) {
    r.top_logprobs = int(f.integer_in("n_probs", 0, 0, serve::kMaxTopLogprobs));
    r.logprobs = r.logprobs || r.top_logprobs > 0;
  }
  // Grammars: GBNF, a JSON schema (llama.cpp's top-level json_schema).
  if (f.has("grammar")) sp.grammar = f.string("grammar");
  if (const json* js = f.get("json_schema")) {
    if (!sp.grammar.empty()) bad_request("give either grammar or json_schema, not both");
    auto g = chat::response_format_grammar(json{{"type", "json_object"}, {"schema", *js}});
    if (!g) throw http_error(Status(g.status().code(), "json_schema: " + g.status().message()));
    sp.grammar = *g;
  }
}

ParsedChat parse_chat_request(const json& body, const RequestEnv& env) {
  const Fields f(body);
  const json* msgs = f.get("messages");
  if (!msgs || !msgs->is_array() || msgs->empty()) bad_request("messages: expected a non-empty array");
  chat::ChatInputs in;
  in.messages = *msgs;
  if (const json* t = f.get("tools")) in.tools = *t;
  if (const json* k = f.get("chat_template_kwargs")) {
    if (!k->is_object()) bad_request("chat_template_kwargs: expected an object");
    in.extra = *k;
  }
  in.add_generation_prompt = f.boolean("add_generation_prompt", true);
  chat::ChatRequestOptions co;
  if (const json* tc = f.get("tool_choice")) {
    auto c = chat::parse_tool_choice(*tc);
    if (!c) throw http_error(c.status());
    co.tool_choice = *c;
  }
  co.parallel_tool_calls = f.boolean("parallel_tool_calls", false);
  if (const json* rf = f.get("response_format")) co.response_format = *rf;
  auto prepared = chat::prepare_chat(env.tmpl, in, co);
  if (!prepared) throw http_error(prepared.status());

  ParsedChat out;
  GenerateRequest& r = out.gen;
  parse_generation(f, r, /*chat=*/true, env);
  if (!prepared->grammar.empty()) {
    if (!r.sampling.grammar.empty()) bad_request("grammar / json_schema cannot be combined with tools or response_format");
    r.sampling.grammar = prepared->grammar;
  }
  for (const auto& s : prepared->stops) r.stop.push_back(s);
  r.unparse_special = !prepared->preserved_tokens.empty();
  r.prompt = chat::tokenize_chat_prompt(env.model.vocab(), prepared->prompt);
  out.prepared = std::move(*prepared);
  return out;
}

ParsedCompletion parse_completion_request(const json& body, const RequestEnv& env) {
  const Fields f(body);
  const json* p = f.get("prompt");
  if (!p) bad_request("prompt: required");
  // A string, an array of token ids, or an array of strings / token arrays (one choice each).
  ParsedCompletion out;
  std::vector<std::vector<int32_t>>& prompts = out.prompts;
  const Vocab& vocab = env.model.vocab();
  auto tokens_of = [&](const json& v, const std::string& where) -> std::vector<int32_t> {
    if (v.is_string()) return vocab.tokenize(v.get<std::string>(), true, true);
    if (!v.is_array()) bad_request(where + ": expected a string or an array of token ids");
    std::vector<int32_t> ids;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer()) bad_request(where + "[" + std::to_string(i) + "]: expected a token id");
      const int64_t id = v[i].get<int64_t>();
      if (id < 0 || id >= vocab.n_tokens()) bad_request(where + "[" + std::to_string(i) + "]: token " + std::to_string(id) + " is not in the vocabulary");
      ids.push_back(int32_t(id));
    }
    return ids;
  };
  if (p->is_string()) {
    prompts.push_back(tokens_of(*p, "prompt"));
  } else if (p->is_array() && !p->empty() && (p->at(0).is_string() || p->at(0).is_array())) {
    if (p->size() > 64) bad_request("prompt: at most 64 prompts per request");
    for (size_t i = 0; i < p->size(); ++i) prompts.push_back(tokens_of(p->at(i), "prompt[" + std::to_string(i) + "]"));
  } else {
    prompts.push_back(tokens_of(*p, "prompt"));
  }
  GenerateRequest& r = out.gen;
  parse_generation(f, r, /*chat=*/false, env);
  return out;
}

}  // namespace loom::server
