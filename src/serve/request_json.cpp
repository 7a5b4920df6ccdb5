#include "serve/request_json.h"

#include <algorithm>
#include <ctime>
#include <cstdlib>
#include <random>

#include "chat/chat_prompt.h"
#include "chat/tool_calls.h"
#include "sample/sampler.h"
#include "sample/sampling_defaults.h"

namespace loom::serve {

void request_error(std::string message) { throw RequestError{StatusCode::kInvalidArgument, std::move(message)}; }

void request_error(const Status& st, const std::string& prefix) {
  throw RequestError{st.code() == StatusCode::kOk ? StatusCode::kInvalidArgument : st.code(), prefix + st.message()};
}

int json_depth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}

json parse_body(std::string_view body) {
  if (json_depth(body) > kMaxJsonDepth) {
    request_error("the JSON body is nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
  }
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) request_error("the body is not valid JSON");
  if (!j.is_object()) request_error("the body must be a JSON object");
  return j;
}

namespace {
std::string fmt_number(double d) {
  std::string s = std::to_string(d);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}
}  // namespace

bool Fields::boolean(const char* k, bool def) const {
  const json* v = get(k);
  if (!v) return def;
  if (!v->is_boolean()) request_error(name(k) + ": expected a boolean");
  return v->get<bool>();
}

double Fields::number(const char* k, double def) const {
  const json* v = get(k);
  if (!v) return def;
  if (!v->is_number()) request_error(name(k) + ": expected a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) request_error(name(k) + ": expected a finite number");
  return d;
}

double Fields::number_in(const char* k, double def, double lo, double hi) const {
  const double d = number(k, def);
  if (d < lo || d > hi) request_error(name(k) + ": must be between " + fmt_number(lo) + " and " + fmt_number(hi));
  return d;
}

int64_t Fields::integer(const char* k, int64_t def) const {
  const json* v = get(k);
  if (!v) return def;
  if (v->is_number_integer() || v->is_number_unsigned()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) request_error(name(k) + ": out of range");
    return v->get<int64_t>();
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
  }
  request_error(name(k) + ": expected an integer");
}

int64_t Fields::integer_in(const char* k, int64_t def, int64_t lo, int64_t hi) const {
  const int64_t v = integer(k, def);
  if (v < lo || v > hi) request_error(name(k) + ": must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return v;
}

std::string Fields::string(const char* k, std::string def) const {
  const json* v = get(k);
  if (!v) return def;
  if (!v->is_string()) request_error(name(k) + ": expected a string");
  return v->get<std::string>();
}

std::vector<std::string> Fields::strings(const char* k) const {
  const json* v = get(k);
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
    return out;
  }
  if (!v->is_array()) request_error(name(k) + ": expected a string or an array of strings");
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) request_error(name(k) + "[" + std::to_string(i) + "]: expected a string");
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::vector<int32_t> prompt_tokens(const json& v, const Vocab& vocab, const std::string& where) {
  if (v.is_string()) return vocab.tokenize(v.get<std::string>(), true, true);
  if (!v.is_array()) request_error(where + ": expected a string or an array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer()) request_error(where + "[" + std::to_string(i) + "]: expected a token id");
    const int64_t id = v[i].get<int64_t>();
    if (id < 0 || id >= vocab.n_tokens()) {
      request_error(where + "[" + std::to_string(i) + "]: token " + std::to_string(id) + " is not in the vocabulary");
    }
    ids.push_back(int32_t(id));
  }
  return ids;
}

std::vector<std::vector<int32_t>> embed_inputs(const json& v, const Vocab& vocab, const std::string& field) {
  std::vector<std::vector<int32_t>> out;
  auto one = [&](const json& x, const std::string& where) {
    std::vector<int32_t> ids;
    if (x.is_string()) {
      ids = vocab.tokenize(x.get<std::string>(), true, false);
    } else if (x.is_array()) {
      ids = prompt_tokens(x, vocab, where);
    } else {
      request_error(where + ": expected a string or an array of token ids");
    }
    if (ids.empty()) request_error(where + ": the input produced no tokens");
    out.push_back(std::move(ids));
  };
  if (v.is_string() || (v.is_array() && !v.empty() && v[0].is_number())) {
    one(v, field);
  } else if (v.is_array() && !v.empty()) {
    if (v.size() > 2048) request_error(field + ": at most 2048 inputs");
    for (size_t i = 0; i < v.size(); ++i) one(v[i], field + "[" + std::to_string(i) + "]");
  } else {
    request_error(field + ": expected a string, an array of strings or token arrays");
  }
  return out;
}

