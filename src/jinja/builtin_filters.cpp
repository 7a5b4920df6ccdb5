// Builtin filters (`value | name(args)`), Jinja2 3.1's with Python semantics: one small function
// per filter, found by name in a table. Deviations: map/select/reject/selectattr/rejectattr/items
// return lists, not generators; the case filters map ASCII, Latin-1/Extended-A, Greek and
// Cyrillic only.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "jinja/builtin_helpers.h"

namespace loom::jinja {
namespace {

using namespace py;
using Filter = Value (*)(Interpreter& in, const Value& v, CallArgs& a);

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
  const std::string ind =
      w.is_string() ? w.str() : std::string(size_t(std::clamp<int64_t>(need_int(in, w, "indent"), 0, 1024)), ' ');
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
// ---- strings ----

Value f_safe(Interpreter& in, const Value& v, CallArgs&) {
  return v.is_string() ? v : in.make_string(to_str(v));
}  // Markup(str(v))
Value f_string(Interpreter& in, const Value& v, CallArgs&) { return v.is_string() ? v : in.make_string(to_str(v)); }
Value f_pprint(Interpreter& in, const Value& v, CallArgs&) { return in.make_string(to_repr(v)); }
Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) { return tojson_filter(in, v, a); }
Value f_indent(Interpreter& in, const Value& v, CallArgs& a) { return indent_filter(in, v, a); }

// The string filters see str(value): str(undefined) is "", as in Jinja2.
Value f_trim(Interpreter& in, const Value& v, CallArgs& a) {
  return in.make_string(py_strip(to_str(v), arg(a, 0, "chars", Value::none()), true, true));
}
Value f_upper(Interpreter& in, const Value& v, CallArgs&) { return in.make_string(str_upper(to_str(v))); }
Value f_lower(Interpreter& in, const Value& v, CallArgs&) { return in.make_string(str_lower(to_str(v))); }
Value f_title(Interpreter& in, const Value& v, CallArgs&) { return in.make_string(jinja_title(to_str(v))); }
Value f_capitalize(Interpreter& in, const Value& v, CallArgs&) { return in.make_string(str_capitalize(to_str(v))); }
Value f_escape(Interpreter& in, const Value& v, CallArgs&) { return in.make_string(html_escape(to_str(v))); }

Value f_center(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string s = to_str(v);
  const int64_t w = std::min<int64_t>(need_int(in, arg(a, 0, "width", Value::integer(80)), "center"), 1 << 20);
  const int64_t len = int64_t(utf8_length(s));
  if (w <= len) return in.make_string(s);
  const int64_t pad = w - len;
  const int64_t left = pad / 2 + (pad & w & 1);
  return in.make_string(std::string(size_t(left), ' ') + s + std::string(size_t(pad - left), ' '));
}

// Jinja counts \w+ runs.
Value f_wordcount(Interpreter&, const Value& v, CallArgs&) {
  int64_t n = 0;
  bool inw = false;
  for (uint32_t c : utf8_decode(to_str(v))) {
    const bool w = cp_is_alpha(c) || cp_is_digit(c) || c == '_';
    if (w && !inw) ++n;
    inw = w;
  }
  return Value::integer(n);
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string s = to_str(v);
  const Value c = arg(a, 2, "count", Value::none());
  return in.make_string(
      py_replace(in, s, to_str(arg(a, 0, "old")), to_str(arg(a, 1, "new")), c.is_none() ? -1 : need_int(in, c, "replace")));
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string& fmt = need_str(in, v, "format");
  if (!a.keyword.empty()) {
    Value d = Value::dict();
    for (auto& [k, x] : a.keyword) d.dict_data().set(Value::string(k), x);
    return in.make_string(printf_format(in, fmt, d));
  }
  return in.make_string(printf_format(in, fmt, Value::tuple(a.positional)));
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
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

// ---- values ----

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  const bool boolean = arg(a, 1, "boolean", Value::boolean(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", Value::string(""));
  return v;
}

Value f_length(Interpreter& in, const Value& v, CallArgs&) { return Value::integer(int64_t(py_len(in, v))); }

// Python getattr only: a dict's keys are not attributes.
Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string attr = need_str(in, arg(a, 0, "name"), "attr");
  if (v.is_dict() && !v.dict_data().is_namespace) return builtin_method(in, v, attr);
  return in.get_attr(v, attr);
}

Value f_int(Interpreter& in, const Value& v, CallArgs& a) {
  if (v.is_undefined()) in.fail_undefined(v);
  const Value dflt = arg(a, 0, "default", Value::integer(0));
  const int64_t base = need_int(in, arg(a, 1, "base", Value::integer(10)), "int");
  if (base < 0 || base == 1 || base > 36) in.fail("int() base must be >= 2 and <= 36, or 0");
  return to_int_value(v, dflt, int(base));
}

Value f_float(Interpreter& in, const Value& v, CallArgs& a) {
  if (v.is_undefined()) in.fail_undefined(v);
  return to_float_value(v, arg(a, 0, "default", Value::number(0.0)));
}

Value f_abs(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_number()) {
    if (v.as_int() == INT64_MIN) in.fail("integer overflow");
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  in.fail("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_round(Interpreter& in, const Value& v, CallArgs& a) {
  return round_value(in, v, need_int(in, arg(a, 0, "precision", Value::integer(0)), "round"),
                     to_str(arg(a, 1, "method", Value::string("common"))));
}

// ---- sequences ----

Value first_or_last(Interpreter& in, const Value& v, bool first) {
  if (v.is_string()) {
    const auto cps = utf8_decode(v.str());
    if (cps.empty()) return Value::undefined("No first item, sequence was empty.");
    return Value::string(utf8_encode(cps, first ? 0 : cps.size() - 1, first ? 1 : cps.size()));
  }
  const auto items = in.iterate(v);
  if (items.empty()) return Value::undefined(std::string("No ") + (first ? "first" : "last") + " item, sequence was empty.");
  return first ? items.front() : items.back();
}
Value f_first(Interpreter& in, const Value& v, CallArgs&) { return first_or_last(in, v, true); }
Value f_last(Interpreter& in, const Value& v, CallArgs&) { return first_or_last(in, v, false); }

Value f_list(Interpreter& in, const Value& v, CallArgs&) {
  auto items = in.iterate(v);
  in.charge(items.size() * kElementBytes);
  return Value::list(std::move(items));
}

Value f_items(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict()) in.fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict_data().items) out.push_back(Value::tuple({k, x}));
  in.charge(out.size() * kElementBytes);
  return Value::list(std::move(out));
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& a) {
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

Value f_reverse(Interpreter& in, const Value& v, CallArgs&) {
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

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
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

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  const bool cs = arg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
  const Value attribute = arg(a, 1, "attribute", Value::none());
  std::vector<Value> out, seen;
  for (const auto& x : in.iterate(v)) {
    in.step();
    const Value k = sort_key(attribute.is_none() ? x : get_path(in, x, attribute), cs);
    bool dup = false;
    in.work(seen.size());
    for (const auto& s : seen)
      if (values_equal(s, k)) {
        dup = true;
        break;
      }
    if (dup) continue;
    seen.push_back(k);
    out.push_back(x);
  }
  in.charge(out.size() * kElementBytes);
  return Value::list(std::move(out));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
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

Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, false); }
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  const Value attribute = arg(a, 0, "attribute", Value::none());
  Value total = arg(a, 1, "start", Value::integer(0));
  for (const auto& x : in.iterate(v))
    total = binary_op(in, "+", total, attribute.is_none() ? x : get_path(in, x, attribute));
  return total;
}

Value f_batch(Interpreter& in, const Value& v, CallArgs& a) {
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

const std::unordered_map<std::string, Filter>& filters() {
  static const std::unordered_map<std::string, Filter> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"pprint", f_pprint},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) != 0; }

Value builtin_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  in.work(scan_cost(v));
  const auto it = filters().find(name);
  if (it == filters().end()) in.fail("no filter named '" + name + "'");
  return it->second(in, v, a);
}

}  // namespace loom::jinja
