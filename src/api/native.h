// llama.cpp's native API shapes (llama-server's /completion, /completions, /infill and /props'
// generation settings), as its clients read them (ollama's runner, the llama.cpp web UI, editor
// plugins): the streamed partial objects, the final object, token probabilities, and the
// generation settings a request ran with. JSON only, like the rest of src/api.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/api_types.h"

namespace loom::api {

// The sampling and length settings of a /completion request as llama-server reports them
// ("generation_settings" in a final response, /props' default_generation_settings.params): the
// defaults, with the request's fields (llama-server's names and llama.node's aliases) over them.
// seed: the seed the request ran with; n_probs etc. are taken from the body.
json generation_settings(const json& body, uint64_t seed, bool stream);

// One token's probabilities: {"id", "token", "bytes", "logprob", "top_logprobs": [{"id", "token",
// "bytes", "logprob"}]}, or with post_sampling_probs "prob" / "top_probs" (exp of the log
// probabilities). `piece` may end inside a UTF-8 character: "token" is cut to its valid prefix,
// "bytes" has all of it.
struct TokenProb {
  int32_t id = 0;
  std::string piece;
  double logprob = 0;
};
json token_probs(const TokenProb& chosen, const std::vector<TokenProb>& top, bool post_sampling_probs);

// A streamed partial: {"index", "content", "tokens", "stop": false, "id_slot", "tokens_predicted",
// "tokens_evaluated"} (+ "completion_probabilities": [probs] when given).
json native_partial(int index, const std::string& content, const std::vector<int32_t>& tokens, int id_slot,
                    int64_t tokens_predicted, int64_t tokens_evaluated, const json& probs);

// The final object of one prompt (the last stream event, or the whole non-streamed answer).
struct NativeFinal {
  int index = 0;
  std::string content;
  std::vector<int32_t> tokens;  // the generated ids when the request asked return_tokens
  int id_slot = -1;
  std::string model;
  int64_t tokens_predicted = 0, tokens_evaluated = 0, tokens_cached = 0;
  json generation_settings;
  std::string prompt;  // the prompt's text
  bool truncated = false;
  std::string stop_type;  // "eos", "word", "limit" or "none" (native_stop_type)
  std::string stopping_word;
  json timings;                   // llama-server's timings object
  json completion_probabilities;  // null, or an array of token_probs (non-streamed only)
};
json native_final(const NativeFinal& f);

// llama-server's stop_type from loom's finish reason ("stop" | "length" | "cancelled") and stop word.
std::string native_stop_type(const std::string& reason, const std::string& stop_word);

// The length of the longest prefix of s that is valid UTF-8 (a piece may end inside a character).
size_t valid_utf8_prefix(const std::string& s);

}  // namespace loom::api
