#include "model/packing.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "quant/packed.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace loom::detail {

PackedStorage::~PackedStorage() {
#if defined(__linux__)
  if (mapped) {
    munmap(data, mapped);
    return;
  }
#endif
  std::free(data);
}

bool PackedStorage::allocate(size_t n) {
#if defined(__linux__)
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t len = (n + kHuge - 1) / kHuge * kHuge;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) {
    madvise(p, len, MADV_HUGEPAGE);  // advisory: ignored where THP is off
    data = p;
    mapped = len;
    bytes = n;
    return true;
  }
#endif
  data = std::aligned_alloc(64, (n + 63) / 64 * 64);
  bytes = data ? n : 0;
  return data != nullptr;
}

bool repacking_enabled() {
  const char* env = std::getenv("LOOM_NO_REPACK");
  return !(env && env[0] != '\0' && std::strcmp(env, "0") != 0);
}

namespace {

std::vector<TensorView*> matrices(ModelWeights& w) {
  std::vector<TensorView*> out;
  for (std::vector<LayerWeights>* ls : {&w.layers, &w.enc_layers}) {
    for (LayerWeights& l : *ls) {
      for (TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.ssm_in, &l.ssm_x,
                            &l.ssm_dt, &l.ssm_out, &l.wq_cross, &l.wk_cross, &l.wv_cross, &l.wo_cross}) {
        out.push_back(t);
      }
    }
  }
  out.push_back(&w.output);
  return out;
}

bool packable(const TensorView& t) {
  return !t.empty() && quant::can_pack(t.type) && quant::packed_kernels_available(t.type) && t.cols % 32 == 0 &&
         t.rows > 0;
}

// True when [lo, hi) shares bytes with the token embedding (a tied output is the embedding):
// those pages stay, lookups read them. (Pages only partly inside a range are never released.)
bool overlaps_embedding(const ModelWeights& w, uintptr_t lo, uintptr_t hi) {
  if (!w.tok_embd.data) return false;
  const auto e_lo = reinterpret_cast<uintptr_t>(w.tok_embd.data);
  const uintptr_t e_hi = e_lo + size_t(w.tok_embd.rows) * w.tok_embd.row_bytes;
  return lo < e_hi && e_lo < hi;
}

}  // namespace

int64_t pack_model_weights(const gguf::GgufFile& file, ModelWeights& w, PackedStorage& store,
                           const std::function<void(float)>& progress) {
  std::vector<TensorView*> todo;
  size_t total = 0;
  for (TensorView* t : matrices(w)) {
    if (!packable(*t)) continue;
    todo.push_back(t);
    total += (quant::packed_size(t->type, t->rows, t->cols) + 63) / 64 * 64;
  }
  if (todo.empty()) return 0;
  if (!store.allocate(total)) return 0;  // out of memory: keep computing from the GGUF layout
  int64_t extra = 0;
  auto* dst = static_cast<uint8_t*>(store.data);
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;  // original bytes now read only as a copy
  for (TensorView* t : todo) {
    const int64_t groups = (t->rows + quant::kPackRows - 1) / quant::kPackRows;
    quant::pack_weights(t->type, t->data, t->row_bytes, t->rows, t->cols, dst, 0, groups);
    t->packed = dst;
    extra += int64_t(quant::packed_size(t->type, t->rows, t->cols)) - int64_t(size_t(t->rows) * t->row_bytes);
    const auto lo = reinterpret_cast<uintptr_t>(t->data);
    ranges.emplace_back(lo, lo + size_t(t->rows) * t->row_bytes);
    // Release this view's pages at once, so peak memory during load stays near one copy of the
    // model (the merged pass below also catches pages shared by neighbouring views).
    if (!overlaps_embedding(w, lo, lo + size_t(t->rows) * t->row_bytes)) {
      file.release_pages(t->data, size_t(t->rows) * t->row_bytes);
    }
    dst += (quant::packed_size(t->type, t->rows, t->cols) + 63) / 64 * 64;
    if (progress) progress(float(double(dst - static_cast<uint8_t*>(store.data)) / double(total)));
  }
  // Merge touching ranges (fused tensors are bound as several views), never release the
  // embedding (token lookups still read it; a tied output shares it).
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uintptr_t, uintptr_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second) merged.back().second = std::max(merged.back().second, r.second);
    else merged.push_back(r);
  }
  for (const auto& [lo, hi] : merged) {
    if (overlaps_embedding(w, lo, hi)) continue;
    file.release_pages(reinterpret_cast<const void*>(lo), hi - lo);
  }
  return extra;
}

}  // namespace loom::detail
