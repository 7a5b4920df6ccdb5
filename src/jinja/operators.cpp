// Python operators on template values: ordering, `in`, and the binary arithmetic / string
// operators, shared by the evaluator and the builtins (sum, sort, ...).
#include <algorithm>
#include <cmath>

#include "jinja/builtin_helpers.h"

namespace loom::jinja {

using namespace py;

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

}  // namespace loom::jinja
