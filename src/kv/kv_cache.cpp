#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "quant/quant.h"

namespace loom {

Expected<std::unique_ptr<KvCache>> KvCache::create(const KvCacheParams& p) {
  for (TensorType t : {p.type_k, p.type_v}) {
    auto info = tensor_type_info(t);
    const bool allowed = t == TensorType::F32 || t == TensorType::F16 || t == TensorType::Q8_0 ||
                         t == TensorType::Q4_0 || t == TensorType::BF16;
    if (!info || !allowed || !quant::is_supported(t)) {
      return invalid_argument("unsupported KV cache type " + std::string(tensor_type_name(t)) +
                              " (use f32, f16, bf16, q8_0 or q4_0)");
    }
    if (p.head_dim % info->block_size != 0) {
      return invalid_argument("KV cache type " + std::string(info->name) + " needs head_dim to be a multiple of " +
                              std::to_string(info->block_size) + " (head_dim is " + std::to_string(p.head_dim) + ")");
    }
  }
  if (p.n_cells <= 0 || p.n_layer <= 0) return invalid_argument("KV cache needs at least one cell and layer");
  std::unique_ptr<KvCache> kv(new KvCache());
  kv->params_ = p;
  kv->cells_.resize(size_t(p.n_cells));
  KvView& v = kv->view_;
  v.type_k = p.type_k;
  v.type_v = p.type_v;
  v.k_row_bytes = size_t(row_bytes(p.type_k, p.n_embd_k));
  v.v_row_bytes = size_t(row_bytes(p.type_v, p.n_embd_v));
  v.n_cells = p.n_cells;
  const size_t per_layer = (v.k_row_bytes + v.v_row_bytes) * size_t(p.n_cells);
  kv->storage_.assign(per_layer * size_t(p.n_layer), 0);
  v.layers.resize(size_t(p.n_layer));
  for (int il = 0; il < p.n_layer; ++il) {
    uint8_t* base = kv->storage_.data() + per_layer * size_t(il);
    v.layers[size_t(il)].k = base;
    v.layers[size_t(il)].v = base + v.k_row_bytes * size_t(p.n_cells);
  }
  return kv;
}

int KvCache::n_tokens() const {
  int n = 0;
  for (const auto& c : cells_) n += int(c.seqs.count());
  return n;
}

bool KvCache::find_slot(int n, int32_t* out) const {
  if (n > size() - used_) return false;
  int found = 0;
  for (int c = 0; c < size() && found < n; ++c) {
    if (cells_[size_t(c)].empty()) out[found++] = c;
  }
  return found == n;
}

void KvCache::occupy(int cell, Pos pos, std::span<const SeqId> seqs) {
  KvCell& c = cells_[size_t(cell)];
  if (c.empty()) ++used_;
  c.pos = pos;
  c.delta = 0;
  for (SeqId s : seqs) c.seqs.set(size_t(s));
}

void KvCache::release_cells(std::span<const int32_t> cells) {
  for (int32_t i : cells) {
    KvCell& c = cells_[size_t(i)];
    if (!c.empty()) free_cell(c);
  }
}

int KvCache::n_kv() const {
  for (int c = size() - 1; c >= 0; --c) {
    if (!cells_[size_t(c)].empty()) return c + 1;
  }
  return 0;
}

void KvCache::build_mask(int n_tokens, const Pos* pos, const SeqId* seq, int n_kv, const MaskParams& mp,
                         float* mask, const int32_t* cols) const {
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
}

template <typename F>
void KvCache::for_seq_cells(SeqId seq, Pos p0, Pos p1, F&& f) {
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = std::numeric_limits<Pos>::max();
  for (auto& c : cells_) {
    if (c.empty() || c.pos < p0 || c.pos >= p1) continue;
    if (seq >= 0 && !c.seqs.test(size_t(seq))) continue;
    f(c);
  }
}

void KvCache::seq_rm(SeqId seq, Pos p0, Pos p1) {
  for_seq_cells(seq, p0, p1, [&](KvCell& c) {
    if (seq < 0) {
      free_cell(c);
      return;
    }
    c.seqs.reset(size_t(seq));
    if (c.empty()) {
      c.seqs.set(0);  // free_cell expects an occupied cell
      free_cell(c);
    }
  });
}

void KvCache::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  if (src == dst || src < 0 || dst < 0) return;
  for_seq_cells(src, p0, p1, [&](KvCell& c) { c.seqs.set(size_t(dst)); });
}

void KvCache::seq_keep(SeqId seq) {
  for (auto& c : cells_) {
    if (c.empty()) continue;
    if (seq >= 0 && c.seqs.test(size_t(seq))) {
      c.seqs.reset();
      c.seqs.set(size_t(seq));
    } else {
      free_cell(c);
    }
  }
}

void KvCache::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  if (delta == 0) return;
  for_seq_cells(seq, p0, p1, [&](KvCell& c) {
    has_shift_ = true;
    c.pos += delta;
    c.delta += delta;
    if (c.pos < 0) free_cell(c);
  });
}

void KvCache::seq_div(SeqId seq, Pos p0, Pos p1, int d) {
  if (d <= 1) return;
  for_seq_cells(seq, p0, p1, [&](KvCell& c) {
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
  // Two cursors: the lowest hole and the highest occupied cell; move the latter into the former.
  int lo = 0, hi = size() - 1;
  for (;;) {
    while (lo < size() && !cells_[size_t(lo)].empty()) ++lo;
    while (hi >= 0 && cells_[size_t(hi)].empty()) --hi;
    if (lo >= hi) break;
    for (int il = 0; il < params_.n_layer; ++il) {
      std::memcpy(k_row(il, lo), k_row(il, hi), view_.k_row_bytes);
      std::memcpy(v_row(il, lo), v_row(il, hi), view_.v_row_bytes);
    }
    cells_[size_t(lo)] = cells_[size_t(hi)];
    cells_[size_t(hi)] = KvCell{};
  }
}

}  // namespace loom
