#include "bandwidth.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace loom::cli {
namespace {

// Both kernels sum the buffer so the loads cannot be optimized away; the results are combined
// and published through a volatile sink.
uint64_t read_scalar(const uint8_t* p, size_t n) {
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  const size_t words = n / 8;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  size_t i = 0;
  for (; i + 8 <= words; i += 8) {
    s0 += q[i + 0];
    s1 += q[i + 1];
    s2 += q[i + 2];
    s3 += q[i + 3];
    s4 += q[i + 4];
    s5 += q[i + 5];
    s6 += q[i + 6];
    s7 += q[i + 7];
  }
  for (; i < words; ++i) s0 += q[i];
  return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}

#if defined(__x86_64__)
// Float adds (the buffer holds 0x3F bytes, i.e. normal floats near 0.75, so no denormal stalls):
// measured slightly faster here than 64-bit integer adds.
__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n) {
  // 256 bytes (4 cache lines) per iteration, four independent accumulators.
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    // Prefetch 4 KiB ahead into L2, as the packed decode kernels do: on this machine's cores the
    // hardware prefetchers alone leave ~30 % of a single core's read bandwidth unused, and
    // prefetches into L1 stall once its fill buffers are full.
    for (int l = 0; l < 4; ++l) _mm_prefetch(reinterpret_cast<const char*>(p + i + 4096 + 64 * l), _MM_HINT_T1);
    const float* f = reinterpret_cast<const float*>(p + i);
    a0 = _mm256_add_ps(a0, _mm256_load_ps(f + 0));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(f + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(f + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(f + 24));
    a0 = _mm256_add_ps(a0, _mm256_load_ps(f + 32));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(f + 40));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(f + 48));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(f + 56));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0.0f;
  for (float x : lanes) total += x;
  return uint64_t(total) + read_scalar(p + i, n - i);
}
#endif

// Runs f(ith, nth) on nth threads (the caller is thread 0) and waits for all of them.
template <typename F>
void run_on_threads(int nth, F&& f) {
  std::vector<std::thread> workers;
  workers.reserve(size_t(nth - 1));
  for (int i = 1; i < nth; ++i) workers.emplace_back([&f, i, nth] { f(i, nth); });
  f(0, nth);
  for (auto& w : workers) w.join();
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct FreeAligned {
  void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

MemBandwidth measure_read_bandwidth(size_t bytes, int threads, int passes) {
  // 2 MiB alignment and transparent huge pages where the OS offers them, as the packed weights
  // use: the measurement should see the same TLB behaviour as decode.
  constexpr size_t kPage = size_t(2) << 20;
  MemBandwidth r;
  r.threads = std::max(1, threads);
  r.passes = std::max(1, passes);
  r.bytes = std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
  std::unique_ptr<uint8_t, FreeAligned> buf(static_cast<uint8_t*>(std::aligned_alloc(kPage, r.bytes)));
  if (!buf) return r;
#if defined(__linux__)
  madvise(buf.get(), r.bytes, MADV_HUGEPAGE);
#endif

  bool use_avx2 = false;
#if defined(__x86_64__)
  // The library's CPU detection, which LOOM_FORCE_SCALAR turns off.
  const std::string info = loom_system_info();
  use_avx2 = info.find("SIMD = 1") != std::string::npos && info.find("AVX2 = 1") != std::string::npos;
#endif
  r.kernel = use_avx2 ? "avx2" : "scalar";

  uint8_t* base = buf.get();
  // Each thread writes its own slice first, so pages are faulted in (and, on NUMA machines,
  // placed) by the thread that later reads them.
  const size_t n_lines = r.bytes / 256;
  auto slice = [&](int ith, int nth, size_t& begin, size_t& end) {
    begin = n_lines * size_t(ith) / size_t(nth) * 256;
    end = n_lines * size_t(ith + 1) / size_t(nth) * 256;
    if (ith == nth - 1) end = r.bytes;
  };
  run_on_threads(r.threads, [&](int ith, int nth) {
    size_t b = 0, e = 0;
    slice(ith, nth, b, e);
    std::memset(base + b, 0x3F, e - b);
  });

  std::vector<uint64_t> sums(size_t(r.threads), 0);
  double best_s = 0.0;
  for (int pass = 0; pass < r.passes; ++pass) {
    const int64_t t0 = now_us();
    run_on_threads(r.threads, [&](int ith, int nth) {
      size_t b = 0, e = 0;
      slice(ith, nth, b, e);
#if defined(__x86_64__)
      sums[size_t(ith)] += use_avx2 ? read_avx2(base + b, e - b) : read_scalar(base + b, e - b);
#else
      sums[size_t(ith)] += read_scalar(base + b, e - b);
#endif
    });
    const double s = double(std::max<int64_t>(1, now_us() - t0)) * 1e-6;
    if (pass == 0 || s < best_s) best_s = s;
  }
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  volatile uint64_t sink = total;
  (void)sink;
  r.gbps = double(r.bytes) / best_s / 1e9;
  return r;
}

}  // namespace loom::cli