std::vector<std::vector<int32_t>> rerank_inputs(const std::string& query, const json& documents, const Vocab& vocab,
                                                std::vector<std::string>* texts) {
  if (!documents.is_array() || documents.empty()) request_error("documents: expected a non-empty array");
  if (documents.size() > 2048) request_error("documents: at most 2048");
  std::vector<std::vector<int32_t>> inputs;
  const std::vector<int32_t> q = vocab.tokenize(query, false, false);
  for (size_t i = 0; i < documents.size(); ++i) {
    const json& d = documents[i];
    std::string text;
    if (d.is_string()) text = d.get<std::string>();
    else if (d.is_object() && d.contains("text") && d["text"].is_string()) text = d["text"].get<std::string>();
    else request_error("documents[" + std::to_string(i) + "]: expected a string");
    inputs.push_back(vocab.rerank_input(q, vocab.tokenize(text, false, false)));
    if (texts) texts->push_back(std::move(text));
  }
  return inputs;
}

namespace {

// The first of several spellings that is present (llama-server's name first, then aliases).
const char* pick(const Fields& f, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (f.has(n)) return n;
  }
  return *names.begin();
}

void parse_logit_bias(const json& lb, const Vocab& vocab, SamplerParams& sp) {
  auto add = [&](const json& k, const json& v, const std::string& where) {
    int64_t id = -1;
    if (k.is_string()) {
      const std::string ks = k.get<std::string>();
      char* end = nullptr;
      id = std::strtoll(ks.c_str(), &end, 10);
      if (ks.empty() || *end) request_error(where + ": keys must be token ids");
    } else if (k.is_number_integer()) {
      id = k.get<int64_t>();
    } else {
      request_error(where + ": keys must be token ids");
    }
    float bias = 0.0f;
    if (v.is_boolean() && !v.get<bool>()) bias = -INFINITY;
    else if (v.is_number()) bias = float(v.get<double>());
    else request_error(where + ": biases must be numbers");
    if (id < 0 || id >= vocab.n_tokens()) {
      request_error(where + ": token " + std::to_string(id) + " is not in the vocabulary");
    }
    sp.logit_bias.emplace_back(int32_t(id), bias);
  };
  if (lb.is_object()) {
    for (auto it = lb.begin(); it != lb.end(); ++it) add(json(it.key()), it.value(), "logit_bias");
  } else if (lb.is_array()) {
    for (size_t i = 0; i < lb.size(); ++i) {
      const json& e = lb[i];
      if (!e.is_array() || e.size() != 2) request_error("logit_bias[" + std::to_string(i) + "]: expected [token, bias]");
      add(e[0], e[1], "logit_bias[" + std::to_string(i) + "]");
    }
  } else {
    request_error("logit_bias: expected an object or an array");
  }
}

// The sampler's numeric settings and its order; a field not in the request takes the sampler's
// default.
void parse_sampler_fields(const Fields& f, SamplerParams& sp) {
  namespace d = sample::defaults;
  sp.temp = float(f.number_in("temperature", d::kTemperature, 0.0, 100.0));
  sp.top_k = int(f.integer_in("top_k", d::kTopK, -1, 1 << 30));
  sp.top_p = float(f.number_in("top_p", d::kTopP, 0.0, 1.0));
  sp.min_p = float(f.number_in("min_p", d::kMinP, 0.0, 1.0));
  sp.typical_p = float(f.number_in(pick(f, {"typical_p", "typ_p"}), d::kTypicalP, 0.0, 1.0));
  sp.penalty_repeat = float(f.number_in(pick(f, {"repeat_penalty", "penalty_repeat"}), d::kPenaltyRepeat, 0.0, 100.0));
  sp.penalty_last_n = int(f.integer_in(pick(f, {"repeat_last_n", "penalty_last_n"}), d::kPenaltyLastN, -1, 1 << 30));
  sp.penalty_freq = float(f.number_in(pick(f, {"frequency_penalty", "penalty_freq"}), d::kPenaltyFreq, -2.0, 2.0));
  sp.penalty_present = float(f.number_in(pick(f, {"presence_penalty", "penalty_present"}), d::kPenaltyPresent, -2.0, 2.0));
  sp.mirostat = int(f.integer_in("mirostat", d::kMirostat, 0, 2));
  sp.mirostat_tau = float(f.number_in("mirostat_tau", d::kMirostatTau, 0.0, 1000.0));
  sp.mirostat_eta = float(f.number_in("mirostat_eta", d::kMirostatEta, 0.0, 1000.0));
  sp.dynatemp_range = float(f.number_in("dynatemp_range", d::kDynatempRange, 0.0, 100.0));
  sp.dynatemp_exponent = float(f.number_in("dynatemp_exponent", d::kDynatempExponent, 0.0, 100.0));
  sp.xtc_probability = float(f.number_in("xtc_probability", d::kXtcProbability, 0.0, 1.0));
  sp.xtc_threshold = float(f.number_in("xtc_threshold", d::kXtcThreshold, 0.0, 1.0));
  sp.min_keep = int(f.integer_in("min_keep", d::kMinKeep, 0, 1 << 20));
  sp.dry.multiplier = float(f.number_in("dry_multiplier", d::kDryMultiplier, 0.0, 1000.0));
  sp.dry.base = float(f.number_in("dry_base", d::kDryBase, 1.0, 1000.0));
  sp.dry.allowed_length = int(f.integer_in("dry_allowed_length", d::kDryAllowedLength, 0, 1 << 20));
  sp.dry.penalty_last_n = int(f.integer_in("dry_penalty_last_n", d::kDryPenaltyLastN, -1, 1 << 30));
  if (f.has("dry_sequence_breakers")) sp.dry.sequence_breakers = f.strings("dry_sequence_breakers");
  if (f.has("samplers")) {
    std::string order;
    const json& v = *f.get("samplers");
    if (v.is_string()) {
      order = v.get<std::string>();
    } else {
      for (const auto& s : f.strings("samplers")) order += s + ";";
    }
    auto parsed = sample::parse_sampler_order(order);
    if (!parsed) request_error(parsed.status(), "samplers: ");
    sp.order = *parsed;
  }
}

