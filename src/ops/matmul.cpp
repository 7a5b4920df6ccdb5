#include "ops/matmul.h"

#include <algorithm>

#include "quant/packed.h"
#include "quant/quant.h"

namespace loom::ops {

size_t matmul_scratch_bytes(TensorType t, int64_t k, int64_t n) {
  const TensorType dt = quant::vec_dot_type(t);
  size_t bytes = dt == TensorType::F32 ? 0 : size_t(row_bytes(dt, k)) * size_t(n);
  if (quant::can_pack(t) && k % 32 == 0) bytes = std::max(bytes, quant::packed_act_row_bytes(t, k) * size_t(n));
  return bytes;
}

namespace {

// Packed weights (quant/packed.h): activations quantized once into the packed format, then
// groups of 16 weight rows split across threads, each group applied to all n activation rows.
void matmul_packed(ThreadPool& pool, const TensorView& w, const float* x, int64_t n, float* y, void* scratch) {
  const int64_t k = w.cols, m = w.rows;
  const size_t act_bytes = quant::packed_act_row_bytes(w.type, k);
  auto* act = static_cast<uint8_t*>(scratch);
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) quant::quantize_packed_act(w.type, x + i * k, k, act + size_t(i) * act_bytes);
  }, 16);
  const int64_t groups = (m + quant::kPackRows - 1) / quant::kPackRows;
  // Waking a thread costs microseconds: give each at least ~32 KiB of weights x rows.
  const int64_t group_bytes = int64_t(quant::packed_group_bytes(w.type, k));
  const int64_t min_groups = std::max<int64_t>(1, int64_t(32 * 1024) / std::max<int64_t>(1, group_bytes * n));
  pool.parallel_for(groups, [&](int64_t g0, int64_t g1) {
    quant::packed_gemm(w.type, m, k, w.packed, g0, g1, act, act_bytes, int(n), y, size_t(m));
  }, min_groups);
}

}  // namespace

void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t n, float* y, void* scratch) {
  if (w.packed) {
    matmul_packed(pool, w, x, n, y, scratch);
    return;
  }
  const int64_t k = w.cols, m = w.rows;
  const TensorType dt = quant::vec_dot_type(w.type);
  const void* act = x;
  size_t act_row_bytes = size_t(k) * sizeof(float);
  if (dt != TensorType::F32) {
    act_row_bytes = size_t(row_bytes(dt, k));
    auto* q = static_cast<uint8_t*>(scratch);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) quant::quantize_row(dt, x + i * k, q + i * act_row_bytes, k);
    });
    act = q;
  }
  const auto* a = static_cast<const uint8_t*>(act);
  // Blocks of weight rows reused across all activation rows.
  constexpr int64_t kRowBlock = 16;
  // Activation rows per tile call: the block of weight rows stays in L1 while these stream by.
  constexpr int64_t kActBlock = 64;
  // Waking a thread costs microseconds: give each at least ~32 KiB of weights to read.
  const int64_t min_rows = std::max<int64_t>(kRowBlock, int64_t(32 * 1024) / int64_t(std::max<size_t>(1, w.row_bytes)) / std::max<int64_t>(1, n));
  pool.parallel_for(m, [&](int64_t r0, int64_t r1) {
    for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
      const int64_t re = std::min(r1, rb + kRowBlock);
      // Tiles reuse each loaded weight block across several activation rows (decode: one
      // activation row against several weight rows). Every tile shape computes a pair's dot
      // with the same operations as quant::vec_dot, so a row's result does not depend on n.
      for (int64_t i0 = 0; i0 < n; i0 += kActBlock) {
        const int64_t ie = std::min(n, i0 + kActBlock);
        quant::vec_dot_tile(w.type, k, w.row(rb), w.row_bytes, int(re - rb), a + i0 * act_row_bytes,
                            act_row_bytes, int(ie - i0), y + i0 * m + rb, size_t(m));
      }
    }
  }, min_rows);
}

}  // namespace loom::ops
