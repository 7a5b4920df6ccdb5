// llama-quantize's file types and per-tensor type rules (quantize_rules.h).
#include "model/quantize_rules.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <string>

#include "quant/type_traits.h"

namespace loom::model {
namespace {

using gguf::TensorInfo;

constexpr FileTypeInfo kFileTypes[] = {
    {"q4_0", FileType::MOSTLY_Q4_0, TensorType::Q4_0},
    {"q4_1", FileType::MOSTLY_Q4_1, TensorType::Q4_1},
    {"q5_0", FileType::MOSTLY_Q5_0, TensorType::Q5_0},
    {"q5_1", FileType::MOSTLY_Q5_1, TensorType::Q5_1},
    {"iq4_nl", FileType::MOSTLY_IQ4_NL, TensorType::IQ4_NL},
    {"iq4_xs", FileType::MOSTLY_IQ4_XS, TensorType::IQ4_XS},
    {"q2_k", FileType::MOSTLY_Q2_K, TensorType::Q2_K},
    {"q3_k_s", FileType::MOSTLY_Q3_K_S, TensorType::Q3_K},
    {"q3_k_m", FileType::MOSTLY_Q3_K_M, TensorType::Q3_K},
    {"q3_k_l", FileType::MOSTLY_Q3_K_L, TensorType::Q3_K},
    {"q4_k_s", FileType::MOSTLY_Q4_K_S, TensorType::Q4_K},
    {"q4_k_m", FileType::MOSTLY_Q4_K_M, TensorType::Q4_K},
    {"q5_k_s", FileType::MOSTLY_Q5_K_S, TensorType::Q5_K},
    {"q5_k_m", FileType::MOSTLY_Q5_K_M, TensorType::Q5_K},
    {"q6_k", FileType::MOSTLY_Q6_K, TensorType::Q6_K},
    {"q8_0", FileType::MOSTLY_Q8_0, TensorType::Q8_0},
    {"f16", FileType::MOSTLY_F16, TensorType::F16},
    {"bf16", FileType::MOSTLY_BF16, TensorType::BF16},
    {"f32", FileType::ALL_F32, TensorType::F32},
};

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// ggml_is_quantized: every block type; F32/F16/BF16 and the integer types are not.
bool is_quantized(TensorType t) { return quant::type_traits(t).is_quantized; }

int64_t block_size(TensorType t) {
  const auto info = tensor_type_info(t);
  return info ? info->block_size : 1;
}

// ggml_n_dims: the number of dimensions up to the last one larger than 1.
int effective_dims(const TensorInfo& t) {
  int n = 1;
  for (int d = 1; d < gguf::kMaxDims; ++d) {
    if (t.ne[size_t(d)] > 1) n = d + 1;
  }
  return n;
}

// "blk.N." -> N, else -1 (llama.cpp's loader orders non-block tensors first).
int layer_of(std::string_view name, bool* ok = nullptr) {
  if (ok) *ok = false;
  if (name.substr(0, 4) != "blk.") return -1;
  size_t i = 4;
  int64_t v = 0;
  bool digits = false;
  bool neg = false;
  if (i < name.size() && (name[i] == '-' || name[i] == '+')) neg = name[i++] == '-';
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && v < (1 << 30)) {
    v = v * 10 + (name[i++] - '0');
    digits = true;
  }
  if (!digits || i >= name.size() || name[i] != '.') {
    // sscanf("blk.%d.") still assigns the number when only the final '.' is missing.
    if (digits && ok) *ok = true;
    return digits ? int(neg ? -v : v) : -1;
  }
  if (ok) *ok = true;
  return int(neg ? -v : v);
}

// The hyper-parameters the rules look at.
struct ModelFacts {
  std::string arch;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_expert = 0;
  bool is_70b = false;

