// Grammars for tool calls (each format's call syntax over the tools' argument schemas) and for
// response_format.
#include <algorithm>
#include <cctype>

#include "chat/tool_calls_internal.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"

namespace loom::chat {
using namespace detail;  // the tool-call internals (tool_calls_internal.h)

namespace {

// The JSON form of a name ("\"get_weather\"") as a GBNF literal.
std::string json_string_literal(const std::string& s) { return sample::gbnf_literal(json(s).dump()); }

constexpr const char* kSp = R"(tc-sp ::= | " " | "\n"{1,2} [ \t]{0,20})";

struct Tool {
  std::string name;
  json parameters;
  std::string args_rule;  // the root rule of its arguments' grammar
};

// kQwenXml's string parameter: any text without "\n</parameter>" (which ends it), as the states of
// a matcher of that text: rule xs<k> after k of its characters have matched. ('\n' is its only
// newline, so a match can only begin there.)
std::string xml_string_rules() {
  const std::string close = "\n</parameter>";
  std::string out;
  for (size_t k = 0; k < close.size(); ++k) {
    const auto esc = [](char c) { return c == '\n' ? std::string("\\n") : std::string(1, c); };
    std::string alts;
    const char c = close[k];
    if (k + 1 < close.size()) alts += "\"" + esc(c) + "\" xs" + std::to_string(k + 1);
    if (c != '\n') alts += std::string(alts.empty() ? "" : " | ") + "\"\\n\" xs1";
    alts += std::string(alts.empty() ? "" : " | ") + "[^" + (c == '\n' ? std::string() : esc(c)) + "\\n] xs0";
    out += "xs" + std::to_string(k) + " ::= ( " + alts + " )?\n";
  }
  return out;
}

// kGemma4's values (g4_value's syntax, compact as the template writes them): rules named from
// `name`, built into *rules (and converted JSON grammars into *sub). Strings are
// <|"|>text<|"|> with any text without <|"|> (the states of a matcher of it: g4s<k> after k of its
// characters; '<' only begins it); numbers, booleans and null are their schema's JSON; an object
// with "properties" has those keys in dictsort's order (case-insensitive), the required ones
// always, others optionally; an array has its items' values; anything else is any Gemma value.
constexpr const char* kGemma4ValueRules =
    R"(g4-string ::= "<|\"|>" g4s0 "<|\"|>")"
    "\n"
    R"(g4s0 ::= ( "<" g4s1 | [^<] g4s0 )?)"
    "\n"
    R"(g4s1 ::= ( "|" g4s2 | "<" g4s1 | [^|<] g4s0 )?)"
    "\n"
    R"(g4s2 ::= ( "\"" g4s3 | "<" g4s1 | [^"<] g4s0 )?)"
    "\n"
    R"(g4s3 ::= ( "|" g4s4 | "<" g4s1 | [^|<] g4s0 )?)"
    "\n"
    R"(g4s4 ::= ( "<" g4s1 | [^><] g4s0 )?)"
    "\n"
    R"(g4-any ::= g4-string | g4-dict | g4-list | g4-num | "true" | "false" | "null")"
    "\n"
    R"(g4-dict ::= "{" ( g4-kv ( "," g4-kv )* )? "}")"
    "\n"
    R"(g4-kv ::= [a-zA-Z0-9_.-]+ ":" g4-any)"
    "\n"
    R"(g4-list ::= "[" ( g4-any ( "," g4-any )* )? "]")"
    "\n"
    R"(g4-num ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)"
    "\n";

// Jinja's dictsort order (case-insensitive, stable).
std::vector<std::string> dictsort_keys(const json& props) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : props.items()) keys.push_back(k);
  const auto lower = [](std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  std::stable_sort(keys.begin(), keys.end(),
                   [&](const std::string& a, const std::string& b) { return lower(a) < lower(b); });
  return keys;
}

Expected<std::string> g4_value_rule(const json& schema, const std::string& name, std::string* rules, std::string* sub,
                                    int depth = 0) {
  if (!schema.is_object() || depth > 32) return std::string("g4-any");
  const auto literal_of = [](const json& v) {
    return v.is_string() ? sample::gbnf_literal("<|\"|>" + v.get<std::string>() + "<|\"|>") : sample::gbnf_literal(v.dump());
  };
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array() && !e->empty()) {
    std::string alts;
    for (const json& v : *e) alts += (alts.empty() ? "" : " | ") + literal_of(v);
    *rules += name + " ::= " + alts + "\n";
    return name;
  }
  if (auto c = schema.find("const"); c != schema.end()) {
    *rules += name + " ::= " + literal_of(*c) + "\n";
    return name;
  }
  auto t = schema.find("type");
  if (t == schema.end() || !t->is_string()) return std::string("g4-any");
  const std::string type = *t;
  if (type == "string") return std::string("g4-string");
  if (type == "integer" || type == "number" || type == "boolean" || type == "null") {
    auto g = sample::json_schema_to_grammar(schema);
    if (!g) return g.status();
    *sub += prefix_gbnf_rules(*g, name + "-j-");
    return name + "-j-root";
  }
  if (type == "array") {
    auto it = schema.find("items");
    LOOM_ASSIGN_OR_RETURN(std::string item,
                          g4_value_rule(it != schema.end() ? *it : json(), name + "-i", rules, sub, depth + 1));
    *rules += name + " ::= \"[\" ( " + item + " ( \",\" " + item + " )* )? \"]\"\n";
    return name;
  }
  if (type != "object") return std::string("g4-any");
  auto props = schema.find("properties");
  if (props == schema.end() || !props->is_object()) return std::string("g4-dict");
  const json req = schema.contains("required") && schema["required"].is_array() ? schema["required"] : json::array();
  std::vector<std::pair<std::string, bool>> items;  // (key:value rule, required)
  size_t k = 0;
  for (const std::string& key : dictsort_keys(*props)) {
    const std::string prule = name + "-p" + std::to_string(k++);
    LOOM_ASSIGN_OR_RETURN(std::string v, g4_value_rule((*props)[key], prule + "-v", rules, sub, depth + 1));
    *rules += prule + " ::= " + sample::gbnf_literal(key + ":") + " " + v + "\n";
    items.emplace_back(prule, std::find(req.begin(), req.end(), json(key)) != req.end());
  }
  // name-a<n>-first / -rest: the members from the n-th on, without or with a leading ",".
  const auto a = [&](size_t n, bool first) { return name + "-a" + std::to_string(n) + (first ? "-first" : "-rest"); };
  *rules += a(items.size(), true) + " ::= \"\"\n" + a(items.size(), false) + " ::= \"\"\n";
  for (size_t n = items.size(); n-- > 0;) {
    const std::string& pr = items[n].first;
    *rules += a(n, true) + " ::= " + pr + " " + a(n + 1, false) + (items[n].second ? "" : " | " + a(n + 1, true)) + "\n";
    *rules +=
        a(n, false) + " ::= \",\" " + pr + " " + a(n + 1, false) + (items[n].second ? "" : " | " + a(n + 1, false)) + "\n";
  }
  *rules += name + " ::= \"{\" " + a(0, true) + " \"}\"\n";
  return name;
}

}  // namespace

