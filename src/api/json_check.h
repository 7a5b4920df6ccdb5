// Checked reads of a request body's fields for the dialect translators (anthropic.cpp,
// responses.cpp): each throws ApiError 400 whose message starts with the field's path
// ("messages[2].content: expected a string, got a number"), and nothing else.
#pragma once

#include <cstdint>
#include <string>

#include "api/api_types.h"

namespace loom::api {

// "a string", "an object", ... for error messages.
const char* kind_of(const json& v);
[[noreturn]] void bad(const std::string& path, const std::string& what);
[[noreturn]] void bad_type(const std::string& path, const char* expected, const json& got);

// The member `key` of object o, or nullptr when absent or null (null means "not given").
const json* get(const json& o, const char* key);

const std::string& as_string(const json& v, const std::string& path);
bool as_bool(const json& v, const std::string& path);
double as_number(const json& v, const std::string& path);  // finite
int64_t as_int(const json& v, const std::string& path);    // an integral float (100.0) too
const json& as_object(const json& v, const std::string& path);
const json& as_array(const json& v, const std::string& path);

// translate(body), with anything but an ApiError it throws turned into one (413 when out of
// memory, 400 otherwise): what a translator's caller may catch.
json only_api_errors(json (*translate)(const json&), const json& body);

// path[i]
std::string at(const std::string& path, size_t i);

// Nesting deeper than this is refused before anything is copied or serialised (both recurse).
inline constexpr size_t kMaxDepth = 256;
// ApiError 400 when `body` nests deeper than kMaxDepth (checked without recursion).
void check_depth(const json& body);

}  // namespace loom::api
