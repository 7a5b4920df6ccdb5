#include "model/model.h"

#include <cmath>
#include <limits>
#include <utility>

#include "base/timer.h"
#include "base/log.h"
#include "model/packing.h"
#include "quant/packed.h"
#include "quant/quant.h"

namespace loom {

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

namespace {

std::string shape_str(std::initializer_list<int64_t> ne) {
  std::string s = "[";
  for (int64_t x : ne) s += (s.size() > 1 ? ", " : "") + std::to_string(x);
  return s + "]";
}

std::string shape_str(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

}  // namespace

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

namespace {

// Binds tensors by name, checking presence, shape and type; the first problem is kept.
class Binder {
 public:
  Binder(const gguf::GgufFile& f, std::vector<std::vector<float>>& owned) : f_(f), owned_(owned) {}

  const gguf::TensorInfo* find(const std::string& name, std::initializer_list<int64_t> shape, bool required) {
    if (!st_.is_ok()) return nullptr;
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (required) st_ = not_found("missing tensor '" + name + "' (expected shape " + shape_str(shape) + ")");
      return nullptr;
    }
    bool ok = true;
    int d = 0;
    for (int64_t want : shape) ok = ok && t->ne[d++] == want;
    for (; d < gguf::kMaxDims; ++d) ok = ok && t->ne[d] == 1;
    if (!ok) {
      st_ = corrupt("tensor '" + name + "' has shape " + shape_str(*t) + ", expected " + shape_str(shape));
      return nullptr;
    }
    return t;
  }

  TensorView matrix(const std::string& name, int64_t cols, int64_t rows, bool required = true) {
    return computable(find(name, {cols, rows}, required), cols, rows);
  }

  // A {cols, rows, n} tensor as one matrix of n·rows rows (rows_of picks each slice).
  TensorView matrix3(const std::string& name, int64_t cols, int64_t rows, int64_t n, bool required = true) {
    return computable(find(name, {cols, rows, n}, required), cols, rows * n);
  }

  // The view of a found tensor as `rows` rows of `cols`, counted in the totals, when this build
  // computes with its type.
  TensorView computable(const gguf::TensorInfo* t, int64_t cols, int64_t rows) {
    if (!t) return {};
    if (!quant::is_supported(t->type)) {
      st_ = unsupported("tensor '" + t->name + "' has type " + std::string(tensor_type_name(t->type)) +
                        ", which this build cannot compute with yet");
      return {};
    }
    bytes_ += t->nbytes;
    params_ += uint64_t(t->n_elements());
    return TensorView{t->type, t->data, cols, rows, size_t(row_bytes(t->type, cols))};
  }

  // Rows [first, first + rows) of a matrix stored fused with others.
  TensorView rows_of(const TensorView& fused, int64_t first, int64_t rows) {
    if (fused.empty()) return {};
    TensorView v = fused;
    v.data = fused.row(first);
    v.rows = rows;
    return v;
  }

  // Q, K and V of a block: three matrices, or row ranges of a fused attn_qkv.
  void qkv(const std::string& p, bool fused, int64_t E, int64_t Q, int64_t KV, LayerWeights& l) {
    if (fused) {
      const TensorView t = matrix(p + "attn_qkv.weight", E, Q + 2 * KV);
      l.wq = rows_of(t, 0, Q);
      l.wk = rows_of(t, Q, KV);
      l.wv = rows_of(t, Q + KV, KV);
    } else {
      l.wq = matrix(p + "attn_q.weight", E, Q);
      l.wk = matrix(p + "attn_k.weight", E, KV);
      l.wv = matrix(p + "attn_v.weight", E, KV);
    }
  }

  const float* vector(const std::string& name, int64_t n, bool required = true) { return floats(name, {n}, required); }

