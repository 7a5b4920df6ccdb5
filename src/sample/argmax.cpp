#include "sample/argmax.h"

#include <cstddef>

#include "base/cpu.h"

namespace loom::sample {

int32_t argmax_reference(std::span<const float> x) {
  if (x.empty()) return 0;
  int32_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[size_t(best)]) best = int32_t(i);
  return best;
}

namespace {

// kLanes independent lanes: lane j sees indices j, j + kLanes, ... Every lane starts from x[0],
// so a NaN there stays every lane's maximum, and a strict > keeps each lane's first occurrence.
// Plain code the compiler turns into compares and blends for the target it is inlined into.
template <size_t kLanes>
[[gnu::always_inline]] inline int32_t argmax_lanes(const float* p, size_t n) {
  float m[kLanes];
  int32_t at[kLanes];
  for (size_t j = 0; j < kLanes; ++j) m[j] = p[0], at[j] = 0;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      const float v = p[i + j];
      const bool gt = v > m[j];
      m[j] = gt ? v : m[j];
      at[j] = gt ? int32_t(i + j) : at[j];
    }
  }
  // Lanes combined: the larger value, the smaller index on ties (equal values: the first).
  float bm = m[0];
  int32_t bi = at[0];
  for (size_t j = 1; j < kLanes; ++j) {
    if (m[j] > bm || (m[j] == bm && at[j] < bi)) bm = m[j], bi = at[j];
  }
  for (; i < n; ++i)
    if (p[i] > bm) bm = p[i], bi = int32_t(i);
  return bi;
}

int32_t argmax_baseline(const float* p, size_t n) { return argmax_lanes<16>(p, n); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) int32_t argmax_avx2(const float* p, size_t n) { return argmax_lanes<32>(p, n); }
__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl"))) int32_t argmax_avx512(const float* p, size_t n) {
  return argmax_lanes<32>(p, n);
}
#endif

using ArgmaxFn = int32_t (*)(const float*, size_t);

ArgmaxFn pick_argmax() {
  const CpuFeatures& f = cpu_features();
  if (!f.simd) return nullptr;  // LOOM_FORCE_SCALAR: the reference loop
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (f.has_avx512_vnni_set()) return argmax_avx512;
  if (f.has_avx2_set()) return argmax_avx2;
#endif
  return argmax_baseline;
}

}  // namespace

int32_t argmax(std::span<const float> x) {
  static const ArgmaxFn fn = pick_argmax();
  if (!fn || x.size() < 64) return argmax_reference(x);
  return fn(x.data(), x.size());
}

}  // namespace loom::sample
