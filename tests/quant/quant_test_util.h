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
#include "quant/type_traits.h"

namespace loom::quant::test {

inline const std::vector<TensorType>& all_types() {
  static const std::vector<TensorType> types = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                                TensorType::Q8_0, TensorType::Q8_1, TensorType::Q4_0,
                                                TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1};
  return types;
}

// The super-block formats and IQ4_NL (all with reference quantizers; random_kq_row makes rows of
// random bytes for them as well).
inline const std::vector<TensorType>& kquant_types() {
  static const std::vector<TensorType> types = {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,   TensorType::Q5_K,
                                                TensorType::Q6_K, TensorType::Q8_K, TensorType::IQ4_NL, TensorType::IQ4_XS};
  return types;
}
// The IQ1/IQ2/IQ3 lattice formats (Q8_K activations). IQ2_XXS, IQ2_XS and IQ1_S have no
// quantize_row (they need an importance matrix): their random rows are random bytes.
inline const std::vector<TensorType>& iq_types() {
  static const std::vector<TensorType> types = {TensorType::IQ2_XXS, TensorType::IQ2_XS, TensorType::IQ2_S,
                                                TensorType::IQ3_XXS, TensorType::IQ3_S,  TensorType::IQ1_S,
                                                TensorType::IQ1_M};
  return types;
}
// The ternary, 1-/2-bit and FP4 formats (small_types.h): TQ1_0, TQ2_0 (Q8_K activations), MXFP4,
// Q1_0, Q2_0 (Q8_0 activations; blocks of 32, 128 and 64).
inline const std::vector<TensorType>& small_types() {
  static const std::vector<TensorType> types = {TensorType::TQ1_0, TensorType::TQ2_0, TensorType::MXFP4, TensorType::Q1_0,
                                                TensorType::Q2_0};
  return types;
}
// The types added with issue 27 (IQ and small), whose rows are multiples of 256 elements in the
// length sweeps of the k-quant tests.
inline std::vector<TensorType> new_types() {
  std::vector<TensorType> v = iq_types();
  v.insert(v.end(), small_types().begin(), small_types().end());
  return v;
}
inline std::vector<TensorType> every_supported_type() {
  std::vector<TensorType> v = all_types();
  v.insert(v.end(), kquant_types().begin(), kquant_types().end());
  const std::vector<TensorType> nt = new_types();
  v.insert(v.end(), nt.begin(), nt.end());
  return v;
}
// Whether quantize_row takes t (every computable type but IQ2_XXS, IQ2_XS, IQ1_S).
inline bool has_ref_quantizer(TensorType t) { return type_traits(t).ref.quantize_row != nullptr; }
inline bool is_new_type(TensorType t) {
  for (TensorType u : new_types()) {
    if (u == t) return true;
  }
  return false;
}
inline bool is_kquant(TensorType t) {
  for (TensorType u : kquant_types()) {
    if (u == t) return true;
  }
  return false;
}
// Byte offsets of the f16 scale fields in a block of a k-quant weight format (d first, then dmin
// where the format has one); Q8_K's f32 d is at 0. For the IQ and small types, their f16 d (IQ1_M
// has none: its d is the top nibbles of the scale words at 48..55; MXFP4's scale is the E8M0 byte
// at 0).
inline std::vector<int> kq_scale_offsets(TensorType t) {
  switch (t) {
    case TensorType::Q2_K: return {80, 82};
    case TensorType::Q3_K: return {108};
    case TensorType::Q4_K:
    case TensorType::Q5_K: return {0, 2};
    case TensorType::Q6_K: return {208};
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS: return {0};
    case TensorType::IQ2_XXS:
    case TensorType::IQ2_XS:
    case TensorType::IQ2_S:
    case TensorType::IQ3_XXS:
    case TensorType::IQ3_S:
    case TensorType::IQ1_S:
    case TensorType::Q1_0:
    case TensorType::Q2_0: return {0};
    case TensorType::TQ1_0: return {52};
    case TensorType::TQ2_0: return {64};
    default: return {};
  }
}

inline std::string type_name(TensorType t) { return std::string(tensor_type_name(t)); }
inline int64_t block_size(TensorType t) { return tensor_type_info(t)->block_size; }
inline int64_t block_bytes(TensorType t) { return tensor_type_info(t)->block_bytes; }
inline bool has_min(TensorType t) { return t == TensorType::Q4_1 || t == TensorType::Q5_1; }
inline bool has_kmin(TensorType t) { return t == TensorType::Q2_K || t == TensorType::Q4_K || t == TensorType::Q5_K; }

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

