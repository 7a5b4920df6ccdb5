#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "quant/quant.h"

namespace loom::kv {

Expected<std::unique_ptr<KvCache>> KvCache::create(const KvCacheParams& p) {
  if (p.n_cells <= 0 || p.layers.empty() || p.n_layer <= 0)
    return invalid_argument("KV cache needs at least one cell and layer");
  for (TensorType t : {p.type_k, p.type_v}) {
    auto info = tensor_type_info(t);
    const bool allowed = t == TensorType::F32 || t == TensorType::F16 || t == TensorType::Q8_0 || t == TensorType::Q4_0 ||
                         t == TensorType::BF16;
    if (!info || !allowed || !quant::is_supported(t)) {
      return invalid_argument("unsupported KV cache type " + std::string(tensor_type_name(t)) +
                              " (use f32, f16, bf16, q8_0 or q4_0)");
    }
    for (const KvLayerSpec& l : p.layers) {
      if (l.head_dim <= 0 || l.head_dim % info->block_size != 0) {
        return invalid_argument("KV cache type " + std::string(info->name) + " needs head_dim to be a multiple of " +
                                std::to_string(info->block_size) + " (head_dim is " + std::to_string(l.head_dim) + ")");
      }
    }
  }
  for (const KvLayerSpec& l : p.layers) {
    if (l.layer < 0 || l.layer >= p.n_layer || l.n_embd_k <= 0 || l.n_embd_v <= 0) {
      return invalid_argument("KV cache layer " + std::to_string(l.layer) + " is out of range or empty");
    }
    if (l.reuse >= 0) {
      auto src = std::find_if(p.layers.begin(), p.layers.end(), [&](const KvLayerSpec& o) { return o.layer == l.reuse; });
      if (src == p.layers.end() || src->reuse >= 0 || src->n_embd_k != l.n_embd_k || src->n_embd_v != l.n_embd_v) {
        return invalid_argument("KV cache layer " + std::to_string(l.layer) + " reuses layer " + std::to_string(l.reuse) +
                                ", which is not stored in this cache with the same widths");
      }
    }
  }
  std::unique_ptr<KvCache> kv(new KvCache());
  kv->params_ = p;
  kv->cells_.resize(size_t(p.n_cells));
  KvView& v = kv->view_;
  v.type_k = p.type_k;
  v.type_v = p.type_v;
  v.n_cells = p.n_cells;
  v.layers.assign(size_t(p.n_layer), model::KvLayerView{});
  size_t total = 0;
  for (const KvLayerSpec& l : p.layers) {
    model::KvLayerView& lv = v.layers[size_t(l.layer)];
    if (lv.k_row_bytes) return invalid_argument("KV cache layer " + std::to_string(l.layer) + " is listed twice");
    lv.n_embd_k = l.n_embd_k;
    lv.n_embd_v = l.n_embd_v;
    lv.k_row_bytes = size_t(row_bytes(p.type_k, l.n_embd_k));
    lv.v_row_bytes = size_t(row_bytes(p.type_v, l.n_embd_v));
    if (l.reuse >= 0) continue;  // no storage of its own
    total += (lv.k_row_bytes + lv.v_row_bytes) * size_t(p.n_cells);
  }
  kv->storage_.assign(total, 0);
  uint8_t* base = kv->storage_.data();
  for (const KvLayerSpec& l : p.layers) {
    if (l.reuse >= 0) continue;
    model::KvLayerView& lv = v.layers[size_t(l.layer)];
    lv.k = base;
    base += lv.k_row_bytes * size_t(p.n_cells);
    lv.v = base;
    base += lv.v_row_bytes * size_t(p.n_cells);
  }
  for (const KvLayerSpec& l : p.layers) {
    if (l.reuse < 0) continue;
    model::KvLayerView& lv = v.layers[size_t(l.layer)];
    lv.k = v.layers[size_t(l.reuse)].k;
    lv.v = v.layers[size_t(l.reuse)].v;
    lv.reused = true;
  }
  return kv;
}

std::vector<int> KvCache::stored_layers() const {
  std::vector<int> out;
  for (const KvLayerSpec& l : params_.layers) {
    if (l.reuse < 0) out.push_back(l.layer);
  }
  return out;
}

int KvCache::n_tokens() const {
  int n = 0;
  for (const auto& c : cells_) n += int(c.seqs.count());
  return n;
}

namespace {

// Highest position of every sequence (-1 without cells), in one pass over the cells.
void seq_pos_max_all(const std::vector<KvCell>& cells, Pos* out) {
  std::fill(out, out + kMaxSeqs, Pos(-1));
  for (const KvCell& c : cells) {
    if (c.empty()) continue;
    for (size_t s = c.seqs._Find_first(); s < size_t(kMaxSeqs); s = c.seqs._Find_next(s)) out[s] = std::max(out[s], c.pos);
  }
}

// Masked for the next token of every sequence holding it (at that sequence's highest position + 1).
bool outside_windows(const KvCell& c, const Pos* pos_max, int window) {
  if (c.empty()) return false;
  for (size_t s = c.seqs._Find_first(); s < size_t(kMaxSeqs); s = c.seqs._Find_next(s)) {
    if (pos_max[s] + 1 - c.pos < window) return false;
  }
  return true;
}

}  // namespace

bool KvCache::reusable(int cell) const {
  if (params_.swa_window <= 0 || cells_[size_t(cell)].empty()) return false;
  Pos pos_max[kMaxSeqs];
  seq_pos_max_all(cells_, pos_max);
  return outside_windows(cells_[size_t(cell)], pos_max, params_.swa_window);
}

int KvCache::n_free() const {
  int n = size() - used_;
  if (params_.swa_window > 0) {
    Pos pos_max[kMaxSeqs];
    seq_pos_max_all(cells_, pos_max);
    for (const KvCell& c : cells_) n += outside_windows(c, pos_max, params_.swa_window);
  }
  return n;
}

bool KvCache::find_slot(int n, int32_t* out) const {
  int found = 0;
  if (params_.swa_window <= 0) {
    if (n > size() - used_) return false;
    for (int c = 0; c < size() && found < n; ++c) {
      if (cells_[size_t(c)].empty()) out[found++] = c;
    }
    return found == n;
  }
  // A sliding-window cache: free cells and cells out of every window alike, in ring order from
  // the head (llama_kv_cache::find_slot's order). Filled in order, the cells out of the windows
  // then go oldest position first: reusing one removes its sequences' older positions, so any
  // other order would drop more of a sequence than the cells it takes.
  Pos pos_max[kMaxSeqs];
  seq_pos_max_all(cells_, pos_max);
  int c = head_ > used_ + 2 * n ? 0 : head_;
  for (int tested = 0; tested < size() && found < n; ++tested, c = c + 1 == size() ? 0 : c + 1) {
    const KvCell& cell = cells_[size_t(c)];
    if (cell.empty() || outside_windows(cell, pos_max, params_.swa_window)) out[found++] = c;
  }
  return found == n;
}

void KvCache::occupy(int cell, Pos pos, std::span<const SeqId> seqs) {
  KvCell& c = cells_[size_t(cell)];
  if (!c.empty()) {
    // A reused sliding-window cell: it and every older position of its sequences leave.
    const KvCell old = c;
    free_cell(c);
    for (size_t s = 0; s < size_t(kMaxSeqs); ++s) {
      if (old.seqs.test(s)) seq_rm(SeqId(s), -1, old.pos + 1);
    }
  }
  ++used_;
  c.pos = pos;
  c.delta = 0;
  for (SeqId s : seqs) c.seqs.set(size_t(s));
  head_ = cell + 1 == size() ? 0 : cell + 1;
}

void KvCache::release_cells(std::span<const int32_t> cells) {
  for (int32_t i : cells) {
    KvCell& c = cells_[size_t(i)];
    if (!c.empty()) {
      free_cell(c);
      lower_head(i);
    }
  }
}

int KvCache::n_kv() const {
  for (int c = size() - 1; c >= 0; --c) {
    if (!cells_[size_t(c)].empty()) return c + 1;
  }
  return 0;
}

void KvCache::build_mask(int n_tokens, const Pos* pos, const SeqId* seq, int n_kv, const MaskParams& mp, float* mask,
                         const int32_t* cols) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int t = 0; t < n_tokens; ++t) {
    float* row = mask + int64_t(t) * n_kv;
    const size_t s = size_t(seq[t]);
    for (int c = 0; c < n_kv; ++c) {
      const KvCell& cell = cells_[size_t(cols ? cols[c] : c)];
      bool visible = cell.seqs.test(s);
      if (visible && mp.causal) visible = cell.pos <= pos[t];
      if (visible && mp.swa_window > 0) visible = pos[t] - cell.pos < mp.swa_window;
      row[c] = visible ? 0.0f : kNegInf;
    }
  }
}

