// GGUF reader: memory-mapped, zero-copy access to tensor data; parsed metadata; strict validation.
//
// File layout (little-endian): magic "GGUF", u32 version (2 or 3), u64 n_tensors, u64 n_kv,
// n_kv × (string key, u32 value type, value), n_tensors × (string name, u32 n_dims, u64 ne[n_dims],
// u32 type, u64 offset), padding to `general.alignment` (default 32), tensor data.
// Strings are u64 length + bytes (no terminator). Arrays are u32 element type + u64 count + items.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "gguf/tensor_type.h"

namespace loom::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;
inline constexpr int kMaxArrayNesting = 8;  // deeper nesting is refused (no real file needs it)

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view value_type_name(ValueType t);
// Bytes of one scalar of type t in the file; 0 for string and array.
size_t value_type_size(ValueType t);

// A metadata array. Scalar elements are kept packed as in the file (little-endian) so that a
// large array costs no more memory than its bytes; strings and nested arrays are materialized.
struct Array {
  ValueType elem_type = ValueType::kUint8;
  uint64_t count = 0;
  std::vector<uint8_t> raw;          // scalar elements, count × value_type_size(elem_type)
  std::vector<std::string> strings;  // when elem_type == kString
  std::vector<Array> arrays;         // when elem_type == kArray

  bool is_numeric() const;
  // Element i of a numeric (or bool) array, converted. Precondition: i < count, is_numeric().
  double number_at(uint64_t i) const;
  int64_t int_at(uint64_t i) const;
};

// Alternative index == ValueType id, so `value.index()` is the type.
using Value = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, Array, uint64_t,
                           int64_t, double>;
inline ValueType type_of(const Value& v) { return static_cast<ValueType>(v.index()); }
// Human-readable rendering (arrays longer than max_items are elided with "...").
std::string to_string(const Value& v, size_t max_items = 8);

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::F32;
  int n_dims = 0;
  std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;                           // relative to the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; valid while the GgufFile (or a copy) lives

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
 public:
  // Maps and validates a file. Errors name the problem and the byte offset.
  static Expected<GgufFile> open(const std::string& path);
  // Parses an in-memory image (copied into an owned buffer). Used by tests and fuzzing.
  static Expected<GgufFile> from_bytes(std::span<const uint8_t> bytes);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

  const std::vector<KeyValue>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed accessors. Integers convert between widths when the value fits; floats accept any
  // numeric. A missing key is kNotFound; a value of the wrong type or range is kCorrupt.
  Expected<int64_t> get_int(std::string_view key) const;
  Expected<uint64_t> get_uint(std::string_view key) const;
  Expected<double> get_float(std::string_view key) const;
  Expected<bool> get_bool(std::string_view key) const;
  Expected<std::string> get_string(std::string_view key) const;
  Expected<const Array*> get_array(std::string_view key) const;
  // Missing key -> fallback; present but wrong type -> error.
  Expected<int64_t> get_int_or(std::string_view key, int64_t fallback) const;
  Expected<double> get_float_or(std::string_view key, double fallback) const;
  Expected<bool> get_bool_or(std::string_view key, bool fallback) const;
  Expected<std::string> get_string_or(std::string_view key, std::string fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

  // Drops the whole pages inside [p, p + n) of a mapped file from this process's resident set
  // (madvise DONTNEED on a read-only shared mapping: the bytes are unchanged and read back from
  // the page cache on the next access). For data that has been copied elsewhere (packed weights).
  // A no-op for in-memory images and ranges outside the file.
  void release_pages(const void* p, size_t n) const;

 private:
  struct Storage;  // mmap or owned buffer; shared so copies of GgufFile stay cheap and valid
  static Expected<GgufFile> parse(std::shared_ptr<Storage> storage, std::string path);

  std::shared_ptr<Storage> storage_;
  std::string path_;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kv_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace loom::gguf
