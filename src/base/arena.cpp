#include "base/arena.h"

#include <cstdlib>
#include <new>

namespace loom {

void Arena::Free::operator()(uint8_t* p) const { ::operator delete(p, std::align_val_t(kAlign)); }

void Arena::reserve(size_t capacity) {
  capacity = padded(capacity);
  // Aligned operator new (throws std::bad_alloc), which allocation-failure tests can replace.
  base_.reset(capacity ? static_cast<uint8_t*>(::operator new(capacity, std::align_val_t(kAlign))) : nullptr);
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
