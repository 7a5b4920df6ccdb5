// Public entry points of src/quant: run-time dispatch through the type table (type_traits.h),
// per call, to the first kernel set this CPU runs that has a kernel for the type: x86 AVX2
// intrinsics (kernels_avx2*.cpp) or AArch64 dotprod (kernels_neon.cpp), then Highway
// (kernels_hwy.cpp, any architecture), then the scalar references (formats_ref.cpp,
// kquants_ref.cpp). See kernels.h.
#include "quant/quant.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "quant/kernels.h"
#include "quant/type_traits.h"

namespace loom::quant {

namespace detail {

void fail(const char* fn, TensorType t, int64_t n) {
  const uint32_t id = static_cast<uint32_t>(t);
  const TypeTraits& tt = type_traits(t);
  if (!tt.computable) {
    std::fprintf(stderr, "loom::quant::%s: unsupported tensor type %s (id %u)\n", fn,
                 std::string(tensor_type_name(t)).c_str(), id);
  } else if (n >= 0 && n % tt.block_size == 0) {
    std::fprintf(stderr, "loom::quant::%s: no quantizer for tensor type %s (id %u) in this build\n", fn,
                 std::string(tensor_type_name(t)).c_str(), id);
  } else {
    std::fprintf(stderr, "loom::quant::%s: n=%lld is not a multiple of the %s block size %lld\n", fn,
                 static_cast<long long>(n), std::string(tensor_type_name(t)).c_str(), static_cast<long long>(tt.block_size));
  }
  std::abort();
}

void run_register_tiles(const TileFn (&fns)[kTileA][kTileW], const TileFn (&row_fns)[kTileW1], int64_t len, const uint8_t* w,
                        size_t ws, int nw, const uint8_t* a, size_t as, int na, float* out, size_t os) {
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

// The set-level entry points (kernels.h): one set's kernel for t from the table, false if none.
namespace {
const RowKernels& kernels_of(TensorType t, KernelSet set) { return type_traits(t).set(set); }
bool set_dequantize(KernelSet set, TensorType t, const void* src, float* dst, int64_t n) {
  const auto fn = kernels_of(t, set).dequantize_row;
  if (fn) fn(src, dst, n);
  return fn != nullptr;
}
bool set_quantize(KernelSet set, TensorType t, const float* src, void* dst, int64_t n) {
  const auto fn = kernels_of(t, set).quantize_row;
  if (fn) fn(src, dst, n);
  return fn != nullptr;
}
bool set_vec_dot(KernelSet set, TensorType t, int64_t n, const void* w, const void* a, float* out) {
  const auto fn = kernels_of(t, set).vec_dot;
  if (fn) *out = fn(n, w, a);
  return fn != nullptr;
}
bool set_vec_dot_tile(KernelSet set, TensorType t, int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as,
                      int na, float* out, size_t os) {
  const auto fn = kernels_of(t, set).vec_dot_tile;
  if (fn) fn(n, w, ws, nw, a, as, na, out, os);
  return fn != nullptr;
}
}  // namespace

#define LOOM_SET_ENTRY_POINTS(ns, set)                                                                                      \
  namespace ns {                                                                                                            \
  bool dequantize_row(TensorType t, const void* src, float* dst, int64_t n) { return set_dequantize(set, t, src, dst, n); } \
  bool quantize_row(TensorType t, const float* src, void* dst, int64_t n) { return set_quantize(set, t, src, dst, n); }     \
  bool vec_dot(TensorType t, int64_t n, const void* w, const void* a, float* out) {                                         \
    return set_vec_dot(set, t, n, w, a, out);                                                                               \
  }                                                                                                                         \
  bool vec_dot_tile(TensorType t, int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na,            \
                    float* out, size_t os) {                                                                                \
    return set_vec_dot_tile(set, t, n, w, ws, nw, a, as, na, out, os);                                                      \
  }                                                                                                                         \
  }
LOOM_SET_ENTRY_POINTS(highway, KernelSet::kHighway)
#if defined(__x86_64__)
LOOM_SET_ENTRY_POINTS(avx2, KernelSet::kAvx2)
#endif
#if defined(__aarch64__)
LOOM_SET_ENTRY_POINTS(neon, KernelSet::kNeonDot)
#endif
#undef LOOM_SET_ENTRY_POINTS

}  // namespace detail

namespace {

bool valid(const TypeTraits& tt, int64_t n) { return tt.computable && n >= 0 && n % tt.block_size == 0; }

// Per type, the kernel each operation dispatches to: the first enabled kernel set (KernelSet
// order) that has one, else null (then the scalar reference). Resolved once, at the first
// dispatched call, from the table and kernel_set_enabled().
struct Resolved {
  std::vector<RowKernels> by_id;
  Resolved() {
    const auto all = all_type_traits();
    by_id.resize(all.size());
    for (size_t id = 0; id < all.size(); ++id) {
      RowKernels& r = by_id[id];
      for (int s = kKernelSets - 1; s >= 0; --s) {  // earlier sets overwrite later ones
        if (!kernel_set_enabled(static_cast<KernelSet>(s))) continue;
        const RowKernels& k = all[id].kernels[s];
        if (k.dequantize_row) r.dequantize_row = k.dequantize_row;
        if (k.quantize_row) r.quantize_row = k.quantize_row;
        if (k.vec_dot) r.vec_dot = k.vec_dot;
        if (k.vec_dot_tile) r.vec_dot_tile = k.vec_dot_tile;
      }
    }
  }
};

// Valid calls only (the table has an entry for every computable type).
const RowKernels& dispatched(TensorType t) {
  static const Resolved r;
  return r.by_id[static_cast<uint32_t>(t)];
}

}  // namespace

bool is_supported(TensorType t) { return type_traits(t).computable; }

TensorType vec_dot_type(TensorType t) { return type_traits(t).vec_dot_type; }

void dequantize_row(TensorType t, const void* src, float* dst, int64_t n) {
  const TypeTraits& tt = type_traits(t);
  if (valid(tt, n)) {
    if (const auto fn = dispatched(t).dequantize_row) return fn(src, dst, n);
  }
  ref::dequantize_row(t, src, dst, n);
}

void quantize_row(TensorType t, const float* src, void* dst, int64_t n) {
  const TypeTraits& tt = type_traits(t);
  if (valid(tt, n)) {
    if (const auto fn = dispatched(t).quantize_row) return fn(src, dst, n);
  }
  ref::quantize_row(t, src, dst, n);
}

float vec_dot(TensorType t, int64_t n, const void* w, const void* a) {
  const TypeTraits& tt = type_traits(t);
  if (valid(tt, n)) {
    if (const auto fn = dispatched(t).vec_dot) return fn(n, w, a);
  }
  return ref::vec_dot(t, n, w, a);
}

void vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride,
                  int n_rows_a, float* out, size_t out_stride) {
  const TypeTraits& tt = type_traits(t);
  if (valid(tt, n)) {
    if (const auto fn = dispatched(t).vec_dot_tile) {
      return fn(n, w, w_stride, n_rows_w, a, a_stride, n_rows_a, out, out_stride);
    }
  }
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int i = 0; i < n_rows_a; ++i) {
    for (int j = 0; j < n_rows_w; ++j) {
      out[size_t(i) * out_stride + size_t(j)] = vec_dot(t, n, wb + size_t(j) * w_stride, ab + size_t(i) * a_stride);
    }
  }
}

