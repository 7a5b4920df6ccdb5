// Python-semantics helpers of the builtins (see builtin_helpers.h).
#include "jinja/builtin_helpers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace loom::jinja::py {

const std::string& need_str(Interpreter& in, const Value& v, const char* what) {
  if (v.is_undefined()) in.fail_undefined(v);
  if (!v.is_string()) in.fail(std::string(what) + ": expected a string, got '" + v.type_name() + "'");
  return v.str();
}

int64_t need_int(Interpreter& in, const Value& v, const char* what) {
  if (v.is_undefined()) in.fail_undefined(v);
  if (!v.is_int() && !v.is_bool()) in.fail(std::string(what) + ": expected an integer, got '" + v.type_name() + "'");
  return v.as_int();
}

// ---- case and whitespace ----

// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (other scripts unchanged).
uint32_t cp_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x137 && (c & 1)) return c - 1;
  if (c >= 0x139 && c <= 0x148 && !(c & 1)) return c - 1;
  if (c >= 0x14A && c <= 0x177 && (c & 1)) return c - 1;
  if (c == 0x17A || c == 0x17C || c == 0x17E) return c - 1;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3AC && c <= 0x3AF) return c == 0x3AC ? 0x386 : c - 37;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}
uint32_t cp_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x137 && !(c & 1)) return c + 1;
  if (c >= 0x139 && c <= 0x148 && (c & 1)) return c + 1;
  if (c >= 0x14A && c <= 0x177 && !(c & 1)) return c + 1;
  if (c == 0x179 || c == 0x17B || c == 0x17D) return c + 1;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}
// Letters: ASCII, and everything from Latin-1 letters up to U+1FFF except the two Latin-1 signs.
bool cp_is_alpha(uint32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c != 0xD7 && c != 0xF7 && c < 0x2000);
}

std::string map_cps(const std::string& s, uint32_t (*f)(uint32_t)) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t c : utf8_decode(s)) utf8_append(out, f(c));
  return out;
}
std::string str_upper(const std::string& s) { return map_cps(s, cp_upper); }
std::string str_lower(const std::string& s) { return map_cps(s, cp_lower); }

std::string str_capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (uint32_t c : utf8_decode(s)) {
    utf8_append(out, first ? cp_upper(c) : cp_lower(c));
    first = false;
  }
  return out;
}

// Python str.title(): a letter after a non-letter is upper-cased, the others lower-cased.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_alpha = false;
  for (uint32_t c : utf8_decode(s)) {
    const bool a = cp_is_alpha(c);
    utf8_append(out, a ? (prev_alpha ? cp_lower(c) : cp_upper(c)) : c);
    prev_alpha = a;
  }
  return out;
}

// Jinja2's |title: words start after whitespace, '-', '(', '{', '[' or '<'.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool start = true;
  for (uint32_t c : utf8_decode(s)) {
    const bool sep = is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    utf8_append(out, sep ? c : (start ? cp_upper(c) : cp_lower(c)));
    start = sep;
  }
  return out;
}

// str.strip / lstrip / rstrip; chars = null strips whitespace.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  const auto cps = utf8_decode(s);
  std::vector<uint32_t> set;
  const bool ws = !chars.is_string();
  if (!ws) set = utf8_decode(chars.str());
  auto strip_it = [&](uint32_t c) { return ws ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end(); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return utf8_encode(cps, b, e);
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> lines;
  const auto cps = utf8_decode(s);
  std::string cur;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t c = cps[i];
    if (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
        c == 0x2028 || c == 0x2029) {
      if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
      lines.push_back(std::move(cur));
      cur.clear();
    } else {
      utf8_append(cur, c);
    }
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

std::vector<std::string> py_split(Interpreter& in, const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep.is_string()) {  // whitespace runs; no empty strings
    const auto cps = utf8_decode(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && is_py_space(cps[e - 1])) --e;
        out.push_back(utf8_encode(cps, i, e));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !is_py_space(cps[j])) ++j;
      out.push_back(utf8_encode(cps, i, j));
      i = j;
    }
    return out;
  }
  const std::string& d = sep.str();
  if (d.empty()) in.fail("empty separator");
  size_t pos = 0;
  while (true) {
    if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) break;
    const size_t f = s.find(d, pos);
    if (f == std::string::npos) break;
    out.push_back(s.substr(pos, f - pos));
    pos = f + d.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::string py_replace(Interpreter& in, const std::string& s, const std::string& old, const std::string& rep,
                       int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `rep` between every character
    const auto cps = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
      }
      if (i < cps.size()) utf8_append(out, cps[i]);
      if (out.size() > in.options().max_output_bytes) in.fail("replace() result too large");
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += rep;
    pos = f + old.size();
    ++done;
    if (out.size() > in.options().max_output_bytes) in.fail("replace() result too large");
  }
  out.append(s, pos, std::string::npos);
  return out;
}