bool KvCache::position_order(int n_kv, std::span<const SeqId> seqs, int32_t* order) const {
  bool sorted = true;
  for (size_t i = 0; i < seqs.size() && sorted; ++i) {
    const size_t s = size_t(seqs[i]);
    Pos last = std::numeric_limits<Pos>::min();
    for (int c = 0; c < n_kv; ++c) {
      const KvCell& cell = cells_[size_t(c)];
      if (!cell.seqs.test(s)) continue;
      if (cell.pos < last) {
        sorted = false;
        break;
      }
      last = cell.pos;
    }
  }
  if (sorted) return false;
  for (int c = 0; c < n_kv; ++c) order[c] = c;
  std::sort(order, order + n_kv, [this](int32_t a, int32_t b) {
    const Pos pa = cells_[size_t(a)].pos, pb = cells_[size_t(b)].pos;
    return pa != pb ? pa < pb : a < b;
  });
  return true;
}

void KvCache::set_cell(int i, const KvCell& cell) {
  head_ = 0;
  KvCell& c = cells_[size_t(i)];
  used_ += int(!cell.empty()) - int(!c.empty());
  c = cell;
  if (c.delta != 0) has_shift_ = true;
}

void KvCache::free_cell(KvCell& c) {
  c.pos = -1;
  c.delta = 0;
  c.seqs.reset();
  --used_;
}

