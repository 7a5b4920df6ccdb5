// Filters, tests, methods and operators with Python / Jinja2 3.1 semantics (the HF authority).
// Deviations, kept deliberately small:
//  - map/select/reject/selectattr/rejectattr/items return lists, not generators;
//  - upper/lower/title/capitalize map case for ASCII, Latin-1/Extended-A, Greek and Cyrillic only;
//  - list.append/extend work (transformers' immutable sandbox would refuse them; llama.cpp allows).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "chat/interpreter.h"

namespace loom::chat {
namespace {

constexpr size_t kElementBytes = 64;

// Argument i (positional) or `name` (keyword), else `dflt`.
Value arg(const CallArgs& a, size_t i, const char* name, Value dflt = Value()) {
  if (i < a.positional.size()) return a.positional[i];
  for (const auto& [k, v] : a.keyword)
    if (k == name) return v;
  return dflt;
}

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
bool cp_is_digit(uint32_t c) { return c >= '0' && c <= '9'; }

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
  auto strip_it = [&](uint32_t c) {
    return ws ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
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
  if (!lenient && next < args.size()) in.fail("not all arguments converted during string formatting");
  return out;
}

// str.format with {}, {0}, {name} and {name.attr} / {0[key]}; format specs beyond none are ignored.
std::string str_format(Interpreter& in, const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') { out += '{'; ++i; continue; }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') { out += '}'; ++i; continue; }
    if (c != '{') { out += c; continue; }
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
        if (k == head) { v = val; found = true; }
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
        const bool num = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
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
    const bool num = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
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
    if (diff > 0.5) fl += 1;
    else if (diff == 0.5 && std::fmod(fl, 2.0) != 0) fl += 1;
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

// select/reject/selectattr/rejectattr.
Value select_impl(Interpreter& in, const Value& seq, CallArgs& a, bool with_attr, bool keep_if) {
  size_t first = 0;
  Value attribute;
  if (with_attr) {
    attribute = arg(a, 0, "attribute");
    first = 1;
  }
  std::string test;
  CallArgs targs;
  if (a.positional.size() > first) {
    test = need_str(in, a.positional[first], "select");
    for (size_t i = first + 1; i < a.positional.size(); ++i) targs.positional.push_back(a.positional[i]);
  }
  std::vector<Value> out;
  for (const Value& item : in.iterate(seq)) {
    in.step();
    const Value subject = with_attr ? get_path(in, item, attribute) : item;
    const bool r = test.empty() ? subject.truthy() : in.apply_test(test, subject, targs);
    if (r == keep_if) out.push_back(item);
  }
  in.charge(out.size() * kElementBytes);
  return Value::list(std::move(out));
}

Value min_max(Interpreter& in, const Value& seq, CallArgs& a, bool want_max) {
  const bool cs = arg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
  const Value attribute = arg(a, 1, "attribute", Value::none());
  const auto items = in.iterate(seq);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](const Value& v) { return sort_key(attribute.is_none() ? v : get_path(in, v, attribute), cs); };
  for (size_t i = 1; i < items.size(); ++i) {
    const int c = compare_values(in, key(items[i]), key(items[best]));
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value tojson_filter(Interpreter& in, const Value& v, CallArgs& a) {
  JsonOptions o;
  o.ensure_ascii = arg(a, 99, "ensure_ascii", Value::boolean(false)).truthy();
  const Value indent = arg(a, 0, "indent", Value::none());
  if (indent.is_int()) {
    o.indent = int(std::clamp<int64_t>(indent.as_int(), 0, 64));
    if (indent.as_int() < 0) o.indent = 0;  // Python: negative indent = newlines only
  } else if (indent.is_string()) {
    o.indent_str = indent.str();
    o.indent = 0;
  } else if (!indent.is_none() && !indent.is_undefined()) {
    in.fail("tojson: indent must be an integer or a string");
  }
  const bool pretty = o.indent >= 0;
  if (pretty) o.item_sep = ",";
  const Value seps = arg(a, 99, "separators", Value::none());
  if (seps.is_list() && seps.items().size() == 2 && seps.items()[0].is_string() && seps.items()[1].is_string()) {
    o.item_sep = seps.items()[0].str();
    o.key_sep = seps.items()[1].str();
  }
  o.sort_keys = arg(a, 99, "sort_keys", Value::boolean(false)).truthy();
  auto r = to_json(v, o);
  if (!r) in.fail(r.status().message());
  return in.make_string(std::move(r).value());
}

Value indent_filter(Interpreter& in, const Value& v, CallArgs& a) {
  std::string s = to_str(v);
  const Value w = arg(a, 0, "width", Value::integer(4));
  const std::string ind = w.is_string() ? w.str() : std::string(size_t(std::clamp<int64_t>(need_int(in, w, "indent"), 0, 1024)), ' ');
  const bool first = arg(a, 1, "first", Value::boolean(false)).truthy();
  const bool blank = arg(a, 2, "blank", Value::boolean(false)).truthy();
  s += "\n";
  const auto lines = py_splitlines(s);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? std::string() : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        if (!lines[i].empty()) rv += ind;
        rv += lines[i];
      }
    }
  }
  if (first) rv = ind + rv;
  return in.make_string(std::move(rv));
}

}  // namespace

