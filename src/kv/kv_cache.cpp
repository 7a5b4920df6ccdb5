#include "kv/kv_cache.h"

#include <algorithm>
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

bool KvCache::find_slot(int n, int32_t* out) const {
  if (n > size() - used_) return false;
  int found = 0;
  for (int c = 0; c < size() && found < n; ++c) {
    if (cells_[size_t(c)].empty()) out[found++] = c;
  }
  return found == n;
}

void KvCache::occupy(int cell, Pos pos, SeqId seq) {
  KvCell& c = cells_[size_t(cell)];
  if (c.empty()) ++used_;
  c.pos = pos;
  c.seqs.set(size_t(seq));
}

int KvCache::n_kv() const {
  for (int c = size() - 1; c >= 0; --c) {
    if (!cells_[size_t(c)].empty()) return c + 1;
  }
  return 0;
}

void KvCache::build_mask(int n_tokens, const Pos* pos, const SeqId* seq, int n_kv, float* mask) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int t = 0; t < n_tokens; ++t) {
    float* row = mask + int64_t(t) * n_kv;
    for (int c = 0; c < n_kv; ++c) {
      const KvCell& cell = cells_[size_t(c)];
      row[c] = (cell.seqs.test(size_t(seq[t])) && cell.pos <= pos[t]) ? 0.0f : kNegInf;
    }
  }
}

void KvCache::release(KvCell& c) {
  c.pos = -1;
  c.seqs.reset();
  --used_;
}

void KvCache::clear() {
  for (auto& c : cells_) {
    c.pos = -1;
    c.seqs.reset();
  }
  used_ = 0;
}

void KvCache::seq_rm(SeqId seq, Pos p0, Pos p1) {
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = std::numeric_limits<Pos>::max();
  for (auto& c : cells_) {
    if (c.empty() || c.pos < p0 || c.pos >= p1) continue;
    if (seq < 0) {
      release(c);
    } else if (c.seqs.test(size_t(seq))) {
      c.seqs.reset(size_t(seq));
      if (c.empty()) {
        c.seqs.set(0);  // keep used_ consistent through release()
        release(c);
      }
    }
  }
}

Pos KvCache::seq_pos_max(SeqId seq) const {
  Pos m = -1;
  for (const auto& c : cells_) {
    if (!c.empty() && c.seqs.test(size_t(seq))) m = std::max(m, c.pos);
  }
  return m;
}

}  // namespace loom
