// Load-time repacking of weight matrices into the row-interleaved layout of quant/packed.h.
#pragma once

#include <cstddef>
#include <memory>

#include "gguf/gguf.h"
#include "model/model.h"

namespace loom::detail {

// Owns the packed copies (one 64-byte aligned allocation).
struct PackedStorage {
  struct Free { void operator()(void* p) const; };
  std::unique_ptr<void, Free> data;
  size_t bytes = 0;
};

// True unless LOOM_NO_REPACK=1 is set or the CPU has no packed kernels.
bool repacking_enabled();

// Packs every layer matrix and the output matrix whose type has a packed layout into `store` and
// points each view's `packed` at its copy. Then releases the mapped pages of tensors that are no
// longer read in their GGUF layout (all but the token embedding, which stays in use for lookups)
// from the process's resident set, so the copy does not double the memory footprint.
void pack_model_weights(const gguf::GgufFile& file, ModelWeights& w, PackedStorage& store);

}  // namespace loom::detail
