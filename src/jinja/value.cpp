#include "jinja/value.h"
#include "vocab/unicode.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace loom::jinja {

namespace {
constexpr int kMaxNesting = 256;  // containers may be cyclic (list.append(itself)): stop printing
}

// ---- construction ----

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.i_ = i;
  return v;
}
Value Value::number(double d) {
  Value v;
  v.type_ = Type::kFloat;
  v.f_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::list(std::vector<Value> items) {
  Value v;
  v.type_ = Type::kList;
  v.list_ = std::make_shared<ListData>();
  v.list_->items = std::move(items);
  if (ValueArena* a = ValueArena::current()) a->track(v.list_);
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.list_->is_tuple = true;
  return v;
}
Value Value::dict() {
  Value v;
  v.type_ = Type::kDict;
  v.dict_ = std::make_shared<DictData>();
  if (ValueArena* a = ValueArena::current()) a->track(v.dict_);
  return v;
}

// ---- ValueArena ----

namespace {
thread_local ValueArena* t_arena = nullptr;
}

ValueArena::ValueArena() : prev_(t_arena) { t_arena = this; }

ValueArena::~ValueArena() {
  t_arena = prev_;
  // Hold every survivor first, so that emptying one never destroys another mid-way; then empty
  // them all (the cycles' edges) and let the references go.
  std::vector<std::shared_ptr<Value::ListData>> lists;
  std::vector<std::shared_ptr<Value::DictData>> dicts;
  for (auto& w : lists_)
    if (auto p = w.lock()) lists.push_back(std::move(p));
  for (auto& w : dicts_)
    if (auto p = w.lock()) dicts.push_back(std::move(p));
  lists_.clear();
  dicts_.clear();
  std::vector<Value> graveyard;  // destroyed after every container is empty
  for (auto& l : lists) {
    for (Value& v : l->items) graveyard.push_back(std::move(v));
    l->items.clear();
  }
  for (auto& d : dicts) d->take_all(&graveyard);
}

ValueArena* ValueArena::current() { return t_arena; }

void ValueArena::track(const std::shared_ptr<Value::ListData>& l) {
  lists_.push_back(l);
  if (lists_.size() + dicts_.size() >= compact_at_) compact();
}

void ValueArena::track(const std::shared_ptr<Value::DictData>& d) {
  dicts_.push_back(d);
  if (lists_.size() + dicts_.size() >= compact_at_) compact();
}

void ValueArena::compact() {
  auto drop = [](auto& v) { std::erase_if(v, [](const auto& w) { return w.expired(); }); };
  drop(lists_);
  drop(dicts_);
  compact_at_ = std::max<size_t>(4096, 2 * (lists_.size() + dicts_.size()));
}
Value Value::function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  Value v;
  v.type_ = Type::kFunction;
  v.fn_ = std::make_shared<const Function>(Function{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
  using J = nlohmann::ordered_json;
  if (depth > kMaxNesting) throw TemplateError{"context nested more than " + std::to_string(kMaxNesting) + " levels deep"};
  switch (j.type()) {
    case J::value_t::null: return none();
    case J::value_t::boolean: return boolean(j.get<bool>());
    case J::value_t::number_integer: return integer(j.get<int64_t>());
    case J::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? integer(int64_t(u)) : number(double(u));
    }
    case J::value_t::number_float: return number(j.get<double>());
    case J::value_t::string: return string(j.get<std::string>());
    case J::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return list(std::move(items));
    }
    case J::value_t::object: {
      Value d = dict();
      for (const auto& [k, e] : j.items()) d.dict_->items.emplace_back(string(k), from_json(e, depth + 1));
      return d;
    }
    default: return none();  // binary / discarded: not produced by the JSON parser
  }
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  return (type_ == Type::kUndefined && s_) ? *s_ : kEmpty;
}

bool Value::truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone: return false;
    case Type::kBool: return b_;
    case Type::kInt: return i_ != 0;
    case Type::kFloat: return f_ != 0;
    case Type::kString: return !s_->empty();
    case Type::kList: return !list_->items.empty();
    case Type::kDict: return dict_->is_namespace || !dict_->items.empty();
    case Type::kFunction: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (type_) {
    case Type::kUndefined: return "Undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "str";
    case Type::kList: return list_->is_tuple ? "tuple" : "list";
    case Type::kDict: return dict_->is_namespace ? "Namespace" : "dict";
    case Type::kFunction: return "function";
  }
  return "object";
}

