// The KV cache: per layer, K and V rows per cell ([cell][n_head_kv][head_dim] in type_k/type_v),
// and per cell the position and the *set* of sequences that share it (a common prompt prefix
// is stored once for many sequences). Which cells a token may attend to is derived from this
// metadata as a mask for each micro-batch.
//
// Position edits (seq_add / seq_div) change cell positions at once and record the change in
// `delta`; the K rows are re-rotated lazily (the context applies the pending shift through the
// model's RoPE before the next forward pass).
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "gguf/tensor_type.h"
#include "model/forward.h"

namespace loom::kv {

using SeqId = int32_t;
using Pos = int32_t;
inline constexpr int kMaxSeqs = 256;

struct KvCell {
  Pos pos = -1;
  Pos delta = 0;  // position change not yet applied to K (seq_add / seq_div)
  std::bitset<kMaxSeqs> seqs;
  bool empty() const { return seqs.none(); }
};

// One model layer stored in a cache. Layers may differ in their K/V widths (Gemma 4's sliding and
// global layers have different head sizes); head_dim is the quantization unit of their rows.
struct KvLayerSpec {
  int layer = 0;         // the model layer (index into KvView::layers)
  int64_t n_embd_k = 0;  // n_head_kv * head size of K
  int64_t n_embd_v = 0;
  int64_t head_dim = 0;  // rows are quantized per head: a multiple of the K/V types' block
  int reuse = -1;        // >= 0: attends over that layer's K/V (stored in this cache), stores none
};

struct KvCacheParams {
  int n_layer = 0;                  // the model's layers: KvView::layers has one entry per layer, null
                                    // where this cache stores nothing (layers of another cache or kind)
  std::vector<KvLayerSpec> layers;  // the layers this cache stores
  int n_cells = 0;
  TensorType type_k = TensorType::F16;
  TensorType type_v = TensorType::F16;
  // > 0: a sliding-window cache (the window layers of an iSWA model, sized for the window, not the
  // context): a cell that lies outside the window of every sequence holding it is free for reuse.
  int swa_window = 0;

  // Every one of n_layer layers with the same widths (the usual decoder).
  static KvCacheParams uniform(int n_layer, int n_cells, int64_t n_embd_k, int64_t n_embd_v, int64_t head_dim,
                               TensorType type_k, TensorType type_v) {
    KvCacheParams p;
    p.n_layer = n_layer;
    p.n_cells = n_cells;
    p.type_k = type_k;
    p.type_v = type_v;
    for (int il = 0; il < n_layer; ++il) p.layers.push_back({il, n_embd_k, n_embd_v, head_dim});
    return p;
  }
};

struct MaskParams {
  bool causal = true;
  int swa_window = 0;  // > 0: a token sees only cells with pos > its pos - window
};

class KvCache {
 public:
  static Expected<std::unique_ptr<KvCache>> create(const KvCacheParams& p);

  const KvCacheParams& params() const { return params_; }
  int size() const { return int(cells_.size()); }
  int used() const { return used_; }
  // Sum over cells of the number of sequences holding it (a shared cell counts once per sequence).
  int n_tokens() const;
  const KvCell& cell(int i) const { return cells_[size_t(i)]; }
  const KvView& view() const { return view_; }
  size_t bytes() const { return storage_.size(); }
  int swa_window() const { return params_.swa_window; }

  // Cells for n tokens (not necessarily contiguous); false when there are not enough. The full
  // cache takes free cells, first fit. A sliding-window cache takes, as llama.cpp's does, the cells
  // it can use — free, or out of every window (reusable()) — in ring order from its head (the cell
  // after the last one occupied; back to 0 when more than 2n cells before it are unused, or after
  // removals free cells before it), so the cells out of the windows go oldest first and a
  // sequence's positions leave the cache in order.
  bool find_slot(int n, int32_t* out) const;
  // Free (or, in a sliding-window cache, reusable) cells now: what find_slot can give.
  int n_free() const;
  // A sliding-window cache's cell that lies outside the window of every sequence holding it: the
  // next token of each of them (at its sequence's highest position + 1) cannot see it.
  bool reusable(int cell) const;
  // Marks a free cell as holding `pos` for the given sequences. A reusable cell is emptied first,
  // and its sequences' older positions go with it (a sequence always holds every position from
  // its lowest to its highest: llama.cpp's rule).
  void occupy(int cell, Pos pos, std::span<const SeqId> seqs);
  // Frees cells (used to roll back a failed decode).
  void release_cells(std::span<const int32_t> cells);
  // 1 + the highest occupied cell: attention scans cells [0, n_kv()).
  int n_kv() const;

