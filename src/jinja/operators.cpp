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
      if (!item.is_string()) in.fail("'in <string>' requires string as left operand, not " + item.type_name());
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

namespace {

// The two operands of one binary operator, and what they are.
struct Operands {
  Interpreter& in;
  const std::string& op;
  const Value& a;
  const Value& b;
  bool nums;  // both numbers
  bool ints;  // both integers (or booleans)
};

[[noreturn]] void type_error(const Operands& o) {
  if (o.op == "+" && o.a.is_string()) o.in.fail("can only concatenate str (not \"" + o.b.type_name() + "\") to str");
  if (o.op == "+" && o.a.is_list() && !o.a.is_tuple())
    o.in.fail("can only concatenate list (not \"" + o.b.type_name() + "\") to list");
  o.in.fail("unsupported operand type(s) for " + o.op + ": '" + o.a.type_name() + "' and '" + o.b.type_name() + "'");
}

Value add(const Operands& o) {
  const Value &a = o.a, &b = o.b;
  if (o.ints) {
    int64_t r;
    if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) o.in.fail("integer overflow");
    return Value::integer(r);
  }
  if (o.nums) return Value::number(a.as_double() + b.as_double());
  if (a.is_string() && b.is_string()) return o.in.make_string(a.str() + b.str());
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    std::vector<Value> items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    o.in.charge(items.size() * kElementBytes);
    return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  type_error(o);
}

Value subtract(const Operands& o) {
  if (o.ints) {
    int64_t r;
    if (__builtin_sub_overflow(o.a.as_int(), o.b.as_int(), &r)) o.in.fail("integer overflow");
    return Value::integer(r);
  }
  if (o.nums) return Value::number(o.a.as_double() - o.b.as_double());
  type_error(o);
}

// A string or list repeated n times (Python's `seq * n`), bounded by the render's limits.
Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (seq.is_string()) {
    const double total = double(seq.str().size()) * double(n);
    if (total > double(in.options().max_output_bytes)) in.fail("string repetition result too large");
    std::string out;
    out.reserve(size_t(total));
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return in.make_string(std::move(out));
  }
  const double total = double(seq.items().size()) * double(n);
  if (total * double(kElementBytes) > double(in.options().max_total_bytes)) in.fail("list repetition result too large");
  in.charge(size_t(total) * kElementBytes);
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value multiply(const Operands& o) {
  const Value &a = o.a, &b = o.b;
  if (o.ints) {
    int64_t r;
    if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) o.in.fail("integer overflow");
    return Value::integer(r);
  }
  if (o.nums) return Value::number(a.as_double() * b.as_double());
  const Value* seq = (a.is_string() || a.is_list()) ? &a : (b.is_string() || b.is_list()) ? &b : nullptr;
  const Value* cnt = seq == &a ? &b : &a;
  if (seq && (cnt->is_int() || cnt->is_bool())) return repeat(o.in, *seq, std::max<int64_t>(0, cnt->as_int()));
  type_error(o);
}

Value divide(const Operands& o) {
  if (!o.nums) type_error(o);
  if (o.b.as_double() == 0) o.in.fail("division by zero");
  return Value::number(o.a.as_double() / o.b.as_double());
}

Value floor_divide(const Operands& o) {
  if (!o.nums) type_error(o);
  if (o.b.as_double() == 0) o.in.fail("integer division or modulo by zero");
  if (o.ints) {
    const int64_t x = o.a.as_int(), y = o.b.as_int();
    if (x == INT64_MIN && y == -1) o.in.fail("integer overflow");
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Value::integer(q);
  }
  return Value::number(std::floor(o.a.as_double() / o.b.as_double()));
}

// `%`: printf-style formatting on a string, Python's modulo (the divisor's sign) on numbers.
Value modulo(const Operands& o) {
  if (o.a.is_string()) return o.in.make_string(printf_format(o.in, o.a.str(), o.b));
  if (!o.nums) type_error(o);
  if (o.b.as_double() == 0) o.in.fail("integer division or modulo by zero");
  if (o.ints) {
    const int64_t x = o.a.as_int(), y = o.b.as_int();
    if (y == -1) return Value::integer(0);
    int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::integer(r);
  }
  const double x = o.a.as_double(), y = o.b.as_double();
  double r = std::fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return Value::number(r);
}

Value power(const Operands& o) {
  if (!o.nums) type_error(o);
  if (o.ints && o.b.as_int() >= 0) {
    int64_t r = 1, base = o.a.as_int(), e = o.b.as_int();
    while (e > 0) {
      if (e & 1)
        if (__builtin_mul_overflow(r, base, &r)) o.in.fail("integer overflow");
      e >>= 1;
      if (e > 0 && __builtin_mul_overflow(base, base, &base)) o.in.fail("integer overflow");
    }
    return Value::integer(r);
  }
  if (o.a.as_double() == 0 && o.b.as_double() < 0) o.in.fail("0.0 cannot be raised to a negative power");
  return Value::number(std::pow(o.a.as_double(), o.b.as_double()));
}

const std::pair<std::string_view, Value (*)(const Operands&)> kBinaryOps[] = {
    {"+", add}, {"-", subtract}, {"*", multiply}, {"/", divide}, {"//", floor_divide}, {"%", modulo}, {"**", power},
};

}  // namespace

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (in.options().lenient && op == "+" && (a.is_undefined() || b.is_undefined())) {
    // llama.cpp: an undefined operand adds nothing.
    if (a.is_undefined() && b.is_undefined()) return Value::string("");
    return a.is_undefined() ? b : a;
  }
  if (a.is_undefined()) in.fail_undefined(a);
  if (b.is_undefined()) in.fail_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const Operands o{in, op, a, b, nums, nums && !a.is_float() && !b.is_float()};
  for (const auto& [name, fn] : kBinaryOps) {
    if (name == op) return fn(o);
  }
  in.fail("unknown operator " + op);
}

}  // namespace loom::jinja