const void* Value::identity() const {
  switch (type_) {
    case Type::kList: return list_.get();
    case Type::kDict: return dict_.get();
    case Type::kFunction: return fn_.get();
    case Type::kString: return s_.get();
    default: return nullptr;
  }
}

const Value* Value::DictData::find(const Value& key) const {
  constexpr size_t kIndexFrom = 16;
  if (key.is_string() && items.size() > kIndexFrom) {
    if (indexed_ > items.size()) {  // items was replaced wholesale: start over
      index_.clear();
      indexed_ = 0;
    }
    for (; indexed_ < items.size(); ++indexed_)
      if (items[indexed_].first.is_string()) index_.emplace(items[indexed_].first.str(), indexed_);
    auto it = index_.find(key.str());
    return it == index_.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& kv : items)
    if (values_equal(kv.first, key)) return &kv.second;
  return nullptr;
}
void Value::DictData::take_all(std::vector<Value>* out) {
  index_.clear();
  indexed_ = 0;
  for (auto& [k, v] : items) out->push_back(std::move(k)), out->push_back(std::move(v));
  items.clear();
}

void Value::DictData::set(Value key, Value value) {
  if (Value* v = find(key)) {
    *v = std::move(value);
    return;
  }
  items.emplace_back(std::move(key), std::move(value));
}

bool values_equal(const Value& a, const Value& b, int depth) {
  using T = Value::Type;
  if (depth > kMaxNesting) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::kUndefined:
    case T::kNone: return true;
    case T::kString: return a.str() == b.str();
    case T::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case T::kDict: {
      const auto& x = a.dict_data().items;
      const auto& y = b.dict_data();
      if (x.size() != y.items.size()) return false;
      for (const auto& kv : x) {
        const Value* o = y.find(kv.first);
        if (!o || !values_equal(kv.second, *o, depth + 1)) return false;
      }
      return true;
    }
    case T::kFunction: return a.identity() == b.identity();
    default: return false;
  }
}

// ---- UTF-8 ----

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(std::string& out, uint32_t cp) { vocab::unicode::append_utf8(out, cp); }

std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  end = std::min(end, cps.size());
  for (size_t i = begin; i < end; ++i) utf8_append(out, cps[i]);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// ---- printing ----

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  const size_t epos = sci.find('e');
  const int exp10 = std::atoi(sci.c_str() + epos + 1);
  std::string mant = sci.substr(0, epos);
  const bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp10 < -4 || exp10 >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + e;
  }
  if (exp10 < 0) {
    out += "0.";
    out.append(size_t(-exp10 - 1), '0');
    out += digits;
  } else if (size_t(exp10) + 1 >= digits.size()) {
    out += digits;
    out.append(size_t(exp10) + 1 - digits.size(), '0');
    out += ".0";
  } else {
    out.append(digits, 0, size_t(exp10) + 1);
    out += '.';
    out.append(digits, size_t(exp10) + 1, std::string::npos);
  }
  return out;
}

namespace {

void repr_string(std::string& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  out += q;
  for (uint32_t cp : utf8_decode(s)) {
    if (cp == uint32_t(q) || cp == '\\') {
      out += '\\';
      out += char(cp);
    } else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0) || cp == 0xAD) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", cp);
      out += b;
    } else if (cp == 0x2028 || cp == 0x2029) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", cp);
      out += b;
    } else {
      utf8_append(out, cp);
    }
  }
  out += q;
}

