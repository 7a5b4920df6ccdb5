#include "jinja/interpreter.h"

#include <cmath>
#include <ctime>

namespace loom::jinja {

namespace {
constexpr int kMaxEvalDepth = 500;    // C++ recursion through eval/exec: ~1 KiB of stack each
constexpr size_t kElementBytes = 64;  // what one list element is charged against max_total_bytes

struct DepthGuard {
  DepthGuard(Interpreter& in, int& d) : d_(d) {
    if (++d_ > kMaxEvalDepth) in.fail("template nested too deeply while rendering");
  }
  ~DepthGuard() { --d_; }
  int& d_;
};
}  // namespace

Interpreter::Interpreter(std::shared_ptr<const Body> program, const RenderOptions& opts)
    : program_(std::move(program)), opts_(opts) {
  globals_ = std::make_shared<Frame>();
  install_globals(*globals_);
  top_ = std::make_shared<Frame>();
  top_->parent = globals_;
  cur_ = top_;
}

void Interpreter::fail(const std::string& msg) const { throw TemplateError{msg}; }

void Interpreter::fail_undefined(const Value& v) const {
  fail(v.undefined_hint().empty() ? std::string("value is undefined") : v.undefined_hint());
}

void Interpreter::step() {
  if (++steps_ > opts_.max_steps)
    fail("template exceeded the step limit (" + std::to_string(opts_.max_steps) + " statements/iterations)");
}

void Interpreter::work(size_t units) {
  constexpr uint64_t kUnitsPerStep = 8;
  work_ += units;
  if (work_ >= kUnitsPerStep) {
    steps_ += work_ / kUnitsPerStep - 1;
    work_ %= kUnitsPerStep;
    step();
  }
}

size_t scan_cost(const Value& v) {
  if (v.is_list()) return v.items().size();
  if (v.is_dict()) return v.dict_data().items.size();
  if (v.is_string()) return v.str().size() / 32;
  return 0;
}

void Interpreter::charge(size_t bytes) {
  total_bytes_ += bytes;
  if (total_bytes_ > opts_.max_total_bytes)
    fail("template built more than " + std::to_string(opts_.max_total_bytes) + " bytes of strings and lists");
}

Value Interpreter::make_string(std::string s) {
  if (s.size() > opts_.max_output_bytes)
    fail("string longer than the output limit (" + std::to_string(opts_.max_output_bytes) + " bytes)");
  charge(s.size());
  return Value::string(std::move(s));
}

void Interpreter::append(std::string& out, const std::string& s) {
  if (out.size() + s.size() > opts_.max_output_bytes)
    fail("output exceeds the limit of " + std::to_string(opts_.max_output_bytes) + " bytes");
  charge(s.size());
  out += s;
}

std::string Interpreter::render(const Value& context) {
  if (context.is_dict())
    for (const auto& [k, v] : context.dict_data().items)
      if (k.is_string()) top_->vars[k.str()] = v;
  std::string out;
  exec(*program_, out);
  return out;
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Frame* f = cur_.get(); f; f = f->parent.get()) {
    if (const Value* v = f->vars.find(name)) return *v;
  }
  return Value::undefined("'" + name + "' is undefined");
}

// ---- statements ----

void Interpreter::exec(const Body& body, std::string& out) {
  for (const auto& n : body) {
    exec_node(*n, out);
    if (ctrl_ != Control::kNone) return;
  }
}

