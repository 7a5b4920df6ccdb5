// Matrix products against weights in any supported block format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/threadpool.h"
#include "ops/tensor_view.h"

namespace loom::ops {

// Scratch bytes matmul needs for n activation rows of length k against weights of type t
// (the activations converted to the weight type's dot format).
size_t matmul_scratch_bytes(TensorType t, int64_t k, int64_t n);

// y[n][w.rows] = x[n][w.cols] · wᵀ. Rows of w are split across the pool's threads; each weight
// row is read once and applied to all n activation rows while it is hot in cache.
// `scratch` must hold matmul_scratch_bytes(w.type, w.cols, n) bytes.
void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t n, float* y, void* scratch);

// One product of a matmul_many batch: y[n][w.rows] = x[n][w.cols] · wᵀ.
struct MatmulJob {
  TensorView w;
  const float* x = nullptr;
  int64_t n = 0;
  float* y = nullptr;
};

// Scratch bytes matmul_many needs for these jobs (the activations of each, converted once for
// jobs that share x, n and weight type).
size_t matmul_many_scratch_bytes(std::span<const MatmulJob> jobs);

// Every job's product, with the same results bit for bit as one matmul per job, in as few pool
// dispatches as the weights allow: the jobs with packed weights take two (their activations
// quantized together — once for jobs that share x, n and type, such as an expert's gate and up
// projections — then all their 16-row groups split across the threads as one range), the others
// one matmul each. For many small products (a mixture-of-experts layer's chosen experts at
// decode) this saves the pool's wake-ups, which cost as much as the products themselves.
// `scratch` must hold matmul_many_scratch_bytes(jobs) bytes.
void matmul_many(ThreadPool& pool, std::span<const MatmulJob> jobs, void* scratch);

}  // namespace loom::ops
