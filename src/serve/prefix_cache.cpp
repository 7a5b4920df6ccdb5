#include "serve/prefix_cache.h"

#include <algorithm>
#include <string>

#include "base/log.h"

namespace loom::serve {
namespace {

// Index of the child whose first token is `t`, or -1.
int child_index(const PrefixCache::Node* n, int32_t t) {
  for (size_t i = 0; i < n->children.size(); ++i) {
    if (n->children[i]->tokens.front() == t) return int(i);
  }
  return -1;
}

}  // namespace

PrefixCache::PrefixCache(Context& ctx, int first_seq, int n_seqs, CheckpointLimits limits)
    : ctx_(ctx), first_seq_(first_seq), n_seqs_(n_seqs), limits_(limits) {
  const uint8_t parts = ctx.memory().parts();
  kv_shared_ = (parts & kv::kPartKv) != 0;
  needs_ckpt_ = (parts & kv::kPartsAtEnd) != 0;
  if (!kv_shared_) n_seqs_ = 0;  // an index of checkpoints: no cells, no cache sequences
  for (int s = first_seq + n_seqs_ - 1; s >= first_seq; --s) free_seqs_.push_back(s);
}

PrefixCache::~PrefixCache() = default;

void PrefixCache::touch(Node* n) {
  const uint64_t t = ++clock_;
  for (; n && n != &root_; n = n->parent) n->stamp = t;
}

PrefixCache::Match PrefixCache::match(std::span<const int32_t> tokens, int max_len) {
  Match m;
  const int limit = std::min<int>(max_len, int(tokens.size()));
  Node* n = &root_;
  int depth = 0;
  while (depth < limit) {
    const int ci = child_index(n, tokens[size_t(depth)]);
    if (ci < 0) break;
    Node* c = n->children[size_t(ci)].get();
    int k = 0;
    while (k < int(c->tokens.size()) && depth + k < limit && c->tokens[size_t(k)] == tokens[size_t(depth + k)]) ++k;
    if (k == 0) break;
    depth += k;
    if (needs_ckpt_) {
      // Only a node end with a checkpoint can be resumed from.
      if (k == int(c->tokens.size()) && c->ckpt) {
        m.len = depth;
        m.node = c;
      }
      if (k < int(c->tokens.size())) break;
      n = c;
      continue;
    }
    m.len = depth;
    m.node = c;
    if (k < int(c->tokens.size())) {
      // Ends inside c: split it so that the match ends at a node boundary (a lock on the match
      // then pins only the tokens used, not all of c).
      m.node = split(c, depth);
      break;
    }
    n = c;
  }
  if (m.node) touch(m.node);
  return m;
}

int PrefixCache::holder(const Node* n) const {
  while (!n->leaf()) n = n->children.front().get();
  return n->seq;
}

Status PrefixCache::share(const Match& m, int seq) {
  if (m.len == 0 || !m.node) return Status::ok();
  if (kv_shared_) LOOM_RETURN_IF_ERROR(ctx_.seq_cp(holder(m.node), seq, 0, m.len, kv::kPartKv));
  if (needs_ckpt_) {
    if (!m.node->ckpt) return internal_error("prefix cache: no checkpoint at the match");
    m.node->ckpt_stamp = ++clock_;
    LOOM_LOG(kDebug, "prefix cache: sequence %d resumes from the checkpoint at %d", seq, m.len);
    Status st = ctx_.seq_state_load(*m.node->ckpt, seq);
    if (!st) {
      if (kv_shared_) (void)ctx_.seq_rm(seq, -1, -1, kv::kPartKv);
      return st;
    }
  }
  return Status::ok();
}

PrefixCache::Node* PrefixCache::split(Node* n, int at) {
  // A new node takes n's place under its parent with the tokens [start, at); n keeps the rest.
  Node* parent = n->parent;
  auto top = std::make_unique<Node>();
  top->parent = parent;
  top->start = n->start;
  top->tokens.assign(n->tokens.begin(), n->tokens.begin() + (at - n->start));
  top->ref = n->ref;
  top->stamp = n->stamp;
  n->tokens.erase(n->tokens.begin(), n->tokens.begin() + (at - n->start));
  n->start = at;
  Node* top_raw = top.get();
  for (auto& c : parent->children) {
    if (c.get() == n) {
      std::unique_ptr<Node> self = std::move(c);
      self->parent = top_raw;
      top->children.push_back(std::move(self));
      c = std::move(top);
      break;
    }
  }
  ++n_nodes_;
  return top_raw;
}

PrefixCache::Node* PrefixCache::new_leaf(Node* parent, std::span<const int32_t> tokens, int start, int seq) {
  auto leaf = std::make_unique<Node>();
  leaf->parent = parent;
  leaf->start = start;
  leaf->tokens.assign(tokens.begin(), tokens.end());
  leaf->seq = seq;
  Node* raw = leaf.get();
  parent->children.push_back(std::move(leaf));
  if (kv_shared_) evictable_ += int(raw->tokens.size());
  n_tokens_ += int(raw->tokens.size());
  ++n_nodes_;
  touch(raw);
  return raw;
}

int PrefixCache::take_free_seq() {
  if (free_seqs_.empty()) {
    // Evict whole leaves until a sequence is free.
    while (free_seqs_.empty()) {
      Node* victim = lru_leaf(nullptr);
      if (!victim) return -1;
      persist(victim);
      remove_leaf(victim);
    }
  }
  const int s = free_seqs_.back();
  free_seqs_.pop_back();
  return s;
}

void PrefixCache::release_seq(int seq) {
  if (seq < 0) return;
  (void)ctx_.seq_rm(seq, -1, -1, kv::kPartKv);
  free_seqs_.push_back(seq);
}

PrefixCache::Node* PrefixCache::insert(std::span<const int32_t> tokens, int src) {
  const int n = int(tokens.size());
  if (n == 0) return nullptr;
  Node* at = &root_;  // the deepest node fully matched
  int depth = 0;
  Node* last = nullptr;  // node holding tokens[depth - 1]
  while (depth < n) {
    const int ci = child_index(at, tokens[size_t(depth)]);
    if (ci < 0) break;
    Node* c = at->children[size_t(ci)].get();
    int k = 0;
    while (k < int(c->tokens.size()) && depth + k < n && c->tokens[size_t(k)] == tokens[size_t(depth + k)]) ++k;
    depth += k;
    last = c;
    if (k < int(c->tokens.size())) {
      if (depth == n) {
        // All of it is cached, ending inside c: split there so a lock covers only these tokens.
        Node* top = split(c, depth);
        touch(top);
        return top;
      }
      at = split(c, depth);  // diverges inside c
      last = at;
      break;
    }
    at = c;
  }
  if (depth == n) {
    touch(last);
    return last;
  }
  const std::span<const int32_t> rest = tokens.subspan(size_t(depth));
  if (!kv_shared_) {
    // An index of checkpoints: the tokens alone.
    if (at != &root_ && at->leaf() && !at->ckpt) {
      at->tokens.insert(at->tokens.end(), rest.begin(), rest.end());
      n_tokens_ += int(rest.size());
      touch(at);
      return at;
    }
    return new_leaf(at, rest, depth, -1);
  }
  if (at != &root_ && at->leaf()) {
    // Extend the leaf in place: its sequence already holds the path up to depth.
    if (!ctx_.seq_cp(src, at->seq, depth, n, kv::kPartKv).is_ok()) return at;
    const int old_end = at->end();
    at->tokens.insert(at->tokens.end(), rest.begin(), rest.end());
    if (at->ref == 0) evictable_ += int(rest.size());
    n_tokens_ += int(rest.size());
    at->persisted = false;
    // A checkpoint stays where it was taken: at a node that ends there.
    if (at->ckpt) {
      Node* top = split(at, old_end);
      top->ckpt = std::move(at->ckpt);
      top->ckpt_stamp = at->ckpt_stamp;
    }
    touch(at);
    return at;
  }
  // A new leaf below `at`, holding the cached path [0, depth) and src's cells [depth, n).
  // The attach point is locked while a sequence is found, so that eviction cannot take it.
  Node* guard = at == &root_ ? nullptr : at;
  if (guard) lock(guard);
  const int seq = take_free_seq();
  if (guard) unlock(guard);
  if (seq < 0) return depth > 0 ? last : nullptr;
  if (depth > 0 && !ctx_.seq_cp(holder(at), seq, 0, depth, kv::kPartKv).is_ok()) {
    release_seq(seq);
    return last;
  }
  if (!ctx_.seq_cp(src, seq, depth, n, kv::kPartKv).is_ok()) {
    release_seq(seq);
    return last;
  }
  return new_leaf(at, rest, depth, seq);
}

PrefixCache::Node* PrefixCache::adopt(std::span<const int32_t> tokens, int seq) {
  const Match m = match(tokens, int(tokens.size()));
  if (m.len == int(tokens.size())) {
    release_seq(seq);
    return m.node;
  }
  // seq's own cells for the cached part are duplicates: drop them and take the tree's instead.
  (void)ctx_.seq_rm(seq, 0, m.len, kv::kPartKv);
  Node* at = &root_;
  if (m.node) {
    at = m.len < m.node->end() ? split(m.node, m.len) : m.node;
    if (!ctx_.seq_cp(holder(at), seq, 0, m.len, kv::kPartKv).is_ok()) {
      release_seq(seq);
      return m.node;
    }
  }
  if (at != &root_ && at->leaf()) {
    // at's own sequence holds the path: move seq's cells to it and free seq.
    if (ctx_.seq_cp(seq, at->seq, m.len, int(tokens.size()), kv::kPartKv).is_ok()) {
      const std::span<const int32_t> rest = tokens.subspan(size_t(m.len));
      at->tokens.insert(at->tokens.end(), rest.begin(), rest.end());
      if (at->ref == 0) evictable_ += int(rest.size());
      n_tokens_ += int(rest.size());
      touch(at);
    }
    release_seq(seq);
    return at;
  }
  return new_leaf(at, tokens.subspan(size_t(m.len)), m.len, seq);
}

void PrefixCache::lock(Node* n) {
  for (; n && n != &root_; n = n->parent) {
    if (n->ref++ == 0 && kv_shared_) evictable_ -= int(n->tokens.size());
  }
}

void PrefixCache::unlock(Node* n) {
  for (; n && n != &root_; n = n->parent) {
    if (--n->ref == 0 && kv_shared_) evictable_ += int(n->tokens.size());
  }
}

PrefixCache::Node* PrefixCache::lru_leaf(const Node* keep) const {
  // Depth-first over the tree; unlocked leaves only (their ancestors may be locked).
  const Node* best = nullptr;
  std::vector<const Node*> stack = {&root_};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const auto& c : n->children) stack.push_back(c.get());
    if (n == &root_ || !n->leaf() || n->ref > 0 || n == keep) continue;
    if (!best || n->stamp < best->stamp) best = n;
  }
  return const_cast<Node*>(best);
}

