// HTTP errors in OpenAI's shape, and reading the few fields of a request body that the server
// itself interprets (stream, echo, encoding_format, top_n, ...). Everything else in a body is
// checked by the C API when the request is submitted (loom_serve.h), with the same wording.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
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

inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

inline std::string error_json(int status, std::string_view message, std::string_view type = {}) {
  const json e = {{"error",
                   {{"message", std::string(message)},
                    {"type", type.empty() ? error_type(status) : std::string(type)},
                    {"code", status}}}};
  return dump(e);
}

[[noreturn]] inline void bad_request(std::string message) { throw HttpError{400, std::move(message), {}, {}}; }

// Deepest nesting a body may have: deeper ones are refused while parsing, before any value is built
// (so no recursion over a hostile document). The C API applies the same limit.
inline constexpr int kMaxBodyDepth = 64;

// A request body -> a JSON object, or a 400 naming what is wrong.
// Any JSON value (llama-server's /lora-adapters takes an array), with the same checks.
inline json parse_any_body(std::string_view body);

inline json parse_body(std::string_view body) {
  json j = parse_any_body(body);
  if (!j.is_object()) bad_request("the body must be a JSON object");
  return j;
}

inline json parse_any_body(std::string_view body) {
  struct TooDeep {};
  const json::parser_callback_t limit = [](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxBodyDepth) {
      throw TooDeep{};
    }
    return true;
  };
  json j;
  try {
    j = json::parse(body, limit, /*allow_exceptions=*/false);
  } catch (const TooDeep&) {
    bad_request("the JSON body is nested more than " + std::to_string(kMaxBodyDepth) + " levels deep");
  }
  if (j.is_discarded()) bad_request("the body is not valid JSON");
  return j;
}

// Typed optional fields of one object (null counts as absent); errors name the field, prefixed
// with `where` ("stream_options.").
class Fields {
 public:
  explicit Fields(const json& j, std::string where = {}) : j_(j), where_(std::move(where)) {}
  const json* get(const char* k) const {
    if (!j_.is_object()) return nullptr;
    const auto it = j_.find(k);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const char* k) const { return get(k) != nullptr; }
  bool boolean(const char* k, bool def) const {
    const json* v = get(k);
    if (!v) return def;
    if (!v->is_boolean()) bad_request(where_ + k + ": expected a boolean");
    return v->get<bool>();
  }
  std::string string(const char* k, std::string def = {}) const {
    const json* v = get(k);
    if (!v) return def;
    if (!v->is_string()) bad_request(where_ + k + ": expected a string");
    return v->get<std::string>();
  }
  // An integer (an integral float such as 2.0 too) in [lo, hi].
  int64_t integer_in(const char* k, int64_t def, int64_t lo, int64_t hi) const {
    const json* v = get(k);
    int64_t x = def;
    if (v) {
      if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) bad_request(where_ + k + ": out of range");
      if (v->is_number_integer()) x = v->get<int64_t>();
      else if (v->is_number_float() && v->get<double>() == std::floor(v->get<double>()) &&
               std::fabs(v->get<double>()) < 9e15)
        x = int64_t(v->get<double>());
      else bad_request(where_ + k + ": expected an integer");
    }
    if (x < lo || x > hi) bad_request(where_ + k + ": must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return x;
  }

 private:
  const json& j_;
  std::string where_;
};

}  // namespace loom::server
