// The lexer of the Jinja2 subset (see lexer.h).
//
// Lexing happens in two passes: the first splits the source into text and tags (tags tokenized,
// string literals may contain "}}" or "%}"), the second applies whitespace control exactly as
// Jinja2 does with trim_blocks=True and lstrip_blocks=True:
//   {%- / {{- / {#-  strip all whitespace before the tag; -%} / -}} / -#} all whitespace after;
//   a block or comment tag alone on its line loses the line's leading spaces/tabs (lstrip_blocks,
//   disabled by {%+) and the newline after %} or #} is dropped (trim_blocks, disabled by +%}).
// Newlines are normalized to \n and one trailing newline of the source is dropped, as Jinja2's
// defaults (keep_trailing_newline=False) do.
#include "jinja/lexer.h"

#include <cstdio>
#include <cstring>

#include "jinja/value.h"

namespace loom::jinja {

[[noreturn]] void fail_at(int line, int col, const std::string& msg) {
  throw TemplateError{"syntax error at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + msg};
}

namespace {

// strchr that does not match the terminating NUL (templates may contain NUL bytes).
bool in_set(char c, const char* set) { return c != 0 && std::strchr(set, c) != nullptr; }

struct Chunk {
  enum Kind { kText, kVar, kBlock, kComment };
  Kind kind = kText;
  std::string text;
  size_t begin = 0;  // source offset of the text
  char open_mod = 0;
  char close_mod = 0;
  bool raw = false;  // text of a {% raw %} block, or the {% raw %} tag itself
  std::vector<Tok> toks;
  int line = 0;
  int col = 0;
};

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Tok> run() {
    split();
    return whitespace_and_flatten();
  }

 private:
  void line_col(size_t pos, int& line, int& col) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const size_t idx = size_t(it - line_starts_.begin()) - 1;
    line = int(idx) + 1;
    col = int(pos - line_starts_[idx]) + 1;
  }
  [[noreturn]] void fail(size_t pos, const std::string& msg) const {
    int l, c;
    line_col(pos, l, c);
    fail_at(l, c, msg);
  }

  void add_text(size_t b, size_t e, bool raw = false) {
    Chunk c;
    c.kind = Chunk::kText;
    c.text = src_.substr(b, e - b);
    c.begin = b;
    c.raw = raw;
    chunks_.push_back(std::move(c));
  }

  void split() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t open = src_.find('{', pos);
      while (open != std::string::npos && open + 1 < src_.size() && !in_set(src_[open + 1], "{%#"))
        open = src_.find('{', open + 1);
      if (open == std::string::npos || open + 1 >= src_.size()) {
        add_text(pos, src_.size());
        return;
      }
      add_text(pos, open);
      Chunk tag;
      line_col(open, tag.line, tag.col);
      const char t = src_[open + 1];
      size_t p = open + 2;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) tag.open_mod = src_[p++];
      if (t == '#') {
        tag.kind = Chunk::kComment;
        const size_t close = src_.find("#}", p);
        if (close == std::string::npos) fail(open, "unclosed comment");
        if (close > p && (src_[close - 1] == '-' || src_[close - 1] == '+')) tag.close_mod = src_[close - 1];
        pos = close + 2;
        chunks_.push_back(std::move(tag));
        continue;
      }
      tag.kind = t == '{' ? Chunk::kVar : Chunk::kBlock;
      pos = lex_tag(tag, p, t == '{' ? '}' : '%');
      if (tag.kind == Chunk::kBlock && tag.toks.size() == 1 && tag.toks[0].kind == Tok::kName && tag.toks[0].text == "raw") {
        tag.raw = true;
        chunks_.push_back(std::move(tag));
        pos = lex_raw(pos, open);
        continue;
      }
      chunks_.push_back(std::move(tag));
    }
  }

  // Finds {% endraw %}, adds the raw text and the endraw tag; returns the offset after it.
  size_t lex_raw(size_t pos, size_t raw_open) {
    size_t search = pos;
    while (true) {
      const size_t b = src_.find("{%", search);
      if (b == std::string::npos) fail(raw_open, "unclosed raw block (missing {% endraw %})");
      size_t p = b + 2;
      char open_mod = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) open_mod = src_[p++];
      while (p < src_.size() && in_set(src_[p], " \t\n")) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = b + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && in_set(src_[p], " \t\n")) ++p;
      char close_mod = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) close_mod = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) {
        search = b + 2;
        continue;
      }
      add_text(pos, b, /*raw=*/true);
      Chunk end;
      end.kind = Chunk::kBlock;
      line_col(b, end.line, end.col);
      end.open_mod = open_mod;
      end.close_mod = close_mod;
      Tok name;
      name.kind = Tok::kName;
      name.text = "endraw";
      name.line = end.line;
      name.col = end.col;
      end.toks.push_back(name);
      chunks_.push_back(std::move(end));
      return p + 2;
    }
  }

  // Tokenizes a {{ }} or {% %} tag starting after its opening; returns the offset after its end.
  size_t lex_tag(Chunk& tag, size_t p, char end_char) {
    int depth = 0;
    const size_t start = p;
    auto at_end = [&](size_t q) { return q + 1 < src_.size() && src_[q] == end_char && src_[q + 1] == '}'; };
    while (true) {
      while (p < src_.size() && in_set(src_[p], " \t\n\r")) ++p;
      if (p >= src_.size()) fail(start - 2, std::string("unclosed tag (missing '") + end_char + "}')");
      if (depth == 0) {
        if ((src_[p] == '-' || src_[p] == '+') && at_end(p + 1)) {
          tag.close_mod = src_[p];
          return p + 3;
        }
        if (at_end(p)) return p + 2;
      }
      Tok tok;
      line_col(p, tok.line, tok.col);
      const char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        tok.kind = Tok::kName;
        tok.text = src_.substr(p, q - p);
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(tag, p, tok);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p, tok);
      } else {
        static const char* kOps2[] = {"**", "//", "==", "!=", "<=", ">="};
        tok.kind = Tok::kOp;
        for (const char* op : kOps2)
          if (src_.compare(p, 2, op) == 0) tok.text = op;
        if (tok.text.empty()) {
          if (!in_set(c, "+-*/%~<>=()[]{}.,:|!")) fail(p, "unexpected character " + describe_char(c));
          if (c == '!') fail(p, "unexpected character '!'");  // only != is an operator
          tok.text = std::string(1, c);
        }
        if (tok.text == "(" || tok.text == "[" || tok.text == "{") ++depth;
        if (tok.text == ")" || tok.text == "]" || tok.text == "}") {
          if (--depth < 0) fail(p, "unbalanced '" + tok.text + "'");
        }
        p += tok.text.size();
      }
      tag.toks.push_back(std::move(tok));
    }
  }

  size_t lex_number(const Chunk& tag, size_t p, Tok& tok) {
    size_t q = p;
    auto digits = [&] {
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
    };
    digits();
    bool is_float = false;
    // "x.0.1" is item access, not a float: no fraction right after a dot.
    const bool after_dot = !tag.toks.empty() && tag.toks.back().kind == Tok::kOp && tag.toks.back().text == ".";
    if (!after_dot && q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      is_float = true;
      ++q;
      digits();
    }
    if (!after_dot && q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        is_float = true;
        q = r;
        digits();
      }
    }
    std::string text;
    for (size_t i = p; i < q; ++i)
      if (src_[i] != '_') text += src_[i];
    tok.text = text;
    if (is_float) {
      tok.kind = Tok::kFloat;
      tok.fval = std::strtod(text.c_str(), nullptr);
    } else {
      tok.kind = Tok::kInt;
      errno = 0;
      const long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(p, "integer literal too large");
      tok.ival = v;
    }
    return q;
  }

  // Python "unicode-escape" semantics, as Jinja2 decodes string literals.
  size_t lex_string(size_t p, Tok& tok) {
    const char q = src_[p];
    std::string out;
    size_t i = p + 1;
    auto hex = [&](size_t at, int n) -> uint32_t {
      uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (at + k >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[at + k])))
          fail(at, "truncated escape in string literal");
        const char h = src_[at + k];
        v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      return v;
    };
    while (true) {
      if (i >= src_.size()) fail(p, "unterminated string literal");
      const char c = src_[i];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail(p, "unterminated string literal");
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;  // line continuation
        case 'x':
          utf8_append(out, hex(i, 2));
          i += 2;
          break;
        case 'u':
          utf8_append(out, hex(i, 4));
          i += 4;
          break;
        case 'U': {
          const uint32_t cp = hex(i, 8);
          if (cp > 0x10FFFF) fail(i, "invalid \\U escape");
          utf8_append(out, cp);
          i += 8;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = uint32_t(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k)
              v = v * 8 + uint32_t(src_[i++] - '0');
            utf8_append(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tok.kind = Tok::kString;
    tok.text = std::move(out);
    return i + 1;
  }

  static std::string describe_char(char c) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "0x%02x", static_cast<unsigned char>(c));
      return b;
    }
    return std::string("'") + c + "'";
  }

  static bool only_spaces_tabs(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t'; });
  }
  static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

  std::vector<Tok> whitespace_and_flatten() {
    std::vector<Tok> out;
    for (size_t i = 0; i < chunks_.size(); ++i) {
      Chunk& c = chunks_[i];
      if (c.kind == Chunk::kText) {
        std::string& t = c.text;
        size_t cut = 0;
        if (i > 0 && chunks_[i - 1].kind != Chunk::kText) {
          const Chunk& prev = chunks_[i - 1];
          if (prev.close_mod == '-') {
            while (cut < t.size() && is_ws(t[cut])) ++cut;
          } else if (prev.kind != Chunk::kVar && prev.close_mod != '+' && !prev.raw && !t.empty() && t[0] == '\n') {
            cut = 1;
          }
        }
        const size_t start = c.begin + cut;
        const bool line_starting = start == 0 || src_[start - 1] == '\n';
        t.erase(0, cut);
        if (i + 1 < chunks_.size() && chunks_[i + 1].kind != Chunk::kText) {
          const Chunk& next = chunks_[i + 1];
          if (next.open_mod == '-') {
            while (!t.empty() && is_ws(t.back())) t.pop_back();
          } else if (next.kind != Chunk::kVar && next.open_mod != '+') {
            const size_t nl = t.rfind('\n');
            const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
            if ((l_pos > 0 || line_starting) && only_spaces_tabs(std::string_view(t).substr(l_pos))) t.erase(l_pos);
          }
        }
        if (!t.empty()) {
          Tok tok;
          tok.kind = Tok::kText;
          tok.text = std::move(t);
          out.push_back(std::move(tok));
        }
        continue;
      }
      if (c.kind == Chunk::kComment) continue;
      Tok b;
      b.kind = c.kind == Chunk::kVar ? Tok::kVarBegin : Tok::kBlockBegin;
      b.line = c.line;
      b.col = c.col;
      out.push_back(b);
      for (auto& t : c.toks) out.push_back(std::move(t));
      Tok e = b;
      e.kind = c.kind == Chunk::kVar ? Tok::kVarEnd : Tok::kBlockEnd;
      out.push_back(e);
    }
    Tok eof;
    eof.kind = Tok::kEof;
    int l, col;
    line_col(src_.size(), l, col);
    eof.line = l;
    eof.col = col;
    out.push_back(eof);
    return out;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Chunk> chunks_;
};

}  // namespace

std::vector<Tok> lex(std::string src) { return Lexer(std::move(src)).run(); }

}  // namespace loom::jinja
