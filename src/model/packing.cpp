#include "model/packing.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/version.h"
#include "quant/packed.h"

#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <string>

namespace loom::model::detail {

PackedStorage::~PackedStorage() {
  if (cache_writer.joinable()) cache_writer.join();
#if defined(__linux__)
  if (map) {
    munmap(map, mapped);
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
    map = p;
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

std::string pack_cache_dir() {
  const char* env = std::getenv("LOOM_PACK_CACHE");
  if (!env || !*env || std::strcmp(env, "0") == 0) return {};
  if (std::strcmp(env, "1") != 0) return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/loom/packed";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/loom/packed";
  return {};
}

namespace {

// Bump when the packed layout of any type changes (quant/packed.h): cache files of other
// versions are then ignored.
constexpr int kPackCacheLayout = 3;  // 2: Q5_K's fifth bits as chunk masks; 3: Q8_0 signed on AArch64
constexpr char kPackCacheMagic[8] = {'L', 'O', 'O', 'M', 'P', 'A', 'K', '1'};
constexpr size_t kPackCachePage = 4096;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

#if defined(__linux__)
// What a cache file must match: loom's version and layout, the GGUF file (path, size, change time,
// inode) and every packed matrix (offset in the file, type, shape) in packing order.
std::string cache_key(const gguf::GgufFile& file, const std::vector<TensorView*>& todo, size_t total) {
  struct stat st {};
  std::error_code ec;
  const std::string path = std::filesystem::weakly_canonical(file.path(), ec).string();
  if (ec || ::stat(path.c_str(), &st) != 0 || file.tensors().empty()) return {};
  const auto& t0 = file.tensors().front();
  const auto data0 = reinterpret_cast<uintptr_t>(t0.data) - uintptr_t(t0.offset);
  std::string k = "loom packed cache layout " + std::to_string(kPackCacheLayout) + "\n" + version_full() + "\n" + path +
                  "\n" + std::to_string(st.st_size) + " " + std::to_string(int64_t(st.st_mtim.tv_sec)) + "." +
                  std::to_string(int64_t(st.st_mtim.tv_nsec)) + " " + std::to_string(uint64_t(st.st_ino)) + "\n";
  for (const TensorView* t : todo) {
    k += std::to_string(reinterpret_cast<uintptr_t>(t->data) - data0) + " " + std::to_string(int(t->type)) + " " +
         std::to_string(t->rows) + " " + std::to_string(t->cols) + " " + std::to_string(t->row_bytes) + "\n";
  }
  return k + "total " + std::to_string(total) + "\n";
}

std::string cache_path(const std::string& dir, const std::string& key) {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.lpk", static_cast<unsigned long long>(fnv1a(key)));
  return dir + "/" + name;
}

size_t data_offset(size_t key_len) {
  return (sizeof kPackCacheMagic + 8 + key_len + kPackCachePage - 1) / kPackCachePage * kPackCachePage;
}

// Maps a cache file whose header is `key` and whose data is `total` bytes; false when there is
// none or it does not match (then the caller packs and writes a new one).
bool map_cache(const std::string& path, const std::string& key, size_t total, PackedStorage& store) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  const size_t off = data_offset(key.size());
  bool ok = ::fstat(fd, &st) == 0 && size_t(st.st_size) == off + total;
  std::string head(sizeof kPackCacheMagic + 8 + key.size(), '\0');
  ok = ok && ::pread(fd, head.data(), head.size(), 0) == ssize_t(head.size());
  uint64_t len = 0;
  if (ok) std::memcpy(&len, head.data() + sizeof kPackCacheMagic, 8);
  ok = ok && std::memcmp(head.data(), kPackCacheMagic, sizeof kPackCacheMagic) == 0 && len == key.size() &&
       head.compare(sizeof kPackCacheMagic + 8, key.size(), key) == 0;
  void* p = ok ? mmap(nullptr, off + total, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (p == MAP_FAILED) return false;
  madvise(static_cast<uint8_t*>(p) + off, total, MADV_WILLNEED);
  store.map = p;
  store.mapped = off + total;
  store.data = static_cast<uint8_t*>(p) + off;
  store.bytes = total;
  store.from_cache = true;
  return true;
}

// Writes the packed bytes as a cache file: a temporary file, synced, then renamed, so that a
// reader sees a whole file or none. Failures are logged and change nothing.
void write_cache(const std::string& dir, const std::string& path, const std::string& key, const void* data, size_t total) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // Temporaries of processes that ended before their write did (over an hour old) go first.
  try {
    const auto now = std::filesystem::file_time_type::clock::now();
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::error_code e2;
      if (e.path().string().find(".lpk.tmp.") != std::string::npos &&
          now - std::filesystem::last_write_time(e.path(), e2) > std::chrono::hours(1) && !e2) {
        std::filesystem::remove(e.path(), e2);
      }
    }
  } catch (const std::exception&) {
    // an unreadable folder: the write below reports it
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    LOOM_LOG(kWarn, "packed cache: cannot write %s", tmp.c_str());
    return;
  }
  std::string head(data_offset(key.size()), '\0');
  std::memcpy(head.data(), kPackCacheMagic, sizeof kPackCacheMagic);
  const uint64_t len = key.size();
  std::memcpy(head.data() + sizeof kPackCacheMagic, &len, 8);
  std::copy(key.begin(), key.end(), head.begin() + std::ptrdiff_t(sizeof kPackCacheMagic + 8));
  auto write_all = [fd](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, b, std::min(n, size_t(1) << 30));
      if (w <= 0) return false;
      b += w;
      n -= size_t(w);
    }
    return true;
  };
  const bool ok = write_all(head.data(), head.size()) && write_all(data, total) && ::fdatasync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    LOOM_LOG(kWarn, "packed cache: writing %s failed", path.c_str());
    ::unlink(tmp.c_str());
  }
}
#endif

