// Values of the template language: Python-like semantics as Jinja2 (the authority for HF chat
// templates) gives them. Lists, dicts and functions are shared by reference, as in Python, so a
// namespace or a list mutated through one name is seen through every other.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace loom::jinja {

class Value;
class Interpreter;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Builtin or macro. `fn` receives the interpreter so that it can render, call back into filters
// and count steps against the limits; it reports errors by throwing TemplateError.
struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> fn;
};

// Errors inside the parser and interpreter are thrown as TemplateError and turned into a Status
// at the API boundary (Template::parse / Template::render); nothing else escapes.
struct TemplateError {
  std::string message;
  bool raised = false;  // from raise_exception(): the template's own message, shown verbatim
};

class Value {
 public:
  enum class Type : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  struct ListData {
    std::vector<Value> items;
    bool is_tuple = false;  // prints as (a, b); otherwise behaves as a list
  };
  struct DictData {
    // Insertion order, as Python dicts. Append-only: entries are added (set, or push_back of a
    // new key) but never removed or reordered, which the string-key index below relies on.
    std::vector<std::pair<Value, Value>> items;
    bool is_namespace = false;  // namespace(): attributes may be assigned
    const Value* find(const Value& key) const;
    Value* find(const Value& key) { return const_cast<Value*>(std::as_const(*this).find(key)); }
    void set(Value key, Value value);
    // Moves every key and value out to `out` (ValueArena breaking cycles).
    void take_all(std::vector<Value>* out);

   private:
    // Large dicts (tool schemas, contexts) index their string keys so that building one is not
    // quadratic. Views point into the keys' shared, immutable strings.
    mutable std::unordered_map<std::string_view, size_t> index_;
    mutable size_t indexed_ = 0;
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict();
  static Value function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);
  // Throws TemplateError when nested more than 256 levels deep.
  static Value from_json(const nlohmann::ordered_json& j, int depth = 0);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_tuple() const { return type_ == Type::kList && list_->is_tuple; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_function() const { return type_ == Type::kFunction; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return type_ == Type::kBool ? int64_t(b_) : i_; }
  double as_double() const { return type_ == Type::kFloat ? f_ : double(as_int()); }
  const std::string& str() const { return *s_; }
  // Why a value is undefined ("'x' is undefined", "'dict object' has no attribute 'y'"), for the
  // error raised when it is used; "" when unknown.
  const std::string& undefined_hint() const;
  std::vector<Value>& items() const { return list_->items; }
  DictData& dict_data() const { return *dict_; }
  const Function& func() const { return *fn_; }

  // Python truthiness (undefined is false).
  bool truthy() const;
  // Python type name for error messages: 'str', 'NoneType', 'dict', ...
  std::string type_name() const;
  // Identity for `is sameas` and cycle checks.
  const void* identity() const;

 private:
  Type type_ = Type::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<const Function> fn_;
};

// Containers are shared by reference, so a template can build a cycle (`{% do l.append(l) %}`, a
// namespace holding itself) that reference counting never frees. A ValueArena alive on this thread
// (Template::render holds one for each render) records every list and dict created meanwhile and
// empties the ones still alive when it ends, which breaks every cycle. Renders nest (the innermost
// arena records); values made with no arena alive (parsing) are not recorded.
class ValueArena {
 public:
  ValueArena();
  ~ValueArena();
  ValueArena(const ValueArena&) = delete;
  ValueArena& operator=(const ValueArena&) = delete;

  // The arena recording on this thread, or null.
  static ValueArena* current();
  void track(const std::shared_ptr<Value::ListData>& l);
  void track(const std::shared_ptr<Value::DictData>& d);

 private:
  void compact();
  std::vector<std::weak_ptr<Value::ListData>> lists_;
  std::vector<std::weak_ptr<Value::DictData>> dicts_;
  size_t compact_at_ = 4096;  // records before expired ones are dropped (their memory is freed then)
  ValueArena* prev_ = nullptr;
};

// Python ==: numbers compare by value (True == 1), containers element-wise, other types unequal.
bool values_equal(const Value& a, const Value& b, int depth = 0);

// str(v) as Python prints it ("" for undefined, "None", "True", repr of containers).
std::string to_str(const Value& v);
// repr(v): strings quoted the way Python quotes them.
std::string to_repr(const Value& v);
// Python's repr of a float: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string format_float(double d);

struct JsonOptions {
  int indent = -1;              // < 0: single line
  std::string indent_str;       // used when non-empty (indent given as a string)
  std::string item_sep = ", ";  // Python's defaults: ", " without indent, "," with it
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // HF passes ensure_ascii=False
};
// json.dumps(v, ...) as Python writes it (key order kept unless sort_keys).
Expected<std::string> to_json(const Value& v, const JsonOptions& opts);

// UTF-8 helpers: code point counts and offsets, as Python indexes str by code point.
std::vector<uint32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin = 0, size_t end = SIZE_MAX);
void utf8_append(std::string& out, uint32_t cp);
size_t utf8_length(std::string_view s);
bool is_py_space(uint32_t cp);

}  // namespace loom::jinja