// ---- operators ----

int compare_values(Interpreter& in, const Value& a, const Value& b) {
  // Lists compare element-wise and may contain themselves: bound the recursion.
  thread_local int depth = 0;
  struct Guard {
    explicit Guard(Interpreter& i) {
      if (++depth > 256) {
        depth = 0;
        i.fail("comparison nested too deeply (or circular)");
      }
    }
    ~Guard() { depth = depth > 0 ? depth - 1 : 0; }
  } guard(in);
  if (a.is_undefined()) in.fail_undefined(a);
  if (b.is_undefined()) in.fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str() ? -1 : a.str() > b.str() ? 1 : 0;
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return compare_values(in, x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  in.fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

bool contains(Interpreter& in, const Value& container, const Value& item) {
  in.work(scan_cost(container));
  switch (container.type()) {
    case Value::Type::kUndefined: return false;
    case Value::Type::kString:
      if (!item.is_string())
        in.fail("'in <string>' requires string as left operand, not " + item.type_name());
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::kList:
      for (const auto& v : container.items())
        if (values_equal(v, item)) return true;
      return false;
    case Value::Type::kDict:
      if (item.is_dict() || (item.is_list() && !item.is_tuple())) in.fail("unhashable type: '" + item.type_name() + "'");
      return container.dict_data().find(item) != nullptr;
    default: in.fail("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (in.options().lenient && op == "+" && (a.is_undefined() || b.is_undefined())) {
    // llama.cpp: an undefined operand adds nothing.
    if (a.is_undefined() && b.is_undefined()) return Value::string("");
    return a.is_undefined() ? b : a;
  }
  if (a.is_undefined()) in.fail_undefined(a);
  if (b.is_undefined()) in.fail_undefined(b);
  auto type_error = [&]() {
    if (op == "+" && a.is_string())
      in.fail("can only concatenate str (not \"" + b.type_name() + "\") to str");
    if (op == "+" && a.is_list() && !a.is_tuple())
      in.fail("can only concatenate list (not \"" + b.type_name() + "\") to list");
    in.fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) in.fail("integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return in.make_string(a.str() + b.str());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      in.charge(items.size() * kElementBytes);
      return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    type_error();
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) in.fail("integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_double() - b.as_double());
    type_error();
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) in.fail("integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_double() * b.as_double());
    const Value* seq = (a.is_string() || a.is_list()) ? &a : (b.is_string() || b.is_list()) ? &b : nullptr;
    const Value* cnt = seq == &a ? &b : &a;
    if (seq && (cnt->is_int() || cnt->is_bool())) {
      const int64_t n = std::max<int64_t>(0, cnt->as_int());
      if (seq->is_string()) {
        const double total = double(seq->str().size()) * double(n);
        if (total > double(in.options().max_output_bytes)) in.fail("string repetition result too large");
        std::string out;
        out.reserve(size_t(total));
        for (int64_t i = 0; i < n; ++i) out += seq->str();
        return in.make_string(std::move(out));
      }
      const double total = double(seq->items().size()) * double(n);
      if (total * double(kElementBytes) > double(in.options().max_total_bytes)) in.fail("list repetition result too large");
      in.charge(size_t(total) * kElementBytes);
      std::vector<Value> out;
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->items().begin(), seq->items().end());
      return seq->is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    type_error();
  }
  if (op == "/") {
    if (!nums) type_error();
    if (b.as_double() == 0) in.fail("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!nums) type_error();
    if (b.as_double() == 0) in.fail("integer division or modulo by zero");
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (x == INT64_MIN && y == -1) in.fail("integer overflow");
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return Value::integer(q);
    }
    return Value::number(std::floor(a.as_double() / b.as_double()));
  }
  if (op == "%") {
    if (a.is_string()) return in.make_string(printf_format(in, a.str(), b));
    if (!nums) type_error();
    if (b.as_double() == 0) in.fail("integer division or modulo by zero");
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (y == -1) return Value::integer(0);
      int64_t r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value::integer(r);
    }
    const double x = a.as_double(), y = b.as_double();
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::number(r);
  }
  if (op == "**") {
    if (!nums) type_error();
    if (ints && b.as_int() >= 0) {
      int64_t r = 1, base = a.as_int(), e = b.as_int();
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(r, base, &r)) in.fail("integer overflow");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) in.fail("integer overflow");
      }
      return Value::integer(r);
    }
    if (a.as_double() == 0 && b.as_double() < 0) in.fail("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  in.fail("unknown operator " + op);
}

// ---- methods ----

Value builtin_method(Interpreter& in, const Value& obj, const std::string& name) {
  in.work(scan_cost(obj));
  using Fn = std::function<Value(Interpreter&, CallArgs&)>;
  auto bind = [&](Fn f) { return Value::function(name, std::move(f)); };
  if (obj.is_string()) {
    const Value self = obj;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool l = name != "rstrip", r = name != "lstrip";
      return bind([self, l, r](Interpreter& i, CallArgs& a) {
        return i.make_string(py_strip(self.str(), arg(a, 0, "chars", Value::none()), l, r));
      });
    }
    if (name == "upper") return bind([self](Interpreter& i, CallArgs&) { return i.make_string(str_upper(self.str())); });
    if (name == "lower") return bind([self](Interpreter& i, CallArgs&) { return i.make_string(str_lower(self.str())); });
    if (name == "title") return bind([self](Interpreter& i, CallArgs&) { return i.make_string(py_title(self.str())); });
    if (name == "capitalize")
      return bind([self](Interpreter& i, CallArgs&) { return i.make_string(str_capitalize(self.str())); });
    if (name == "split" || name == "rsplit") {
      return bind([self](Interpreter& i, CallArgs& a) {
        const Value m = arg(a, 1, "maxsplit", Value::integer(-1));
        std::vector<Value> out;
        for (auto& p : py_split(i, self.str(), arg(a, 0, "sep", Value::none()), need_int(i, m, "split")))
          out.push_back(Value::string(std::move(p)));
        i.charge(out.size() * kElementBytes + self.str().size());
        return Value::list(std::move(out));
      });
    }
    if (name == "splitlines") {
      return bind([self](Interpreter& i, CallArgs&) {
        std::vector<Value> out;
        for (auto& p : py_splitlines(self.str())) out.push_back(Value::string(std::move(p)));
        i.charge(out.size() * kElementBytes + self.str().size());
        return Value::list(std::move(out));
      });
    }
    if (name == "startswith" || name == "endswith") {
      const bool start = name == "startswith";
      return bind([self, start](Interpreter& i, CallArgs& a) {
        const Value p = arg(a, 0, "prefix");
        std::vector<Value> cands = p.is_list() ? p.items() : std::vector<Value>{p};
        const std::string& str = self.str();
        for (const auto& c : cands) {
          const std::string& x = need_str(i, c, start ? "startswith" : "endswith");
          if (x.size() > str.size()) continue;
          if (start ? str.compare(0, x.size(), x) == 0 : str.compare(str.size() - x.size(), x.size(), x) == 0)
            return Value::boolean(true);
        }
        return Value::boolean(false);
      });
    }
    if (name == "replace") {
      return bind([self](Interpreter& i, CallArgs& a) {
        const Value c = arg(a, 2, "count", Value::integer(-1));
        return i.make_string(py_replace(i, self.str(), need_str(i, arg(a, 0, "old"), "replace"),
                                        need_str(i, arg(a, 1, "new"), "replace"), need_int(i, c, "replace")));
      });
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
      return bind([self, name](Interpreter& i, CallArgs& a) {
        const std::string& sub = need_str(i, arg(a, 0, "sub"), name.c_str());
        const std::string& str = self.str();
        if (name == "count") {
          if (sub.empty()) return Value::integer(int64_t(utf8_length(str)) + 1);
          int64_t n = 0;
          for (size_t p = str.find(sub); p != std::string::npos; p = str.find(sub, p + sub.size())) ++n;
          return Value::integer(n);
        }
        const size_t p = (name == "find" || name == "index") ? str.find(sub) : str.rfind(sub);
        if (p == std::string::npos) {
          if (name == "index" || name == "rindex") i.fail("substring not found");
          return Value::integer(-1);
        }
        return Value::integer(int64_t(utf8_length(std::string_view(str).substr(0, p))));
      });
    }
    if (name == "format")
      return bind([self](Interpreter& i, CallArgs& a) { return i.make_string(str_format(i, self.str(), a)); });
    if (name == "join") {
      return bind([self](Interpreter& i, CallArgs& a) {
        std::string out;
        bool first = true;
        for (const auto& v : i.iterate(arg(a, 0, "iterable"))) {
          if (!first) out += self.str();
          first = false;
          out += need_str(i, v, "join");
          if (out.size() > i.options().max_output_bytes) i.fail("join() result too large");
        }
        return i.make_string(std::move(out));
      });
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
        name == "isupper") {
      return bind([self, name](Interpreter&, CallArgs&) {
        const auto cps = utf8_decode(self.str());
        if (cps.empty()) return Value::boolean(false);
        bool cased = false;
        for (uint32_t c : cps) {
          if (name == "isdigit" && !cp_is_digit(c)) return Value::boolean(false);
          if (name == "isalpha" && !cp_is_alpha(c)) return Value::boolean(false);
          if (name == "isalnum" && !cp_is_alpha(c) && !cp_is_digit(c)) return Value::boolean(false);
          if (name == "isspace" && !is_py_space(c)) return Value::boolean(false);
          if (name == "islower" || name == "isupper") {
            if (cp_upper(c) != c || cp_lower(c) != c) {
              cased = true;
              if (name == "islower" && cp_lower(c) != c) return Value::boolean(false);
              if (name == "isupper" && cp_upper(c) != c) return Value::boolean(false);
            }
          }
        }
        return Value::boolean(name == "islower" || name == "isupper" ? cased : true);
      });
    }
    return Value();
  }
  if (obj.is_dict()) {
    const Value self = obj;
    if (name == "items" || name == "keys" || name == "values") {
      return bind([self, name](Interpreter& i, CallArgs&) {
        std::vector<Value> out;
        for (const auto& [k, v] : self.dict_data().items) {
          if (name == "items") out.push_back(Value::tuple({k, v}));
          else out.push_back(name == "keys" ? k : v);
        }
        i.charge(out.size() * kElementBytes);
        return Value::list(std::move(out));
      });
    }
    if (name == "get") {
      return bind([self](Interpreter&, CallArgs& a) {
        const Value* v = self.dict_data().find(arg(a, 0, "key"));
        return v ? *v : arg(a, 1, "default", Value::none());
      });
    }
    if (name == "copy") {
      return bind([self](Interpreter& i, CallArgs&) {
        Value d = Value::dict();
        d.dict_data().items = self.dict_data().items;
        i.charge(d.dict_data().items.size() * kElementBytes);
        return d;
      });
    }
    return Value();
  }
  if (obj.is_list()) {
    const Value self = obj;
    if (!obj.is_tuple() && (name == "append" || name == "extend")) {
      const bool ext = name == "extend";
      return bind([self, ext](Interpreter& i, CallArgs& a) {
        const Value v = arg(a, 0, "object");
        if (ext) {
          auto items = i.iterate(v);
          i.charge(items.size() * kElementBytes);
          self.items().insert(self.items().end(), items.begin(), items.end());
        } else {
          i.charge(kElementBytes);
          self.items().push_back(v);
        }
        return Value::none();
      });
    }
    if (name == "index" || name == "count") {
      const bool idx = name == "index";
      return bind([self, idx](Interpreter& i, CallArgs& a) {
        const Value x = arg(a, 0, "value");
        int64_t n = 0;
        for (size_t k = 0; k < self.items().size(); ++k) {
          if (values_equal(self.items()[k], x)) {
            if (idx) return Value::integer(int64_t(k));
            ++n;
          }
        }
        if (idx) i.fail(to_repr(x) + " is not in list");
        return Value::integer(n);
      });
    }
  }
  return Value();
}