void print_value(std::string& out, const Value& v, bool repr, int depth) {
  using T = Value::Type;
  if (depth > kMaxNesting) {
    out += "...";
    return;
  }
  switch (v.type()) {
    case T::kUndefined:
      if (repr) out += "Undefined";
      return;
    case T::kNone: out += "None"; return;
    case T::kBool: out += v.as_bool() ? "True" : "False"; return;
    case T::kInt: out += std::to_string(v.as_int()); return;
    case T::kFloat: out += format_float(v.as_double()); return;
    case T::kString:
      if (repr) repr_string(out, v.str());
      else out += v.str();
      return;
    case T::kList: {
      const bool tup = v.is_tuple();
      out += tup ? '(' : '[';
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        print_value(out, items[i], true, depth + 1);
      }
      if (tup && items.size() == 1) out += ',';
      out += tup ? ')' : ']';
      return;
    }
    case T::kDict: {
      const auto& d = v.dict_data();
      out += d.is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, e] : d.items) {
        if (!first) out += ", ";
        first = false;
        print_value(out, k, true, depth + 1);
        out += ": ";
        print_value(out, e, true, depth + 1);
      }
      out += d.is_namespace ? "}>" : "}";
      return;
    }
    case T::kFunction: out += "<function " + v.func().name + ">"; return;
  }
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (uint32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char b[16];
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
          if (cp >= 0x10000) {
            const uint32_t c = cp - 0x10000;
            std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF));
          } else {
            std::snprintf(b, sizeof b, "\\u%04x", cp);
          }
          out += b;
        } else {
          utf8_append(out, cp);
        }
      }
    }
  }
  out += '"';
}

Status json_value(std::string& out, const Value& v, const JsonOptions& o, int level) {
  using T = Value::Type;
  if (level > kMaxNesting) return invalid_argument("tojson: structure nested too deeply (or circular)");
  const bool pretty = o.indent >= 0 || !o.indent_str.empty();
  const std::string unit = !o.indent_str.empty() ? o.indent_str : std::string(size_t(std::max(o.indent, 0)), ' ');
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += unit;
  };
  switch (v.type()) {
    case T::kUndefined: return invalid_argument("Object of type Undefined is not JSON serializable");
    case T::kFunction: return invalid_argument("Object of type function is not JSON serializable");
    case T::kNone: out += "null"; return Status::ok();
    case T::kBool: out += v.as_bool() ? "true" : "false"; return Status::ok();
    case T::kInt: out += std::to_string(v.as_int()); return Status::ok();
    case T::kFloat: {
      const double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += format_float(d);
      return Status::ok();
    }
    case T::kString: json_string(out, v.str(), o.ensure_ascii); return Status::ok();
    case T::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return Status::ok();
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        if (pretty) newline(level + 1);
        LOOM_RETURN_IF_ERROR(json_value(out, items[i], o, level + 1));
      }
      if (pretty) newline(level);
      out += ']';
      return Status::ok();
    }
    case T::kDict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& kv : v.dict_data().items) entries.push_back(&kv);
      std::vector<std::string> keys;
      for (const auto* kv : entries) {
        const Value& k = kv->first;
        if (k.is_string()) keys.push_back(k.str());
        else if (k.is_bool()) keys.push_back(k.as_bool() ? "true" : "false");
        else if (k.is_none()) keys.push_back("null");
        else if (k.is_int()) keys.push_back(std::to_string(k.as_int()));
        else if (k.is_float()) keys.push_back(format_float(k.as_double()));
        else return invalid_argument("keys must be str, int, float, bool or None, not " + k.type_name());
      }
      std::vector<size_t> order(entries.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (o.sort_keys) std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
      if (entries.empty()) {
        out += "{}";
        return Status::ok();
      }
      out += '{';
      for (size_t i = 0; i < order.size(); ++i) {
        if (i) out += o.item_sep;
        if (pretty) newline(level + 1);
        json_string(out, keys[order[i]], o.ensure_ascii);
        out += o.key_sep;
        LOOM_RETURN_IF_ERROR(json_value(out, entries[order[i]]->second, o, level + 1));
      }
      if (pretty) newline(level);
      out += '}';
      return Status::ok();
    }
  }
  return Status::ok();
}

}  // namespace

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  print_value(out, v, false, 0);
  return out;
}

std::string to_repr(const Value& v) {
  std::string out;
  print_value(out, v, true, 0);
  return out;
}

Expected<std::string> to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  LOOM_RETURN_IF_ERROR(json_value(out, v, opts, 0));
  return out;
}

}  // namespace loom::jinja
