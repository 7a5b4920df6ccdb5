// Builtin tests (`value is name(args)`), Jinja2 3.1's: one small function per test, found by name
// in a table.
#include <unordered_map>

#include "jinja/builtin_helpers.h"

namespace loom::jinja {
namespace {

using namespace py;
using Test = bool (*)(Interpreter& in, const Value& v, CallArgs& a);

bool t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_dict(); }
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_callable(Interpreter&, const Value& v, CallArgs&) { return v.is_function(); }
bool t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }

// value % 2 == 0 / == 1, with Python's modulo.
bool t_even(Interpreter& in, const Value& v, CallArgs&) {
  return values_equal(binary_op(in, "%", v, Value::integer(2)), Value::integer(0));
}
bool t_odd(Interpreter& in, const Value& v, CallArgs&) {
  return values_equal(binary_op(in, "%", v, Value::integer(2)), Value::integer(1));
}
bool t_divisibleby(Interpreter& in, const Value& v, CallArgs& a) {
  return values_equal(binary_op(in, "%", v, arg(a, 0, "num")), Value::integer(0));
}

// str(value).islower() / .isupper()
bool str_method_is(Interpreter& in, const Value& v, const char* method) {
  CallArgs none;
  const Value s = Value::string(to_str(v));
  return builtin_method(in, s, method).func().fn(in, none).as_bool();
}
bool t_lower(Interpreter& in, const Value& v, CallArgs&) { return str_method_is(in, v, "islower"); }
bool t_upper(Interpreter& in, const Value& v, CallArgs&) { return str_method_is(in, v, "isupper"); }

bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  using T = Value::Type;
  const Value o = arg(a, 0, "other");
  if (v.type() != o.type()) return false;
  if (v.type() == T::kNone || v.type() == T::kUndefined) return true;
  if (v.type() == T::kBool || v.type() == T::kInt) return v.as_int() == o.as_int();
  if (v.type() == T::kFloat) return v.as_double() == o.as_double();
  return v.identity() == o.identity();
}

bool t_in(Interpreter& in, const Value& v, CallArgs& a) { return contains(in, arg(a, 0, "seq"), v); }

// Whether a filter / test of that name exists.
bool t_filter(Interpreter& in, const Value& v, CallArgs&) { return has_filter(need_str(in, v, "filter")); }
bool t_test(Interpreter& in, const Value& v, CallArgs&);

bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return values_equal(v, arg(a, 0, "other")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !values_equal(v, arg(a, 0, "other")); }
bool t_lt(Interpreter& in, const Value& v, CallArgs& a) { return compare_values(in, v, arg(a, 0, "other")) < 0; }
bool t_le(Interpreter& in, const Value& v, CallArgs& a) { return compare_values(in, v, arg(a, 0, "other")) <= 0; }
bool t_gt(Interpreter& in, const Value& v, CallArgs& a) { return compare_values(in, v, arg(a, 0, "other")) > 0; }
bool t_ge(Interpreter& in, const Value& v, CallArgs& a) { return compare_values(in, v, arg(a, 0, "other")) >= 0; }

const std::unordered_map<std::string, Test>& tests() {
  static const std::unordered_map<std::string, Test> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_iterable},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"even", t_even},
      {"odd", t_odd},
      {"divisibleby", t_divisibleby},
      {"lower", t_lower},
      {"upper", t_upper},
      {"sameas", t_sameas},
      {"in", t_in},
      {"filter", t_filter},
      {"test", t_test},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
  };
  return table;
}

bool t_test(Interpreter& in, const Value& v, CallArgs&) { return tests().count(need_str(in, v, "test")) != 0; }

}  // namespace

bool builtin_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  in.work(scan_cost(v));
  const auto it = tests().find(name);
  if (it == tests().end()) in.fail("no test named '" + name + "'");
  return it->second(in, v, a);
}

}  // namespace loom::jinja