// ---- tests ----

bool builtin_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  using T = Value::Type;
  in.work(scan_cost(v));
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable")
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "even" || name == "odd") {  // value % 2 == 0 / == 1, with Python's modulo
    const Value r = binary_op(in, "%", v, Value::integer(2));
    return values_equal(r, Value::integer(name == "even" ? 0 : 1));
  }
  if (name == "divisibleby") return values_equal(binary_op(in, "%", v, arg(a, 0, "num")), Value::integer(0));
  if (name == "lower" || name == "upper") {  // str(value).islower()
    CallArgs none;
    const Value s = Value::string(to_str(v));
    return builtin_method(in, s, name == "lower" ? "islower" : "isupper").func().fn(in, none).as_bool();
  }
  if (name == "sameas") {
    const Value o = arg(a, 0, "other");
    if (v.type() != o.type()) return false;
    if (v.type() == T::kNone || v.type() == T::kUndefined) return true;
    if (v.type() == T::kBool || v.type() == T::kInt) return v.as_int() == o.as_int();
    if (v.type() == T::kFloat) return v.as_double() == o.as_double();
    return v.identity() == o.identity();
  }
  if (name == "in") return contains(in, arg(a, 0, "seq"), v);
  if (name == "filter" || name == "test") {
    // Whether a filter/test of that name exists: probe with an empty call and see if it is unknown.
    const std::string n = need_str(in, v, name.c_str());
    static const char* kFilters[] = {"abs", "attr", "batch", "capitalize", "center", "count", "d", "default",
                                     "dictsort", "e", "escape", "first", "float", "format", "indent", "int",
                                     "items", "join", "last", "length", "list", "lower", "map", "max", "min",
                                     "pprint", "reject", "rejectattr", "replace", "reverse", "round", "safe",
                                     "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim",
                                     "unique", "upper", "wordcount"};
    static const char* kTests[] = {"defined", "undefined", "none", "boolean", "true", "false", "integer", "float",
                                   "number", "string", "mapping", "iterable", "sequence", "callable", "escaped",
                                   "even", "odd", "divisibleby", "lower", "upper", "sameas", "in", "filter", "test",
                                   "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt",
                                   "greaterthan", ">", "ge", ">="};
    if (name == "filter") return std::find(std::begin(kFilters), std::end(kFilters), n) != std::end(kFilters);
    return std::find(std::begin(kTests), std::end(kTests), n) != std::end(kTests);
  }
  const Value o = arg(a, 0, "other");
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, o);
  if (name == "ne" || name == "!=") return !values_equal(v, o);
  if (name == "lt" || name == "lessthan" || name == "<") return compare_values(in, v, o) < 0;
  if (name == "le" || name == "<=") return compare_values(in, v, o) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_values(in, v, o) > 0;
  if (name == "ge" || name == ">=") return compare_values(in, v, o) >= 0;
  in.fail("no test named '" + name + "'");
}

