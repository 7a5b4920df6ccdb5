// Requests as JSON: typed access to fields with errors that name them, a nesting-depth check that
// runs before the parser, and the translation of a generation request (llama-server's /completion
// and OpenAI's field names, llama.node's aliases) into a GenerateRequest. Shared by `loom serve`
// (tools/server) and the C API's scheduler functions (include/loom/loom_serve.h), so a field means
// the same everywhere. No HTTP here: errors are RequestError, which each frontend maps.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/chat_request.h"
#include "serve/scheduler.h"

namespace loom::serve {

using json = nlohmann::ordered_json;

// A request that cannot run as given: kInvalidArgument unless a lower layer said otherwise
// (kUnsupported for what a template cannot do, ...). The message names the field.
struct RequestError {
  StatusCode code = StatusCode::kInvalidArgument;
  std::string message;
  Status status() const { return Status(code, message); }
};
[[noreturn]] void request_error(std::string message);
[[noreturn]] void request_error(const Status& st, const std::string& prefix = {});

// Deepest nesting of arrays / objects in a JSON text (strings are skipped).
int json_depth(std::string_view text);
inline constexpr int kMaxJsonDepth = 64;

// Parses a request body: RequestError for malformed JSON, too deep nesting, or a non-object.
json parse_body(std::string_view body);

// Typed optional fields of one object; `where` prefixes field names in errors ("messages[0].").
// null counts as absent.
class Fields {
 public:
  explicit Fields(const json& j, std::string where = {}) : j_(j), where_(std::move(where)) {}
  bool has(const char* k) const { return j_.is_object() && j_.contains(k) && !j_.at(k).is_null(); }
  const json* get(const char* k) const { return has(k) ? &j_.at(k) : nullptr; }
  std::string name(const char* k) const { return where_ + k; }

  bool boolean(const char* k, bool def) const;
  double number(const char* k, double def) const;  // finite
  double number_in(const char* k, double def, double lo, double hi) const;
  int64_t integer(const char* k, int64_t def) const;  // integral floats (2.0) accepted
  int64_t integer_in(const char* k, int64_t def, int64_t lo, int64_t hi) const;
  std::string string(const char* k, std::string def = {}) const;
  // A string or an array of strings (stop).
  std::vector<std::string> strings(const char* k) const;

 private:
  const json& j_;
  std::string where_;
};

// A prompt: a string (tokenized with BOS as the vocabulary adds it, special tokens parsed) or an
// array of token ids (checked against the vocabulary).
std::vector<int32_t> prompt_tokens(const json& v, const Vocab& vocab, const std::string& where);

// Embedding inputs: a string, an array of token ids, or an array of either (at most 2048); strings
// are tokenized with BOS / EOS as the vocabulary adds them and no special-token parsing. An input
// that gives no tokens is refused.
std::vector<std::vector<int32_t>> embed_inputs(const json& v, const Vocab& vocab, const std::string& field);

// Reranker inputs, one per document ([BOS] query [EOS] [SEP] document [EOS], Vocab::rerank_input):
// documents is a non-empty array (at most 2048) of strings or {"text": ...}; *texts gets them.
std::vector<std::vector<int32_t>> rerank_inputs(const std::string& query, const json& documents, const Vocab& vocab,
                                                std::vector<std::string>* texts);

// Sampling, lengths, stops, logprobs and grammar fields of a generation request:
//   temperature top_k top_p min_p typical_p|typ_p repeat_penalty|penalty_repeat
//   repeat_last_n|penalty_last_n frequency_penalty|penalty_freq presence_penalty|penalty_present
//   mirostat mirostat_tau mirostat_eta dynatemp_range dynatemp_exponent xtc_probability
//   xtc_threshold min_keep dry_multiplier dry_base dry_allowed_length dry_penalty_last_n
//   dry_sequence_breakers samplers seed (absent or -1: random) logit_bias ({"id": bias} or
//   [[id, bias|false], ...]) n_predict|max_tokens|max_completion_tokens (default
//   `default_max_tokens`) n stop ignore_eos cache_prompt n_keep logprobs top_logprobs n_probs
//   grammar json_schema lookup speculative.n_max speculative.n_min.
// temperature <= 0 is greedy whatever the other samplers say (XTC is switched off with it).
// `chat`: logprobs is a boolean with top_logprobs beside it (chat completions); otherwise
// logprobs may be the number of alternatives (completions).
void parse_generation(const Fields& f, const Vocab& vocab, int default_max_tokens, bool chat, GenerateRequest& r);

// A chat request: messages (required, non-empty), tools, tool_choice, parallel_tool_calls,
// response_format, chat_template_kwargs, add_generation_prompt, then the generation fields.
struct ChatGeneration {
  GenerateRequest request;
  chat::ToolCallFormat format = chat::ToolCallFormat::kNone;
  chat::ParseOptions parse_options;           // for chat::parse_assistant_output on the generated text
  std::vector<std::string> triggers;          // text that starts a tool call (stream up to it only)
  std::string prompt_text;                    // the rendered prompt
  std::vector<std::string> preserved_tokens;  // control tokens the output may contain as text
};
// checkpoints: also name the prompt positions where a cached prefix is worth a checkpoint of
// memories that need them (GenerateRequest::prompt_checkpoints): the end of the leading system
// message(s), and the end of the history before the last user message, where they render as a
// prefix of the whole prompt.
ChatGeneration parse_chat_generation(const Fields& f, const chat::ChatTemplate& tmpl, const Vocab& vocab,
                                     int default_max_tokens, uint64_t id_seed, bool checkpoints = false);

}  // namespace loom::serve
