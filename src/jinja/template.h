// Chat templates: a Jinja2-subset interpreter for the templates models ship in their Hugging Face
// tokenizer_config.json / GGUF metadata (tokenizer.chat_template). Renders as Python Jinja2 3.1
// does under transformers' settings (trim_blocks, lstrip_blocks, keep_trailing_newline off, a
// `tojson` that keeps key order and non-ASCII, raise_exception, strftime_now, break/continue,
// {% generation %}); tests/chat checks this against renderings made by Python Jinja2 itself.
//
// Supported: text, {{ }}, {# #}, whitespace control (-, +), {% raw %}; if/elif/else; for with
// else, `if` filter, tuple unpacking and loop.index/index0/revindex/revindex0/first/last/length/
// previtem/nextitem/depth/cycle(); set (names, tuples, namespace attributes, block set with
// filters); macro (defaults, keyword arguments, varargs/kwargs, caller) and call blocks; filter
// blocks; with; do; break/continue. Expressions: literals (str escapes, int, float, list, dict,
// tuple, true/false/none in both spellings), + - * / // % ** ~, comparisons (chained), in / not
// in, and/or/not, a if b else c, attributes, items, slices, calls with keyword arguments, filters
// and `is` tests. Builtins: range, namespace, dict, raise_exception, strftime_now; the filters,
// tests and str/dict/list methods in the tables of builtin_filters.cpp, builtin_tests.cpp and
// builtin_methods.cpp.
//
// Values follow Python: an absent variable is undefined (prints "", iterates empty, fails on
// attribute access or arithmetic), JSON null is None, dicts keep insertion order.
// Known differences from Jinja2: map/select/reject/selectattr/rejectattr/items return lists, not
// generators; integers are 64-bit (overflow is an error, Python would grow); str.format ignores
// format specs ({:>5} prints as {}); case mapping covers ASCII, Latin-1/Extended-A, Greek and
// Cyrillic; list.append/extend work although transformers' immutable sandbox would refuse them;
// recursive for loops, loop.changed, include/import/extends and the rarely used filters
// (groupby, truncate, wordwrap, urlencode, striptags, xmlattr, slice, filesizeformat) are absent.
//
// Templates are data: a malformed template, a runtime error or a template that would loop or
// recurse without end gives a Status, never a crash or a hang. Limits (RenderOptions):
//   max_steps          statements executed + loop iterations + calls           (10 million)
//   max_call_depth     nested macro / caller() calls                           (100)
//   max_output_bytes   size of the rendering and of any one string built       (16 MiB)
//   max_total_bytes    all strings and list elements built while rendering     (256 MiB)
//   nesting            parsing: 200 levels of blocks + expressions; rendering: 500 levels of
//                      evaluation, which needs about 512 KiB of stack at worst
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom::jinja {

struct Node;

struct RenderOptions {
  // The instant strftime_now() formats, in seconds since the Unix epoch, rendered as UTC. Unset:
  // the current local time, as transformers does.
  std::optional<int64_t> now_unix;
  // llama.cpp's leniency where Python Jinja2 raises (serving renders so; `loom template` keeps
  // Jinja2's errors unless --lenient): an undefined value's attributes and items are undefined,
  // `+` with an undefined operand gives the other one (firefunction's `... + functions`), and
  // none or undefined iterates as an empty sequence (`for`, `none | selectattr(...)`, functionary).
  bool lenient = false;
  uint64_t max_steps = 10'000'000;
  int max_call_depth = 100;
  size_t max_output_bytes = size_t(16) << 20;
  size_t max_total_bytes = size_t(256) << 20;
};

class Template {
 public:
  // Parses once; the Template can then be rendered any number of times, from any thread.
  // Syntax errors name the line and column.
  static Expected<Template> parse(std::string_view source);

  // Renders with the variables of `context` (a JSON object). Object key order is kept; a key that
  // is absent is undefined while JSON null is none, as templates test the two differently.
  Expected<std::string> render(const nlohmann::ordered_json& context, const RenderOptions& opts = {}) const;
  // Convenience for callers holding a nlohmann::json (its objects are sorted by key).
  Expected<std::string> render(const nlohmann::json& context, const RenderOptions& opts = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace loom::jinja
