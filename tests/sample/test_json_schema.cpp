// JSON schema -> GBNF: the grammars parse, unsupported constructs are refused with their JSON
// pointer, and text generated under the grammar from random logits over real vocabularies
// (stories260K, llama-2-tiny-random) always parses as JSON and satisfies the schema.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <cctype>
#include <set>

#include "model/model.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "sample/sampler.h"
#include "test_util.h"

namespace loom::sample {
namespace {

using json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// A validator for the subset the converter supports. Returns "" when valid, else why not.

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Formats, by hand (std::regex draws false-positive warnings from GCC in some builds).
bool digits(const std::string& s, size_t pos, size_t n) {
  if (pos + n > s.size()) return false;
  for (size_t i = pos; i < pos + n; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}
int num(const std::string& s, size_t pos, size_t n) { return std::stoi(s.substr(pos, n)); }
bool is_date(const std::string& s) {
  return s.size() == 10 && digits(s, 0, 4) && s[4] == '-' && digits(s, 5, 2) && s[7] == '-' && digits(s, 8, 2) &&
         num(s, 5, 2) >= 1 && num(s, 5, 2) <= 12 && num(s, 8, 2) >= 1 && num(s, 8, 2) <= 31;
}
bool is_hh_mm(const std::string& s, size_t p) {
  return digits(s, p, 2) && s[p + 2] == ':' && digits(s, p + 3, 2) && num(s, p, 2) <= 23 && num(s, p + 3, 2) <= 59;
}
bool is_time(const std::string& s) {
  if (s.size() < 9 || !is_hh_mm(s, 0) || s[5] != ':' || !digits(s, 6, 2) || num(s, 6, 2) > 59) return false;
  size_t p = 8;
  if (p < s.size() && s[p] == '.') {
    if (!digits(s, p + 1, 3)) return false;
    p += 4;
  }
  if (p < s.size() && s[p] == 'Z') return p + 1 == s.size();
  return p < s.size() && (s[p] == '+' || s[p] == '-') && p + 6 == s.size() && is_hh_mm(s, p + 1);
}
bool is_uuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < 36; ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(s[i]))) {
      return false;
    }
  }
  return true;
}

std::string validate(const json& v, const json& s, const json& root, const std::string& at = "$");

std::string validate_type(const json& v, const std::string& t, const json& s, const json& root, const std::string& at) {
  if (t == "string") {
    if (!v.is_string()) return at + ": not a string";
    const std::string str = v.get<std::string>();
    const size_t len = utf8_length(str);
    if (s.contains("minLength") && len < s["minLength"].get<size_t>()) return at + ": shorter than minLength";
    if (s.contains("maxLength") && len > s["maxLength"].get<size_t>()) return at + ": longer than maxLength";
    if (s.contains("format")) {
      const std::string f = s["format"];
      bool ok = true;
      if (f == "date") ok = is_date(str);
      else if (f == "time") ok = is_time(str);
      else if (f == "uuid") ok = is_uuid(str);
      else if (f == "date-time") {
        const size_t tpos = str.find('T');
        ok = tpos != std::string::npos && is_date(str.substr(0, tpos)) && is_time(str.substr(tpos + 1));
      }
      if (!ok) return at + ": not a " + f + ": " + str;
    }
    return "";
  }
  if (t == "integer" || t == "number") {
    if (t == "integer" ? !v.is_number_integer() : !v.is_number()) return at + ": not an " + t;
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return at + ": below minimum";
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return at + ": above maximum";
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>())
      return at + ": not above exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>())
      return at + ": not below exclusiveMaximum";
    return "";
  }
  if (t == "boolean") return v.is_boolean() ? "" : at + ": not a boolean";
  if (t == "null") return v.is_null() ? "" : at + ": not null";
  if (t == "array") {
    if (!v.is_array()) return at + ": not an array";
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return at + ": fewer than minItems";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return at + ": more than maxItems";
    if (s.contains("prefixItems")) {
      if (v.size() != s["prefixItems"].size()) return at + ": tuple length";
      for (size_t i = 0; i < v.size(); ++i) {
        auto e = validate(v[i], s["prefixItems"][i], root, at + "[" + std::to_string(i) + "]");
        if (!e.empty()) return e;
      }
    } else if (s.contains("items")) {
      for (size_t i = 0; i < v.size(); ++i) {
        auto e = validate(v[i], s["items"], root, at + "[" + std::to_string(i) + "]");
        if (!e.empty()) return e;
      }
    }
    return "";
  }
  if (t == "object") {
    if (!v.is_object()) return at + ": not an object";
    const json props = s.value("properties", json::object());
    for (const auto& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return at + ": missing required '" + r.get<std::string>() + "'";
    const json ap = s.contains("additionalProperties") ? s["additionalProperties"]
                                                       : (s.contains("properties") ? json(false) : json(true));
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        auto e = validate(it.value(), props[it.key()], root, at + "." + it.key());
        if (!e.empty()) return e;
      } else if (ap == false) {
        return at + ": unexpected property '" + it.key() + "'";
      } else if (ap.is_object()) {
        auto e = validate(it.value(), ap, root, at + "." + it.key());
        if (!e.empty()) return e;
      }
    }
    return "";
  }
  return at + ": validator does not know type " + t;
}

