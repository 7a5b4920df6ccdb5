#include "kv/recurrent_cache.h"

#include <algorithm>

namespace loom::kv {

namespace {
constexpr Pos kPosMax = std::numeric_limits<Pos>::max();
}

Expected<std::unique_ptr<RecurrentCache>> RecurrentCache::create(const RecurrentCacheParams& p) {
  if (p.n_cells <= 0 || p.n_cells > kMaxSeqs || p.n_layer <= 0 || p.conv_row <= 0 || p.ssm_row < 0) {
    return invalid_argument("recurrent state cache needs 1.." + std::to_string(kMaxSeqs) + " cells, layers and state sizes");
  }
  std::unique_ptr<RecurrentCache> rs(new RecurrentCache());
  rs->params_ = p;
  if (p.layers.empty()) {
    for (int il = 0; il < p.n_layer; ++il) rs->layers_.push_back(il);
  } else {
    rs->layers_ = p.layers;
    for (int il : p.layers) {
      if (il < 0 || il >= p.n_layer)
        return invalid_argument("recurrent state layer " + std::to_string(il) + " is out of range");
    }
  }
  rs->cells_.resize(size_t(p.n_cells));
  rs->tails_.assign(kMaxSeqs, -1);
  const int n_rows = 2 * p.n_cells;
  const size_t per_layer = size_t(p.conv_row + p.ssm_row) * size_t(n_rows);
  rs->storage_.assign(per_layer * rs->layers_.size(), 0.0f);
  rs->taken_.assign(size_t(n_rows), 0);
  model::RecurrentView& v = rs->view_;
  v.conv_row = p.conv_row;
  v.ssm_row = p.ssm_row;
  v.n_rows = n_rows;
  v.layers.assign(size_t(p.n_layer), model::RecurrentLayerView{});
  for (size_t k = 0; k < rs->layers_.size(); ++k) {
    float* base = rs->storage_.data() + per_layer * k;
    v.layers[size_t(rs->layers_[k])].conv = base;
    v.layers[size_t(rs->layers_[k])].ssm = base + size_t(p.conv_row) * size_t(n_rows);
  }
  return rs;
}

int RecurrentCache::n_tokens() const {
  int n = 0;
  for (const RsCell& c : cells_) n += int(c.seqs.count());
  return n;
}

void RecurrentCache::drop(int i) {
  RsCell& c = cells_[size_t(i)];
  c = RsCell{};
  --used_;
}

void RecurrentCache::clear() {
  for (RsCell& c : cells_) c = RsCell{};
  std::fill(tails_.begin(), tails_.end(), -1);
  used_ = 0;
}

bool RecurrentCache::seq_rm(SeqId seq, Pos p0, Pos p1) {
  // The reference checks (uint32_t) seq < n_seq_max first: every negative seq is refused
  // (clearing all states is clear()).
  if (seq < 0) return false;
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = kPosMax;
  const int t = tails_[size_t(seq)];
  if (t < 0) return true;
  RsCell& c = cells_[size_t(t)];
  // The state of the tokens before p0 is gone once later tokens went in: a recurrent state
  // cannot lose its end without losing all of it.
  if (p0 > 0 && p0 <= c.pos && p1 > c.pos) return false;
  if (c.pos < p0 || c.pos >= p1) return true;  // the range misses the state
  c.seqs.reset(size_t(seq));
  tails_[size_t(seq)] = -1;
  if (c.empty()) drop(t);
  return true;
}

void RecurrentCache::seq_cp(SeqId src, SeqId dst, Pos, Pos) {
  if (src == dst || src < 0 || dst < 0) return;
  const int td = tails_[size_t(dst)];
  if (td >= 0) {
    RsCell& c = cells_[size_t(td)];
    c.seqs.reset(size_t(dst));
    tails_[size_t(dst)] = -1;
    if (c.empty()) drop(td);
  }
  const int ts = tails_[size_t(src)];
  if (ts >= 0) {
    cells_[size_t(ts)].seqs.set(size_t(dst));
    tails_[size_t(dst)] = ts;
  }
}

void RecurrentCache::seq_keep(SeqId seq) {
  for (int s = 0; s < kMaxSeqs; ++s) {
    if (s != seq) tails_[size_t(s)] = -1;
  }
  for (int i = 0; i < size(); ++i) {
    RsCell& c = cells_[size_t(i)];
    if (c.empty()) continue;
    if (seq >= 0 && c.seqs.test(size_t(seq))) {
      c.seqs.reset();
      c.seqs.set(size_t(seq));
    } else {
      drop(i);
    }
  }
}

template <typename F>
void RecurrentCache::move_pos(SeqId seq, Pos p0, Pos p1, F&& f) {
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = kPosMax;
  if (p0 == p1 || seq < 0 || seq >= kMaxSeqs) return;
  const int t = tails_[size_t(seq)];
  if (t < 0) return;
  RsCell& c = cells_[size_t(t)];
  if (p0 <= c.pos && c.pos < p1) c.pos = f(c.pos);
}

void RecurrentCache::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  if (delta != 0) move_pos(seq, p0, p1, [delta](Pos p) { return p + delta; });
}

