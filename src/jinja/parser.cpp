// Recursive-descent parser for the Jinja2 subset used by chat templates: tokens (lexer.h) to the
// syntax tree (ast.h), one parse function per statement kind.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace loom::jinja {
namespace {

constexpr int kMaxParseDepth = 200;  // nesting of blocks + expressions (bounds C++ recursion)

class Parser {
 public:
  explicit Parser(std::vector<Tok> toks) : toks_(std::move(toks)) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) p_.fail("template nested too deeply (limit " + std::to_string(kMaxParseDepth) + ")");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  const Tok& cur() const { return toks_[pos_]; }
  const Tok& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  Tok next() {
    Tok t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(cur().line, cur().col, msg); }
  bool is_op(const char* op) const { return cur().kind == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Tok::kName && cur().text == n; }
  std::string describe(const Tok& t) const {
    switch (t.kind) {
      case Tok::kEof: return "end of template";
      case Tok::kVarEnd: return "end of print statement";
      case Tok::kBlockEnd: return "end of statement block";
      case Tok::kString: return "string literal";
      case Tok::kText: return "template text";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().kind != Tok::kName) fail("expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().kind != Tok::kBlockEnd) fail("expected end of statement block, got " + describe(cur()));
    next();
  }

  ExprPtr make(ExprKind k, const Tok& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // Parses nodes until a block whose first name is in `ends`; leaves the parser after that
  // block's name (the caller reads the rest of the tag) and reports which end it found.
  Body parse_body(std::initializer_list<const char*> ends, std::string& found, const Tok* opener = nullptr) {
    DepthGuard g(*this);
    Body body;
    while (true) {
      const Tok& t = cur();
      if (t.kind == Tok::kEof) {
        if (ends.size() == 0) return body;
        std::string want;
        for (const char* e : ends) want += (want.empty() ? "" : " or ") + std::string("'") + e + "'";
        if (opener)
          fail_at(t.line, t.col, "unexpected end of template: block opened at line " + std::to_string(opener->line) +
                                     " needs " + want);
        fail("unexpected end of template, expected " + want);
      }
      if (t.kind == Tok::kText) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::kText;
        n->text = next().text;
        body.push_back(std::move(n));
        continue;
      }
      if (t.kind == Tok::kVarBegin) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::kOutput;
        n->line = t.line;
        n->col = t.col;
        next();
        n->expr = parse_tuple(true);
        if (cur().kind != Tok::kVarEnd) fail("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(n));
        continue;
      }
      if (t.kind != Tok::kBlockBegin) fail("unexpected " + describe(t));
      const Tok begin = next();
      if (cur().kind != Tok::kName) fail("expected a statement name, got " + describe(cur()));
      const std::string kw = cur().text;
      for (const char* e : ends) {
        if (kw == e) {
          next();
          found = kw;
          return body;
        }
      }
      next();
      if (NodePtr n = parse_statement(kw, begin)) body.push_back(std::move(n));
    }
  }

  NodePtr new_node(NodeKind k, const Tok& at) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = at.line;
    n->col = at.col;
    return n;
  }

  // ---- statements: one parse function per kind, after the tag's name; `begin` is the tag ----
  using StatementParser = NodePtr (Parser::*)(const std::string& kw, const Tok& begin);

  NodePtr parse_statement(const std::string& kw, const Tok& begin) {
    static const std::unordered_map<std::string, StatementParser> kParsers = {
        {"if", &Parser::parse_if},         {"for", &Parser::parse_for},
        {"set", &Parser::parse_set},       {"macro", &Parser::parse_macro},
        {"call", &Parser::parse_call_block}, {"filter", &Parser::parse_filter_block},
        {"break", &Parser::parse_loop_control}, {"continue", &Parser::parse_loop_control},
        {"do", &Parser::parse_do},         {"with", &Parser::parse_scope},
        {"generation", &Parser::parse_scope}, {"raw", &Parser::parse_raw_tag},
        {"endraw", &Parser::parse_raw_tag},
    };
    if (auto it = kParsers.find(kw); it != kParsers.end()) return (this->*it->second)(kw, begin);
    if (kw == "include" || kw == "extends" || kw == "import" || kw == "from" || kw == "block")
      fail_at(begin.line, begin.col, "'" + kw + "' is not supported in chat templates");
    if (kw.rfind("end", 0) == 0 || kw == "else" || kw == "elif")
      fail_at(begin.line, begin.col, "unexpected '" + kw + "' (no open block it could close)");
    fail_at(begin.line, begin.col, "unknown statement '" + kw + "'");
  }