// --- grammars --------------------------------------------------------------------------------

std::string prefix_gbnf_rules(std::string_view g, std::string_view prefix) {
  const auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  };
  std::string out;
  out.reserve(g.size() + g.size() / 4);
  size_t i = 0;
  // Copies a delimited span (a literal, a class or a repetition count) with its escapes.
  const auto span = [&](char close) {
    out.push_back(g[i++]);
    while (i < g.size() && g[i] != close) {
      if (g[i] == '\\' && i + 1 < g.size()) out.push_back(g[i++]);
      out.push_back(g[i++]);
    }
    if (i < g.size()) out.push_back(g[i++]);
  };
  while (i < g.size()) {
    const char c = g[i];
    if (c == '#') {
      while (i < g.size() && g[i] != '\n') ++i;
    } else if (c == '"') {
      span('"');
    } else if (c == '[') {
      span(']');
    } else if (c == '{') {
      span('}');
    } else if (word(c)) {
      out += prefix;
      while (i < g.size() && word(g[i])) out.push_back(g[i++]);
    } else {
      out.push_back(g[i++]);
    }
  }
  return out;
}

namespace {

// A tool-call grammar being built: the per-tool alternatives of tc-body, their rules, and the
// arguments' grammars (their rules prefixed).
struct CallGrammar {
  std::vector<Tool> tools;
  std::string rules;
  std::string alts;  // tc-body ::= one alternative per tool
  std::string sub;