// ---- the scalar references, through the table's ref entries ---------------------------------

namespace ref {

void dequantize_row(TensorType t, const void* src, float* dst, int64_t n) {
  const TypeTraits& tt = type_traits(t);
  if (!valid(tt, n)) detail::fail("dequantize_row", t, n);
  tt.ref.dequantize_row(src, dst, n);
}

void quantize_row(TensorType t, const float* src, void* dst, int64_t n) {
  const TypeTraits& tt = type_traits(t);
  if (!valid(tt, n) || !tt.ref.quantize_row) detail::fail("quantize_row", t, n);
  tt.ref.quantize_row(src, dst, n);
}

float vec_dot(TensorType t, int64_t n, const void* w, const void* a) {
  const TypeTraits& tt = type_traits(t);
  if (!valid(tt, n)) detail::fail("vec_dot", t, n);
  return tt.ref.vec_dot(n, w, a);
}

void vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride,
                  int n_rows_a, float* out, size_t out_stride) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int i = 0; i < n_rows_a; ++i) {
    for (int j = 0; j < n_rows_w; ++j) {
      out[size_t(i) * out_stride + size_t(j)] = vec_dot(t, n, wb + size_t(j) * w_stride, ab + size_t(i) * a_stride);
    }
  }
}

}  // namespace ref

}  // namespace loom::quant