std::string validate(const json& v, const json& s, const json& root, const std::string& at) {
  if (s.is_boolean()) return s.get<bool>() ? "" : at + ": false schema";
  if (s.contains("$ref")) return validate(v, root.at(json::json_pointer(s["$ref"].get<std::string>().substr(1))), root, at);
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!s.contains(k)) continue;
    for (const auto& alt : s[k])
      if (validate(v, alt, root, at).empty()) return "";
    return at + ": matches no alternative of " + k;
  }
  if (s.contains("allOf")) {
    for (const auto& part0 : s["allOf"]) {
      json part = part0;  // each part alone allows other properties
      if (part.is_object() && !part.contains("additionalProperties")) part["additionalProperties"] = true;
      auto e = validate(v, part, root, at);
      if (!e.empty()) return e;
    }
    // Properties outside every part are refused (additionalProperties false after merging).
    std::set<std::string> known;
    for (const auto& part0 : s["allOf"]) {
      const json& part =
          part0.contains("$ref") ? root.at(json::json_pointer(part0["$ref"].get<std::string>().substr(1))) : part0;
      const json props = part.value("properties", json::object());
      for (auto it = props.begin(); it != props.end(); ++it) known.insert(it.key());
    }
    for (auto it = v.begin(); it != v.end(); ++it)
      if (!known.count(it.key())) return at + ": property outside allOf '" + it.key() + "'";
    return "";
  }
  if (s.contains("const")) return v == s["const"] ? "" : at + ": not the const";
  if (s.contains("enum")) {
    for (const auto& e : s["enum"])
      if (v == e) return "";
    return at + ": not in enum";
  }
  if (s.contains("type")) {
    if (s["type"].is_array()) {
      for (const auto& t : s["type"])
        if (validate_type(v, t, s, root, at).empty()) return "";
      return at + ": none of the types";
    }
    return validate_type(v, s["type"], s, root, at);
  }
  if (s.contains("properties")) return validate_type(v, "object", s, root, at);
  return "";
}

// ---------------------------------------------------------------------------------------------

TEST(JsonSchema, ValidatorFormats) {
  EXPECT_TRUE(is_date("2024-02-29"));
  EXPECT_FALSE(is_date("2024-13-01"));
  EXPECT_FALSE(is_date("2024-1-01"));
  EXPECT_TRUE(is_time("23:59:59Z"));
  EXPECT_TRUE(is_time("00:00:00.123-05:30"));
  EXPECT_FALSE(is_time("24:00:00Z"));
  EXPECT_FALSE(is_time("12:00:00"));
  EXPECT_TRUE(is_uuid("123e4567-e89b-12d3-a456-426614174000"));
  EXPECT_FALSE(is_uuid("123e4567-e89b-12d3-a456-42661417400g"));
}