// Lengths, stops, slots and prompt-lookup drafting.
void parse_length_fields(const Fields& f, int default_max_tokens, GenerateRequest& r) {
  // Lengths: max_completion_tokens (chat), max_tokens, n_predict (llama.cpp); the last given wins.
  int64_t max_tokens = default_max_tokens;
  for (const char* k : {"n_predict", "max_tokens", "max_completion_tokens"}) {
    if (f.has(k)) max_tokens = f.integer_in(k, -1, -1, int64_t(1) << 30);
  }
  r.max_tokens = int(max_tokens);
  r.n = int(f.integer_in("n", 1, 1, 128));
  r.stop = f.strings("stop");
  for (const auto& s : r.stop) {
    if (s.size() > 4096) request_error("stop: each stop string must be at most 4096 bytes");
  }
  if (r.stop.size() > 16) request_error("stop: at most 16 stop strings");
  r.ignore_eos = f.boolean("ignore_eos", false);
  r.cache_prompt = f.boolean("cache_prompt", true);
  r.n_keep = int(f.integer_in("n_keep", 0, -1, 1 << 30));
  r.slot = int(f.integer_in("id_slot", -1, -1, 1 << 16));
  // Speculative decoding by prompt lookup (loom): the n-gram size; llama-server's spellings of
  // the draft limits.
  r.lookup = int(f.integer_in("lookup", 0, 0, 64));
  r.draft_max = int(f.integer_in("speculative.n_max", 16, 0, 256));
  r.draft_min = int(f.integer_in("speculative.n_min", 0, 0, 256));
}

// logprobs: chat has logprobs (bool) + top_logprobs; completions has logprobs (int);
// llama.cpp's n_probs is both.
void parse_logprob_fields(const Fields& f, bool chat, GenerateRequest& r) {
  if (chat) {
    r.logprobs = f.boolean("logprobs", false);
    r.top_logprobs = r.logprobs ? int(f.integer_in("top_logprobs", 0, 0, kMaxTopLogprobs)) : 0;
  } else if (f.has("logprobs")) {
    const json& v = *f.get("logprobs");
    if (v.is_boolean()) {
      r.logprobs = v.get<bool>();
    } else {
      r.top_logprobs = int(f.integer_in("logprobs", 0, 0, kMaxTopLogprobs));
      r.logprobs = true;
    }
  }
  if (f.has("n_probs")) {
    r.top_logprobs = int(f.integer_in("n_probs", 0, 0, kMaxTopLogprobs));
    r.logprobs = r.logprobs || r.top_logprobs > 0;
  }
}

// Grammars: GBNF, or a JSON schema (llama.cpp's top-level json_schema: an object, or its JSON
// text as llama.node passes it).
void parse_grammar_fields(const Fields& f, SamplerParams& sp) {
  if (f.has("grammar")) sp.grammar = f.string("grammar");
  if (const json* js = f.get("json_schema")) {
    if (!sp.grammar.empty()) request_error("give either grammar or json_schema, not both");
    json schema = *js;
    if (schema.is_string()) {
      schema = json::parse(js->get<std::string>(), nullptr, false);
      if (schema.is_discarded()) request_error("json_schema: not valid JSON");
    }
    auto g = chat::response_format_grammar(json{{"type", "json_object"}, {"schema", schema}});
    if (!g) request_error(g.status(), "json_schema: ");
    sp.grammar = *g;
  }
}

}  // namespace

