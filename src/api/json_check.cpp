#include "api/json_check.h"

#include <cmath>
#include <new>
#include <vector>

namespace loom::api {

const char* kind_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::binary: return "binary data";
    case json::value_t::discarded: return "nothing";
    default: return "a number";
  }
}

void bad(const std::string& path, const std::string& what) { api_error(path + ": " + what); }
void bad_type(const std::string& path, const char* expected, const json& got) {
  bad(path, std::string("expected ") + expected + ", got " + kind_of(got));
}

const json* get(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

const std::string& as_string(const json& v, const std::string& path) {
  if (!v.is_string()) bad_type(path, "a string", v);
  return v.get_ref<const std::string&>();
}
bool as_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) bad_type(path, "a boolean", v);
  return v.get<bool>();
}
double as_number(const json& v, const std::string& path) {
  if (!v.is_number()) bad_type(path, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d)) bad(path, "expected a finite number");
  return d;
}
int64_t as_int(const json& v, const std::string& path) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) bad(path, "integer too large");
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  bad_type(path, "an integer", v);
}
const json& as_object(const json& v, const std::string& path) {
  if (!v.is_object()) bad_type(path, "an object", v);
  return v;
}
const json& as_array(const json& v, const std::string& path) {
  if (!v.is_array()) bad_type(path, "an array", v);
  return v;
}

json only_api_errors(json (*translate)(const json&), const json& body) {
  try {
    return translate(body);
  } catch (const ApiError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw ApiError{413, "request too large", {}};
  } catch (const std::exception& e) {
    throw ApiError{400, std::string("invalid request: ") + e.what(), {}};
  } catch (...) {
    throw ApiError{400, "invalid request", {}};
  }
}

std::string at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

void check_depth(const json& body) {
  struct Frame {
    const json* v;
    size_t depth;
  };
  std::vector<Frame> stack{{&body, 1}};
  while (!stack.empty()) {
    const Frame f = stack.back();
    stack.pop_back();
    if (!f.v->is_structured()) continue;
    if (f.depth > kMaxDepth) api_error("request body: nested more than " + std::to_string(kMaxDepth) + " levels deep");
    for (const auto& c : *f.v) stack.push_back({&c, f.depth + 1});
  }
}

}  // namespace loom::api
