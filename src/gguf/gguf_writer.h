// GGUF writer: builds a GGUF v3 (or v2) image from metadata and tensors, in memory or to a file.
//
// Everything is validated when it is added (unique keys and names, consistent arrays, tensor byte
// size matching the type's block geometry, a valid general.alignment), so serializing cannot fail
// except for I/O. Output is laid out the way llama.cpp writes files: tensor data in insertion
// order, each tensor padded to the alignment (the last one too), so the files load there as well.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"

namespace loom::gguf {

// Builds an Array from a vector of scalars (any of the GGUF scalar types, bool included), of
// strings, or of Arrays (a nested array).
template <typename T>
Array make_array(const std::vector<T>& items);

class GgufWriter {
 public:
  GgufWriter() = default;

  // Copies the metadata (including general.alignment) and the tensors of an open file, keeping the
  // file's version. Tensor bytes are not copied: the writer holds a reference to `file`'s storage.
  static Expected<GgufWriter> from_file(const GgufFile& file);

  // 3 by default. Versions 2 and 3 share the little-endian layout; only the header field differs.
  Status set_version(uint32_t version);
  uint32_t version() const { return version_; }
  // general.alignment when set, else 32.
  uint32_t alignment() const { return alignment_; }

  // ---- metadata ----
  // Adds a key; a key that is already present is an error (remove() it first to replace it).
  // general.alignment must be a u32 power of two, as llama.cpp requires.
  Status set(std::string key, Value value);
  Status set_u32(std::string key, uint32_t v) { return set(std::move(key), Value(v)); }
  Status set_i32(std::string key, int32_t v) { return set(std::move(key), Value(v)); }
  Status set_u64(std::string key, uint64_t v) { return set(std::move(key), Value(v)); }
  Status set_f32(std::string key, float v) { return set(std::move(key), Value(v)); }
  Status set_bool(std::string key, bool v) { return set(std::move(key), Value(v)); }
  Status set_string(std::string key, std::string v) { return set(std::move(key), Value(std::move(v))); }
  Status set_string_array(std::string key, const std::vector<std::string>& v) {
    return set(std::move(key), Value(make_array(v)));
  }
  Status set_f32_array(std::string key, const std::vector<float>& v) { return set(std::move(key), Value(make_array(v))); }
  Status set_i32_array(std::string key, const std::vector<int32_t>& v) { return set(std::move(key), Value(make_array(v))); }
  Status set_bool_array(std::string key, const std::vector<bool>& v) { return set(std::move(key), Value(make_array(v))); }
  // Removes a key; false when absent.
  bool remove(std::string_view key);
  const Value* find(std::string_view key) const;
  const std::vector<KeyValue>& metadata() const { return kv_; }

  // ---- tensors ----
  // `ne` has 1 to 4 positive dimensions, ne[0] the contiguous one; `bytes` must be exactly the
  // size the type's block geometry gives for that shape. The bytes are copied.
  Status add_tensor(std::string name, TensorType type, const std::vector<int64_t>& ne, std::span<const uint8_t> bytes);
  bool remove_tensor(std::string_view name);
  size_t tensor_count() const { return tensors_.size(); }

  // ---- output ----
  std::vector<uint8_t> to_bytes() const;
  // Writes to a temporary file beside `path`, then renames it over `path`, so readers never see
  // a half-written file and a failure leaves any previous file intact.
  Status write_file(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    TensorType type = TensorType::F32;
    std::vector<int64_t> ne;
    std::vector<uint8_t> owned;     // add_tensor's copy
    std::span<const uint8_t> view;  // from_file: into `sources_` (survives copies of the writer)
    // Not a member span over `owned`: that would dangle when the writer is copied.
    std::span<const uint8_t> bytes() const { return view.data() ? view : std::span<const uint8_t>(owned); }
  };

  Status check_tensor(const std::string& name, TensorType type, const std::vector<int64_t>& ne, size_t nbytes) const;
  // Streams the image to `sink`, which returns false to stop (an I/O error).
  bool serialize(const std::function<bool(const void*, size_t)>& sink) const;

  uint32_t version_ = 3;
  uint32_t alignment_ = kDefaultAlignment;
  std::vector<KeyValue> kv_;
  std::vector<Tensor> tensors_;
  std::vector<GgufFile> sources_;  // keeps from_file()'s tensor bytes alive
};

// ---- make_array ----

namespace detail {
template <typename T>
constexpr ValueType scalar_value_type() {
  if constexpr (std::is_same_v<T, uint8_t>) return ValueType::kUint8;
  else if constexpr (std::is_same_v<T, int8_t>) return ValueType::kInt8;
  else if constexpr (std::is_same_v<T, uint16_t>) return ValueType::kUint16;
  else if constexpr (std::is_same_v<T, int16_t>) return ValueType::kInt16;
  else if constexpr (std::is_same_v<T, uint32_t>) return ValueType::kUint32;
  else if constexpr (std::is_same_v<T, int32_t>) return ValueType::kInt32;
  else if constexpr (std::is_same_v<T, float>) return ValueType::kFloat32;
  else if constexpr (std::is_same_v<T, uint64_t>) return ValueType::kUint64;
  else if constexpr (std::is_same_v<T, int64_t>) return ValueType::kInt64;
  else if constexpr (std::is_same_v<T, double>) return ValueType::kFloat64;
  else static_assert(sizeof(T) == 0, "make_array: not a GGUF element type");
}
}  // namespace detail

template <typename T>
Array make_array(const std::vector<T>& items) {
  Array a;
  a.count = items.size();
  if constexpr (std::is_same_v<T, std::string>) {
    a.elem_type = ValueType::kString;
    a.strings = items;
  } else if constexpr (std::is_same_v<T, Array>) {
    a.elem_type = ValueType::kArray;
    a.arrays = items;
  } else if constexpr (std::is_same_v<T, bool>) {
    a.elem_type = ValueType::kBool;
    for (bool b : items) a.raw.push_back(b ? 1 : 0);
  } else {
    // Packed little-endian like the file; loom only targets little-endian hosts.
    a.elem_type = detail::scalar_value_type<T>();
    a.raw.resize(items.size() * sizeof(T));
    if (!items.empty()) std::memcpy(a.raw.data(), items.data(), a.raw.size());
  }
  return a;
}

}  // namespace loom::gguf
