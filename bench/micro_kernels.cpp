// Micro-benchmarks of the compute kernels, per tensor type (every type quant::is_supported):
//   BM_vec_dot/<type>/<k>        quant::vec_dot of one weight row against one activation row
//                                (both L1/L2-resident: the kernel's compute ceiling)
//   BM_vec_dot_ref/<type>/<k>    the scalar reference, for comparison
//   BM_quantize_act/<type>/<k>   quant::quantize_row of an f32 activation row to vec_dot_type(t)
//   BM_matmul/<type>/<n>         ops::matmul, 1 thread, 4096×4096 weights (9-64 MiB: beware, a
//                                large last-level cache may hold them) against n activation rows,
//                                quantization of the activations included: n=1 is a decode step,
//                                n=32 a prefill chunk
//   BM_matmul_k1024/<type>/1    the same with rows of 1024 (an MoE expert's width), decode only
//   BM_matmul_packed/<type>/<n> the same on the packed copy model loading makes (Q4_0, Q8_0, F16
//                                where the CPU has packed kernels); n=512 is a whole prompt (AMX)
//   BM_attention/<impl>/<kv type>/<case>  ops::attention (impl fast) or ops::ref::attention (ref)
//                                one layer of a 16-head, 8-kv-head, head_dim 64 model (the
//                                500m preset): decode_<n_kv> = 1 token over n_kv cells, prefill512 =
//                                512 tokens over their own cells with a causal mask. Layers rotate
//                                through >= 256 MiB of K + V so that the cache comes from memory,
//                                as in a model; threads:2 runs a 2-thread pool.
//   BM_kv_read                   a plain sum over 256 MiB on one thread: the memory read ceiling
// Counters: bytes_per_second counts weight bytes read (for matmul: the weight matrix once per call;
// for attention: the K/V bytes of the visible cells, each once per call).
//
//   build/bin/loom_microbench --benchmark_filter='BM_vec_dot/'   # just the SIMD dots
//   build/bin/loom_microbench --benchmark_filter='q4_0'          # one type
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/threadpool.h"
#include "gguf/tensor_type.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "quant/packed.h"
#include "quant/quant.h"

namespace {

using loom::TensorType;
namespace quant = loom::quant;

// Every type quant::is_supported() accepts in this build is benchmarked (see main()).
constexpr TensorType kCandidates[] = {TensorType::F32,    TensorType::F16,  TensorType::BF16,   TensorType::Q4_0,
                                      TensorType::Q4_1,   TensorType::Q5_0, TensorType::Q5_1,   TensorType::Q8_0,
                                      TensorType::IQ4_NL, TensorType::Q2_K, TensorType::Q3_K,   TensorType::Q4_K,
                                      TensorType::Q5_K,   TensorType::Q6_K, TensorType::IQ4_XS, TensorType::MXFP4};

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
  const size_t rb = size_t(loom::gguf::row_bytes(t, k));
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
  std::vector<uint8_t> out(size_t(loom::gguf::row_bytes(dt, k)));
  for (auto _ : state) {
    quant::quantize_row(dt, x.data(), out.data(), k);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * k * int64_t(sizeof(float)));
  state.SetLabel(std::string(loom::gguf::tensor_type_name(dt)));
}