void RecurrentCache::seq_div(SeqId seq, Pos p0, Pos p1, int d) {
  if (d != 1) move_pos(seq, p0, p1, [d](Pos p) { return p / d; });
}

Pos RecurrentCache::seq_pos_min(SeqId seq) const {
  Pos m = -1;
  for (const RsCell& c : cells_) {
    if (!c.empty() && (seq < 0 || c.seqs.test(size_t(seq))) && (m < 0 || c.pos < m)) m = c.pos;
  }
  return m;
}

Pos RecurrentCache::seq_pos_max(SeqId seq) const {
  Pos m = -1;
  for (const RsCell& c : cells_) {
    if (!c.empty() && (seq < 0 || c.seqs.test(size_t(seq)))) m = std::max(m, c.pos);
  }
  return m;
}

void RecurrentCache::mark_rows() const {
  std::fill(taken_.begin(), taken_.end(), 0);
  for (const RsCell& c : cells_) {
    if (!c.empty()) taken_[size_t(c.row)] = 1;
  }
}

int RecurrentCache::free_row() const {
  for (int r = 0; r < view_.n_rows; ++r) {
    if (!taken_[size_t(r)]) {
      taken_[size_t(r)] = 1;
      return r;
    }
  }
  return -1;
}

int RecurrentCache::cells_needed(std::span<const SeqPlan> plans) const {
  // A sequence without a state takes a cell. Of the b sequences of the batch that share a cell of
  // c holders, each leaves it for a cell of its own while others still hold it: b new cells, or
  // b - 1 when all c are in the batch (the last one keeps the cell).
  int n = 0;
  std::vector<int> in_batch(cells_.size(), 0);
  for (const SeqPlan& p : plans) {
    const int t = tails_[size_t(p.seq)];
    if (t < 0) ++n;
    else ++in_batch[size_t(t)];
  }
  for (size_t t = 0; t < cells_.size(); ++t) {
    const int b = in_batch[t];
    if (b == 0) continue;
    const int c = int(cells_[t].seqs.count());
    n += b - (b == c ? 1 : 0);
  }
  return n;
}

void RecurrentCache::plan(std::span<SeqPlan> plans) const {
  // Rows in use: those of the cells, then each planned destination. There are 2 x size() rows
  // and at most size() cells and size() sequences, so a free row always exists.
  mark_rows();
  for (SeqPlan& p : plans) {
    const int t = tails_[size_t(p.seq)];
    p.src_row = t >= 0 ? cells_[size_t(t)].row : -1;
    p.dst_row = free_row();
  }
}

int RecurrentCache::free_cell() const {
  for (int i = 0; i < size(); ++i) {
    if (cells_[size_t(i)].empty()) return i;
  }
  return -1;
}

void RecurrentCache::commit(std::span<const SeqPlan> plans) {
  for (const SeqPlan& p : plans) {
    const size_t s = size_t(p.seq);
    int t = tails_[s];
    if (t >= 0 && cells_[size_t(t)].seqs.count() > 1) {
      cells_[size_t(t)].seqs.reset(s);  // leave the shared state to the others
      t = -1;
    }
    if (t < 0) {
      t = free_cell();  // exists: every non-empty cell holds a distinct sequence
      ++used_;
      cells_[size_t(t)].seqs.set(s);
      tails_[s] = t;
    }
    cells_[size_t(t)].pos = p.last_pos;
    cells_[size_t(t)].row = p.dst_row;
  }
}

int RecurrentCache::restore_cell(int i, Pos pos, const std::bitset<kMaxSeqs>& seqs) {
  mark_rows();
  RsCell& c = cells_[size_t(i)];
  c.pos = pos;
  c.seqs = seqs;
  c.row = free_row();
  ++used_;
  for (int s = 0; s < kMaxSeqs; ++s) {
    if (seqs.test(size_t(s))) tails_[size_t(s)] = i;
  }
  return c.row;
}

}  // namespace loom::kv