TEST(JsonSchema, ConvertsAndParses) {
  const char* schemas[] = {
      R"({})",
      R"({"type": "string"})",
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]})",
      R"({"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3})",
      R"({"$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}}},
          "$ref": "#/$defs/node"})",
      R"({"type": "integer", "minimum": -15, "maximum": 2048})",
      R"({"enum": ["red", 3, null, true, {"x": [1]}]})",
      R"({"type": ["string", "null"]})",
      R"({"type": "object", "additionalProperties": {"type": "integer"}})",
  };
  for (const char* s : schemas) {
    auto g = sample::json_schema_to_grammar(s);
    ASSERT_TRUE(g) << s << ": " << g.status().message();
    auto parsed = Grammar::parse(*g);
    EXPECT_TRUE(parsed) << s << "\n" << *g << "\n" << parsed.status().message();
  }
}

// Text-level checks of the converted grammars against hand-picked documents.
bool accepts(const std::string& schema, const std::string& text) {
  auto g = sample::json_schema_to_grammar(schema);
  EXPECT_TRUE(g) << g.status().message();
  if (!g) return false;
  auto gr = Grammar::parse(*g);
  EXPECT_TRUE(gr) << gr.status().message() << "\n" << *g;
  if (!gr) return false;
  GrammarMatcher m(*gr);
  return m.accept_text(text) && m.can_end();
}

