// The recurrent state cache of recurrent models (mamba): one cell per sequence instead of one per
// token. A cell holds a position (the last token its state has seen), the *set* of sequences that
// share the state (after seq_cp) and the physical row of its states (per layer one conv row and
// one SSM row, F32). Its sequence operations follow the reference (llama.cpp's
// llama_memory_recurrent with no rollback snapshots): a state can be copied, kept or cleared,
// and its position moved, but not partly removed; see docs/context.md for each return value.
//
// Rows are double-buffered: there are twice as many rows as cells, and a decode writes every
// sequence's new state into a row no cell uses (plan), so a failed or aborted decode leaves the
// cache exactly as it was; only commit() makes the new states current.
#pragma once

#include <bitset>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "kv/kv_cache.h"
#include "model/forward.h"

namespace loom::kv {

struct RsCell {
  Pos pos = -1;                // position of the last token in the state
  std::bitset<kMaxSeqs> seqs;  // sequences sharing this state
  int row = -1;                // state row (valid while the cell is not empty)
  bool empty() const { return seqs.none(); }
};

struct RecurrentCacheParams {
  int n_layer = 0;          // the model's layers (model::RecurrentView::layers has one entry per layer)
  std::vector<int> layers;  // the recurrent ones (a hybrid's); empty: all of them
  int n_cells = 0;          // max(1, n_seq_max)
  int64_t conv_row = 0;     // floats of one conv state
  int64_t ssm_row = 0;      // floats of one SSM state
};

class RecurrentCache {
 public:
  static Expected<std::unique_ptr<RecurrentCache>> create(const RecurrentCacheParams& p);

  const RecurrentCacheParams& params() const { return params_; }
  int size() const { return int(cells_.size()); }
  int used() const { return used_; }
  // Sum over cells of the sequences holding them (a shared state counts once per sequence).
  int n_tokens() const;
  const RsCell& cell(int i) const { return cells_[size_t(i)]; }
  int tail(SeqId s) const { return tails_[size_t(s)]; }  // the cell holding s, or -1
  const model::RecurrentView& view() const { return view_; }
  size_t bytes() const { return storage_.size() * sizeof(float); }
  // Bytes of one sequence's states over all layers (what a decode step reads and writes).
  size_t seq_state_bytes() const { return sizeof(float) * size_t(params_.conv_row + params_.ssm_row) * layers_.size(); }
  // The model layers with states here, in order.
  const std::vector<int>& layers() const { return layers_; }

  // ---- sequence operations, with the reference's semantics (p0 < 0 = from 0; p1 < 0 = to
  // infinity) ----
  void clear();
  // false, changing nothing, where the reference refuses: removing the end of a state but not
  // all of it (0 < p0 <= pos < p1), or any negative seq. A range that misses the state's
  // position removes nothing and returns true.
  bool seq_rm(SeqId seq, Pos p0, Pos p1);
  // dst shares src's state (the range is ignored); dst's own state, if any, is dropped.
  void seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1);
  void seq_keep(SeqId seq);
  // Moves the state's position when it lies in [p0, p1) (seq >= 0 only, as the reference).
  void seq_add(SeqId seq, Pos p0, Pos p1, Pos delta);
  void seq_div(SeqId seq, Pos p0, Pos p1, int d);
  Pos seq_pos_min(SeqId seq) const;  // the state's position (min = max); -1 without one
  Pos seq_pos_max(SeqId seq) const;

  // ---- decode ----
  struct SeqPlan {
    SeqId seq = 0;
    int src_row = -1;   // the row its state continues from, -1: a new sequence (zero state)
    int dst_row = -1;   // a row no cell uses, where the new state is written
    Pos last_pos = -1;  // position of its last token in the batch
  };
  // Cells that committing a batch of these sequences would take: one for each that holds no state
  // yet or shares its state with others (free cells must cover it: size() - used()).
  int cells_needed(std::span<const SeqPlan> plans) const;
  // Rows for the sequences of a batch (distinct sequences, at most size()); changes nothing.
  void plan(std::span<SeqPlan> plans) const;
  // Makes the planned states current: each sequence gets a cell of its own (its cell if it was
  // the only holder, else a free one, leaving the shared state to the others) with the new row.
  void commit(std::span<const SeqPlan> plans);

  // ---- state save / restore ----
  float* conv_row(int layer, int row) { return view_.layers[size_t(layer)].conv + int64_t(row) * params_.conv_row; }
  float* ssm_row(int layer, int row) { return view_.layers[size_t(layer)].ssm + int64_t(row) * params_.ssm_row; }
  const float* conv_row(int layer, int row) const { return const_cast<RecurrentCache*>(this)->conv_row(layer, row); }
  const float* ssm_row(int layer, int row) const { return const_cast<RecurrentCache*>(this)->ssm_row(layer, row); }
  // Sets cell i to hold `seqs` at `pos` (state restore; the cell must be empty and none of the
  // sequences may hold a state); returns the row to fill.
  int restore_cell(int i, Pos pos, const std::bitset<kMaxSeqs>& seqs);
  // The lowest empty cell, or -1.
  int free_cell() const;

 private:
  RecurrentCache() = default;
  void drop(int cell);  // frees a cell whose last sequence left
  // pos = f(pos) for seq's state when its position lies in [p0, p1) (seq >= 0 only).
  template <typename F>
  void move_pos(SeqId seq, Pos p0, Pos p1, F&& f);
  // Marks the rows of non-empty cells in taken_ ([2 x size()], reserved: decode allocates nothing).
  void mark_rows() const;
  int free_row() const;

  RecurrentCacheParams params_;
  std::vector<int> layers_;
  std::vector<RsCell> cells_;
  std::vector<int> tails_;  // [kMaxSeqs]
  std::vector<float> storage_;
  mutable std::vector<uint8_t> taken_;
  model::RecurrentView view_;
  int used_ = 0;
};

}  // namespace loom::kv

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using kv::RecurrentCache;
}  // namespace loom
