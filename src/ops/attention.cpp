#include "ops/attention.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "base/arena.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace loom::ops {
namespace {

struct ThreadScratch {
  float* scores;  // [n_kv]
  float* vrow;    // [head_dim]
  uint8_t* qconv; // one head of q in the K type's dot format
};

size_t per_thread_bytes(int n_kv, int head_dim, TensorType kv_type) {
  const TensorType dt = quant::vec_dot_type(kv_type);
  return Arena::padded(sizeof(float) * size_t(n_kv)) + Arena::padded(sizeof(float) * size_t(head_dim)) +
         Arena::padded(size_t(row_bytes(dt, head_dim)));
}

ThreadScratch carve(void* base, int ith, int n_kv, int head_dim, TensorType kv_type) {
  auto* p = static_cast<uint8_t*>(base) + size_t(ith) * per_thread_bytes(n_kv, head_dim, kv_type);
  ThreadScratch s;
  s.scores = reinterpret_cast<float*>(p);
  p += Arena::padded(sizeof(float) * size_t(n_kv));
  s.vrow = reinterpret_cast<float*>(p);
  p += Arena::padded(sizeof(float) * size_t(head_dim));
  s.qconv = p;
  return s;
}

}  // namespace

void alibi_slopes(int n_head, float max_bias, float* out) {
  const int n_floor = 1 << int(std::floor(std::log2(double(n_head))));
  const double m0 = std::pow(2.0, -double(max_bias) / n_floor);
  const double m1 = std::pow(2.0, -double(max_bias) / 2.0 / n_floor);
  for (int h = 0; h < n_head; ++h) {
    out[h] = float(h < n_floor ? std::pow(m0, h + 1) : std::pow(m1, 2 * (h - n_floor) + 1));
  }
}

size_t attention_scratch_bytes(int n_kv, int head_dim, TensorType kv_type, int n_threads) {
  return per_thread_bytes(n_kv, head_dim, kv_type) * size_t(n_threads);
}

void attention(ThreadPool& pool, const AttentionParams& p, const float* q, float* out, void* scratch) {
  const int group = p.n_head / p.n_head_kv;
  const TensorType dt = quant::vec_dot_type(p.k_type);
  const size_t k_head_bytes = size_t(row_bytes(p.k_type, p.head_dim));
  const size_t v_head_bytes = size_t(row_bytes(p.v_type, p.head_dim));
  const auto* kbase = static_cast<const uint8_t*>(p.k);
  const auto* vbase = static_cast<const uint8_t*>(p.v);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  // Small jobs (few heads over few cells) run on the calling thread: a wake-up costs more.
  const int64_t work = int64_t(p.n_tokens) * p.n_head * p.n_kv * p.head_dim;
  const int max_threads = work < (1 << 14) ? 1 : 0;
  pool.run([&](int ith, int nth) {
    ThreadScratch s = carve(scratch, ith, p.n_kv, p.head_dim, p.k_type);
    const int64_t n_items = int64_t(p.n_tokens) * p.n_head;
    for (int64_t item = n_items * ith / nth; item < n_items * (ith + 1) / nth; ++item) {
      const int t = int(item / p.n_head), h = int(item % p.n_head);
      const int kvh = h / group;
      const float* qh = q + item * p.head_dim;
      const float* mrow = p.mask + int64_t(t) * p.n_kv;
      const void* qd = qh;
      if (dt != TensorType::F32) {
        quant::quantize_row(dt, qh, s.qconv, p.head_dim);
        qd = s.qconv;
      }
      for (int c = 0; c < p.n_kv; ++c) {
        if (mrow[c] == kNegInf) {
          s.scores[c] = kNegInf;
          continue;
        }
        const uint8_t* kc = kbase + size_t(c) * p.k_row_bytes + size_t(kvh) * k_head_bytes;
        float sc = quant::vec_dot(p.k_type, p.head_dim, kc, qd) * p.scale;
        if (p.softcap > 0) sc = p.softcap * std::tanh(sc / p.softcap);
        if (p.alibi_slopes) sc += p.alibi_slopes[h] * float(p.kv_pos[c] - p.q_pos[t]);
        s.scores[c] = sc + mrow[c];
      }
      softmax_inplace(s.scores, p.n_kv);
      float* o = out + item * p.head_dim;
      std::memset(o, 0, sizeof(float) * size_t(p.head_dim));
      for (int c = 0; c < p.n_kv; ++c) {
        const float w = s.scores[c];
        if (w == 0.0f) continue;
        const uint8_t* vc = vbase + size_t(c) * p.v_row_bytes + size_t(kvh) * v_head_bytes;
        quant::dequantize_row(p.v_type, vc, s.vrow, p.head_dim);
        for (int d = 0; d < p.head_dim; ++d) o[d] += w * s.vrow[d];
      }
    }
  }, max_threads);
}

}  // namespace loom::ops