void PrefixCache::path_tokens(const Node* n, std::vector<int32_t>* out) const {
  std::vector<const Node*> path;
  for (; n && n != &root_; n = n->parent) path.push_back(n);
  out->clear();
  for (auto it = path.rbegin(); it != path.rend(); ++it) out->insert(out->end(), (*it)->tokens.begin(), (*it)->tokens.end());
}

void PrefixCache::persist(Node* leaf) {
  if (!on_evict_ || leaf->persisted) return;
  std::vector<int32_t> toks;
  path_tokens(leaf, &toks);
  on_evict_(toks, leaf->seq);
  leaf->persisted = true;
}

void PrefixCache::remove_leaf(Node* leaf) {
  const int c = leaf->seq;
  Node* parent = leaf->parent;
  drop_checkpoint(leaf);
  if (c >= 0) (void)ctx_.seq_rm(c, leaf->start, -1, kv::kPartKv);  // the leaf's own cells: held by c alone, freed
  if (leaf->ref == 0 && kv_shared_) evictable_ -= int(leaf->tokens.size());
  n_tokens_ -= int(leaf->tokens.size());
  --n_nodes_;
  auto& sib = parent->children;
  sib.erase(std::find_if(sib.begin(), sib.end(), [&](const auto& p) { return p.get() == leaf; }));
  if (parent != &root_ && parent->leaf()) {
    parent->seq = c;  // c still holds the parent's path
  } else {
    release_seq(c);  // the ancestors' cells stay with the siblings' sequences
  }
}