  void add_alt(size_t i, const std::string& body) {
    const std::string rule = "tc-f" + std::to_string(i);
    rules += rule + " ::= " + body + "\n";
    alts += (alts.empty() ? "" : " | ") + rule;
  }
};

const std::string kKv = R"( tc-sp ":" tc-sp )";
const std::string kComma = R"( tc-sp "," tc-sp )";

// The tools (only the forced one, when named) with their arguments' grammars.
Status collect_tools(const json& norm, const std::string* forced_name, CallGrammar& g) {
  for (size_t i = 0; i < norm.size(); ++i) {
    const json& f = norm[i]["function"];
    const std::string name = f["name"];
    if (forced_name && name != *forced_name) continue;
    auto gr = sample::json_schema_to_grammar(f["parameters"]);
    if (!gr) {
      return Status(gr.status().code(), "tools[" + std::to_string(i) + "].function.parameters: " + gr.status().message());
    }
    const std::string prefix = "t" + std::to_string(i) + "-";
    g.sub += prefix_gbnf_rules(*gr, prefix);
    g.tools.push_back(Tool{name, f["parameters"], prefix + "root"});
  }
  if (g.tools.empty()) return invalid_argument("tool_choice: no tool named '" + *forced_name + "' in tools");
  return Status::ok();
}

// Each function below adds its format's alternatives and rules to `g` and returns the root rule.

std::string hermes_calls(CallGrammar& g, bool parallel) {
  for (size_t i = 0; i < g.tools.size(); ++i)
    g.add_alt(i, R"("{" tc-sp "\"name\"")" + kKv + json_string_literal(g.tools[i].name) + kComma + R"("\"arguments\"")" +
                     kKv + g.tools[i].args_rule + R"( "}" tc-sp)");
  g.rules += R"(tc-call ::= "<tool_call>" tc-sp tc-body "</tool_call>")"
             "\n";
  return parallel ? "tc-call ( tc-sp tc-call )*" : "tc-call";
}

std::string llama31_calls(CallGrammar& g) {
  for (size_t i = 0; i < g.tools.size(); ++i)
    g.add_alt(i, R"("{" tc-sp ( "\"type\"")" + kKv + R"("\"function\"")" + kComma + R"()? "\"name\"")" + kKv +
                     json_string_literal(g.tools[i].name) + kComma + R"("\"parameters\"")" + kKv + g.tools[i].args_rule +
                     R"( "}" tc-sp)");
  return "tc-body";  // one call: the template refuses several
}

std::string mistral_calls(CallGrammar& g, bool parallel) {
  for (size_t i = 0; i < g.tools.size(); ++i)
    g.add_alt(i, R"("{" tc-sp "\"name\"")" + kKv + json_string_literal(g.tools[i].name) + kComma + R"("\"arguments\"")" +
                     kKv + g.tools[i].args_rule + R"( "," tc-sp "\"id\"")" + kKv + R"(tc-id tc-sp "}" tc-sp)");
  g.rules += R"(tc-id ::= "\"" [a-zA-Z0-9]{9} "\"")"
             "\n";
  return parallel ? R"("[TOOL_CALLS]" "[" tc-sp tc-body ( "," tc-sp tc-body )* "]")"
                  : R"("[TOOL_CALLS]" "[" tc-sp tc-body "]")";
}

