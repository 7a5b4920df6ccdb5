// A float array left uninitialized, so that the operating system provides its pages on first
// write: a buffer sized for the worst case (a context's logits for n_outputs_max rows, 65 MB for a
// 32k vocabulary and 512 outputs) costs resident memory only for the rows actually written.
// Readers must only read what was written (the context exposes the rows of the last decode).
#pragma once

#include <cstddef>
#include <memory>

namespace loom {

class UninitFloats {
 public:
  void allocate(size_t n) {
    data_.reset(new float[n]);  // default-initialized: not touched
    size_ = n;
  }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  std::unique_ptr<float[]> data_;
  size_t size_ = 0;
};

}  // namespace loom
