// A context's memory: what a model keeps per sequence between decodes, behind one interface for
// every model kind. It is made of up to three parts, chosen from the model's layers:
//
//   kv      K/V of the attention layers over n_ctx cells (all of them; an iSWA model's global ones)
//   kv_swa  an iSWA model's sliding-window layers, in a cache sized for the window instead of the
//           context (min(n_ctx, n_swa * n_seq_swa + n_ubatch), padded to 256: llama.cpp's sizing),
//           whose cells are reused once they are outside every window
//   rs      recurrent states, one cell per sequence (Mamba's conv + SSM states, ...)
//
//   plain decoders (llama, qwen, phi3, gemma, BERT, T5)   kv
//   gemma2 / gemma3 (sliding-window layers)              kv + kv_swa (swa_full: kv alone, two masks)
//   mamba / mamba2                                        rs
//   hybrids (granitehybrid: Mamba-2 + attention layers)   kv + rs
//
// Each part stores only its layers (KvView / model::RecurrentView have one entry per model layer, null
// where a layer keeps nothing in that part), so a hybrid with attention on one layer in four
// allocates K/V for that quarter. Sequence operations apply to every part with llama.cpp's rules
// (llama_memory_hybrid, llama_kv_cache_iswa): seq_rm tries the recurrent part first and, when it
// cannot honour the range (a state cannot forget only its last tokens), refuses without changing
// anything; seq_pos_min is the highest of the parts' minima and seq_pos_max the lowest of their
// maxima (an iSWA cache's minimum is its window's). The context drives decodes through the parts
// (cells and masks per KV part, state rows for rs); it never asks what kind of model it runs.
#pragma once

#include <memory>

#include "base/status.h"
#include "kv/kv_cache.h"
#include "kv/recurrent_cache.h"
#include "model/hparams.h"

namespace loom::kv {

// Parts of a memory, as a mask: what an operation applies to. A prefix of the full KV part can be
// shared between sequences at any length (seq_cp of a range); the window cache and recurrent
// states hold a sequence only as of its last position, so they are saved and restored whole
// (checkpoints) instead.
enum MemoryPart : uint8_t {
  kPartKv = 1,
  kPartKvSwa = 2,
  kPartRecurrent = 4,
  kPartsAll = kPartKv | kPartKvSwa | kPartRecurrent,
  kPartsAtEnd = kPartKvSwa | kPartRecurrent,  // valid only at a sequence's last position
};

struct MemoryParams {
  int n_ctx = 0;      // cells of the full-size KV part
  int n_seq_max = 1;  // sequence ids in [0, n_seq_max): the recurrent part's cells
  // Sequences that hold a sliding window at once (the SWA cache's sizing; 0: n_seq_max). A
  // scheduler whose extra sequence ids hold cached prefixes sets its slots here.
  int n_seq_swa = 0;
  // Sequences that hold a recurrent state at once: the recurrent part's cells (0: n_seq_max). A
  // scheduler whose other sequence ids hold cached KV prefixes sets its slots here.
  int n_seq_states = 0;
  int n_ubatch = 512;
  TensorType type_k = TensorType::F16;
  TensorType type_v = TensorType::F16;
  int swa_window = 0;     // the window in effect on the model's SWA layers (0: none)
  bool swa_full = false;  // the SWA layers keep n_ctx cells too (one cache, two masks)
};

// Bytes and cells of each part (loom info --json, metrics).
struct MemoryBreakdown {
  size_t kv_bytes = 0, kv_swa_bytes = 0, rs_bytes = 0;
  int kv_cells = 0, kv_swa_cells = 0, rs_cells = 0;
  int kv_layers = 0, kv_swa_layers = 0, rs_layers = 0;
  size_t total() const { return kv_bytes + kv_swa_bytes + rs_bytes; }
};

class Memory {
 public:
  static Expected<std::unique_ptr<Memory>> create(const ModelHparams& hp, const MemoryParams& p);

  // ---- the parts (null when absent) ----
  KvCache* kv() { return kv_.get(); }
  const KvCache* kv() const { return kv_.get(); }
  KvCache* kv_swa() { return kv_swa_.get(); }
  const KvCache* kv_swa() const { return kv_swa_.get(); }
  RecurrentCache* rs() { return rs_.get(); }
  const RecurrentCache* rs() const { return rs_.get(); }
  // The KV part holding layer il (null for a recurrent layer).
  const KvCache* kv_of_layer(int il) const;
  // Micro-batches must be runs of one sequence each, the same length (a recurrent part).
  bool equal_split() const { return rs_ != nullptr; }
  // The parts this memory has (MemoryPart bits).
  uint8_t parts() const;

  // ---- sequence operations (seq < 0 = every sequence where allowed; p0 < 0 = from 0;
  // p1 < 0 = to infinity) ----
  void clear();
  // `parts` restricts an operation to some parts (MemoryPart bits); the others are left alone.
  bool seq_rm(SeqId seq, Pos p0, Pos p1, uint8_t parts = kPartsAll);
  void seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1, uint8_t parts = kPartsAll);
  void seq_keep(SeqId seq);
  void seq_add(SeqId seq, Pos p0, Pos p1, Pos delta);
  void seq_div(SeqId seq, Pos p0, Pos p1, int d);
  Pos seq_pos_min(SeqId seq) const;
  Pos seq_pos_max(SeqId seq) const;

  // Cells in use (the KV part's; a recurrent model's states) and tokens held (a shared cell counts
  // once per sequence).
  int used() const;
  int n_tokens() const;
  bool has_shift() const;
  MemoryBreakdown breakdown() const;

 private:
  Memory() = default;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<KvCache> kv_swa_;
  std::unique_ptr<RecurrentCache> rs_;
};

// The SWA cache's cells: min(n_ctx, window * n_seq + n_ubatch) rounded up to 256, as llama.cpp.
int swa_cache_cells(int n_ctx, int window, int n_seq, int n_ubatch);

}  // namespace loom::kv

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using kv::Memory;
using kv::MemoryBreakdown;
}  // namespace loom
