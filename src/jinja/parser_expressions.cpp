// The parser's expressions (parser.h): one function per precedence level, from conditional
// expressions down to literals, names and displays.
#include <cstdio>
#include <cstring>

#include "jinja/parser.h"

namespace loom::jinja {

// Filter chain applied to `subject` (null: the block's content).
ExprPtr Parser::parse_filter_chain(ExprPtr subject, bool leading_pipe) {
  if (leading_pipe) expect_op("|");
  ExprPtr node = parse_filter(std::move(subject));
  while (is_op("|")) {
    next();
    node = parse_filter(std::move(node));
  }
  return node;
}

ExprPtr Parser::parse_filter(ExprPtr subject) {
  const Tok at = cur();
  auto f = make(ExprKind::kFilter, at);
  f->name = expect_name();
  while (is_op(".")) {
    next();
    f->name += "." + expect_name();
  }
  f->args.push_back(std::move(subject));
  if (is_op("(")) parse_call_args(*f);
  return f;
}

void Parser::parse_call_args(Expr& call) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
    if (cur().kind == Tok::kName && peek().kind == Tok::kOp && peek().text == "=") {
      std::string key = next().text;
      next();
      call.kwargs.emplace_back(std::move(key), parse_expr(true));
    } else {
      if (!call.kwargs.empty()) fail("positional argument after keyword argument");
      call.args.push_back(parse_expr(true));
    }
  }
  next();
}

// tuple := expr ("," expr)*   (a bare "a, b" makes a tuple, as in Jinja2)
ExprPtr Parser::parse_tuple(bool with_cond) {
  const Tok at = cur();
  ExprPtr first = parse_expr(with_cond);
  if (!is_op(",")) return first;
  auto tup = make(ExprKind::kTuple, at);
  tup->args.push_back(std::move(first));
  while (is_op(",")) {
    next();
    if (cur().kind == Tok::kVarEnd || cur().kind == Tok::kBlockEnd || is_op(")") || is_op("=") || is_name("if")) break;
    tup->args.push_back(parse_expr(with_cond));
  }
  return tup;
}

ExprPtr Parser::parse_expr(bool with_cond) {
  DepthGuard g(*this);
  if (!with_cond) return parse_or();
  const Tok at = cur();
  ExprPtr e = parse_or();
  while (is_name("if")) {
    next();
    auto c = make(ExprKind::kCond, at);
    ExprPtr cond = parse_or();
    ExprPtr other;
    if (is_name("else")) {
      next();
      other = parse_expr(true);
    }
    c->args.push_back(std::move(e));
    c->args.push_back(std::move(cond));
    c->args.push_back(std::move(other));
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr l = parse_and();
  while (is_name("or")) {
    const Tok at = next();
    auto e = make(ExprKind::kOr, at);
    e->args.push_back(std::move(l));
    e->args.push_back(parse_and());
    l = std::move(e);
  }
  return l;
}

ExprPtr Parser::parse_and() {
  ExprPtr l = parse_not();
  while (is_name("and")) {
    const Tok at = next();
    auto e = make(ExprKind::kAnd, at);
    e->args.push_back(std::move(l));
    e->args.push_back(parse_not());
    l = std::move(e);
  }
  return l;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard g(*this);
    const Tok at = next();
    auto e = make(ExprKind::kNot, at);
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const Tok at = cur();
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().kind == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
                                   cur().text == ">" || cur().text == ">=")) {
      op = next().text;
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && peek().kind == Tok::kName && peek().text == "in") {
      next();
      next();
      op = "not in";
    } else {
      break;
    }
    if (!cmp) {
      cmp = make(ExprKind::kCompare, at);
      cmp->args.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::binary(const std::string& op, ExprPtr l, ExprPtr r, const Tok& at) {
  auto e = make(ExprKind::kBinary, at);
  e->name = op;
  e->args.push_back(std::move(l));
  e->args.push_back(std::move(r));
  return e;
}

ExprPtr Parser::parse_math1() {
  ExprPtr l = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Tok at = next();
    l = binary(at.text, std::move(l), parse_concat(), at);
  }
  return l;
}

ExprPtr Parser::parse_concat() {
  ExprPtr l = parse_math2();
  while (is_op("~")) {
    const Tok at = next();
    l = binary("~", std::move(l), parse_math2(), at);
  }
  return l;
}

ExprPtr Parser::parse_math2() {
  ExprPtr l = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Tok at = next();
    l = binary(at.text, std::move(l), parse_pow(), at);
  }
  return l;
}