  int n_gqa() const { return n_head_kv == 0 ? 0 : n_head / n_head_kv; }
  bool falcon() const { return arch == "falcon"; }
};

// An integer key that may also be stored as a per-layer array (first element then).
int64_t int_or_first(const gguf::GgufFile& f, const std::string& key, int64_t fallback) {
  const gguf::Value* v = f.find(key);
  if (!v) return fallback;
  if (gguf::type_of(*v) == gguf::ValueType::kArray) {
    const auto& a = std::get<gguf::Array>(*v);
    return a.is_numeric() && a.count > 0 ? a.int_at(0) : fallback;
  }
  auto i = f.get_int(key);
  return i ? *i : fallback;
}

ModelFacts model_facts(const gguf::GgufFile& f) {
  ModelFacts m;
  auto arch = f.get_string_or("general.architecture", "");
  m.arch = arch ? *arch : "";
  const std::string p = m.arch + ".";
  m.n_layer = int(int_or_first(f, p + "block_count", 0));
  m.n_head = int(int_or_first(f, p + "attention.head_count", 0));
  m.n_head_kv = int(int_or_first(f, p + "attention.head_count_kv", m.n_head));
  m.n_expert = int(int_or_first(f, p + "expert_count", 0));
  // llama.cpp's LLM_TYPE_70B: an 80-layer llama with grouped-query attention.
  m.is_70b = m.arch == "llama" && m.n_layer == 80 && m.n_head != m.n_head_kv;
  return m;
}

// llama.cpp's quantize_state_impl counters.
struct RuleState {
  ModelFacts m;
  bool has_output = false;
  int n_attention_wv = 0;
  int i_attention_wv = 0;
  int i_ffn_down = 0;
  int i_ffn_gate = 0;
  int i_ffn_up = 0;
};

bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// Whether llama-quantize quantizes a tensor at all (else it is copied as it is).
bool wants_quantization(const TensorInfo& t) {
  const std::string_view name = t.name;
  if (!ends_with(name, "weight")) return false;
  if (effective_dims(t) < 2) return false;
  if (contains(name, "_norm.weight")) return false;
  if (contains(name, "ffn_gate_inp.weight")) return false;  // expert gating
  if (contains(name, "altup") || contains(name, "laurel")) return false;
  if (contains(name, "per_layer_model_proj")) return false;
  if (name == "position_embd.weight" || name == "token_types.weight") return false;
  static constexpr std::string_view kSmall[] = {
      "ssm_conv1d.weight",      "shortconv.conv.weight", "time_mix_first.weight",
      "time_mix_w0.weight",     "time_mix_w1.weight",    "time_mix_w2.weight",
      "time_mix_v0.weight",     "time_mix_v1.weight",    "time_mix_v2.weight",
      "time_mix_a0.weight",     "time_mix_a1.weight",    "time_mix_a2.weight",
      "time_mix_g1.weight",     "time_mix_g2.weight",    "time_mix_decay_w1.weight",
      "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
  };
  for (std::string_view s : kSmall) {
    if (contains(name, s)) return false;
  }
  return true;
}

// Layer index of a tensor for the position rules: the running counter, or the name's "blk.N."
// for mixture-of-experts models (whose expert tensors are not one per layer).
Expected<int> layer_index(const RuleState& qs, int counter, const std::string& name) {
  if (qs.m.n_expert <= 1) return counter;
  bool ok = false;
  const int il = layer_of(name, &ok);
  if (!ok) return invalid_argument("cannot determine the layer of tensor " + name);
  if (il < 0 || il >= qs.m.n_layer) {
    return invalid_argument("bad layer " + std::to_string(il) + " for tensor " + name + ": must be in [0, " +
                            std::to_string(qs.m.n_layer) + ")");
  }
  return il;
}

// llama.cpp's llama_tensor_get_type for the file types loom supports (no importance matrix).
Expected<TensorPlan> tensor_type_rule(RuleState& qs, TensorType new_type, const TensorInfo& t, FileType ftype) {
  using FT = FileType;
  using TT = TensorType;
  const std::string& name = t.name;
  const int n_layer = qs.m.n_layer;

  if (name == "output.weight" || (!qs.has_output && name == "token_embd.weight")) {
    // Also the token embeddings of models that share them with the output.
    if (qs.m.falcon() || t.ne[0] % block_size(new_type) != 0) new_type = TT::Q8_0;
    else if (new_type != TT::Q8_0) new_type = TT::Q6_K;
  } else if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") {
    // Only the IQ1/IQ2/IQ3/TQ file types change these.
  } else if (contains(name, "attn_v.weight")) {
    if (ftype == FT::MOSTLY_Q2_K) {
      new_type = qs.m.n_gqa() >= 4 ? TT::Q4_K : TT::Q3_K;
    } else if (ftype == FT::MOSTLY_Q3_K_M) {
      new_type = qs.i_attention_wv < 2 ? TT::Q5_K : TT::Q4_K;
    } else if (ftype == FT::MOSTLY_Q3_K_L) {
      new_type = TT::Q5_K;
    } else if ((ftype == FT::MOSTLY_IQ4_NL || ftype == FT::MOSTLY_IQ4_XS) && qs.m.n_gqa() >= 4) {
      new_type = TT::Q5_K;
    } else if ((ftype == FT::MOSTLY_Q4_K_M || ftype == FT::MOSTLY_Q5_K_M) &&
               use_more_bits(qs.i_attention_wv, qs.n_attention_wv)) {
      new_type = TT::Q6_K;
    } else if (ftype == FT::MOSTLY_Q4_K_S && qs.i_attention_wv < 4) {
      new_type = TT::Q5_K;
    }
    if (qs.m.is_70b && (new_type == TT::Q3_K || new_type == TT::Q4_K)) new_type = TT::Q5_K;
    if (qs.m.n_expert == 8) new_type = TT::Q8_0;
    ++qs.i_attention_wv;
  } else if (contains(name, "attn_k.weight")) {
    if (qs.m.n_expert == 8) new_type = TT::Q8_0;
  } else if (contains(name, "attn_q.weight")) {
    // Only IQ3_XS / IQ2_M change these.
  } else if (contains(name, "ffn_down")) {
    LOOM_ASSIGN_OR_RETURN(const int i_layer, layer_index(qs, qs.i_ffn_down, name));
    if (ftype == FT::MOSTLY_Q2_K) {
      new_type = TT::Q3_K;
    } else if (ftype == FT::MOSTLY_Q3_K_M) {
      new_type = i_layer < n_layer / 16                                 ? TT::Q5_K
                 : !qs.m.falcon() || use_more_bits(i_layer, n_layer) ? TT::Q4_K
                                                                      : TT::Q3_K;
    } else if (ftype == FT::MOSTLY_Q3_K_L) {
      new_type = qs.m.falcon() ? TT::Q4_K : TT::Q5_K;
    } else if (ftype == FT::MOSTLY_Q4_K_M) {
      if (qs.m.falcon()) {
        new_type = i_layer < n_layer / 16 ? TT::Q6_K : use_more_bits(i_layer, n_layer) ? TT::Q5_K : TT::Q4_K;
      } else if (use_more_bits(i_layer, n_layer)) {
        new_type = TT::Q6_K;
      }
    } else if (i_layer < n_layer / 8 && (ftype == FT::MOSTLY_IQ4_NL || ftype == FT::MOSTLY_IQ4_XS)) {
      new_type = TT::Q5_K;  // llama.cpp does this only without an importance matrix, as here
    } else if (ftype == FT::MOSTLY_Q5_K_M && use_more_bits(i_layer, n_layer)) {
      new_type = TT::Q6_K;
    } else if (ftype == FT::MOSTLY_Q4_K_S && !qs.m.falcon() && i_layer < n_layer / 8) {
      new_type = TT::Q5_K;
    }
    ++qs.i_ffn_down;
  } else if (contains(name, "attn_output.weight")) {
    if (!qs.m.falcon()) {
      if (qs.m.n_expert == 8) {
        if (ftype == FT::MOSTLY_Q2_K || ftype == FT::MOSTLY_Q3_K_S || ftype == FT::MOSTLY_Q3_K_M ||
            ftype == FT::MOSTLY_IQ4_NL || ftype == FT::MOSTLY_Q4_K_S || ftype == FT::MOSTLY_Q4_K_M ||
            ftype == FT::MOSTLY_IQ4_XS) {
          new_type = TT::Q5_K;
        }
      } else {
        if (ftype == FT::MOSTLY_Q2_K) new_type = TT::Q3_K;
        else if (ftype == FT::MOSTLY_Q3_K_M) new_type = TT::Q4_K;
        else if (ftype == FT::MOSTLY_Q3_K_L) new_type = TT::Q5_K;
      }
    } else if (ftype == FT::MOSTLY_Q3_K_L) {
      new_type = TT::Q4_K;
    }
  } else if (contains(name, "attn_qkv.weight")) {
    if (ftype == FT::MOSTLY_Q3_K_M || ftype == FT::MOSTLY_Q3_K_L) new_type = TT::Q4_K;
    else if (ftype == FT::MOSTLY_Q4_K_M) new_type = TT::Q5_K;
    else if (ftype == FT::MOSTLY_Q5_K_M) new_type = TT::Q6_K;
  } else if (contains(name, "ffn_gate")) {
    LOOM_ASSIGN_OR_RETURN(const int i_layer, layer_index(qs, qs.i_ffn_gate, name));
    (void)i_layer;  // only IQ3_XS looks at it
    ++qs.i_ffn_gate;
  } else if (contains(name, "ffn_up")) {
    LOOM_ASSIGN_OR_RETURN(const int i_layer, layer_index(qs, qs.i_ffn_up, name));
    (void)i_layer;
    ++qs.i_ffn_up;
  }

