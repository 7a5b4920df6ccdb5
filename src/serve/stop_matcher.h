// Stop strings for streamed text: text is released only once it can no longer be the start of
// a stop string, and a stop string is never emitted, not even in part.
//
//   StopMatcher m({"\n\n", "User:"});
//   out += m.push(piece);      // per token: what is final now
//   if (m.matched()) ...       // stop; m.stop_word() says which; text after it was dropped
//   out += m.flush();          // at the end (no stop matched): what was held back
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace loom::serve {

class StopMatcher {
 public:
  StopMatcher() = default;
  // Empty strings are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends text and returns what can be released: everything except a tail that is a proper
  // prefix of some stop string. When a stop string is complete (the earliest one in the text;
  // the longest of those starting there), returns the text before it and matched() becomes
  // true; later pushes return "".
  std::string push(std::string_view text);
  // Releases what is held back (nothing once matched) and resets the held text.
  std::string flush();

  bool matched() const { return matched_; }
  const std::string& stop_word() const { return stop_word_; }
  size_t held_bytes() const { return held_.size(); }
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
  std::string stop_word_;
};

}  // namespace loom::serve
