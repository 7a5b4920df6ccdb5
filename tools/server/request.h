// Request bodies -> requests for every endpoint that reads one (/v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/rerank, /tokenize, /detokenize, /apply-template): the
// server's side of serve/request_json (which the C API shares), with no HTTP and no scheduler, so
// that it can be tested and fuzzed alone (tests/fuzz/fuzz_server_request). Errors are thrown as HttpError
// (400 naming the field, or the chat layer's status mapped by http_error); nothing else escapes
// for any body.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/chat_request.h"
#include "json_fields.h"
#include "model/model.h"
#include "serve/request_json.h"
#include "serve/scheduler.h"

namespace loom::server {

// What parsing a request needs from the running server.
struct RequestEnv {
  const Model& model;
  const chat::ChatTemplate& tmpl;
  int n_predict = -1;  // max_tokens when a request gives none
};

// Status from the scheduler or the chat layer -> HTTP.
HttpError http_error(const Status& st);

// /v1/chat/completions: the rendered and tokenized prompt in gen, how to parse the output.
struct ParsedChat {
  serve::GenerateRequest gen;
  chat::ToolCallFormat format = chat::ToolCallFormat::kNone;
  chat::ParseOptions parse_options;
  std::vector<std::string> triggers;  // text that starts a tool call: streamed up to it only
};
ParsedChat parse_chat_request(const json& body, const RequestEnv& env, uint64_t id_seed = 0);

// /v1/completions: one prompt per choice group (a string, token ids, or an array of either), and
// with echo each prompt's text as sent (a string's own text, token ids detokenized).
struct ParsedCompletion {
  serve::GenerateRequest gen;
  std::vector<std::vector<int32_t>> prompts;
  bool echo = false;
  std::vector<std::string> echo_texts;
};
ParsedCompletion parse_completion_request(const json& body, const RequestEnv& env);

// /v1/embeddings (and llama.cpp's /embedding): `input` or `content` (a string, token ids, or an
// array of either), encoding_format float|base64, normalize.
struct ParsedEmbeddings {
  std::vector<std::vector<int32_t>> inputs;
  bool base64 = false;
  bool normalize = true;
};
ParsedEmbeddings parse_embeddings_request(const json& body, const Vocab& vocab);

// /v1/rerank: query, documents (1..2048 strings), top_n, return_documents.
struct ParsedRerank {
  std::vector<std::vector<int32_t>> inputs;  // one (query, document) input per document
  std::vector<std::string> texts;            // the documents' texts
  int top_n = 0;
  bool return_documents = false;
};
ParsedRerank parse_rerank_request(const json& body, const Vocab& vocab);

// /tokenize: content, add_special, parse_special, with_pieces.
struct ParsedTokenize {
  std::string content;
  bool add_special = false, parse_special = true, with_pieces = false;
};
ParsedTokenize parse_tokenize_request(const json& body);

// /detokenize: tokens (ids in the vocabulary).
std::vector<int32_t> parse_detokenize_request(const json& body, const Vocab& vocab);

// /apply-template: messages, tools, chat_template_kwargs, add_generation_prompt.
chat::ChatInputs parse_apply_template_request(const json& body);

}  // namespace loom::server
