// A tiny in-memory GGUF builder for vocab tests: metadata only, no tensors. It writes whatever it
// is told (wrong types, mismatched lengths), which is the point: the tests feed corrupt
// tokenizer metadata to Vocab::from_gguf.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace loom::vocab_test {

class GgufImage {
 public:
  GgufImage& str(const std::string& key, const std::string& v) {
    begin(key, gguf::ValueType::kString);
    put_str(v);
    return *this;
  }
  GgufImage& u32(const std::string& key, uint32_t v) {
    begin(key, gguf::ValueType::kUint32);
    put(&v, 4);
    return *this;
  }
  GgufImage& i32(const std::string& key, int32_t v) {
    begin(key, gguf::ValueType::kInt32);
    put(&v, 4);
    return *this;
  }
  GgufImage& boolean(const std::string& key, bool v) {
    begin(key, gguf::ValueType::kBool);
    const uint8_t b = v ? 1 : 0;
    put(&b, 1);
    return *this;
  }
  GgufImage& strings(const std::string& key, const std::vector<std::string>& v) {
    array_header(key, gguf::ValueType::kString, v.size());
    for (const auto& s : v) put_str(s);
    return *this;
  }
  GgufImage& f32s(const std::string& key, const std::vector<float>& v) {
    array_header(key, gguf::ValueType::kFloat32, v.size());
    for (float x : v) put(&x, 4);
    return *this;
  }
  GgufImage& i32s(const std::string& key, const std::vector<int32_t>& v) {
    array_header(key, gguf::ValueType::kInt32, v.size());
    for (int32_t x : v) put(&x, 4);
    return *this;
  }

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    auto append = [&](const void* p, size_t n) {
      const auto* b = static_cast<const uint8_t*>(p);
      out.insert(out.end(), b, b + n);
    };
    const uint32_t magic = gguf::kMagic, version = 3;
    const uint64_t n_tensors = 0;
    append(&magic, 4);
    append(&version, 4);
    append(&n_tensors, 8);
    append(&n_kv_, 8);
    out.insert(out.end(), kv_.begin(), kv_.end());
    while (out.size() % gguf::kDefaultAlignment) out.push_back(0);
    return out;
  }

  Expected<gguf::GgufFile> file() const { return gguf::GgufFile::from_bytes(bytes()); }

 private:
  void begin(const std::string& key, gguf::ValueType t) {
    ++n_kv_;
    put_str(key);
    const uint32_t type = static_cast<uint32_t>(t);
    put(&type, 4);
  }
  void array_header(const std::string& key, gguf::ValueType elem, uint64_t count) {
    begin(key, gguf::ValueType::kArray);
    const uint32_t type = static_cast<uint32_t>(elem);
    put(&type, 4);
    put(&count, 8);
  }
  void put_str(const std::string& s) {
    const uint64_t n = s.size();
    put(&n, 8);
    put(s.data(), s.size());
  }
  void put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    kv_.insert(kv_.end(), b, b + n);
  }

  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_;
};

}  // namespace loom::vocab_test
