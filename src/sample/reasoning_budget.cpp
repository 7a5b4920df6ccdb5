#include "sample/reasoning_budget.h"

#include "vocab/vocab.h"

namespace loom::sample {

namespace {

struct TagPair {
  const char* open;
  const char* close;
};
constexpr TagPair kTags[] = {{"<think>", "</think>"}, {"[THINK]", "[/THINK]"}};
constexpr size_t kTailBytes = 32;

bool ends_with(const std::string& s, const char* tag) {
  const std::string_view t(tag);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

ReasoningBudget::ReasoningBudget(const Vocab& vocab, int32_t budget, std::string message)
    : vocab_(&vocab), budget_(budget < 0 ? 0 : budget), message_(std::move(message)) {}

void ReasoningBudget::start_forcing() {
  state_ = State::kForcing;
  const std::string text = message_ + kTags[open_ < 0 ? 0 : open_].close;
  forcing_ = vocab_->tokenize(text, /*add_special=*/false, /*parse_special=*/true);
  next_ = 0;
  if (forcing_.empty()) state_ = State::kOutside;
}

void ReasoningBudget::observe(int32_t token, bool generated) {
  if (state_ == State::kForcing) {
    if (next_ < forcing_.size() && forcing_[next_] == token) {
      if (++next_ == forcing_.size()) state_ = State::kOutside;
    } else {
      state_ = State::kOutside;  // something else was emitted: the forcing is over
    }
  }
  if (vocab_->is_valid(token)) tail_ += vocab_->token_to_piece(token, /*special=*/true);
  if (tail_.size() > kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
  if (state_ == State::kOutside) {
    for (int i = 0; i < int(std::size(kTags)); ++i) {
      if (ends_with(tail_, kTags[i].open)) {
        state_ = State::kCounting;
        open_ = i;
        used_ = 0;
        tail_.clear();
        break;
      }
    }
    if (state_ == State::kCounting && budget_ == 0) start_forcing();  // closed as soon as it opens
    return;
  }
  if (state_ != State::kCounting) return;
  if (ends_with(tail_, kTags[open_].close)) {
    state_ = State::kOutside;
    tail_.clear();
    return;
  }
  if (generated && ++used_ >= budget_) start_forcing();
}

bool ReasoningBudget::force() {
  if (state_ != State::kCounting) return false;
  start_forcing();
  return true;
}

std::optional<int32_t> ReasoningBudget::forced() const {
  if (state_ == State::kForcing && next_ < forcing_.size()) return forcing_[next_];
  return std::nullopt;
}

void ReasoningBudget::reset() {
  give_up();
  used_ = 0;
  open_ = -1;
  tail_.clear();
}

void ReasoningBudget::give_up() {
  state_ = State::kOutside;
  forcing_.clear();
  next_ = 0;
}

}  // namespace loom::sample
