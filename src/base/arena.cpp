#include "base/arena.h"

#include <cstdlib>
#include <new>

namespace loom {

void Arena::Free::operator()(uint8_t* p) const { std::free(p); }

void Arena::reserve(size_t capacity) {
  capacity = padded(capacity);
  base_.reset(capacity ? static_cast<uint8_t*>(std::aligned_alloc(kAlign, capacity)) : nullptr);
  if (capacity && !base_) throw std::bad_alloc();
  capacity_ = capacity;
  used_ = 0;
  high_water_ = 0;
}

void* Arena::allocate(size_t bytes) {
  const size_t need = padded(bytes);
  if (need > capacity_ - used_) return nullptr;
  void* p = base_.get() + used_;
  used_ += need;
  if (used_ > high_water_) high_water_ = used_;
  return p;
}

}  // namespace loom
