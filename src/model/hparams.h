// Hyperparameters of a model, read from GGUF metadata ("<arch>.<key>").
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "gguf/gguf.h"
#include "ops/ops.h"

namespace loom {

enum class Arch { kLlama };

struct ModelHparams {
  std::string arch_name;  // general.architecture
  Arch arch = Arch::kLlama;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;   // key/value length per head (n_embd / n_head unless given)
  int64_t n_ff = 0;
  int64_t n_rot = 0;      // rotated dimensions per head
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  ops::RopeMode rope_mode = ops::RopeMode::kNormal;
  int pooling_type = -1;  // <arch>.pooling_type: 0 none, 1 mean, 2 cls, 3 last, 4 rank; -1 unset

  int64_t n_embd_q() const { return n_head * head_dim; }
  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
};

// Reads and validates hyperparameters; n_vocab is taken from the token embedding by the caller
// when the metadata lacks it.
Expected<ModelHparams> read_hparams(const gguf::GgufFile& file);

}  // namespace loom