  // mask[t][c] = 0 when column c's cell (cols[c], or c when cols is null) holds seq[t] at a
  // visible position, else -inf. Causal: pos <= pos[t].
  void build_mask(int n_tokens, const Pos* pos, const SeqId* seq, int n_kv, const MaskParams& mp, float* mask,
                  const int32_t* cols = nullptr) const;
  // Mask columns in position order for tokens of the given sequences (batch invariance:
  // attention sums a token's visible cells in column order, which must not depend on where the
  // cache put them). Returns false when cells [0, n_kv) already are in that order for every
  // listed sequence (their positions never decrease with the cell index: the usual case), else
  // writes order[0, n_kv) = the cells sorted by (position, index).
  bool position_order(int n_kv, std::span<const SeqId> seqs, int32_t* order) const;

  // ---- sequence edits (seq < 0 = every sequence; p0 < 0 = from 0; p1 < 0 = to infinity) ----
  void clear();
  void seq_rm(SeqId seq, Pos p0, Pos p1);
  void seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1);
  void seq_keep(SeqId seq);
  void seq_add(SeqId seq, Pos p0, Pos p1, Pos delta);
  void seq_div(SeqId seq, Pos p0, Pos p1, int d);
  Pos seq_pos_min(SeqId seq) const;  // -1 when the sequence has no cells
  Pos seq_pos_max(SeqId seq) const;

  // ---- K-shift bookkeeping ----
  bool has_shift() const { return has_shift_; }
  // Per-cell pending deltas ([size()]), for the model's K re-rotation.
  void pending_deltas(int32_t* out) const;
  void clear_shift();

  // ---- defragmentation ----
  // Fraction of the scanned range [0, n_kv()) that is holes.
  float fragmentation() const;
  // Moves occupied cells down into holes so they form the range [0, used()), copying K/V rows.
  void defrag();

  // Overwrites cell i's metadata (state restore); keeps used() and has_shift() consistent.
  void set_cell(int i, const KvCell& cell);

  // The layers with storage of their own (state files, defragmentation): not those that reuse.
  std::vector<int> stored_layers() const;
  // Raw row access (state save/restore) by model layer; the layer must be stored here.
  bool has_layer(int layer) const { return layer >= 0 && layer < int(view_.layers.size()) && view_.layers[size_t(layer)].k; }
  uint8_t* k_row(int layer, int cell) {
    const model::KvLayerView& l = view_.layers[size_t(layer)];
    return static_cast<uint8_t*>(l.k) + size_t(cell) * l.k_row_bytes;
  }
  uint8_t* v_row(int layer, int cell) {
    const model::KvLayerView& l = view_.layers[size_t(layer)];
    return static_cast<uint8_t*>(l.v) + size_t(cell) * l.v_row_bytes;
  }
  const uint8_t* k_row(int layer, int cell) const { return const_cast<KvCache*>(this)->k_row(layer, cell); }
  const uint8_t* v_row(int layer, int cell) const { return const_cast<KvCache*>(this)->v_row(layer, cell); }

 private:
  KvCache() = default;
  void free_cell(KvCell& c);
  template <typename F>
  void for_seq_cells(SeqId seq, Pos p0, Pos p1, F&& f);

  // Where the next ring search of a sliding-window cache starts (llama_kv_cache's head): after the
  // last cell occupied; lowered to the first cell a removal frees; 0 after clear, defrag, restore.
  void lower_head(int freed) {
    if (freed < head_) head_ = freed;
  }

  KvCacheParams params_;
  int head_ = 0;
  std::vector<KvCell> cells_;
  std::vector<uint8_t> storage_;
  KvView view_;
  int used_ = 0;
  bool has_shift_ = false;
};

}  // namespace loom::kv

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using kv::KvCache;
}  // namespace loom
