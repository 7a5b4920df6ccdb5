#include "model/rank_head.h"

#include <algorithm>
#include <cmath>

#include "model/model.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace loom::model {

void RankHead::reserve(const Model& model, int n_seq) {
  const ModelWeights& w = model.weights();
  const size_t S = size_t(n_seq), E = size_t(model.hparams().n_embd);
  n_cls_out_ = model.hparams().n_cls_out;
  const size_t C = size_t(n_cls_out_);
  x_.assign(S * E, 0.0f);
  h_.assign(S * E, 0.0f);
  y_.assign(S * C, 0.0f);
  scores_.assign(S * C, 0.0f);
  seqs_.assign(S, 0);
  size_t mm = 0;
  for (const TensorView* t : {&w.cls, &w.cls_out}) {
    if (!t->empty()) mm = std::max(mm, ops::matmul_scratch_bytes(t->type, t->cols, int64_t(S)));
  }
  mm_.assign(mm, 0);
}

void RankHead::run(const Model& model, std::span<const float> pooled, std::span<const uint8_t> valid, ThreadPool& pool,
                   int n_threads) {
  const ModelWeights& w = model.weights();
  const int64_t E = model.hparams().n_embd, C = n_cls_out_;
  int64_t k = 0;
  for (size_t s = 0; s < valid.size(); ++s) {
    if (!valid[s]) continue;
    std::copy(pooled.begin() + long(s * size_t(E)), pooled.begin() + long((s + 1) * size_t(E)),
              x_.begin() + long(size_t(k) * size_t(E)));
    seqs_[size_t(k++)] = int32_t(s);
  }
  if (k == 0) return;
  pool.set_active(n_threads);
  const float* cur = x_.data();
  int64_t dim = E;
  if (!w.cls.empty()) {
    ops::matmul(pool, w.cls, cur, k, h_.data(), mm_.data());
    if (w.cls_b) ops::add_bias(h_.data(), w.cls_b, int(k), E);
    for (int64_t i = 0; i < k * E; ++i) h_[size_t(i)] = std::tanh(h_[size_t(i)]);
    cur = h_.data();
  }
  if (!w.cls_out.empty()) {
    ops::matmul(pool, w.cls_out, cur, k, y_.data(), mm_.data());
    if (w.cls_out_b) ops::add_bias(y_.data(), w.cls_out_b, int(k), C);
    cur = y_.data();
    dim = C;
  }
  for (int64_t i = 0; i < k; ++i) {
    float* dst = scores_.data() + size_t(seqs_[size_t(i)]) * size_t(C);
    std::fill(dst, dst + C, 0.0f);
    std::copy(cur + i * dim, cur + i * dim + std::min(dim, C), dst);
  }
}

std::span<const float> RankHead::scores(int seq) const {
  return std::span<const float>(scores_.data() + size_t(seq) * size_t(n_cls_out_), size_t(n_cls_out_));
}

}  // namespace loom::model