void Interpreter::exec_node(const Node& n, std::string& out) {
  DepthGuard g(*this, eval_depth_);
  step();
  if (n.line > 0) line_ = n.line;  // text nodes carry no position
  switch (n.kind) {
    case NodeKind::kText: append(out, n.text); return;
    case NodeKind::kOutput: {
      const Value v = eval(*n.expr);
      if (v.is_string()) append(out, v.str());
      else append(out, to_str(v));
      return;
    }
    case NodeKind::kIf:
      for (const auto& [cond, body] : n.branches) {
        if (!cond || eval(*cond).truthy()) {
          exec(body, out);
          return;
        }
      }
      return;
    case NodeKind::kFor: exec_for(n, out); return;
    case NodeKind::kSet: assign(*n.target, eval(*n.expr)); return;
    case NodeKind::kSetBlock: {
      std::string buf;
      exec(n.body, buf);
      Value v = Value::string(std::move(buf));
      if (n.expr) v = eval_filter_chain(*n.expr, v);
      assign(*n.target, v);
      return;
    }
    case NodeKind::kMacro: cur_->vars[n.name] = make_macro(n); return;
    case NodeKind::kCallBlock: {
      const Expr& call = *n.expr;
      line_ = call.line;
      const Value fn = eval(*call.args[0]);
      CallArgs args;
      for (size_t i = 1; i < call.args.size(); ++i) args.positional.push_back(eval(*call.args[i]));
      for (const auto& [k, e] : call.kwargs) args.keyword.emplace_back(k, eval(*e));
      args.keyword.emplace_back("caller", make_caller(n));
      const Value r = this->call(fn, args);
      append(out, to_str(r));
      return;
    }
    case NodeKind::kFilterBlock: {
      std::string buf;
      exec(n.body, buf);
      const Value v = eval_filter_chain(*n.expr, Value::string(std::move(buf)));
      append(out, to_str(v));
      return;
    }
    case NodeKind::kBreak: ctrl_ = Control::kBreak; return;
    case NodeKind::kContinue: ctrl_ = Control::kContinue; return;
    case NodeKind::kDo: eval(*n.expr); return;
    case NodeKind::kScope: {
      auto f = std::make_shared<Frame>();
      f->parent = cur_;
      for (const auto& [t, e] : n.assigns) bind(*f, *t, eval(*e));
      auto saved = cur_;
      cur_ = f;
      exec(n.body, out);
      cur_ = saved;
      return;
    }
  }
}

