// HTTP errors in OpenAI's shape; the request-body readers (typed fields, the nesting-depth check
// that runs before the parser) come from serve/request_json.h.
#pragma once

#include <nlohmann/json.hpp>

#include "serve/request_json.h"

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

// Body parsing and typed fields live in the serve layer (shared with the C API); their
// RequestError becomes a 400 (or what its status code maps to) in App::handle.
using serve::Fields;

// serve::parse_body with its RequestError as the HttpError (400) it becomes.
inline json parse_body(std::string_view body) {
  try {
    return serve::parse_body(body);
  } catch (const serve::RequestError& e) {
    throw HttpError{400, e.message, {}, {}};
  }
}

}  // namespace loom::server