void KvCache::clear() {
  for (auto& c : cells_) c = KvCell{};
  used_ = 0;
  has_shift_ = false;
  head_ = 0;
}

template <typename F>
void KvCache::for_seq_cells(SeqId seq, Pos p0, Pos p1, F&& f) {
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = std::numeric_limits<Pos>::max();
  for (int i = 0; i < size(); ++i) {
    KvCell& c = cells_[size_t(i)];
    if (c.empty() || c.pos < p0 || c.pos >= p1) continue;
    if (seq >= 0 && !c.seqs.test(size_t(seq))) continue;
    f(c, i);
  }
}

void KvCache::seq_rm(SeqId seq, Pos p0, Pos p1) {
  for_seq_cells(seq, p0, p1, [&](KvCell& c, int i) {
    if (seq >= 0) {
      c.seqs.reset(size_t(seq));
      if (!c.empty()) return;
      c.seqs.set(0);  // free_cell expects an occupied cell
    }
    free_cell(c);
    lower_head(i);
  });
}

void KvCache::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  if (src == dst || src < 0 || dst < 0) return;
  for_seq_cells(src, p0, p1, [&](KvCell& c, int) { c.seqs.set(size_t(dst)); });
}

void KvCache::seq_keep(SeqId seq) {
  for (int i = 0; i < size(); ++i) {
    KvCell& c = cells_[size_t(i)];
    if (c.empty()) continue;
    if (seq >= 0 && c.seqs.test(size_t(seq))) {
      c.seqs.reset();
      c.seqs.set(size_t(seq));
    } else {
      free_cell(c);
      lower_head(i);
    }
  }
}

void KvCache::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  if (delta == 0 || std::max(p0, 0) == (p1 < 0 ? std::numeric_limits<Pos>::max() : p1)) return;
  // The reference's head afterwards: the first cell freed (pushed below position 0), else 0.
  int freed = -1;
  for_seq_cells(seq, p0, p1, [&](KvCell& c, int i) {
    has_shift_ = true;
    c.pos += delta;
    c.delta += delta;
    if (c.pos < 0) {
      free_cell(c);
      if (freed < 0) freed = i;
    }
  });
  head_ = std::max(freed, 0);
}

void KvCache::seq_div(SeqId seq, Pos p0, Pos p1, int d) {
  if (d <= 1) return;
  for_seq_cells(seq, p0, p1, [&](KvCell& c, int) {
    has_shift_ = true;
    const Pos old = c.pos;
    c.pos /= d;
    c.delta += c.pos - old;
  });
}

Pos KvCache::seq_pos_min(SeqId seq) const {
  Pos m = -1;
  for (const auto& c : cells_) {
    if (!c.empty() && (seq < 0 || c.seqs.test(size_t(seq))) && (m < 0 || c.pos < m)) m = c.pos;
  }
  return m;
}

Pos KvCache::seq_pos_max(SeqId seq) const {
  Pos m = -1;
  for (const auto& c : cells_) {
    if (!c.empty() && (seq < 0 || c.seqs.test(size_t(seq)))) m = std::max(m, c.pos);
  }
  return m;
}

void KvCache::pending_deltas(int32_t* out) const {
  for (size_t i = 0; i < cells_.size(); ++i) out[i] = cells_[i].empty() ? 0 : cells_[i].delta;
}

void KvCache::clear_shift() {
  for (auto& c : cells_) c.delta = 0;
  has_shift_ = false;
}

float KvCache::fragmentation() const {
  const int n = n_kv();
  return n == 0 ? 0.0f : 1.0f - float(used_) / float(n);
}

void KvCache::defrag() {
  head_ = 0;
  // Two cursors: the lowest hole and the highest occupied cell; move the latter into the former.
  int lo = 0, hi = size() - 1;
  for (;;) {
    while (lo < size() && !cells_[size_t(lo)].empty()) ++lo;
    while (hi >= 0 && cells_[size_t(hi)].empty()) --hi;
    if (lo >= hi) break;
    for (int il : stored_layers()) {
      std::memcpy(k_row(il, lo), k_row(il, hi), view_.layers[size_t(il)].k_row_bytes);
      std::memcpy(v_row(il, lo), v_row(il, hi), view_.layers[size_t(il)].v_row_bytes);
    }
    cells_[size_t(lo)] = cells_[size_t(hi)];
    cells_[size_t(hi)] = KvCell{};
  }
}

}  // namespace loom::kv
