#include "serve/disk_cache.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/file_util.h"
#include "base/log.h"

namespace loom::serve {
namespace fs = std::filesystem;

namespace {

constexpr const char* kExt = ".loomkv";

uint64_t hash_tokens(std::span<const int32_t> t) {
  uint64_t h = 14695981039346656037ull;
  for (int32_t v : t) {
    for (int b = 0; b < 4; ++b) h = (h ^ uint8_t(uint32_t(v) >> (8 * b))) * 1099511628211ull;
  }
  return h;
}

bool is_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {  // a is a prefix of b
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

DiskPrefixStore::~DiskPrefixStore() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

Status DiskPrefixStore::open(const std::string& dir, const Context& ctx, int64_t max_bytes, int min_tokens) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) return io_error("--cache-dir " + dir + ": cannot create the folder: " + ec.message());
  dir_ = dir;
  max_bytes_ = max_bytes;
  min_tokens_ = min_tokens;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    if (!de.is_regular_file() || de.path().extension() != kExt) continue;
    auto toks = ctx.seq_state_file_tokens(de.path().string());
    if (!toks) {
      LOOM_LOG(kWarn, "cache dir: skipping %s: %s", de.path().c_str(), toks.status().message().c_str());
      continue;
    }
    Entry e;
    e.path = de.path().string();
    e.tokens = std::move(*toks);
    e.bytes = int64_t(de.file_size(ec));
    e.stamp = ++clock_;
    entries_.push_back(std::move(e));
  }
  LOOM_LOG(kInfo, "cache dir %s: %zu prefixes", dir.c_str(), entries_.size());
  writer_ = std::thread([this] { writer_loop(); });
  return Status::ok();
}

std::string DiskPrefixStore::path_for(std::span<const int32_t> tokens) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(hash_tokens(tokens)));
  return (fs::path(dir_) / (std::string(name) + kExt)).string();
}

const DiskPrefixStore::Entry* DiskPrefixStore::find(std::span<const int32_t> tokens, int max_len, int better_than,
                                                    int* len) {
  Entry* best = nullptr;
  int best_len = better_than;
  const size_t limit = std::min<size_t>(tokens.size(), size_t(std::max(0, max_len)));
  for (Entry& e : entries_) {
    size_t k = 0;
    const size_t m = std::min(limit, e.tokens.size());
    while (k < m && e.tokens[k] == tokens[k]) ++k;
    if (int(k) > best_len) {
      best_len = int(k);
      best = &e;
    }
  }
  if (best) {
    best->stamp = ++clock_;
    *len = best_len;
  }
  return best;
}

void DiskPrefixStore::forget(const Entry* e) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [&](const Entry& x) { return &x == e; }), entries_.end());
}

void DiskPrefixStore::put(std::vector<int32_t> tokens, std::vector<uint8_t> data) {
  if (!active() || int(tokens.size()) < min_tokens_) return;
  for (const Entry& e : entries_) {
    if (is_prefix(tokens, e.tokens)) return;  // an existing file covers it
  }
  Job j;
  j.entry.path = path_for(tokens);
  j.entry.tokens = std::move(tokens);
  j.entry.bytes = int64_t(data.size());
  j.data = std::move(data);
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const Job& q : jobs_) {
      if (is_prefix(j.entry.tokens, q.entry.tokens)) return;
    }
    jobs_.push_back(std::move(j));
  }
  cv_.notify_one();
}

void DiskPrefixStore::writer_loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stop_ with nothing left
    Job j = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    l.unlock();
    const Status st = write_file_atomic(j.entry.path, j.data, "cache file");
    if (!st) LOOM_LOG(kWarn, "cache dir: %s", st.message().c_str());
    l.lock();
    busy_ = false;
    if (st) done_.push_back(std::move(j.entry));
    else ++failed_;
    idle_cv_.notify_all();
  }
}

void DiskPrefixStore::poll() {
  std::vector<Entry> done;
  int failed = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    done.swap(done_);
    std::swap(failed, failed_);
  }
  errors_ += uint64_t(failed);
  for (Entry& e : done) {
    ++writes_;
    // Files that are prefixes of the new one are redundant now.
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (is_prefix(it->tokens, e.tokens) && it->path != e.path) {
        std::error_code ec;
        fs::remove(it->path, ec);
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    e.stamp = ++clock_;
    bool replaced = false;
    for (Entry& x : entries_) {
      if (x.path == e.path) {
        x = e;
        replaced = true;
      }
    }
    if (!replaced) entries_.push_back(std::move(e));
  }
  if (!done.empty()) enforce_limit();
}

void DiskPrefixStore::flush() {
  std::unique_lock<std::mutex> l(mu_);
  idle_cv_.wait(l, [&] { return jobs_.empty() && !busy_; });
  l.unlock();
  poll();
}

int64_t DiskPrefixStore::total_bytes() const {
  int64_t t = 0;
  for (const Entry& e : entries_) t += e.bytes;
  return t;
}

void DiskPrefixStore::enforce_limit() {
  while (entries_.size() > 1 && total_bytes() > max_bytes_) {
    auto lru =
        std::min_element(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.stamp < b.stamp; });
    std::error_code ec;
    fs::remove(lru->path, ec);
    entries_.erase(lru);
  }
}

}  // namespace loom::serve
