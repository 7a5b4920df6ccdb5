// Metadata values: names, sizes, rendering and the typed accessors of GgufFile.
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "gguf/gguf.h"

namespace loom::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "u8";
    case ValueType::kInt8: return "i8";
    case ValueType::kUint16: return "u16";
    case ValueType::kInt16: return "i16";
    case ValueType::kUint32: return "u32";
    case ValueType::kInt32: return "i32";
    case ValueType::kFloat32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "u64";
    case ValueType::kInt64: return "i64";
    case ValueType::kFloat64: return "f64";
  }
  return "?";
}

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool: return 1;
    case ValueType::kUint16:
    case ValueType::kInt16: return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32: return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64: return 8;
    case ValueType::kString:
    case ValueType::kArray: return 0;
  }
  return 0;
}

bool Array::is_numeric() const { return value_type_size(elem_type) != 0; }

namespace {
template <typename T>
T load(const std::vector<uint8_t>& raw, uint64_t i) {
  T x;
  std::memcpy(&x, raw.data() + i * sizeof(T), sizeof(T));
  return x;
}
}  // namespace

double Array::number_at(uint64_t i) const {
  switch (elem_type) {
    case ValueType::kUint8: return load<uint8_t>(raw, i);
    case ValueType::kInt8: return load<int8_t>(raw, i);
    case ValueType::kBool: return load<uint8_t>(raw, i);
    case ValueType::kUint16: return load<uint16_t>(raw, i);
    case ValueType::kInt16: return load<int16_t>(raw, i);
    case ValueType::kUint32: return load<uint32_t>(raw, i);
    case ValueType::kInt32: return load<int32_t>(raw, i);
    case ValueType::kFloat32: return load<float>(raw, i);
    case ValueType::kUint64: return double(load<uint64_t>(raw, i));
    case ValueType::kInt64: return double(load<int64_t>(raw, i));
    case ValueType::kFloat64: return load<double>(raw, i);
    default: return 0;
  }
}

int64_t Array::int_at(uint64_t i) const {
  switch (elem_type) {
    case ValueType::kUint64: return int64_t(load<uint64_t>(raw, i));
    case ValueType::kInt64: return load<int64_t>(raw, i);
    case ValueType::kFloat32:
    case ValueType::kFloat64: {
      // Converting a NaN or out-of-range double to an integer is undefined behaviour: saturate.
      const double d = number_at(i);
      if (std::isnan(d)) return 0;
      if (d >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
      if (d < -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
      return int64_t(d);
    }
    default: return int64_t(number_at(i));
  }
}

namespace {

void escape_into(std::ostringstream& os, const std::string& s) {
  os << '"';
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') os << '\\' << ch;
    else if (c == '\n') os << "\\n";
    else if (c == '\t') os << "\\t";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      os << buf;
    } else os << ch;
  }
  os << '"';
}

void array_into(std::ostringstream& os, const Array& a, size_t max_items) {
  os << '[';
  const uint64_t n = std::min<uint64_t>(a.count, max_items);
  for (uint64_t i = 0; i < n; ++i) {
    if (i) os << ", ";
    if (a.elem_type == ValueType::kString) escape_into(os, a.strings[i]);
    else if (a.elem_type == ValueType::kArray) array_into(os, a.arrays[i], max_items);
    else if (a.elem_type == ValueType::kBool) os << (a.raw[i] ? "true" : "false");
    else if (a.elem_type == ValueType::kFloat32 || a.elem_type == ValueType::kFloat64) os << a.number_at(i);
    else os << a.int_at(i);
  }
  if (a.count > n) os << ", ... (" << a.count << " items)";
  os << ']';
}

}  // namespace

std::string to_string(const Value& v, size_t max_items) {
  std::ostringstream os;
  os.precision(9);
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) escape_into(os, x);
        else if constexpr (std::is_same_v<T, Array>) array_into(os, x, max_items);
        else if constexpr (std::is_same_v<T, bool>) os << (x ? "true" : "false");
        else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) os << int(x);
        else os << x;
      },
      v);
  return os.str();
}

// ---- typed accessors ----

namespace {

Status missing(std::string_view key) { return not_found("metadata key '" + std::string(key) + "' not found"); }
Status wrong_type(std::string_view key, const Value& v, const char* want) {
  return corrupt("metadata key '" + std::string(key) + "' has type " + std::string(value_type_name(type_of(v))) +
                 ", expected " + want);
}

// Integer value of any integer type, or nullopt.
std::optional<__int128> as_integer(const Value& v) {
  switch (type_of(v)) {
    case ValueType::kUint8: return std::get<uint8_t>(v);
    case ValueType::kInt8: return std::get<int8_t>(v);
    case ValueType::kUint16: return std::get<uint16_t>(v);
    case ValueType::kInt16: return std::get<int16_t>(v);
    case ValueType::kUint32: return std::get<uint32_t>(v);
    case ValueType::kInt32: return std::get<int32_t>(v);
    case ValueType::kUint64: return std::get<uint64_t>(v);
    case ValueType::kInt64: return std::get<int64_t>(v);
    default: return std::nullopt;
  }
}

}  // namespace

Expected<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  auto i = as_integer(*v);
  if (!i) return wrong_type(key, *v, "an integer");
  if (*i > std::numeric_limits<int64_t>::max()) return corrupt("metadata key '" + std::string(key) + "' is out of range");
  return static_cast<int64_t>(*i);
}

Expected<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  auto i = as_integer(*v);
  if (!i) return wrong_type(key, *v, "an unsigned integer");
  if (*i < 0) return corrupt("metadata key '" + std::string(key) + "' is negative");
  return static_cast<uint64_t>(*i);
}

Expected<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (type_of(*v) == ValueType::kFloat32) return double(std::get<float>(*v));
  if (type_of(*v) == ValueType::kFloat64) return std::get<double>(*v);
  if (auto i = as_integer(*v)) return double(*i);
  return wrong_type(key, *v, "a number");
}

Expected<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (type_of(*v) != ValueType::kBool) return wrong_type(key, *v, "bool");
  return std::get<bool>(*v);
}

Expected<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (type_of(*v) != ValueType::kString) return wrong_type(key, *v, "string");
  return std::get<std::string>(*v);
}

Expected<const Array*> GgufFile::get_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (type_of(*v) != ValueType::kArray) return wrong_type(key, *v, "array");
  return &std::get<Array>(*v);
}

Expected<int64_t> GgufFile::get_int_or(std::string_view key, int64_t fallback) const {
  return has(key) ? get_int(key) : Expected<int64_t>(fallback);
}
Expected<double> GgufFile::get_float_or(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : Expected<double>(fallback);
}
Expected<bool> GgufFile::get_bool_or(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : Expected<bool>(fallback);
}
Expected<std::string> GgufFile::get_string_or(std::string_view key, std::string fallback) const {
  return has(key) ? get_string(key) : Expected<std::string>(std::move(fallback));
}

}  // namespace loom::gguf