namespace {

// One `%` conversion of printf_format: v converted by conv with the flags / width / precision in
// spec ("%-5.2" and the like), appended to out.
void format_conversion(Interpreter& in, char conv, const std::string& spec, const Value& v, std::string& out) {
  char buf[512];
  switch (conv) {
    case 's':
    case 'r': {
      const std::string s = conv == 's' ? to_str(v) : to_repr(v);
      std::string sp = spec + "s";
      if (spec == "%") out += s;
      else {
        std::snprintf(buf, sizeof buf, sp.c_str(), s.c_str());
        out += buf;
      }
      break;
    }
    case 'd':
    case 'i':
    case 'x':
    case 'X':
    case 'o': {
      if (!v.is_number()) in.fail("%" + std::string(1, conv) + " format: a number is required, not " + v.type_name());
      const long long n = v.is_float() ? (long long)v.as_double() : (long long)v.as_int();
      std::string sp = spec + "ll" + (conv == 'i' ? 'd' : conv);
      std::snprintf(buf, sizeof buf, sp.c_str(), n);
      out += buf;
      break;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': {
      if (!v.is_number()) in.fail("must be real number, not " + v.type_name());
      std::string sp = spec + conv;
      std::snprintf(buf, sizeof buf, sp.c_str(), v.as_double());
      out += buf;
      break;
    }
    case 'c': {
      if (v.is_string()) out += v.str();
      else utf8_append(out, uint32_t(need_int(in, v, "%c")));
      break;
    }
    default: in.fail(std::string("unsupported format character '") + conv + "'");
  }
}

}  // namespace

// Python's printf-style `fmt % args` for %s %r %d %i %f %e %g %x %o %c %% with flags/width/precision.
std::string printf_format(Interpreter& in, const std::string& fmt, const Value& argv) {
  std::vector<Value> args;
  const Value* mapping = nullptr;
  // Python: a tuple gives the arguments; anything else is one argument, and a dict or list (which
  // have __getitem__) may also go unused without "not all arguments converted".
  if (argv.is_tuple()) args = argv.items();
  else args.push_back(argv);
  if (argv.is_dict()) mapping = &argv;
  const bool lenient = argv.is_dict() || (argv.is_list() && !argv.is_tuple());
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) in.fail("incomplete format");
    if (fmt[i] == '%') {
      out += '%';
      continue;
    }
    Value v;
    bool have = false;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) in.fail("format requires a mapping");
      const Value* found = mapping->dict_data().find(Value::string(fmt.substr(i + 1, close - i - 1)));
      if (!found) in.fail("format key " + fmt.substr(i + 1, close - i - 1) + " not found");
      v = *found;
      have = true;
      i = close + 1;
    }
    std::string spec = "%";
    while (i < fmt.size() && fmt[i] != 0 && std::strchr("-+ 0#", fmt[i])) spec += fmt[i++];
    while (i < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[i])) || fmt[i] == '.')) spec += fmt[i++];
    if (i >= fmt.size()) in.fail("incomplete format");
    const char conv = fmt[i];
    if (!have) {
      if (next >= args.size()) in.fail("not enough arguments for format string");
      v = args[next++];
    }
    format_conversion(in, conv, spec, v, out);
  }
  if (!lenient && next < args.size()) in.fail("not all arguments converted during string formatting");
  return out;
}

