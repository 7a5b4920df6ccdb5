// Model: loading a GGUF file (hyperparameters, weight binding, repacking) and the weight binders
// of the Mamba, T5 and BERT families; the decoder families' binder is bind_decoder.cpp.
#include "model/model.h"

#include <cmath>
#include <utility>

#include "base/timer.h"
#include "base/log.h"
#include "model/packing.h"
#include "model/weight_binder.h"
#include "quant/packed.h"
#include "quant/quant.h"

namespace loom::model {

std::vector<const TensorView*> LayerWeights::matrices() const {
  return {&wq,
          &wk,
          &wv,
          &wo,
          &ffn_gate,
          &ffn_up,
          &ffn_down,
          &ssm_in,
          &ssm_x,
          &ssm_dt,
          &ssm_out,
          &ssm_z,
          &ssm_beta,
          &ssm_alpha,
          &wq_cross,
          &wk_cross,
          &wv_cross,
          &wo_cross,
          &pl_inp_gate,
          &pl_proj,
          &laurel_l,
          &laurel_r,
          &ffn_gate_inp,
          &ffn_gate_exps,
          &ffn_up_exps,
          &ffn_down_exps,
          &ffn_gate_shexp,
          &ffn_up_shexp,
          &ffn_down_shexp,
          &ffn_gate_inp_shexp};
}

std::vector<TensorView*> LayerWeights::matrices() {
  std::vector<TensorView*> out;
  for (const TensorView* t : std::as_const(*this).matrices()) out.push_back(const_cast<TensorView*>(t));
  return out;
}

TensorView expert_view(const TensorView& stacked, int64_t e, int64_t rows) {
  TensorView v = stacked;
  v.data = stacked.row(e * rows);
  v.rows = rows;
  if (stacked.packed) {
    v.packed = static_cast<const uint8_t*>(stacked.packed) +
               size_t(e * rows / quant::kPackRows) * quant::packed_group_bytes(stacked.type, stacked.cols);
  }
  return v;
}

Expected<std::shared_ptr<const Model>> Model::load(const std::string& path, const ModelLoadParams& params) {
  return out_of_memory_as_status("loading the model", [&]() -> Expected<std::shared_ptr<const Model>> {
    const int64_t t0 = now_us();
    if (params.progress) params.progress(0.0f);
    LOOM_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::open(path));
    auto model = from_gguf(std::move(file), params);
    if (!model) return Status(model.status().code(), path + ": " + model.status().message());
    if (params.progress) params.progress(1.0f);
    const_cast<Model&>(**model).load_time_us_ = now_us() - t0;
    LOOM_LOG(kInfo, "loaded %s: %s, %.1f MB packed, %.1f ms", path.c_str(),
             params.vocab_only ? "vocabulary only" : "weights bound", double((*model)->packed_bytes()) / 1e6,
             double(now_us() - t0) / 1e3);
    return model;
  });
}

int32_t Model::decoder_start_token() const {
  if (hp_.arch != Arch::kT5) return -1;
  if (hp_.dec_start_token >= 0) return hp_.dec_start_token;
  return vocab_->bos() >= 0 ? vocab_->bos() : vocab_->pad() >= 0 ? vocab_->pad() : 0;
}

size_t Model::packed_bytes() const { return packed_ ? packed_->bytes : 0; }

Expected<std::shared_ptr<const Model>> Model::from_gguf(gguf::GgufFile file, const ModelLoadParams& params) {
  return out_of_memory_as_status("loading the model", [&]() -> Expected<std::shared_ptr<const Model>> {
    std::shared_ptr<Model> m(new Model());
    m->file_ = std::move(file);
    LOOM_ASSIGN_OR_RETURN(m->vocab_, Vocab::from_gguf(m->file_));
    if (params.vocab_only) return std::shared_ptr<const Model>(std::move(m));
    LOOM_ASSIGN_OR_RETURN(m->hp_, read_hparams(m->file_));
    LOOM_RETURN_IF_ERROR(m->hp_.is_t5()          ? m->bind_t5()
                         : m->hp_.is_encoder()   ? m->bind_bert()
                         : m->hp_.is_recurrent() ? m->bind_mamba()
                                                 : m->bind_decoder());
    if (params.repack && detail::repacking_enabled()) {
      m->packed_ = std::make_shared<detail::PackedStorage>();
      std::function<void(float)> packing;
      if (params.progress) packing = [&](float f) { params.progress(0.1f + 0.9f * f); };
      if (params.progress) params.progress(0.1f);
      const int64_t extra = detail::pack_model_weights(m->file_, m->w_, *m->packed_, packing);
      m->decode_weight_bytes_ += uint64_t(extra - m->unchosen_expert_extra());
    }
    return std::shared_ptr<const Model>(std::move(m));
  });
}

