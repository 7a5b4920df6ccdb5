// The golden vocabularies and models of the shared folder that the tokenizer tests run over
// (paths relative to the shared folder; the goldens were made by real llama.cpp).
#pragma once

#include <ostream>

namespace loom::test {

struct GoldenSet {
  const char* name;
  const char* gguf;  // relative to the shared folder
  const char* json;  // golden with "tokenize" cases and/or "runs"
};
// Parameterised tests print the set's name.
inline void PrintTo(const GoldenSet& f, std::ostream* os) { *os << f.name; }

// Vocab-only files: SentencePiece, byte-level BPE with five pre-tokenizers, WordPiece (their
// goldens also hold the special ids llama.cpp resolved).
inline constexpr GoldenSet kVocabOnlySets[] = {
    {"vocab_llama_spm", "golden/vocab/ggml-vocab-llama-spm.gguf", "golden/vocab/ggml-vocab-llama-spm.json"},
    {"vocab_phi3", "golden/vocab/ggml-vocab-phi-3.gguf", "golden/vocab/ggml-vocab-phi-3.json"},
    {"bpe_llama3", "golden/vocab/llama3-bpe.gguf", "golden/vocab/llama3-bpe.json"},
    {"bpe_gpt2", "golden/vocab/ggml-vocab-gpt-2.gguf", "golden/vocab/ggml-vocab-gpt-2.json"},
    {"bpe_qwen2", "golden/vocab/ggml-vocab-qwen2.gguf", "golden/vocab/ggml-vocab-qwen2.json"},
    {"bpe_deepseek_coder", "golden/vocab/ggml-vocab-deepseek-coder.gguf", "golden/vocab/ggml-vocab-deepseek-coder.json"},
    {"bpe_falcon", "golden/vocab/ggml-vocab-falcon.gguf", "golden/vocab/ggml-vocab-falcon.json"},
    {"wpm_bert_base_uncased", "golden/vocab/bert-base-uncased.gguf", "golden/vocab/bert-base-uncased.json"},
    {"wpm_bert_bge", "golden/vocab/ggml-vocab-bert-bge.gguf", "golden/vocab/ggml-vocab-bert-bge.json"},
};

// Models whose goldens also hold generation runs.
inline constexpr GoldenSet kModelSets[] = {
    {"stories260K", "models/stories260K.gguf", "golden/stories260K.json"},
    {"llama2_tiny_random", "models/llama-2-tiny-random.gguf", "golden/llama-2-tiny-random.json"},
};

// Synthetic models (tiny random weights on real vocabularies); their goldens hold the prompt ids
// of their runs.
inline constexpr GoldenSet kSynthSets[] = {
    {"synth_bert_tiny", "models/synth-bert-tiny-f32.gguf", "golden/synth-bert-tiny-f32.json"},
    {"synth_gemma2_tiny", "models/synth-gemma2-tiny-f32.gguf", "golden/synth-gemma2-tiny-f32.json"},
    {"synth_llama_tiny", "models/synth-llama-tiny-f32.gguf", "golden/synth-llama-tiny-f32.json"},
    {"synth_phi3_tiny", "models/synth-phi3-tiny-f32.gguf", "golden/synth-phi3-tiny-f32.json"},
    {"synth_qwen2_tiny", "models/synth-qwen2-tiny-f32.gguf", "golden/synth-qwen2-tiny-f32.json"},
};

}  // namespace loom::test
