#include "sample/json_schema.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "sample/grammar.h"

namespace loom::sample {

namespace {

using json = nlohmann::ordered_json;

const char* const kSpaceRule = R"(| " " | "\n"{1,2} [ \t]{0,20})";

struct Primitive {
  const char* body;
  std::vector<const char*> deps;
};

// Helper rules with fixed names (schema-derived names that collide get a '-' suffix).
const std::map<std::string, Primitive>& primitives() {
  static const std::map<std::string, Primitive> m = {
      {"boolean", {R"(("true" | "false") space)", {}}},
      {"decimal-part", {R"([0-9]{1,16})", {}}},
      {"integral-part", {R"([0] | [1-9] [0-9]{0,15})", {}}},
      {"number",
       {R"(("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space)", {"integral-part", "decimal-part"}}},
      {"integer", {R"(("-"? integral-part) space)", {"integral-part"}}},
      {"value",
       {R"(object | array | string | number | boolean | null)", {"object", "array", "string", "number", "boolean", "null"}}},
      {"object",
       {R"("{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)", {"string", "value"}}},
      {"array", {R"("[" space ( value ("," space value)* )? "]" space)", {"value"}}},
      {"uuid",
       {R"("\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"" space)",
        {}}},
      // \u escapes exclude lone surrogates (U+D800..DFFF), which strict JSON parsers refuse.
      {"char",
       {R"([^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))",
        {}}},
      {"string", {R"("\"" char* "\"" space)", {"char"}}},
      {"null", {R"("null" space)", {}}},
      {"date", {R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] ))", {}}},
      {"time",
       {R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
        {}}},
      {"date-time", {R"(date "T" time)", {"date", "time"}}},
      {"date-string", {R"("\"" date "\"" space)", {"date"}}},
      {"time-string", {R"("\"" time "\"" space)", {"time"}}},
      {"date-time-string", {R"("\"" date-time "\"" space)", {"date-time"}}},
  };
  return m;
}

std::string literal(std::string_view s) { return gbnf_literal(s); }

std::string pointer_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) out += c;
    else if (out.empty() || out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty()) out = "x";
  return out;
}

// Rules for digit strings between lo and hi (same length, no sign).
std::string same_len_range(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  if (n == 0) return "";
  if (a == b) return literal(a);
  if (a[0] == b[0]) {
    std::string rest = same_len_range(a.substr(1), b.substr(1));
    return literal(a.substr(0, 1)) + " " + rest;
  }
  auto cls = [](char x, char y) { return x == y ? std::string("[") + x + "]" : std::string("[") + x + "-" + y + "]"; };
  const size_t rest = n - 1;
  if (rest == 0) return cls(a[0], b[0]);
  const bool a_zeros = a.find_first_not_of('0', 1) == std::string::npos;
  const bool b_nines = b.find_first_not_of('9', 1) == std::string::npos;
  const std::string any_rest = rest == 1 ? "[0-9]" : "[0-9]{" + std::to_string(rest) + "}";
  std::vector<std::string> alts;
  char mid_lo = char(a[0] + 1), mid_hi = char(b[0] - 1);
  if (a_zeros) mid_lo = a[0];
  else alts.push_back(literal(a.substr(0, 1)) + " (" + same_len_range(a.substr(1), std::string(rest, '9')) + ")");
  if (b_nines) mid_hi = b[0];
  if (mid_lo <= mid_hi) alts.push_back(cls(mid_lo, mid_hi) + " " + any_rest);
  if (!b_nines) alts.push_back(literal(b.substr(0, 1)) + " (" + same_len_range(std::string(rest, '0'), b.substr(1)) + ")");
  std::string out;
  for (const auto& x : alts) out += (out.empty() ? "" : " | ") + x;
  return alts.size() == 1 ? out : "(" + out + ")";
}

// Non-negative integers in [lo, hi] without leading zeros; hi = max: unbounded (at most 16 digits).
constexpr uint64_t kMaxDigits = 16;
std::string uint_range(uint64_t lo, uint64_t hi, bool unbounded) {
  auto digits = [](uint64_t v) { return uint64_t(std::to_string(v).size()); };
  std::vector<std::string> alts;
  const uint64_t dlo = digits(lo);
  const uint64_t dhi = unbounded ? std::max(dlo, kMaxDigits) : digits(hi);
  for (uint64_t d = dlo; d <= dhi; ++d) {
    uint64_t pow_lo = 1;
    for (uint64_t i = 1; i < d; ++i) pow_lo *= 10;
    const uint64_t a = std::max(lo, d == 1 ? 0 : pow_lo);
    const uint64_t top = pow_lo * 10 - 1;
    if (unbounded && d > dlo) {
      // Every d-digit number: one class and a repetition.
      alts.push_back("[1-9] [0-9]{" + std::to_string(d - 1) + "}");
      continue;
    }
    const uint64_t b = unbounded ? top : std::min(hi, top);
    if (a > b) continue;
    alts.push_back(same_len_range(std::to_string(a), std::to_string(b)));
  }
  std::string out;
  for (const auto& x : alts) out += (out.empty() ? "" : " | ") + x;
  return "(" + out + ")";
}

class Converter {
 public:
  static constexpr int kMaxDepth = 128;
  explicit Converter(const json& root) : root_(root) {}

  Expected<std::string> run() {
    std::string err;
    const std::string top = visit(root_, "root", "", &err);
    if (!err.empty()) return status_;
    if (top != "root") rules_["root"] = top;
    rules_["space"] = kSpaceRule;
    std::string out = "root ::= " + rules_["root"] + "\n";
    for (const auto& [name, body] : rules_)
      if (name != "root") out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  bool fail(std::string* err, StatusCode code, const std::string& path, const std::string& msg) {
    if (err->empty()) {
      *err = msg;
      status_ = Status(code, "json schema " + (path.empty() ? std::string("(root)") : path) + ": " + msg);
    }
    return false;
  }

  std::string add_primitive(const std::string& name) {
    if (rules_.count(name)) return name;
    const Primitive& p = primitives().at(name);
    rules_[name] = p.body;
    for (const char* d : p.deps) add_primitive(d);
    return name;
  }

  // Adds a rule under a name derived from `name`; a different rule already there gets a suffix.
  std::string add_rule(const std::string& name, const std::string& body) {
    std::string base = sanitize(name);
    if (primitives().count(base) || base == "space") base += "-";
    std::string key = base;
    for (int i = 1;; ++i) {
      auto it = rules_.find(key);
      if (it == rules_.end() || it->second == body) break;
      key = base + std::to_string(i);
    }
    rules_[key] = body;
    return key;
  }

  // The rule name for a sub-schema.
  std::string visit(const json& s, const std::string& name, const std::string& path, std::string* err) {
    if (!err->empty()) return "value";
    // Sub-schemas are visited recursively: bound the nesting (names and paths also grow with it).
    struct Depth {
      int& d;
      ~Depth() { --d; }
    } depth{++depth_};
    if (depth_ > kMaxDepth) {
      fail(err, StatusCode::kInvalidArgument, path.substr(0, 200) + "...",
           "schemas nested more than " + std::to_string(kMaxDepth) + " deep");
      return "value";
    }
    if (s.is_boolean()) return visit_boolean(s, path, err);
    if (!s.is_object()) {
      fail(err, StatusCode::kInvalidArgument, path, "a schema must be an object or a boolean");
      return "value";
    }
    if (!check_supported(s, path, err)) return "value";
    if (s.contains("$ref")) return visit_ref(s["$ref"], path + "/$ref", err);
    if (s.contains("oneOf") || s.contains("anyOf")) return visit_alternatives(s, name, path, err);
    if (s.contains("allOf")) return visit_all_of(s, name, path, err);
    if (s.contains("const")) return add_rule(name, literal(s["const"].dump()) + " space");
    if (s.contains("enum")) return visit_enum(s["enum"], name, path, err);
    return visit_typed(s, name, path, err);
  }

  // true matches any value, false nothing.
  std::string visit_boolean(const json& s, const std::string& path, std::string* err) {
    if (s.get<bool>()) return add_primitive("value");
    fail(err, StatusCode::kUnsupported, path, "the schema 'false' matches nothing");
    return "value";
  }

  // Refuses the keywords the converter cannot express (false, with err set).
  bool check_supported(const json& s, const std::string& path, std::string* err) {
    static const std::set<std::string> kUnsupported = {"pattern",
                                                       "not",
                                                       "if",
                                                       "then",
                                                       "else",
                                                       "multipleOf",
                                                       "patternProperties",
                                                       "propertyNames",
                                                       "dependentRequired",
                                                       "dependentSchemas",
                                                       "dependencies",
                                                       "contains",
                                                       "minContains",
                                                       "maxContains",
                                                       "minProperties",
                                                       "maxProperties",
                                                       "unevaluatedProperties",
                                                       "unevaluatedItems",
                                                       "contentEncoding",
                                                       "contentMediaType",
                                                       "$dynamicRef",
                                                       "$recursiveRef"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kUnsupported.count(it.key())) {
        fail(err, StatusCode::kUnsupported, path + "/" + pointer_escape(it.key()), "'" + it.key() + "' is not supported");
        return false;
      }
    }
    if (s.contains("uniqueItems") && s["uniqueItems"] == true) {
      fail(err, StatusCode::kUnsupported, path + "/uniqueItems", "'uniqueItems' is not supported");
      return false;
    }
    return true;
  }

  // oneOf / anyOf (oneOf first when both are there): one alternative per sub-schema.
  std::string visit_alternatives(const json& s, const std::string& name, const std::string& path, std::string* err) {
    const char* k = s.contains("oneOf") ? "oneOf" : "anyOf";
    const json& alts = s[k];
    if (!alts.is_array() || alts.empty()) {
      fail(err, StatusCode::kInvalidArgument, path + "/" + k, std::string("'") + k + "' must be a non-empty array");
      return "value";
    }
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) {
      const std::string r = visit(alts[i], name + "-" + std::to_string(i), path + "/" + k + "/" + std::to_string(i), err);
      body += (i ? " | " : "") + r;
    }
    return add_rule(name, body);
  }

  std::string visit_enum(const json& e, const std::string& name, const std::string& path, std::string* err) {
    if (!e.is_array() || e.empty()) {
      fail(err, StatusCode::kInvalidArgument, path + "/enum", "'enum' must be a non-empty array");
      return "value";
    }
    std::string body = "(";
    for (size_t i = 0; i < e.size(); ++i) body += (i ? " | " : "") + literal(e[i].dump());
    return add_rule(name, body + ") space");
  }

  // By "type" (or, without one, by the keywords that imply it); a list of types is a union.
  std::string visit_typed(const json& s, const std::string& name, const std::string& path, std::string* err) {
    json type = s.contains("type") ? s["type"] : json();
    if (type.is_array()) return visit_type_union(s, type, name, path, err);
    if (!type.is_null() && !type.is_string()) {
      fail(err, StatusCode::kInvalidArgument, path + "/type", "'type' must be a string or an array of strings");
      return "value";
    }
    const std::string t = type.is_string() ? type.get<std::string>() : "";
    const bool objectish = t == "object" || (t.empty() && (s.contains("properties") || s.contains("additionalProperties")));
    if (objectish) {
      if (s.contains("properties") || (s.contains("additionalProperties") && s["additionalProperties"] != true))
        return build_object(s, name, path, err);
      return add_primitive("object");
    }
    if (t == "array" || (t.empty() && (s.contains("items") || s.contains("prefixItems"))))
      return build_array(s, name, path, err);
    if (t == "string") return build_string(s, name, path, err);
    if (t == "integer") return build_integer(s, name, path, err);
    if (t == "number") return build_number(s, name, path, err);
    if (t == "boolean") return add_primitive("boolean");
    if (t == "null") return add_primitive("null");
    if (t.empty()) return add_primitive("value");
    fail(err, StatusCode::kUnsupported, path + "/type", "unknown type '" + t + "'");
    return "value";
  }

  // "type": [...]: the schema once per type, as alternatives.
  std::string visit_type_union(const json& s, const json& type, const std::string& name, const std::string& path,
                               std::string* err) {
    if (type.empty()) {
      fail(err, StatusCode::kInvalidArgument, path + "/type", "'type' must not be empty");
      return "value";
    }
    std::string body;
    for (size_t i = 0; i < type.size(); ++i) {
      json one = s;
      one["type"] = type[i];
      const std::string r =
          visit(one, name + "-" + (type[i].is_string() ? type[i].get<std::string>() : std::to_string(i)), path, err);
      body += (i ? " | " : "") + r;
    }
    return add_rule(name, body);
  }

  const json* resolve(const json& ref, const std::string& path, std::string* err) {
    if (!ref.is_string()) {
      fail(err, StatusCode::kInvalidArgument, path, "'$ref' must be a string");
      return nullptr;
    }
    const std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#') {
      fail(err, StatusCode::kUnsupported, path, "only local references ('#/...') are supported, not '" + r + "'");
      return nullptr;
    }
    try {
      return &root_.at(json::json_pointer(r.substr(1)));
    } catch (const std::exception&) {
      fail(err, StatusCode::kInvalidArgument, path, "unresolvable reference '" + r + "'");
      return nullptr;
    }
  }

  std::string visit_ref(const json& ref, const std::string& path, std::string* err) {
    const json* target = resolve(ref, path, err);
    if (!target) return "value";
    const std::string r = ref.get<std::string>();
    auto it = ref_rules_.find(r);
    if (it != ref_rules_.end()) return it->second;
    const size_t slash = r.rfind('/');
    std::string name =
        sanitize(slash == std::string::npos || slash + 1 >= r.size() ? std::string("ref") : r.substr(slash + 1));
    if (primitives().count(name) || name == "space" || name == "root") name += "-";
    // Reserve the name first: the target may refer to itself.
    std::string key = name;
    for (int i = 1; rules_.count(key); ++i) key = name + std::to_string(i);
    rules_[key] = "\"\"";  // placeholder
    ref_rules_[r] = key;
    const std::string body_rule = visit(*target, key + "-body", r.substr(1), err);
    rules_[key] = body_rule;
    return key;
  }

  std::string visit_all_of(const json& s, const std::string& name, const std::string& path, std::string* err) {
    const json& parts = s["allOf"];
    if (!parts.is_array() || parts.empty()) {
      fail(err, StatusCode::kInvalidArgument, path + "/allOf", "'allOf' must be a non-empty array");
      return "value";
    }
    json merged = json::object();
    merged["type"] = "object";
    merged["properties"] = json::object();
    json required = json::array();
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string ppath = path + "/allOf/" + std::to_string(i);
      const json* part = &parts[i];
      if (part->is_object() && part->contains("$ref")) part = resolve((*part)["$ref"], ppath + "/$ref", err);
      if (!part) return "value";
      const bool obj = part->is_object() && (part->contains("properties") || part->value("type", json()) == "object") &&
                       !part->contains("anyOf") && !part->contains("oneOf") && !part->contains("allOf");
      if (!obj) {
        fail(err, StatusCode::kUnsupported, ppath, "'allOf' is supported only for object schemas with properties");
        return "value";
      }
      if (part->contains("properties"))
        for (auto it = (*part)["properties"].begin(); it != (*part)["properties"].end(); ++it)
          merged["properties"][it.key()] = it.value();
      if (part->contains("required"))
        for (const auto& r : (*part)["required"]) required.push_back(r);
      if (part->contains("additionalProperties")) merged["additionalProperties"] = (*part)["additionalProperties"];
    }
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() == "allOf" || it.key() == "type") continue;
      if (it.key() == "properties")
        for (auto p = it.value().begin(); p != it.value().end(); ++p) merged["properties"][p.key()] = p.value();
      else if (it.key() == "required")
        for (const auto& r : it.value()) required.push_back(r);
      else merged[it.key()] = it.value();
    }
    merged["required"] = required;
    return build_object(merged, name, path, err);
  }