void PrefixCache::drop_checkpoint(Node* n) {
  if (!n->ckpt) return;
  ckpt_bytes_ -= int64_t(n->ckpt->size());
  --n_ckpt_;
  n->ckpt.reset();
}

void PrefixCache::prune(Node* n) {
  // Index mode: a leaf without a checkpoint resumes nothing.
  while (!kv_shared_ && n && n != &root_ && n->leaf() && !n->ckpt && n->ref == 0) {
    Node* parent = n->parent;
    remove_leaf(n);
    n = parent;
  }
}

void PrefixCache::set_checkpoint(Node* n, int seq) {
  if (!needs_ckpt_ || !n || n == &root_) return;
  auto data = ctx_.seq_state_save(seq, {}, kv::kPartsAtEnd);
  if (!data) {
    LOOM_LOG(kWarn, "prefix cache: checkpoint not saved: %s", data.status().message().c_str());
    return;
  }
  set_checkpoint(n, std::move(*data));
}

void PrefixCache::set_checkpoint(Node* n, std::vector<uint8_t> data) {
  if (!needs_ckpt_ || !n || n == &root_ || data.empty()) return;
  if (int64_t(data.size()) > limits_.max_bytes || limits_.per_path <= 0) return;
  drop_checkpoint(n);
  ckpt_bytes_ += int64_t(data.size());
  ++n_ckpt_;
  n->ckpt = std::make_unique<std::vector<uint8_t>>(std::move(data));
  touch(n);
  n->ckpt_stamp = clock_;
  LOOM_LOG(kDebug, "prefix cache: checkpoint at %d (%zu bytes)", n->end(), n->ckpt->size());
  enforce_limits(n);
}

