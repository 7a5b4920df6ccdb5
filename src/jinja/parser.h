// The parser's state and its parse functions (internal to src/jinja): tokens (lexer.h) to the
// syntax tree (ast.h) by recursive descent. Statements are parsed in parser.cpp, one function per
// statement kind; expressions in parser_expressions.cpp, one function per precedence level.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace loom::jinja {

constexpr int kMaxParseDepth = 200;  // nesting of blocks + expressions (bounds C++ recursion)

class Parser {
 public:
  explicit Parser(std::vector<Tok> toks) : toks_(std::move(toks)) {}

  Body parse_all();

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
  Tok next();
  [[noreturn]] void fail(const std::string& msg) const { fail_at(cur().line, cur().col, msg); }
  bool is_op(const char* op) const { return cur().kind == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Tok::kName && cur().text == n; }
  std::string describe(const Tok& t) const;
  void expect_op(const char* op);
  std::string expect_name();
  void expect_block_end();
  ExprPtr make(ExprKind k, const Tok& at);

  // Parses nodes until a block whose first name is in `ends`; leaves the parser after that
  // block's name (the caller reads the rest of the tag) and reports which end it found.
  Body parse_body(std::initializer_list<const char*> ends, std::string& found, const Tok* opener = nullptr);
  NodePtr new_node(NodeKind k, const Tok& at);

  // ---- statements: one parse function per kind, after the tag's name; `begin` is the tag ----
  using StatementParser = NodePtr (Parser::*)(const std::string& kw, const Tok& begin);
  NodePtr parse_statement(const std::string& kw, const Tok& begin);

  // {% if %} ... {% elif %} ... {% else %} ... {% endif %}
  NodePtr parse_if(const std::string&, const Tok& begin);

  // {% for target in iterable [if cond] %} ... [{% else %} ...] {% endfor %}
  NodePtr parse_for(const std::string&, const Tok& begin);

  // {% set target = expr %}, or the block form {% set target [| filters] %} ... {% endset %}
  NodePtr parse_set(const std::string&, const Tok& begin);

  // {% macro name(params) %} ... {% endmacro %}: notes whether the body uses varargs, kwargs, caller.
  NodePtr parse_macro(const std::string&, const Tok& begin);

  // {% call[(params)] macro(args) %} ... {% endcall %}
  NodePtr parse_call_block(const std::string&, const Tok& begin);

  // {% filter name(args) | ... %} ... {% endfilter %}
  NodePtr parse_filter_block(const std::string&, const Tok& begin);

  // {% break %} / {% continue %}, inside a loop only.
  NodePtr parse_loop_control(const std::string& kw, const Tok& begin);

  // {% do expr %}
  NodePtr parse_do(const std::string&, const Tok& begin);

  // {% with a = x, ... %} ... {% endwith %} and {% generation %} ... {% endgeneration %}: a scope.
  NodePtr parse_scope(const std::string& kw, const Tok& begin);

  // {% raw %} / {% endraw %}: the lexer kept the text between them; the tags leave no node.
  NodePtr parse_raw_tag(const std::string&, const Tok&);
  void parse_params(Node& n);

  // for / set / with targets: a name, "ns.attr" (set only), or a tuple of names.
  ExprPtr parse_assign_target(bool allow_attr);

  // Filter chain applied to `subject` (null: the block's content).
  ExprPtr parse_filter_chain(ExprPtr subject, bool leading_pipe = true);
  ExprPtr parse_filter(ExprPtr subject);
  void parse_call_args(Expr& call);

  // tuple := expr ("," expr)*   (a bare "a, b" makes a tuple, as in Jinja2)
  ExprPtr parse_tuple(bool with_cond);
  ExprPtr parse_expr(bool with_cond);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, const Tok& at);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_test(ExprPtr subject);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr obj);

  // A literal, a name, or a parenthesised / list / dict display.
  ExprPtr parse_primary();

  // true / false / none (either case) as literals, any other name as a variable; notes the names
  // that make a macro take varargs / kwargs / caller and a loop body use `loop`.
  ExprPtr parse_name();
  ExprPtr parse_string();

  // (expr), () and (a, b, ...): a parenthesised expression or a tuple.
  ExprPtr parse_parenthesised();
  ExprPtr parse_list_display();

  // {k: v, ...}: keys and values alternate in args.
  ExprPtr parse_dict_display();

  std::vector<Tok> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // enclosing for loops of the current macro/template body
  bool saw_varargs_ = false;
  bool saw_kwargs_ = false;
  bool saw_caller_ = false;
  bool saw_loop_ = false;
};

}  // namespace loom::jinja
