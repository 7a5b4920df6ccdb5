#include "model/encoder_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/model.h"

namespace loom::model {

void EncoderState::reset(const Model& model) {
  const ModelHparams& hp = model.hparams();
  n_embd_kv_ = hp.n_embd_kv();
  n_layer_ = int(hp.n_dec_layer);
  row_floats_ = size_t(n_layer_) * size_t(n_embd_kv_);
  k_.clear();
  v_.clear();
  seqs_.clear();
  n_ = 0;
}

void EncoderState::reserve(int rows) {
  if (int(seqs_.size()) >= rows) return;
  const size_t cap = std::max<size_t>(size_t(rows), seqs_.size() * 2);
  k_.resize(cap * row_floats_);
  v_.resize(cap * row_floats_);
  seqs_.resize(cap);
}

void EncoderState::remove(int seq) {
  if (seq < 0) {
    n_ = 0;
    return;
  }
  SeqSet gone;
  gone.set(size_t(seq));
  int w = 0;
  for (int r = 0; r < n_; ++r) {
    seqs_[size_t(r)] &= ~gone;
    if (seqs_[size_t(r)].none()) continue;
    if (w != r) {
      std::memcpy(k_.data() + size_t(w) * row_floats_, k_.data() + size_t(r) * row_floats_, row_floats_ * sizeof(float));
      std::memcpy(v_.data() + size_t(w) * row_floats_, v_.data() + size_t(r) * row_floats_, row_floats_ * sizeof(float));
      seqs_[size_t(w)] = seqs_[size_t(r)];
    }
    ++w;
  }
  n_ = w;
}

bool EncoderState::has(int seq) const {
  if (seq < 0 || seq >= kMaxSeqs) return false;
  for (int r = 0; r < n_; ++r) {
    if (seqs_[size_t(r)].test(size_t(seq))) return true;
  }
  return false;
}

Status EncoderState::store(const Model& model, const float* enc, std::span<const SeqSet> seqs, TensorType scratch_type_k,
                           ForwardScratch& scratch, ThreadPool& pool) {
  // The batch's sequences lose their old rows.
  SeqSet batch;
  for (const SeqSet& s : seqs) batch |= s;
  for (size_t s = batch._Find_first(); s < size_t(kMaxSeqs); s = batch._Find_next(s)) remove(int(s));
  const int n = int(seqs.size());
  reserve(n_ + n);
  CrossAttentionView out;
  out.type_k = out.type_v = TensorType::F32;
  out.k_row_bytes = out.v_row_bytes = row_floats_ * sizeof(float);
  out.k_layer_bytes = out.v_layer_bytes = size_t(n_embd_kv_) * sizeof(float);
  out.k = reinterpret_cast<const uint8_t*>(k_.data() + size_t(n_) * row_floats_);
  out.v = reinterpret_cast<const uint8_t*>(v_.data() + size_t(n_) * row_floats_);
  LOOM_RETURN_IF_ERROR(t5_cross_kv(model, enc, n, out, scratch_type_k, scratch, pool));
  for (int i = 0; i < n; ++i) seqs_[size_t(n_ + i)] = seqs[size_t(i)];
  n_ += n;
  return Status::ok();
}

CrossAttentionView EncoderState::view(std::span<const SeqSet> token_seqs, float* mask) const {
  for (size_t t = 0; t < token_seqs.size(); ++t) {
    float* row = mask + t * size_t(n_);
    for (int r = 0; r < n_; ++r) row[r] = (seqs_[size_t(r)] & token_seqs[t]).any() ? 0.0f : -INFINITY;
  }
  CrossAttentionView v;
  v.n_enc = n_;
  v.type_k = v.type_v = TensorType::F32;
  v.k = reinterpret_cast<const uint8_t*>(k_.data());
  v.v = reinterpret_cast<const uint8_t*>(v_.data());
  v.k_row_bytes = v.v_row_bytes = row_floats_ * sizeof(float);
  v.k_layer_bytes = v.v_layer_bytes = size_t(n_embd_kv_) * sizeof(float);
  v.mask = mask;
  return v;
}

}  // namespace loom::model
