#include "serve/stop_matcher.h"

#include <algorithm>

namespace loom::serve {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::push(std::string_view text) {
  if (matched_) return {};
  if (stops_.empty()) return std::string(text);
  held_.append(text);
  // The earliest complete stop string (longest at that position).
  size_t best = std::string::npos, best_len = 0;
  for (const std::string& s : stops_) {
    const size_t p = held_.find(s);
    if (p == std::string::npos) continue;
    if (p < best || (p == best && s.size() > best_len)) {
      best = p;
      best_len = s.size();
      stop_word_ = s;
    }
  }
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of a stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_k = std::min(held_.size(), s.size() - 1);
    for (size_t k = max_k; k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!matched_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace loom::serve