void Interpreter::exec_for(const Node& n, std::string& out) {
  const Value seq = eval(*n.expr);
  if (seq.is_none() && !opts_.lenient) fail("'NoneType' object is not iterable");
  std::vector<Value> items = iterate(seq);
  auto saved = cur_;
  if (n.cond) {
    std::vector<Value> kept;
    for (auto& it : items) {
      step();
      auto f = std::make_shared<Frame>();
      f->parent = saved;
      bind(*f, *n.target, it);
      cur_ = f;
      const bool keep = eval(*n.cond).truthy();
      cur_ = saved;
      if (keep) kept.push_back(std::move(it));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto f = std::make_shared<Frame>();
    f->parent = saved;
    cur_ = f;
    exec(n.else_body, out);
    cur_ = saved;
    return;
  }
  const int64_t len = int64_t(items.size());
  auto index = std::make_shared<int64_t>(0);
  const Value cycle = Value::function("cycle", [index](Interpreter& in, CallArgs& a) -> Value {
    if (a.positional.empty()) in.fail("no items for cycling given");
    return a.positional[size_t(*index % int64_t(a.positional.size()))];
  });
  for (int64_t i = 0; i < len; ++i) {
    step();
    *index = i;
    auto f = std::make_shared<Frame>();
    f->parent = saved;
    bind(*f, *n.target, items[size_t(i)]);
    if (n.uses_loop) {
      static const Value kKeys[] = {Value::string("index"),     Value::string("index0"),   Value::string("revindex"),
                                    Value::string("revindex0"), Value::string("first"),    Value::string("last"),
                                    Value::string("length"),    Value::string("depth"),    Value::string("depth0"),
                                    Value::string("previtem"),  Value::string("nextitem"), Value::string("cycle")};
      Value loop = Value::dict();
      auto& d = loop.dict_data().items;
      d.reserve(12);
      d.emplace_back(kKeys[0], Value::integer(i + 1));
      d.emplace_back(kKeys[1], Value::integer(i));
      d.emplace_back(kKeys[2], Value::integer(len - i));
      d.emplace_back(kKeys[3], Value::integer(len - i - 1));
      d.emplace_back(kKeys[4], Value::boolean(i == 0));
      d.emplace_back(kKeys[5], Value::boolean(i == len - 1));
      d.emplace_back(kKeys[6], Value::integer(len));
      d.emplace_back(kKeys[7], Value::integer(1));
      d.emplace_back(kKeys[8], Value::integer(0));
      if (i > 0) d.emplace_back(kKeys[9], items[size_t(i - 1)]);
      if (i + 1 < len) d.emplace_back(kKeys[10], items[size_t(i + 1)]);
      d.emplace_back(kKeys[11], cycle);
      f->vars["loop"] = std::move(loop);
    }
    cur_ = f;
    exec(n.body, out);
    cur_ = saved;
    if (ctrl_ == Control::kBreak) {
      ctrl_ = Control::kNone;
      break;
    }
    ctrl_ = Control::kNone;
  }
}

void Interpreter::bind(Frame& f, const Expr& target, const Value& v) {
  if (target.kind == ExprKind::kName) {
    f.vars[target.name] = v;
    return;
  }
  if (target.kind == ExprKind::kTuple) {
    std::vector<Value> parts;
    if (v.is_list()) parts = v.items();
    else if (v.is_string() || v.is_dict()) parts = iterate(v);
    else fail("cannot unpack non-iterable " + v.type_name() + " object");
    if (parts.size() != target.args.size())
      fail(parts.size() > target.args.size()
               ? "too many values to unpack (expected " + std::to_string(target.args.size()) + ")"
               : "not enough values to unpack (expected " + std::to_string(target.args.size()) + ", got " +
                     std::to_string(parts.size()) + ")");
    for (size_t i = 0; i < parts.size(); ++i) bind(f, *target.args[i], parts[i]);
    return;
  }
  fail("cannot assign to this expression");
}

void Interpreter::assign(const Expr& target, const Value& v) {
  if (target.kind == ExprKind::kAttr) {
    const Value obj = eval(*target.args[0]);
    if (!obj.is_dict() || !obj.dict_data().is_namespace)
      fail("cannot assign attribute '" + target.name + "' on a non-namespace object");
    obj.dict_data().set(Value::string(target.name), v);
    return;
  }
  bind(*cur_, target, v);
}

// ---- macros ----

Value Interpreter::make_macro(const Node& n) {
  const Node* node = &n;
  auto program = program_;  // keeps the node alive as long as the function value
  return Value::function(n.name,
                         [node, program](Interpreter& in, CallArgs& args) -> Value { return in.call_macro(*node, args); });
}

Value Interpreter::call_macro(const Node& n, CallArgs& args) {
  auto f = std::make_shared<Frame>();
  f->parent = top_;
  const size_t np = n.params.size();
  if (args.positional.size() > np && !n.uses_varargs)
    fail("macro '" + n.name + "' takes not more than " + std::to_string(np) + " argument(s)");
  std::vector<bool> set(np, false);
  for (size_t i = 0; i < np && i < args.positional.size(); ++i) {
    f->vars[n.params[i].first] = args.positional[i];
    set[i] = true;
  }
  Value kwargs = Value::dict();
  Value caller;
  for (auto& [k, v] : args.keyword) {
    if (k == "caller" && n.kind == NodeKind::kMacro) {
      caller = v;
      continue;
    }
    bool found = false;
    for (size_t i = 0; i < np; ++i) {
      if (n.params[i].first == k) {
        if (set[i]) fail("macro '" + n.name + "' got multiple values for argument '" + k + "'");
        f->vars[k] = v;
        set[i] = true;
        found = true;
      }
    }
    if (!found) {
      if (!n.uses_kwargs) fail("macro '" + n.name + "' takes no keyword argument '" + k + "'");
      kwargs.dict_data().set(Value::string(k), v);
    }
  }
  auto saved = cur_;
  cur_ = f;
  for (size_t i = 0; i < np; ++i) {
    if (set[i]) continue;
    f->vars[n.params[i].first] = n.params[i].second
                                     ? eval(*n.params[i].second)
                                     : Value::undefined("parameter '" + n.params[i].first + "' was not provided");
  }
  std::vector<Value> extra;
  for (size_t i = np; i < args.positional.size(); ++i) extra.push_back(args.positional[i]);
  if (n.uses_varargs) f->vars["varargs"] = Value::tuple(std::move(extra));
  if (n.uses_kwargs) f->vars["kwargs"] = kwargs;
  if (n.kind == NodeKind::kMacro && !caller.is_undefined()) f->vars["caller"] = caller;
  std::string out;
  exec(n.body, out);
  cur_ = saved;
  ctrl_ = Control::kNone;
  return make_string(std::move(out));
}

Value Interpreter::make_caller(const Node& n) {
  const Node* node = &n;
  auto program = program_;
  auto site = cur_;
  return Value::function("caller", [node, program, site](Interpreter& in, CallArgs& args) -> Value {
    // The call block's body sees the variables of the place it was written.
    auto saved_top = in.top_;
    in.top_ = site;
    Value r;
    try {
      r = in.call_macro(*node, args);
    } catch (...) {
      in.top_ = saved_top;
      throw;
    }
    in.top_ = saved_top;
    return r;
  });
}

Value Interpreter::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) fail_undefined(fn);
  if (!fn.is_function()) fail("'" + fn.type_name() + "' object is not callable");
  step();
  if (++call_depth_ > opts_.max_call_depth) {
    --call_depth_;
    fail("maximum call depth (" + std::to_string(opts_.max_call_depth) + ") exceeded: runaway recursion?");
  }
  Value r;
  try {
    r = fn.func().fn(*this, args);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return r;
}