bool Model::packed_from_cache() const { return packed_ && packed_->from_cache; }

namespace detail {

// The selective state-space mixer of one block (Mamba-1; Mamba-2 for mamba2 and the recurrent
// layers of hybrids), prefix p = "blk.N."; the block's norm is bound by the caller.
Status bind_ssm_mixer(Binder& b, const ModelHparams& hp, const std::string& p, LayerWeights& l) {
  const int64_t E = hp.n_embd, Di = hp.ssm_d_inner, S = hp.ssm_d_state, R = hp.ssm_dt_rank, K = hp.ssm_d_conv;
  if (hp.is_mamba2()) {
    const int64_t H = hp.ssm_dt_rank, G = hp.ssm_n_group, Cc = hp.ssm_conv_channels();
    l.ssm_in = b.matrix(p + "ssm_in.weight", E, Di + Cc + H);
    l.ssm_conv = b.floats(p + "ssm_conv1d.weight", {K, Cc});
    l.ssm_conv_b = b.vector(p + "ssm_conv1d.bias", Cc);
    l.ssm_dt_b = b.vector(p + "ssm_dt.bias", H);
    l.ssm_a = b.floats(p + "ssm_a", {1, H});
    l.ssm_d = b.floats(p + "ssm_d", {1, H});
    l.ssm_norm = b.floats(p + "ssm_norm.weight", {Di / G, G});
  } else {
    l.ssm_in = b.matrix(p + "ssm_in.weight", E, 2 * Di);
    l.ssm_conv = b.floats(p + "ssm_conv1d.weight", {K, Di});
    l.ssm_conv_b = b.vector(p + "ssm_conv1d.bias", Di);
    l.ssm_x = b.matrix(p + "ssm_x.weight", Di, R + 2 * S);
    l.ssm_dt = b.matrix(p + "ssm_dt.weight", R, Di);
    l.ssm_dt_b = b.vector(p + "ssm_dt.bias", Di);
    l.ssm_a = b.floats(p + "ssm_a", {S, Di});
    l.ssm_d = b.vector(p + "ssm_d", Di);
  }
  l.ssm_out = b.matrix(p + "ssm_out.weight", Di, E);
  LOOM_RETURN_IF_ERROR(b.status());
  const int64_t n_a = hp.is_mamba2() ? hp.ssm_dt_rank : S * Di;
  for (int64_t i = 0; i < n_a; ++i) {
    // A is stored negated (A = -exp(A_log)): a positive or non-finite decay would make the
    // state grow without bound (and the vector exp assumes arguments <= 0).
    if (!(l.ssm_a[i] <= 0.0f) || !std::isfinite(l.ssm_a[i])) {
      return corrupt("tensor '" + p + "ssm_a' has the value " + std::to_string(l.ssm_a[i]) + " at index " +
                     std::to_string(i) + " (the stored A must be negative and finite)");
    }
  }
  return Status::ok();
}

}  // namespace detail

Expected<const gguf::TensorInfo*> Model::token_embedding() {
  const gguf::TensorInfo* emb = file_.find_tensor("token_embd.weight");
  if (!emb) return not_found("missing tensor 'token_embd.weight'");
  if (hp_.n_vocab == 0) hp_.n_vocab = emb->ne[1];
  if (hp_.n_vocab != vocab_->n_tokens()) {
    return corrupt("model has " + std::to_string(hp_.n_vocab) + " embedding rows but the vocabulary has " +
                   std::to_string(vocab_->n_tokens()) + " tokens");
  }
  return emb;
}

int64_t Model::unchosen_expert_extra() const {
  if (hp_.n_expert == 0) return 0;
  int64_t out = 0;
  for (const LayerWeights& l : w_.layers) {
    for (const TensorView* t : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}) {
      if (!t->packed) continue;
      const int64_t extra = int64_t(quant::packed_size(t->type, t->rows, t->cols)) - int64_t(size_t(t->rows) * t->row_bytes);
      out += extra - extra / hp_.n_expert * hp_.n_expert_used;
    }
  }
  return out;
}

