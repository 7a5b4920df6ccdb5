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
// Memories with parts that hold a sequence only as of its last position (recurrent states, a
// sliding-window cache: kv/memory.h) cannot share an arbitrary prefix by seq_cp. For them a node may
// carry a checkpoint: those parts of a sequence saved when it ended exactly at the node's end
// (Context::seq_state_save with kPartsAtEnd). A match then ends at the deepest node with a
// checkpoint, and share() restores it beside the full KV part's cells. The tree keeps at most
// `per_path` checkpoints on any root-to-node path and `max_bytes` in all, dropping the least
// recently used. A memory without a full KV part (a recurrent model) keeps no cells in the tree at
// all: its nodes are an index of checkpoints (no cache sequences, nothing to evict for cells).
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

// Bounds of the checkpoints a prefix cache keeps.
struct PrefixCheckpointLimits {
  int per_path = 8;                         // on any root-to-node path (llama-server's --ctx-checkpoints)
  int64_t max_bytes = int64_t(8192) << 20;  // in all (llama-server's --cache-ram, MiB)
};

class PrefixCache {
 public:
  struct Node {
    Node* parent = nullptr;
    std::vector<int32_t> tokens;  // this node's tokens, at positions [start, start + size)
    int start = 0;
    std::vector<std::unique_ptr<Node>> children;
    int ref = 0;                                 // running requests whose path goes through this node
    int seq = -1;                                // a leaf's cache sequence (-1 on inner nodes and the root)
    uint64_t stamp = 0;                          // last use (LRU)
    bool persisted = false;                      // its whole path was handed to on_evict (disk) already
    std::unique_ptr<std::vector<uint8_t>> ckpt;  // the end-only parts at end() (see above)
    uint64_t ckpt_stamp = 0;                     // when the checkpoint was made or last resumed from (its LRU;
                                                 // `stamp` is refreshed along whole paths)
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

  using CheckpointLimits = PrefixCheckpointLimits;
  // Cache sequences are first_seq .. first_seq + n_seqs - 1 of ctx; they must be unused.
  PrefixCache(Context& ctx, int first_seq, int n_seqs, CheckpointLimits limits = {});
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  void set_evict_hook(EvictHook hook) { on_evict_ = std::move(hook); }

  // The longest prefix of `tokens` (at most max_len) that is cached; a node in which it ends is
  // split there, so m.node ends exactly at m.len. With checkpoints, the longest that ends at a
  // node with one. Marks the path as used.
  Match match(std::span<const int32_t> tokens, int max_len);
  // Gives sequence `seq` the memory of the first m.len tokens (seq must hold none of them yet):
  // the full KV part's cells, and the checkpoint at m.node when the memory needs one.
  Status share(const Match& m, int seq);

  // Checkpoints (memories with end-only parts).
  bool needs_checkpoints() const { return needs_ckpt_; }
  // Saves the end-only parts of sequence `seq`, which has decoded exactly the path to n, as n's
  // checkpoint (replacing n's own), then applies the limits. Failures are logged and ignored.
  void set_checkpoint(Node* n, int seq);
  // The same with parts saved earlier (Context::seq_state_save(seq, {}, kPartsAtEnd) when the
  // sequence ended at n's end).
  void set_checkpoint(Node* n, std::vector<uint8_t> data);
  int n_checkpoints() const { return n_ckpt_; }
  int64_t checkpoint_bytes() const { return ckpt_bytes_; }

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
  // Drops what is cached of `tokens` alone: the leaf holding its last matched token, and the
  // ancestors that then lead nowhere else, unless a running request uses them. Prefixes that other
  // cached sequences share stay. Returns the tokens dropped.
  int erase(std::span<const int32_t> tokens);
  // Calls on_evict for every leaf not yet persisted (shutdown: idle prefixes go to disk).
  void persist_all();

  // Cells held only by unlocked nodes: what evict() could free now.
  int evictable() const { return evictable_; }
  int n_cached_tokens() const { return n_tokens_; }
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
  void drop_checkpoint(Node* n);
  void enforce_limits(const Node* keep);
  void prune(Node* n);  // index mode: removes n and empty ancestors while they carry nothing

  Context& ctx_;
  int first_seq_, n_seqs_;
  CheckpointLimits limits_;
  bool kv_shared_ = true;    // the memory has a full KV part: nodes' cells live in cache sequences
  bool needs_ckpt_ = false;  // the memory has end-only parts: matches end at checkpoints
  int n_ckpt_ = 0;
  int64_t ckpt_bytes_ = 0;
  std::vector<int> free_seqs_;
  Node root_;
  uint64_t clock_ = 0;
  int evictable_ = 0;
  int n_tokens_ = 0;
  int n_nodes_ = 0;
  EvictHook on_evict_;
};

}  // namespace loom::serve