// ---- expressions ----

Value Interpreter::eval(const Expr& e) {
  DepthGuard g(*this, eval_depth_);
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a));
      charge(items.size() * kElementBytes);
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i]);
        if (k.is_list() && !k.is_tuple()) fail("unhashable type: 'list'");
        if (k.is_dict()) fail("unhashable type: 'dict'");
        d.dict_data().set(std::move(k), eval(*e.args[i + 1]));
      }
      charge(e.args.size() * kElementBytes);
      return d;
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      const Value v = eval(*e.args[0]);
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number())
        fail("bad operand type for unary " + std::string(e.kind == ExprKind::kNeg ? "-" : "+") + ": '" + v.type_name() +
             "'");
      if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::number(-v.as_double());
      if (v.as_int() == INT64_MIN) fail("integer overflow");
      return Value::integer(-v.as_int());
    }
    case ExprKind::kNot: return Value::boolean(!eval(*e.args[0]).truthy());
    case ExprKind::kAnd: {
      Value l = eval(*e.args[0]);
      return l.truthy() ? eval(*e.args[1]) : l;
    }
    case ExprKind::kOr: {
      Value l = eval(*e.args[0]);
      return l.truthy() ? l : eval(*e.args[1]);
    }
    case ExprKind::kCond: {
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined");
    }
    case ExprKind::kBinary: return eval_binary(e);
    case ExprKind::kCompare: {
      Value left = eval(*e.args[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1]);
        work(scan_cost(left) + scan_cost(right));
        const std::string& op = e.ops[i];
        bool r;
        if (op == "==") r = values_equal(left, right);
        else if (op == "!=") r = !values_equal(left, right);
        else if (op == "in") r = contains(*this, right, left);
        else if (op == "not in") r = !contains(*this, right, left);
        else {
          const int c = compare_values(*this, left, right);
          r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kAttr: {
      const Value obj = eval(*e.args[0]);
      line_ = e.line;
      return get_attr(obj, e.name);
    }
    case ExprKind::kItem: {
      const Value obj = eval(*e.args[0]);
      const Value key = eval(*e.args[1]);
      line_ = e.line;
      return get_item(obj, key);
    }
    case ExprKind::kSlice: {
      const Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) fail_undefined(obj);
      auto bound = [&](const ExprPtr& p, bool& given) -> int64_t {
        given = false;
        if (!p) return 0;
        const Value v = eval(*p);
        if (v.is_none()) return 0;
        if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None");
        given = true;
        return v.as_int();
      };
      bool has_start, has_stop, has_step;
      const int64_t start_v = bound(e.args[1], has_start);
      const int64_t stop_v = bound(e.args[2], has_stop);
      const int64_t step_v = bound(e.args[3], has_step);
      const int64_t st = has_step ? step_v : 1;
      if (st == 0) fail("slice step cannot be zero");
      auto indices = [&](int64_t n) {
        // Python's slice.indices
        std::vector<int64_t> idx;
        int64_t lo, hi;
        auto clamp = [&](int64_t v, bool given, int64_t dflt) -> int64_t {
          if (!given) return dflt;
          if (v < 0) v += n;
          if (st > 0) return std::min(std::max(v, int64_t(0)), n);
          return std::min(std::max(v, int64_t(-1)), n - 1);
        };
        lo = clamp(start_v, has_start, st > 0 ? 0 : n - 1);
        hi = clamp(stop_v, has_stop, st > 0 ? n : -1);
        if (st > 0)
          for (int64_t i = lo; i < hi; i += st) idx.push_back(i);
        else
          for (int64_t i = lo; i > hi; i += st) idx.push_back(i);
        return idx;
      };
      if (obj.is_list()) {
        work(scan_cost(obj));
        const auto& items = obj.items();
        std::vector<Value> out;
        for (int64_t i : indices(int64_t(items.size()))) out.push_back(items[size_t(i)]);
        charge(out.size() * kElementBytes);
        return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
      }
      if (obj.is_string()) {
        work(scan_cost(obj));
        const auto cps = utf8_decode(obj.str());
        std::string out;
        for (int64_t i : indices(int64_t(cps.size()))) utf8_append(out, cps[size_t(i)]);
        return make_string(std::move(out));
      }
      fail("'" + obj.type_name() + "' object is not subscriptable");
    }
    case ExprKind::kCall: {
      const Value fn = eval(*e.args[0]);
      CallArgs args;
      for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
      for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
      line_ = e.line;
      return call(fn, args);
    }
    case ExprKind::kFilter: return eval_filter_chain(e, Value());
    case ExprKind::kTest: {
      const Value v = eval(*e.args[0]);
      CallArgs args;
      for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
      for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
      line_ = e.line;
      const bool r = apply_test(e.name, v, args);
      return Value::boolean(e.negated ? !r : r);
    }
  }
  fail("unknown expression");
}