// kPacked: the row-interleaved copy model loading makes (quant/packed.h), as decode uses it.
template <bool kPacked, int64_t k = 4096>
void matmul_bench(benchmark::State& state, TensorType t) {
  const int64_t n = state.range(0);
  constexpr int64_t m = 4096;
  const std::vector<uint8_t> w = quantized(t, k, m, 4);
  loom::TensorView view;
  view.type = t;
  view.data = w.data();
  view.cols = k;
  view.rows = m;
  view.row_bytes = size_t(loom::gguf::row_bytes(t, k));
  std::vector<uint8_t> packed;
  if (kPacked) {
    packed.resize(quant::packed_size(t, m, k));
    quant::pack_weights(t, w.data(), view.row_bytes, m, k, packed.data(), 0, m / quant::kPackRows);
    view.packed = packed.data();
  }
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

void BM_matmul(benchmark::State& state, TensorType t) { matmul_bench<false>(state, t); }
void BM_matmul_packed(benchmark::State& state, TensorType t) { matmul_bench<true>(state, t); }
// Rows of 1024 (an MoE expert's width), where per-row costs weigh four times as much.
void BM_matmul_k1024(benchmark::State& state, TensorType t) { matmul_bench<false, 1024>(state, t); }

// ---- attention ---------------------------------------------------------------------------------

struct AttnBench {
  static constexpr int kHead = 16, kHeadKv = 8, kDim = 64;
  static constexpr size_t kMinBytes = size_t(128) << 20;
  int n_kv, n_tokens, n_layers;
  size_t k_row, v_row, layer_bytes;
  std::vector<uint8_t> k, v;
  std::vector<float> q, out, mask;
  std::vector<int32_t> group;  // one sequence: every token in prefix group 0

  AttnBench(TensorType t, int n_kv_, int n_tokens_) : n_kv(n_kv_), n_tokens(n_tokens_) {
    const size_t head = size_t(loom::gguf::row_bytes(t, kDim));
    k_row = v_row = head * kHeadKv;
    layer_bytes = k_row * size_t(n_kv);
    n_layers = int(std::max<size_t>(1, (kMinBytes + layer_bytes - 1) / layer_bytes));
    // One layer of random rows, copied to every layer (copies read like distinct data).
    const std::vector<float> f = random_floats(size_t(n_kv) * kHeadKv * kDim, 6);
    std::vector<uint8_t> layer(layer_bytes);
    for (int c = 0; c < n_kv * kHeadKv; ++c)
      quant::quantize_row(t, f.data() + size_t(c) * kDim, layer.data() + size_t(c) * head, kDim);
    k.resize(layer_bytes * size_t(n_layers));
    v.resize(k.size());
    for (int l = 0; l < n_layers; ++l) {
      std::memcpy(k.data() + size_t(l) * layer_bytes, layer.data(), layer_bytes);
      std::memcpy(v.data() + size_t(l) * layer_bytes, layer.data(), layer_bytes);
    }
    q = random_floats(size_t(n_tokens) * kHead * kDim, 7);
    out.resize(q.size());
    mask.assign(size_t(n_tokens) * n_kv, 0.0f);
    group.assign(size_t(n_tokens), 0);
    for (int i = 0; i < n_tokens; ++i) {
      for (int c = 0; c < n_kv; ++c) {
        if (c > n_kv - n_tokens + i) mask[size_t(i) * n_kv + c] = -std::numeric_limits<float>::infinity();
      }
    }
  }
  loom::ops::AttentionParams params(TensorType t, int layer) const {
    loom::ops::AttentionParams p;
    p.n_tokens = n_tokens;
    p.n_head = kHead;
    p.n_head_kv = kHeadKv;
    p.head_dim = kDim;
    p.n_kv = n_kv;
    p.k_type = p.v_type = t;
    p.k = k.data() + size_t(layer) * layer_bytes;
    p.v = v.data() + size_t(layer) * layer_bytes;
    p.k_row_bytes = k_row;
    p.v_row_bytes = v_row;
    p.mask = mask.data();
    p.prefix_group = group.data();
    p.scale = 1.0f / std::sqrt(float(kDim));
    return p;
  }
  // K + V bytes of the cells each call reads at least once.
  int64_t kv_bytes() const { return int64_t(2 * layer_bytes); }
};

// threads: state.range(1); n_kv: state.range(0); n_tokens from the name (1 or n_kv).
// prefill_tokens: 0 for a square prefill (n_tokens = n_kv), else that many tokens at the end of
// the cache (a prompt chunk over a long context).
template <bool kRef>
void BM_attention(benchmark::State& state, TensorType t, bool prefill, int prefill_tokens) {
  const int n_kv = int(state.range(0)), n_threads = int(state.range(1));
  AttnBench b(t, n_kv, prefill ? (prefill_tokens > 0 ? prefill_tokens : n_kv) : 1);
  loom::ThreadPool pool(n_threads);
  std::vector<uint8_t> scratch(loom::ops::attention_scratch_bytes(b.n_tokens, n_kv, AttnBench::kDim, t, pool.size()));
  int layer = 0;
  for (auto _ : state) {
    const loom::ops::AttentionParams p = b.params(t, layer);
    if (kRef) loom::ops::ref::attention(pool, p, b.q.data(), b.out.data(), scratch.data());
    else loom::ops::attention(pool, p, b.q.data(), b.out.data(), scratch.data());
    benchmark::DoNotOptimize(b.out.data());
    layer = layer + 1 == b.n_layers ? 0 : layer + 1;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * b.kv_bytes());
  state.counters["layers"] = b.n_layers;
}

void BM_kv_read(benchmark::State& state) {
  std::vector<uint64_t> buf(AttnBench::kMinBytes * 2 / sizeof(uint64_t), 1);
  for (auto _ : state) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < buf.size(); i += 4) {
      s0 += buf[i];
      s1 += buf[i + 1];
      s2 += buf[i + 2];
      s3 += buf[i + 3];
    }
    benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(buf.size() * sizeof(uint64_t)));
}

}  // namespace

