// Quant kernel timings on one thread, n = 4096 (L1-resident rows), per tensor type: the
// dispatching entry points against their scalar reference twins, then the kernel sets side by side
// (the x86 AVX2 intrinsics where the CPU has them, and Highway under each target it supports).
// Plain main(); run build/bin/loom_bench_quant_kernels [dispatch|sets|tiles] (all without an argument).
// Random rows come from tests/quant/quant_test_util.h, as in the kernels' unit tests.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "base/cpu.h"
#include "base/simd.h"
#include "quant/kernels.h"
#include "quant/type_traits.h"
#include "quant_test_util.h"

namespace loom::quant::test {
namespace {

// One 4096-element dot per type, dispatch (SIMD) vs reference; dequantize and Q8_K quantize too.
void vec_dot_speed() {
  std::mt19937 rng(5);
  constexpr int64_t n = 4096;
  for (TensorType t : every_supported_type()) {
    const std::vector<uint8_t> w = any_random_row(t, n, rng);
    const std::vector<uint8_t> a = random_row(vec_dot_type(t), n, rng);
    auto time_ns = [&](auto fn) {
      volatile float sink = 0.0f;
      int iters = 0;
      const auto t0 = std::chrono::steady_clock::now();
      auto t1 = t0;
      do {
        for (int k = 0; k < 64; ++k) sink = sink + fn(t, n, w.data(), a.data());
        iters += 64;
        t1 = std::chrono::steady_clock::now();
      } while (t1 - t0 < std::chrono::milliseconds(100));
      (void)sink;
      return double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) / iters;
    };
    const double simd =
        time_ns([](TensorType tt, int64_t nn, const void* ww, const void* aa) { return vec_dot(tt, nn, ww, aa); });
    const double scalar =
        time_ns([](TensorType tt, int64_t nn, const void* ww, const void* aa) { return ref::vec_dot(tt, nn, ww, aa); });
    std::vector<float> out(static_cast<size_t>(n));
    const double deq_simd = time_ns([&](TensorType tt, int64_t nn, const void* ww, const void*) {
      dequantize_row(tt, ww, out.data(), nn);
      return out[0];
    });
    const double deq_scalar = time_ns([&](TensorType tt, int64_t nn, const void* ww, const void*) {
      ref::dequantize_row(tt, ww, out.data(), nn);
      return out[0];
    });
    std::printf("%-7s n=4096: vec_dot dispatch %7.1f ns ref %8.1f ns | dequantize dispatch %7.1f ns ref %8.1f ns\n",
                type_name(t).c_str(), simd, scalar, deq_simd, deq_scalar);
  }
  {
    const std::vector<float> x = random_floats(n, rng);
    std::vector<uint8_t> q(size_t(row_bytes(TensorType::Q8_K, n)));
    for (int pass = 0; pass < 2; ++pass) {
      int iters = 0;
      const auto t0 = std::chrono::steady_clock::now();
      auto t1 = t0;
      do {
        for (int k = 0; k < 64; ++k) {
          if (pass == 0) quantize_row(TensorType::Q8_K, x.data(), q.data(), n);
          else ref::quantize_row(TensorType::Q8_K, x.data(), q.data(), n);
        }
        iters += 64;
        t1 = std::chrono::steady_clock::now();
      } while (t1 - t0 < std::chrono::milliseconds(100));
      std::printf("quantize_row q8_K n=4096: %s %8.1f ns\n", pass == 0 ? "dispatch" : "ref",
                  double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) / iters);
    }
  }
}

// Nanoseconds per call of fn: the best of 5 runs of >= 20 ms each.
template <class Fn>
double best_ns(Fn fn) {
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    int iters = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto t1 = t0;
    do {
      for (int k = 0; k < 32; ++k) fn();
      iters += 32;
      t1 = std::chrono::steady_clock::now();
    } while (t1 - t0 < std::chrono::milliseconds(20));
    best = std::min(best, double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) / iters);
  }
  return best;
}