  // {% if %} ... {% elif %} ... {% else %} ... {% endif %}
  NodePtr parse_if(const std::string&, const Tok& begin) {
    std::string found;
    auto n = new_node(NodeKind::kIf, begin);
    ExprPtr cond = parse_tuple(true);
    expect_block_end();
    while (true) {
      Body b = parse_body({"elif", "else", "endif"}, found, &begin);
      n->branches.emplace_back(std::move(cond), std::move(b));
      if (found == "elif") {
        cond = parse_tuple(true);
        expect_block_end();
      } else if (found == "else") {
        expect_block_end();
        Body eb = parse_body({"endif"}, found, &begin);
        n->branches.emplace_back(nullptr, std::move(eb));
        expect_block_end();
        break;
      } else {
        expect_block_end();
        break;
      }
    }
    return n;
  }

  // {% for target in iterable [if cond] %} ... [{% else %} ...] {% endfor %}
  NodePtr parse_for(const std::string&, const Tok& begin) {
    std::string found;
    auto n = new_node(NodeKind::kFor, begin);
    n->target = parse_assign_target(false);
    if (!is_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
    next();
    n->expr = parse_tuple(false);  // no conditional expression: "if" filters the loop
    if (is_name("if")) {
      next();
      n->cond = parse_expr(true);
    }
    if (is_name("recursive")) fail("recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    const bool outer_loop = saw_loop_;
    saw_loop_ = false;
    n->body = parse_body({"else", "endfor"}, found, &begin);
    --loop_depth_;
    if (found == "else") {
      expect_block_end();
      n->else_body = parse_body({"endfor"}, found, &begin);
    }
    n->uses_loop = saw_loop_;
    saw_loop_ = outer_loop || saw_loop_;
    expect_block_end();
    return n;
  }

  // {% set target = expr %}, or the block form {% set target [| filters] %} ... {% endset %}
  NodePtr parse_set(const std::string&, const Tok& begin) {
    std::string found;
    ExprPtr target = parse_assign_target(true);
    if (is_op("=")) {
      next();
      auto n = new_node(NodeKind::kSet, begin);
      n->target = std::move(target);
      n->expr = parse_tuple(true);
      expect_block_end();
      return n;
    }
    auto n = new_node(NodeKind::kSetBlock, begin);
    n->target = std::move(target);
    if (is_op("|")) n->expr = parse_filter_chain(nullptr);
    expect_block_end();
    n->body = parse_body({"endset"}, found, &begin);
    expect_block_end();
    return n;
  }

  // {% macro name(params) %} ... {% endmacro %}: notes whether the body uses varargs, kwargs, caller.
  NodePtr parse_macro(const std::string&, const Tok& begin) {
    std::string found;
    auto n = new_node(NodeKind::kMacro, begin);
    n->name = expect_name();
    parse_params(*n);
    expect_block_end();
    const bool outer_v = saw_varargs_, outer_k = saw_kwargs_, outer_c = saw_caller_;
    saw_varargs_ = saw_kwargs_ = saw_caller_ = false;
    const int outer_loops = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_body({"endmacro"}, found, &begin);
    loop_depth_ = outer_loops;
    n->uses_varargs = saw_varargs_;
    n->uses_kwargs = saw_kwargs_;
    n->uses_caller = saw_caller_;
    saw_varargs_ = outer_v;
    saw_kwargs_ = outer_k;
    saw_caller_ = outer_c;
    if (cur().kind == Tok::kName) next();  // {% endmacro name %}
    expect_block_end();
    return n;
  }

  // {% call[(params)] macro(args) %} ... {% endcall %}
  NodePtr parse_call_block(const std::string&, const Tok& begin) {
    std::string found;
    auto n = new_node(NodeKind::kCallBlock, begin);
    if (is_op("(")) parse_params(*n);
    n->expr = parse_expr(true);
    if (n->expr->kind != ExprKind::kCall) fail("expected a call in {% call %}");
    expect_block_end();
    const int outer_loops = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_body({"endcall"}, found, &begin);
    loop_depth_ = outer_loops;
    expect_block_end();
    return n;
  }

  // {% filter name(args) | ... %} ... {% endfilter %}
  NodePtr parse_filter_block(const std::string&, const Tok& begin) {
    std::string found;
    auto n = new_node(NodeKind::kFilterBlock, begin);
    n->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
    expect_block_end();
    n->body = parse_body({"endfilter"}, found, &begin);
    expect_block_end();
    return n;
  }

  // {% break %} / {% continue %}, inside a loop only.
  NodePtr parse_loop_control(const std::string& kw, const Tok& begin) {
    if (loop_depth_ == 0) fail("'" + kw + "' outside of a loop");
    expect_block_end();
    return new_node(kw == "break" ? NodeKind::kBreak : NodeKind::kContinue, begin);
  }

  // {% do expr %}
  NodePtr parse_do(const std::string&, const Tok& begin) {
    auto n = new_node(NodeKind::kDo, begin);
    n->expr = parse_tuple(true);
    expect_block_end();
    return n;
  }

  // {% with a = x, ... %} ... {% endwith %} and {% generation %} ... {% endgeneration %}: a scope.
  NodePtr parse_scope(const std::string& kw, const Tok& begin) {
    std::string found;
    auto n = new_node(NodeKind::kScope, begin);
    if (kw == "with") {
      while (cur().kind != Tok::kBlockEnd) {
        if (!n->assigns.empty()) expect_op(",");
        ExprPtr t = parse_assign_target(false);
        expect_op("=");
        n->assigns.emplace_back(std::move(t), parse_expr(true));
      }
    }
    expect_block_end();
    n->body = parse_body({kw == "with" ? "endwith" : "endgeneration"}, found, &begin);
    expect_block_end();
    return n;
  }

  // {% raw %} / {% endraw %}: the lexer kept the text between them; the tags leave no node.
  NodePtr parse_raw_tag(const std::string&, const Tok&) {
    expect_block_end();
    return nullptr;
  }

  void parse_params(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (!n.params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr def;
      if (is_op("=")) {
        next();
        def = parse_expr(true);
      }
      n.params.emplace_back(std::move(name), std::move(def));
    }
    next();
  }

  // for / set / with targets: a name, "ns.attr" (set only), or a tuple of names.
  ExprPtr parse_assign_target(bool allow_attr) {
    const Tok at = cur();
    auto one = [&]() -> ExprPtr {
      if (is_op("(")) {
        next();
        ExprPtr t = parse_assign_target(false);
        expect_op(")");
        return t;
      }
      const Tok nt = cur();
      std::string name = expect_name();
      auto e = make(ExprKind::kName, nt);
      e->name = name;
      if (allow_attr && is_op(".")) {
        next();
        auto a = make(ExprKind::kAttr, nt);
        a->name = expect_name();
        a->args.push_back(std::move(e));
        return a;
      }
      return e;
    };
    ExprPtr first = one();
    if (!is_op(",")) return first;
    auto tup = make(ExprKind::kTuple, at);
    tup->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (cur().kind != Tok::kName && !is_op("(")) break;
      tup->args.push_back(one());
    }
    return tup;
  }

  // Filter chain applied to `subject` (null: the block's content).
  ExprPtr parse_filter_chain(ExprPtr subject, bool leading_pipe = true) {
    if (leading_pipe) expect_op("|");
    ExprPtr node = parse_filter(std::move(subject));
    while (is_op("|")) {
      next();
      node = parse_filter(std::move(node));
    }
    return node;
  }

  ExprPtr parse_filter(ExprPtr subject) {
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

  void parse_call_args(Expr& call) {
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
  ExprPtr parse_tuple(bool with_cond) {
    const Tok at = cur();
    ExprPtr first = parse_expr(with_cond);
    if (!is_op(",")) return first;
    auto tup = make(ExprKind::kTuple, at);
    tup->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (cur().kind == Tok::kVarEnd || cur().kind == Tok::kBlockEnd || is_op(")") || is_op("=") || is_name("if"))
        break;
      tup->args.push_back(parse_expr(with_cond));
    }
    return tup;
  }

  ExprPtr parse_expr(bool with_cond) {
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

  ExprPtr parse_or() {
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

  ExprPtr parse_and() {
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

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      const Tok at = next();
      auto e = make(ExprKind::kNot, at);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Tok at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == Tok::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
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

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, const Tok& at) {
    auto e = make(ExprKind::kBinary, at);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Tok at = next();
      l = binary(at.text, std::move(l), parse_concat(), at);
    }
    return l;
  }

  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const Tok at = next();
      l = binary("~", std::move(l), parse_math2(), at);
    }
    return l;
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Tok at = next();
      l = binary(at.text, std::move(l), parse_pow(), at);
    }
    return l;
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const Tok at = next();
      l = binary("**", std::move(l), parse_unary(true), at);
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_filter_expr(ExprPtr node) {
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

  ExprPtr parse_test(ExprPtr subject) {
    const Tok at = next();  // "is"
    auto t = make(ExprKind::kTest, at);
    if (is_name("not")) {
      next();
      t->negated = true;
    }
    if (cur().kind == Tok::kName) {
      t->name = next().text;
    } else if (cur().kind == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                          cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      t->name = next().text;
    } else {
      fail("expected a test name after 'is', got " + describe(cur()));
    }
    t->args.push_back(std::move(subject));
    if (is_op("(")) {
      parse_call_args(*t);
    } else if ((cur().kind == Tok::kName || cur().kind == Tok::kString || cur().kind == Tok::kInt ||
                cur().kind == Tok::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") && !is_name("in") &&
               !is_name("not")) {
      if (is_name("is")) fail("cannot chain tests with 'is'");
      ExprPtr arg = parse_postfix(parse_primary());
      t->args.push_back(std::move(arg));
    }
    return t;
  }

  ExprPtr parse_call(ExprPtr callee) {
    const Tok at = cur();
    auto c = make(ExprKind::kCall, at);
    c->args.push_back(std::move(callee));
    parse_call_args(*c);
    return c;
  }

  ExprPtr parse_postfix(ExprPtr node) {
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

  ExprPtr parse_subscript(ExprPtr obj) {
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

  ExprPtr parse_primary() {
    DepthGuard g(*this);
    const Tok& t = cur();
    switch (t.kind) {
      case Tok::kName: {
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
      case Tok::kString: {
        const Tok at = next();
        std::string s = at.text;
        while (cur().kind == Tok::kString) s += next().text;  // adjacent literals concatenate
        auto e = make(ExprKind::kLiteral, at);
        e->literal = Value::string(std::move(s));
        return e;
      }
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
      case Tok::kOp: {
        if (t.text == "(") {
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
        if (t.text == "[") {
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
        if (t.text == "{") {
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
        break;
      }
      default: break;
    }
    fail("unexpected " + describe(t) + " in expression");
  }

  std::vector<Tok> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // enclosing for loops of the current macro/template body
  bool saw_varargs_ = false;
  bool saw_kwargs_ = false;
  bool saw_caller_ = false;
  bool saw_loop_ = false;
};

}  // namespace

Expected<std::shared_ptr<const Body>> parse_template(std::string_view source) {
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  try {
    Parser parser(lex(std::move(src)));
    return std::shared_ptr<const Body>(std::make_shared<Body>(parser.parse_all()));
  } catch (const TemplateError& e) {
    return invalid_argument(e.message);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "template too large to parse");
  }
}

}  // namespace loom::jinja
