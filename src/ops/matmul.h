// Matrix products against weights in any supported block format.
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace loom::ops
