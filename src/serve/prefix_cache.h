// The prefix cache: a token-level radix tree over token sequences whose KV is in the context's
// cache, shared by every request of a scheduler.
//
// KV cells are shared between sequences by the cache's sequence sets (a cell can belong to many
// sequences), so the tree owns no memory of its own: it reserves a range of sequence ids, the
// cache sequences, and every leaf owns one of them. A leaf's sequence holds the cells of the whole
// path root..leaf (positions 0..end-1). An inner node's cells are held by the sequences of the
// leaves below it, so each node stands for one distinct set of cells and evicting a leaf frees
// exactly its own cells.
//
//   match(tokens)      the longest cached prefix, which share() hands to a request's sequence
//                      with seq_cp (no copy, no recompute);
//   insert(tokens, s)  adds what sequence s holds beyond the cached path (seq_cp again);
//   lock / unlock      reference counts of running requests on a path; locked nodes are never
//                      evicted, and a path is locked from a node up to the root;
//   evict(n)           frees at least n cells from the least recently used unlocked leaves (a
//                      long leaf loses only its tail when that is enough).
//
// Not thread-safe: owned by the scheduler's loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "context/context.h"

namespace loom::serve {

class PrefixCache {
 public:
  struct Node {
    Node* parent = nullptr;
    std::vector<int32_t> tokens;  // this node's tokens, at positions [start, start + size)
    int start = 0;
    std::vector<std::unique_ptr<Node>> children;
    int ref = 0;                  // running requests whose path goes through this node
    int seq = -1;                 // a leaf's cache sequence (-1 on inner nodes and the root)
    uint64_t stamp = 0;           // last use (LRU)
    bool persisted = false;       // its whole path was handed to on_evict (disk) already
    int end() const { return start + int(tokens.size()); }
    bool leaf() const { return children.empty(); }
  };
  struct Match {
    int len = 0;           // tokens matched
    Node* node = nullptr;  // the node holding the last matched token (nullptr when len == 0)
  };
  // Called with the path's tokens and its cache sequence before a leaf's cells are dropped the
  // first time (the scheduler writes it to --cache-dir).
  using EvictHook = std::function<void(std::span<const int32_t> tokens, int seq)>;

  // Cache sequences are first_seq .. first_seq + n_seqs - 1 of ctx; they must be unused.
  PrefixCache(Context& ctx, int first_seq, int n_seqs);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  void set_evict_hook(EvictHook hook) { on_evict_ = std::move(hook); }

  // The longest prefix of `tokens` (at most max_len) that is cached; a node in which it ends is
  // split there, so m.node ends exactly at m.len. Marks the path as used.
  Match match(std::span<const int32_t> tokens, int max_len);
  // Gives sequence `seq` the cells of the first m.len tokens (seq must hold none of them yet).
  Status share(const Match& m, int seq);

  // Adds tokens[0, n) to the tree, where sequence `src` holds a cell for each position 0..n-1
  // (for the part already cached, the tree keeps its own cells). Returns the node ending with the
  // last token (a node is split there if needed; nullptr when n == 0 or no cache sequence could
  // be freed for a new leaf).
  Node* insert(std::span<const int32_t> tokens, int src);
  // Puts cache sequence contents loaded from elsewhere (a state file) under the tree: `seq` (a
  // sequence obtained from take_free_seq()) holds positions 0..tokens.size()-1. The part already
  // cached is dropped from seq (its cells freed) and the rest becomes a new leaf owned by seq, or
  // seq is released when nothing is new. Returns the node holding the last token.
  Node* adopt(std::span<const int32_t> tokens, int seq);
  // A free cache sequence (evicting the LRU unlocked leaf when none is free), or -1.
  int take_free_seq();
  void release_seq(int seq);

  void lock(Node* n);
  void unlock(Node* n);

  // Frees at least `cells` cells if unlocked leaves allow; returns the number freed.
  int evict(int cells);
  // Drops every unlocked node (kv cells freed).
  void clear_unlocked();
  // Calls on_evict for every leaf not yet persisted (shutdown: idle prefixes go to disk).
  void persist_all();

  // Cells held only by unlocked nodes: what evict() could free now.
  int evictable() const { return evictable_; }
  int n_cached_tokens() const { return n_tokens_; }
  int n_nodes() const { return n_nodes_; }
  int n_leaves() const;
  int first_seq() const { return first_seq_; }
  int n_seqs() const { return n_seqs_; }
  bool is_cache_seq(int s) const { return s >= first_seq_ && s < first_seq_ + n_seqs_; }
  // Checks the tree against the KV cache (tests): every leaf's sequence holds exactly its path's
  // positions, each node's cells are held by its leaves only, refs and counters add up.
  Status check_invariants() const;

 private:
  Node* split(Node* n, int at);  // n keeps [at, end) below a new parent holding [start, at)
  int holder(const Node* n) const;
  void remove_leaf(Node* leaf);
  Node* new_leaf(Node* parent, std::span<const int32_t> tokens, int start, int seq);
  void touch(Node* n);
  Node* lru_leaf(const Node* keep) const;
  void path_tokens(const Node* n, std::vector<int32_t>* out) const;
  void persist(Node* leaf);

  Context& ctx_;
  int first_seq_, n_seqs_;
  std::vector<int> free_seqs_;
  Node root_;
  uint64_t clock_ = 0;
  int evictable_ = 0;
  int n_tokens_ = 0;
  int n_nodes_ = 0;
  EvictHook on_evict_;
};

}  // namespace loom::serve
