#include "model/hparams.h"

#include <algorithm>
#include <cmath>

namespace loom::model {
namespace {

// "<arch>.<key>" as a positive integer within [lo, hi].
Expected<int64_t> arch_int(const gguf::GgufFile& f, const std::string& arch, const char* key,
                           std::optional<int64_t> fallback, int64_t lo, int64_t hi) {
  const std::string full = arch + "." + key;
  Expected<int64_t> v = fallback ? f.get_int_or(full, *fallback) : f.get_int(full);
  if (!v) return v.status();
  if (*v < lo || *v > hi) {
    return corrupt("metadata " + full + " = " + std::to_string(*v) + " is out of range [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
  }
  return v;
}

// The selective state-space sizes (<arch>.ssm.*) of Mamba-1 (mamba), Mamba-2 (mamba2) and the
// Mamba-2 layers of hybrids (granitehybrid).
Status read_ssm_hparams(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  LOOM_ASSIGN_OR_RETURN(hp.ssm_d_conv, arch_int(f, a, "ssm.conv_kernel", std::nullopt, 2, 64));
  LOOM_ASSIGN_OR_RETURN(hp.ssm_d_inner, arch_int(f, a, "ssm.inner_size", std::nullopt, 1, 1 << 21));
  LOOM_ASSIGN_OR_RETURN(hp.ssm_d_state, arch_int(f, a, "ssm.state_size", std::nullopt, 1, 256));
  LOOM_ASSIGN_OR_RETURN(hp.ssm_dt_rank, arch_int(f, a, "ssm.time_step_rank", std::nullopt, 1, 1 << 16));
  LOOM_ASSIGN_OR_RETURN(hp.ssm_dt_b_c_rms, f.get_bool_or(a + ".ssm.dt_b_c_rms", false));
  if (hp.is_mamba2()) {
    LOOM_ASSIGN_OR_RETURN(hp.ssm_n_group, arch_int(f, a, "ssm.group_count", std::nullopt, 1, 1 << 16));
    const int64_t nh = hp.ssm_dt_rank, ng = hp.ssm_n_group;
    if (hp.ssm_d_inner % nh != 0 || nh % ng != 0) {
      return corrupt(a + ": ssm.inner_size " + std::to_string(hp.ssm_d_inner) + ", heads (ssm.time_step_rank) " +
                     std::to_string(nh) + " and ssm.group_count " + std::to_string(ng) +
                     " must divide: inner size by heads, heads by groups");
    }
  }
  if ((hp.arch == Arch::kMamba || hp.arch == Arch::kGraniteHybrid) && hp.ssm_d_inner != 2 * hp.n_embd) {
    // The reference loads only an expansion factor of 2 (Mamba-1, granitehybrid).
    return unsupported(a + ": ssm.inner_size " + std::to_string(hp.ssm_d_inner) + " is not 2 * embedding_length " +
                       std::to_string(2 * hp.n_embd) + " (only an expansion factor of 2 is supported)");
  }
  return Status::ok();
}

// Mamba-1 and -2: no attention, no feed-forward (their keys are 0 in converted files); the SSM sizes.
Expected<ModelHparams> read_mamba_hparams(const gguf::GgufFile& f, ModelHparams hp) {
  const std::string& a = hp.arch_name;
  constexpr int64_t kBig = int64_t(1) << 31;
  LOOM_ASSIGN_OR_RETURN(hp.n_embd, arch_int(f, a, "embedding_length", std::nullopt, 1, 1 << 20));
  LOOM_ASSIGN_OR_RETURN(hp.n_layer, arch_int(f, a, "block_count", std::nullopt, 1, 4096));
  LOOM_ASSIGN_OR_RETURN(hp.n_ctx_train, arch_int(f, a, "context_length", 1 << 20, 1, kBig));
  LOOM_RETURN_IF_ERROR(read_ssm_hparams(f, hp));
  LOOM_ASSIGN_OR_RETURN(double eps, f.get_float_or(a + ".attention.layer_norm_rms_epsilon", 1e-5));
  if (!(eps > 0 && eps < 1)) return corrupt("layer_norm_rms_epsilon out of range");
  hp.rms_eps = float(eps);
  LOOM_ASSIGN_OR_RETURN(hp.n_vocab, arch_int(f, a, "vocab_size", 0, 0, kBig));
  LOOM_ASSIGN_OR_RETURN(int64_t pooling, arch_int(f, a, "pooling_type", -1, -1, 4));
  hp.pooling_type = int(pooling);
  // No attention: head counts stay 0, positions only order tokens.
  hp.n_head = hp.n_head_kv = hp.head_dim = hp.n_rot = 0;
  hp.n_ff = 0;
  hp.causal = true;
  return hp;
}

// <arch>.attention.head_count_kv: one count for every layer (default head_count), or one per
// layer. Hybrids mark their recurrent layers with 0; other families may give an array of equal
// counts. n_head_kv is the largest count.
Status read_head_count_kv(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string key = hp.arch_name + ".attention.head_count_kv";
  Expected<const gguf::Array*> arr = f.get_array(key);
  if (!arr) {
    LOOM_ASSIGN_OR_RETURN(hp.n_head_kv, arch_int(f, hp.arch_name, "attention.head_count_kv", hp.n_head, 1, hp.n_head));
    if (hp.n_head % hp.n_head_kv != 0) {
      return corrupt("head_count " + std::to_string(hp.n_head) + " is not a multiple of head_count_kv " +
                     std::to_string(hp.n_head_kv));
    }
    return Status::ok();
  }
  const gguf::Array& a = **arr;
  if (!a.is_numeric() || a.count != uint64_t(hp.n_layer)) {
    return corrupt(key + " must be a number or an array of " + std::to_string(hp.n_layer) + " numbers (one per layer)");
  }
  std::vector<int64_t> per_layer(size_t(hp.n_layer));
  bool uniform = true;
  hp.n_head_kv = 0;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const int64_t h = a.int_at(uint64_t(il));
    if (h < 0 || h > hp.n_head || (h > 0 && hp.n_head % h != 0)) {
      return corrupt(key + "[" + std::to_string(il) + "] = " + std::to_string(h) + " is not a divisor of head_count " +
                     std::to_string(hp.n_head) + " (or 0 for a recurrent layer)");
    }
    if (h == 0 && hp.arch != Arch::kGraniteHybrid && hp.arch != Arch::kLfm2) {
      return unsupported(key + "[" + std::to_string(il) +
                         "] = 0 (a layer without attention) is only supported for "
                         "hybrid architectures (granitehybrid, lfm2)");
    }
    per_layer[size_t(il)] = h;
    uniform = uniform && h == per_layer[0];
    hp.n_head_kv = std::max(hp.n_head_kv, h);
  }
  if (hp.n_head_kv == 0) {
    return unsupported(hp.arch_name + ": every layer is recurrent (" + key +
                       " is all 0); a model without attention "
                       "layers is not supported as a hybrid (mamba2 files run as such)");
  }
  if (!uniform) {
    hp.recurrent_layer.assign(size_t(hp.n_layer), 0);
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.recurrent_layer[size_t(il)] = per_layer[size_t(il)] == 0;
    hp.n_head_kv_layer = std::move(per_layer);
  }
  return Status::ok();
}

// A float key that must be finite when present (Granite's multipliers); fallback when absent.
Expected<float> finite_float(const gguf::GgufFile& f, const std::string& key, double fallback) {
  LOOM_ASSIGN_OR_RETURN(double v, f.get_float_or(key, fallback));
  if (!std::isfinite(v)) return corrupt("metadata " + key + " is not finite");
  return float(v);
}

// qwen35's Gated DeltaNet layers: <arch>.ssm.* give the conv taps, the value width d_inner in
// time_step_rank value heads, the key heads (group_count) of d_state channels; the layer pattern is
// attention.recurrent_layers (one flag per block, MTP blocks included) or every
// full_attention_interval-th layer attends (default 4, the reference's rule).
Status read_delta_net_hparams(const gguf::GgufFile& f, ModelHparams& hp, int64_t n_block) {
  const std::string& a = hp.arch_name;
  LOOM_ASSIGN_OR_RETURN(hp.ssm_d_conv, arch_int(f, a, "ssm.conv_kernel", std::nullopt, 2, 64));
  LOOM_ASSIGN_OR_RETURN(hp.ssm_d_inner, arch_int(f, a, "ssm.inner_size", std::nullopt, 1, 1 << 20));
  LOOM_ASSIGN_OR_RETURN(hp.ssm_d_state, arch_int(f, a, "ssm.state_size", std::nullopt, 1, 1024));
  LOOM_ASSIGN_OR_RETURN(hp.ssm_dt_rank, arch_int(f, a, "ssm.time_step_rank", std::nullopt, 1, 1 << 12));
  LOOM_ASSIGN_OR_RETURN(hp.ssm_n_group, arch_int(f, a, "ssm.group_count", std::nullopt, 1, 1 << 12));
  const int64_t hv = hp.ssm_dt_rank, hk = hp.ssm_n_group;
  if (hp.ssm_d_inner % hv != 0 || hp.ssm_d_inner / hv != hp.ssm_d_state || hv % hk != 0) {
    return corrupt(a + ": ssm.inner_size " + std::to_string(hp.ssm_d_inner) + " must be ssm.time_step_rank " +
                   std::to_string(hv) + " value heads of ssm.state_size " + std::to_string(hp.ssm_d_state) +
                   " channels (key and value heads are equally wide), and the value heads a multiple of the "
                   "ssm.group_count " +
                   std::to_string(hk) + " key heads");
  }
  hp.recurrent_layer.assign(size_t(hp.n_layer), 0);
  const std::string rkey = a + ".attention.recurrent_layers";
  if (f.has(rkey)) {
    LOOM_ASSIGN_OR_RETURN(const gguf::Array* arr, f.get_array(rkey));
    if (!(arr->is_numeric() || arr->elem_type == gguf::ValueType::kBool) || arr->count != uint64_t(n_block)) {
      return corrupt(rkey + " must be an array of " + std::to_string(n_block) + " flags (one per block)");
    }
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.recurrent_layer[size_t(il)] = arr->int_at(uint64_t(il)) != 0;
  } else {
    LOOM_ASSIGN_OR_RETURN(int64_t every, arch_int(f, a, "full_attention_interval", 4, 1, 1 << 16));
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.recurrent_layer[size_t(il)] = (il + 1) % every != 0;
  }
  const std::string skey = a + ".rope.dimension_sections";
  if (f.has(skey) && a != "qwen3next") {  // qwen3next rotates plainly (the reference reads no sections)
    LOOM_ASSIGN_OR_RETURN(const gguf::Array* arr, f.get_array(skey));
    if (!arr->is_numeric() || arr->count < 3 || arr->count > 4) return corrupt(skey + " must be an array of 3 or 4 numbers");
    int64_t sum = 0;
    for (uint64_t i = 0; i < arr->count; ++i) {
      const int64_t v = arr->int_at(i);
      if (v < 0 || v > hp.n_rot)
        return corrupt(skey + "[" + std::to_string(i) + "] = " + std::to_string(v) + " is out of range");
      hp.rope_sections[i] = int(v);
      sum += v;
    }
    if (sum == 0 || sum > hp.n_rot / 2) {
      return corrupt(skey + " must add up to between 1 and rope.dimension_count / 2 = " + std::to_string(hp.n_rot / 2));
    }
  }
  return Status::ok();
}

// gemma4: the per-layer sliding pattern (attention.sliding_window_pattern, required), the window,
// the sliding layers' head size, rotated dims and RoPE base, the shared-KV layers (the last
// attention.shared_kv_layers layers read the K/V of the last sliding or global layer before them,
// the reference's rule), per-layer embeddings, the final soft-cap; attention scale 1 (q and k are
// RMS-normed instead), GeGLU, post-norms, a V norm.
Status read_gemma4_hparams(const gguf::GgufFile& f, ModelHparams& hp, int64_t n_block) {
  const std::string& a = hp.arch_name;
  constexpr int64_t kBig = int64_t(1) << 31;
  hp.ffn_act = FfnAct::kGelu;
  hp.gelu_f16_table = true;
  hp.embd_scale = std::sqrt(float(hp.n_embd));
  hp.post_norms = true;
  hp.qk_norm = true;
  hp.v_norm = true;
  hp.attn_scale = 1.0f;
  const std::string pkey = a + ".attention.sliding_window_pattern";
  LOOM_ASSIGN_OR_RETURN(const gguf::Array* pat, f.get_array(pkey));
  if (!(pat->is_numeric() || pat->elem_type == gguf::ValueType::kBool) || pat->count != uint64_t(n_block)) {
    return corrupt(pkey + " must be an array of " + std::to_string(n_block) + " flags (one per layer)");
  }
  hp.swa_layer.resize(size_t(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) hp.swa_layer[size_t(il)] = pat->int_at(uint64_t(il)) != 0;
  LOOM_ASSIGN_OR_RETURN(int64_t swa, arch_int(f, a, "attention.sliding_window", std::nullopt, 1, kBig));
  hp.swa_window = int(swa);
  hp.swa_pattern = 0;
  LOOM_ASSIGN_OR_RETURN(hp.head_dim_swa, arch_int(f, a, "attention.key_length_swa", hp.head_dim, 1, 1 << 14));
  LOOM_ASSIGN_OR_RETURN(int64_t v_swa, arch_int(f, a, "attention.value_length_swa", hp.head_dim_swa, 1, 1 << 14));
  if (v_swa != hp.head_dim_swa) return unsupported("gemma4: attention.value_length_swa differs from key_length_swa");
  if (hp.head_dim_swa > hp.head_dim) {
    return unsupported("gemma4: sliding layers' heads (" + std::to_string(hp.head_dim_swa) +
                       ") wider than the global layers' (" + std::to_string(hp.head_dim) + ")");
  }
  LOOM_ASSIGN_OR_RETURN(hp.n_rot_swa,
                        arch_int(f, a, "rope.dimension_count_swa", std::min(hp.n_rot, hp.head_dim_swa), 0, hp.head_dim_swa));
  if (hp.n_rot_swa % 2 != 0) return corrupt("rope.dimension_count_swa must be even");
  LOOM_ASSIGN_OR_RETURN(double base_swa, f.get_float_or(a + ".rope.freq_base_swa", 10000.0));
  if (!(base_swa > 0)) return corrupt("rope.freq_base_swa must be positive");
  hp.rope_freq_base_swa = float(base_swa);
  LOOM_ASSIGN_OR_RETURN(hp.n_embd_per_layer, arch_int(f, a, "embedding_length_per_layer_input", 0, 0, 1 << 16));
  LOOM_ASSIGN_OR_RETURN(double fcap, f.get_float_or(a + ".final_logit_softcapping", 0.0));
  if (fcap < 0 || !std::isfinite(fcap)) return corrupt("final_logit_softcapping must be finite and not negative");
  hp.final_softcap = float(fcap);
  LOOM_ASSIGN_OR_RETURN(int64_t n_shared, arch_int(f, a, "attention.shared_kv_layers", 0, 0, hp.n_layer));
  if (n_shared > 0) {
    const int64_t from = hp.n_layer - n_shared;  // the first layer without K/V of its own
    if (from < 2)
      return corrupt(a + ".attention.shared_kv_layers " + std::to_string(n_shared) + " leaves fewer than 2 layers with K/V");
    hp.kv_reuse.assign(size_t(hp.n_layer), -1);
    for (int64_t il = from; il < hp.n_layer; ++il) {
      const int64_t src = from - (hp.is_swa_layer(il) ? 2 : 1);
      if (hp.is_swa_layer(src) != hp.is_swa_layer(il)) {
        return corrupt(a + ": shared-KV layer " + std::to_string(il) + " would read layer " + std::to_string(src) +
                       ", which is a " + (hp.is_swa_layer(src) ? "sliding" : "global") + " layer (" + pkey +
                       " must end its K/V layers with a sliding then a global layer)");
      }
      hp.kv_reuse[size_t(il)] = int(src);
    }
  }
  return Status::ok();
}

// gemma3n: Gemma 3's attention (q/k norms with weights, V norm, scale 1, a sliding layer pattern,
// 4 sliding per global by default) and the reference's fixed AltUp / Laurel / per-layer sizes: 4
// streams (the first active), per-layer inputs of 256, activation sparsity on the first 10 layers,
// K/V of their own on the first 20 layers only (later ones read the last sliding / global of those).
Status read_gemma3n_hparams(const gguf::GgufFile& f, ModelHparams& hp, int64_t n_block) {
  const std::string& a = hp.arch_name;
  constexpr int64_t kBig = int64_t(1) << 31;
  hp.ffn_act = FfnAct::kGelu;
  hp.gelu_f16_table = true;
  hp.embd_scale = std::sqrt(float(hp.n_embd));
  hp.post_norms = true;
  hp.qk_norm = true;
  hp.v_norm = true;
  hp.attn_scale = 1.0f;
  hp.n_altup = 4;
  hp.n_embd_per_layer = 256;
  hp.n_layer_sparse = 10;
  const std::string pkey = a + ".attention.sliding_window_pattern";
  hp.swa_layer.assign(size_t(hp.n_layer), 0);
  Expected<const gguf::Array*> pat = f.get_array(pkey);
  if (pat) {
    if (!((*pat)->is_numeric() || (*pat)->elem_type == gguf::ValueType::kBool) || (*pat)->count != uint64_t(n_block)) {
      return corrupt(pkey + " must be a number or an array of " + std::to_string(n_block) + " flags");
    }
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.swa_layer[size_t(il)] = (*pat)->int_at(uint64_t(il)) != 0;
  } else {
    LOOM_ASSIGN_OR_RETURN(int64_t n_pattern, arch_int(f, a, "attention.sliding_window_pattern", 5, 0, 1 << 16));
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      hp.swa_layer[size_t(il)] = n_pattern == 0 || il % n_pattern < n_pattern - 1;
    }
  }
  LOOM_ASSIGN_OR_RETURN(int64_t swa, arch_int(f, a, "attention.sliding_window", std::nullopt, 1, kBig));
  hp.swa_window = int(swa);
  LOOM_ASSIGN_OR_RETURN(double base_swa, f.get_float_or(a + ".rope.freq_base_swa", 10000.0));
  if (!(base_swa > 0)) return corrupt("rope.freq_base_swa must be positive");
  hp.rope_freq_base_swa = float(base_swa);
  LOOM_ASSIGN_OR_RETURN(double fcap, f.get_float_or(a + ".final_logit_softcapping", 30.0));
  if (fcap < 0 || !std::isfinite(fcap)) return corrupt("final_logit_softcapping must be finite and not negative");
  hp.final_softcap = float(fcap);
  constexpr int64_t kKvFromStart = 20;
  if (hp.n_layer > kKvFromStart) {
    hp.kv_reuse.assign(size_t(hp.n_layer), -1);
    for (int64_t il = kKvFromStart; il < hp.n_layer; ++il) {
      const int64_t src = kKvFromStart - (hp.is_swa_layer(il) ? 2 : 1);
      if (hp.is_swa_layer(src) != hp.is_swa_layer(il)) {
        return corrupt(a + ": layer " + std::to_string(il) + " would read the K/V of layer " + std::to_string(src) +
                       ", a layer of the other kind (" + pkey + " must make layers 18 and 19 sliding and global)");
      }
      hp.kv_reuse[size_t(il)] = int(src);
    }
  }
  return Status::ok();
}

// gpt-oss: sliding and full attention layers in turn (attention.sliding_window_pattern: a flag per
// layer, or a period n whose first n - 1 layers of each period slide; default 2, so the even layers
// slide and the odd ones see everything), the window (required), the sliding layers' RoPE base
// (rope.freq_base_swa, default the others'; the file's scaling, YaRN included, applies to both),
// heads as wide as the rotated dims (the reference sizes q/k/v by rope.dimension_count), the
// clamped SwiGLU of the experts.
Status read_gpt_oss_hparams(const gguf::GgufFile& f, ModelHparams& hp, int64_t n_block) {
  const std::string& a = hp.arch_name;
  constexpr int64_t kBig = int64_t(1) << 31;
  hp.ffn_act = FfnAct::kSwigluOai;
  if (hp.n_rot != hp.head_dim) {
    return unsupported(a + ": rope.dimension_count " + std::to_string(hp.n_rot) + " differs from the head size " +
                       std::to_string(hp.head_dim) + " (the reference takes the rotated dims as the head size)");
  }
  LOOM_ASSIGN_OR_RETURN(int64_t swa, arch_int(f, a, "attention.sliding_window", std::nullopt, 1, kBig));
  hp.swa_window = int(swa);
  hp.swa_pattern = 0;
  hp.swa_layer.assign(size_t(hp.n_layer), 0);
  const std::string pkey = a + ".attention.sliding_window_pattern";
  if (Expected<const gguf::Array*> pat = f.get_array(pkey); pat) {
    if (!((*pat)->is_numeric() || (*pat)->elem_type == gguf::ValueType::kBool) || (*pat)->count != uint64_t(n_block)) {
      return corrupt(pkey + " must be a number or an array of " + std::to_string(n_block) + " flags (one per layer)");
    }
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.swa_layer[size_t(il)] = (*pat)->int_at(uint64_t(il)) != 0;
  } else {
    LOOM_ASSIGN_OR_RETURN(int64_t n_pattern, arch_int(f, a, "attention.sliding_window_pattern", 2, 0, 1 << 16));
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      hp.swa_layer[size_t(il)] = n_pattern == 0 || il % n_pattern < n_pattern - 1;
    }
  }
  LOOM_ASSIGN_OR_RETURN(double base_swa, f.get_float_or(a + ".rope.freq_base_swa", double(hp.rope_freq_base)));
  if (!(base_swa > 0) || !std::isfinite(base_swa)) return corrupt(a + ".rope.freq_base_swa must be positive");
  hp.rope_freq_base_swa = float(base_swa);
  return Status::ok();
}

// <arch>.expert_used_count: a number, or one per block (the reference allows it; loom takes one
// count for every layer), between 1 and expert_count.
Status read_expert_used_count(const gguf::GgufFile& f, ModelHparams& hp, int64_t n_block) {
  const std::string& a = hp.arch_name;
  const std::string ukey = a + ".expert_used_count";
  if (Expected<const gguf::Array*> arr = f.get_array(ukey); arr) {
    if (!(*arr)->is_numeric() || (*arr)->count != uint64_t(n_block) || n_block == 0) {
      return corrupt(ukey + " must be a number or an array of " + std::to_string(n_block) + " numbers");
    }
    hp.n_expert_used = (*arr)->int_at(0);
    for (uint64_t i = 1; i < (*arr)->count; ++i) {
      if ((*arr)->int_at(i) != hp.n_expert_used)
        return unsupported(ukey + ": a different expert count per layer is not supported");
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(hp.n_expert_used, arch_int(f, a, "expert_used_count", std::nullopt, 0, 1 << 12));
  }
  if (hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert) {
    return corrupt(ukey + " " + std::to_string(hp.n_expert_used) + " must be between 1 and expert_count " +
                   std::to_string(hp.n_expert));
  }
  return Status::ok();
}

// The experts' width: qwen3moe / qwen35moe default to n_ff / n_expert_used, lfm2moe, gpt-oss and
// gemma4 require the key; the llama, olmoe and granite loaders size experts by feed_forward_length.
Status read_expert_width(const gguf::GgufFile& f, ModelHparams& hp, int64_t n_block) {
  const std::string& a = hp.arch_name;
  const bool own_width =
      a == "qwen3moe" || a == "qwen35moe" || a == "qwen3next" || a == "lfm2moe" || a == "gpt-oss" || a == "gemma4";
  if (!own_width) {
    hp.n_ff_exp = hp.n_ff;
    return Status::ok();
  }
  const std::string wkey = a + ".expert_feed_forward_length";
  if (Expected<const gguf::Array*> arr = f.get_array(wkey); arr) {
    // Per layer (gemma4's loader reads a number or an array); loom takes one width for every layer.
    if (!(*arr)->is_numeric() || (*arr)->count != uint64_t(n_block)) {
      return corrupt(wkey + " must be a number or an array of " + std::to_string(n_block) + " numbers");
    }
    hp.n_ff_exp = (*arr)->int_at(0);
    for (uint64_t i = 1; i < (*arr)->count; ++i) {
      if ((*arr)->int_at(i) != hp.n_ff_exp)
        return unsupported(wkey + ": a different expert width per layer is not supported");
    }
    if (hp.n_ff_exp > (1 << 24)) return corrupt(wkey + " is out of range");
  } else if (a == "lfm2moe" || a == "gpt-oss" || a == "gemma4") {
    LOOM_ASSIGN_OR_RETURN(hp.n_ff_exp, arch_int(f, a, "expert_feed_forward_length", std::nullopt, 1, 1 << 24));
  } else {
    LOOM_ASSIGN_OR_RETURN(hp.n_ff_exp, arch_int(f, a, "expert_feed_forward_length", hp.n_ff / hp.n_expert_used, 1, 1 << 24));
  }
  return Status::ok();
}

// The reference's per-architecture expert rules: the shared expert's width, lfm2moe's gating and
// leading dense blocks, gpt-oss's and gemma4's fixed choices, whether the chosen weights are normalised.
Status read_expert_rules(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  const bool gated_shexp = a == "qwen35moe" || a == "qwen3next";
  if (gated_shexp || a == "llama" || hp.arch == Arch::kGranite || hp.arch == Arch::kGraniteHybrid) {
    // qwen35moe and qwen3next always have a shared expert (n_ff wide unless given); the others only
    // with the key.
    LOOM_ASSIGN_OR_RETURN(hp.n_ff_shexp,
                          arch_int(f, a, "expert_shared_feed_forward_length", gated_shexp ? hp.n_ff : 0, 0, 1 << 24));
    if (gated_shexp && hp.n_ff_shexp == 0) hp.n_ff_shexp = hp.n_ff;  // the reference's 0: n_ff
  }
  if (a == "lfm2moe") {
    LOOM_ASSIGN_OR_RETURN(hp.n_layer_dense_lead, arch_int(f, a, "leading_dense_block_count", 0, 0, hp.n_layer));
    LOOM_ASSIGN_OR_RETURN(int64_t gating, arch_int(f, a, "expert_gating_func", std::nullopt, 0, 16));
    if (gating != 1 && gating != 2) {
      return unsupported(a + ".expert_gating_func " + std::to_string(gating) + " is not supported (1: softmax, 2: sigmoid)");
    }
    hp.expert_gating = ExpertGating(gating);
  }
  if (a == "gpt-oss") {
    // The reference's fixed choice: experts picked by the raw (biased) router logits, weighed by a
    // softmax over the chosen ones, not renormalised.
    hp.expert_gating = ExpertGating::kSoftmaxChosen;
    hp.n_ff = std::max(hp.n_ff, hp.n_ff_exp);  // feed_forward_length is optional there
  }
  // gemma4 (the reference's fixed choices): softmax over every expert, weights normalised, and the
  // dense FFN beside the experts in every layer.
  if (a == "gemma4") hp.moe_beside_dense = true;
  hp.expert_weights_norm = a != "olmoe" && a != "gpt-oss";  // the reference's fixed choice per architecture
  return Status::ok();
}

// The mixture-of-experts keys, with the reference's per-architecture rules: which architectures
// take experts, the expert width's default, the gating, whether the chosen weights are normalised.
Status read_moe_hparams(const gguf::GgufFile& f, ModelHparams& hp, int64_t n_block) {
  const std::string& a = hp.arch_name;
  LOOM_ASSIGN_OR_RETURN(hp.n_expert, arch_int(f, a, "expert_count", 0, 0, 1 << 12));
  const bool moe_name = a == "qwen3moe" || a == "qwen35moe" || a == "qwen3next" || a == "lfm2moe" || a == "granitemoe" ||
                        a == "olmoe" || a == "gpt-oss";
  if (hp.n_expert == 0) {
    if (moe_name) return corrupt(a + ": expert_count is missing or 0 (a mixture-of-experts architecture needs experts)");
    return Status::ok();
  }
  const bool takes_experts = moe_name || a == "llama" || a == "granite" || a == "granitehybrid" || a == "gemma4";
  if (!takes_experts) {
    return unsupported(a + ": a mixture-of-experts feed-forward (expert_count " + std::to_string(hp.n_expert) +
                       ") is not supported for this architecture");
  }
  LOOM_RETURN_IF_ERROR(read_expert_used_count(f, hp, n_block));
  if (f.has(a + ".expert_group_count")) {
    LOOM_ASSIGN_OR_RETURN(int64_t groups, arch_int(f, a, "expert_group_count", 0, 0, 1 << 12));
    if (groups > 1)
      return unsupported(a + ": grouped expert selection (expert_group_count " + std::to_string(groups) +
                         ") is not supported");
  }
  LOOM_RETURN_IF_ERROR(read_expert_width(f, hp, n_block));
  if (hp.n_ff_exp < 1) return corrupt(a + ": the experts' feed-forward width is 0");
  return read_expert_rules(f, hp);
}

// The architecture's family (its forward pass and traits), RoPE mode and recurrent mixer.
Status identify_family(ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  struct Family {
    const char* name;
    Arch arch;
    ops::RopeMode rope;
  };
  static constexpr Family kFamilies[] = {
      {"llama", Arch::kLlama, ops::RopeMode::kNormal},
      {"qwen2", Arch::kQwen2, ops::RopeMode::kNeox},
      {"qwen3", Arch::kQwen3, ops::RopeMode::kNeox},
      {"phi3", Arch::kPhi3, ops::RopeMode::kNeox},
      {"gemma", Arch::kGemma, ops::RopeMode::kNeox},
      {"gemma2", Arch::kGemma2, ops::RopeMode::kNeox},
      {"gemma3", Arch::kGemma3, ops::RopeMode::kNeox},
      {"bert", Arch::kBert, ops::RopeMode::kNormal},
      {"nomic-bert", Arch::kNomicBert, ops::RopeMode::kNeox},
      {"mamba", Arch::kMamba, ops::RopeMode::kNormal},
      {"mamba2", Arch::kMamba2, ops::RopeMode::kNormal},
      {"t5", Arch::kT5, ops::RopeMode::kNormal},
      {"t5encoder", Arch::kT5Encoder, ops::RopeMode::kNormal},
      {"granitehybrid", Arch::kGraniteHybrid, ops::RopeMode::kNormal},
      {"granite", Arch::kGranite, ops::RopeMode::kNormal},
      {"smollm3", Arch::kSmolLM3, ops::RopeMode::kNormal},
      {"lfm2", Arch::kLfm2, ops::RopeMode::kNeox},
      {"qwen35", Arch::kQwen35, ops::RopeMode::kNeox},
      {"gemma4", Arch::kGemma4, ops::RopeMode::kNeox},
      {"mistral3", Arch::kMistral3, ops::RopeMode::kNormal},
      {"gemma3n", Arch::kGemma3n, ops::RopeMode::kNeox},
      // Mixture-of-experts variants: their dense family's traits plus the expert FFN.
      {"qwen3moe", Arch::kQwen3, ops::RopeMode::kNeox},
      {"qwen35moe", Arch::kQwen35, ops::RopeMode::kNeox},
      {"lfm2moe", Arch::kLfm2, ops::RopeMode::kNeox},
      {"granitemoe", Arch::kGranite, ops::RopeMode::kNormal},
      {"olmoe", Arch::kLlama, ops::RopeMode::kNeox},
      {"gpt-oss", Arch::kGptOss, ops::RopeMode::kNeox},
      {"qwen3next", Arch::kQwen35, ops::RopeMode::kNeox},
  };
  const Family* fam = nullptr;
  for (const Family& f : kFamilies) {
    if (a == f.name) fam = &f;
  }
  if (!fam) {
    return unsupported("architecture '" + a +
                       "' is not supported (supported: llama, qwen2, qwen3, qwen3moe, qwen3next, qwen35, qwen35moe, phi3, "
                       "gemma, gemma2, gemma3, gemma3n, gemma4, gpt-oss, bert, nomic-bert, mamba, mamba2, t5, t5encoder, "
                       "granite, granitemoe, granitehybrid, lfm2, lfm2moe, mistral3, olmoe, smollm3)");
  }
  hp.arch = fam->arch;
  hp.rope_mode = fam->rope;
  switch (hp.arch) {
    case Arch::kMamba: hp.rec_mixer = RecurrentMixer::kMamba1; break;
    case Arch::kMamba2:
    case Arch::kGraniteHybrid: hp.rec_mixer = RecurrentMixer::kMamba2; break;
    case Arch::kLfm2: hp.rec_mixer = RecurrentMixer::kShortConv; break;
    case Arch::kQwen35: hp.rec_mixer = RecurrentMixer::kDeltaNet; break;
    default: break;
  }
  return Status::ok();
}

// The sizes of the stack: embedding width, blocks (less qwen35's multi-token-prediction blocks,
// which follow the trunk and are not run), heads, and the FFN widths (one, or one per layer:
// gemma4's wider MLP on its shared-KV layers, n_ff the largest). Returns the block count.
Expected<int64_t> read_stack_sizes(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  LOOM_ASSIGN_OR_RETURN(hp.n_embd, arch_int(f, a, "embedding_length", std::nullopt, 1, 1 << 20));
  LOOM_ASSIGN_OR_RETURN(const int64_t n_block, arch_int(f, a, "block_count", std::nullopt, 1, 4096));
  LOOM_ASSIGN_OR_RETURN(hp.n_layer_nextn, arch_int(f, a, "nextn_predict_layers", 0, 0, n_block - 1));
  hp.n_layer = n_block - hp.n_layer_nextn;
  LOOM_ASSIGN_OR_RETURN(hp.n_head, arch_int(f, a, "attention.head_count", std::nullopt, 1, 1 << 16));
  LOOM_RETURN_IF_ERROR(read_head_count_kv(f, hp));
  if (Expected<const gguf::Array*> ffa = f.get_array(a + ".feed_forward_length"); ffa) {
    const gguf::Array& arr = **ffa;
    if (!arr.is_numeric() || arr.count != uint64_t(n_block)) {
      return corrupt(a + ".feed_forward_length must be a number or an array of " + std::to_string(n_block) + " numbers");
    }
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const int64_t v = arr.int_at(uint64_t(il));
      if (v < 1 || v > (1 << 24)) return corrupt(a + ".feed_forward_length[" + std::to_string(il) + "] is out of range");
      hp.n_ff_layer.push_back(v);
      hp.n_ff = std::max(hp.n_ff, v);
    }
  } else {
    // gpt-oss's FFN is all experts: the key is optional there (n_ff then follows the experts' width).
    const std::optional<int64_t> ff_default = hp.arch == Arch::kGptOss ? std::optional<int64_t>(1) : std::nullopt;
    LOOM_ASSIGN_OR_RETURN(hp.n_ff, arch_int(f, a, "feed_forward_length", ff_default, 1, 1 << 24));
  }
  return n_block;
}

// The training context, the head size (key_length; value_length must match) and the rotated dims.
Status read_head_sizes(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  constexpr int64_t kBig = int64_t(1) << 31;
  LOOM_ASSIGN_OR_RETURN(hp.n_ctx_train, arch_int(f, a, "context_length", 2048, 1, kBig));
  const int64_t default_head_dim = hp.n_embd % hp.n_head == 0 ? hp.n_embd / hp.n_head : 0;
  LOOM_ASSIGN_OR_RETURN(hp.head_dim,
                        arch_int(f, a, "attention.key_length",
                                 default_head_dim ? std::optional<int64_t>(default_head_dim) : std::nullopt, 1, 1 << 14));
  LOOM_ASSIGN_OR_RETURN(int64_t v_len, arch_int(f, a, "attention.value_length", hp.head_dim, 1, 1 << 14));
  if (v_len != hp.head_dim) return unsupported("attention.value_length differs from key_length");
  LOOM_ASSIGN_OR_RETURN(hp.n_rot, arch_int(f, a, "rope.dimension_count", hp.head_dim, 0, hp.head_dim));
  if (hp.n_rot % 2 != 0 || hp.n_rot > ops::kMaxRopeDims) return corrupt("rope.dimension_count must be even and <= 1024");
  return Status::ok();
}

// The norms' epsilons and the RoPE: base, linear scale (rope.scaling.factor, else the older
// rope.scale_linear: the reference's order), scaling type, YaRN parameters, attention factor.
Status read_norm_and_rope(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  constexpr int64_t kBig = int64_t(1) << 31;
  LOOM_ASSIGN_OR_RETURN(double eps, f.get_float_or(a + ".attention.layer_norm_rms_epsilon", 1e-5));
  LOOM_ASSIGN_OR_RETURN(double norm_eps, f.get_float_or(a + ".attention.layer_norm_epsilon", 1e-12));
  if (!(norm_eps > 0 && norm_eps < 1)) return corrupt("layer_norm_epsilon out of range");
  hp.norm_eps = float(norm_eps);
  LOOM_ASSIGN_OR_RETURN(double base, f.get_float_or(a + ".rope.freq_base", 10000.0));
  LOOM_ASSIGN_OR_RETURN(double scale_linear, f.get_float_or(a + ".rope.scale_linear", 1.0));
  if (f.has(a + ".rope.scaling.factor")) {
    LOOM_ASSIGN_OR_RETURN(scale_linear, f.get_float_or(a + ".rope.scaling.factor", 1.0));
    if (scale_linear == 0.0) scale_linear = 1.0;
  }
  if (f.has(a + ".rope.scaling.type")) {
    LOOM_ASSIGN_OR_RETURN(std::string type, f.get_string(a + ".rope.scaling.type"));
    if (type == "none") hp.rope_scaling = RopeScalingKind::kNone;
    else if (type == "linear") hp.rope_scaling = RopeScalingKind::kLinear;
    else if (type == "yarn") hp.rope_scaling = RopeScalingKind::kYarn;
    else if (type == "longrope") hp.rope_scaling = RopeScalingKind::kLongRope;
    else return unsupported(a + ".rope.scaling.type '" + type + "' is not supported (none, linear, yarn, longrope)");
  }
  LOOM_ASSIGN_OR_RETURN(double beta_fast, f.get_float_or(a + ".rope.scaling.yarn_beta_fast", 32.0));
  LOOM_ASSIGN_OR_RETURN(double beta_slow, f.get_float_or(a + ".rope.scaling.yarn_beta_slow", 1.0));
  LOOM_ASSIGN_OR_RETURN(double log_mul, f.get_float_or(a + ".rope.scaling.yarn_log_multiplier", 0.0));
  if (!std::isfinite(beta_fast) || !std::isfinite(beta_slow) || !std::isfinite(log_mul)) {
    return corrupt(a + ": rope.scaling.yarn_* values must be finite");
  }
  hp.yarn_beta_fast = float(beta_fast);
  hp.yarn_beta_slow = float(beta_slow);
  hp.yarn_log_mul = float(log_mul);
  if (!(eps > 0 && eps < 1)) return corrupt("layer_norm_rms_epsilon out of range");
  if (!(base > 0)) return corrupt("rope.freq_base must be positive");
  if (!(scale_linear > 0)) return corrupt("rope.scale_linear must be positive");
  hp.rms_eps = float(eps);
  hp.rope_freq_base = float(base);
  hp.rope_freq_scale = float(1.0 / scale_linear);
  LOOM_ASSIGN_OR_RETURN(hp.n_ctx_orig_yarn, arch_int(f, a, "rope.scaling.original_context_length", hp.n_ctx_train, 0, kBig));
  if (hp.n_ctx_orig_yarn == 0) hp.n_ctx_orig_yarn = hp.n_ctx_train;  // 0: not given
  LOOM_ASSIGN_OR_RETURN(double rope_attn_factor, f.get_float_or(a + ".rope.scaling.attn_factor", 1.0));
  if (!(rope_attn_factor > 0 && std::isfinite(rope_attn_factor)))
    return corrupt("rope.scaling.attn_factor must be positive");
  hp.rope_attn_factor = float(rope_attn_factor);
  return Status::ok();
}

// The vocabulary size, pooling, a classifier's labels and whether attention is causal.
Status read_output_hparams(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  constexpr int64_t kBig = int64_t(1) << 31;
  LOOM_ASSIGN_OR_RETURN(hp.n_vocab, arch_int(f, a, "vocab_size", 0, 0, kBig));
  LOOM_ASSIGN_OR_RETURN(int64_t pooling, arch_int(f, a, "pooling_type", -1, -1, 4));
  hp.pooling_type = int(pooling);
  if (f.has(a + ".classifier.output_labels")) {
    LOOM_ASSIGN_OR_RETURN(const gguf::Array* labels, f.get_array(a + ".classifier.output_labels"));
    if (labels->elem_type != gguf::ValueType::kString || labels->count == 0) {
      return corrupt(a + ".classifier.output_labels must be a non-empty array of strings");
    }
    hp.cls_labels = labels->strings;
    hp.n_cls_out = int64_t(labels->count);
  }
  LOOM_ASSIGN_OR_RETURN(hp.causal, f.get_bool_or(a + ".attention.causal", !hp.is_encoder()));
  return Status::ok();
}

// gemma, gemma2, gemma3: GELU (through the f16 table), embeddings scaled by sqrt(n_embd); gemma2
// and gemma3 add post-norms and sliding-window layers, gemma2 soft-capping, gemma3 q/k norms.
Status read_gemma_traits(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  constexpr int64_t kBig = int64_t(1) << 31;
  hp.ffn_act = FfnAct::kGelu;
  hp.gelu_f16_table = true;
  hp.embd_scale = std::sqrt(float(hp.n_embd));
  if (hp.arch == Arch::kGemma3) {
    // Five sliding-window layers per global one; local layers keep the base 10000 rotation,
    // q and k get per-head RMSNorm, no soft-capping.
    hp.post_norms = true;
    hp.qk_norm = true;
    LOOM_ASSIGN_OR_RETURN(int64_t swa, arch_int(f, a, "attention.sliding_window", 4096, 0, kBig));
    hp.swa_window = int(swa);
    hp.swa_pattern = 6;
    hp.rope_freq_base_swa = 10000.0f;
    if (hp.n_layer == 62) {
      // 27B: query_pre_attn_scalar = n_embd / n_head, an integer division as the reference writes it.
      hp.attn_scale = 1.0f / std::sqrt(float(hp.n_embd / hp.n_head));  // NOLINT(bugprone-integer-division)
    }
  } else if (hp.arch == Arch::kGemma2) {
    hp.post_norms = true;
    LOOM_ASSIGN_OR_RETURN(double cap, f.get_float_or(a + ".attn_logit_softcapping", 50.0));
    LOOM_ASSIGN_OR_RETURN(double fcap, f.get_float_or(a + ".final_logit_softcapping", 30.0));
    LOOM_ASSIGN_OR_RETURN(int64_t swa, arch_int(f, a, "attention.sliding_window", 4096, 0, kBig));
    if (cap < 0 || fcap < 0) return corrupt("soft-capping values must not be negative");
    hp.attn_softcap = float(cap);
    hp.final_softcap = float(fcap);
    hp.swa_window = int(swa);
    hp.swa_pattern = 2;  // even layers slide, odd layers see everything
    // The 27B model scales queries by 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim).
    if (hp.n_layer == 46) {
      hp.attn_scale = 1.0f / std::sqrt(float(hp.n_embd / hp.n_head));  // NOLINT(bugprone-integer-division): as the reference
    }
  }
  return Status::ok();
}

// t5 / t5encoder: relative-position buckets instead of rotary positions; t5's decoder blocks and
// start token.
Status read_t5_hparams(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  constexpr int64_t kBig = int64_t(1) << 31;
  hp.n_rot = 0;
  LOOM_ASSIGN_OR_RETURN(hp.n_rel_buckets, arch_int(f, a, "attention.relative_buckets_count", std::nullopt, 2, 1 << 16));
  if (hp.arch != Arch::kT5) return Status::ok();
  LOOM_ASSIGN_OR_RETURN(hp.n_dec_layer, arch_int(f, a, "decoder_block_count", hp.n_layer, 1, 4096));
  if (hp.n_dec_layer > hp.n_layer) {
    return unsupported("t5: " + std::to_string(hp.n_dec_layer) + " decoder layers but " + std::to_string(hp.n_layer) +
                       " encoder layers (more decoder than encoder layers is not "
                       "supported, as in llama.cpp)");
  }
  LOOM_ASSIGN_OR_RETURN(int64_t start, arch_int(f, a, "decoder_start_token_id", -1, -1, kBig));
  hp.dec_start_token = int32_t(start);
  return Status::ok();
}

// granite, granitemoe, granitehybrid: Granite's multipliers (0 or absent: none) and RoPE switch
// (rope.scaling.finetuned, true when absent: the reference's rule); granitehybrid also the Mamba-2
// sizes of its recurrent layers.
Status read_granite_hparams(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  LOOM_ASSIGN_OR_RETURN(hp.embd_scale, finite_float(f, a + ".embedding_scale", 0.0));
  LOOM_ASSIGN_OR_RETURN(hp.residual_scale, finite_float(f, a + ".residual_scale", 0.0));
  LOOM_ASSIGN_OR_RETURN(hp.logit_scale, finite_float(f, a + ".logit_scale", 0.0));
  LOOM_ASSIGN_OR_RETURN(hp.attn_scale, finite_float(f, a + ".attention.scale", 0.0));
  LOOM_ASSIGN_OR_RETURN(hp.use_rope, f.get_bool_or(a + ".rope.scaling.finetuned", true));
  if (hp.arch == Arch::kGraniteHybrid) LOOM_RETURN_IF_ERROR(read_ssm_hparams(f, hp));
  return Status::ok();
}

// lfm2, lfm2moe: q/k norms, the short conv's cache length, and sliding attention layers when
// the file gives a window (LFM2-VL style files: every attention layer slides).
Status read_lfm2_hparams(const gguf::GgufFile& f, ModelHparams& hp) {
  const std::string& a = hp.arch_name;
  constexpr int64_t kBig = int64_t(1) << 31;
  hp.qk_norm = true;
  LOOM_ASSIGN_OR_RETURN(hp.ssm_d_conv, arch_int(f, a, "shortconv.l_cache", std::nullopt, 2, 64));
  hp.ssm_d_inner = hp.n_embd;  // the conv runs over B ⊙ x, n_embd channels; no SSM state
  LOOM_ASSIGN_OR_RETURN(int64_t swa, arch_int(f, a, "attention.sliding_window", 0, 0, kBig));
  if (swa > 0) {
    hp.swa_window = int(swa);
    hp.swa_pattern = 1;
  }
  return Status::ok();
}

// The traits of each family of the decoder-style forward passes (and BERT's and T5's).
Status read_family_traits(const gguf::GgufFile& f, ModelHparams& hp, int64_t n_block) {
  const std::string& a = hp.arch_name;
  switch (hp.arch) {
    case Arch::kQwen2: hp.qkv_bias = true; break;
    case Arch::kQwen3: hp.qk_norm = true; break;
    case Arch::kLlama: hp.qk_norm_full = a == "olmoe"; break;
    case Arch::kGemma:
    case Arch::kGemma2:
    case Arch::kGemma3: return read_gemma_traits(f, hp);
    case Arch::kBert: hp.ffn_act = FfnAct::kGelu; break;
    case Arch::kNomicBert:
      hp.ffn_act = FfnAct::kSilu;
      break;  // rotary positions, SwiGLU
    // phi3 files may carry attention.sliding_window, but the reference attends to the full
    // context on every phi3 layer (its SWA pattern selects no layer); it also ignores the
    // llama.attention.sliding_window of Mistral-style llama files. Both therefore use full
    // attention unless a context asks for a window (ContextParams::n_swa).
    case Arch::kT5:
    case Arch::kT5Encoder: return read_t5_hparams(f, hp);
    case Arch::kGraniteHybrid:
    case Arch::kGranite: return read_granite_hparams(f, hp);
    case Arch::kSmolLM3: hp.no_rope_step = 4; break;  // the reference's fixed pattern: every fourth layer
    case Arch::kLfm2: return read_lfm2_hparams(f, hp);
    case Arch::kGemma4: return read_gemma4_hparams(f, hp, n_block);
    case Arch::kGemma3n: return read_gemma3n_hparams(f, hp, n_block);
    case Arch::kMistral3: {
      LOOM_ASSIGN_OR_RETURN(hp.attn_temp_scale, finite_float(f, a + ".attention.temperature_scale", 0.0));
      break;
    }
    case Arch::kQwen35:
      hp.qk_norm = true;
      hp.attn_output_gate = true;
      hp.delta_kv_interleaved = hp.delta_ba_fused = a == "qwen3next";
      return read_delta_net_hparams(f, hp, n_block);
    case Arch::kGptOss: return read_gpt_oss_hparams(f, hp, n_block);
    case Arch::kPhi3:
    case Arch::kMamba:
    case Arch::kMamba2: break;
  }
  return Status::ok();
}

}  // namespace

Expected<ModelHparams> read_hparams(const gguf::GgufFile& f) {
  ModelHparams hp;
  LOOM_ASSIGN_OR_RETURN(hp.arch_name, f.get_string("general.architecture"));
  LOOM_RETURN_IF_ERROR(identify_family(hp));
  if (hp.is_recurrent()) return read_mamba_hparams(f, std::move(hp));
  LOOM_ASSIGN_OR_RETURN(const int64_t n_block, read_stack_sizes(f, hp));
  LOOM_RETURN_IF_ERROR(read_head_sizes(f, hp));
  LOOM_RETURN_IF_ERROR(read_norm_and_rope(f, hp));
  LOOM_RETURN_IF_ERROR(read_output_hparams(f, hp));
  LOOM_RETURN_IF_ERROR(read_family_traits(f, hp, n_block));
  LOOM_RETURN_IF_ERROR(read_moe_hparams(f, hp, n_block));
  if (hp.n_layer_nextn > 0 && hp.arch != Arch::kQwen35) {
    return unsupported(hp.arch_name + ".nextn_predict_layers " + std::to_string(hp.n_layer_nextn) +
                       ": multi-token-prediction blocks are only read for qwen35");
  }
  return hp;
}

}  // namespace loom::model
