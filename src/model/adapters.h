// Adapters loaded from GGUF files and bound to a model's weights: LoRA adapters (llama.cpp's
// adapter format) and control vectors. Immutable after load; a context decides which are in
// effect and with what scale.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/forward.h"

namespace loom::model {

class Model;

// One adapted weight: `X.weight` with `X.weight.lora_a` ([n_in] x rank) and `.lora_b` (rank x [n_out]).
struct LoraTarget {
  std::string weight;      // base tensor name, e.g. "blk.0.attn_q.weight"
  int layer = -1;          // block index, -1 for token_embd / output
  LayerWeight kind = kWq;  // for layer >= 0
  TensorView a;            // [rank rows][n_in]  (token_embd: [n_vocab rows][rank])
  TensorView b;            // [n_out rows][rank] (token_embd: [n_embd rows][rank])
  int rank = 0;
};

class LoraAdapter {
 public:
  // Loads and checks an adapter against the model it will modify: architecture, every tensor
  // pair present with matching shapes, supported types.
  static Expected<std::shared_ptr<const LoraAdapter>> load(const std::string& path, const Model& model);
  static Expected<std::shared_ptr<const LoraAdapter>> from_gguf(gguf::GgufFile file, const Model& model);

  // user scale × alpha / rank, or the user scale when the file has no alpha (or 0).
  float effective_scale(float user_scale, int rank) const {
    return alpha_ > 0.0f ? user_scale * alpha_ / float(rank) : user_scale;
  }
  float alpha() const { return alpha_; }
  const std::vector<LoraTarget>& targets() const { return targets_; }
  const std::string& path() const { return path_; }

 private:
  LoraAdapter() = default;
  gguf::GgufFile file_;  // keeps the tensor data mapped
  std::string path_;
  float alpha_ = 0.0f;
  std::vector<LoraTarget> targets_;
};

// A control vector: one direction per layer. data[(L-1) * n_embd ...] is layer L (L >= 1), as
// llama.cpp lays it out; layer 0 never gets a vector.
struct ControlVector {
  int n_embd = 0;
  std::vector<float> data;  // [n_layers_in_file][n_embd], starting at layer 1

  int n_layers() const { return n_embd > 0 ? int(data.size() / size_t(n_embd)) : 0; }
  // Loads `direction.<L>` tensors (F32, 1-D) and multiplies them by `strength`.
  static Expected<ControlVector> load(const std::string& path, float strength);
  static Expected<ControlVector> from_gguf(const gguf::GgufFile& file, float strength);
  // Adds another vector (files given together are summed); n_embd must agree.
  Status add(const ControlVector& other);
};

}  // namespace loom::model

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using model::ControlVector;
using model::LoraAdapter;
}  // namespace loom