void parse_generation(const Fields& f, const Vocab& vocab, int default_max_tokens, bool chat, GenerateRequest& r) {
  SamplerParams& sp = r.sampling;
  parse_sampler_fields(f, sp);
  // seed: absent or -1 = random.
  const int64_t seed = f.integer("seed", -1);
  sp.seed = seed >= 0 ? uint64_t(seed) : std::random_device{}();
  // temperature 0 is greedy whatever the other samplers say.
  if (sp.temp <= 0.0f) sp.xtc_probability = 0.0f;
  if (const json* lb = f.get("logit_bias")) parse_logit_bias(*lb, vocab, sp);
  parse_length_fields(f, default_max_tokens, r);
  parse_logprob_fields(f, chat, r);
  parse_grammar_fields(f, sp);
}

namespace {

// The token count of the conversation's first n messages rendered without a generation prompt,
// when that is a prefix of the whole prompt (text and tokens); 0 otherwise.
int rendered_prefix(const chat::ChatTemplate& tmpl, const chat::ChatInputs& in, size_t n, const std::string& whole,
                    const std::vector<int32_t>& whole_ids, const Vocab& vocab) {
  if (n == 0 || n >= in.messages.size()) return 0;
  chat::ChatInputs part = in;
  part.messages = json::array();
  for (size_t i = 0; i < n; ++i) part.messages.push_back(in.messages[i]);
  part.add_generation_prompt = false;
  chat::ChatRequestOptions po;
  po.render.lenient = true;  // as the whole prompt was rendered
  auto prepared = chat::prepare_chat(tmpl, part, po);
  if (!prepared || prepared->prompt.empty() || whole.compare(0, prepared->prompt.size(), prepared->prompt) != 0) return 0;
  const std::vector<int32_t> ids = chat::tokenize_chat_prompt(vocab, prepared->prompt);
  if (ids.empty() || ids.size() >= whole_ids.size() || !std::equal(ids.begin(), ids.end(), whole_ids.begin())) return 0;
  return int(ids.size());
}

// The conversation, tools and template context of a chat request.
chat::ChatInputs chat_inputs(const Fields& f, const json& msgs) {
  chat::ChatInputs in;
  in.messages = msgs;
  if (const json* t = f.get("tools")) in.tools = *t;
  if (const json* k = f.get("chat_template_kwargs")) {
    if (!k->is_object()) request_error("chat_template_kwargs: expected an object");
    in.extra = *k;
  }
  in.add_generation_prompt = f.boolean("add_generation_prompt", true);
  // The template context as llama.cpp gives it when serving: today's date_string ("%d %b %Y",
  // Llama 3.x's system header) unless the request sets it.
  if (!in.extra.is_object()) in.extra = json::object();
  if (!in.extra.contains("date_string")) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
    in.extra["date_string"] = buf;
  }
  return in;
}

// continue_final_message (true, "content", "reasoning_content") and llama-server's prefill: a
// conversation ending with an assistant message continues it.
void parse_continue_final(const Fields& f, const json& msgs, chat::ChatInputs& in) {
  using Continue = chat::ChatInputs::Continue;
  if (const json* c = f.get("continue_final_message")) {
    if (c->is_boolean()) in.continue_final = c->get<bool>() ? Continue::kAuto : Continue::kNone;
    else if (c->is_string() && *c == "content") in.continue_final = Continue::kContent;
    else if (c->is_string() && *c == "reasoning_content") in.continue_final = Continue::kReasoning;
    else request_error("continue_final_message: expected a boolean, \"content\" or \"reasoning_content\"");
  }
  const json& last = msgs.back();
  const bool ends_assistant = last.is_object() && last.contains("role") && last["role"] == "assistant";
  if (in.continue_final == Continue::kNone && ends_assistant) {
    const json& before = msgs.size() >= 2 ? msgs[msgs.size() - 2] : json();
    if (before.is_object() && before.contains("role") && before["role"] == "assistant") {
      request_error("messages: cannot have 2 or more assistant messages at the end of the list");
    }
    in.continue_final = Continue::kAuto;  // llama-server's prefill_assistant (on by default)
    in.add_generation_prompt = false;
  }
  if (in.continue_final != Continue::kNone) {
    if (in.add_generation_prompt) request_error("cannot set both add_generation_prompt and continue_final_message to true");
    if (ends_assistant && last.contains("tool_calls") && last["tool_calls"].is_array() && !last["tool_calls"].empty()) {
      request_error("continue_final_message: cannot continue an assistant message that contains tool calls");
    }
  }
}