void PrefixCache::enforce_limits(const Node* keep) {
  // At most per_path checkpoints on every root-to-leaf path through `keep` (a checkpoint set on an
  // inner node, such as a rolling one below a reply's end, lengthens the paths below it too): the
  // least recently used others go, but not `keep` and (with room for two) not a path's shallowest,
  // which every conversation that starts the same way (the same system prompt) resumes from
  // however long this one grows.
  std::vector<Node*> leaves;
  for (std::vector<Node*> stack = {const_cast<Node*>(keep)}; !stack.empty();) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->leaf()) leaves.push_back(n);
    for (auto& c : n->children) stack.push_back(c.get());
  }
  for (Node* leaf : leaves) {
    std::vector<Node*> path;  // from the leaf towards the root
    for (Node* n = leaf; n && n != &root_; n = n->parent) {
      if (n->ckpt) path.push_back(n);
    }
    const Node* shallowest = limits_.per_path >= 2 && !path.empty() ? path.back() : nullptr;
    while (int(path.size()) > limits_.per_path) {
      auto rank = [&](const Node* n) { return n == keep ? 2 : n == shallowest ? 1 : 0; };
      auto victim = std::min_element(path.begin(), path.end(), [&](const Node* a, const Node* b) {
        if (rank(a) != rank(b)) return rank(a) < rank(b);
        return a->ckpt_stamp < b->ckpt_stamp;
      });
      Node* v = *victim;
      path.erase(victim);
      LOOM_LOG(kDebug, "prefix cache: checkpoint at %d dropped (%d on the path to %d)", v->end(), limits_.per_path,
               leaf->end());
      drop_checkpoint(v);
      prune(v);
    }
  }
  // At most max_bytes in all: the least recently used go.
  while (ckpt_bytes_ > limits_.max_bytes) {
    Node* victim = nullptr;
    std::vector<Node*> stack = {&root_};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (auto& c : n->children) stack.push_back(c.get());
      if (n->ckpt && n != keep && (!victim || n->ckpt_stamp < victim->ckpt_stamp)) victim = n;
    }
    if (!victim) break;
    drop_checkpoint(victim);
    prune(victim);
  }
}