std::string mistral_args_calls(CallGrammar& g, bool parallel) {
  for (size_t i = 0; i < g.tools.size(); ++i)
    g.add_alt(i, sample::gbnf_literal(g.tools[i].name) + R"( "[ARGS]" )" + g.tools[i].args_rule);
  g.rules += R"(tc-call ::= "[TOOL_CALLS]" tc-body)"
             "\n";
  return parallel ? "tc-call+" : "tc-call";
}

// llama.cpp's schema for the generic format, converted as one (the whole grammar).
Expected<std::string> generic_grammar(const std::vector<Tool>& list, bool parallel, bool allow_response) {
  json alts_schema = json::array();
  for (const Tool& t : list) {
    json props = json::object();
    props["name"] = json{{"type", "string"}, {"const", t.name}};
    props["arguments"] = t.parameters;
    json req = json::array({"name", "arguments"});
    if (parallel) {
      props["id"] = json{{"type", "string"}, {"minLength", 4}};
      req.push_back("id");
    }
    alts_schema.push_back(json{{"type", "object"}, {"properties", std::move(props)}, {"required", std::move(req)}});
  }
  json one = alts_schema.size() == 1 ? alts_schema[0] : json{{"anyOf", alts_schema}};
  json call = parallel
                  ? json{{"type", "object"},
                         {"properties", {{"tool_calls", {{"type", "array"}, {"items", one}, {"minItems", 1}}}}},
                         {"required", json::array({"tool_calls"})}}
                  : json{{"type", "object"}, {"properties", {{"tool_call", one}}}, {"required", json::array({"tool_call"})}};
  json schema = allow_response ? json{{"anyOf", json::array({call, json{{"type", "object"},
                                                                        {"properties", {{"response", {{"type", "string"}}}}},
                                                                        {"required", json::array({"response"})}}})}}
                               : call;
  auto g = sample::json_schema_to_grammar(schema);
  if (!g) return Status(g.status().code(), "tools: " + g.status().message());
  return std::move(*g);
}

// A tool's parameters schema's "properties" and "required" (empty when absent).
json schema_properties(const json& ps) {
  return ps.is_object() && ps.contains("properties") && ps["properties"].is_object() ? ps["properties"] : json::object();
}
json schema_required(const json& ps) {
  return ps.is_object() && ps.contains("required") && ps["required"].is_array() ? ps["required"] : json::array();
}

// <tool_call>\n<function=f>\n then its parameters (the required ones in the schema's order,
// then any optional ones), each <parameter=k>\nVALUE\n</parameter>\n: a string parameter's
// VALUE is any text without "\n</parameter>" (xs0), another's its schema's JSON.
Expected<std::string> qwen_xml_calls(CallGrammar& g, bool parallel) {
  bool strings = false;
  for (size_t i = 0; i < g.tools.size(); ++i) {
    const Tool& tool = g.tools[i];
    const json& ps = tool.parameters;
    const json props = schema_properties(ps);
    const json req = schema_required(ps);
    std::string required, optional;
    size_t k = 0;
    for (const auto& [key, schema] : props.items()) {
      const std::string prule = "tc-f" + std::to_string(i) + "-p" + std::to_string(k++);
      std::string value;
      const XmlValue kind =
          xml_value_kind(json::array({json{{"function", json{{"name", tool.name}, {"parameters", ps}}}}}), tool.name, key);
      if (kind == XmlValue::kJson) {
        auto gr = sample::json_schema_to_grammar(schema);
        if (!gr) return Status(gr.status().code(), "tools: " + tool.name + "." + key + ": " + gr.status().message());
        g.sub += prefix_gbnf_rules(*gr, prule + "-v-");
        value = prule + "-v-root";
      } else {
        strings = true;
        value = "xs0";
      }
      g.rules += prule + " ::= " + sample::gbnf_literal("<parameter=" + key + ">\n") + " " + value + " " +
                 sample::gbnf_literal("\n</parameter>\n") + "\n";
      const bool is_req = std::find(req.begin(), req.end(), json(key)) != req.end();
      (is_req ? required : optional) += (is_req ? " " : optional.empty() ? "" : " | ") + prule;
    }
    std::string body = sample::gbnf_literal("<function=" + tool.name + ">\n") + required;
    if (!optional.empty()) body += " ( " + optional + " )*";
    g.add_alt(i, body + " " + sample::gbnf_literal("</function>\n"));
  }
  if (strings) g.rules += xml_string_rules();
  g.rules += R"(tc-call ::= "<tool_call>\n" tc-body "</tool_call>")"
             "\n";
  return std::string(parallel ? "tc-call ( tc-sp tc-call )*" : "tc-call");
}

