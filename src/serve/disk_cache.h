// --cache-dir: cached prefixes as checked sequence state files (Context::seq_state_save), so
// that an evicted or idle prefix is found again later, also after a restart. Files are named by
// a hash of their tokens; a file from another model, another cache type, or a corrupt one is
// skipped with a warning. Writes happen on a background thread (temporary file, fsync, rename);
// the index is only touched by the scheduler's loop thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "context/context.h"

namespace loom::serve {

class DiskPrefixStore {
 public:
  struct Entry {
    std::string path;
    std::vector<int32_t> tokens;
    int64_t bytes = 0;
    uint64_t stamp = 0;  // last use
  };

  DiskPrefixStore() = default;
  ~DiskPrefixStore();
  DiskPrefixStore(const DiskPrefixStore&) = delete;
  DiskPrefixStore& operator=(const DiskPrefixStore&) = delete;

  // Creates `dir` if needed and indexes the files this context can load.
  Status open(const std::string& dir, const Context& ctx, int64_t max_bytes, int min_tokens);
  bool active() const { return !dir_.empty(); }

  // The entry sharing the longest prefix with `tokens` (at most max_len), when it is longer than
  // `better_than`; nullptr otherwise. *len receives the common length.
  const Entry* find(std::span<const int32_t> tokens, int max_len, int better_than, int* len);
  // Removes an entry that failed to load (the file is left on disk).
  void forget(const Entry* e);
  // Queues a file for `tokens` with `data` (seq_state_save bytes); redundant ones (a prefix of
  // an existing file) are skipped, and files that become redundant are deleted.
  void put(std::vector<int32_t> tokens, std::vector<uint8_t> data);
  // Moves finished writes into the index (loop thread, each step).
  void poll();
  // Waits for queued writes (shutdown).
  void flush();

  size_t n_entries() const { return entries_.size(); }
  int64_t total_bytes() const;
  uint64_t writes() const { return writes_; }
  uint64_t errors() const { return errors_; }

 private:
  void writer_loop();
  void enforce_limit();
  std::string path_for(std::span<const int32_t> tokens) const;

  std::string dir_;
  int64_t max_bytes_ = 0;
  int min_tokens_ = 0;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  uint64_t writes_ = 0, errors_ = 0;

  struct Job {
    Entry entry;
    std::vector<uint8_t> data;
  };
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Job> jobs_;
  std::vector<Entry> done_;
  int failed_ = 0;
  bool busy_ = false, stop_ = false;
  std::thread writer_;
};

}  // namespace loom::serve