TEST(JsonSchema, GrammarsAcceptExactlyTheSchemasDocuments) {
  const std::string obj =
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}, "required": ["a"]})";
  EXPECT_TRUE(accepts(obj, R"({"a": 1})"));
  EXPECT_TRUE(accepts(obj, R"({"a": -12, "b": "x", "c": true})"));
  EXPECT_TRUE(accepts(obj, R"({"a": 0, "c": false})"));
  EXPECT_FALSE(accepts(obj, R"({"b": "x"})"));        // a is required
  EXPECT_FALSE(accepts(obj, R"({"a": 1, "d": 2})"));  // no additional properties
  EXPECT_FALSE(accepts(obj, R"({"a": 1.5})"));
  EXPECT_FALSE(accepts(obj, R"({"a": 01})"));
  const std::string ints = R"({"type": "integer", "minimum": -15, "maximum": 2048})";
  for (int v : {-15, -9, -1, 0, 7, 10, 99, 100, 999, 1000, 2000, 2048}) EXPECT_TRUE(accepts(ints, std::to_string(v))) << v;
  for (int v : {-16, -20, 2049, 2100, 3000, 10000}) EXPECT_FALSE(accepts(ints, std::to_string(v))) << v;
  EXPECT_FALSE(accepts(ints, "-0"));
  const std::string excl = R"({"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 123})";
  EXPECT_FALSE(accepts(excl, "5"));
  EXPECT_TRUE(accepts(excl, "6"));
  EXPECT_TRUE(accepts(excl, "122"));
  EXPECT_FALSE(accepts(excl, "123"));
  const std::string lo = R"({"type": "integer", "minimum": 37})";
  EXPECT_FALSE(accepts(lo, "36"));
  EXPECT_TRUE(accepts(lo, "37"));
  EXPECT_TRUE(accepts(lo, "100"));
  EXPECT_TRUE(accepts(lo, "123456789"));
  const std::string hi = R"({"type": "integer", "maximum": -3})";
  EXPECT_TRUE(accepts(hi, "-3"));
  EXPECT_TRUE(accepts(hi, "-1000"));
  EXPECT_FALSE(accepts(hi, "-2"));
  EXPECT_FALSE(accepts(hi, "5"));
  const std::string num = R"({"type": "number", "minimum": 0, "maximum": 10})";
  EXPECT_TRUE(accepts(num, "9.999"));
  EXPECT_TRUE(accepts(num, "10.000"));
  EXPECT_FALSE(accepts(num, "10.5"));
  EXPECT_FALSE(accepts(num, "-1"));
  const std::string arr = R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})";
  EXPECT_FALSE(accepts(arr, "[1]"));
  EXPECT_TRUE(accepts(arr, "[1, 2]"));
  EXPECT_TRUE(accepts(arr, "[1,2,3]"));
  EXPECT_FALSE(accepts(arr, "[1,2,3,4]"));
  const std::string str = R"({"type": "string", "minLength": 2, "maxLength": 3})";
  EXPECT_FALSE(accepts(str, R"("a")"));
  EXPECT_TRUE(accepts(str, R"("\n\u00e9")"));
  EXPECT_TRUE(accepts(str, "\"\xC3\xA9t\xC3\xA9\""));
  EXPECT_FALSE(accepts(str, R"("abcd")"));
  EXPECT_FALSE(accepts(R"({"type": "string"})", R"("\ud800")"));  // lone surrogate escapes
  EXPECT_TRUE(accepts(R"({"type": "string", "format": "date-time"})", R"("2024-02-29T23:59:60Z")") == false);
  EXPECT_TRUE(accepts(R"({"type": "string", "format": "date-time"})", R"("2024-02-29T23:59:59.123+01:00")"));
  EXPECT_TRUE(accepts(R"({"type": "string", "format": "uuid"})", R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_TRUE(accepts(R"({"enum": ["a\"b", 1, null]})", R"("a\"b")"));
  EXPECT_TRUE(accepts(R"({"const": {"k": [1, 2]}})", R"({"k":[1,2]})"));
  const std::string all = R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                        {"properties": {"b": {"type": "null"}}, "required": ["b"]}]})";
  EXPECT_TRUE(accepts(all, R"({"a": 1, "b": null})"));
  EXPECT_FALSE(accepts(all, R"({"a": 1})"));
  const std::string extra =
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}})";
  EXPECT_TRUE(accepts(extra, R"({"a": 1, "x": true, "y": false})"));
  EXPECT_TRUE(accepts(extra, R"({"x": true})"));
  EXPECT_FALSE(accepts(extra, R"({"x": 1})"));
  EXPECT_TRUE(accepts(R"({"type": "object", "properties": {}, "required": ["free"]})", R"({"free": [1, {"x": null}]})"));
  const std::string tuple = R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]})";
  EXPECT_TRUE(accepts(tuple, R"([1, "a"])"));
  EXPECT_FALSE(accepts(tuple, R"([1])"));
  // Draft-04/07 spellings llama.cpp takes too: the array form of items is a tuple, definitions
  // next to $defs.
  const std::string old_tuple =
      R"({"type": "array", "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": false})";
  EXPECT_TRUE(accepts(old_tuple, R"([1, "a"])"));
  EXPECT_FALSE(accepts(old_tuple, R"(["a", 1])"));
  EXPECT_FALSE(accepts(old_tuple, R"([1, "a", 2])"));
  const std::string defs = R"({"definitions": {"n": {"type": "integer"}}, "type": "object",
                                "properties": {"x": {"$ref": "#/definitions/n"}}, "required": ["x"]})";
  EXPECT_TRUE(accepts(defs, R"({"x": 3})"));
  EXPECT_FALSE(accepts(defs, R"({"x": "3"})"));
}

TEST(JsonSchema, UnsupportedConstructsNameTheirPath) {
  auto e =
      sample::json_schema_to_grammar(R"({"type": "object", "properties": {"name": {"type": "string", "pattern": "^a+$"}}})");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(e.status().message(), "json schema /properties/name/pattern: 'pattern' is not supported");
  e = sample::json_schema_to_grammar(R"({"type": "array", "items": {"not": {"type": "null"}}})");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.status().message(), "json schema /items/not: 'not' is not supported");
  e = sample::json_schema_to_grammar(R"({"$ref": "https://example.com/s.json"})");
  ASSERT_FALSE(e);
  EXPECT_NE(e.status().message().find("/$ref"), std::string::npos);
  e = sample::json_schema_to_grammar(R"({"$ref": "#/$defs/missing"})");
  ASSERT_FALSE(e);
  EXPECT_NE(e.status().message().find("unresolvable"), std::string::npos);
  e = sample::json_schema_to_grammar(R"({"type": "string", "format": "email"})");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.status().message().rfind("json schema /format:", 0), 0u);
  e = sample::json_schema_to_grammar(R"({"type": "number", "minimum": -1.5})");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.status().message().rfind("json schema /minimum:", 0), 0u);
  e = sample::json_schema_to_grammar(R"({"allOf": [{"type": "string"}]})");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.status().message().rfind("json schema /allOf/0:", 0), 0u);
  e = json_schema_to_grammar("{not json");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
}

