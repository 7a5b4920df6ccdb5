// Helpers with Python semantics shared by the builtin filters, tests and methods (internal to
// src/jinja): argument access, str methods (case, strip, split, replace, format), printf-style
// formatting, attribute paths, len(), int()/float()/round().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jinja/interpreter.h"

namespace loom::jinja::py {

constexpr size_t kElementBytes = 64;  // bytes charged per element of a list a builtin builds

// Argument i (positional) or `name` (keyword), else `dflt`.
inline Value arg(const CallArgs& a, size_t i, const char* name, Value dflt = Value()) {
  if (i < a.positional.size()) return a.positional[i];
  for (const auto& [k, v] : a.keyword)
    if (k == name) return v;
  return dflt;
}

// The value as a string / integer, or a TemplateError naming `what`.
const std::string& need_str(Interpreter& in, const Value& v, const char* what);
int64_t need_int(Interpreter& in, const Value& v, const char* what);

// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (other scripts unchanged).
uint32_t cp_upper(uint32_t c);
uint32_t cp_lower(uint32_t c);
// Letters: ASCII, and everything from Latin-1 letters up to U+1FFF except the two Latin-1 signs.
bool cp_is_alpha(uint32_t c);
inline bool cp_is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
std::string str_upper(const std::string& s);
std::string str_lower(const std::string& s);
std::string str_capitalize(const std::string& s);
// Python str.title(): a letter after a non-letter is upper-cased, the others lower-cased.
std::string py_title(const std::string& s);
// Jinja2's |title: words start after whitespace, '-', '(', '{', '[' or '<'.
std::string jinja_title(const std::string& s);
// str.strip / lstrip / rstrip; chars = null strips whitespace.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
std::vector<std::string> py_splitlines(const std::string& s);
std::vector<std::string> py_split(Interpreter& in, const std::string& s, const Value& sep, int64_t maxsplit);
std::string py_replace(Interpreter& in, const std::string& s, const std::string& old, const std::string& rep, int64_t count);
// Python's printf-style `fmt % args` for %s %r %d %i %f %e %g %x %o %c %% with flags/width/precision.
std::string printf_format(Interpreter& in, const std::string& fmt, const Value& argv);
// str.format with {}, {0}, {name} and {name.attr} / {0[key]}; format specs beyond none are ignored.
std::string str_format(Interpreter& in, const std::string& fmt, const CallArgs& a);
std::string html_escape(const std::string& s);
// Jinja's attribute getter for map/sort/...: "a.b.0" walks attributes and integer items.
Value get_path(Interpreter& in, const Value& v, const Value& attribute);
Value sort_key(const Value& v, bool case_sensitive);
size_t py_len(Interpreter& in, const Value& v);
Value to_float_value(const Value& v, const Value& dflt);
Value to_int_value(const Value& v, const Value& dflt, int base);
Value round_value(Interpreter& in, const Value& v, int64_t precision, const std::string& method);

}  // namespace loom::jinja::py
