// Micro-benchmarks of the compute kernels, per tensor type (every type quant::is_supported):
//   BM_vec_dot/<type>/<k>        quant::vec_dot of one weight row against one activation row
//                                (both L1/L2-resident: the kernel's compute ceiling)
//   BM_vec_dot_ref/<type>/<k>    the scalar reference, for comparison
//   BM_quantize_act/<type>/<k>   quant::quantize_row of an f32 activation row to vec_dot_type(t)
//   BM_matmul/<type>/<n>         ops::matmul, 1 thread, 4096×4096 weights (9-64 MiB: beware, a
//                                large last-level cache may hold them) against n activation rows,
//                                quantization of the activations included: n=1 is a decode step,
//                                n=32 a prefill chunk
// Counters: bytes_per_second counts weight bytes read (for matmul: the weight matrix once per call).
//
//   build/bin/loom_microbench --benchmark_filter='BM_vec_dot/'   # just the SIMD dots
//   build/bin/loom_microbench --benchmark_filter='q4_0'          # one type
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/threadpool.h"
#include "gguf/tensor_type.h"
#include "ops/matmul.h"
#include "quant/quant.h"

namespace {

using loom::TensorType;
namespace quant = loom::quant;

// Every type quant::is_supported() accepts in this build is benchmarked (see main()).
constexpr TensorType kCandidates[] = {
    TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0, TensorType::Q4_1,
    TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::IQ4_NL, TensorType::Q2_K,
    TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_XS};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// `rows` rows of k elements in type t: one row quantized (the weight quantizers of some types are
// slow searches) and copied, which reads the same as distinct rows.
std::vector<uint8_t> quantized(TensorType t, int64_t k, int64_t rows, uint32_t seed) {
  const size_t rb = size_t(loom::row_bytes(t, k));
  const std::vector<float> f = random_floats(size_t(k), seed);
  std::vector<uint8_t> out(rb * size_t(rows));
  quant::quantize_row(t, f.data(), out.data(), k);
  for (int64_t r = 1; r < rows; ++r) std::memcpy(out.data() + size_t(r) * rb, out.data(), rb);
  return out;
}

template <bool kRef>
void vec_dot_bench(benchmark::State& state, TensorType t) {
  const int64_t k = state.range(0);
  const std::vector<uint8_t> w = quantized(t, k, 1, 1);
  const std::vector<uint8_t> a = quantized(quant::vec_dot_type(t), k, 1, 2);
  for (auto _ : state) {
    const float r = kRef ? quant::ref::vec_dot(t, k, w.data(), a.data()) : quant::vec_dot(t, k, w.data(), a.data());
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size()));
}

void BM_vec_dot(benchmark::State& state, TensorType t) { vec_dot_bench<false>(state, t); }
void BM_vec_dot_ref(benchmark::State& state, TensorType t) { vec_dot_bench<true>(state, t); }

void BM_quantize_act(benchmark::State& state, TensorType t) {
  const TensorType dt = quant::vec_dot_type(t);
  const int64_t k = state.range(0);
  const std::vector<float> x = random_floats(size_t(k), 3);
  std::vector<uint8_t> out(size_t(loom::row_bytes(dt, k)));
  for (auto _ : state) {
    quant::quantize_row(dt, x.data(), out.data(), k);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * k * int64_t(sizeof(float)));
  state.SetLabel(std::string(loom::tensor_type_name(dt)));
}

void BM_matmul(benchmark::State& state, TensorType t) {
  const int64_t n = state.range(0);
  constexpr int64_t k = 4096, m = 4096;
  const std::vector<uint8_t> w = quantized(t, k, m, 4);
  loom::TensorView view;
  view.type = t;
  view.data = w.data();
  view.cols = k;
  view.rows = m;
  view.row_bytes = size_t(loom::row_bytes(t, k));
  const std::vector<float> x = random_floats(size_t(k * n), 5);
  std::vector<float> y(size_t(m * n));
  std::vector<uint8_t> scratch(loom::ops::matmul_scratch_bytes(t, k, n) + 64);
  loom::ThreadPool pool(1);
  for (auto _ : state) {
    loom::ops::matmul(pool, view, x.data(), n, y.data(), scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size()));
  state.counters["tokens/s"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

// Names: BM_vec_dot/q4_0/4096 (k), BM_matmul/q4_0/1 (activation rows).
int main(int argc, char** argv) {
  for (TensorType t : kCandidates) {
    if (!quant::is_supported(t)) continue;
    const std::string name(loom::tensor_type_name(t));
    benchmark::RegisterBenchmark(("BM_vec_dot/" + name).c_str(), BM_vec_dot, t)->Arg(4096);
    benchmark::RegisterBenchmark(("BM_vec_dot_ref/" + name).c_str(), BM_vec_dot_ref, t)->Arg(4096);
    benchmark::RegisterBenchmark(("BM_quantize_act/" + name).c_str(), BM_quantize_act, t)->Arg(4096);
    benchmark::RegisterBenchmark(("BM_matmul/" + name).c_str(), BM_matmul, t)
        ->Arg(1)->Arg(32)->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
