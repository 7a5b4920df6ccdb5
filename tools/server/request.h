// Request bodies -> what the server submits, for every endpoint that reads one
// (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/rerank, /tokenize, /detokenize,
// /apply-template). This layer reads only the fields the server itself interprets (stream, echo,
// several prompts, encoding_format, top_n, ...) and passes the rest to the C API, which checks
// them when the request is submitted (loom_serve.h) — so a field means the same in `loom serve`,
// the Node binding and an embedding program. No HTTP and no scheduler here, so that it can be
// tested and fuzzed alone (tests/fuzz/fuzz_server_request). Errors are thrown as HttpError (400
// naming the field); nothing else escapes for any body.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "json_fields.h"
#include "loom/loom_serve.hpp"

namespace loom::server {

// A C API status (LOOM_ERR_*) and its message -> HTTP.
HttpError http_error(int32_t code, const std::string& message);

// /v1/chat/completions and /v1/completions: the JSON requests to submit (one per prompt: a
// completion may give several; the chat endpoint always one) and how to answer.
struct GenerationPlan {
  std::vector<json> requests;
  loom::api::GenerationOptions options;  // endpoint, n_predict (loom_serve.hpp)
  bool chat = true;
  bool stream = false, include_usage = false;
  bool echo = false;          // completions: the prompt's text starts each choice
  std::vector<json> prompts;  // completions: each prompt as sent (echo's text)
};
// default_max_tokens: max_tokens for a request that gives none (`loom serve -n`).
GenerationPlan plan_chat(const json& body, int default_max_tokens);
GenerationPlan plan_completion(const json& body, int default_max_tokens);

// The seed of prompt i of a completion with several prompts, from the first one's seed (as
// drawn by the C API when the request gave none): distinct streams that a seed reproduces.
int64_t prompt_seed(uint64_t first_seed, int i);

// /v1/embeddings (and llama.cpp's /embedding): `input` or `content` (a string, token ids, or an
// array of either), encoding_format float|base64, normalize.
struct EmbeddingsPlan {
  json request;  // for loom_scheduler_embed
  bool base64 = false;
  bool normalize = true;
};
EmbeddingsPlan plan_embeddings(const json& body);

// /v1/rerank: query, documents (1..2048 strings or {"text"}), top_n, return_documents.
struct RerankPlan {
  json request;                    // for loom_scheduler_embed
  std::vector<std::string> texts;  // the documents' texts
  int top_n = 0;
  bool return_documents = false;
};
RerankPlan plan_rerank(const json& body);

// llama-server's native /completion (and /completions): the prompts of a body and the request to
// submit for each. `prompt` is a string, token ids, a mixed array of ids and strings (one prompt),
// {"prompt_string": ...} (multimodal-less JSON; multimodal_data is refused), or an array of any
// of these (one prompt each, at most 64). Mixed prompts and prompt_string objects are turned into
// token ids here with `tokenize` (text, add_special): the first string piece gets BOS as the
// vocabulary adds it, the others none, as llama-server's tokenize_mixed.
struct Tokenizer {
  std::function<std::vector<int32_t>(const std::string& text, bool add_special)> tokenize;
  std::function<std::string(const std::vector<int32_t>&)> detokenize;
  int32_t bos = -1;
  bool add_bos = false;
  // Fill-in-the-middle tokens (-1 when the vocabulary has none).
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_rep = -1, fim_sep = -1;
};
struct NativePlan {
  std::vector<json> requests;             // one per prompt, for loom::api::submit_generation (endpoint "completion")
  std::vector<std::string> prompt_texts;  // each prompt's text ("prompt" of the final object)
  loom::api::GenerationOptions options;
  bool stream = false;
  bool return_tokens = false;
  bool post_sampling_probs = false;
};
NativePlan plan_native(const json& body, int default_max_tokens, const Tokenizer& tok);

// llama-server's /infill: input_prefix, input_suffix (strings or mixed prompts), input_extra
// ([{"filename", "text"}], repository-level context), prompt (a string, after the prefix), and the
// /completion fields. The prompt is laid out as llama-server does: [FIM_REP]myproject\n, each extra
// chunk behind [FIM_SEP]filename\n (or a "--- snippet ---" separator without FIM_SEP), the last
// [FIM_SEP]filename\n, then [BOS][FIM_PRE]prefix prompt[FIM_SUF]suffix[FIM_MID]; the prefix keeps its
// last 3/4 of n_batch tokens, the suffix what is left of a quarter, the extra context what n_ctx
// leaves after n_batch and twice n_predict. 501 when the vocabulary lacks FIM_PRE/SUF/MID.
NativePlan plan_infill(const json& body, int default_max_tokens, const Tokenizer& tok, int n_ctx, int n_batch);

// /tokenize: content, add_special, parse_special, with_pieces.
struct TokenizePlan {
  std::string content;
  bool add_special = false, parse_special = true, with_pieces = false;
};
TokenizePlan plan_tokenize(const json& body);

// /detokenize: tokens (ids in [0, n_vocab)).
std::vector<int32_t> plan_detokenize(const json& body, int32_t n_vocab);

// /apply-template: messages, tools, chat_template_kwargs, add_generation_prompt -> the request for
// loom_chat_format, whose "prompt" is what a chat completion of the same body would be given.
json plan_apply_template(const json& body);

}  // namespace loom::server
