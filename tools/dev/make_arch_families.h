// make_arch_variant's generator for smollm3, granite, lfm2 and qwen35 (make_arch_families.cpp).
#pragma once

#include <random>
#include <string>

#include "base/status.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

namespace loom {

// Replaces w's metadata and tensors (a copy of `in`) by a synthetic model of `arch` with in's
// tokenizer; untied adds output.weight.
Status make_family_model(const gguf::GgufFile& in, gguf::GgufWriter& w, const std::string& arch, bool untied,
                         std::mt19937& rng);

}  // namespace loom
