#include "ops/matmul.h"

#include <algorithm>
#include <vector>

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
  pool.parallel_for(
      n, [&](int64_t b, int64_t e) { quant::quantize_packed_act_rows(w.type, x, k, int(n), int(b), int(e), act); }, 16);
  const int64_t groups = (m + quant::kPackRows - 1) / quant::kPackRows;
  // Waking a thread costs microseconds: give each at least ~32 KiB of weights x rows.
  const int64_t group_bytes = int64_t(quant::packed_group_bytes(w.type, k));
  const int64_t min_groups = std::max<int64_t>(1, int64_t(32 * 1024) / std::max<int64_t>(1, group_bytes * n));
  pool.parallel_for(
      groups,
      [&](int64_t g0, int64_t g1) {
        quant::packed_gemm(w.type, m, k, w.packed, g0, g1, act, act_bytes, int(n), y, size_t(m));
      },
      min_groups);
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
  const int64_t min_rows =
      std::max<int64_t>(kRowBlock, int64_t(32 * 1024) / int64_t(std::max<size_t>(1, w.row_bytes)) / std::max<int64_t>(1, n));
  pool.parallel_for(
      m,
      [&](int64_t r0, int64_t r1) {
        for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
          const int64_t re = std::min(r1, rb + kRowBlock);
          // Tiles reuse each loaded weight block across several activation rows (decode: one
          // activation row against several weight rows). Every tile shape computes a pair's dot
          // with the same operations as quant::vec_dot, so a row's result does not depend on n.
          for (int64_t i0 = 0; i0 < n; i0 += kActBlock) {
            const int64_t ie = std::min(n, i0 + kActBlock);
            quant::vec_dot_tile(w.type, k, w.row(rb), w.row_bytes, int(re - rb), a + i0 * act_row_bytes, act_row_bytes,
                                int(ie - i0), y + i0 * m + rb, size_t(m));
          }
        }
      },
      min_rows);
}

namespace {

// The earlier packed job whose quantized activations job j can reuse, or -1.
int64_t shared_act(std::span<const MatmulJob> jobs, size_t j) {
  for (size_t i = 0; i < j; ++i) {
    const MatmulJob &a = jobs[i], &b = jobs[j];
    if (a.w.packed && a.x == b.x && a.n == b.n && a.w.type == b.w.type && a.w.cols == b.w.cols) return int64_t(i);
  }
  return -1;
}

}  // namespace

size_t matmul_many_scratch_bytes(std::span<const MatmulJob> jobs) {
  size_t packed = 0, other = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const MatmulJob& job = jobs[j];
    if (job.n <= 0) continue;
    if (!job.w.packed) {
      other = std::max(other, matmul_scratch_bytes(job.w.type, job.w.cols, job.n));
    } else if (shared_act(jobs, j) < 0) {
      packed += quant::packed_act_row_bytes(job.w.type, job.w.cols) * size_t(job.n);
    }
  }
  return std::max(packed, other);
}

namespace {

// A packed job: where its activations live, and its first group in the combined range.
struct PackedJob {
  const MatmulJob* job;
  const uint8_t* act;
  size_t act_bytes;
  int64_t group0;
};

// A job whose activation rows are quantized into dst (jobs that share them are not listed).
struct ActQuant {
  const MatmulJob* job;
  uint8_t* dst;
  size_t row_bytes;
};

// Every listed job's activation rows, quantized as one range over the pool.
void quantize_activations(ThreadPool& pool, std::span<const ActQuant> quant) {
  std::vector<int64_t> row0(quant.size() + 1, 0);
  for (size_t q = 0; q < quant.size(); ++q) row0[q + 1] = row0[q] + quant[q].job->n;
  pool.parallel_for(
      row0.back(),
      [&](int64_t b, int64_t e) {
        size_t q = size_t(std::upper_bound(row0.begin(), row0.end(), b) - row0.begin()) - 1;
        for (int64_t r = b; r < e;) {
          while (r >= row0[q + 1]) ++q;
          const MatmulJob& job = *quant[q].job;
          const int64_t stop = std::min(e, row0[q + 1]);
          quant::quantize_packed_act_rows(job.w.type, job.x, job.w.cols, int(job.n), int(r - row0[q]), int(stop - row0[q]),
                                          quant[q].dst);
          r = stop;
        }
      },
      16);
}

// Every job's groups as one range of `groups`; a thread's share may span several jobs.
void run_packed_groups(ThreadPool& pool, std::span<const PackedJob> packed, int64_t groups) {
  int64_t bytes = 0;
  for (const PackedJob& p : packed) {
    bytes += int64_t(quant::packed_group_bytes(p.job->w.type, p.job->w.cols)) * p.job->n *
             ((p.job->w.rows + quant::kPackRows - 1) / quant::kPackRows);
  }
  const int64_t min_groups = std::max<int64_t>(1, int64_t(32 * 1024) * groups / std::max<int64_t>(1, bytes));
  pool.parallel_for(
      groups,
      [&](int64_t g0, int64_t g1) {
        size_t p = 0;
        while (p + 1 < packed.size() && packed[p + 1].group0 <= g0) ++p;
        for (int64_t g = g0; g < g1;) {
          const PackedJob& pk = packed[p];
          const MatmulJob& job = *pk.job;
          const int64_t end = p + 1 < packed.size() ? packed[p + 1].group0 : groups;
          const int64_t stop = std::min(g1, end);
          quant::packed_gemm(job.w.type, job.w.rows, job.w.cols, job.w.packed, g - pk.group0, stop - pk.group0, pk.act,
                             pk.act_bytes, int(job.n), job.y, size_t(job.w.rows));
          g = stop;
          ++p;
        }
      },
      min_groups);
}

}  // namespace

void matmul_many(ThreadPool& pool, std::span<const MatmulJob> jobs, void* scratch) {
  std::vector<PackedJob> packed;
  std::vector<int64_t> act_of(jobs.size(), -1);  // index into `packed` of the job that owns the activations
  std::vector<ActQuant> quant;
  auto* act = static_cast<uint8_t*>(scratch);
  int64_t groups = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const MatmulJob& job = jobs[j];
    if (job.n <= 0 || job.w.rows <= 0) continue;
    if (!job.w.packed) {
      matmul(pool, job.w, job.x, job.n, job.y, scratch);  // before any packed activations are written
      continue;
    }
    const size_t row_bytes = quant::packed_act_row_bytes(job.w.type, job.w.cols);
    const int64_t s = shared_act(jobs, j);
    const uint8_t* a = nullptr;
    if (s >= 0) {
      a = packed[size_t(act_of[size_t(s)])].act;
    } else {
      quant.push_back({&job, act, row_bytes});
      a = act;
      act += row_bytes * size_t(job.n);
    }
    act_of[j] = int64_t(packed.size());
    packed.push_back({&job, a, row_bytes, groups});
    groups += (job.w.rows + quant::kPackRows - 1) / quant::kPackRows;
  }
  if (packed.empty()) return;
  quantize_activations(pool, quant);
  run_packed_groups(pool, packed, groups);
}

}  // namespace loom::ops