int PrefixCache::evict(int cells) {
  if (!kv_shared_) return 0;  // no cells here
  int freed = 0;
  while (freed < cells) {
    Node* victim = lru_leaf(nullptr);
    if (!victim) break;
    persist(victim);
    const int len = int(victim->tokens.size());
    const int want = cells - freed;
    if (len > want) {
      // Only the tail is needed: the leaf keeps its first len - want tokens.
      const int new_end = victim->end() - want;
      (void)ctx_.seq_rm(victim->seq, new_end, -1, kv::kPartKv);
      drop_checkpoint(victim);  // its end moves
      victim->tokens.resize(size_t(len - want));
      evictable_ -= want;
      n_tokens_ -= want;
      freed += want;
    } else {
      remove_leaf(victim);
      freed += len;
    }
  }
  return freed;
}

int PrefixCache::erase(std::span<const int32_t> tokens) {
  const Match m = match(tokens, int(tokens.size()));
  Node* n = m.node;
  int dropped = 0;
  while (n && n != &root_ && n->leaf() && n->ref == 0) {
    Node* parent = n->parent;
    dropped += int(n->tokens.size());
    remove_leaf(n);
    n = parent;
  }
  return dropped;
}

void PrefixCache::clear_unlocked() {
  while (Node* victim = lru_leaf(nullptr)) remove_leaf(victim);
}

void PrefixCache::persist_all() {
  std::vector<Node*> stack = {&root_};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& c : n->children) stack.push_back(c.get());
    if (n != &root_ && n->leaf()) persist(n);
  }
}

int PrefixCache::n_leaves() const {
  int k = 0;
  std::vector<const Node*> stack = {&root_};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const auto& c : n->children) stack.push_back(c.get());
    if (n != &root_ && n->leaf()) ++k;
  }
  return k;
}

namespace {

using Node = PrefixCache::Node;

// What check_invariants counts over the tree, to compare with the cache's counters.
struct TreeTally {
  int evictable = 0, tokens = 0, nodes = 0, ckpts = 0;
  int64_t ckpt_bytes = 0;
};

// At most per_path checkpoints on any root-to-node path.
Status check_checkpoints_per_path(const Node& root, int per_path) {
  std::vector<std::pair<const Node*, int>> stack = {{&root, 0}};
  while (!stack.empty()) {
    auto [n, on_path] = stack.back();
    stack.pop_back();
    on_path += n->ckpt ? 1 : 0;
    if (on_path > per_path) {
      return internal_error(std::to_string(on_path) + " checkpoints on the path to position " + std::to_string(n->end()));
    }
    for (const auto& c : n->children) stack.emplace_back(c.get(), on_path);
  }
  return Status::ok();
}

// An index of checkpoints: structure only, counted into t.
Status tally_checkpoint_index(const Node& root, TreeTally& t) {
  std::vector<const Node*> stack = {&root};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const auto& c : n->children) {
      if (c->parent != n) return internal_error("bad parent link");
      stack.push_back(c.get());
    }
    if (n == &root) continue;
    ++t.nodes;
    t.tokens += int(n->tokens.size());
    if (n->tokens.empty()) return internal_error("empty node");
    if (n->seq >= 0) return internal_error("a node of a checkpoint index owns a sequence");
    if (n->ckpt) ++t.ckpts, t.ckpt_bytes += int64_t(n->ckpt->size());
  }
  return Status::ok();
}

// A leaf's sequence holds exactly positions 0..end-1, one cell each.
Status check_leaf_cells(const KvCache& kv, const Node& n) {
  std::vector<int> count(size_t(n.end()), 0);
  for (int c = 0; c < kv.size(); ++c) {
    const kv::KvCell& cell = kv.cell(c);
    if (cell.empty() || !cell.seqs.test(size_t(n.seq))) continue;
    if (cell.pos < 0 || cell.pos >= n.end())
      return internal_error("leaf sequence " + std::to_string(n.seq) + " holds position " + std::to_string(cell.pos) +
                            " beyond its path end " + std::to_string(n.end()));
    ++count[size_t(cell.pos)];
  }
  for (int p = 0; p < n.end(); ++p) {
    if (count[size_t(p)] != 1)
      return internal_error("leaf sequence " + std::to_string(n.seq) + " has " + std::to_string(count[size_t(p)]) +
                            " cells at position " + std::to_string(p));
  }
  return Status::ok();
}