ExprPtr Parser::parse_pow() {
  ExprPtr l = parse_unary(true);
  while (is_op("**")) {
    const Tok at = next();
    l = binary("**", std::move(l), parse_unary(true), at);
  }
  return l;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard g(*this);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const Tok at = next();
    node = make(at.text == "-" ? ExprKind::kNeg : ExprKind::kPos, at);
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      next();
      node = parse_filter(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_test(ExprPtr subject) {
  const Tok at = next();  // "is"
  auto t = make(ExprKind::kTest, at);
  if (is_name("not")) {
    next();
    t->negated = true;
  }
  const bool comparison = cur().kind == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                                     cur().text == "<=" || cur().text == ">" || cur().text == ">=");
  if (cur().kind == Tok::kName || comparison) {  // a test's name, or a comparison used as one (`is ==`)
    t->name = next().text;
  } else {
    fail("expected a test name after 'is', got " + describe(cur()));
  }
  t->args.push_back(std::move(subject));
  if (is_op("(")) {
    parse_call_args(*t);
  } else if ((cur().kind == Tok::kName || cur().kind == Tok::kString || cur().kind == Tok::kInt ||
              cur().kind == Tok::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") && !is_name("in") && !is_name("not")) {
    if (is_name("is")) fail("cannot chain tests with 'is'");
    ExprPtr arg = parse_postfix(parse_primary());
    t->args.push_back(std::move(arg));
  }
  return t;
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  const Tok at = cur();
  auto c = make(ExprKind::kCall, at);
  c->args.push_back(std::move(callee));
  parse_call_args(*c);
  return c;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".")) {
      const Tok at = next();
      if (cur().kind == Tok::kName) {
        auto a = make(ExprKind::kAttr, at);
        a->name = next().text;
        a->args.push_back(std::move(node));
        node = std::move(a);
      } else if (cur().kind == Tok::kInt) {
        auto it = make(ExprKind::kItem, at);
        it->args.push_back(std::move(node));
        auto lit = make(ExprKind::kLiteral, cur());
        lit->literal = Value::integer(next().ival);
        it->args.push_back(std::move(lit));
        node = std::move(it);
      } else {
        fail("expected an attribute name after '.', got " + describe(cur()));
      }
    } else if (is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr obj) {
  DepthGuard g(*this);
  const Tok at = next();  // [
  ExprPtr parts[3];
  bool is_slice = false;
  int idx = 0;
  while (!is_op("]")) {
    if (is_op(":")) {
      next();
      is_slice = true;
      if (++idx > 2) fail("too many ':' in slice");
      continue;
    }
    if (parts[idx]) fail("expected ']' or ':', got " + describe(cur()));
    parts[idx] = parse_expr(true);
    if (!is_slice && is_op(",")) fail("tuple subscripts are not supported");
  }
  next();
  if (!is_slice) {
    if (!parts[0]) fail_at(at.line, at.col, "empty subscript");
    auto e = make(ExprKind::kItem, at);
    e->args.push_back(std::move(obj));
    e->args.push_back(std::move(parts[0]));
    return e;
  }
  auto e = make(ExprKind::kSlice, at);
  e->args.push_back(std::move(obj));
  for (auto& p : parts) e->args.push_back(std::move(p));
  return e;
}

// A literal, a name, or a parenthesised / list / dict display.
ExprPtr Parser::parse_primary() {
  DepthGuard g(*this);
  const Tok& t = cur();
  switch (t.kind) {
    case Tok::kName: return parse_name();
    case Tok::kString: return parse_string();
    case Tok::kInt: {
      const Tok at = next();
      auto e = make(ExprKind::kLiteral, at);
      e->literal = Value::integer(at.ival);
      return e;
    }
    case Tok::kFloat: {
      const Tok at = next();
      auto e = make(ExprKind::kLiteral, at);
      e->literal = Value::number(at.fval);
      return e;
    }
    case Tok::kOp:
      if (t.text == "(") return parse_parenthesised();
      if (t.text == "[") return parse_list_display();
      if (t.text == "{") return parse_dict_display();
      break;
    default: break;
  }
  fail("unexpected " + describe(t) + " in expression");
}

// true / false / none (either case) as literals, any other name as a variable; notes the names
// that make a macro take varargs / kwargs / caller and a loop body use `loop`.
ExprPtr Parser::parse_name() {
  const Tok at = next();
  auto e = make(ExprKind::kLiteral, at);
  if (at.text == "true" || at.text == "True") e->literal = Value::boolean(true);
  else if (at.text == "false" || at.text == "False") e->literal = Value::boolean(false);
  else if (at.text == "none" || at.text == "None") e->literal = Value::none();
  else {
    e->kind = ExprKind::kName;
    e->name = at.text;
    if (at.text == "varargs") saw_varargs_ = true;
    if (at.text == "kwargs") saw_kwargs_ = true;
    if (at.text == "caller") saw_caller_ = true;
    if (at.text == "loop") saw_loop_ = true;
  }
  return e;
}

ExprPtr Parser::parse_string() {
  const Tok at = next();
  std::string s = at.text;
  while (cur().kind == Tok::kString) s += next().text;  // adjacent literals concatenate
  auto e = make(ExprKind::kLiteral, at);
  e->literal = Value::string(std::move(s));
  return e;
}

// (expr), () and (a, b, ...): a parenthesised expression or a tuple.
ExprPtr Parser::parse_parenthesised() {
  const Tok at = next();
  if (is_op(")")) {
    next();
    return make(ExprKind::kTuple, at);
  }
  ExprPtr first = parse_expr(true);
  if (is_op(")")) {
    next();
    return first;
  }
  auto tup = make(ExprKind::kTuple, at);
  tup->args.push_back(std::move(first));
  while (is_op(",")) {
    next();
    if (is_op(")")) break;
    tup->args.push_back(parse_expr(true));
  }
  expect_op(")");
  return tup;
}

ExprPtr Parser::parse_list_display() {
  const Tok at = next();
  auto l = make(ExprKind::kList, at);
  while (!is_op("]")) {
    if (!l->args.empty()) expect_op(",");
    if (is_op("]")) break;
    l->args.push_back(parse_expr(true));
  }
  next();
  return l;
}

// {k: v, ...}: keys and values alternate in args.
ExprPtr Parser::parse_dict_display() {
  const Tok at = next();
  auto d = make(ExprKind::kDict, at);
  while (!is_op("}")) {
    if (!d->args.empty()) expect_op(",");
    if (is_op("}")) break;
    d->args.push_back(parse_expr(true));
    expect_op(":");
    d->args.push_back(parse_expr(true));
  }
  next();
  return d;
}

}  // namespace loom::jinja
