// make_arch_variant's generators: the families of make_arch_families.cpp, the MoE variants of
// make_arch_moe.cpp and the state-space models of make_arch_ssm.cpp.
#pragma once

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "base/status.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

namespace loom {

// The random draws of the generators: N(0, std) values, fan-in scaled ones, norm weights 1 + N(0, 0.1).
struct Draws {
  std::mt19937& rng;
  std::normal_distribution<float> unit{0.0f, 1.0f};
  std::uniform_real_distribution<float> uni{0.0f, 1.0f};
  auto normal(float std) {
    return [this, std](int64_t) { return std * unit(rng); };
  }
  auto norm_weight() {
    return [this](int64_t) { return 1.0f + 0.1f * unit(rng); };
  }
};

// Adds tensor `name` of shape ne with the values gen(0), gen(1), ... (drawn in that order): F32, or
// F16 for matrices (2-D or stacked 3-D, rows of whole 32-value blocks) when f16.
struct TensorFiller {
  gguf::GgufWriter& w;
  bool f16 = false;
  template <typename Gen>
  Status operator()(const std::string& name, const std::vector<int64_t>& ne, Gen&& gen) const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    const bool half = f16 && (ne.size() == 2 || ne.size() == 3) && ne[0] % 32 == 0 && ne[1] > 1;
    std::vector<uint8_t> bytes(size_t(n) * (half ? 2 : 4));
    for (int64_t i = 0; i < n; ++i) {
      const float v = gen(i);
      if (half) {
        const uint16_t h = f32_to_f16(v);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      } else {
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      }
    }
    return w.add_tensor(name, half ? TensorType::F16 : TensorType::F32, ne, bytes);
  }
};

// A real model's dimensions for speed benchmarks (E = 0: the tiny test shape of the .cpp).
struct FamilyShape {
  int64_t E = 0, L = 0, H = 0, Hkv = 0, D = 0, F = 0, n_rot = 0;
  int64_t S = 0, Hk = 0, Hv = 0, K = 0, n_nextn = 0;  // qwen35's DeltaNet and MTP blocks
  std::vector<int64_t> lfm2_attn;                     // lfm2's attention layers
  std::vector<int32_t> sections;                      // qwen35's M-RoPE sections
  int64_t n_expert = 0, n_expert_used = 0;            // MoE shapes (F: the experts' width)
  float rope_base = 0;
  int64_t window = 0;    // gpt-oss: the sliding layers' window
  float router_std = 0;  // MoE routers N(0, router_std / sqrt(E)); 0: 2
  bool f16 = false;      // matrices as F16
};

// Drops w's architecture keys and tensors (a copy of in), keeping the tokenizer; returns n_vocab.
Expected<int64_t> clear_model(const gguf::GgufFile& in, gguf::GgufWriter& w);

// The bench shapes: "qwen35-0.8b", "lfm2-1.2b", "smollm3-3b", "gemma4-e2b", "ministral3-3b", "qwen3moe-2b", "gpt-oss-2b" (the
// published configs' dimensions; gemma4-e2b's S is the sliding layers' head size), and "qwen3moe-kq" (2 layers
// of n_embd 256, 8 experts of 256: the smallest qwen3moe whose every matrix fills K-quant blocks, for
// the Q4_K_M golden).
bool family_shape(const std::string& name, std::string& arch, FamilyShape& shape);

// Replaces w's metadata and tensors (a copy of `in`) by a synthetic model of `arch` with in's
// tokenizer; untied adds output.weight.
Status make_family_model(const gguf::GgufFile& in, gguf::GgufWriter& w, const std::string& arch, bool untied,
                         std::mt19937& rng, const FamilyShape& shape = {});

// A Mamba-1, Mamba-2 or Granite 4 hybrid model from scratch with `in`'s tokenizer (make_arch_ssm.cpp;
// make_arch_variant.cpp's usage). Weights are scaled so that activations stay O(1): projections
// N(0, 1/sqrt(fan_in)), A = -(n + 1)·e^N(0, 0.1) (S4D-real; Mamba-2: -U(1, 16) per head), dt bias =
// softplus^-1 of a log-uniform step in [1e-3, 1e-1], D = 1 + N(0, 0.1). granitehybrid adds, per
// layer, the FFN (n_ff 2·N_EMBD) and on the attention layers (ATTN_LAYERS, others Mamba-2) q/k/v/o
// of 4 heads of 16 with 2 kv heads, no RoPE (rope.scaling.finetuned false, as Granite 4.0 H), and
// Granite's multipliers: embedding 12, residual 0.22, attention 0.125 (not 1/sqrt(16)), logits 1/4.
enum class SsmKind { kMamba, kMamba2, kGraniteHybrid };
Status make_ssm_model(const gguf::GgufFile& in, gguf::GgufWriter& w, SsmKind kind, int64_t E, int64_t L, bool f16,
                      bool untied, const std::vector<int64_t>& attn_layers, std::mt19937& rng);

// Turns w (a copy of `in`, a dense synthetic model of the base family) into the mixture-of-experts
// architecture `arch` (qwen3moe, olmoe, llama, qwen35moe, qwen3next, lfm2moe, granitemoe, granitehybrid, gemma4):
// make_arch_moe.cpp. gpt-oss and gpt-oss-mxfp4 (MXFP4 expert stacks) are made from scratch with
// in's tokenizer instead (any file with a vocabulary).
Status make_moe_model(const gguf::GgufFile& in, gguf::GgufWriter& w, const std::string& arch, std::mt19937& rng);
// A qwen3moe at a bench shape (F16 matrices, F32 routers, tied output) from scratch with in's tokenizer.
Status make_qwen3moe_shape(const gguf::GgufFile& in, gguf::GgufWriter& w, std::mt19937& rng, const FamilyShape& shape);
// A gpt-oss at a bench shape (F16 matrices; F32 routers, biases and sinks; untied output) from scratch.
Status make_gpt_oss_shape(const gguf::GgufFile& in, gguf::GgufWriter& w, std::mt19937& rng, const FamilyShape& shape);

}  // namespace loom
