// llama-quantize's file types and per-tensor type rules (quantize_rules.h).
#include "model/quantize_rules.h"

#include <algorithm>
#include <initializer_list>
#include <cctype>
#include <numeric>
#include <string>

#include "model/imatrix.h"
#include "quant/type_traits.h"

namespace loom::model {
namespace {

using gguf::TensorInfo;

constexpr FileTypeInfo kFileTypes[] = {
    {"q1_0", FileType::MOSTLY_Q1_0, TensorType::Q1_0},
    {"q2_0", FileType::MOSTLY_Q2_0, TensorType::Q2_0},
    {"q4_0", FileType::MOSTLY_Q4_0, TensorType::Q4_0},
    {"q4_1", FileType::MOSTLY_Q4_1, TensorType::Q4_1},
    {"mxfp4_moe", FileType::MOSTLY_MXFP4_MOE, TensorType::MXFP4},
    {"q5_0", FileType::MOSTLY_Q5_0, TensorType::Q5_0},
    {"q5_1", FileType::MOSTLY_Q5_1, TensorType::Q5_1},
    {"iq2_xxs", FileType::MOSTLY_IQ2_XXS, TensorType::IQ2_XXS},
    {"iq2_xs", FileType::MOSTLY_IQ2_XS, TensorType::IQ2_XS},
    {"iq2_s", FileType::MOSTLY_IQ2_S, TensorType::IQ2_XS},
    {"iq2_m", FileType::MOSTLY_IQ2_M, TensorType::IQ2_S},
    {"iq1_s", FileType::MOSTLY_IQ1_S, TensorType::IQ1_S},
    {"iq1_m", FileType::MOSTLY_IQ1_M, TensorType::IQ1_M},
    {"tq1_0", FileType::MOSTLY_TQ1_0, TensorType::TQ1_0},
    {"tq2_0", FileType::MOSTLY_TQ2_0, TensorType::TQ2_0},
    {"q2_k", FileType::MOSTLY_Q2_K, TensorType::Q2_K},
    {"q2_k_s", FileType::MOSTLY_Q2_K_S, TensorType::Q2_K},
    {"iq3_xxs", FileType::MOSTLY_IQ3_XXS, TensorType::IQ3_XXS},
    {"iq3_s", FileType::MOSTLY_IQ3_S, TensorType::IQ3_S},
    {"iq3_m", FileType::MOSTLY_IQ3_M, TensorType::IQ3_S},
    {"iq3_xs", FileType::MOSTLY_IQ3_XS, TensorType::IQ3_S},
    {"q3_k_s", FileType::MOSTLY_Q3_K_S, TensorType::Q3_K},
    {"q3_k_m", FileType::MOSTLY_Q3_K_M, TensorType::Q3_K},
    {"q3_k_l", FileType::MOSTLY_Q3_K_L, TensorType::Q3_K},
    {"iq4_nl", FileType::MOSTLY_IQ4_NL, TensorType::IQ4_NL},
    {"iq4_xs", FileType::MOSTLY_IQ4_XS, TensorType::IQ4_XS},
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

// llama.cpp's tensor categories (tensor_get_category), tested in this order.
enum class Cat {
  kTokenEmbd,
  kAttnQ,
  kAttnV,
  kAttnK,
  kAttnQkv,
  kAttnKvB,
  kAttnOutput,
  kFfnUp,
  kFfnGate,
  kFfnDown,
  kOutput,
  kOther
};

Cat category_of(std::string_view name) {
  if (name == "output.weight") return Cat::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Cat::kTokenEmbd;
  if (contains(name, "attn_qkv.weight")) return Cat::kAttnQkv;
  if (contains(name, "attn_kv_b.weight")) return Cat::kAttnKvB;
  if (contains(name, "attn_v.weight")) return Cat::kAttnV;
  if (contains(name, "attn_k.weight")) return Cat::kAttnK;
  if (contains(name, "attn_q.weight")) return Cat::kAttnQ;
  if (contains(name, "attn_output.weight")) return Cat::kAttnOutput;
  if (contains(name, "ffn_up")) return Cat::kFfnUp;
  if (contains(name, "ffn_gate")) return Cat::kFfnGate;
  if (contains(name, "ffn_down")) return Cat::kFfnDown;
  return Cat::kOther;
}

bool is_attn_v_like(Cat c) { return c == Cat::kAttnV || c == Cat::kAttnQkv || c == Cat::kAttnKvB; }

// llama.cpp's quantize_state_impl counters.
struct RuleState {
  ModelFacts m;
  bool tied_embeddings = true;  // no output.weight
  bool has_imatrix = false;
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
bool wants_quantization(const TensorInfo& t, const QuantizeParams& params) {
  if (effective_dims(t) < 2) return false;
  const std::string_view name = t.name;
  if (!ends_with(name, "weight")) return false;
  if (contains(name, "_norm.weight")) return false;
  if (!params.quantize_output_tensor && name == "output.weight") return false;
  if (name == "position_embd.weight" || name == "token_types.weight") return false;
  static constexpr std::string_view kKept[] = {
      "ffn_gate_inp.weight",
      "ffn_gate_tid2eid.weight",
      "altup",
      "laurel",
      "per_layer_model_proj",
      "ssm_conv1d",
      "shortconv.conv.weight",
      "indexer.k_proj.weight",
      "indexer.q_proj.weight",
      "time_mix_first.weight",
      "time_mix_w0.weight",
      "time_mix_w1.weight",
      "time_mix_w2.weight",
      "time_mix_v0.weight",
      "time_mix_v1.weight",
      "time_mix_v2.weight",
      "time_mix_a0.weight",
      "time_mix_a1.weight",
      "time_mix_a2.weight",
      "time_mix_g1.weight",
      "time_mix_g2.weight",
      "time_mix_decay_w1.weight",
      "time_mix_decay_w2.weight",
      "time_mix_lerp_fused.weight",
      "attn_rel_b.weight",
      ".position_embd",
      "sam.pos_embd",
      "sam.neck.",
      "sam.net_",
      ".rel_pos",
      ".patch_embd",
      ".patch_merger",
      "a.rvq.codebook",
      "mm.a.code_embd",
  };
  for (std::string_view s : kKept) {
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

// What llama.cpp's llama_tensor_get_type_impl asks of the file type and the model, for the rules
// of each tensor category below.
struct MixCase {
  FileType ftype;
  int n_layer, n_expert;
  bool falcon;
  bool iq12;    // a 1- or 2-bit IQ file type
  bool iq2s_m;  // IQ2_S or IQ2_M
  bool is(std::initializer_list<FileType> l) const { return std::find(l.begin(), l.end(), ftype) != l.end(); }
};

MixCase mix_case(const RuleState& qs, FileType ftype) {
  using FT = FileType;
  MixCase c{ftype, qs.m.n_layer, qs.m.n_expert, qs.m.falcon(), false, false};
  c.iq12 =
      c.is({FT::MOSTLY_IQ2_XXS, FT::MOSTLY_IQ2_XS, FT::MOSTLY_IQ1_S, FT::MOSTLY_IQ2_S, FT::MOSTLY_IQ2_M, FT::MOSTLY_IQ1_M});
  c.iq2s_m = c.is({FT::MOSTLY_IQ2_S, FT::MOSTLY_IQ2_M});
  return c;
}

// The output (and the token embeddings of models that share them with the output).
TensorType output_type(const MixCase& c, const TensorInfo& t, TensorType new_type, const QuantizeParams& params) {
  using FT = FileType;
  using TT = TensorType;
  if (params.output_tensor_type) return *params.output_tensor_type;
  if (c.ftype == FT::MOSTLY_MXFP4_MOE || c.falcon || t.ne[0] % block_size(new_type) != 0) return TT::Q8_0;
  if (c.iq12 || c.ftype == FT::MOSTLY_IQ3_XXS) return TT::Q5_K;
  if (new_type != TT::Q8_0) return TT::Q6_K;
  return new_type;
}

// MXFP4_MOE: expert tensors (3-D) MXFP4, the rest Q8_0.
TensorType mxfp4_moe_type(const RuleState& qs, const TensorInfo& t, Cat cat) {
  const bool expert_role = cat == Cat::kFfnUp || cat == Cat::kFfnGate || cat == Cat::kFfnDown;
  return t.ne[2] > 1 && (qs.m.arch != "bailingmoe3" || expert_role) ? TensorType::MXFP4 : TensorType::Q8_0;
}

TensorType token_embd_type(const MixCase& c, TensorType new_type, const QuantizeParams& params) {
  using FT = FileType;
  using TT = TensorType;
  if (params.token_embedding_type) return *params.token_embedding_type;
  if (c.is({FT::MOSTLY_IQ2_XXS, FT::MOSTLY_IQ2_XS, FT::MOSTLY_IQ1_S, FT::MOSTLY_IQ1_M})) return TT::Q2_K;
  if (c.iq2s_m || c.ftype == FT::MOSTLY_IQ3_XXS) return TT::IQ3_S;
  if (c.is({FT::MOSTLY_TQ1_0, FT::MOSTLY_TQ2_0, FT::MOSTLY_Q2_0})) return TT::Q4_K;
  return new_type;
}

// The 1- and 2-bit IQ file types' rules (attn_v-like, attn_k, ffn_down, attn_output).
TensorType iq12_type(const MixCase& c, RuleState& qs, Cat cat, TensorType new_type) {
  using FT = FileType;
  using TT = TensorType;
  if (is_attn_v_like(cat)) {
    if (qs.m.n_gqa() >= 4 || c.n_expert >= 4) new_type = TT::Q4_K;
    else new_type = c.iq2s_m ? TT::IQ3_S : TT::Q2_K;
    ++qs.i_attention_wv;
  } else if (c.n_expert == 8 && cat == Cat::kAttnK) {
    new_type = TT::Q4_K;
  } else if (cat == Cat::kFfnDown) {
    if (qs.i_ffn_down < c.n_layer / 8) new_type = c.iq2s_m ? TT::IQ3_S : TT::Q2_K;
    ++qs.i_ffn_down;
  } else if (cat == Cat::kAttnOutput) {
    if (c.n_expert == 8) new_type = TT::Q5_K;
    else if (c.is({FT::MOSTLY_IQ1_S, FT::MOSTLY_IQ1_M})) new_type = TT::IQ2_XXS;
    else if (c.iq2s_m) new_type = TT::IQ3_S;
  }
  return new_type;
}

// attn_v (and the tensors like it): more bits for grouped-query attention, the first layers of
// the _M mixes, 70B models and 8-expert models.
TensorType attn_v_type(const MixCase& c, RuleState& qs, TensorType new_type) {
  using FT = FileType;
  using TT = TensorType;
  const FileType ftype = c.ftype;
  const int n_gqa = qs.m.n_gqa();
  if (ftype == FT::MOSTLY_Q2_K) {
    new_type = n_gqa >= 4 ? TT::Q4_K : TT::Q3_K;
  } else if (ftype == FT::MOSTLY_Q2_K_S && n_gqa >= 4) {
    new_type = TT::Q4_K;
  } else if (ftype == FT::MOSTLY_IQ3_XXS) {
    new_type = n_gqa >= 4 ? TT::Q4_K : !qs.has_imatrix ? TT::IQ3_S : TT::IQ3_XXS;
  } else if (c.is({FT::MOSTLY_IQ3_XS, FT::MOSTLY_IQ3_S}) && n_gqa >= 4) {
    new_type = TT::Q4_K;
  } else if (ftype == FT::MOSTLY_IQ3_M) {
    new_type = TT::Q4_K;
  } else if (ftype == FT::MOSTLY_Q3_K_M) {
    new_type = qs.i_attention_wv < 2 ? TT::Q5_K : TT::Q4_K;
  } else if (ftype == FT::MOSTLY_Q3_K_L) {
    new_type = TT::Q5_K;
  } else if (c.is({FT::MOSTLY_IQ4_NL, FT::MOSTLY_IQ4_XS}) && n_gqa >= 4) {
    new_type = TT::Q5_K;
  } else if (c.is({FT::MOSTLY_Q4_K_M, FT::MOSTLY_Q5_K_M}) && use_more_bits(qs.i_attention_wv, qs.n_attention_wv)) {
    new_type = TT::Q6_K;
  } else if (ftype == FT::MOSTLY_Q4_K_S && qs.i_attention_wv < 4) {
    new_type = TT::Q5_K;
  }
  if (qs.m.is_70b && (new_type == TT::Q3_K || new_type == TT::Q4_K)) new_type = TT::Q5_K;
  if (c.n_expert == 8) new_type = TT::Q8_0;
  ++qs.i_attention_wv;
  return new_type;
}

// attn_k and attn_q: fewer bits in the IQ3 mixes (8-expert models keep attn_k at Q8_0).
TensorType attn_qk_type(const MixCase& c, Cat cat, TensorType new_type) {
  using FT = FileType;
  using TT = TensorType;
  if (cat == Cat::kAttnK && c.n_expert == 8) return TT::Q8_0;
  if (c.ftype == FT::MOSTLY_IQ3_XS) return TT::IQ3_XXS;
  if (c.ftype == FT::MOSTLY_IQ3_XXS) return TT::IQ2_S;
  return new_type;
}

// ffn_down: more bits by layer position (the first eighth, use_more_bits) in most mixes.
Expected<TensorType> ffn_down_type(const MixCase& c, RuleState& qs, const std::string& name, TensorType new_type) {
  using FT = FileType;
  using TT = TensorType;
  const FileType ftype = c.ftype;
  const int n_layer = c.n_layer;
  const bool falcon = c.falcon;
  LOOM_ASSIGN_OR_RETURN(const int i_layer, layer_index(qs, qs.i_ffn_down, name));
  if (ftype == FT::MOSTLY_Q2_K) {
    new_type = TT::Q3_K;
  } else if (ftype == FT::MOSTLY_Q2_K_S) {
    if (i_layer < n_layer / 8) new_type = TT::Q4_K;
  } else if (ftype == FT::MOSTLY_IQ3_XXS && !qs.has_imatrix) {
    new_type = i_layer < n_layer / 8 ? TT::Q4_K : TT::Q3_K;
  } else if (ftype == FT::MOSTLY_Q3_K_M) {
    new_type = i_layer < n_layer / 16 ? TT::Q5_K : !falcon || use_more_bits(i_layer, n_layer) ? TT::Q4_K : TT::Q3_K;
  } else if (ftype == FT::MOSTLY_IQ3_M && (i_layer < n_layer / 8 || (c.n_expert == 8 && use_more_bits(i_layer, n_layer)))) {
    new_type = TT::Q4_K;
  } else if (ftype == FT::MOSTLY_Q3_K_L) {
    new_type = falcon ? TT::Q4_K : TT::Q5_K;
  } else if (ftype == FT::MOSTLY_Q4_K_M) {
    if (falcon) {
      new_type = i_layer < n_layer / 16 ? TT::Q6_K : use_more_bits(i_layer, n_layer) ? TT::Q5_K : TT::Q4_K;
    } else if (use_more_bits(i_layer, n_layer)) {
      new_type = TT::Q6_K;
    }
  } else if (i_layer < n_layer / 8 && c.is({FT::MOSTLY_IQ4_NL, FT::MOSTLY_IQ4_XS}) && !qs.has_imatrix) {
    new_type = TT::Q5_K;
  } else if (ftype == FT::MOSTLY_Q5_K_M && use_more_bits(i_layer, n_layer)) {
    new_type = TT::Q6_K;
  } else if (ftype == FT::MOSTLY_Q4_K_S && !falcon && i_layer < n_layer / 8) {
    new_type = TT::Q5_K;
  } else if (c.is({FT::MOSTLY_Q4_0, FT::MOSTLY_Q5_0}) && qs.has_imatrix && i_layer < n_layer / 8) {
    new_type = ftype == FT::MOSTLY_Q4_0 ? TT::Q4_1 : TT::Q5_1;
  }
  ++qs.i_ffn_down;
  return new_type;
}

// attn_output: more bits in the low-bit mixes (8-expert models: Q5_K in most).
TensorType attn_output_type(const MixCase& c, TensorType new_type) {
  using FT = FileType;
  using TT = TensorType;
  const FileType ftype = c.ftype;
  if (c.falcon) return ftype == FT::MOSTLY_Q3_K_L ? TT::Q4_K : new_type;
  if (c.n_expert == 8) {
    if (c.is({FT::MOSTLY_Q2_K, FT::MOSTLY_IQ3_XS, FT::MOSTLY_IQ3_XXS, FT::MOSTLY_Q3_K_S, FT::MOSTLY_Q3_K_M,
              FT::MOSTLY_IQ4_NL, FT::MOSTLY_Q4_K_S, FT::MOSTLY_Q4_K_M, FT::MOSTLY_IQ3_S, FT::MOSTLY_IQ3_M,
              FT::MOSTLY_IQ4_XS})) {
      new_type = TT::Q5_K;
    }
  } else {
    if (ftype == FT::MOSTLY_Q2_K) new_type = TT::Q3_K;
    else if (ftype == FT::MOSTLY_IQ3_XXS) new_type = TT::IQ3_S;
    else if (ftype == FT::MOSTLY_Q3_K_M) new_type = TT::Q4_K;
    else if (ftype == FT::MOSTLY_Q3_K_L) new_type = TT::Q5_K;
    else if (ftype == FT::MOSTLY_IQ3_M) new_type = TT::Q4_K;
  }
  return new_type;
}

// ffn_gate and ffn_up: IQ3_XS takes IQ3_XXS on the middle layers.
Expected<TensorType> ffn_gate_up_type(const MixCase& c, RuleState& qs, Cat cat, const std::string& name,
                                      TensorType new_type) {
  int& counter = cat == Cat::kFfnGate ? qs.i_ffn_gate : qs.i_ffn_up;
  LOOM_ASSIGN_OR_RETURN(const int i_layer, layer_index(qs, counter, name));
  if (c.ftype == FileType::MOSTLY_IQ3_XS && i_layer >= c.n_layer / 8 && i_layer < 7 * c.n_layer / 8) {
    new_type = TensorType::IQ3_XXS;
  }
  ++counter;
  return new_type;
}

// llama.cpp's llama_tensor_get_type_impl: the mix's choice for one tensor.
Expected<TensorType> mix_rule(RuleState& qs, TensorType new_type, const TensorInfo& t, FileType ftype, Cat cat,
                              const QuantizeParams& params) {
  const MixCase c = mix_case(qs, ftype);
  if (cat == Cat::kOutput || (qs.tied_embeddings && cat == Cat::kTokenEmbd)) return output_type(c, t, new_type, params);
  if (ftype == FileType::MOSTLY_MXFP4_MOE) return mxfp4_moe_type(qs, t, cat);
  if (cat == Cat::kTokenEmbd) return token_embd_type(c, new_type, params);
  if (c.iq12) return iq12_type(c, qs, cat, new_type);
  if (is_attn_v_like(cat)) return attn_v_type(c, qs, new_type);
  if (cat == Cat::kAttnK || cat == Cat::kAttnQ) return attn_qk_type(c, cat, new_type);
  if (cat == Cat::kFfnDown) return ffn_down_type(c, qs, t.name, new_type);
  if (cat == Cat::kAttnOutput) return attn_output_type(c, new_type);
  if (cat == Cat::kFfnGate || cat == Cat::kFfnUp) return ffn_gate_up_type(c, qs, cat, t.name, new_type);
  // (attn_qkv is attn_v-like above, so llama.cpp's separate attn_qkv rules never apply.)
  return new_type;
}

// llama.cpp's tensor_type_fallback: rows that do not split into blocks of the chosen type.
Expected<TensorPlan> with_fallback(const TensorInfo& t, TensorType type) {
  using TT = TensorType;
  TensorPlan plan{type, true, false};
  const int64_t bs = block_size(type);
  if (t.ne[0] % bs == 0) return plan;
  switch (type) {
    case TT::IQ1_S:
    case TT::IQ1_M:
    case TT::IQ2_XXS:
    case TT::IQ2_XS:
    case TT::IQ2_S:
    case TT::IQ3_XXS:
    case TT::IQ3_S:
    case TT::IQ4_XS: plan.type = TT::IQ4_NL; break;
    case TT::Q2_0:
    case TT::Q2_K:
    case TT::Q3_K:
    case TT::TQ1_0:
    case TT::TQ2_0: plan.type = TT::Q4_0; break;
    case TT::Q4_K: plan.type = TT::Q5_0; break;
    case TT::Q5_K: plan.type = TT::Q5_1; break;
    case TT::Q6_K: plan.type = TT::Q8_0; break;
    default:
      if (bs > 32) {
        return unsupported("tensor " + t.name + " has rows of " + std::to_string(t.ne[0]) +
                           " elements, not a multiple of the " + std::string(tensor_type_name(type)) + " block size " +
                           std::to_string(bs) + ", and " + std::string(tensor_type_name(type)) + " has no fallback type");
      }
      break;  // a 32-element type: F16 below, as llama.cpp
  }
  if (t.ne[0] % block_size(plan.type) != 0) plan.type = TT::F16;
  plan.fallback = true;
  return plan;
}

// llama.cpp's tensor_requires_imatrix.
bool requires_imatrix(const std::string& name, TensorType t, FileType ftype) {
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight" || name == "output.weight") return false;
  switch (t) {
    case TensorType::IQ3_XXS:
    case TensorType::IQ2_XXS:
    case TensorType::IQ2_XS:
    case TensorType::IQ2_S:
    case TensorType::IQ1_M:
    case TensorType::IQ1_S: return true;
    case TensorType::Q2_K: return ftype == FileType::MOSTLY_Q2_K_S;
    default: return false;
  }
}

// llama.cpp's llama_tensor_get_type for a tensor it quantizes.
Expected<TensorPlan> tensor_type_rule(RuleState& qs, const TensorInfo& t, const QuantizeParams& params, TensorType base) {
  const Cat cat = category_of(t.name);
  if (params.token_embedding_type && cat == Cat::kTokenEmbd) return TensorPlan{*params.token_embedding_type, true, false};
  if (params.output_tensor_type && cat == Cat::kOutput) return TensorPlan{*params.output_tensor_type, true, false};
  if (!is_quantized(base)) return TensorPlan{base, true, false};
  TensorType type = base;
  if (!params.pure) {
    LOOM_ASSIGN_OR_RETURN(type, mix_rule(qs, base, t, params.ftype, cat, params));
  }
  return with_fallback(t, type);
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

}  // namespace

std::span<const FileTypeInfo> file_types() { return kFileTypes; }

std::optional<FileType> parse_file_type(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const FileTypeInfo& f : kFileTypes) {
    if (f.name == lower) return f.ftype;
  }
  if (!lower.empty() && lower.size() <= 3 &&
      std::all_of(lower.begin(), lower.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const uint32_t id = uint32_t(std::stoul(lower));
    for (const FileTypeInfo& f : kFileTypes) {
      if (uint32_t(f.ftype) == id) return f.ftype;
    }
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
  for (const auto& [what, type] :
       {std::pair{"output tensor", params.output_tensor_type}, std::pair{"token embedding", params.token_embedding_type}}) {
    if (type && !can_quantize_to(*type)) {
      return unsupported(std::string("cannot quantize to ") + std::string(tensor_type_name(*type)) + " (the " + what +
                         " type)");
    }
  }
  const bool have_imatrix = params.imatrix != nullptr && !params.imatrix->entries.empty();
  const auto& ts = in.tensors();
  RuleState qs;
  qs.m = model_facts(in);
  qs.has_imatrix = have_imatrix;
  for (const TensorInfo& t : ts) {
    const Cat c = category_of(t.name);
    if (is_attn_v_like(c)) ++qs.n_attention_wv;
    if (c == Cat::kOutput) qs.tied_embeddings = false;
  }

  std::vector<TensorPlan> plans(ts.size());
  for (size_t i : llama_cpp_order(ts)) {
    const TensorInfo& t = ts[i];
    TensorPlan plan{t.type, false, false};
    if (wants_quantization(t, params)) {
      LOOM_ASSIGN_OR_RETURN(plan, tensor_type_rule(qs, t, params, ft.base));
      plan.requires_imatrix = requires_imatrix(t.name, plan.type, params.ftype);
      if (plan.requires_imatrix && !have_imatrix) {
        return invalid_argument("this quantization requires an importance matrix (--imatrix FILE): tensor " + t.name +
                                " would be " + std::string(tensor_type_name(plan.type)));
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
      if (!can_quantize_to(plan.type)) {
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

Expected<Imatrix> filter_imatrix(const Imatrix& im, const std::vector<std::string>& include,
                                 const std::vector<std::string>& exclude) {
  if (!include.empty() && !exclude.empty()) {
    return invalid_argument("--include-weights and --exclude-weights cannot be used together");
  }
  Imatrix out = im;
  if (!exclude.empty()) {
    std::erase_if(out.entries, [&](const auto& e) {
      return std::any_of(exclude.begin(), exclude.end(), [&](const std::string& x) { return contains(e.first, x); });
    });
  }
  if (!include.empty()) {
    std::erase_if(out.entries, [&](const auto& e) {
      return std::none_of(include.begin(), include.end(), [&](const std::string& x) { return contains(e.first, x); });
    });
  }
  return out;
}

bool can_quantize_to(TensorType t) {
  using TT = TensorType;
  switch (t) {
    case TT::F32:
    case TT::F16:
    case TT::BF16:
    case TT::Q8_0:
    case TT::Q4_0:
    case TT::Q4_1:
    case TT::Q5_0:
    case TT::Q5_1:
    case TT::IQ4_NL:
    case TT::IQ4_XS:
    case TT::Q2_K:
    case TT::Q3_K:
    case TT::Q4_K:
    case TT::Q5_K:
    case TT::Q6_K:
    case TT::IQ2_XXS:
    case TT::IQ2_XS:
    case TT::IQ2_S:
    case TT::IQ3_XXS:
    case TT::IQ3_S:
    case TT::IQ1_S:
    case TT::IQ1_M:
    case TT::TQ1_0:
    case TT::TQ2_0:
    case TT::MXFP4:
    case TT::Q1_0:
    case TT::Q2_0: return true;
    default: return false;
  }
}

std::vector<size_t> llama_cpp_tensor_order(const std::vector<gguf::TensorInfo>& ts) { return llama_cpp_order(ts); }

}  // namespace loom::model
