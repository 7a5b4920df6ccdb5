// Reading request bodies: typed access to JSON fields with errors that name the field, and a
// nesting-depth check that runs before the parser (a body of a million '[' never reaches it).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace loom::server {

using json = nlohmann::ordered_json;

// An error that becomes an HTTP response {"error": {"message", "type", "code"}}.
struct HttpError {
  int status = 400;
  std::string message;
  std::string type;  // "" = from the status
  std::vector<std::pair<std::string, std::string>> headers;
};

// OpenAI's error type names.
inline const char* error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

inline std::string error_json(int status, std::string_view message, std::string_view type = {}) {
  json e = {{"error", {{"message", std::string(message)}, {"type", type.empty() ? error_type(status) : std::string(type)},
                       {"code", status}}}};
  return e.dump(-1, ' ', false, json::error_handler_t::replace);
}

[[noreturn]] inline void bad_request(std::string message) { throw HttpError{400, std::move(message), {}, {}}; }

// Deepest nesting of arrays / objects in a JSON text (strings are skipped).
inline int json_depth(std::string_view text) {
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

inline constexpr int kMaxJsonDepth = 64;

// Parses a request body: 400 for malformed JSON, too deep nesting, or a non-object.
inline json parse_body(std::string_view body) {
  if (json_depth(body) > kMaxJsonDepth) bad_request("the JSON body is nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad_request("the body is not valid JSON");
  if (!j.is_object()) bad_request("the body must be a JSON object");
  return j;
}

// Typed optional fields of one object; `where` prefixes field names in errors ("messages[0].").
class Fields {
 public:
  explicit Fields(const json& j, std::string where = {}) : j_(j), where_(std::move(where)) {}
  bool has(const char* k) const { return j_.contains(k) && !j_.at(k).is_null(); }
  const json* get(const char* k) const { return has(k) ? &j_.at(k) : nullptr; }
  std::string name(const char* k) const { return where_ + k; }

  bool boolean(const char* k, bool def) const {
    const json* v = get(k);
    if (!v) return def;
    if (!v->is_boolean()) bad_request(name(k) + ": expected a boolean");
    return v->get<bool>();
  }
  double number(const char* k, double def) const {
    const json* v = get(k);
    if (!v) return def;
    if (!v->is_number()) bad_request(name(k) + ": expected a number");
    const double d = v->get<double>();
    if (!std::isfinite(d)) bad_request(name(k) + ": expected a finite number");
    return d;
  }
  double number_in(const char* k, double def, double lo, double hi) const {
    const double d = number(k, def);
    if (d < lo || d > hi) bad_request(name(k) + ": must be between " + fmt(lo) + " and " + fmt(hi));
    return d;
  }
  int64_t integer(const char* k, int64_t def) const {
    const json* v = get(k);
    if (!v) return def;
    if (v->is_number_integer() || v->is_number_unsigned()) {
      if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) bad_request(name(k) + ": out of range");
      return v->get<int64_t>();
    }
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
    }
    bad_request(name(k) + ": expected an integer");
  }
  int64_t integer_in(const char* k, int64_t def, int64_t lo, int64_t hi) const {
    const int64_t v = integer(k, def);
    if (v < lo || v > hi) bad_request(name(k) + ": must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return v;
  }
  std::string string(const char* k, std::string def = {}) const {
    const json* v = get(k);
    if (!v) return def;
    if (!v->is_string()) bad_request(name(k) + ": expected a string");
    return v->get<std::string>();
  }
  // A string or an array of strings (stop).
  std::vector<std::string> strings(const char* k) const {
    const json* v = get(k);
    std::vector<std::string> out;
    if (!v) return out;
    if (v->is_string()) {
      out.push_back(v->get<std::string>());
      return out;
    }
    if (!v->is_array()) bad_request(name(k) + ": expected a string or an array of strings");
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) bad_request(name(k) + "[" + std::to_string(i) + "]: expected a string");
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }

 private:
  static std::string fmt(double d) {
    std::string s = std::to_string(d);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  const json& j_;
  std::string where_;
};

}  // namespace loom::server
