// A thinking budget (llama-server's --reasoning-budget, a request's reasoning_budget_tokens /
// thinking_budget_tokens): once a reply has spent `budget` tokens inside a reasoning block
// (<think>...</think> or [THINK]...[/THINK]), the block is closed for it: the sampler is made to
// emit the budget message (if any) and the closing tag, and the model goes on to its answer.
//
// It follows the text of the tokens the sampler accepts, prompt included (so a prompt that ends
// inside an open block, as DeepSeek R1's and Qwen3's thinking prompts do, starts the count), and
// counts generated tokens only. States: outside a block -> inside (counting) -> forcing the end
// -> outside again; a later block (a new turn's) is counted afresh. A forced token that the
// request's grammar does not allow ends the forcing (the grammar wins).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::vocab {
class Vocab;
}  // namespace loom::vocab
namespace loom {
using vocab::Vocab;
}  // namespace loom

namespace loom::sample {

class ReasoningBudget {
 public:
  // budget: tokens allowed inside a block (0: the block is closed as soon as it opens).
  ReasoningBudget(const Vocab& vocab, int32_t budget, std::string message);

  // A token the sampler accepted; generated: it was sampled (not a prompt token).
  void observe(int32_t token, bool generated);
  // The token the sampler must emit next, if the budget is forcing the block closed.
  std::optional<int32_t> forced() const;
  // The forced token could not be emitted (a grammar forbids it): stop forcing.
  void give_up();
  // Back to the start (outside any block, nothing seen).
  void reset();
  // Closes the open block now, as a spent budget does; false (nothing changes) when not counting
  // inside one (outside, or already forcing its end).
  bool force();

  bool inside() const { return state_ == State::kCounting; }
  int32_t used() const { return used_; }

 private:
  enum class State { kOutside, kCounting, kForcing };
  void start_forcing();

  const Vocab* vocab_;
  int32_t budget_;
  std::string message_;
  State state_ = State::kOutside;
  int32_t used_ = 0;
  int open_ = -1;                 // which tag pair opened the block
  std::string tail_;              // the last bytes of the accepted text (tag matching)
  std::vector<int32_t> forcing_;  // tokens still to force, in order
  size_t next_ = 0;
};

}  // namespace loom::sample