// All leaves below n (their sequences: seqs) share one cell per position of n.
Status check_shared_cells(const KvCache& kv, const Node& n, const std::vector<int>& seqs) {
  for (int p = n.start; p < n.end(); ++p) {
    int cell_of_first = -1;
    for (int c = 0; c < kv.size(); ++c) {
      const kv::KvCell& cell = kv.cell(c);
      if (cell.empty() || cell.pos != p || !cell.seqs.test(size_t(seqs.front()))) continue;
      cell_of_first = c;
    }
    for (int s : seqs) {
      bool found = false;
      for (int c = 0; c < kv.size(); ++c) {
        const kv::KvCell& cell = kv.cell(c);
        if (!cell.empty() && cell.pos == p && cell.seqs.test(size_t(s))) found = (c == cell_of_first);
      }
      if (!found) return internal_error("leaves below a node do not share its cell at position " + std::to_string(p));
    }
  }
  return Status::ok();
}

// A tree whose nodes' cells live in cache sequences, walked against the KV cache.
struct SharedTreeWalk {
  const PrefixCache& cache;
  const Node& root;
  const KvCache& kv;
  TreeTally tally;

  // Counts n and checks its links and refs.
  Status visit_node(const Node& n) {
    ++tally.nodes;
    tally.tokens += int(n.tokens.size());
    if (n.ckpt) ++tally.ckpts, tally.ckpt_bytes += int64_t(n.ckpt->size());
    if (n.ref == 0) tally.evictable += int(n.tokens.size());
    if (n.tokens.empty()) return internal_error("empty node");
    if (n.ref < 0) return internal_error("negative ref");
    if (n.parent != &root && n.parent->end() != n.start) return internal_error("node start does not follow its parent");
    if (n.parent->ref < n.ref) return internal_error("a node is locked more than its parent");
    return Status::ok();
  }

  // Checks n's subtree; appends its leaf sequences to *out.
  Status walk(const Node* n, std::vector<int>* out) {
    std::vector<int> seqs;
    if (n != &root) LOOM_RETURN_IF_ERROR(visit_node(*n));
    if (n->leaf() && n != &root) {
      if (!cache.is_cache_seq(n->seq)) return internal_error("leaf without a cache sequence");
      seqs.push_back(n->seq);
      LOOM_RETURN_IF_ERROR(check_leaf_cells(kv, *n));
    } else if (n != &root && n->seq >= 0) {
      return internal_error("inner node owns a sequence");
    }
    for (const auto& c : n->children) {
      if (c->parent != n) return internal_error("bad parent link");
      LOOM_RETURN_IF_ERROR(walk(c.get(), &seqs));
    }
    if (n != &root) LOOM_RETURN_IF_ERROR(check_shared_cells(kv, *n, seqs));
    out->insert(out->end(), seqs.begin(), seqs.end());
    return Status::ok();
  }
};

}  // namespace

Status PrefixCache::check_invariants() const {
  LOOM_RETURN_IF_ERROR(check_checkpoints_per_path(root_, std::max(limits_.per_path, 0)));
  if (!kv_shared_) {
    TreeTally t;
    LOOM_RETURN_IF_ERROR(tally_checkpoint_index(root_, t));
    if (t.tokens != n_tokens_ || t.nodes != n_nodes_) return internal_error("token or node count mismatch");
    if (t.ckpts != n_ckpt_ || t.ckpt_bytes != ckpt_bytes_) return internal_error("checkpoint count mismatch");
    if (evictable_ != 0) return internal_error("a checkpoint index counts evictable cells");
    return Status::ok();
  }
  SharedTreeWalk w{*this, root_, ctx_.kv(), {}};
  std::vector<int> all;
  LOOM_RETURN_IF_ERROR(w.walk(&root_, &all));
  const TreeTally& t = w.tally;
  if (t.evictable != evictable_)
    return internal_error("evictable count " + std::to_string(evictable_) + " != " + std::to_string(t.evictable));
  if (t.tokens != n_tokens_) return internal_error("token count mismatch");
  if (t.nodes != n_nodes_) return internal_error("node count mismatch");
  if (t.ckpts != n_ckpt_ || t.ckpt_bytes != ckpt_bytes_) return internal_error("checkpoint count mismatch");
  if (int(all.size() + free_seqs_.size()) != n_seqs_) return internal_error("cache sequences leaked");
  return Status::ok();
}

}  // namespace loom::serve
