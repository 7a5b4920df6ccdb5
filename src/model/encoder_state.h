// Per-context state of an encoder-decoder model (T5), owned by the context (the Model stays
// immutable): each sequence's last encoder output, kept as the cross-attention K and V of every
// decoder layer, computed once per encode (llama.cpp recomputes them at every decode step), in F32
// as llama.cpp keeps them.
//
// Rows of all sequences share one pool, each row with the set of sequences it belongs to (a token
// of an encode batch may belong to several). Encoding replaces the rows of the sequences it
// encodes and keeps every other sequence's, so several requests can decode against their own
// encoder outputs at once (llama.cpp keeps only the last encode's output). A decoder micro-batch
// attends over the whole pool, each token masked to the rows of its sequences.
#pragma once

#include <bitset>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/threadpool.h"
#include "model/forward.h"

namespace loom::model {

class Model;

class EncoderState {
 public:
  static constexpr int kMaxSeqs = 256;
  using SeqSet = std::bitset<kMaxSeqs>;

  // An empty state for `model`'s decoder (n_dec_layer layers of n_embd_kv-wide K/V).
  void reset(const Model& model);
  // The encoder output enc ([n][n_embd]) of an encode whose token i belongs to seqs[i]: the rows of
  // every sequence in that batch are replaced by these n rows, whose cross K/V are computed now.
  // scratch_type_k: the K type the scratch was sized for.
  Status store(const Model& model, const float* enc, std::span<const SeqSet> seqs, TensorType scratch_type_k,
               ForwardScratch& scratch, ThreadPool& pool);
  // Drops a sequence's rows (seq < 0: every sequence's).
  void remove(int seq);
  int n_rows() const { return n_; }
  bool has(int seq) const;
  // The cross-attention inputs of a decoder micro-batch: token t sees the rows of token_seqs[t]'s
  // sequences. mask: [n_tokens][n_rows()] floats, filled here.
  CrossAttentionView view(std::span<const SeqSet> token_seqs, float* mask) const;

 private:
  void reserve(int rows);
  int64_t n_embd_kv_ = 0;
  int n_layer_ = 0;
  size_t row_floats_ = 0;     // one row: K (then V) of every decoder layer
  std::vector<float> k_, v_;  // [rows][n_layer][n_embd_kv]
  std::vector<SeqSet> seqs_;  // [rows]
  int n_ = 0;
};

}  // namespace loom::model
