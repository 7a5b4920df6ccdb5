// Unigram (T5) segmentation: see ugm_tokenizer.h.
#include "vocab/ugm_tokenizer.h"

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <deque>
#include <map>

#include "vocab/utf8.h"
#include "vocab/vocab.h"

namespace loom::vocab::detail {

namespace {

constexpr std::string_view kSpaceEscape = "\xE2\x96\x81";  // U+2581
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 character at text[offset] by llama.cpp's unicode_cpt_from_utf8 (lead
// byte and continuation bytes checked; overlongs and surrogates accepted), 0 when invalid.
size_t valid_char_len(std::string_view text, size_t offset) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(text[offset + i]); };
  const size_t left = text.size() - offset;
  const uint8_t c = b(0);
  if (!(c & 0x80)) return 1;
  if (!(c & 0x40)) return 0;
  auto cont = [&](size_t n) {
    if (left <= n) return false;
    for (size_t i = 1; i <= n; ++i) {
      if ((b(i) & 0xC0) != 0x80) return false;
    }
    return true;
  };
  if (!(c & 0x20)) return cont(1) ? 2 : 0;
  if (!(c & 0x10)) return cont(2) ? 3 : 0;
  if (!(c & 0x08)) return cont(3) ? 4 : 0;
  return 0;
}

// The unit fields of SentencePiece's darts-clone double array, as llama.cpp reads them.
uint32_t unit_base(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
uint32_t unit_lcheck(uint32_t u) { return u & ((1u << 31) | 0xFF); }
bool unit_leaf(uint32_t u) { return (u >> 8) & 1; }
uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }

}  // namespace

void ByteTrie::insert(std::string_view key, int32_t value) {
  int32_t node = 0;
  for (char ch : key) {
    const uint64_t e = (uint64_t(uint32_t(node)) << 8) | uint8_t(ch);
    auto it = edges_.find(e);
    if (it == edges_.end()) {
      nodes_.push_back(-1);
      it = edges_.emplace(e, int32_t(nodes_.size() - 1)).first;
    }
    node = it->second;
  }
  nodes_[size_t(node)] = value;  // a later duplicate wins, as in llama.cpp's naive_trie
}

size_t ByteTrie::longest_path(std::string_view text) const {
  int32_t node = 0;
  size_t n = 0;
  while (n < text.size()) {
    const int32_t next = child(node, uint8_t(text[n]));
    if (next < 0) break;
    node = next;
    ++n;
  }
  return n;
}

Expected<std::shared_ptr<const UgmTokenizer>> UgmTokenizer::create(const Vocab& vocab, std::string charsmap,
                                                                   bool add_space_prefix, bool remove_extra_whitespaces) {
  auto t = std::make_shared<UgmTokenizer>();
  t->charsmap_ = std::move(charsmap);
  t->add_space_prefix_ = add_space_prefix;
  t->remove_extra_whitespaces_ = remove_extra_whitespaces;
  if (!t->charsmap_.empty()) {
    if (t->charsmap_.size() < 4) return corrupt("tokenizer.ggml.precompiled_charsmap is too small for its size header");
    uint32_t blob = 0;
    std::memcpy(&blob, t->charsmap_.data(), 4);  // little-endian in the file (GGUF is little-endian here)
    if (uint64_t(blob) + 4 >= t->charsmap_.size()) {
      return corrupt("tokenizer.ggml.precompiled_charsmap: its double array (" + std::to_string(blob) +
                     " bytes) does not fit in the " + std::to_string(t->charsmap_.size()) + " bytes of the charsmap");
    }
    t->xcda_.resize(blob / 4);
    // An empty double array (blob < 4) copies nothing: memcpy may not be given its null data().
    if (!t->xcda_.empty()) std::memcpy(t->xcda_.data(), t->charsmap_.data() + 4, t->xcda_.size() * 4);
    t->replacements_ = std::string_view(t->charsmap_).substr(4 + size_t(blob));
  }
  float min_score = FLT_MAX;
  t->user_defined_ids_.assign(size_t(vocab.n_tokens()), 0);
  for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
    if (vocab.is_normal(id)) min_score = std::min(min_score, vocab.token_score(id));
    if (vocab.is_normal(id) || vocab.is_user_defined(id) || vocab.is_unused(id)) t->tokens_.insert(vocab.token_text(id), id);
    if (vocab.is_user_defined(id)) {
      t->user_defined_.insert(vocab.token_text(id), id);
      t->user_defined_ids_[size_t(id)] = 1;
    }
  }
  t->unknown_score_ = min_score - 10.0f;
  return std::shared_ptr<const UgmTokenizer>(std::move(t));
}

