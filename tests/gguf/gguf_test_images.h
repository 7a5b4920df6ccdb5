// GGUF images for the gguf tests: a byte-level builder for malformed files (which GgufWriter
// refuses to produce) and a small but complete image made with the writer.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

namespace loom::gguf::testing {

// Appends little-endian fields; the tests place every byte themselves.
class RawGguf {
 public:
  RawGguf& u8(uint8_t x) { return put(&x, 1); }
  RawGguf& u32(uint32_t x) { return put(&x, 4); }
  RawGguf& u64(uint64_t x) { return put(&x, 8); }
  RawGguf& str(const std::string& s) {
    u64(s.size());
    return put(s.data(), s.size());
  }
  RawGguf& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
  }
  // A key with its value type; the value follows with the other calls.
  RawGguf& key(const std::string& k, ValueType t) { return str(k).u32(static_cast<uint32_t>(t)); }
  RawGguf& tensor_info(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  RawGguf& pad_to(uint64_t align) {
    while (bytes.size() % align) bytes.push_back(0);
    return *this;
  }
  RawGguf& zeros(size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }

  std::vector<uint8_t> bytes;

 private:
  RawGguf& put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return *this;
  }
};

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

inline std::vector<uint8_t> pattern_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 37);
  return out;
}

// Metadata of every value type (scalars, arrays of each, empty and nested arrays, empty strings)
// and four tensors of three types. The last tensor's size is a multiple of the alignment, so the
// image ends exactly at its last data byte and every shorter prefix is invalid.
inline GgufWriter make_small_writer(uint32_t version = 3) {
  GgufWriter w;
  EXPECT_TRUE(w.set_version(version).is_ok());
  auto ok = [](const Status& s) { EXPECT_TRUE(s.is_ok()) << s.message(); };
  ok(w.set_string("general.architecture", "llama"));
  ok(w.set("t.u8", Value(uint8_t{200})));
  ok(w.set("t.i8", Value(int8_t{-100})));
  ok(w.set("t.u16", Value(uint16_t{60000})));
  ok(w.set("t.i16", Value(int16_t{-30000})));
  ok(w.set_u32("t.u32", 4000000000u));
  ok(w.set_i32("t.i32", -2000000000));
  ok(w.set_f32("t.f32", 1.5f));
  ok(w.set_bool("t.bool", true));
  ok(w.set_string("t.string", "hello \"gguf\"\n"));
  ok(w.set_string("t.empty_string", ""));
  ok(w.set_u64("t.u64", 18000000000000000000ull));
  ok(w.set("t.i64", Value(int64_t{-9000000000000000000ll})));
  ok(w.set("t.f64", Value(-2.25)));
  ok(w.set("t.arr_u8", Value(make_array(std::vector<uint8_t>{1, 2, 255}))));
  ok(w.set("t.arr_i8", Value(make_array(std::vector<int8_t>{-1, 0, 127}))));
  ok(w.set("t.arr_u16", Value(make_array(std::vector<uint16_t>{7, 65535}))));
  ok(w.set("t.arr_i16", Value(make_array(std::vector<int16_t>{-7, 32767}))));
  ok(w.set("t.arr_u32", Value(make_array(std::vector<uint32_t>{1, 4294967295u}))));
  ok(w.set_i32_array("t.arr_i32", {-3, 0, 3}));
  ok(w.set_f32_array("t.arr_f32", {0.5f, -1.25f}));
  ok(w.set("t.arr_bool", Value(make_array(std::vector<bool>{true, false, true}))));
  ok(w.set_string_array("t.arr_string", {"a", "", "long string"}));
  ok(w.set("t.arr_u64", Value(make_array(std::vector<uint64_t>{0, ~0ull}))));
  ok(w.set("t.arr_i64", Value(make_array(std::vector<int64_t>{-5, 5}))));
  ok(w.set("t.arr_f64", Value(make_array(std::vector<double>{3.0, -0.125}))));
  ok(w.set_f32_array("t.arr_empty", {}));
  ok(w.set_string_array("t.arr_empty_strings", {}));
  const Array inner_a = make_array(std::vector<int32_t>{1, 2});
  const Array inner_b = make_array(std::vector<int32_t>{});
  ok(w.set("t.arr_nested", Value(make_array(std::vector<Array>{
                               make_array(std::vector<Array>{inner_a, inner_b}),
                               make_array(std::vector<Array>{}),
                               make_array(std::vector<Array>{make_array(std::vector<std::string>{"x", ""})}),
                           }))));
  ok(w.add_tensor("a.f32", TensorType::F32, {8, 2}, pattern_bytes(8 * 2 * 4, 1)));
  ok(w.add_tensor("b.q4_0", TensorType::Q4_0, {32, 2}, pattern_bytes(2 * 18, 2)));
  ok(w.add_tensor("c.f16", TensorType::F16, {4}, pattern_bytes(8, 3)));
  ok(w.add_tensor("d.last", TensorType::F32, {2, 2, 1, 2}, pattern_bytes(32, 4)));
  return w;
}

inline std::vector<uint8_t> make_small_image(uint32_t version = 3) { return make_small_writer(version).to_bytes(); }

}  // namespace loom::gguf::testing