Status Model::bind_mamba() {
  ModelHparams& hp = hp_;
  LOOM_ASSIGN_OR_RETURN(const gguf::TensorInfo* emb, token_embedding());
  const int64_t E = hp.n_embd, V = hp.n_vocab;
  detail::Binder b(file_, owned_);
  b.embedding_and_output(E, V, w_);
  w_.layers.resize(size_t(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& l = w_.layers[size_t(il)];
    l.attn_norm = b.vector(p + "attn_norm.weight", E);
    LOOM_RETURN_IF_ERROR(detail::bind_ssm_mixer(b, hp, p, l));
  }
  LOOM_RETURN_IF_ERROR(b.status());
  decode_weight_bytes_ = w_.tied_output ? b.bytes() : b.bytes() - emb->nbytes + w_.tok_embd.row_bytes;
  n_params_ = b.params();
  return Status::ok();
}

Status Model::bind_t5() {
  ModelHparams& hp = hp_;
  LOOM_ASSIGN_OR_RETURN(const gguf::TensorInfo* emb, token_embedding());
  const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), F = hp.n_ff, V = hp.n_vocab, B = hp.n_rel_buckets,
                H = hp.n_head;
  const bool decoder = hp.arch == Arch::kT5;
  if (decoder && hp.dec_start_token >= V) {
    return corrupt("t5.decoder_start_token_id " + std::to_string(hp.dec_start_token) + " is outside the vocabulary of " +
                   std::to_string(V) + " tokens");
  }
  detail::Binder b(file_, owned_);
  w_.tok_embd = b.matrix("token_embd.weight", E, V);
  w_.enc_output_norm = b.vector("enc.output_norm.weight", E);
  if (decoder) {
    // Tied to the embedding when output.weight is absent, without T5's d_model^-0.5 rescale
    // (llama.cpp does not apply it either).
    w_.output_norm = b.vector("dec.output_norm.weight", E);
    w_.output = b.matrix("output.weight", E, V, /*required=*/false);
    if (b.status().is_ok() && w_.output.empty()) {
      w_.output = w_.tok_embd;
      w_.tied_output = true;
    }
  }
  auto block = [&](const std::string& p, LayerWeights& l, bool cross) {
    l.attn_norm = b.vector(p + "attn_norm.weight", E);
    l.attn_rel_b = b.floats(p + "attn_rel_b.weight", {H, B}, /*required=*/false);
    l.wq = b.matrix(p + "attn_q.weight", E, Q);
    l.wk = b.matrix(p + "attn_k.weight", E, KV);
    l.wv = b.matrix(p + "attn_v.weight", E, KV);
    l.wo = b.matrix(p + "attn_o.weight", Q, E);
    if (cross) {
      l.cross_norm = b.vector(p + "cross_attn_norm.weight", E);
      l.wq_cross = b.matrix(p + "cross_attn_q.weight", E, Q);
      l.wk_cross = b.matrix(p + "cross_attn_k.weight", E, KV);
      l.wv_cross = b.matrix(p + "cross_attn_v.weight", E, KV);
      l.wo_cross = b.matrix(p + "cross_attn_o.weight", Q, E);
    }
    l.ffn_norm = b.vector(p + "ffn_norm.weight", E);
    l.ffn_gate = b.matrix(p + "ffn_gate.weight", E, F, /*required=*/false);  // gated GELU (flan-T5), else ReLU
    l.ffn_up = b.matrix(p + "ffn_up.weight", E, F);
    l.ffn_down = b.matrix(p + "ffn_down.weight", F, E);
  };
  w_.enc_layers.resize(size_t(hp.n_layer));
  const uint64_t before_encoder = b.bytes();
  for (int64_t il = 0; il < hp.n_layer; ++il) block("enc.blk." + std::to_string(il) + ".", w_.enc_layers[size_t(il)], false);
  const uint64_t encoder_bytes = b.bytes() - before_encoder;
  if (decoder) {
    w_.layers.resize(size_t(hp.n_dec_layer));
    for (int64_t il = 0; il < hp.n_dec_layer; ++il)
      block("dec.blk." + std::to_string(il) + ".", w_.layers[size_t(il)], true);
  }
  LOOM_RETURN_IF_ERROR(b.status());
  // Every layer needs a bias table: its own or layer 0's (the reference's rule).
  for (std::vector<LayerWeights>* ls : {&w_.enc_layers, &w_.layers}) {
    if (ls->empty()) continue;
    if (!(*ls)[0].attn_rel_b) {
      return not_found(std::string("missing tensor '") + (ls == &w_.layers ? "dec" : "enc") +
                       ".blk.0.attn_rel_b.weight' (the relative-position bias every layer falls back to)");
    }
    for (LayerWeights& l : *ls) {
      if (!l.attn_rel_b) l.attn_rel_b = (*ls)[0].attn_rel_b;
    }
  }
  // A decoder step reads the decoder's matrices but the cross K/V projections, and the LM head
  // (the encoder and the cross K/V run once per input); an encoder-only model reads its encoder.
  uint64_t step_bytes = decoder ? b.bytes() - encoder_bytes : b.bytes();
  for (const LayerWeights& l : w_.layers) {  // the cross K/V projections run once per encode too
    step_bytes -= uint64_t(l.wk_cross.rows) * l.wk_cross.row_bytes + uint64_t(l.wv_cross.rows) * l.wv_cross.row_bytes;
  }
  decode_weight_bytes_ = w_.tied_output ? step_bytes : step_bytes - emb->nbytes + w_.tok_embd.row_bytes;
  n_params_ = b.params();
  return Status::ok();
}

