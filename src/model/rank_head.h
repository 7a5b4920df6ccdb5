// The classification head of a reranker (rank pooling), with its per-context buffers: the context
// owns one, the Model stays immutable. llama.cpp's build_pooling with LLAMA_POOLING_TYPE_RANK, for
// BERT, on each sequence's CLS hidden state, every sequence of a batch in one product per layer:
//   y = tanh(cls·x + cls_b)      when cls.weight exists (else y = x)
//   z = cls_out·y + cls_out_b    when cls.output.weight exists (else z = y)
// and a sequence's scores are z's first n_cls_out values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/threadpool.h"

namespace loom::model {

class Model;

class RankHead {
 public:
  // Buffers for up to n_seq sequences of `model`.
  void reserve(const Model& model, int n_seq);
  // pooled: [n_seq][n_embd] CLS states; valid[s] != 0 for the sequences of the batch. Writes each
  // valid sequence's n_cls_out scores (raw, no sigmoid, as llama_get_embeddings_seq).
  void run(const Model& model, std::span<const float> pooled, std::span<const uint8_t> valid, ThreadPool& pool,
           int n_threads);
  std::span<const float> scores(int seq) const;

 private:
  std::vector<float> x_, h_, y_, scores_;
  std::vector<int32_t> seqs_;
  std::vector<uint8_t> mm_;
  int64_t n_cls_out_ = 1;
};

}  // namespace loom::model
