// Helpers shared by the src/quant tests: type lists, random rows, byte-level block access and
// misaligned buffers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "gguf/tensor_type.h"
#include "quant/quant.h"

namespace loom::quant::test {

inline const std::vector<TensorType>& all_types() {
  static const std::vector<TensorType> types = {
      TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0, TensorType::Q8_1,
      TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1};
  return types;
}

inline std::string type_name(TensorType t) { return std::string(tensor_type_name(t)); }
inline int64_t block_size(TensorType t) { return tensor_type_info(t)->block_size; }
inline int64_t block_bytes(TensorType t) { return tensor_type_info(t)->block_bytes; }
inline bool has_min(TensorType t) { return t == TensorType::Q4_1 || t == TensorType::Q5_1; }

// Gaussian values with a per-block scale drawn over several orders of magnitude, a constant
// block and an all-zero block now and then: the shapes real weights and activations take.
inline std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-4.0f, 2.0f);
  std::uniform_int_distribution<int> kind(0, 15);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; b += 32) {
    const float scale = std::pow(10.0f, uni(rng));
    const int k = kind(rng);
    const float offset = k == 1 ? scale * 3.0f : 0.0f;  // one-sided block (exercises the min)
    for (int64_t i = b; i < std::min(n, b + 32); ++i) {
      if (k == 0) v[size_t(i)] = 0.0f;
      else if (k == 2) v[size_t(i)] = scale;
      else v[size_t(i)] = normal(rng) * scale + offset;
    }
  }
  return v;
}

inline uint16_t get_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float get_f16(const uint8_t* p) { return f16_to_f32(get_u16(p)); }

// Quantized row of random data in type t (through the reference quantizer).
inline std::vector<uint8_t> random_row(TensorType t, int64_t n, std::mt19937& rng) {
  std::vector<float> x = random_floats(n, rng);
  std::vector<uint8_t> q(size_t(row_bytes(t, n)) + 1);
  ref::quantize_row(t, x.data(), q.data(), n);
  q.resize(size_t(row_bytes(t, n)));
  return q;
}

// A buffer whose data() is `misalign` bytes past a 64-byte boundary.
class Misaligned {
 public:
  Misaligned(size_t bytes, size_t misalign) : storage_(bytes + 128), off_(misalign) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    off_ += (64 - base % 64) % 64;
  }
  uint8_t* data() { return storage_.data() + off_; }
  float* f32() { return reinterpret_cast<float*>(data()); }

 private:
  std::vector<uint8_t> storage_;
  size_t off_;
};

// Sum over i of |w_i a_i| (from dequantized rows), plus |m_w s_a| per block for the formats with a
// minimum: the scale against which float rounding of a dot product is judged.
inline double dot_magnitude(TensorType t, int64_t n, const uint8_t* w, const uint8_t* a) {
  std::vector<float> wf(size_t(n) + 1), af(size_t(n) + 1);
  dequantize_row(t, w, wf.data(), n);
  ref::dequantize_row(vec_dot_type(t), a, af.data(), n);
  double mag = 0.0;
  for (int64_t i = 0; i < n; ++i) mag += std::fabs(double(wf[size_t(i)]) * af[size_t(i)]);
  if (has_min(t)) {
    for (int64_t b = 0; b < n / 32; ++b) {
      mag += std::fabs(double(get_f16(w + b * block_bytes(t) + 2)) * get_f16(a + b * 36 + 2));
    }
  }
  return mag;
}

}  // namespace loom::quant::test