  std::string build_object(const json& s, const std::string& name, const std::string& path, std::string* err) {
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) {
        fail(err, StatusCode::kInvalidArgument, path + "/required", "'required' must be an array of strings");
        return "value";
      }
      for (const auto& r : s["required"]) {
        if (!r.is_string()) {
          fail(err, StatusCode::kInvalidArgument, path + "/required", "'required' must be an array of strings");
          return "value";
        }
        required.insert(r.get<std::string>());
      }
    }
    const std::string prefix = name == "root" ? "" : name + "-";
    std::vector<std::string> req, opt;  // kv rule names
    std::set<std::string> seen;
    if (s.contains("properties")) {
      const json& props = s["properties"];
      if (!props.is_object()) {
        fail(err, StatusCode::kInvalidArgument, path + "/properties", "'properties' must be an object");
        return "value";
      }
      for (auto it = props.begin(); it != props.end(); ++it) {
        const std::string& key = it.key();
        seen.insert(key);
        const std::string prop_rule = visit(it.value(), prefix + key, path + "/properties/" + pointer_escape(key), err);
        const std::string kv = add_rule(prefix + key + "-kv", literal(json(key).dump()) + " space \":\" space " + prop_rule);
        (required.count(key) ? req : opt).push_back(kv);
      }
    }
    // A required property without a schema may hold any value.
    for (const auto& r : s.contains("required") ? s["required"] : json::array()) {
      const std::string key = r.get<std::string>();
      if (seen.count(key)) continue;
      seen.insert(key);
      const std::string kv =
          add_rule(prefix + key + "-kv", literal(json(key).dump()) + " space \":\" space " + add_primitive("value"));
      req.push_back(kv);
    }
    std::string additional;  // kv rule for extra properties
    if (s.contains("additionalProperties")) {
      const json& ap = s["additionalProperties"];
      if (ap.is_object() || ap == true) {
        const std::string value_rule =
            visit(ap.is_object() ? ap : json::object(), prefix + "additional-value", path + "/additionalProperties", err);
        additional = add_rule(prefix + "additional-kv", add_primitive("string") + " \":\" space " + value_rule);
      } else if (!ap.is_boolean()) {
        fail(err, StatusCode::kInvalidArgument, path + "/additionalProperties",
             "'additionalProperties' must be a boolean or a schema");
        return "value";
      }
    }
    std::string rule = R"("{" space )";
    for (size_t i = 0; i < req.size(); ++i) rule += (i ? R"( "," space )" : "") + req[i];
    std::vector<std::string> optional = opt;
    if (!additional.empty()) optional.push_back("*");
    if (!optional.empty()) {
      rule += " (";
      if (!req.empty()) rule += R"( "," space ( )";
      for (size_t i = 0; i < optional.size(); ++i) {
        std::vector<std::string> tail(optional.begin() + long(i), optional.end());
        rule += (i ? " | " : "") + chain(tail, false, prefix, additional);
      }
      if (!req.empty()) rule += " )";
      rule += " )?";
    }
    rule += R"( "}" space)";
    return add_rule(name, rule);
  }

  // The optional properties ks in order, each present or not; the first one present unless
  // first_optional; a comma before each but the first one written.
  std::string chain(const std::vector<std::string>& ks, bool first_optional, const std::string& prefix,
                    const std::string& additional) {
    const std::string& k = ks[0];
    std::string res;
    if (k == "*") {
      res = first_optional ? R"(( "," space )" + additional + " )*"
                           : add_rule(prefix + "additional-kvs", additional + R"( ( "," space )" + additional + " )*");
    } else if (first_optional) {
      res = R"(( "," space )" + k + " )?";
    } else {
      res = k;
    }
    if (ks.size() > 1) {
      std::vector<std::string> rest(ks.begin() + 1, ks.end());
      res += " " + add_rule(k + "-rest", chain(rest, true, prefix, additional));
    }
    return res;
  }

  static std::string repetition(const std::string& item, uint64_t min_n, uint64_t max_n, bool has_max,
                                const std::string& sep) {
    if (has_max && max_n == 0) return "";
    if (min_n == 0 && has_max && max_n == 1) return item + "?";
    if (sep.empty()) {
      if (min_n == 1 && !has_max) return item + "+";
      if (min_n == 0 && !has_max) return item + "*";
      return item + "{" + std::to_string(min_n) + "," + (has_max ? std::to_string(max_n) : "") + "}";
    }
    const std::string result =
        item + " " +
        repetition("(" + sep + " " + item + ")", min_n == 0 ? 0 : min_n - 1, has_max ? max_n - 1 : 0, has_max, "");
    return min_n == 0 ? "(" + result + ")?" : result;
  }

  bool get_count(const json& s, const char* key, const std::string& path, uint64_t* v, bool* present, std::string* err) {
    *present = s.contains(key);
    if (!*present) return true;
    const json& x = s[key];
    if (!x.is_number_integer() || x.get<int64_t>() < 0) {
      return fail(err, StatusCode::kInvalidArgument, path + "/" + key,
                  std::string("'") + key + "' must be a non-negative integer");
    }
    *v = x.get<uint64_t>();
    if (*v > 100000) return fail(err, StatusCode::kUnsupported, path + "/" + key, std::string("'") + key + "' above 100000");
    return true;
  }

  std::string build_array(const json& s, const std::string& name, const std::string& path, std::string* err) {
    uint64_t min_n = 0, max_n = 0;
    bool has_min = false, has_max = false;
    if (!get_count(s, "minItems", path, &min_n, &has_min, err) || !get_count(s, "maxItems", path, &max_n, &has_max, err))
      return "value";
    if (has_max && max_n < min_n) {
      fail(err, StatusCode::kInvalidArgument, path + "/maxItems", "'maxItems' is below 'minItems'");
      return "value";
    }
    // A tuple: 2020-12's prefixItems, or draft-04/07's array form of items (llama.cpp takes both;
    // additionalItems is ignored, the tuple has exactly its items, as in llama.cpp).
    const bool draft4_tuple = !s.contains("prefixItems") && s.contains("items") && s["items"].is_array();
    if (s.contains("prefixItems") || draft4_tuple) {
      const char* key = draft4_tuple ? "items" : "prefixItems";
      const json& items = s[key];
      if (!items.is_array()) {
        fail(err, StatusCode::kInvalidArgument, path + "/prefixItems", "'prefixItems' must be an array");
        return "value";
      }
      if (!draft4_tuple && s.contains("items") && s["items"] != false) {
        fail(err, StatusCode::kUnsupported, path + "/items",
             "'items' after 'prefixItems' is not supported (use items: false)");
        return "value";
      }
      std::string rule = R"("[" space )";
      for (size_t i = 0; i < items.size(); ++i) {
        const std::string r =
            visit(items[i], name + "-" + std::to_string(i), path + "/" + key + "/" + std::to_string(i), err);
        rule += (i ? R"( "," space )" : "") + r;
      }
      return add_rule(name, rule + R"( "]" space)");
    }
    std::string item = "value";
    if (s.contains("items")) {
      item = visit(s["items"], name + "-item", path + "/items", err);
    } else {
      add_primitive("value");
    }
    return add_rule(name, R"("[" space )" + repetition(item, min_n, max_n, has_max, R"("," space)") + R"( "]" space)");
  }

  std::string build_string(const json& s, const std::string& name, const std::string& path, std::string* err) {
    if (s.contains("format")) {
      const json& f = s["format"];
      const std::string fmt = f.is_string() ? f.get<std::string>() : "";
      if (fmt == "date" || fmt == "time" || fmt == "date-time") return add_primitive(fmt + "-string");
      if (fmt == "uuid") return add_primitive("uuid");
      fail(err, StatusCode::kUnsupported, path + "/format",
           "string format '" + fmt + "' is not supported (date, time, date-time, uuid are)");
      return "value";
    }
    uint64_t min_n = 0, max_n = 0;
    bool has_min = false, has_max = false;
    if (!get_count(s, "minLength", path, &min_n, &has_min, err) || !get_count(s, "maxLength", path, &max_n, &has_max, err))
      return "value";
    if (!has_min && !has_max) return add_primitive("string");
    if (has_max && max_n < min_n) {
      fail(err, StatusCode::kInvalidArgument, path + "/maxLength", "'maxLength' is below 'minLength'");
      return "value";
    }
    const std::string ch = add_primitive("char");
    std::string rep = has_max ? ch + "{" + std::to_string(min_n) + "," + std::to_string(max_n) + "}"
                              : ch + "{" + std::to_string(min_n) + ",}";
    return add_rule(name, R"("\"" )" + rep + R"( "\"" space)");
  }

  // Reads an integer bound; exclusive bounds move by one.
  bool int_bound(const json& s, const char* key, const char* ex_key, bool upper, const std::string& path, int64_t* v,
                 bool* present, std::string* err) {
    *present = false;
    for (const char* k : {key, ex_key}) {
      if (!s.contains(k)) continue;
      const json& x = s[k];
      if (!x.is_number())
        return fail(err, StatusCode::kInvalidArgument, path + "/" + k, std::string("'") + k + "' must be a number");
      const double d = x.get<double>();
      if (!(std::fabs(d) < 1e15)) return fail(err, StatusCode::kUnsupported, path + "/" + k, "bound out of range");
      const bool exclusive = k == ex_key;
      int64_t b;
      if (upper) {
        b = int64_t(std::floor(d));
        if (exclusive && double(b) == d) --b;
      } else {
        b = int64_t(std::ceil(d));
        if (exclusive && double(b) == d) ++b;
      }
      if (!*present || (upper ? b < *v : b > *v)) *v = b;
      *present = true;
    }
    return true;
  }

  std::string build_integer(const json& s, const std::string& name, const std::string& path, std::string* err) {
    int64_t lo = 0, hi = 0;
    bool has_lo = false, has_hi = false;
    if (!int_bound(s, "minimum", "exclusiveMinimum", false, path, &lo, &has_lo, err) ||
        !int_bound(s, "maximum", "exclusiveMaximum", true, path, &hi, &has_hi, err))
      return "value";
    if (!has_lo && !has_hi) return add_primitive("integer");
    if (has_lo && has_hi && lo > hi) {
      fail(err, StatusCode::kInvalidArgument, path, "the integer range is empty (minimum above maximum)");
      return "value";
    }
    const std::string any_pos = "[1-9] [0-9]{0,15}";
    std::vector<std::string> alts;
    if (!has_lo || lo < 0) {  // negative part
      if (has_hi && hi < 0)
        alts.push_back("\"-\" " +
                       (has_lo ? uint_range(uint64_t(-hi), uint64_t(-lo), false) : uint_range(uint64_t(-hi), 0, true)));
      else alts.push_back("\"-\" " + (has_lo ? uint_range(1, uint64_t(-lo), false) : "(" + any_pos + ")"));
    }
    if (!has_hi || hi >= 0) {  // non-negative part
      const uint64_t a = has_lo && lo > 0 ? uint64_t(lo) : 0;
      alts.push_back(has_hi ? uint_range(a, uint64_t(hi), false) : uint_range(a, 0, true));
    }
    std::string body = "(";
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return add_rule(name, body + ") space");
  }

  std::string build_number(const json& s, const std::string& name, const std::string& path, std::string* err) {
    int64_t lo = 0, hi = 0;
    bool has_lo = false, has_hi = false;
    for (const char* k : {"exclusiveMinimum", "exclusiveMaximum"}) {
      if (s.contains(k)) {
        fail(err, StatusCode::kUnsupported, path + "/" + k,
             std::string("'") + k + "' on a number (use an integer, or inclusive bounds)");
        return "value";
      }
    }
    for (const char* k : {"minimum", "maximum"}) {
      if (!s.contains(k)) continue;
      const json& x = s[k];
      if (!x.is_number() || x.get<double>() < 0 || std::floor(x.get<double>()) != x.get<double>() ||
          x.get<double>() > 1e15) {
        fail(err, StatusCode::kUnsupported, path + "/" + k,
             std::string("'") + k + "' on a number is supported only as a non-negative integer value");
        return "value";
      }
      (k[1] == 'i' ? lo : hi) = int64_t(x.get<double>());
      (k[1] == 'i' ? has_lo : has_hi) = true;
    }
    if (!has_lo && !has_hi) return add_primitive("number");
    if (has_lo && has_hi && lo > hi) {
      fail(err, StatusCode::kInvalidArgument, path, "the number range is empty (minimum above maximum)");
      return "value";
    }
    const std::string frac = add_primitive("decimal-part");
    std::string body;
    if (!has_hi) {
      // [lo, inf): integer part >= lo, any fraction; no exponent (it could leave the range).
      body = uint_range(uint64_t(lo), 0, true) + " (\".\" " + frac + ")?";
    } else {
      // [lo, hi]: integer part in [lo, hi - 1] with any fraction, or hi with a zero fraction.
      std::vector<std::string> alts;
      if (hi > lo) alts.push_back(uint_range(uint64_t(lo), uint64_t(hi - 1), false) + " (\".\" " + frac + ")?");
      alts.push_back(literal(std::to_string(hi)) + " (\".\" [0]{1,16})?");
      for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
      body = "(" + body + ")";
    }
    return add_rule(name, body + " space");
  }

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  Status status_;
  int depth_ = 0;  // visit() nesting
};

}  // namespace

Expected<std::string> json_schema_to_grammar(const nlohmann::ordered_json& schema) {
  auto gbnf = Converter(schema).run();
  if (!gbnf) return gbnf;
  // A $ref cycle that consumes nothing ({"$ref": "#"}, or definitions that only refer to each other)
  // becomes a left-recursive rule: refuse the schema here, with the reason, rather than hand out a
  // grammar that fails later.
  auto g = Grammar::parse(*gbnf);
  if (!g && g.status().message().find("left recursion") != std::string::npos) {
    return invalid_argument("json schema: a $ref refers back to itself without matching anything first (" +
                            g.status().message() + ")");
  }
  return gbnf;
}

Expected<std::string> json_schema_to_grammar(std::string_view schema_text) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(schema_text);
  } catch (const std::exception& e) {
    return invalid_argument(std::string("json schema is not valid JSON: ") + e.what());
  }
  return json_schema_to_grammar(j);
}

}  // namespace loom::sample