// str.format with {}, {0}, {name} and {name.attr} / {0[key]}; format specs beyond none are ignored.
std::string str_format(Interpreter& in, const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) in.fail("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    const size_t colon = field.find(':');
    const size_t bang = field.find('!');
    bool repr = false;
    if (bang != std::string::npos && (colon == std::string::npos || bang < colon)) {
      repr = field.compare(bang + 1, 1, "r") == 0;
      field = field.substr(0, bang);
    } else if (colon != std::string::npos) {
      field = field.substr(0, colon);
    }
    size_t end = 0;
    while (end < field.size() && field[end] != '.' && field[end] != '[') ++end;
    const std::string head = field.substr(0, end);
    Value v;
    if (head.empty()) {
      if (auto_idx >= a.positional.size()) in.fail("Replacement index " + std::to_string(auto_idx) + " out of range");
      v = a.positional[auto_idx++];
    } else if (std::all_of(head.begin(), head.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
      const size_t idx = size_t(std::stoul(head));
      if (idx >= a.positional.size()) in.fail("Replacement index " + head + " out of range");
      v = a.positional[idx];
    } else {
      bool found = false;
      for (const auto& [k, val] : a.keyword)
        if (k == head) {
          v = val;
          found = true;
        }
      if (!found) in.fail("KeyError: '" + head + "'");
    }
    while (end < field.size()) {
      if (field[end] == '.') {
        size_t e2 = end + 1;
        while (e2 < field.size() && field[e2] != '.' && field[e2] != '[') ++e2;
        v = in.get_attr(v, field.substr(end + 1, e2 - end - 1));
        end = e2;
      } else {
        const size_t e2 = field.find(']', end);
        if (e2 == std::string::npos) in.fail("Missing ']' in format string");
        const std::string key = field.substr(end + 1, e2 - end - 1);
        const bool num = !key.empty() && std::all_of(key.begin(), key.end(),
                                                     [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
        v = in.get_item(v, num ? Value::integer(std::stoll(key)) : Value::string(key));
        end = e2 + 1;
      }
    }
    out += repr ? to_repr(v) : to_str(v);
    i = close;
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Jinja's attribute getter for map/sort/...: "a.b.0" walks attributes and integer items.
Value get_path(Interpreter& in, const Value& v, const Value& attribute) {
  if (attribute.is_int()) return in.get_item(v, attribute);
  const std::string path = to_str(attribute);
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    if (dot == std::string::npos) dot = path.size();
    const std::string part = path.substr(pos, dot - pos);
    const bool num = !part.empty() && std::all_of(part.begin(), part.end(),
                                                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    cur = num ? in.get_item(cur, Value::integer(std::stoll(part))) : in.get_item(cur, Value::string(part));
    if (cur.is_undefined()) return cur;
    pos = dot + 1;
  }
  return cur;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(str_lower(v.str()));
  return v;
}

size_t py_len(Interpreter& in, const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return 0;
    case Value::Type::kString: return utf8_length(v.str());
    case Value::Type::kList: return v.items().size();
    case Value::Type::kDict: return v.dict_data().items.size();
    default: in.fail("object of type '" + v.type_name() + "' has no len()");
  }
}

Value to_float_value(const Value& v, const Value& dflt) {
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return Value::number(double(v.as_int()));
  if (v.is_string()) {
    std::string s;
    for (char c : v.str())
      if (c != '_') s += c;
    const char* b = s.c_str();
    while (*b && std::isspace(static_cast<unsigned char>(*b))) ++b;
    char* end = nullptr;
    const double d = std::strtod(b, &end);
    if (end != b) {
      while (*end && std::isspace(static_cast<unsigned char>(*end))) ++end;
      if (!*end) return Value::number(d);
    }
  }
  return dflt;
}

Value to_int_value(const Value& v, const Value& dflt, int base) {
  if (v.is_int()) return v;
  if (v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(int64_t(d));
    return dflt;
  }
  if (v.is_string()) {
    std::string s;
    for (char c : v.str())
      if (c != '_') s += c;
    const char* b = s.c_str();
    while (*b && std::isspace(static_cast<unsigned char>(*b))) ++b;
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(b, &end, base);
    if (end != b && errno == 0) {
      const char* e = end;
      while (*e && std::isspace(static_cast<unsigned char>(*e))) ++e;
      if (!*e) return Value::integer(n);
    }
    const Value f = to_float_value(v, Value());
    if (f.is_float()) return to_int_value(f, dflt, base);
  }
  return dflt;
}

Value round_value(Interpreter& in, const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number()) in.fail("round: expected a number, got '" + v.type_name() + "'");
  if (method == "common" && !v.is_float() && precision >= 0) return Value::integer(v.as_int());  // round(int)
  const double x = v.as_double();
  const double m = std::pow(10.0, double(precision));
  double r;
  if (method == "common") {
    // Python's round(): half to even, on the exact binary value.
    const double scaled = x * m;
    double fl = std::floor(scaled);
    const double diff = scaled - fl;
    if (diff > 0.5 || (diff == 0.5 && std::fmod(fl, 2.0) != 0)) fl += 1;
    r = fl / m;
    // Prefer the correctly rounded decimal when scaling introduced error (e.g. 2.675).
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", int(std::max<int64_t>(0, std::min<int64_t>(precision, 30))), x);
    if (precision >= 0) r = std::strtod(buf, nullptr);
  } else if (method == "ceil") {
    r = std::ceil(x * m) / m;
  } else if (method == "floor") {
    r = std::floor(x * m) / m;
  } else {
    in.fail("method must be 'common', 'ceil' or 'floor'");
  }
  return Value::number(r);
}

}  // namespace loom::jinja::py