UgmTokenizer::Prefix UgmTokenizer::normalize_prefix(std::string_view text, size_t offset) const {
  // A prefix along the user-defined tokens' trie stays as it is (even a partial one: llama.cpp).
  if (!user_defined_.empty()) {
    const size_t n = user_defined_.longest_path(text.substr(offset));
    if (n > 0) return {text.data() + offset, n, n};
  }
  size_t best_len = 0;
  uint32_t best_value = 0;
  if (!xcda_.empty()) {
    const size_t size = xcda_.size();
    uint32_t node = unit_base(xcda_[0]);
    for (size_t i = offset; i < text.size(); ++i) {
      const uint8_t c = uint8_t(text[i]);
      if (c == 0) break;
      node ^= c;
      if (node >= size || unit_lcheck(xcda_[node]) != c) break;
      const bool leaf = unit_leaf(xcda_[node]);
      node ^= unit_base(xcda_[node]);
      if (leaf) {
        if (node >= size) break;
        best_len = i - offset + 1;
        best_value = unit_value(xcda_[node]);
      }
    }
  }
  if (best_len > 0 && best_value < replacements_.size()) {
    const std::string_view rest = replacements_.substr(best_value);
    const size_t end = rest.find('\0');
    if (end != std::string_view::npos) return {rest.data(), end, best_len};
  }
  const size_t n = valid_char_len(text, offset);
  if (n > 0) return {text.data() + offset, n, n};
  return {kReplacement.data(), kReplacement.size(), 1};
}

void UgmTokenizer::normalize(std::string_view text, std::string& out) const {
  out.clear();
  out.reserve(text.size() * 3);
  // escape_whitespaces is always on and treat_whitespace_as_suffix off for this family in llama.cpp.
  const bool prepend = add_space_prefix_;
  const bool merge = remove_extra_whitespaces_;
  bool prepended = false;
  bool in_word = false;
  for (size_t offset = 0; offset < text.size();) {
    const Prefix p = normalize_prefix(text, offset);
    for (size_t i = 0; i < p.length; ++i) {
      const char c = p.data[i];
      if (c != ' ') {
        if (!in_word) {
          in_word = true;
          if ((prepend && !prepended) || merge) {
            out.append(kSpaceEscape);
            prepended = true;
          }
        }
        out.push_back(c);
      } else {
        in_word = false;
        if (!merge) out.append(kSpaceEscape);
      }
    }
    offset += p.consumed;
  }
}

void UgmTokenizer::tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) const {
  std::string norm;
  normalize(text, norm);
  const size_t n = norm.size();
  if (n == 0) return;
  const int32_t unk = vocab.unk();
  struct Best {
    int32_t token;
    size_t from;
    double score;
  };
  std::vector<Best> best(n + 1, Best{unk, 0, -DBL_MAX});
  best[0] = Best{unk, 0, 0.0};
  for (size_t at = 0; at < n;) {
    const size_t char_len = std::min(utf8_seq_len(uint8_t(norm[at])), n - at);
    const double base = best[at].score;
    bool whole_char = false;
    int32_t node = tokens_.child(0, uint8_t(norm[at]));
    size_t end = at + 1;
    while (node >= 0) {
      const int32_t id = tokens_.value(node);
      if (id >= 0) {
        if (end - at == char_len) whole_char = true;
        const double score = base + (user_defined_ids_[size_t(id)] ? 0.0 : double(vocab.token_score(id)));
        if (score > best[end].score) best[end] = Best{id, at, score};
      }
      if (end >= n) break;
      node = tokens_.child(node, uint8_t(norm[end++]));
    }
    if (!whole_char) {
      const double score = base + double(unknown_score_);
      if (score > best[at + char_len].score) best[at + char_len] = Best{unk, at, score};
    }
    at += char_len;
  }
  // Back from the end; consecutive unknown tokens become one.
  const size_t first = out.size();
  bool prev_unknown = false;
  for (size_t at = n;;) {
    const Best& b = best[at];
    const bool unknown = b.token == unk;
    if (!(prev_unknown && unknown) && b.token >= 0) out.push_back(b.token);  // no <unk> in the vocabulary: dropped
    if (b.from == 0) break;
    prev_unknown = unknown;
    at = b.from;
  }
  std::reverse(out.begin() + long(first), out.end());
}