  // A small tensor of any shape as dense floats (converted when stored otherwise).
  const float* floats(const std::string& name, std::initializer_list<int64_t> shape, bool required = true) {
    const gguf::TensorInfo* t = find(name, shape, required);
    if (!t) return nullptr;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    params_ += uint64_t(n);
    if (t->type == TensorType::F32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) {
      return reinterpret_cast<const float*>(t->data);
    }
    if (!quant::is_supported(t->type)) {
      st_ = unsupported("tensor '" + name + "' has unsupported type " + std::string(tensor_type_name(t->type)));
      return nullptr;
    }
    owned_.emplace_back(size_t(n));
    const int64_t cols = *shape.begin();
    const int64_t rb64 = row_bytes(t->type, cols);
    if (rb64 <= 0) {
      st_ = unsupported("tensor '" + name + "' has type " + std::string(tensor_type_name(t->type)) +
                        " with rows that are not whole blocks");
      return nullptr;
    }
    const size_t rb = size_t(rb64);
    for (int64_t r = 0; r < n / cols; ++r) {
      quant::dequantize_row(t->type, t->data + size_t(r) * rb, owned_.back().data() + r * cols, cols);
    }
    return owned_.back().data();
  }

  // token_embd, the final norm and the LM head (tied to the embedding when output.weight is
  // absent). lfm2 files name the final norm token_embd_norm.weight (the reference's name for it).
  void embedding_and_output(int64_t E, int64_t V, ModelWeights& w, const char* output_norm = "output_norm.weight") {
    w.tok_embd = matrix("token_embd.weight", E, V);
    w.output_norm = vector(output_norm, E);
    w.output = matrix("output.weight", E, V, /*required=*/false);
    if (st_.is_ok() && w.output.empty()) {
      w.output = w.tok_embd;
      w.tied_output = true;
    }
  }

