// make_arch_variant's generator for smollm3, granite, lfm2 and qwen35 (make_arch_families.cpp).
#pragma once

#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

namespace loom {

// A real model's dimensions for speed benchmarks (E = 0: the tiny test shape of the .cpp).
struct FamilyShape {
  int64_t E = 0, L = 0, H = 0, Hkv = 0, D = 0, F = 0, n_rot = 0;
  int64_t S = 0, Hk = 0, Hv = 0, K = 0, n_nextn = 0;  // qwen35's DeltaNet and MTP blocks
  std::vector<int64_t> lfm2_attn;                     // lfm2's attention layers
  std::vector<int32_t> sections;                      // qwen35's M-RoPE sections
  float rope_base = 0;
  bool f16 = false;                                   // matrices as F16
};

// The bench shapes: "qwen35-0.8b", "lfm2-1.2b", "smollm3-3b", "gemma4-e2b", "ministral3-3b" (the
// published configs' dimensions; gemma4-e2b's S is the sliding layers' head size).
bool family_shape(const std::string& name, std::string& arch, FamilyShape& shape);

// Replaces w's metadata and tensors (a copy of `in`) by a synthetic model of `arch` with in's
// tokenizer; untied adds output.weight.
Status make_family_model(const gguf::GgufFile& in, gguf::GgufWriter& w, const std::string& arch, bool untied,
                         std::mt19937& rng, const FamilyShape& shape = {});

}  // namespace loom