// The kernel sets side by side, per operation.
void kernel_set_speed() {
  std::mt19937 rng(6);
  constexpr int64_t n = 4096;
  volatile float sink = 0.0f;
  const std::vector<float> xf = random_floats(n, rng);
  std::vector<float> yf(static_cast<size_t>(n));
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(TensorType::F32, n)) + 64);
  auto report = [](const char* what, TensorType t, auto run) {
    std::printf("%-10s %-7s", what, type_name(t).c_str());
#if defined(__x86_64__)
    if (cpu_features().has_avx2_set()) std::printf("  avx2 %8.1f ns", run(0));
#endif
    for_each_hwy_target([&](const std::string& target) { std::printf("  hwy:%s %8.1f ns", target.c_str(), run(1)); });
    std::printf("\n");
  };
  for (TensorType t : every_supported_type()) {
    // Rows 64-byte aligned, as in the model's arenas.
    const std::vector<uint8_t> wr = any_random_row(t, n, rng);
    const std::vector<uint8_t> ar = random_row(vec_dot_type(t), n, rng);
    Misaligned w(wr.size(), 0), a(ar.size(), 0);
    std::memcpy(w.data(), wr.data(), wr.size());
    std::memcpy(a.data(), ar.data(), ar.size());
    report("vec_dot", t, [&](int set) {
      return best_ns([&] {
        float out = 0.0f;
#if defined(__x86_64__)
        if (set == 0 && !detail::avx2::vec_dot(t, n, w.data(), a.data(), &out)) out = NAN;
#endif
        if (set == 1) detail::highway::vec_dot(t, n, w.data(), a.data(), &out);
        sink = sink + out;
      });
    });
  }
  for (TensorType t : {TensorType::F16, TensorType::Q4_0, TensorType::Q8_0}) {
    // 4 activation rows x 8 weight rows of 4096.
    std::vector<uint8_t> w, a;
    for (int j = 0; j < 8; ++j) {
      const auto r = random_row(t, n, rng);
      w.insert(w.end(), r.begin(), r.end());
    }
    for (int i = 0; i < 4; ++i) {
      const auto r = random_row(vec_dot_type(t), n, rng);
      a.insert(a.end(), r.begin(), r.end());
    }
    const size_t ws = size_t(row_bytes(t, n)), as = size_t(row_bytes(vec_dot_type(t), n));
    float out[32];
    report("tile4x8", t, [&](int set) {
      return best_ns([&] {
#if defined(__x86_64__)
        if (set == 0) detail::avx2::vec_dot_tile(t, n, w.data(), ws, 8, a.data(), as, 4, out, 8);
#endif
        if (set == 1) detail::highway::vec_dot_tile(t, n, w.data(), ws, 8, a.data(), as, 4, out, 8);
        sink = sink + out[5];
      });
    });
  }
  for (TensorType t : {TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q8_1, TensorType::Q8_K}) {
    report("quantize", t, [&](int set) {
      return best_ns([&] {
#if defined(__x86_64__)
        if (set == 0) detail::avx2::quantize_row(t, xf.data(), q.data(), n);
#endif
        if (set == 1) detail::highway::quantize_row(t, xf.data(), q.data(), n);
        sink = sink + float(q[7]);
      });
    });
  }
  for (TensorType t : {TensorType::F16, TensorType::BF16, TensorType::Q4_0, TensorType::Q8_0, TensorType::Q5_1}) {
    const std::vector<uint8_t> w = random_row(t, n, rng);
    report("dequant", t, [&](int set) {
      return best_ns([&] {
#if defined(__x86_64__)
        if (set == 0) detail::avx2::dequantize_row(t, w.data(), yf.data(), n);
#endif
        if (set == 1) detail::highway::dequantize_row(t, w.data(), yf.data(), n);
        sink = sink + yf[9];
      });
    });
  }
}

// The IQ, ternary, 1-/2-bit and FP4 types' tiles (the dispatched vec_dot_tile) against the loop
// over the dispatched vec_dot, per (weight block, activation row): a 16 x 64 prompt tile over rows
// of 4096 (weights in cache), and decode, one activation row against 16384 weight rows of 1024 in
// groups of 16 as ops::matmul calls it (several MiB: the weights stream from memory; GB/s shown).
void tile_speed() {
  std::mt19937 rng(7);
  volatile float sink = 0.0f;
  for (TensorType t : new_types()) {
    const TensorType at = vec_dot_type(t);
    const int64_t blk = tensor_type_info(t)->block_size;
    for (const bool decode : {false, true}) {
      const int64_t n = decode ? 1024 : 4096;
      const int nw = decode ? 16384 : 16, na = decode ? 1 : 64;
      const size_t ws = size_t(row_bytes(t, n)), as = size_t(row_bytes(at, n));
      std::vector<uint8_t> w, a;
      for (int j = 0; j < nw; ++j) {
        const auto r = any_random_row(t, n, rng);
        w.insert(w.end(), r.begin(), r.end());
      }
      for (int i = 0; i < na; ++i) {
        const auto r = random_row(at, n, rng);
        a.insert(a.end(), r.begin(), r.end());
      }
      std::vector<float> out(size_t(nw) * size_t(na));
      const int64_t blocks = n / blk;  // whole blocks per row
      const double pairs = double(blocks) * nw * na;
      const double tile = best_ns([&] {
        for (int j = 0; j < nw; j += 16) {
          vec_dot_tile(t, n, w.data() + ws * size_t(j), ws, 16, a.data(), as, na, out.data() + j, size_t(nw));
        }
        sink = sink + out[1];
      });
      const double loop = best_ns([&] {
        for (int i = 0; i < na; ++i) {
          for (int j = 0; j < nw; ++j) {
            out[size_t(i) * size_t(nw) + size_t(j)] = vec_dot(t, n, w.data() + ws * size_t(j), a.data() + as * size_t(i));
          }
        }
        sink = sink + out[1];
      });
      std::printf("%-8s %-6s tile %6.2f ns  vec_dot loop %6.2f ns  per (block, activation row)  x%.2f", type_name(t).c_str(),
                  decode ? "decode" : "prompt", tile / pairs, loop / pairs, loop / tile);
      if (decode) std::printf("  (tile %.1f GB/s)", double(w.size()) / tile);
      std::printf("\n");
    }
  }
}

}  // namespace
}  // namespace loom::quant::test

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what.empty() || what == "dispatch") loom::quant::test::vec_dot_speed();
  if (what.empty() || what == "sets") loom::quant::test::kernel_set_speed();
  if (what.empty() || what == "tiles") loom::quant::test::tile_speed();
  return 0;
}