  const Status& status() const { return st_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t params() const { return params_; }

 private:
  const gguf::GgufFile& f_;
  std::vector<std::vector<float>>& owned_;
  Status st_;
  uint64_t bytes_ = 0;
  uint64_t params_ = 0;
};

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

// lfm2's gated short-convolution block, prefix p = "blk.N.".
Status bind_short_conv(Binder& b, const ModelHparams& hp, const std::string& p, LayerWeights& l) {
  const int64_t E = hp.n_embd;
  l.ssm_in = b.matrix(p + "shortconv.in_proj.weight", E, 3 * E);
  l.ssm_conv = b.floats(p + "shortconv.conv.weight", {hp.ssm_d_conv, E});
  l.ssm_out = b.matrix(p + "shortconv.out_proj.weight", E, E);
  return b.status();
}

// qwen35's Gated DeltaNet block, prefix p = "blk.N.".
Status bind_delta_net(Binder& b, const ModelHparams& hp, const std::string& p, LayerWeights& l) {
  const int64_t E = hp.n_embd, Di = hp.ssm_d_inner, S = hp.ssm_d_state, Hv = hp.ssm_dt_rank, Cc = hp.ssm_conv_channels();
  l.ssm_in = b.matrix(p + "attn_qkv.weight", E, Cc);
  l.ssm_z = b.matrix(p + "attn_gate.weight", E, Di);
  if (hp.delta_ba_fused) {
    // qwen3next: β and α rows interleaved per key head in one projection (delta_net_block splits them).
    l.ssm_beta = b.matrix(p + "ssm_ba.weight", E, 2 * Hv);
  } else {
    l.ssm_beta = b.matrix(p + "ssm_beta.weight", E, Hv);
    l.ssm_alpha = b.matrix(p + "ssm_alpha.weight", E, Hv);
  }
  l.ssm_conv = b.floats(p + "ssm_conv1d.weight", {hp.ssm_d_conv, Cc});
  l.ssm_dt_b = b.vector(p + "ssm_dt.bias", Hv);
  l.ssm_a = b.vector(p + "ssm_a", Hv);
  l.ssm_norm = b.vector(p + "ssm_norm.weight", S);
  l.ssm_out = b.matrix(p + "ssm_out.weight", Di, E);
  LOOM_RETURN_IF_ERROR(b.status());
  for (int64_t h = 0; h < Hv; ++h) {
    // The decay is exp(softplus(·) · a): a positive or non-finite a would make the state grow.
    if (!(l.ssm_a[h] <= 0.0f) || !std::isfinite(l.ssm_a[h])) {
      return corrupt("tensor '" + p + "ssm_a' has the value " + std::to_string(l.ssm_a[h]) + " at index " +
                     std::to_string(h) + " (the stored decay must be negative and finite)");
    }
  }
  return Status::ok();
}

// gemma4's attention of layer il: heads of the layer's size (sliding or global), q/k norms, no V
// projection in some files (V is then K's projection, the reference's use_alternative_attention),
// no K/V at all on shared-KV layers, post-norms, an optional output scale.
Status bind_gemma4_attention(Binder& b, const ModelHparams& hp, const std::string& p, int64_t il, bool fused,
                             LayerWeights& l) {
  const int64_t E = hp.n_embd, D = hp.head_dim_at(il), Q = hp.n_head * D, KV = hp.n_head_kv_at(il) * D;
  const bool own_kv = hp.kv_source(il) < 0;
  if (fused) {
    b.qkv(p, true, E, Q, KV, l);
  } else {
    l.wq = b.matrix(p + "attn_q.weight", E, Q);
    if (own_kv) {
      l.wk = b.matrix(p + "attn_k.weight", E, KV);
      l.wv = b.matrix(p + "attn_v.weight", E, KV, /*required=*/false);
      if (l.wv.empty()) l.wv = l.wk;
    }
  }
  l.wo = b.matrix(p + "attn_output.weight", Q, E);
  l.q_norm = b.vector(p + "attn_q_norm.weight", D);
  if (own_kv) l.k_norm = b.vector(p + "attn_k_norm.weight", D);
  l.post_attn_norm = b.vector(p + "post_attention_norm.weight", E);
  l.post_ffn_norm = b.vector(p + "post_ffw_norm.weight", E);
  const float* scale = b.floats(p + "layer_output_scale.weight", {1}, /*required=*/false);
  l.out_scale = scale ? *scale : 0.0f;
  LOOM_RETURN_IF_ERROR(b.status());
  if (scale && !std::isfinite(*scale)) return corrupt("tensor '" + p + "layer_output_scale.weight' is not finite");
  return Status::ok();
}

// The mixture-of-experts FFN of a block (names and shapes of the reference's loaders).
Status bind_moe_ffn(Binder& b, const gguf::GgufFile& file, const ModelHparams& hp, const std::string& p, LayerWeights& l) {
  const int64_t E = hp.n_embd, X = hp.n_expert, F = hp.n_ff_exp;
  l.ffn_gate_inp = b.matrix(p + "ffn_gate_inp.weight", E, X);
  if (file.find_tensor(p + "ffn_gate_up_exps.weight")) {
    l.ffn_up_exps = b.matrix3(p + "ffn_gate_up_exps.weight", E, 2 * F, X);
    l.gate_up_fused = true;
  } else {
    // The llama and granite loaders allow experts without a gate (act(up) alone).
    const bool gate_optional = hp.arch == Arch::kLlama || hp.arch == Arch::kGranite || hp.arch == Arch::kGraniteHybrid;
    l.ffn_gate_exps = b.matrix3(p + "ffn_gate_exps.weight", E, F, X, !gate_optional);
    l.ffn_up_exps = b.matrix3(p + "ffn_up_exps.weight", E, F, X);
  }
  l.ffn_down_exps = b.matrix3(p + "ffn_down_exps.weight", F, E, X);
  // The per-expert scales every loader of the reference takes when present (the fused gate|up
  // stack has none).
  if (!l.gate_up_fused) {
    l.ffn_gate_exps_s = b.vector(p + "ffn_gate_exps.scale", X, /*required=*/false);
    l.ffn_up_exps_s = b.vector(p + "ffn_up_exps.scale", X, /*required=*/false);
  }
  l.ffn_down_exps_s = b.vector(p + "ffn_down_exps.scale", X, /*required=*/false);
  if (hp.moe_beside_dense) {
    // gemma4: the router's input scale and the norms around the two halves.
    l.ffn_gate_inp_s = b.vector(p + "ffn_gate_inp.scale", E);
    l.pre_ffn_norm_2 = b.vector(p + "pre_ffw_norm_2.weight", E);
    l.post_ffn_norm_1 = b.vector(p + "post_ffw_norm_1.weight", E);
    l.post_ffn_norm_2 = b.vector(p + "post_ffw_norm_2.weight", E);
  }
  if (hp.arch == Arch::kLfm2) l.ffn_exp_probs_b = b.vector(p + "exp_probs_b.bias", X);
  if (hp.arch == Arch::kGptOss) {
    l.ffn_gate_inp_b = b.vector(p + "ffn_gate_inp.bias", X);
    l.ffn_gate_exps_b = b.floats(p + "ffn_gate_exps.bias", {F, X}, !l.gate_up_fused);
    l.ffn_up_exps_b = b.floats(p + "ffn_up_exps.bias", {F, X}, !l.gate_up_fused);
    l.ffn_down_exps_b = b.floats(p + "ffn_down_exps.bias", {E, X});
    if (l.gate_up_fused && b.status().is_ok()) {
      return unsupported("gpt-oss: fused ffn_gate_up_exps (" + p +
                         "ffn_gate_up_exps.weight) is not supported: the "
                         "reference loads separate gate and up stacks with their biases");
    }
  }
  if (hp.n_ff_shexp > 0) {
    const int64_t S = hp.n_ff_shexp;
    l.ffn_gate_shexp = b.matrix(p + "ffn_gate_shexp.weight", E, S);
    l.ffn_up_shexp = b.matrix(p + "ffn_up_shexp.weight", E, S);
    l.ffn_down_shexp = b.matrix(p + "ffn_down_shexp.weight", S, E);
    if (hp.arch == Arch::kQwen35) l.ffn_gate_inp_shexp = b.matrix(p + "ffn_gate_inp_shexp.weight", E, 1);
  }
  return b.status();
}

}  // namespace

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

Status Model::bind_decoder() {
  ModelHparams& hp = hp_;
  LOOM_ASSIGN_OR_RETURN(const gguf::TensorInfo* emb, token_embedding());
  const int64_t E = hp.n_embd, Q = hp.n_embd_q(), V = hp.n_vocab, D = hp.head_dim;
  if (hp.arch == Arch::kGraniteHybrid || hp.arch == Arch::kGranite) {
    // Optional tensors of the reference's granite loaders that loom does not compute with
    // (no Granite 3 / 4 release has them): refused by name rather than ignored.
    for (int64_t il = -1; il < hp.n_layer; ++il) {
      const std::string p = il < 0 ? "" : "blk." + std::to_string(il) + ".";
      for (const char* n : {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_qkv.bias", "attn_output.bias",
                            "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias", "rope_freqs.weight"}) {
        if (file_.find_tensor(p + n)) {
          return unsupported(hp.arch_name + ": tensor '" + p + n +
                             "' is not supported yet (biases and RoPE frequency "
                             "factors are optional in the reference and absent from Granite 3 / 4 releases)");
        }
      }
    }
  }
  Binder b(file_, owned_);
  b.embedding_and_output(E, V, w_, hp.arch == Arch::kLfm2 ? "token_embd_norm.weight" : "output_norm.weight");
  if (hp.arch == Arch::kPhi3) {
    // LongRoPE factors (Phi-3-*-128k, Phi-3.5): optional, stored as F32 (F16 converted).
    w_.rope_long = b.vector("rope_factors_long.weight", hp.n_rot / 2, /*required=*/false);
    w_.rope_short = b.vector("rope_factors_short.weight", hp.n_rot / 2, /*required=*/false);
    LOOM_RETURN_IF_ERROR(b.status());
    for (const auto& [name, f] :
         {std::pair{"rope_factors_long.weight", w_.rope_long}, std::pair{"rope_factors_short.weight", w_.rope_short}}) {
      for (int64_t i = 0; f && i < hp.n_rot / 2; ++i) {
        // A frequency divisor of zero, a negative or a non-finite one would turn RoPE into NaNs.
        if (!(f[i] > 0 && std::isfinite(f[i]))) {
          return corrupt("tensor '" + std::string(name) + "' has the non-positive or non-finite value " +
                         std::to_string(f[i]) + " at index " + std::to_string(i));
        }
      }
    }
  }
  if (hp.rope_sections[0] + hp.rope_sections[1] + hp.rope_sections[2] + hp.rope_sections[3] > 0) {
    // Interleaved M-RoPE (the reference's imrope) for text: pair i's sector i mod Σsections turns
    // with the t, h or w position (all = the token's position) when it falls in one of the first
    // three sections' interleaved slots, else with e = 0.
    const int* s = hp.rope_sections;
    const int n_sect = s[0] + s[1] + s[2] + s[3];
    std::vector<float> ff(size_t(hp.n_rot / 2), 1.0f);
    bool any = false;
    for (size_t i = 0; i < ff.size(); ++i) {
      const int sector = int(i) % n_sect;
      const bool positional = (sector % 3 == 0 && sector < 3 * s[0]) || (sector % 3 == 1 && sector < 3 * s[1]) ||
                              (sector % 3 == 2 && sector < 3 * s[2]);
      if (!positional) ff[i] = std::numeric_limits<float>::infinity(), any = true;
    }
    if (any) {
      owned_.push_back(std::move(ff));
      w_.rope_sections = owned_.back().data();
    }
  }
  if (hp.arch == Arch::kGemma3n) {
    // AltUp's stream projections: {n_embd, n_embd, n_altup - 1} tensors, one matrix per stream.
    const int64_t A = hp.n_altup;
    const TensorView proj = b.matrix3("altup_proj.weight", E, E, A - 1);
    const TensorView unembd = b.matrix3("altup_unembd_proj.weight", E, E, A - 1);
    for (int64_t k = 0; k + 1 < A && !proj.empty() && !unembd.empty(); ++k) {
      w_.altup_proj.push_back(b.rows_of(proj, k * E, E));
      w_.altup_unembd_proj.push_back(b.rows_of(unembd, k * E, E));
    }
  }
  if (hp.arch == Arch::kGemma4 || hp.arch == Arch::kGemma3n) {
    // Global layers' proportional RoPE divisors (shared by them), and the per-layer token
    // embeddings: a table of n_layer slices per token, and a projection of the embedding into them.
    w_.rope_freqs = b.vector("rope_freqs.weight", hp.head_dim / 2, /*required=*/false);
    if (hp.n_embd_per_layer > 0) {
      const int64_t P = hp.n_embd_per_layer, PL = P * hp.n_layer;
      w_.per_layer_tok_embd = b.matrix("per_layer_token_embd.weight", PL, V);
      w_.per_layer_model_proj = b.matrix("per_layer_model_proj.weight", E, PL);
      w_.per_layer_proj_norm = b.vector("per_layer_proj_norm.weight", P);
    }
    LOOM_RETURN_IF_ERROR(b.status());
    for (int64_t i = 0; w_.rope_freqs && i < hp.head_dim / 2; ++i) {
      if (!(w_.rope_freqs[i] > 0) || std::isnan(w_.rope_freqs[i])) {
        return corrupt("tensor 'rope_freqs.weight' has the non-positive value " + std::to_string(w_.rope_freqs[i]) +
                       " at index " + std::to_string(i));
      }
    }
  }
  const bool fused_gate_up = hp.arch == Arch::kPhi3;
  w_.layers.resize(size_t(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& l = w_.layers[size_t(il)];
    const int64_t KV = hp.n_embd_kv_at(il);
    l.attn_norm = b.vector(p + "attn_norm.weight", E);
    if (hp.layer_is_recurrent(il)) {
      // A hybrid's recurrent layer: its mixer in place of attention, then the same FFN.
      switch (hp.rec_mixer) {
        case RecurrentMixer::kShortConv: LOOM_RETURN_IF_ERROR(bind_short_conv(b, hp, p, l)); break;
        case RecurrentMixer::kDeltaNet: LOOM_RETURN_IF_ERROR(bind_delta_net(b, hp, p, l)); break;
        default: LOOM_RETURN_IF_ERROR(bind_ssm_mixer(b, hp, p, l)); break;
      }
    } else if (hp.arch == Arch::kGemma4 || hp.arch == Arch::kGemma3n) {
      LOOM_RETURN_IF_ERROR(bind_gemma4_attention(b, hp, p, il, file_.find_tensor(p + "attn_qkv.weight") != nullptr, l));
    } else if (hp.attn_output_gate) {
      // qwen35: the q projection carries a gate per head ([q | gate] rows per head).
      l.wq = b.matrix(p + "attn_q.weight", E, 2 * Q);
      l.wk = b.matrix(p + "attn_k.weight", E, KV);
      l.wv = b.matrix(p + "attn_v.weight", E, KV);
      l.wo = b.matrix(p + "attn_output.weight", Q, E);
      l.q_norm = b.vector(p + "attn_q_norm.weight", D);
      l.k_norm = b.vector(p + "attn_k_norm.weight", D);
    } else {
      // phi3 always fuses q|k|v; granitehybrid may (the reference takes attn_qkv when present).
      const bool fused_qkv =
          hp.arch == Arch::kPhi3 || (hp.arch == Arch::kGraniteHybrid && file_.find_tensor(p + "attn_qkv.weight"));
      b.qkv(p, fused_qkv, E, Q, KV, l);
      l.wo = b.matrix(p + "attn_output.weight", Q, E);
      if (hp.arch == Arch::kGptOss) {
        // q/k/v biases optional (all three or none), the output's bias and the sinks required.
        l.bq = b.vector(p + "attn_q.bias", Q, /*required=*/false);
        l.bk = b.vector(p + "attn_k.bias", KV, /*required=*/l.bq != nullptr);
        l.bv = b.vector(p + "attn_v.bias", KV, /*required=*/l.bq != nullptr);
        if (b.status().is_ok() && !l.bq && (file_.find_tensor(p + "attn_k.bias") || file_.find_tensor(p + "attn_v.bias"))) {
          return unsupported("gpt-oss: " + p +
                             "attn_k.bias / attn_v.bias without attn_q.bias (loom adds the three "
                             "biases together)");
        }
        l.bo = b.vector(p + "attn_output.bias", E);
        l.attn_sinks = b.vector(p + "attn_sinks.weight", hp.n_head);
      }
      if (hp.qkv_bias) {
        l.bq = b.vector(p + "attn_q.bias", Q);
        l.bk = b.vector(p + "attn_k.bias", KV);
        l.bv = b.vector(p + "attn_v.bias", KV);
      }
      if (hp.qk_norm || hp.qk_norm_full) {
        l.q_norm = b.vector(p + "attn_q_norm.weight", hp.qk_norm_full ? Q : D);
        l.k_norm = b.vector(p + "attn_k_norm.weight", hp.qk_norm_full ? KV : D);
      }
      if (hp.post_norms) {
        l.post_attn_norm = b.vector(p + "post_attention_norm.weight", E);
        l.post_ffn_norm = b.vector(p + "post_ffw_norm.weight", E);
      }
    }
    // qwen35 and gpt-oss name the FFN's norm after attention (post_attention_norm; no norm follows
    // the FFN).
    const bool ffn_norm_post_attn = hp.arch == Arch::kQwen35 || hp.arch == Arch::kGptOss;
    l.ffn_norm = b.vector(p + (ffn_norm_post_attn ? "post_attention_norm.weight" : "ffn_norm.weight"), E);
    const int64_t F = hp.n_ff_at(il);
    const bool dense_ffn = !hp.layer_is_moe(il) || hp.moe_beside_dense;
    if (hp.layer_is_moe(il)) LOOM_RETURN_IF_ERROR(bind_moe_ffn(b, file_, hp, p, l));
    if (dense_ffn && fused_gate_up) {
      const TensorView gate_up = b.matrix(p + "ffn_up.weight", E, 2 * F);
      l.ffn_gate = b.rows_of(gate_up, 0, F);
      l.ffn_up = b.rows_of(gate_up, F, F);
    } else if (dense_ffn) {
      l.ffn_gate = b.matrix(p + "ffn_gate.weight", E, F);
      l.ffn_up = b.matrix(p + "ffn_up.weight", E, F);
    }
    if (dense_ffn) l.ffn_down = b.matrix(p + "ffn_down.weight", F, E);
    if (hp.arch == Arch::kGemma3n) {
      const int64_t A = hp.n_altup;
      l.altup_router_norm = b.vector(p + "altup_router_norm.weight", E);
      l.altup_router = b.floats(p + "altup_router.weight", {E, A});
      l.altup_predict_coef = b.floats(p + "altup_predict_coef.weight", {A, A * A});
      l.altup_correct_coef = b.floats(p + "altup_correct_coef.weight", {A, A});
      l.altup_correct_scale = b.vector(p + "altup_correct_scale.weight", E);
      const gguf::TensorInfo* ll = file_.find_tensor(p + "laurel_l.weight");
      const int64_t rank = ll ? ll->ne[1] : 64;
      if (il == 0) hp.laurel_rank = rank;
      if (rank != hp.laurel_rank || rank < 1 || rank > E) {
        return corrupt("tensor '" + p + "laurel_l.weight' has rank " + std::to_string(rank) + " (layer 0's is " +
                       std::to_string(hp.laurel_rank) + ")");
      }
      l.laurel_l = b.matrix(p + "laurel_l.weight", E, rank);
      l.laurel_r = b.matrix(p + "laurel_r.weight", rank, E);
      l.laurel_post_norm = b.vector(p + "laurel_post_norm.weight", E);
    }
    if (hp.n_embd_per_layer > 0) {
      l.pl_inp_gate = b.matrix(p + "inp_gate.weight", E, hp.n_embd_per_layer);
      l.pl_proj = b.matrix(p + "proj.weight", hp.n_embd_per_layer, E);
      l.pl_post_norm = b.vector(p + "post_norm.weight", E);
    }
  }
  LOOM_RETURN_IF_ERROR(b.status());
  w_.experts_packable = hp.n_expert > 0 && hp.n_ff_exp % quant::kPackRows == 0 && E % quant::kPackRows == 0;
  // A decode step reads every matrix once but only one embedding row (unless tied to the output),
  // one row of the per-layer embeddings and n_expert_used of each layer's experts.
  decode_weight_bytes_ = w_.tied_output ? b.bytes() : b.bytes() - emb->nbytes + w_.tok_embd.row_bytes;
  for (const LayerWeights& l : w_.layers) {
    if (hp.n_expert == 0) break;  // dense: no stacks
    for (const TensorView* t : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}) {
      const uint64_t stack = uint64_t(t->rows) * t->row_bytes;
      decode_weight_bytes_ -= stack - stack / uint64_t(hp.n_expert) * uint64_t(hp.n_expert_used);
    }
  }
  if (!w_.per_layer_tok_embd.empty()) {
    decode_weight_bytes_ -= w_.per_layer_tok_embd.row_bytes * uint64_t(w_.per_layer_tok_embd.rows - 1);
  }
  n_params_ = b.params();
  return Status::ok();
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
  Binder b(file_, owned_);
  b.embedding_and_output(E, V, w_);
  w_.layers.resize(size_t(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& l = w_.layers[size_t(il)];
    l.attn_norm = b.vector(p + "attn_norm.weight", E);
    LOOM_RETURN_IF_ERROR(bind_ssm_mixer(b, hp, p, l));
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
  Binder b(file_, owned_);
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
  Binder b(file_, owned_);
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

}  // namespace loom