std::string build_precompiled_charsmap(const std::vector<std::pair<std::string, std::string>>& mappings) {
  // Replacement strings, NUL-terminated, and the trie of keys.
  std::string strings;
  struct Node {
    std::map<uint8_t, int> children;
    int64_t value = -1;
    uint32_t pos = 0;
  };
  std::vector<Node> nodes(1);
  for (const auto& [key, repl] : mappings) {
    int cur = 0;
    for (char ch : key) {
      auto it = nodes[size_t(cur)].children.find(uint8_t(ch));
      if (it == nodes[size_t(cur)].children.end()) {
        nodes.push_back(Node{});
        it = nodes[size_t(cur)].children.emplace(uint8_t(ch), int(nodes.size() - 1)).first;
      }
      cur = it->second;
    }
    nodes[size_t(cur)].value = int64_t(strings.size());
    strings += repl;
    strings.push_back('\0');
  }
  // Place the nodes breadth first: each node gets a base no other node uses (so a walk can never
  // land on another node's child with the same label), its children at base ^ label and its
  // value unit at base ^ 0. The array grows in blocks of 256 units, so base ^ byte stays inside.
  std::vector<uint32_t> units(256, 0);
  std::vector<uint8_t> used(256, 0), base_used(256, 0);
  used[0] = 1;
  auto grow = [&](size_t need) {
    while (units.size() <= need) {
      units.resize(units.size() + 256, 0);
      used.resize(units.size(), 0);
      base_used.resize(units.size(), 0);
    }
  };
  std::deque<int> queue{0};
  while (!queue.empty()) {
    const int id = queue.front();
    queue.pop_front();
    Node& nd = nodes[size_t(id)];
    std::vector<uint32_t> labels;
    if (nd.value >= 0) labels.push_back(0);
    for (const auto& kv : nd.children) labels.push_back(kv.first);
    if (labels.empty()) continue;
    uint32_t base = 1;
    for (;; ++base) {
      grow(base | 0xFF);
      if (base_used[base]) continue;
      bool ok = true;
      for (uint32_t l : labels) ok = ok && !used[base ^ l] && (base ^ l) != 0;
      if (ok) break;
    }
    base_used[base] = 1;
    const uint32_t offset = nd.pos ^ base;
    const uint32_t label = id == 0 ? 0 : (units[nd.pos] & 0xFF);
    units[nd.pos] = (offset << 10) | (nd.value >= 0 ? (1u << 8) : 0) | label;
    if (nd.value >= 0) {
      units[base] = uint32_t(nd.value) | (1u << 31);
      used[base] = 1;
    }
    for (const auto& [c, child] : nd.children) {
      const uint32_t p = base ^ c;
      used[p] = 1;
      units[p] = c;  // the label now; offset and leaf flag when the child is placed
      nodes[size_t(child)].pos = p;
      queue.push_back(child);
    }
  }
  std::string out(4, '\0');
  const uint32_t blob = uint32_t(units.size() * 4);
  std::memcpy(out.data(), &blob, 4);
  out.append(reinterpret_cast<const char*>(units.data()), units.size() * 4);
  out += strings;
  return out;
}

}  // namespace loom::vocab::detail