Value Interpreter::eval_filter_chain(const Expr& e, const Value& subject) {
  if (e.kind != ExprKind::kFilter) return eval(e);
  const Value v = e.args[0]
                      ? (e.args[0]->kind == ExprKind::kFilter ? eval_filter_chain(*e.args[0], subject) : eval(*e.args[0]))
                      : subject;
  CallArgs args;
  for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
  line_ = e.line;
  step();
  return apply_filter(e.name, v, args);
}

Value Interpreter::eval_binary(const Expr& e) {
  const Value a = eval(*e.args[0]);
  const Value b = eval(*e.args[1]);
  line_ = e.line;
  if (e.name == "~") {
    std::string s = to_str(a);
    s += to_str(b);
    return make_string(std::move(s));
  }
  return binary_op(*this, e.name, a, b);
}

Value Interpreter::apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  return builtin_filter(*this, name, v, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& v, CallArgs& args) {
  return builtin_test(*this, name, v, args);
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    if (opts_.lenient) return obj;
    fail_undefined(obj);
  }
  if (obj.is_dict()) {
    if (!obj.dict_data().is_namespace) {
      Value m = builtin_method(*this, obj, name);
      if (!m.is_undefined()) return m;
    }
    if (const Value* v = obj.dict_data().find(Value::string(name))) return *v;
    return Value::undefined("'" + std::string(obj.dict_data().is_namespace ? "Namespace" : "dict") +
                            " object' has no attribute '" + name + "'");
  }
  if (obj.is_string() || obj.is_list()) {
    Value m = builtin_method(*this, obj, name);
    if (!m.is_undefined()) return m;
  }
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) {
    if (opts_.lenient) return obj;
    fail_undefined(obj);
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_data().find(key)) return *v;
    if (key.is_string() && !obj.dict_data().is_namespace) {
      Value m = builtin_method(*this, obj, key.str());
      if (!m.is_undefined()) return m;
    }
    return Value::undefined("'dict object' has no attribute " + to_repr(key));
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const int64_t n = int64_t(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[size_t(i)];
      return Value::undefined("'" + obj.type_name() + " object' has no element " + std::to_string(key.as_int()));
    }
    work(scan_cost(obj));
    const std::string& str = obj.str();
    if (i < 0) i += int64_t(utf8_length(str));
    // Walk to the i-th code point without decoding the whole string.
    size_t pos = 0;
    for (int64_t k = 0; pos < str.size() && k < i; ++k) {
      ++pos;
      while (pos < str.size() && (static_cast<unsigned char>(str[pos]) & 0xC0) == 0x80) ++pos;
    }
    if (i >= 0 && pos < str.size()) {
      size_t end = pos + 1;
      while (end < str.size() && (static_cast<unsigned char>(str[end]) & 0xC0) == 0x80) ++end;
      return Value::string(str.substr(pos, end - pos));
    }
    return Value::undefined("'str object' has no element " + std::to_string(key.as_int()));
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined("'" + obj.type_name() + " object' has no element " + to_repr(key));
}