// ---- filters ----

Value builtin_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  in.work(scan_cost(v));
  if (name == "safe") return v.is_string() ? v : in.make_string(to_str(v));  // Markup(str(v))
  if (name == "default" || name == "d") {
    const bool boolean = arg(a, 1, "boolean", Value::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", Value::string(""));
    return v;
  }
  if (name == "tojson") return tojson_filter(in, v, a);
  if (name == "string") return v.is_string() ? v : in.make_string(to_str(v));
  if (name == "pprint") return in.make_string(to_repr(v));
  if (name == "length" || name == "count") return Value::integer(int64_t(py_len(in, v)));
  if (name == "trim" || name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "escape" || name == "e" || name == "wordcount" || name == "center") {
    const std::string s = to_str(v);  // str(undefined) is "", as Jinja2's string filters see it
    if (name == "trim") return in.make_string(py_strip(s, arg(a, 0, "chars", Value::none()), true, true));
    if (name == "upper") return in.make_string(str_upper(s));
    if (name == "lower") return in.make_string(str_lower(s));
    if (name == "title") return in.make_string(jinja_title(s));
    if (name == "capitalize") return in.make_string(str_capitalize(s));
    if (name == "escape" || name == "e") return in.make_string(html_escape(s));
    if (name == "center") {
      const int64_t w = std::min<int64_t>(need_int(in, arg(a, 0, "width", Value::integer(80)), "center"), 1 << 20);
      const int64_t len = int64_t(utf8_length(s));
      if (w <= len) return in.make_string(s);
      const int64_t pad = w - len;
      const int64_t left = pad / 2 + (pad & w & 1);
      return in.make_string(std::string(size_t(left), ' ') + s + std::string(size_t(pad - left), ' '));
    }
    // wordcount: Jinja counts \w+ runs
    int64_t n = 0;
    bool inw = false;
    for (uint32_t c : utf8_decode(s)) {
      const bool w = cp_is_alpha(c) || cp_is_digit(c) || c == '_';
      if (w && !inw) ++n;
      inw = w;
    }
    return Value::integer(n);
  }
  if (name == "replace") {
    const std::string s = to_str(v);
    const Value c = arg(a, 2, "count", Value::none());
    return in.make_string(py_replace(in, s, to_str(arg(a, 0, "old")), to_str(arg(a, 1, "new")),
                                     c.is_none() ? -1 : need_int(in, c, "replace")));
  }
  if (name == "indent") return indent_filter(in, v, a);
  if (name == "format") {
    const std::string& fmt = need_str(in, v, "format");
    if (!a.keyword.empty()) {
      Value d = Value::dict();
      for (auto& [k, x] : a.keyword) d.dict_data().set(Value::string(k), x);
      return in.make_string(printf_format(in, fmt, d));
    }
    return in.make_string(printf_format(in, fmt, Value::tuple(a.positional)));
  }
  if (name == "first" || name == "last") {
    if (v.is_string()) {
      const auto cps = utf8_decode(v.str());
      if (cps.empty()) return Value::undefined("No first item, sequence was empty.");
      return Value::string(utf8_encode(cps, name == "first" ? 0 : cps.size() - 1, name == "first" ? 1 : cps.size()));
    }
    const auto items = in.iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    auto items = in.iterate(v);
    in.charge(items.size() * kElementBytes);
    return Value::list(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_dict()) in.fail("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict_data().items) out.push_back(Value::tuple({k, x}));
    in.charge(out.size() * kElementBytes);
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) in.fail("dictsort: expected a mapping, got '" + v.type_name() + "'");
    const bool cs = arg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
    const Value by = arg(a, 1, "by", Value::string("key"));
    const bool reverse = arg(a, 2, "reverse", Value::boolean(false)).truthy();
    const size_t pos = (by.is_string() && by.str() == "value") ? 1 : 0;
    if (by.is_string() && by.str() != "key" && by.str() != "value") in.fail("You can only sort by either 'key' or 'value'");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict_data().items) out.push_back(Value::tuple({k, x}));
    std::stable_sort(out.begin(), out.end(), [&](const Value& p, const Value& q) {
      in.work(1);
      const int c = compare_values(in, sort_key(p.items()[pos], cs), sort_key(q.items()[pos], cs));
      return reverse ? c > 0 : c < 0;
    });
    return Value::list(std::move(out));
  }
  if (name == "join") {
    const std::string sep = to_str(arg(a, 0, "d", Value::string("")));
    const Value attribute = arg(a, 1, "attribute", Value::none());
    std::string out;
    bool first = true;
    for (const auto& item : in.iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attribute.is_none() ? item : get_path(in, item, attribute));
      if (out.size() > in.options().max_output_bytes) in.fail("join result too large");
    }
    return in.make_string(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = utf8_decode(v.str());
      std::reverse(cps.begin(), cps.end());
      return in.make_string(utf8_encode(cps));
    }
    auto items = in.iterate(v);
    std::reverse(items.begin(), items.end());
    in.charge(items.size() * kElementBytes);
    return Value::list(std::move(items));
  }
  if (name == "sort") {
    const bool reverse = arg(a, 0, "reverse", Value::boolean(false)).truthy();
    const bool cs = arg(a, 1, "case_sensitive", Value::boolean(false)).truthy();
    const Value attribute = arg(a, 2, "attribute", Value::none());
    auto items = in.iterate(v);
    auto key = [&](const Value& x) { return sort_key(attribute.is_none() ? x : get_path(in, x, attribute), cs); };
    std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
      in.work(1);
      const int c = compare_values(in, key(p), key(q));
      return reverse ? c > 0 : c < 0;
    });
    in.charge(items.size() * kElementBytes);
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    const bool cs = arg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
    const Value attribute = arg(a, 1, "attribute", Value::none());
    std::vector<Value> out, seen;
    for (const auto& x : in.iterate(v)) {
      in.step();
      const Value k = sort_key(attribute.is_none() ? x : get_path(in, x, attribute), cs);
      bool dup = false;
      in.work(seen.size());
      for (const auto& s : seen)
        if (values_equal(s, k)) { dup = true; break; }
      if (dup) continue;
      seen.push_back(k);
      out.push_back(x);
    }
    in.charge(out.size() * kElementBytes);
    return Value::list(std::move(out));
  }
  if (name == "map") {
    std::vector<Value> out;
    const auto items = in.iterate(v);
    const Value attribute = arg(a, 99, "attribute");
    if (!attribute.is_undefined()) {
      const Value dflt = arg(a, 99, "default");
      for (const auto& x : items) {
        Value r = get_path(in, x, attribute);
        out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
      }
    } else {
      if (a.positional.empty()) in.fail("map: expected a filter name or attribute=");
      const std::string f = need_str(in, a.positional[0], "map");
      CallArgs fargs;
      fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
      fargs.keyword = a.keyword;
      for (const auto& x : items) {
        in.step();
        CallArgs copy = fargs;
        out.push_back(in.apply_filter(f, x, copy));
      }
    }
    in.charge(out.size() * kElementBytes);
    return Value::list(std::move(out));
  }
  if (name == "select") return select_impl(in, v, a, false, true);
  if (name == "reject") return select_impl(in, v, a, false, false);
  if (name == "selectattr") return select_impl(in, v, a, true, true);
  if (name == "rejectattr") return select_impl(in, v, a, true, false);
  if (name == "attr") {
    // Python getattr only: a dict's keys are not attributes.
    const std::string attr = need_str(in, arg(a, 0, "name"), "attr");
    if (v.is_dict() && !v.dict_data().is_namespace) return builtin_method(in, v, attr);
    return in.get_attr(v, attr);
  }
  if ((name == "int" || name == "float") && v.is_undefined()) in.fail_undefined(v);
  if (name == "int") {
    const Value dflt = arg(a, 0, "default", Value::integer(0));
    const int64_t base = need_int(in, arg(a, 1, "base", Value::integer(10)), "int");
    if (base < 0 || base == 1 || base > 36) in.fail("int() base must be >= 2 and <= 36, or 0");
    return to_int_value(v, dflt, int(base));
  }
  if (name == "float") return to_float_value(v, arg(a, 0, "default", Value::number(0.0)));
  if (name == "abs") {
    if (v.is_float()) return Value::number(std::fabs(v.as_double()));
    if (v.is_number()) {
      if (v.as_int() == INT64_MIN) in.fail("integer overflow");
      return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    in.fail("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "round") {
    return round_value(in, v, need_int(in, arg(a, 0, "precision", Value::integer(0)), "round"),
                       to_str(arg(a, 1, "method", Value::string("common"))));
  }
  if (name == "min") return min_max(in, v, a, false);
  if (name == "max") return min_max(in, v, a, true);
  if (name == "sum") {
    const Value attribute = arg(a, 0, "attribute", Value::none());
    Value total = arg(a, 1, "start", Value::integer(0));
    for (const auto& x : in.iterate(v)) total = binary_op(in, "+", total, attribute.is_none() ? x : get_path(in, x, attribute));
    return total;
  }
  if (name == "batch") {
    const int64_t n = need_int(in, arg(a, 0, "linecount"), "batch");
    if (n <= 0) in.fail("batch: linecount must be positive");
    const Value fill = arg(a, 1, "fill_with", Value::none());
    std::vector<Value> out, cur;
    for (const auto& x : in.iterate(v)) {
      cur.push_back(x);
      if (int64_t(cur.size()) == n) {
        out.push_back(Value::list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (!fill.is_none())
        while (int64_t(cur.size()) < n) cur.push_back(fill);
      out.push_back(Value::list(std::move(cur)));
    }
    in.charge(out.size() * kElementBytes);
    return Value::list(std::move(out));
  }
  in.fail("no filter named '" + name + "'");
}

}  // namespace loom::chat
