#include "kv/memory.h"

#include <algorithm>

namespace loom::kv {

int swa_cache_cells(int n_ctx, int window, int n_seq, int n_ubatch) {
  const int64_t want = int64_t(window) * std::max(1, n_seq) + n_ubatch;
  return int(std::min<int64_t>(n_ctx, (want + 255) / 256 * 256));
}

Expected<std::unique_ptr<Memory>> Memory::create(const ModelHparams& hp, const MemoryParams& p) {
  std::unique_ptr<Memory> m(new Memory());
  const int n_layer = int(hp.n_layer);
  std::vector<int> recurrent;
  KvCacheParams full, swa;
  full.n_layer = swa.n_layer = n_layer;
  full.type_k = swa.type_k = p.type_k;
  full.type_v = swa.type_v = p.type_v;
  // iSWA: the model's window layers in a cache of their own (not for families where the window
  // is the context's choice on every layer: those slide over one cache with one mask).
  const bool iswa = p.swa_window > 0 && hp.swa_window > 0 && !p.swa_full;
  for (int il = 0; il < n_layer; ++il) {
    if (hp.layer_is_recurrent(il)) {
      recurrent.push_back(il);
      continue;
    }
    // A layer that reuses another's K/V lives in that layer's part.
    const int src = hp.kv_source(il);
    const KvLayerSpec spec{il, hp.n_embd_kv_at(il), hp.n_embd_kv_at(il), hp.head_dim_at(il), src};
    (iswa && hp.is_swa_layer(src >= 0 ? src : il) ? swa : full).layers.push_back(spec);
  }
  if (!recurrent.empty()) {
    RecurrentCacheParams rp;
    rp.n_layer = n_layer;
    rp.layers = recurrent;
    rp.n_cells = std::max(1, p.n_seq_states > 0 ? std::min(p.n_seq_states, p.n_seq_max) : p.n_seq_max);
    rp.conv_row = hp.n_embd_conv_state();
    rp.ssm_row = hp.n_embd_ssm_state();
    LOOM_ASSIGN_OR_RETURN(m->rs_, RecurrentCache::create(rp));
  }
  if (!full.layers.empty()) {
    full.n_cells = p.n_ctx;
    LOOM_ASSIGN_OR_RETURN(m->kv_, KvCache::create(full));
  }
  if (!swa.layers.empty()) {
    swa.n_cells = swa_cache_cells(p.n_ctx, p.swa_window, p.n_seq_swa > 0 ? p.n_seq_swa : p.n_seq_max, p.n_ubatch);
    swa.swa_window = p.swa_window;
    LOOM_ASSIGN_OR_RETURN(m->kv_swa_, KvCache::create(swa));
  }
  if (!m->kv_ && !m->rs_) return invalid_argument("the model has no layers to keep memory for");
  return m;
}

const KvCache* Memory::kv_of_layer(int il) const {
  if (kv_swa_ && kv_swa_->has_layer(il)) return kv_swa_.get();
  if (kv_ && kv_->has_layer(il)) return kv_.get();
  return nullptr;
}

void Memory::clear() {
  if (kv_) kv_->clear();
  if (kv_swa_) kv_swa_->clear();
  if (rs_) rs_->clear();
}

uint8_t Memory::parts() const {
  return uint8_t((kv_ ? kPartKv : 0) | (kv_swa_ ? kPartKvSwa : 0) | (rs_ ? kPartRecurrent : 0));
}

bool Memory::seq_rm(SeqId seq, Pos p0, Pos p1, uint8_t parts) {
  // The recurrent part first: when it cannot honour the range nothing changes anywhere.
  if (rs_ && (parts & kPartRecurrent) && !rs_->seq_rm(seq, p0, p1)) return false;
  if (kv_ && (parts & kPartKv)) kv_->seq_rm(seq, p0, p1);
  if (kv_swa_ && (parts & kPartKvSwa)) kv_swa_->seq_rm(seq, p0, p1);
  return true;
}

void Memory::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1, uint8_t parts) {
  if (kv_ && (parts & kPartKv)) kv_->seq_cp(src, dst, p0, p1);
  if (kv_swa_ && (parts & kPartKvSwa)) kv_swa_->seq_cp(src, dst, p0, p1);
  if (rs_ && (parts & kPartRecurrent)) rs_->seq_cp(src, dst, p0, p1);
}

void Memory::seq_keep(SeqId seq) {
  if (kv_) kv_->seq_keep(seq);
  if (kv_swa_) kv_swa_->seq_keep(seq);
  if (rs_) rs_->seq_keep(seq);
}

void Memory::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  if (kv_) kv_->seq_add(seq, p0, p1, delta);
  if (kv_swa_) kv_swa_->seq_add(seq, p0, p1, delta);
  if (rs_) rs_->seq_add(seq, p0, p1, delta);
}

void Memory::seq_div(SeqId seq, Pos p0, Pos p1, int d) {
  if (kv_) kv_->seq_div(seq, p0, p1, d);
  if (kv_swa_) kv_swa_->seq_div(seq, p0, p1, d);
  if (rs_) rs_->seq_div(seq, p0, p1, d);
}

Pos Memory::seq_pos_min(SeqId seq) const {
  // The highest of the parts' minima: what every part still holds.
  Pos m = -1;
  bool any = false;
  auto take = [&](Pos v) {
    if (v < 0) return;
    m = any ? std::max(m, v) : v;
    any = true;
  };
  if (kv_) take(kv_->seq_pos_min(seq));
  if (kv_swa_) take(kv_swa_->seq_pos_min(seq));
  if (rs_) take(rs_->seq_pos_min(seq));
  return m;
}

Pos Memory::seq_pos_max(SeqId seq) const {
  // The lowest of the parts' maxima (a part without the sequence has none: -1).
  Pos m = -1;
  bool first = true;
  auto take = [&](Pos v) {
    m = first ? v : std::min(m, v);
    first = false;
  };
  if (kv_) take(kv_->seq_pos_max(seq));
  if (kv_swa_) take(kv_swa_->seq_pos_max(seq));
  if (rs_) take(rs_->seq_pos_max(seq));
  return m;
}

int Memory::used() const { return kv_ ? kv_->used() : rs_ ? rs_->used() : 0; }

int Memory::n_tokens() const { return kv_ ? kv_->n_tokens() : rs_ ? rs_->n_tokens() : 0; }

bool Memory::has_shift() const { return (kv_ && kv_->has_shift()) || (kv_swa_ && kv_swa_->has_shift()); }

MemoryBreakdown Memory::breakdown() const {
  MemoryBreakdown b;
  if (kv_) {
    b.kv_bytes = kv_->bytes();
    b.kv_cells = kv_->size();
    b.kv_layers = int(kv_->stored_layers().size());
  }
  if (kv_swa_) {
    b.kv_swa_bytes = kv_swa_->bytes();
    b.kv_swa_cells = kv_swa_->size();
    b.kv_swa_layers = int(kv_swa_->stored_layers().size());
  }
  if (rs_) {
    b.rs_bytes = rs_->bytes();
    b.rs_cells = rs_->size();
    b.rs_layers = int(rs_->layers().size());
  }
  return b;
}

}  // namespace loom::kv