std::vector<Value> Interpreter::iterate(const Value& v) {
  work(scan_cost(v));
  switch (v.type()) {
    case Value::Type::kUndefined: return {};
    case Value::Type::kNone:
      if (opts_.lenient) return {};
      fail("'NoneType' object is not iterable");
    case Value::Type::kList: return v.items();
    case Value::Type::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict_data().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Type::kString: {
      std::vector<Value> chars;
      std::string s;
      for (uint32_t cp : utf8_decode(v.str())) {
        s.clear();
        utf8_append(s, cp);
        chars.push_back(Value::string(s));
      }
      charge(chars.size() * kElementBytes);
      return chars;
    }
    default: fail("'" + v.type_name() + "' object is not iterable");
  }
}

// ---- globals ----

void Interpreter::install_globals(Frame& f) {
  f.vars["range"] = Value::function("range", [](Interpreter& in, CallArgs& a) -> Value {
    if (a.positional.empty() || a.positional.size() > 3) in.fail("range expected 1 to 3 arguments");
    for (const auto& v : a.positional)
      if (!v.is_int() && !v.is_bool()) in.fail("'" + v.type_name() + "' object cannot be interpreted as an integer");
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].as_int();
    } else {
      start = a.positional[0].as_int();
      stop = a.positional[1].as_int();
      if (a.positional.size() == 3) step = a.positional[2].as_int();
    }
    if (step == 0) in.fail("range() arg 3 must not be zero");
    std::vector<Value> out;
    const double count = std::ceil((double(stop) - double(start)) / double(step));
    if (count > 0) {
      in.charge(size_t(std::min(count, 1e15)) * kElementBytes);
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::integer(i));
    }
    return Value::list(std::move(out));
  });
  f.vars["namespace"] = Value::function("namespace", [](Interpreter& in, CallArgs& a) -> Value {
    Value ns = Value::dict();
    ns.dict_data().is_namespace = true;
    for (const auto& p : a.positional) {
      if (!p.is_dict()) in.fail("namespace() positional argument must be a mapping");
      for (const auto& kv : p.dict_data().items) ns.dict_data().set(kv.first, kv.second);
    }
    for (auto& [k, v] : a.keyword) ns.dict_data().set(Value::string(k), v);
    return ns;
  });
  f.vars["dict"] = Value::function("dict", [](Interpreter& in, CallArgs& a) -> Value {
    Value d = Value::dict();
    for (const auto& p : a.positional) {
      if (p.is_dict()) {
        for (const auto& kv : p.dict_data().items) d.dict_data().set(kv.first, kv.second);
      } else if (p.is_list()) {
        for (const auto& item : p.items()) {
          if (!item.is_list() || item.items().size() != 2) in.fail("dict() sequence elements must be pairs");
          d.dict_data().set(item.items()[0], item.items()[1]);
        }
      } else {
        in.fail("'" + p.type_name() + "' object is not iterable");
      }
    }
    for (auto& [k, v] : a.keyword) d.dict_data().set(Value::string(k), v);
    return d;
  });
  f.vars["raise_exception"] = Value::function("raise_exception", [](Interpreter&, CallArgs& a) -> Value {
    throw TemplateError{a.positional.empty() ? std::string("raise_exception() called") : to_str(a.positional[0]), true};
  });
  f.vars["strftime_now"] = Value::function("strftime_now", [](Interpreter& in, CallArgs& a) -> Value {
    if (a.positional.empty() || !a.positional[0].is_string()) in.fail("strftime_now() expects a format string");
    return in.make_string(strftime_now(in.options(), a.positional[0].str()));
  });
}

std::string strftime_now(const RenderOptions& opts, const std::string& fmt) {
  std::tm tm{};
  if (opts.now_unix) {
    const std::time_t t = std::time_t(*opts.now_unix);
    gmtime_r(&t, &tm);
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  // strftime's output is bounded by the format (no field is longer than ~30 bytes).
  std::string out(fmt.size() * 32 + 64, '\0');
  const size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
  out.resize(n);
  return out;
}

}  // namespace loom::jinja
