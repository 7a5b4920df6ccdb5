// Tree-walking evaluator of a parsed template. One Interpreter renders one template once; errors
// are thrown as TemplateError and caught by Template::render.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jinja/ast.h"
#include "jinja/template.h"
#include "jinja/value.h"

namespace loom::jinja {

class Interpreter {
 public:
  Interpreter(std::shared_ptr<const Body> program, const RenderOptions& opts);

  // Renders the program with `context` (a dict) as its variables.
  std::string render(const Value& context);

  Value eval(const Expr& e);
  Value call(const Value& fn, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
  bool apply_test(const std::string& name, const Value& v, CallArgs& args);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  // Items of an iterable (dict: its keys; string: its characters; undefined: none).
  std::vector<Value> iterate(const Value& v);

  // Accounting against the limits; each throws TemplateError when exceeded.
  void step();
  // Linear work not covered by steps (scanning a list, searching a string): `units` elements or
  // 16-byte chunks; every 64 units count as one step.
  void work(size_t units);
  void charge(size_t bytes);
  Value make_string(std::string s);

  [[noreturn]] void fail(const std::string& msg) const;
  // Raises the error an undefined value gives when it is used ("'x' is undefined").
  [[noreturn]] void fail_undefined(const Value& v) const;
  const RenderOptions& options() const { return opts_; }

 private:
  // Few names live in one scope: a flat vector beats a hash map here.
  struct Vars {
    std::vector<std::pair<std::string, Value>> items;
    Value& operator[](const std::string& k) {
      for (auto& kv : items)
        if (kv.first == k) return kv.second;
      items.emplace_back(k, Value());
      return items.back().second;
    }
    const Value* find(const std::string& k) const {
      for (const auto& kv : items)
        if (kv.first == k) return &kv.second;
      return nullptr;
    }
  };
  struct Frame {
    Vars vars;
    std::shared_ptr<Frame> parent;
  };
  enum class Control { kNone, kBreak, kContinue };

  void exec(const Body& body, std::string& out);
  void exec_node(const Node& n, std::string& out);
  void exec_for(const Node& n, std::string& out);
  void assign(const Expr& target, const Value& v);
  void bind(Frame& f, const Expr& target, const Value& v);
  void append(std::string& out, const std::string& s);
  Value lookup(const std::string& name) const;
  Value eval_binary(const Expr& e);
  Value eval_filter_chain(const Expr& e, const Value& subject);
  Value make_macro(const Node& n);
  Value call_macro(const Node& n, CallArgs& args);
  Value make_caller(const Node& n);
  void install_globals(Frame& f);

  std::shared_ptr<const Body> program_;
  RenderOptions opts_;
  std::shared_ptr<Frame> globals_;
  std::shared_ptr<Frame> top_;  // template-level variables (context + top-level set)
  std::shared_ptr<Frame> cur_;
  Control ctrl_ = Control::kNone;
  uint64_t steps_ = 0;
  uint64_t work_ = 0;
  size_t total_bytes_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  int line_ = 0;

 public:
  int current_line() const { return line_; }
};

// Builtin filters and tests (builtin_filters.cpp, builtin_tests.cpp: tables by name). Both throw
// TemplateError for unknown names.
Value builtin_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
bool builtin_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
// Whether a filter of that name exists (the `filter` test).
bool has_filter(const std::string& name);
// Method `name` of a str / dict / list value, or undefined when it has none (builtin_methods.cpp).
Value builtin_method(Interpreter& in, const Value& obj, const std::string& name);
// Python binary operators shared by the evaluator and filters (sum, ...) (operators.cpp).
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
// Python ordering (<) for sort/min/max/comparisons; throws TypeError-like errors.
int compare_values(Interpreter& in, const Value& a, const Value& b);
// Work units of scanning `v` once (see Interpreter::work).
size_t scan_cost(const Value& v);
// Python's `in`.
bool contains(Interpreter& in, const Value& container, const Value& item);
// strftime with the time RenderOptions gives.
std::string strftime_now(const RenderOptions& opts, const std::string& fmt);

}  // namespace loom::jinja