// Resource limit on untrusted schemas (docs/reliability.md): nesting is bounded, not the stack.
TEST(JsonSchema, NestingIsBounded) {
  const auto nested = [](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += R"({"type": "array", "items": )";
    return s + R"({"type": "integer"})" + std::string(size_t(n), '}');
  };
  auto ok = sample::json_schema_to_grammar(nested(100));
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_TRUE(Grammar::parse(*ok));
  for (int n : {128, 5000}) {
    auto e = sample::json_schema_to_grammar(nested(n));
    ASSERT_FALSE(e) << n;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("nested more than 128 deep"), std::string::npos) << e.status().message();
  }
}

// ---------------------------------------------------------------------------------------------
// Generation with random logits over real vocabularies.

const char* const kGenSchemas[] = {
    R"({"type": "object", "properties": {
          "name": {"type": "string", "maxLength": 12},
          "age": {"type": "integer", "minimum": 0, "maximum": 150},
          "score": {"type": "number"},
          "member": {"type": "boolean"},
          "nick": {"type": ["string", "null"], "maxLength": 6}},
        "required": ["name", "age"]})",
    R"({"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 1, "maxItems": 5})",
    R"({"type": "object", "properties": {
          "day": {"type": "string", "format": "date"},
          "at": {"type": "string", "format": "time"},
          "when": {"type": "string", "format": "date-time"},
          "id": {"type": "string", "format": "uuid"}},
        "required": ["day", "id"]})",
    R"({"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number", "minimum": 0, "maximum": 100}, "y": {"type": "integer"}},
                            "required": ["x", "y"]}},
        "type": "object",
        "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 3},
                       "color": {"enum": ["red", "green", "blue", 7, null]},
                       "tag": {"const": "fixed"}},
        "required": ["points", "color", "tag"]})",
    R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["kind", "r"]},
                  {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}}, "required": ["kind", "side"]}]})",
    R"({"allOf": [{"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]},
                  {"type": "object", "properties": {"b": {"type": "string", "minLength": 1, "maxLength": 4}}}]})",
    R"({"type": "array", "prefixItems": [{"type": "string", "maxLength": 3}, {"type": "null"}, {"type": "integer", "maximum": 9, "minimum": 0}]})",
    R"({"type": "object", "properties": {"k": {"type": "string", "enum": ["x", "yy"]}}, "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9}})",
};

struct GenResult {
  std::string text;
  bool ended = false;
};

GenResult generate(const Vocab& vocab, const std::string& grammar, uint64_t seed, float quote_bias) {
  SamplerParams p;
  p.seed = seed;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.grammar = grammar;
  auto s = Sampler::create(p, &vocab);
  EXPECT_TRUE(s) << s.status().message();
  GenResult r;
  if (!s) return r;
  std::mt19937 rng(uint32_t(seed * 7919 + 1));
  std::normal_distribution<float> nd(0, 2);
  std::vector<float> logits(size_t(vocab.n_tokens()));
  // Nudge pieces that close strings and containers so unbounded parts end in reasonable time.
  std::vector<float> bias(logits.size(), 0.0f);
  for (int32_t i = 0; i < vocab.n_tokens(); ++i) {
    const std::string piece = vocab.token_to_piece(i, true);
    if (piece.find_first_of("\"]}") != std::string::npos) bias[size_t(i)] = quote_bias;
    if (vocab.is_eog(i)) bias[size_t(i)] = 4.0f;
  }
  for (int step = 0; step < 600; ++step) {
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = nd(rng) + bias[i];
    const int32_t tok = s->sample(logits);
    EXPECT_GE(tok, 0) << "grammar dead end after: " << r.text << " (last bytes:" << [&] {
      std::string h;
      for (size_t i = r.text.size() > 8 ? r.text.size() - 8 : 0; i < r.text.size(); ++i) {
        h.push_back(' ');
        h.append(std::to_string(unsigned(uint8_t(r.text[i]))));
      }
      return h;
    }() << ")";
    if (tok < 0) return r;
    if (vocab.is_eog(tok)) {
      r.ended = true;
      return r;
    }
    s->accept(tok);
    r.text += vocab.token_to_piece(tok, true);
    if (s->grammar_done()) {
      r.ended = true;
      return r;
    }
  }
  return r;
}