// name(k1=V1, k2=V2): the parameters in the schema's order, the optional ones may be left
// out; each VALUE is its schema's JSON (JSON strings, numbers, true / false / null are
// Python literals LFM2's parser reads as well). Rules tc-f<i>-a<k>-first / -rest: the
// arguments from the k-th on, with or without a leading ", ".
Expected<std::string> lfm2_calls(CallGrammar& g, bool parallel) {
  for (size_t i = 0; i < g.tools.size(); ++i) {
    const Tool& tool = g.tools[i];
    const json props = schema_properties(tool.parameters);
    const json req = schema_required(tool.parameters);
    const std::string fi = "tc-f" + std::to_string(i);
    std::vector<std::pair<std::string, bool>> items;  // (argument rule, required)
    size_t k = 0;
    for (const auto& [key, schema] : props.items()) {
      const std::string prule = fi + "-p" + std::to_string(k++);
      auto gr = sample::json_schema_to_grammar(schema);
      if (!gr) return Status(gr.status().code(), "tools: " + tool.name + "." + key + ": " + gr.status().message());
      g.sub += prefix_gbnf_rules(*gr, prule + "-v-");
      g.rules += prule + " ::= " + sample::gbnf_literal(key + "=") + " " + prule + "-v-root\n";
      items.emplace_back(prule, std::find(req.begin(), req.end(), json(key)) != req.end());
    }
    const auto a = [&](size_t n, bool first) { return fi + "-a" + std::to_string(n) + (first ? "-first" : "-rest"); };
    g.rules += a(items.size(), true) + " ::= \"\"\n" + a(items.size(), false) + " ::= \"\"\n";
    for (size_t n = items.size(); n-- > 0;) {
      const std::string& pr = items[n].first;
      const std::string take_first = pr + " " + a(n + 1, false), take_rest = "tc-comma " + pr + " " + a(n + 1, false);
      g.rules += a(n, true) + " ::= " + take_first + (items[n].second ? "" : " | " + a(n + 1, true)) + "\n";
      g.rules += a(n, false) + " ::= " + take_rest + (items[n].second ? "" : " | " + a(n + 1, false)) + "\n";
    }
    g.add_alt(i, sample::gbnf_literal(tool.name + "(") + " " + a(0, true) + " \")\"");
  }
  g.rules += "tc-comma ::= \",\" \" \"?\n";
  return std::string(parallel ? R"("<|tool_call_start|>[" tc-body ( tc-comma tc-body )* "]<|tool_call_end|>")"
                              : R"("<|tool_call_start|>[" tc-body "]<|tool_call_end|>")");
}