Status Model::bind_bert() {
  ModelHparams& hp = hp_;
  LOOM_ASSIGN_OR_RETURN(const gguf::TensorInfo* emb, token_embedding());
  const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), F = hp.n_ff, V = hp.n_vocab;
  detail::Binder b(file_, owned_);
  const bool rotary = hp.arch == Arch::kNomicBert;  // rotary positions, fused qkv, SwiGLU, no biases
  w_.tok_embd = b.matrix("token_embd.weight", E, V);
  if (!rotary) w_.pos_embd = b.matrix("position_embd.weight", E, hp.n_ctx_train);
  const gguf::TensorInfo* types = file_.find_tensor("token_types.weight");
  if (types) w_.type_embd = b.matrix("token_types.weight", E, types->ne[1]);
  w_.tok_norm = b.vector("token_embd_norm.weight", E);
  w_.tok_norm_b = b.vector("token_embd_norm.bias", E);
  if (hp.arch == Arch::kBert) {  // rerankers' classification head (llama.cpp reads it for bert only)
    const gguf::TensorInfo* out = file_.find_tensor("cls.output.weight");
    if (out && out->n_dims == 2 && out->ne[0] == E && out->ne[1] != hp.n_cls_out) {
      return corrupt("tensor 'cls.output.weight' has " + std::to_string(out->ne[1]) + " outputs but the model declares " +
                     std::to_string(hp.n_cls_out) + " (" + hp.arch_name + ".classifier.output_labels; 1 without labels)");
    }
    w_.cls = b.matrix("cls.weight", E, E, /*required=*/false);
    w_.cls_b = b.vector("cls.bias", E, /*required=*/false);
    w_.cls_out = b.matrix("cls.output.weight", E, hp.n_cls_out, /*required=*/false);
    w_.cls_out_b = b.vector("cls.output.bias", hp.n_cls_out, /*required=*/false);
  }
  w_.layers.resize(size_t(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& l = w_.layers[size_t(il)];
    b.qkv(p, rotary, E, Q, KV, l);
    if (!rotary) {
      l.bq = b.vector(p + "attn_q.bias", Q);
      l.bk = b.vector(p + "attn_k.bias", KV);
      l.bv = b.vector(p + "attn_v.bias", KV);
    }
    l.wo = b.matrix(p + "attn_output.weight", Q, E);
    l.bo = b.vector(p + "attn_output.bias", E, /*required=*/!rotary);
    l.attn_out_norm = b.vector(p + "attn_output_norm.weight", E);
    l.attn_out_norm_b = b.vector(p + "attn_output_norm.bias", E);
    l.ffn_up = b.matrix(p + "ffn_up.weight", E, F);
    l.ffn_down = b.matrix(p + "ffn_down.weight", F, E);
    if (rotary) {
      l.ffn_gate = b.matrix(p + "ffn_gate.weight", E, F);
    } else {
      l.ffn_up_b = b.vector(p + "ffn_up.bias", F);
      l.ffn_down_b = b.vector(p + "ffn_down.bias", E);
    }
    l.layer_out_norm = b.vector(p + "layer_output_norm.weight", E);
    l.layer_out_norm_b = b.vector(p + "layer_output_norm.bias", E);
  }
  LOOM_RETURN_IF_ERROR(b.status());
  decode_weight_bytes_ = b.bytes() - emb->nbytes + w_.tok_embd.row_bytes;
  n_params_ = b.params();
  return Status::ok();
}

}  // namespace loom::model