  TensorPlan plan{new_type, true, false};
  if (t.ne[0] % block_size(new_type) != 0) {
    // Rows that do not split into blocks of the chosen type: llama.cpp's fallback types.
    switch (new_type) {
      case TT::Q2_K: case TT::Q3_K: case TT::IQ4_XS: plan.type = TT::IQ4_NL; break;
      case TT::Q4_K: plan.type = TT::Q5_0; break;
      case TT::Q5_K: plan.type = TT::Q5_1; break;
      case TT::Q6_K: plan.type = TT::Q8_0; break;
      default:
        return unsupported("tensor " + name + " has rows of " + std::to_string(t.ne[0]) +
                           " elements, not a multiple of the " + std::string(tensor_type_name(new_type)) +
                           " block size " + std::to_string(block_size(new_type)));
    }
    if (t.ne[0] % block_size(plan.type) != 0) plan.type = TT::F16;
    plan.fallback = true;
  }
  return plan;
}

// llama.cpp's loader order: non-block tensors first, then by layer; by name within each.
std::vector<size_t> llama_cpp_order(const std::vector<TensorInfo>& ts) {
  std::vector<size_t> order(ts.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::vector<int> layer(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    bool ok = false;
    const int l = layer_of(ts[i].name, &ok);
    layer[i] = ok ? l : -1;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (layer[a] != layer[b]) return layer[a] < layer[b];
    return ts[a].name < ts[b].name;
  });
  return order;
}

