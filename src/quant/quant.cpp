// Public entry points of src/quant: type support tables and run-time dispatch, per call, to the
// first kernel set that handles the type: x86 AVX2 intrinsics (kernels_avx2*.cpp) or AArch64
// dotprod (kernels_neon.cpp), then Highway (kernels_hwy.cpp, any architecture), then the scalar
// references (formats_ref.cpp, kquants_ref.cpp). See kernels.h.
#include "quant/quant.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/cpu.h"
#include "base/simd.h"
#include "quant/kernels.h"

namespace loom::quant {

namespace detail {

void fail(const char* fn, TensorType t, int64_t n) {
  const uint32_t id = static_cast<uint32_t>(t);
  if (block_size_of(t) == 0) {
    std::fprintf(stderr, "loom::quant::%s: unsupported tensor type %s (id %u)\n", fn,
                 std::string(tensor_type_name(t)).c_str(), id);
  } else if (n >= 0 && n % block_size_of(t) == 0) {
    std::fprintf(stderr, "loom::quant::%s: no quantizer for tensor type %s (id %u) in this build\n",
                 fn, std::string(tensor_type_name(t)).c_str(), id);
  } else {
    std::fprintf(stderr, "loom::quant::%s: n=%lld is not a multiple of the %s block size %lld\n",
                 fn, static_cast<long long>(n), std::string(tensor_type_name(t)).c_str(),
                 static_cast<long long>(block_size_of(t)));
  }
  std::abort();
}

int64_t block_size_of(TensorType t) {
  switch (t) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
      return 1;
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::Q8_1:
    case TensorType::IQ4_NL:
      return 32;
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::Q8_K:
    case TensorType::IQ4_XS:
      return 256;
    default:
      return 0;
  }
}

void run_register_tiles(const TileFn (&fns)[kTileA][kTileW], const TileFn (&row_fns)[kTileW1], int64_t len,
                        const uint8_t* w, size_t ws, int nw, const uint8_t* a, size_t as, int na, float* out,
                        size_t os) {
  for (int i0 = 0; i0 < na; i0 += kTileA) {
    const int rn = na - i0 < kTileA ? na - i0 : kTileA;
    const uint8_t* ai = a + size_t(i0) * as;
    float* oi = out + size_t(i0) * os;
    if (rn == 1) {
      for (int j0 = 0; j0 < nw; j0 += kTileW1) {
        const int rm = nw - j0 < kTileW1 ? nw - j0 : kTileW1;
        row_fns[rm - 1](len, w + size_t(j0) * ws, ws, ai, as, oi + size_t(j0), os);
      }
      continue;
    }
    for (int j0 = 0; j0 < nw; j0 += kTileW) {
      const int rm = nw - j0 < kTileW ? nw - j0 : kTileW;
      fns[rn - 1][rm - 1](len, w + size_t(j0) * ws, ws, ai, as, oi + size_t(j0), os);
    }
  }
}

}  // namespace detail

namespace {

#if defined(__x86_64__)
// Read once: cpu_features() already honours LOOM_FORCE_SCALAR.
bool use_avx2() {
  static const bool avx2 = cpu_features().has_avx2_set();
  return avx2;
}
#endif

#if defined(__aarch64__)
// ARMv8.2 dotprod kernels (implies simd: cpu_features() clears it under LOOM_FORCE_SCALAR).
bool use_neon_dot() {
  static const bool dot = cpu_features().neon_dotprod;
  return dot;
}
#endif

// The Highway kernels: false only under LOOM_FORCE_SCALAR. simd_enabled() also applies the
// environment switches to Highway's target choice before its first dispatch.
bool use_hwy() {
  static const bool hwy = simd_enabled();
  return hwy;
}

bool valid(TensorType t, int64_t n) {
  const int64_t bs = detail::block_size_of(t);
  return bs != 0 && n >= 0 && n % bs == 0;
}

}  // namespace

bool is_supported(TensorType t) { return detail::block_size_of(t) != 0; }

TensorType vec_dot_type(TensorType t) {
  switch (t) {
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q8_0:
    case TensorType::IQ4_NL:
      return TensorType::Q8_0;
    case TensorType::Q4_1:
    case TensorType::Q5_1:
    case TensorType::Q8_1:
      return TensorType::Q8_1;
    case TensorType::F16:
      return TensorType::F16;
    case TensorType::BF16:
      return TensorType::BF16;
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::Q8_K:
    case TensorType::IQ4_XS:
      return TensorType::Q8_K;
    // Types loom cannot compute with yet: the activation format llama.cpp's CPU backend pairs
    // with them, so that callers planning buffers see the eventual answer.
    case TensorType::MXFP4:
      return TensorType::Q8_0;
    case TensorType::IQ2_XXS:
    case TensorType::IQ2_XS:
    case TensorType::IQ3_XXS:
    case TensorType::IQ1_S:
    case TensorType::IQ3_S:
    case TensorType::IQ2_S:
    case TensorType::IQ1_M:
    case TensorType::TQ1_0:
    case TensorType::TQ2_0:
      return TensorType::Q8_K;
    default:
      return TensorType::F32;
  }
}

void dequantize_row(TensorType t, const void* src, float* dst, int64_t n) {
  if (valid(t, n)) {
#if defined(__x86_64__)
    if (use_avx2() && detail::avx2::dequantize_row(t, src, dst, n)) return;
#endif
    if (use_hwy() && detail::highway::dequantize_row(t, src, dst, n)) return;
  }
  ref::dequantize_row(t, src, dst, n);
}

void quantize_row(TensorType t, const float* src, void* dst, int64_t n) {
  if (valid(t, n)) {
#if defined(__x86_64__)
    if (use_avx2() && detail::avx2::quantize_row(t, src, dst, n)) return;
#endif
    if (use_hwy() && detail::highway::quantize_row(t, src, dst, n)) return;
  }
  ref::quantize_row(t, src, dst, n);
}

float vec_dot(TensorType t, int64_t n, const void* w, const void* a) {
  if (valid(t, n)) {
    float out;
#if defined(__x86_64__)
    if (use_avx2() && detail::avx2::vec_dot(t, n, w, a, &out)) return out;
#endif
#if defined(__aarch64__)
    if (use_neon_dot() && detail::neon::vec_dot(t, n, w, a, &out)) return out;
#endif
    if (use_hwy() && detail::highway::vec_dot(t, n, w, a, &out)) return out;
  }
  return ref::vec_dot(t, n, w, a);
}

void vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w,
                  const void* a, size_t a_stride, int n_rows_a, float* out, size_t out_stride) {
  if (valid(t, n)) {
#if defined(__x86_64__)
    if (use_avx2() && detail::avx2::vec_dot_tile(t, n, w, w_stride, n_rows_w, a, a_stride,
                                                 n_rows_a, out, out_stride)) {
      return;
    }
#endif
#if defined(__aarch64__)
    if (use_neon_dot() && detail::neon::vec_dot_tile(t, n, w, w_stride, n_rows_w, a, a_stride,
                                                     n_rows_a, out, out_stride)) {
      return;
    }
#endif
    if (use_hwy() && detail::highway::vec_dot_tile(t, n, w, w_stride, n_rows_w, a, a_stride,
                                                   n_rows_a, out, out_stride)) {
      return;
    }
  }
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int i = 0; i < n_rows_a; ++i) {
    for (int j = 0; j < n_rows_w; ++j) {
      out[size_t(i) * out_stride + size_t(j)] =
          vec_dot(t, n, wb + size_t(j) * w_stride, ab + size_t(i) * a_stride);
    }
  }
}

}  // namespace loom::quant
