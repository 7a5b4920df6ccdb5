// Builtin methods of str, dict and list values (`s.strip()`, `d.items()`, `l.append(x)`), as
// Python's: one small function per method, found by name in a table per type. list.append/extend
// work although transformers' immutable sandbox would refuse them (llama.cpp allows them too).
#include <unordered_map>

#include "jinja/builtin_helpers.h"

namespace loom::jinja {
namespace {

using namespace py;
// A method called on `self`; `name` is the name it was called by (several share one function).
using Method = Value (*)(Interpreter& in, const Value& self, const std::string& name, CallArgs& a);
using MethodTable = std::unordered_map<std::string, Method>;

// ---- str ----

Value s_strip(Interpreter& i, const Value& self, const std::string& name, CallArgs& a) {
  return i.make_string(py_strip(self.str(), arg(a, 0, "chars", Value::none()), name != "rstrip", name != "lstrip"));
}
Value s_upper(Interpreter& i, const Value& self, const std::string&, CallArgs&) {
  return i.make_string(str_upper(self.str()));
}
Value s_lower(Interpreter& i, const Value& self, const std::string&, CallArgs&) {
  return i.make_string(str_lower(self.str()));
}
Value s_title(Interpreter& i, const Value& self, const std::string&, CallArgs&) {
  return i.make_string(py_title(self.str()));
}
Value s_capitalize(Interpreter& i, const Value& self, const std::string&, CallArgs&) {
  return i.make_string(str_capitalize(self.str()));
}

Value s_split(Interpreter& i, const Value& self, const std::string&, CallArgs& a) {
  const Value m = arg(a, 1, "maxsplit", Value::integer(-1));
  std::vector<Value> out;
  for (auto& p : py_split(i, self.str(), arg(a, 0, "sep", Value::none()), need_int(i, m, "split")))
    out.push_back(Value::string(std::move(p)));
  i.charge(out.size() * kElementBytes + self.str().size());
  return Value::list(std::move(out));
}

Value s_splitlines(Interpreter& i, const Value& self, const std::string&, CallArgs&) {
  std::vector<Value> out;
  for (auto& p : py_splitlines(self.str())) out.push_back(Value::string(std::move(p)));
  i.charge(out.size() * kElementBytes + self.str().size());
  return Value::list(std::move(out));
}

// startswith / endswith, with one affix or a list of them.
Value s_affix(Interpreter& i, const Value& self, const std::string& name, CallArgs& a) {
  const bool start = name == "startswith";
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
}

Value s_replace(Interpreter& i, const Value& self, const std::string&, CallArgs& a) {
  const Value c = arg(a, 2, "count", Value::integer(-1));
  return i.make_string(py_replace(i, self.str(), need_str(i, arg(a, 0, "old"), "replace"),
                                  need_str(i, arg(a, 1, "new"), "replace"), need_int(i, c, "replace")));
}

// find / rfind / index / rindex (positions in code points) and count.
Value s_find(Interpreter& i, const Value& self, const std::string& name, CallArgs& a) {
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
}

Value s_format(Interpreter& i, const Value& self, const std::string&, CallArgs& a) {
  return i.make_string(str_format(i, self.str(), a));
}

Value s_join(Interpreter& i, const Value& self, const std::string&, CallArgs& a) {
  std::string out;
  bool first = true;
  for (const auto& v : i.iterate(arg(a, 0, "iterable"))) {
    if (!first) out += self.str();
    first = false;
    out += need_str(i, v, "join");
    if (out.size() > i.options().max_output_bytes) i.fail("join() result too large");
  }
  return i.make_string(std::move(out));
}

// isdigit / isalpha / isalnum / isspace / islower / isupper.
Value s_is(Interpreter&, const Value& self, const std::string& name, CallArgs&) {
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
}

const MethodTable& str_methods() {
  static const MethodTable table = {
      {"strip", s_strip},
      {"lstrip", s_strip},
      {"rstrip", s_strip},
      {"upper", s_upper},
      {"lower", s_lower},
      {"title", s_title},
      {"capitalize", s_capitalize},
      {"split", s_split},
      {"rsplit", s_split},
      {"splitlines", s_splitlines},
      {"startswith", s_affix},
      {"endswith", s_affix},
      {"replace", s_replace},
      {"find", s_find},
      {"rfind", s_find},
      {"index", s_find},
      {"rindex", s_find},
      {"count", s_find},
      {"format", s_format},
      {"join", s_join},
      {"isdigit", s_is},
      {"isalpha", s_is},
      {"isalnum", s_is},
      {"isspace", s_is},
      {"islower", s_is},
      {"isupper", s_is},
  };
  return table;
}

// ---- dict ----

// items / keys / values, as lists.
Value d_view(Interpreter& i, const Value& self, const std::string& name, CallArgs&) {
  std::vector<Value> out;
  for (const auto& [k, v] : self.dict_data().items) {
    if (name == "items") out.push_back(Value::tuple({k, v}));
    else out.push_back(name == "keys" ? k : v);
  }
  i.charge(out.size() * kElementBytes);
  return Value::list(std::move(out));
}

Value d_get(Interpreter&, const Value& self, const std::string&, CallArgs& a) {
  const Value* v = self.dict_data().find(arg(a, 0, "key"));
  return v ? *v : arg(a, 1, "default", Value::none());
}

Value d_copy(Interpreter& i, const Value& self, const std::string&, CallArgs&) {
  Value d = Value::dict();
  d.dict_data().items = self.dict_data().items;
  i.charge(d.dict_data().items.size() * kElementBytes);
  return d;
}

const MethodTable& dict_methods() {
  static const MethodTable table = {
      {"items", d_view}, {"keys", d_view}, {"values", d_view}, {"get", d_get}, {"copy", d_copy},
  };
  return table;
}

// ---- list (tuples: index and count only) ----

Value l_append(Interpreter& i, const Value& self, const std::string& name, CallArgs& a) {
  const Value v = arg(a, 0, "object");
  if (name == "extend") {
    auto items = i.iterate(v);
    i.charge(items.size() * kElementBytes);
    self.items().insert(self.items().end(), items.begin(), items.end());
  } else {
    i.charge(kElementBytes);
    self.items().push_back(v);
  }
  return Value::none();
}

Value l_index(Interpreter& i, const Value& self, const std::string& name, CallArgs& a) {
  const bool idx = name == "index";
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
}

const MethodTable& list_methods() {
  static const MethodTable table = {{"append", l_append}, {"extend", l_append}, {"index", l_index}, {"count", l_index}};
  return table;
}

const MethodTable& tuple_methods() {
  static const MethodTable table = {{"index", l_index}, {"count", l_index}};
  return table;
}

const MethodTable* methods_of(const Value& obj) {
  if (obj.is_string()) return &str_methods();
  if (obj.is_dict()) return &dict_methods();
  if (obj.is_list()) return obj.is_tuple() ? &tuple_methods() : &list_methods();
  return nullptr;
}

}  // namespace

Value builtin_method(Interpreter& in, const Value& obj, const std::string& name) {
  in.work(scan_cost(obj));
  const MethodTable* table = methods_of(obj);
  if (!table) return Value();
  const auto it = table->find(name);
  if (it == table->end()) return Value();
  const Method method = it->second;
  const Value self = obj;
  return Value::function(name, [method, self, name](Interpreter& i, CallArgs& a) { return method(i, self, name, a); });
}

}  // namespace loom::jinja