// A weight format loom dequantizes (not the activation formats Q8_1 / Q8_K).
bool can_read_as_float(TensorType t) {
  const quant::TypeTraits& tt = quant::type_traits(t);
  return tt.weight_format && tt.computable;
}

// A weight format loom computes with and has a quantizer for.
bool can_write(TensorType t) {
  const quant::TypeTraits& tt = quant::type_traits(t);
  return tt.weight_format && tt.computable && tt.ref.quantize_row != nullptr;
}

}  // namespace

std::span<const FileTypeInfo> file_types() { return kFileTypes; }

std::optional<FileType> parse_file_type(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const FileTypeInfo& f : kFileTypes) {
    if (f.name == lower) return f.ftype;
  }
  return std::nullopt;
}

const FileTypeInfo& file_type_info(FileType ftype) {
  for (const FileTypeInfo& f : kFileTypes) {
    if (f.ftype == ftype) return f;
  }
  return kFileTypes[0];  // unreachable for valid enum values
}

Expected<std::vector<TensorPlan>> plan_tensor_types(const gguf::GgufFile& in, const QuantizeParams& params) {
  const FileTypeInfo& ft = file_type_info(params.ftype);
  if (ft.ftype != params.ftype) return invalid_argument("unknown file type " + std::to_string(uint32_t(params.ftype)));
  const auto& ts = in.tensors();
  RuleState qs;
  qs.m = model_facts(in);
  for (const TensorInfo& t : ts) {
    if (contains(t.name, "attn_v.weight") || contains(t.name, "attn_qkv.weight") ||
        contains(t.name, "attn_kv_b.weight")) {
      ++qs.n_attention_wv;
    } else if (t.name == "output.weight") {
      qs.has_output = true;
    }
  }

  std::vector<TensorPlan> plans(ts.size());
  for (size_t i : llama_cpp_order(ts)) {
    const TensorInfo& t = ts[i];
    TensorPlan plan{t.type, false, false};
    if (wants_quantization(t)) {
      plan.type = ft.base;
      if (is_quantized(ft.base)) {
        LOOM_ASSIGN_OR_RETURN(plan, tensor_type_rule(qs, ft.base, t, params.ftype));
      }
      plan.convert = plan.type != t.type;
    }
    if (!plan.convert) plan.type = t.type;
    if (plan.convert) {
      if (is_quantized(t.type) && !params.allow_requantize) {
        return invalid_argument("tensor " + t.name + " is already quantized (" + std::string(tensor_type_name(t.type)) +
                                "); requantizing needs --allow-requantize");
      }
      if (!can_read_as_float(t.type)) {
        return unsupported("tensor " + t.name + " has type " + std::string(tensor_type_name(t.type)) +
                           ", which cannot be converted");
      }
      if (!can_write(plan.type)) {
        return unsupported("tensor " + t.name + ": cannot quantize to " + std::string(tensor_type_name(plan.type)));
      }
      if (row_bytes(plan.type, t.ne[0]) < 0) {
        return unsupported("tensor " + t.name + ": rows of " + std::to_string(t.ne[0]) + " elements do not fit " +
                           std::string(tensor_type_name(plan.type)) + " blocks");
      }
    }
    plans[i] = plan;
  }
  return plans;
}

std::vector<size_t> llama_cpp_tensor_order(const std::vector<gguf::TensorInfo>& ts) { return llama_cpp_order(ts); }

}  // namespace loom::model
