// The KV cache: per layer, K and V rows per cell ([cell][n_head_kv][head_dim] in type_k/type_v),
// and per cell the position and the *set* of sequences that share it (a common prompt prefix
// is stored once for many sequences). Which cells a token may attend to is derived from this
// metadata as a mask for each micro-batch.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "gguf/tensor_type.h"
#include "model/forward.h"

namespace loom {

using SeqId = int32_t;
using Pos = int32_t;
inline constexpr int kMaxSeqs = 256;

struct KvCell {
  Pos pos = -1;
  std::bitset<kMaxSeqs> seqs;
  bool empty() const { return seqs.none(); }
};

struct KvCacheParams {
  int n_layer = 0;
  int n_cells = 0;
  int64_t n_embd_k = 0;  // n_head_kv * head_dim
  int64_t n_embd_v = 0;
  int64_t head_dim = 0;  // rows are quantized per head: head_dim must be a multiple of the block
  TensorType type_k = TensorType::F16;
  TensorType type_v = TensorType::F16;
};

class KvCache {
 public:
  static Expected<std::unique_ptr<KvCache>> create(const KvCacheParams& p);

  int size() const { return int(cells_.size()); }
  int used() const { return used_; }
  const KvCell& cell(int i) const { return cells_[size_t(i)]; }
  const KvView& view() const { return view_; }
  size_t bytes() const { return storage_.size(); }

  // Free cells for n tokens, first fit (not necessarily contiguous); false when full.
  // `out` must have room for n entries.
  bool find_slot(int n, int32_t* out) const;
  void occupy(int cell, Pos pos, SeqId seq);
  // 1 + the highest occupied cell: attention scans cells [0, n_kv()).
  int n_kv() const;

  // mask[t][c] = 0 when cell c holds token t's sequence at a position <= pos[t], else -inf.
  void build_mask(int n_tokens, const Pos* pos, const SeqId* seq, int n_kv, float* mask) const;

  void clear();
  // Removes seq from cells with p0 <= pos < p1 (p0 < 0: from 0; p1 < 0: to infinity);
  // seq < 0 removes every sequence.
  void seq_rm(SeqId seq, Pos p0, Pos p1);
  // Highest position of seq, or -1 when it has no cells.
  Pos seq_pos_max(SeqId seq) const;

 private:
  KvCache() = default;
  void release(KvCell& c);

  KvCacheParams params_;
  std::vector<KvCell> cells_;
  std::vector<uint8_t> storage_;
  KvView view_;
  int used_ = 0;
};

}  // namespace loom