std::vector<TensorView*> matrices(ModelWeights& w) {
  std::vector<TensorView*> out;
  for (std::vector<LayerWeights>* ls : {&w.layers, &w.enc_layers}) {
    for (LayerWeights& l : *ls) {
      for (TensorView* t : l.matrices()) {
        const bool stack = t == &l.ffn_gate_exps || t == &l.ffn_up_exps || t == &l.ffn_down_exps;
        if (!stack || w.experts_packable) out.push_back(t);
      }
    }
  }
  out.push_back(&w.output);
  out.push_back(&w.per_layer_model_proj);
  for (TensorView& t : w.altup_proj) out.push_back(&t);
  for (TensorView& t : w.altup_unembd_proj) out.push_back(&t);
  return out;
}

bool packable(const TensorView& t) {
  return !t.empty() && quant::can_pack(t.type) && quant::packed_kernels_available(t.type) && t.cols % 32 == 0 &&
         t.rows > 0 && quant::can_pack_data(t.type, t.data, t.row_bytes, t.rows, t.cols);
}

// True when [lo, hi) shares bytes with the token embedding (a tied output is the embedding):
// those pages stay, lookups read them. (Pages only partly inside a range are never released.)
bool overlaps_embedding(const ModelWeights& w, uintptr_t lo, uintptr_t hi) {
  if (!w.tok_embd.data) return false;
  const auto e_lo = reinterpret_cast<uintptr_t>(w.tok_embd.data);
  const uintptr_t e_hi = e_lo + size_t(w.tok_embd.rows) * w.tok_embd.row_bytes;
  return lo < e_hi && e_lo < hi;
}

// Releases the pages of the original bytes (ranges of addresses) once packed copies replace them:
// touching ranges merged (fused tensors are bound as several views), never the embedding (token
// lookups still read it; a tied output shares it).
void release_merged(const gguf::GgufFile& file, const ModelWeights& w,
                    std::vector<std::pair<uintptr_t, uintptr_t>>& ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uintptr_t, uintptr_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second) merged.back().second = std::max(merged.back().second, r.second);
    else merged.push_back(r);
  }
  for (const auto& [lo, hi] : merged) {
    if (overlaps_embedding(w, lo, hi)) continue;
    // NOLINTNEXTLINE(performance-no-int-to-ptr): ranges merge as integers, madvise takes a pointer
    file.release_pages(reinterpret_cast<const void*>(lo), hi - lo);
  }
}

}  // namespace

int64_t pack_model_weights(const gguf::GgufFile& file, ModelWeights& w, PackedStorage& store,
                           const std::function<void(float)>& progress) {
  std::vector<TensorView*> todo, aliases;  // aliases: views of a matrix already in todo (gemma4's V = K)
  size_t total = 0;
  for (TensorView* t : matrices(w)) {
    if (!packable(*t)) continue;
    if (std::any_of(todo.begin(), todo.end(),
                    [&](const TensorView* o) { return o->data == t->data && o->rows == t->rows; })) {
      aliases.push_back(t);
      continue;
    }
    todo.push_back(t);
    total += (quant::packed_size(t->type, t->rows, t->cols) + 63) / 64 * 64;
  }
  if (todo.empty()) return 0;
  std::string cache_dir, key, cached_path;
#if defined(__linux__)
  cache_dir = pack_cache_dir();
  if (!cache_dir.empty()) key = cache_key(file, todo, total);
  if (!key.empty()) {
    cached_path = cache_path(cache_dir, key);
    map_cache(cached_path, key, total, store);  // on a miss store stays empty
  }
#endif
  if (!store.from_cache && !store.allocate(total)) return 0;  // out of memory: keep computing from the GGUF layout
  int64_t extra = 0;
  auto* dst = static_cast<uint8_t*>(store.data);
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;  // original bytes now read only as a copy
  for (TensorView* t : todo) {
    if (!store.from_cache) {
      const int64_t groups = (t->rows + quant::kPackRows - 1) / quant::kPackRows;
      quant::pack_weights(t->type, t->data, t->row_bytes, t->rows, t->cols, dst, 0, groups);
    }
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
  for (TensorView* a : aliases) {
    for (const TensorView* t : todo) {
      if (t->data == a->data && t->rows == a->rows) a->packed = t->packed;
    }
  }
  release_merged(file, w, ranges);
#if defined(__linux__)
  // The first load does not wait for the file: it is written (and synced) in the background.
  if (!key.empty() && !store.from_cache) {
    try {
      store.cache_writer = std::thread([cache_dir, cached_path, key, data = store.data, total] {
        try {
          write_cache(cache_dir, cached_path, key, data, total);
        } catch (...) {
          LOOM_LOG(kWarn, "packed cache: writing %s failed (out of memory)", cached_path.c_str());
        }
      });
    } catch (const std::system_error&) {
      write_cache(cache_dir, cached_path, key, store.data, total);  // no thread to spare
    }
  }
#endif
  return extra;
}

}  // namespace loom::model::detail
