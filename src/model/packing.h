// Load-time repacking of weight matrices into the row-interleaved layout of quant/packed.h.
#pragma once

#include <functional>

#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "gguf/gguf.h"
#include "model/model.h"

namespace loom::model::detail {

// Owns the packed copies: one allocation, on Linux an anonymous mapping advised to use
// transparent huge pages (decode streams all of it every token: 2 MiB pages spare a TLB miss
// every 4 KiB).
struct PackedStorage {
  PackedStorage() = default;
  PackedStorage(const PackedStorage&) = delete;
  PackedStorage& operator=(const PackedStorage&) = delete;
  ~PackedStorage();
  // Allocates `n` bytes (64-byte aligned at least); false when out of memory.
  bool allocate(size_t n);

  void* data = nullptr;
  size_t bytes = 0;
  void* map = nullptr;      // the mapping data lies in (anonymous, or a packed-cache file), or null: heap
  size_t mapped = 0;        // its length
  bool from_cache = false;  // data is a packed-cache file's, mapped read-only
  // Writes the packed-cache file from data while the model runs (data is read-only once packed);
  // joined before data goes away.
  std::thread cache_writer;
};

// The packed-weights cache (LOOM_PACK_CACHE): packing a model's weights costs fresh memory that
// the OS must zero and fault in, most of a load's time; a cache file of the packed bytes, mapped
// from the page cache on the next load, costs neither. LOOM_PACK_CACHE=DIR uses DIR, =1 the default
// ${XDG_CACHE_HOME:-~/.cache}/loom/packed; unset, empty or 0: off. Returns "" when off.
std::string pack_cache_dir();

// True unless LOOM_NO_REPACK=1 is set (matrices are packed only where the CPU has a kernel).
bool repacking_enabled();

// Packs every layer matrix and the output matrix whose type has a packed layout into `store` and
// points each view's `packed` at its copy. Then releases the mapped pages of tensors that are no
// longer read in their GGUF layout (all but the token embedding, which stays in use for lookups)
// from the process's resident set, so the copy does not double the memory footprint.
// Returns how many more bytes (possibly negative) one pass over the packed matrices reads than
// over their GGUF layout (Q6_K's one-level-per-byte copy is larger, for instance).
// progress (may be empty) gets the fraction of bytes packed after each matrix.
int64_t pack_model_weights(const gguf::GgufFile& file, ModelWeights& w, PackedStorage& store,
                           const std::function<void(float)>& progress = {});

}  // namespace loom::model::detail