// Names: BM_vec_dot/q4_0/4096 (k), BM_matmul/q4_0/1 (activation rows).
int main(int argc, char** argv) {
  for (TensorType t : kCandidates) {
    if (!quant::is_supported(t)) continue;
    const std::string name(loom::gguf::tensor_type_name(t));
    benchmark::RegisterBenchmark(("BM_vec_dot/" + name).c_str(), BM_vec_dot, t)->Arg(4096);
    benchmark::RegisterBenchmark(("BM_vec_dot_ref/" + name).c_str(), BM_vec_dot_ref, t)->Arg(4096);
    benchmark::RegisterBenchmark(("BM_quantize_act/" + name).c_str(), BM_quantize_act, t)->Arg(4096);
    benchmark::RegisterBenchmark(("BM_matmul/" + name).c_str(), BM_matmul, t)
        ->Arg(1)
        ->Arg(32)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_matmul_k1024/" + name).c_str(), BM_matmul_k1024, t)
        ->Arg(1)
        ->Unit(benchmark::kMicrosecond);
    if (quant::can_pack(t) && quant::packed_kernels_available(t)) {
      benchmark::RegisterBenchmark(("BM_matmul_packed/" + name).c_str(), BM_matmul_packed, t)
          ->Arg(1)
          ->Arg(32)
          ->Arg(512)
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (TensorType t : {TensorType::F16, TensorType::Q8_0, TensorType::F32}) {
    const std::string name(loom::gguf::tensor_type_name(t));
    for (const bool ref : {false, true}) {
      const std::string impl = ref ? "ref" : "fast";
      auto* dec = benchmark::RegisterBenchmark(("BM_attention/" + impl + "/" + name + "/decode").c_str(),
                                               ref ? BM_attention<true> : BM_attention<false>, t, false, 0);
      auto* pre = benchmark::RegisterBenchmark(("BM_attention/" + impl + "/" + name + "/prefill").c_str(),
                                               ref ? BM_attention<true> : BM_attention<false>, t, true, 0);
      dec->ArgNames({"n_kv", "threads"})->Args({512, 1})->Args({3072, 1})->Args({3072, 2})->Unit(benchmark::kMicrosecond);
      pre->ArgNames({"n_kv", "threads"})->Args({512, 1})->Args({512, 2})->Unit(benchmark::kMillisecond);
      if (!ref) {
        auto* deep = benchmark::RegisterBenchmark(("BM_attention/" + impl + "/" + name + "/prefill256").c_str(),
                                                  BM_attention<false>, t, true, 256);
        deep->ArgNames({"n_kv", "threads"})->Args({2304, 1})->Unit(benchmark::kMillisecond);
      }
    }
  }
  benchmark::RegisterBenchmark("BM_kv_read", BM_kv_read)->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
