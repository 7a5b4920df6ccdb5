// Request bodies -> scheduler requests: the part of the OpenAI endpoints that reads JSON, with no
// HTTP and no scheduler, so that it can be tested and fuzzed alone (tests/fuzz/fuzz_server_request).
// Errors are thrown as HttpError (400 naming the field, or the chat layer's status mapped by
// http_error); nothing else escapes for any body.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "chat/chat_request.h"
#include "json_fields.h"
#include "model/model.h"
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

// Sampling parameters, lengths, stops, logprobs and grammars of /v1/chat/completions (chat) and
// /v1/completions into r.
void parse_generation(const Fields& f, serve::GenerateRequest& r, bool chat, const RequestEnv& env);

// /v1/chat/completions: the rendered and tokenized prompt in gen, how to parse the output in prepared.
struct ParsedChat {
  serve::GenerateRequest gen;
  chat::PreparedChat prepared;
};
ParsedChat parse_chat_request(const json& body, const RequestEnv& env);

// /v1/completions: one prompt per choice group (a string, token ids, or an array of either).
struct ParsedCompletion {
  serve::GenerateRequest gen;
  std::vector<std::vector<int32_t>> prompts;
};
ParsedCompletion parse_completion_request(const json& body, const RequestEnv& env);

}  // namespace loom::server