// Random bytes for a k-quant (or IQ / small-type) weight row: every level, scale, grid index,
// sign and high-bit pattern, with finite f16 super-block scales of random sign and magnitude
// 1e-4..1 (Q8_K: an f32 d; IQ1_M: the f16 in its scale words' top nibbles; MXFP4: E8M0 exponents
// 110..135, scales 2^-18..2^7).
inline std::vector<uint8_t> random_kq_row(TensorType t, int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> expo(-4.0f, 0.0f);
  std::vector<uint8_t> v(size_t(row_bytes(t, n)));
  for (auto& b : v) b = uint8_t(byte(rng));
  for (int64_t b = 0; b < n / block_size(t); ++b) {
    uint8_t* blk = v.data() + b * block_bytes(t);
    const float mag = std::pow(10.0f, expo(rng)) * (byte(rng) & 1 ? -1.0f : 1.0f);
    if (t == TensorType::Q8_K) {
      std::memcpy(blk, &mag, 4);
      continue;
    }
    if (t == TensorType::MXFP4) {
      blk[0] = uint8_t(110 + byte(rng) % 26);
      continue;
    }
    if (t == TensorType::IQ1_M) {
      const uint16_t h = f32_to_f16(mag);
      for (int k = 0; k < 4; ++k) {
        blk[48 + 2 * k + 1] = uint8_t((blk[48 + 2 * k + 1] & 0x0f) | ((h >> (4 * k)) & 0x0f) << 4);
      }
      continue;
    }
    for (int off : kq_scale_offsets(t)) {
      const float m = std::pow(10.0f, expo(rng)) * (byte(rng) & 1 ? -1.0f : 1.0f);
      const uint16_t h = f32_to_f16(m);
      std::memcpy(blk + off, &h, 2);
    }
  }
  return v;
}

// Quantized row of random data in type t (through the reference quantizer; random bytes for the
// types without one).
inline std::vector<uint8_t> random_row(TensorType t, int64_t n, std::mt19937& rng) {
  if (!has_ref_quantizer(t)) return random_kq_row(t, n, rng);
  std::vector<float> x = random_floats(n, rng);
  std::vector<uint8_t> q(size_t(row_bytes(t, n)) + 1);
  ref::quantize_row(t, x.data(), q.data(), n);
  q.resize(size_t(row_bytes(t, n)));
  return q;
}

// A random row of type t through the reference quantizer, for k-quants and the IQ / small types
// every other call random bytes instead (levels and scale codes the quantizer would not produce).
inline std::vector<uint8_t> any_random_row(TensorType t, int64_t n, std::mt19937& rng) {
  static int calls = 0;
  if ((is_kquant(t) || is_new_type(t)) && t != TensorType::Q8_K && (calls++ & 1)) return random_kq_row(t, n, rng);
  return random_row(t, n, rng);
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
// For the k-quants with mins, the scaled-level and min parts count separately (they can cancel).
inline double dot_magnitude(TensorType t, int64_t n, const uint8_t* w, const uint8_t* a) {
  std::vector<float> wf(size_t(n) + 1), af(size_t(n) + 1);
  ref::dequantize_row(vec_dot_type(t), a, af.data(), n);
  double mag = 0.0;
  if (has_kmin(t)) {
    // Zeroing dmin leaves d * scale * level, zeroing d leaves -dmin * min.
    const std::vector<int> offs = kq_scale_offsets(t);
    for (int part = 0; part < 2; ++part) {
      std::vector<uint8_t> wc(w, w + row_bytes(t, n));
      for (int64_t b = 0; b < n / block_size(t); ++b) {
        std::memset(wc.data() + b * block_bytes(t) + offs[size_t(1 - part)], 0, 2);
      }
      dequantize_row(t, wc.data(), wf.data(), n);
      for (int64_t i = 0; i < n; ++i) mag += std::fabs(double(wf[size_t(i)]) * af[size_t(i)]);
    }
    return mag;
  }
  dequantize_row(t, w, wf.data(), n);
  for (int64_t i = 0; i < n; ++i) mag += std::fabs(double(wf[size_t(i)]) * af[size_t(i)]);
  if (t == TensorType::TQ1_0 || t == TensorType::TQ2_0 || t == TensorType::Q2_0) {
    // Levels (q - 1) d: the kernels may sum q * a and the activations' sum (bsums) apart and
    // subtract in float, so the offset part d * a of every element counts, zero weights too.
    const int off = kq_scale_offsets(t)[0];
    for (int64_t i = 0; i < n; ++i) {
      mag += std::fabs(double(get_f16(w + i / block_size(t) * block_bytes(t) + off)) * af[size_t(i)]);
    }
  }
  if (has_min(t)) {
    for (int64_t b = 0; b < n / 32; ++b) {
      mag += std::fabs(double(get_f16(w + b * block_bytes(t) + 2)) * get_f16(a + b * 36 + 2));
    }
  }
  return mag;
}

}  // namespace loom::quant::test