void run_generation(const std::string& model_file, int seeds) {
  auto m = Model::load(test::shared_path("models/" + model_file), {.vocab_only = true, .repack = true, .progress = {}});
  ASSERT_TRUE(m) << m.status().message();
  const Vocab& vocab = (*m)->vocab();
  for (const char* schema_text : kGenSchemas) {
    const json schema = json::parse(schema_text);
    auto g = sample::json_schema_to_grammar(schema);
    ASSERT_TRUE(g) << g.status().message();
    for (int seed = 0; seed < seeds; ++seed) {
      GenResult r = generate(vocab, *g, uint64_t(seed), 3.0f);
      ASSERT_TRUE(r.ended) << model_file << " seed " << seed << " did not finish: " << r.text << "\nschema: " << schema_text;
      json v;
      try {
        v = json::parse(r.text);
      } catch (const std::exception& e) {
        ADD_FAILURE() << model_file << " seed " << seed << ": not JSON (" << e.what() << "): " << r.text
                      << "\nschema: " << schema_text;
        continue;
      }
      EXPECT_EQ(r.text.find("<unk>"), std::string::npos) << "control/unknown token chosen: " << r.text;
      EXPECT_EQ(r.text.find("<s>"), std::string::npos) << "control/unknown token chosen: " << r.text;
      const std::string err = validate(v, schema, schema);
      EXPECT_EQ(err, "") << model_file << " seed " << seed << ": " << r.text << "\nschema: " << schema_text;
    }
  }
}

TEST(JsonSchemaGeneration, Stories260KVocab) { run_generation("stories260K.gguf", 40); }
TEST(JsonSchemaGeneration, Llama2TinyRandomVocab) { run_generation("llama-2-tiny-random.gguf", 6); }

// An unbounded string schema also ends (bias towards closing quotes).
TEST(JsonSchemaGeneration, UnboundedStringsEnd) {
  auto m = Model::load(test::shared_path("models/stories260K.gguf"), {.vocab_only = true, .repack = true, .progress = {}});
  ASSERT_TRUE(m) << m.status().message();
  const json schema =
      json::parse(R"({"type": "object", "properties": {"s": {"type": "string"}, "any": {}}, "required": ["s", "any"]})");
  auto g = sample::json_schema_to_grammar(schema);
  ASSERT_TRUE(g);
  for (int seed = 0; seed < 10; ++seed) {
    GenResult r = generate((*m)->vocab(), *g, uint64_t(seed), 4.0f);
    ASSERT_TRUE(r.ended) << r.text;
    json v;
    ASSERT_NO_THROW(v = json::parse(r.text)) << r.text;
    EXPECT_EQ(validate(v, schema, schema), "") << r.text;
  }
}

}  // namespace
}  // namespace loom::sample

namespace loom::sample {
namespace {

// Found by the json_schema fuzzer: a $ref back to the root (or a cycle of definitions that match
// nothing first) would be a left-recursive grammar; the schema is refused with the reason.
TEST(JsonSchema, SelfReferenceWithoutContentIsRefused) {
  for (const char* schema :
       {R"({"$ref": "#"})", R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"}) {
    auto g = sample::json_schema_to_grammar(schema);
    ASSERT_FALSE(g.has_value()) << schema << " gave " << *g;
    EXPECT_NE(g.status().message().find("$ref"), std::string::npos) << g.status().message();
  }
  // A recursive schema that matches something before recursing stays fine.
  auto list = sample::json_schema_to_grammar(
      R"({"$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(list.has_value()) << list.status().message();
}

}  // namespace
}  // namespace loom::sample