// tool_choice, parallel_tool_calls, response_format.
chat::ChatRequestOptions chat_request_options(const Fields& f) {
  chat::ChatRequestOptions co;
  co.render.lenient = true;  // serving renders as llama.cpp where Python Jinja2 raises
  if (const json* tc = f.get("tool_choice")) {
    auto c = chat::parse_tool_choice(*tc);
    if (!c) request_error(c.status());
    co.tool_choice = *c;
  }
  co.parallel_tool_calls = f.boolean("parallel_tool_calls", false);
  if (const json* rf = f.get("response_format")) co.response_format = *rf;
  return co;
}

void parse_reasoning_fields(const Fields& f, SamplerParams& sp) {
  // A thinking budget (llama-server's reasoning_budget_tokens, Anthropic's thinking budget as
  // thinking_budget_tokens): -1 none.
  const int64_t budget = f.integer_in(pick(f, {"reasoning_budget_tokens", "thinking_budget_tokens"}), -1, -1, INT32_MAX);
  if (budget >= 0) {
    sp.reasoning_budget = int32_t(budget);
    sp.reasoning_budget_message = f.string("reasoning_budget_message");
  }
  // llama-server's reasoning_control: the reasoning block can be ended while it runs
  // (/v1/chat/completions/control, Scheduler::end_reasoning).
  sp.reasoning_control = f.boolean("reasoning_control", false);
  if (sp.reasoning_control && budget < 0) sp.reasoning_budget_message = f.string("reasoning_budget_message");
}

// Checkpoints where the system messages and the conversation before the last user message end
// (when they render as prefixes of the prompt).
void add_prompt_checkpoints(const chat::ChatTemplate& tmpl, const chat::ChatInputs& in, const std::string& prompt_text,
                            const Vocab& vocab, GenerateRequest& r) {
  size_t n_system = 0, last_user = 0;
  for (size_t i = 0; i < in.messages.size(); ++i) {
    const json& m = in.messages[i];
    const std::string role =
        m.is_object() && m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>() : "";
    if (role == "system" && n_system == i) n_system = i + 1;
    if (role == "user") last_user = i;
  }
  for (size_t n : {n_system, last_user}) {
    const int at = rendered_prefix(tmpl, in, n, prompt_text, r.prompt, vocab);
    if (at > 0 && std::find(r.prompt_checkpoints.begin(), r.prompt_checkpoints.end(), at) == r.prompt_checkpoints.end()) {
      r.prompt_checkpoints.push_back(at);
    }
  }
}

}  // namespace

ChatGeneration parse_chat_generation(const Fields& f, const chat::ChatTemplate& tmpl, const Vocab& vocab,
                                     int default_max_tokens, uint64_t id_seed, bool checkpoints) {
  const json* msgs = f.get("messages");
  if (!msgs || !msgs->is_array() || msgs->empty()) request_error("messages: expected a non-empty array");
  chat::ChatInputs in = chat_inputs(f, *msgs);
  parse_continue_final(f, *msgs, in);
  const chat::ChatRequestOptions co = chat_request_options(f);
  auto prepared = chat::prepare_chat(tmpl, in, co);
  if (!prepared) request_error(prepared.status());

  ChatGeneration g;
  GenerateRequest& r = g.request;
  parse_generation(f, vocab, default_max_tokens, /*chat=*/true, r);
  parse_reasoning_fields(f, r.sampling);
  if (!prepared->grammar.empty()) {
    if (!r.sampling.grammar.empty()) request_error("grammar / json_schema cannot be combined with tools or response_format");
    r.sampling.grammar = prepared->grammar;
  }
  for (const auto& s : prepared->stops) r.stop.push_back(s);
  r.unparse_special = !prepared->preserved_tokens.empty();
  r.prompt = chat::tokenize_chat_prompt(vocab, prepared->prompt);
  if (checkpoints && in.messages.is_array()) add_prompt_checkpoints(tmpl, in, prepared->prompt, vocab, r);
  g.format = prepared->format;
  g.parse_options = prepared->parse_options(id_seed);
  g.triggers = chat::tool_call_syntax(prepared->format).triggers;
  if (!prepared->tools_present) g.triggers.clear();
  g.prompt_text = std::move(prepared->prompt);
  g.preserved_tokens = std::move(prepared->preserved_tokens);
  return g;
}

}  // namespace loom::serve
