// Tokens of a template (internal to src/jinja): the lexer's output, the parser's input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::jinja {

struct Tok {
  enum Kind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Kind kind = kEof;
  std::string text;
  int64_t ival = 0;
  double fval = 0;
  int line = 0;
  int col = 0;
};

// Throws TemplateError("syntax error at line L, column C: msg").
[[noreturn]] void fail_at(int line, int col, const std::string& msg);

// The tokens of a template whose newlines are "\n" and whose trailing newline is dropped: text,
// and the tokens of each tag between its begin and end tokens, whitespace control applied; the
// last is kEof. Throws TemplateError on a malformed tag.
std::vector<Tok> lex(std::string src);

}  // namespace loom::jinja