// <|tool_call>call:name{k:V,...}<tool_call|>, the arguments as g4_value_rule writes them.
Expected<std::string> gemma4_calls(CallGrammar& g, bool parallel) {
  for (size_t i = 0; i < g.tools.size(); ++i) {
    const std::string fi = "tc-f" + std::to_string(i) + "-args";
    auto r = g4_value_rule(g.tools[i].parameters, fi, &g.rules, &g.sub);
    if (!r) return Status(r.status().code(), "tools: " + g.tools[i].name + ": " + r.status().message());
    const std::string args = *r == "g4-any" ? "g4-dict" : *r;
    g.add_alt(i, sample::gbnf_literal(g.tools[i].name) + " " + args);
  }
  g.rules += kGemma4ValueRules;
  g.rules += R"(tc-call ::= "<|tool_call>call:" tc-body "<tool_call|>")"
             "\n";
  return std::string(parallel ? "tc-call+" : "tc-call");
}

// The root rule of `format`'s calls over g.tools (kGeneric and kNone have none: "").
Expected<std::string> format_calls(ToolCallFormat format, CallGrammar& g, bool parallel) {
  switch (format) {
    case ToolCallFormat::kHermes: return hermes_calls(g, parallel);
    case ToolCallFormat::kLlama31: return llama31_calls(g);
    case ToolCallFormat::kMistral: return mistral_calls(g, parallel);
    case ToolCallFormat::kMistralArgs: return mistral_args_calls(g, parallel);
    case ToolCallFormat::kQwenXml: return qwen_xml_calls(g, parallel);
    case ToolCallFormat::kLfm2: return lfm2_calls(g, parallel);
    case ToolCallFormat::kGemma4: return gemma4_calls(g, parallel);
    case ToolCallFormat::kGeneric:
    case ToolCallFormat::kNone: break;
  }
  return std::string();
}

}  // namespace

Expected<std::string> tool_call_grammar(ToolCallFormat format, const json& tools, const std::string* forced_name,
                                        bool parallel, bool allow_response) {
  if (format == ToolCallFormat::kNone) return invalid_argument("tool_call_grammar: no tool-call format (kNone)");
  LOOM_ASSIGN_OR_RETURN(json norm, normalize_tools(tools));
  if (norm.is_null()) return invalid_argument("tools: no tools to call");
  CallGrammar g;
  LOOM_RETURN_IF_ERROR(collect_tools(norm, forced_name, g));
  if (format == ToolCallFormat::kGeneric) return generic_grammar(g.tools, parallel, allow_response);
  LOOM_ASSIGN_OR_RETURN(std::string root, format_calls(format, g, parallel));
  std::string out = "root ::= " + root + "\n";
  out += "tc-body ::= " + g.alts + "\n";
  out += g.rules;
  out += kSp;
  out += "\n";
  out += g.sub;
  return out;
}

Expected<std::string> response_format_grammar(const json& rf) {
  if (rf.is_null()) return std::string();
  if (!rf.is_object()) return invalid_argument("response_format: expected an object");
  auto type = rf.find("type");
  if (type == rf.end() || !type->is_string())
    return invalid_argument("response_format.type: expected \"text\", \"json_object\" or \"json_schema\"");
  const std::string t = *type;
  const auto convert = [](const json& schema, const std::string& where) -> Expected<std::string> {
    if (!schema.is_object() && !schema.is_boolean()) return invalid_argument(where + ": expected a JSON schema object");
    auto g = sample::json_schema_to_grammar(schema);
    if (!g) return Status(g.status().code(), where + ": " + g.status().message());
    return std::move(*g);
  };
  if (t == "text") return std::string();
  if (t == "json_object") {
    if (auto s = rf.find("schema"); s != rf.end() && !s->is_null()) return convert(*s, "response_format.schema");
    return convert(json{{"type", "object"}}, "response_format");
  }
  if (t == "json_schema") {
    auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object()) return invalid_argument("response_format.json_schema: expected an object");
    auto s = js->find("schema");
    if (s == js->end()) return invalid_argument("response_format.json_schema.schema: missing");
    return convert(*s, "response_format.json_schema.schema");
  }
  return invalid_argument("response_format.type: unknown type \"" + t +
                          "\" (expected \"text\", \"json_object\" or \"json_schema\")");
}

}  // namespace loom::chat
