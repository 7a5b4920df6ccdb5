// Syntax tree of a parsed template. Expressions and statements are plain tagged structs: the
// interpreter switches on `kind`; the parser is the only producer.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "jinja/value.h"

namespace loom::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,  // literal
  kName,     // name
  kList,     // args: items
  kTuple,    // args: items
  kDict,     // args: key0, value0, key1, value1, ...
  kNeg,      // args[0]
  kPos,      // args[0]
  kNot,      // args[0]
  kBinary,   // name: operator (+ - * / // % ** ~), args[0], args[1]
  kCompare,  // args[0] op[0] args[1] op[1] args[2] ... (chained, as Python)
  kAnd,      // args[0], args[1]
  kOr,       // args[0], args[1]
  kCond,     // args: then, condition, else (may be null)
  kAttr,     // args[0].name
  kItem,     // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]] (each bound may be null)
  kCall,     // args[0](args[1..], kwargs)
  kFilter,   // args[0] | name(args[1..], kwargs); args[0] null inside {% filter %} / {% set x | f %}
  kTest,     // args[0] is [not] name(args[1..], kwargs)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int col = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::string> ops;  // kCompare
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // kTest
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (condition null for else)
  kFor,          // for target in expr [if cond] body [else else_body]
  kSet,          // set target = expr
  kSetBlock,     // {% set target [| filters] %}body{% endset %}; expr: filter chain or null
  kMacro,        // {% macro name(params) %}body{% endmacro %}
  kCallBlock,    // {% call(params) expr %}body{% endcall %}
  kFilterBlock,  // {% filter chain %}body{% endfilter %}; expr: filter chain
  kBreak,
  kContinue,
  kDo,     // {% do expr %}
  kScope,  // {% with %} / {% generation %}: body in a new scope
};

struct Node {
  NodeKind kind = NodeKind::kText;
  int line = 0;
  int col = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr cond;
  Body body;
  Body else_body;
  std::vector<std::pair<ExprPtr, Body>> branches;
  // kMacro / kCallBlock
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
  bool uses_loop = false;  // kFor: the body mentions `loop` (else no loop object is built)
  // kScope ({% with a = 1 %}): assignments made in the new scope
  std::vector<std::pair<ExprPtr, ExprPtr>> assigns;
};

// Parses a whole template with HF's settings (trim_blocks, lstrip_blocks, no trailing newline).
// Errors carry "line L, column C".
Expected<std::shared_ptr<const Body>> parse_template(std::string_view source);

}  // namespace loom::jinja
