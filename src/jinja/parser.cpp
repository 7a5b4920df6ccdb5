// Recursive-descent parser for the Jinja2 subset used by chat templates (parser.h): the template's
// body and its statements, one parse function per statement kind.
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "jinja/parser.h"

namespace loom::jinja {
namespace {

// A new syntax-tree node (an Expr or a Node) of kind k at the token's position.
template <class T, class Kind>
std::unique_ptr<T> node_at(Kind k, const Tok& at) {
  auto n = std::make_unique<T>();
  n->kind = k;
  n->line = at.line;
  n->col = at.col;
  return n;
}

}  // namespace

Body Parser::parse_all() {
  std::string end;
  Body body = parse_body({}, end);
  return body;
}

Tok Parser::next() {
  Tok t = toks_[pos_];
  if (pos_ + 1 < toks_.size()) ++pos_;
  return t;
}

std::string Parser::describe(const Tok& t) const {
  switch (t.kind) {
    case Tok::kEof: return "end of template";
    case Tok::kVarEnd: return "end of print statement";
    case Tok::kBlockEnd: return "end of statement block";
    case Tok::kString: return "string literal";
    case Tok::kText: return "template text";
    default: return "'" + t.text + "'";
  }
}

void Parser::expect_op(const char* op) {
  if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  next();
}

std::string Parser::expect_name() {
  if (cur().kind != Tok::kName) fail("expected a name, got " + describe(cur()));
  return next().text;
}

void Parser::expect_block_end() {
  if (cur().kind != Tok::kBlockEnd) fail("expected end of statement block, got " + describe(cur()));
  next();
}

ExprPtr Parser::make(ExprKind k, const Tok& at) { return node_at<Expr>(k, at); }

// Parses nodes until a block whose first name is in `ends`; leaves the parser after that
// block's name (the caller reads the rest of the tag) and reports which end it found.
Body Parser::parse_body(std::initializer_list<const char*> ends, std::string& found, const Tok* opener) {
  DepthGuard g(*this);
  Body body;
  while (true) {
    const Tok& t = cur();
    if (t.kind == Tok::kEof) {
      if (ends.size() == 0) return body;
      std::string want;
      for (const char* e : ends) want += (want.empty() ? "" : " or ") + std::string("'") + e + "'";
      if (opener)
        fail_at(t.line, t.col,
                "unexpected end of template: block opened at line " + std::to_string(opener->line) + " needs " + want);
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

NodePtr Parser::new_node(NodeKind k, const Tok& at) { return node_at<Node>(k, at); }

NodePtr Parser::parse_statement(const std::string& kw, const Tok& begin) {
  static const std::unordered_map<std::string, StatementParser> kParsers = {
      {"if", &Parser::parse_if},
      {"for", &Parser::parse_for},
      {"set", &Parser::parse_set},
      {"macro", &Parser::parse_macro},
      {"call", &Parser::parse_call_block},
      {"filter", &Parser::parse_filter_block},
      {"break", &Parser::parse_loop_control},
      {"continue", &Parser::parse_loop_control},
      {"do", &Parser::parse_do},
      {"with", &Parser::parse_scope},
      {"generation", &Parser::parse_scope},
      {"raw", &Parser::parse_raw_tag},
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
NodePtr Parser::parse_if(const std::string&, const Tok& begin) {
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
NodePtr Parser::parse_for(const std::string&, const Tok& begin) {
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
NodePtr Parser::parse_set(const std::string&, const Tok& begin) {
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
NodePtr Parser::parse_macro(const std::string&, const Tok& begin) {
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
NodePtr Parser::parse_call_block(const std::string&, const Tok& begin) {
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
NodePtr Parser::parse_filter_block(const std::string&, const Tok& begin) {
  std::string found;
  auto n = new_node(NodeKind::kFilterBlock, begin);
  n->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
  expect_block_end();
  n->body = parse_body({"endfilter"}, found, &begin);
  expect_block_end();
  return n;
}

// {% break %} / {% continue %}, inside a loop only.
NodePtr Parser::parse_loop_control(const std::string& kw, const Tok& begin) {
  if (loop_depth_ == 0) fail("'" + kw + "' outside of a loop");
  expect_block_end();
  return new_node(kw == "break" ? NodeKind::kBreak : NodeKind::kContinue, begin);
}

// {% do expr %}
NodePtr Parser::parse_do(const std::string&, const Tok& begin) {
  auto n = new_node(NodeKind::kDo, begin);
  n->expr = parse_tuple(true);
  expect_block_end();
  return n;
}

// {% with a = x, ... %} ... {% endwith %} and {% generation %} ... {% endgeneration %}: a scope.
NodePtr Parser::parse_scope(const std::string& kw, const Tok& begin) {
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
NodePtr Parser::parse_raw_tag(const std::string&, const Tok&) {
  expect_block_end();
  return nullptr;
}

void Parser::parse_params(Node& n) {
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
ExprPtr Parser::parse_assign_target(bool allow_attr) {
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
