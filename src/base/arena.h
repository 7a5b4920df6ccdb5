// A bump allocator over one block reserved up front. The context sizes it for the worst-case
// micro-batch at construction; each decode step resets it and carves its scratch buffers from
// it, so the hot path never calls malloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace loom {

class Arena {
 public:
  static constexpr size_t kAlign = 64;  // cache line; also enough for any SIMD load

  Arena() = default;
  explicit Arena(size_t capacity) { reserve(capacity); }

  // Discards everything and makes room for `capacity` bytes (only call outside the hot path).
  void reserve(size_t capacity);
  void reset() { used_ = 0; }

  // nullptr when the arena is too small: a sizing bug, callers assert on it.
  void* allocate(size_t bytes);
  template <typename T>
  T* alloc(size_t count) {
    return static_cast<T*>(allocate(count * sizeof(T)));
  }

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }

  // Bytes `count` objects of size `bytes` will take, alignment included (for sizing).
  static size_t padded(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> base_;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t high_water_ = 0;
};

}  // namespace loom
